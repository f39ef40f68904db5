//! Strategic merge patch: the patches kubectl sends on re-apply and edit (with
//! `$setElementOrder`, `$patch: delete`, `$retainKeys`, `$deleteFromPrimitiveList`), the
//! per-kind merge keys, and malformed or hostile patches.

use litek8s::kube::patch::{apply_strategic_merge_patch, PatchError, MAX_DEPTH};
use litek8s::kube::resources::{self, ResourceInfo};
use serde_json::{json, Value};

#[derive(Debug)]
enum Want {
    Ok(Value),
    Malformed,
    NotApplicable,
}

fn info(plural: &str) -> &'static ResourceInfo {
    match resources::find("", "v1", plural) {
        Some(info) => info,
        None => panic!("no resource {plural}"),
    }
}

/// A Deployment entry of the test's own: the patch functions read only these fields.
static DEPLOYMENT: ResourceInfo = ResourceInfo {
    group: "apps",
    version: "v1",
    kind: "Deployment",
    plural: "deployments",
    singular: "deployment",
    short_names: &["deploy"],
    categories: &["all"],
    namespaced: true,
    has_status: true,
    tracks_generation: true,
    selectable_fields: &[],
    has_scale: false,
};

fn run(cases: &[(&str, &ResourceInfo, Value, Value, Want)]) {
    for (name, info, target, patch, want) in cases {
        let got = apply_strategic_merge_patch(info, target, patch);
        match (want, &got) {
            (Want::Ok(w), Ok(g)) => assert_eq!(g, w, "{name}"),
            (Want::Malformed, Err(PatchError::Malformed(_))) => {}
            (Want::NotApplicable, Err(PatchError::NotApplicable(_))) => {}
            _ => panic!("{name}: wanted {want:?}, got {got:?}"),
        }
    }
}

fn pod() -> Value {
    json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": "web",
            "namespace": "default",
            "labels": {"app": "web", "tier": "front"},
            "annotations": {"kubectl.kubernetes.io/last-applied-configuration": "old"},
            "finalizers": ["a.example/x"]
        },
        "spec": {
            "containers": [
                {
                    "name": "app",
                    "image": "nginx:1.25",
                    "ports": [{"containerPort": 80, "protocol": "TCP"}],
                    "env": [{"name": "A", "value": "1"}, {"name": "B", "value": "2"}],
                    "volumeMounts": [{"name": "data", "mountPath": "/data"}],
                    "terminationMessagePath": "/dev/termination-log"
                },
                {"name": "sidecar", "image": "busybox"}
            ],
            "volumes": [
                {"name": "data", "emptyDir": {}},
                {"name": "cfg", "configMap": {"name": "c1"}}
            ],
            "tolerations": [{"key": "k", "operator": "Exists"}],
            "restartPolicy": "Always"
        },
        "status": {
            "phase": "Running",
            "conditions": [
                {"type": "PodScheduled", "status": "True"},
                {"type": "Ready", "status": "False"}
            ]
        }
    })
}

/// `pod()` with `f` applied, for expected values.
fn pod_with(f: impl FnOnce(&mut Value)) -> Value {
    let mut p = pod();
    f(&mut p);
    p
}

#[test]
fn kubectl_reapply_patches() {
    let cases: Vec<(&str, &ResourceInfo, Value, Value, Want)> = vec![
        (
            // kubectl apply after changing the image, removing env B and adding env C.
            "pod: changed container, env removed and added",
            info("pods"),
            pod(),
            json!({
                "metadata": {"annotations": {"kubectl.kubernetes.io/last-applied-configuration": "new"}},
                "spec": {
                    "$setElementOrder/containers": [{"name": "app"}, {"name": "sidecar"}],
                    "containers": [{
                        "$setElementOrder/env": [{"name": "A"}, {"name": "C"}],
                        "env": [{"name": "C", "value": "3"}, {"$patch": "delete", "name": "B"}],
                        "image": "nginx:1.27",
                        "name": "app"
                    }]
                }
            }),
            Want::Ok(pod_with(|p| {
                p["metadata"]["annotations"]["kubectl.kubernetes.io/last-applied-configuration"] =
                    json!("new");
                p["spec"]["containers"][0]["image"] = json!("nginx:1.27");
                p["spec"]["containers"][0]["env"] =
                    json!([{"name": "A", "value": "1"}, {"name": "C", "value": "3"}]);
            })),
        ),
        (
            // kubectl apply after adding a container before the existing ones.
            "pod: new container placed by $setElementOrder",
            info("pods"),
            pod(),
            json!({"spec": {
                "$setElementOrder/containers": [{"name": "init"}, {"name": "app"}, {"name": "sidecar"}],
                "containers": [{"name": "init", "image": "alpine"}]
            }}),
            Want::Ok(pod_with(|p| {
                let containers = p["spec"]["containers"].as_array_mut().map(std::mem::take);
                let mut all = vec![json!({"name": "init", "image": "alpine"})];
                all.extend(containers.unwrap_or_default());
                p["spec"]["containers"] = Value::Array(all);
            })),
        ),
        (
            // kubectl apply after removing the sidecar container.
            "pod: container removed",
            info("pods"),
            pod(),
            json!({"spec": {
                "$setElementOrder/containers": [{"name": "app"}],
                "containers": [{"$patch": "delete", "name": "sidecar"}]
            }}),
            Want::Ok(pod_with(|p| {
                if let Some(c) = p["spec"]["containers"].as_array_mut() {
                    c.truncate(1);
                }
            })),
        ),
        (
            // Without $setElementOrder, Kubernetes puts new elements before the server's.
            "pod: new env var without order directive goes first",
            info("pods"),
            pod(),
            json!({"spec": {"containers": [{"name": "app", "env": [{"name": "Z", "value": "26"}]}]}}),
            Want::Ok(pod_with(|p| {
                p["spec"]["containers"][0]["env"] = json!([
                    {"name": "Z", "value": "26"},
                    {"name": "A", "value": "1"},
                    {"name": "B", "value": "2"}
                ]);
            })),
        ),
        (
            "pod: env value removed with null, port merged by containerPort",
            info("pods"),
            pod(),
            json!({"spec": {"containers": [{
                "name": "app",
                "env": [{"name": "A", "value": null, "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}],
                "ports": [{"containerPort": 80, "name": "http"}]
            }]}}),
            Want::Ok(pod_with(|p| {
                p["spec"]["containers"][0]["env"][0] =
                    json!({"name": "A", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}});
                p["spec"]["containers"][0]["ports"][0]["name"] = json!("http");
            })),
        ),
        (
            // kubectl apply after switching the data volume from emptyDir to hostPath.
            "pod: $retainKeys clears the old volume source",
            info("pods"),
            pod(),
            json!({"spec": {
                "$setElementOrder/volumes": [{"name": "data"}, {"name": "cfg"}],
                "volumes": [{"$retainKeys": ["hostPath", "name"], "hostPath": {"path": "/srv"}, "name": "data"}]
            }}),
            Want::Ok(pod_with(|p| {
                p["spec"]["volumes"][0] = json!({"name": "data", "hostPath": {"path": "/srv"}});
            })),
        ),
        (
            "pod: labels changed and removed, finalizer added in order",
            info("pods"),
            pod(),
            json!({"metadata": {
                "labels": {"tier": null, "version": "2"},
                "$setElementOrder/finalizers": ["a.example/x", "b.example/y"],
                "finalizers": ["b.example/y"]
            }}),
            Want::Ok(pod_with(|p| {
                p["metadata"]["labels"] = json!({"app": "web", "version": "2"});
                p["metadata"]["finalizers"] = json!(["a.example/x", "b.example/y"]);
            })),
        ),
        (
            "pod: finalizer removed with $deleteFromPrimitiveList",
            info("pods"),
            pod(),
            json!({"metadata": {"$deleteFromPrimitiveList/finalizers": ["a.example/x", "never"]}}),
            Want::Ok(pod_with(|p| p["metadata"]["finalizers"] = json!([]))),
        ),
        (
            "pod: tolerations are replaced",
            info("pods"),
            pod(),
            json!({"spec": {"tolerations": [{"key": "other", "operator": "Exists", "effect": null}]}}),
            Want::Ok(pod_with(|p| {
                p["spec"]["tolerations"] = json!([{"key": "other", "operator": "Exists"}]);
            })),
        ),
        (
            // The kubelet's status patch.
            "pod: status conditions merged by type",
            info("pods"),
            pod(),
            json!({"status": {
                "$setElementOrder/conditions": [{"type": "PodScheduled"}, {"type": "Ready"}, {"type": "Initialized"}],
                "conditions": [{"type": "Ready", "status": "True"}, {"type": "Initialized", "status": "True"}],
                "podIP": "10.0.0.5"
            }}),
            Want::Ok(pod_with(|p| {
                p["status"]["conditions"] = json!([
                    {"type": "PodScheduled", "status": "True"},
                    {"type": "Ready", "status": "True"},
                    {"type": "Initialized", "status": "True"}
                ]);
                p["status"]["podIP"] = json!("10.0.0.5");
            })),
        ),
        (
            "pod: containers replaced with $patch: replace",
            info("pods"),
            pod(),
            json!({"spec": {"containers": [{"name": "only", "image": "x"}, {"$patch": "replace"}]}}),
            Want::Ok(pod_with(|p| {
                p["spec"]["containers"] = json!([{"name": "only", "image": "x"}]);
            })),
        ),
        (
            "pod: labels replaced with $patch: replace",
            info("pods"),
            pod(),
            json!({"metadata": {"labels": {"$patch": "replace", "only": "1", "gone": null}}}),
            Want::Ok(pod_with(|p| p["metadata"]["labels"] = json!({"only": "1"}))),
        ),
        (
            "pod: map deleted with $patch: delete",
            info("pods"),
            pod(),
            json!({"metadata": {"annotations": {"$patch": "delete"}}, "spec": {"securityContext": {"$patch": "delete"}}}),
            Want::Ok(pod_with(|p| {
                if let Some(m) = p["metadata"].as_object_mut() {
                    m.shift_remove("annotations");
                }
            })),
        ),
        (
            "pod: explicit $patch: merge is a plain merge",
            info("pods"),
            pod(),
            json!({"metadata": {"labels": {"$patch": "merge", "x": "y"}}}),
            Want::Ok(pod_with(|p| p["metadata"]["labels"]["x"] = json!("y"))),
        ),
        (
            "pod: new nested values are cleaned of nulls and directives",
            info("pods"),
            pod(),
            json!({"spec": {
                "initContainers": [{"name": "i", "env": [{"name": "X", "value": null}, {"name": "D", "$patch": "delete"}]}],
                "affinity": {"nodeAffinity": null, "podAffinity": {"x": null}}
            }}),
            Want::Ok(pod_with(|p| {
                p["spec"]["initContainers"] = json!([{"name": "i", "env": [{"name": "X"}]}]);
                p["spec"]["affinity"] = json!({"podAffinity": {}});
            })),
        ),
        (
            "pod: whole object deleted by a top-level $patch: delete",
            info("pods"),
            pod(),
            json!({"$patch": "delete"}),
            Want::Ok(json!({})),
        ),
        (
            "configmap: kubectl re-apply with a removed and an added key",
            info("configmaps"),
            json!({"metadata": {"name": "c", "annotations": {"l": "old"}}, "data": {"a": "1", "b": "2"}}),
            json!({"data": {"b": null, "c": "3"}, "metadata": {"annotations": {"l": "new"}}}),
            Want::Ok(
                json!({"metadata": {"name": "c", "annotations": {"l": "new"}}, "data": {"a": "1", "c": "3"}}),
            ),
        ),
        (
            "service: ports merged by port, one deleted, one added",
            info("services"),
            json!({"spec": {"type": "NodePort", "ports": [
                {"name": "http", "port": 80, "targetPort": 8080, "protocol": "TCP", "nodePort": 30080},
                {"name": "https", "port": 443, "targetPort": 8443, "protocol": "TCP", "nodePort": 30443}
            ]}}),
            json!({"spec": {
                "$setElementOrder/ports": [{"port": 443}, {"port": 9090}],
                "ports": [{"name": "metrics", "port": 9090, "targetPort": 9090}, {"$patch": "delete", "port": 80}]
            }}),
            Want::Ok(json!({"spec": {"type": "NodePort", "ports": [
                {"name": "https", "port": 443, "targetPort": 8443, "protocol": "TCP", "nodePort": 30443},
                {"name": "metrics", "port": 9090, "targetPort": 9090}
            ]}})),
        ),
        (
            "endpoints: subsets replaced",
            info("endpoints"),
            json!({"subsets": [{"addresses": [{"ip": "10.0.0.1"}], "ports": [{"port": 80}]}]}),
            json!({"subsets": [{"addresses": [{"ip": "10.0.0.2"}]}]}),
            Want::Ok(json!({"subsets": [{"addresses": [{"ip": "10.0.0.2"}]}]})),
        ),
        (
            "node: status addresses merged by type",
            info("nodes"),
            json!({"status": {"addresses": [{"type": "InternalIP", "address": "10.0.0.1"}, {"type": "Hostname", "address": "n1"}]}}),
            json!({"status": {
                "$setElementOrder/addresses": [{"type": "InternalIP"}, {"type": "Hostname"}],
                "addresses": [{"type": "InternalIP", "address": "10.0.0.9"}]
            }}),
            Want::Ok(
                json!({"status": {"addresses": [{"type": "InternalIP", "address": "10.0.0.9"}, {"type": "Hostname", "address": "n1"}]}}),
            ),
        ),
        (
            "any kind: ownerReferences merged by uid",
            info("configmaps"),
            json!({"metadata": {"ownerReferences": [{"uid": "u1", "kind": "Pod", "name": "a"}]}}),
            json!({"metadata": {
                "$setElementOrder/ownerReferences": [{"uid": "u1"}, {"uid": "u2"}],
                "ownerReferences": [{"uid": "u1", "controller": true}, {"uid": "u2", "kind": "Pod", "name": "b"}]
            }}),
            Want::Ok(json!({"metadata": {"ownerReferences": [
                {"uid": "u1", "kind": "Pod", "name": "a", "controller": true},
                {"uid": "u2", "kind": "Pod", "name": "b"}
            ]}})),
        ),
        (
            "pod spec: hostAliases by ip, imagePullSecrets by name, volumeMounts by mountPath",
            info("pods"),
            json!({"spec": {
                "hostAliases": [{"ip": "10.0.0.1", "hostnames": ["a"]}],
                "imagePullSecrets": [{"name": "reg1"}],
                "containers": [{"name": "c", "volumeMounts": [{"name": "v", "mountPath": "/v"}]}]
            }}),
            json!({"spec": {
                "$setElementOrder/hostAliases": [{"ip": "10.0.0.1"}, {"ip": "10.0.0.2"}],
                "hostAliases": [{"ip": "10.0.0.1", "hostnames": ["b"]}, {"ip": "10.0.0.2", "hostnames": ["c"]}],
                "$setElementOrder/imagePullSecrets": [{"name": "reg1"}, {"name": "reg2"}],
                "imagePullSecrets": [{"name": "reg2"}],
                "containers": [{"name": "c", "volumeMounts": [{"mountPath": "/v", "readOnly": true}]}]
            }}),
            Want::Ok(json!({"spec": {
                "hostAliases": [{"ip": "10.0.0.1", "hostnames": ["b"]}, {"ip": "10.0.0.2", "hostnames": ["c"]}],
                "imagePullSecrets": [{"name": "reg1"}, {"name": "reg2"}],
                "containers": [{"name": "c", "volumeMounts": [{"name": "v", "mountPath": "/v", "readOnly": true}]}]
            }})),
        ),
        (
            "deployment: pod template containers merged by name",
            &DEPLOYMENT,
            json!({"spec": {"replicas": 1, "template": {
                "metadata": {"labels": {"app": "w"}},
                "spec": {"containers": [{"name": "a", "image": "x:1", "env": [{"name": "E", "value": "1"}]}, {"name": "b", "image": "y"}]}
            }}}),
            json!({"spec": {"replicas": 3, "template": {"spec": {
                "$setElementOrder/containers": [{"name": "a"}, {"name": "b"}],
                "containers": [{"name": "a", "image": "x:2"}]
            }}}}),
            Want::Ok(json!({"spec": {"replicas": 3, "template": {
                "metadata": {"labels": {"app": "w"}},
                "spec": {"containers": [{"name": "a", "image": "x:2", "env": [{"name": "E", "value": "1"}]}, {"name": "b", "image": "y"}]}
            }}})),
        ),
        (
            // Go decodes both to float64; here the patch's number is kept as sent.
            "merge keys compare numbers by value",
            info("pods"),
            json!({"spec": {"containers": [{"name": "c", "ports": [{"containerPort": 80}]}]}}),
            json!({"spec": {"containers": [{"name": "c", "ports": [{"containerPort": 80.0, "name": "h"}]}]}}),
            Want::Ok(
                json!({"spec": {"containers": [{"name": "c", "ports": [{"containerPort": 80.0, "name": "h"}]}]}}),
            ),
        ),
    ];
    run(&cases);
}

/// `n` nested single-key objects around `leaf`.
fn nested(n: usize, leaf: Value) -> Value {
    (0..n).fold(leaf, |inner, _| json!({ "a": inner }))
}

#[test]
fn wrong_types_and_hostile_patches() {
    let pods = info("pods");
    let cases: Vec<(&str, &ResourceInfo, Value, Value, Want)> = vec![
        (
            "patch is a list",
            pods,
            pod(),
            json!([{"op": "add"}]),
            Want::Malformed,
        ),
        (
            "patch is a string",
            pods,
            pod(),
            json!("x"),
            Want::Malformed,
        ),
        ("patch is null", pods, pod(), json!(null), Want::Malformed),
        (
            "target is not an object",
            pods,
            json!([1]),
            json!({}),
            Want::NotApplicable,
        ),
        (
            "too deep",
            pods,
            pod(),
            nested(MAX_DEPTH + 1, json!(1)),
            Want::Malformed,
        ),
        (
            "deep but allowed",
            pods,
            json!({}),
            nested(MAX_DEPTH, json!(1)),
            Want::Ok(nested(MAX_DEPTH, json!(1))),
        ),
        (
            "a list where the target has a map: the patch wins",
            pods,
            json!({"spec": {"containers": {"name": "odd"}}}),
            json!({"spec": {"containers": [{"name": "c", "env": [{"name": "X", "value": null}]}]}}),
            Want::Ok(json!({"spec": {"containers": [{"name": "c", "env": [{"name": "X"}]}]}})),
        ),
        (
            "a map where the target has a list: the patch wins",
            pods,
            json!({"spec": {"containers": [{"name": "c"}]}}),
            json!({"spec": {"containers": {"name": "odd", "gone": null}}}),
            Want::Ok(json!({"spec": {"containers": {"name": "odd"}}})),
        ),
        (
            "unknown $patch",
            pods,
            pod(),
            json!({"spec": {"$patch": "explode"}}),
            Want::Malformed,
        ),
        (
            "non-string $patch",
            pods,
            pod(),
            json!({"spec": {"$patch": 1}}),
            Want::Malformed,
        ),
        (
            "unknown $patch in a list element",
            pods,
            pod(),
            json!({"spec": {"containers": [{"name": "app", "$patch": "explode"}]}}),
            Want::Malformed,
        ),
        (
            "merge-list element without its merge key",
            pods,
            pod(),
            json!({"spec": {"containers": [{"image": "x"}]}}),
            Want::Malformed,
        ),
        (
            "$patch: delete without the merge key",
            pods,
            pod(),
            json!({"spec": {"containers": [{"$patch": "delete"}]}}),
            Want::Malformed,
        ),
        (
            "$patch: delete in a list of scalars",
            pods,
            pod(),
            json!({"metadata": {"finalizers": [{"$patch": "delete"}]}}),
            Want::Malformed,
        ),
        (
            "$retainKeys not a list",
            pods,
            pod(),
            json!({"spec": {"volumes": [{"name": "data", "$retainKeys": "name"}]}}),
            Want::Malformed,
        ),
        (
            "$retainKeys missing a field the patch sets",
            pods,
            pod(),
            json!({"spec": {"volumes": [{"name": "data", "$retainKeys": ["name"], "hostPath": {"path": "/"}}]}}),
            Want::Malformed,
        ),
        (
            "$setElementOrder not a list",
            pods,
            pod(),
            json!({"spec": {"$setElementOrder/containers": {"name": "app"}}}),
            Want::Malformed,
        ),
        (
            "$setElementOrder without a field",
            pods,
            pod(),
            json!({"spec": {"$setElementOrder": []}}),
            Want::Malformed,
        ),
        (
            "$setElementOrder contradicting the patch list",
            pods,
            pod(),
            json!({"spec": {
                "$setElementOrder/containers": [{"name": "app"}, {"name": "sidecar"}],
                "containers": [{"name": "sidecar", "image": "a"}, {"name": "app", "image": "b"}]
            }}),
            Want::Malformed,
        ),
        (
            "$setElementOrder with a non-list field",
            pods,
            pod(),
            json!({"spec": {"$setElementOrder/containers": [{"name": "app"}], "containers": {"name": "app"}}}),
            Want::Malformed,
        ),
        (
            "$deleteFromPrimitiveList not a list",
            pods,
            pod(),
            json!({"metadata": {"$deleteFromPrimitiveList/finalizers": "a.example/x"}}),
            Want::Malformed,
        ),
        (
            "$deleteFromPrimitiveList without a field",
            pods,
            pod(),
            json!({"metadata": {"$deleteFromPrimitiveList": ["x"]}}),
            Want::Malformed,
        ),
        (
            "mixed element types in a merge list",
            pods,
            pod(),
            json!({"spec": {"containers": ["app"]}}),
            Want::NotApplicable,
        ),
        (
            "list of lists in a merge list",
            pods,
            pod(),
            json!({"metadata": {"finalizers": [["x"]]}}),
            Want::NotApplicable,
        ),
        (
            "objects in a primitive merge list",
            pods,
            json!({"metadata": {"finalizers": []}}),
            json!({"metadata": {"finalizers": [{"a": 1}]}}),
            Want::NotApplicable,
        ),
    ];
    run(&cases);
}

#[test]
fn large_lists_merge_by_key() {
    // Thousands of env vars: every one updated, half removed, some added; checks the result,
    // and keeps the hash-based merge honest about duplicates and order.
    let n = 20_000;
    let original: Vec<Value> = (0..n)
        .map(|i| json!({"name": format!("V{i}"), "value": "old"}))
        .collect();
    let mut patch_env: Vec<Value> = (0..n)
        .filter(|i| i % 2 == 0)
        .map(|i| json!({"name": format!("V{i}"), "value": "new"}))
        .collect();
    patch_env.extend(
        (0..n)
            .filter(|i| i % 2 == 1)
            .map(|i| json!({"$patch": "delete", "name": format!("V{i}")})),
    );
    let order: Vec<Value> = (0..n)
        .filter(|i| i % 2 == 0)
        .map(|i| json!({"name": format!("V{i}")}))
        .collect();
    let target = json!({"spec": {"containers": [{"name": "c", "env": original}]}});
    let patch = json!({"spec": {"containers": [{"name": "c", "$setElementOrder/env": order, "env": patch_env}]}});
    let want: Vec<Value> = (0..n)
        .filter(|i| i % 2 == 0)
        .map(|i| json!({"name": format!("V{i}"), "value": "new"}))
        .collect();
    let got = apply_strategic_merge_patch(info("pods"), &target, &patch);
    assert_eq!(
        got,
        Ok(json!({"spec": {"containers": [{"name": "c", "env": want}]}}))
    );
}

/// The patch-demo Deployment of the Kubernetes task page "Update API Objects in Place Using
/// kubectl patch".
fn patch_demo() -> Value {
    json!({
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "patch-demo"},
        "spec": {
            "replicas": 2,
            "selector": {"matchLabels": {"app": "nginx"}},
            "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": "30%", "maxUnavailable": "25%"}},
            "template": {
                "metadata": {"labels": {"app": "nginx"}, "finalizers": ["a", "b", "c"]},
                "spec": {
                    "containers": [{"name": "patch-demo-ctr", "image": "nginx"}],
                    "tolerations": [{"effect": "NoSchedule", "key": "dedicated", "value": "test-team"}]
                }
            }
        }
    })
}

fn demo_with(f: impl FnOnce(&mut Value)) -> Value {
    let mut d = patch_demo();
    f(&mut d);
    d
}

/// Cases from the Kubernetes documentation: the kubectl patch task page (containers,
/// tolerations, retainKeys) and the strategic merge patch design document (`$patch`
/// directives, `$deleteFromPrimitiveList`, `$setElementOrder`), on a workload's pod template.
#[test]
fn documented_examples() {
    let cases: Vec<(&str, &ResourceInfo, Value, Value, Want)> = vec![
        (
            "task page: patch-file-containers adds a container, merged by name",
            &DEPLOYMENT,
            patch_demo(),
            json!({"spec": {"template": {"spec": {"containers": [{"name": "patch-demo-ctr-2", "image": "redis"}]}}}}),
            Want::Ok(demo_with(|d| {
                d["spec"]["template"]["spec"]["containers"] = json!([
                    {"name": "patch-demo-ctr-2", "image": "redis"},
                    {"name": "patch-demo-ctr", "image": "nginx"}
                ]);
            })),
        ),
        (
            "task page: patch-file-tolerations replaces the list (no patch strategy)",
            &DEPLOYMENT,
            patch_demo(),
            json!({"spec": {"template": {"spec": {"tolerations": [{"effect": "NoSchedule", "key": "disktype", "value": "ssd"}]}}}}),
            Want::Ok(demo_with(|d| {
                d["spec"]["template"]["spec"]["tolerations"] =
                    json!([{"effect": "NoSchedule", "key": "disktype", "value": "ssd"}]);
            })),
        ),
        (
            "task page: $retainKeys switches the strategy to Recreate",
            &DEPLOYMENT,
            patch_demo(),
            json!({"spec": {"strategy": {"$retainKeys": ["type"], "type": "Recreate"}}}),
            Want::Ok(demo_with(|d| {
                d["spec"]["strategy"] = json!({"type": "Recreate"})
            })),
        ),
        (
            "task page: without $retainKeys the old rollingUpdate stays",
            &DEPLOYMENT,
            patch_demo(),
            json!({"spec": {"strategy": {"type": "Recreate"}}}),
            Want::Ok(demo_with(|d| {
                d["spec"]["strategy"]["type"] = json!("Recreate")
            })),
        ),
        (
            "design doc: $patch: delete removes a list element by merge key",
            &DEPLOYMENT,
            patch_demo(),
            json!({"spec": {"template": {"spec": {"containers": [{"name": "patch-demo-ctr", "$patch": "delete"}]}}}}),
            Want::Ok(demo_with(|d| {
                d["spec"]["template"]["spec"]["containers"] = json!([])
            })),
        ),
        (
            "design doc: $patch: replace on a list",
            &DEPLOYMENT,
            patch_demo(),
            json!({"spec": {"template": {"spec": {"containers": [{"name": "only", "image": "busybox"}, {"$patch": "replace"}]}}}}),
            Want::Ok(demo_with(|d| {
                d["spec"]["template"]["spec"]["containers"] =
                    json!([{"name": "only", "image": "busybox"}]);
            })),
        ),
        (
            "design doc: $patch: replace on a map",
            &DEPLOYMENT,
            patch_demo(),
            json!({"spec": {"selector": {"$patch": "replace", "matchLabels": {"app": "web"}}}}),
            Want::Ok(demo_with(|d| {
                d["spec"]["selector"] = json!({"matchLabels": {"app": "web"}})
            })),
        ),
        (
            "design doc: $patch: delete on a map",
            &DEPLOYMENT,
            patch_demo(),
            json!({"spec": {"strategy": {"$patch": "delete"}}}),
            Want::Ok(demo_with(|d| {
                if let Some(spec) = d["spec"].as_object_mut() {
                    spec.shift_remove("strategy");
                }
            })),
        ),
        (
            "design doc: $deleteFromPrimitiveList on finalizers",
            &DEPLOYMENT,
            patch_demo(),
            json!({"spec": {"template": {"metadata": {"$deleteFromPrimitiveList/finalizers": ["b"]}}}}),
            Want::Ok(demo_with(|d| {
                d["spec"]["template"]["metadata"]["finalizers"] = json!(["a", "c"])
            })),
        ),
        (
            "design doc: $setElementOrder orders a merged primitive list",
            &DEPLOYMENT,
            patch_demo(),
            json!({"spec": {"template": {"metadata": {
                "$setElementOrder/finalizers": ["c", "d", "a", "b"],
                "finalizers": ["d"]
            }}}}),
            Want::Ok(demo_with(|d| {
                d["spec"]["template"]["metadata"]["finalizers"] = json!(["c", "d", "a", "b"]);
            })),
        ),
        (
            "design doc: $setElementOrder orders merged containers",
            &DEPLOYMENT,
            demo_with(|d| {
                d["spec"]["template"]["spec"]["containers"] =
                    json!([{"name": "a", "image": "1"}, {"name": "b", "image": "2"}]);
            }),
            json!({"spec": {"template": {"spec": {
                "$setElementOrder/containers": [{"name": "b"}, {"name": "c"}, {"name": "a"}],
                "containers": [{"name": "c", "image": "3"}]
            }}}}),
            Want::Ok(demo_with(|d| {
                d["spec"]["template"]["spec"]["containers"] = json!([
                    {"name": "b", "image": "2"}, {"name": "c", "image": "3"}, {"name": "a", "image": "1"}
                ]);
            })),
        ),
        (
            "a malformed directive is a bad request",
            &DEPLOYMENT,
            patch_demo(),
            json!({"spec": {"strategy": {"$patch": "explode"}}}),
            Want::Malformed,
        ),
    ];
    run(&cases);
}

/// A kind outside the built-in groups (a custom resource) has no merge metadata: strategic
/// merge is refused, which the API answers with 415.
#[test]
fn schemaless_kinds_refuse_strategic_merge() {
    static WIDGET: ResourceInfo = ResourceInfo {
        group: "example.com",
        version: "v1",
        kind: "Widget",
        plural: "widgets",
        singular: "widget",
        short_names: &[],
        categories: &[],
        namespaced: true,
        has_status: false,
        tracks_generation: true,
        selectable_fields: &[],
        has_scale: false,
    };
    let got =
        apply_strategic_merge_patch(&WIDGET, &json!({"spec": {}}), &json!({"spec": {"a": 1}}));
    assert!(matches!(got, Err(PatchError::Unsupported(_))), "{got:?}");
}
