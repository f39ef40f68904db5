//! The workload and cluster kinds against the real binary: each is created from a minimal
//! manifest and read back with kube-apiserver's defaults; the `scale` and `status`
//! subresources; a table of invalid writes with their codes and causes; and ClusterIPs and
//! NodePorts staying unique across 1,000 Services created concurrently, then free for reuse
//! once deleted.

mod support;

use std::collections::HashSet;

use serde_json::{json, Value};
use support::{Api, Resp, Server};

const NS: &str = "default";

async fn call(api: &Api, method: &str, path: &str, ctype: Option<&str>, body: &Value) -> Resp {
    let bytes = if body.is_null() {
        Vec::new()
    } else {
        serde_json::to_vec(body).expect("serialize")
    };
    api.request(method, path, ctype, bytes)
        .await
        .unwrap_or_else(|e| panic!("{method} {path}: {e}"))
}

async fn post(api: &Api, path: &str, body: Value) -> Resp {
    call(api, "POST", path, Some("application/json"), &body).await
}

/// GETs `get_path`, changes the object with `edit` and PUTs it to `put_path`, again after a
/// conflict: the control plane writes the same objects (a Deployment's status and revision
/// annotation) while the test runs.
async fn read_modify_write(
    api: &Api,
    get_path: &str,
    put_path: &str,
    edit: impl Fn(&mut Value),
) -> Resp {
    for _ in 0..50 {
        let mut object = call(api, "GET", get_path, None, &Value::Null).await.json();
        edit(&mut object);
        let put = call(api, "PUT", put_path, Some("application/json"), &object).await;
        if put.status != 409 {
            return put;
        }
    }
    panic!("PUT {put_path}: still conflicting after 50 attempts");
}

fn template(labels: Value) -> Value {
    json!({"metadata": {"labels": labels},
           "spec": {"containers": [{"name": "c", "image": "nginx:1.25"}]}})
}

/// A collection path, a minimal manifest, and (pointer, expected value) after defaulting.
type KindCase = (String, Value, Vec<(&'static str, Value)>);

/// An invalid write: name, method, path, body, expected code and the fields of the causes.
type InvalidCase = (
    &'static str,
    &'static str,
    String,
    Value,
    u16,
    Vec<&'static str>,
);

fn kinds() -> Vec<KindCase> {
    let apps = format!("/apis/apps/v1/namespaces/{NS}");
    let core = format!("/api/v1/namespaces/{NS}");
    let sel = json!({"matchLabels": {"app": "w"}});
    vec![
        (
            format!("{apps}/deployments"),
            json!({"metadata": {"name": "d"}, "spec": {"selector": sel, "template": template(json!({"app": "w"}))}}),
            vec![
                ("/spec/replicas", json!(1)),
                ("/spec/strategy/rollingUpdate/maxSurge", json!("25%")),
                ("/spec/revisionHistoryLimit", json!(10)),
                ("/spec/progressDeadlineSeconds", json!(600)),
                ("/spec/template/spec/dnsPolicy", json!("ClusterFirst")),
                (
                    "/spec/template/spec/containers/0/imagePullPolicy",
                    json!("IfNotPresent"),
                ),
                ("/metadata/generation", json!(1)),
            ],
        ),
        (
            format!("{apps}/replicasets"),
            json!({"metadata": {"name": "rs"}, "spec": {"selector": sel, "template": template(json!({"app": "w"}))}}),
            vec![("/spec/replicas", json!(1))],
        ),
        (
            format!("{apps}/daemonsets"),
            json!({"metadata": {"name": "ds"}, "spec": {"selector": sel, "template": template(json!({"app": "w"}))}}),
            vec![
                ("/spec/updateStrategy/type", json!("RollingUpdate")),
                (
                    "/spec/updateStrategy/rollingUpdate/maxUnavailable",
                    json!(1),
                ),
                ("/spec/revisionHistoryLimit", json!(10)),
            ],
        ),
        (
            format!("{apps}/statefulsets"),
            json!({"metadata": {"name": "sts"}, "spec": {"selector": sel, "serviceName": "s", "template": template(json!({"app": "w"}))}}),
            vec![
                ("/spec/podManagementPolicy", json!("OrderedReady")),
                ("/spec/updateStrategy/rollingUpdate/partition", json!(0)),
                (
                    "/spec/persistentVolumeClaimRetentionPolicy/whenScaled",
                    json!("Retain"),
                ),
            ],
        ),
        (
            format!("{apps}/controllerrevisions"),
            json!({"metadata": {"name": "cr"}, "revision": 1}),
            vec![("/revision", json!(1))],
        ),
        (
            format!("{core}/replicationcontrollers"),
            json!({"metadata": {"name": "rc"}, "spec": {"template": template(json!({"app": "w"}))}}),
            vec![
                ("/spec/replicas", json!(1)),
                ("/spec/selector", json!({"app": "w"})),
            ],
        ),
        (
            format!("/apis/batch/v1/namespaces/{NS}/jobs"),
            json!({"metadata": {"name": "j"}, "spec": {"template": {"spec": {"restartPolicy": "Never",
             "containers": [{"name": "c", "image": "busybox"}]}}}}),
            vec![
                ("/spec/completions", json!(1)),
                ("/spec/parallelism", json!(1)),
                ("/spec/backoffLimit", json!(6)),
                ("/spec/completionMode", json!("NonIndexed")),
                ("/spec/suspend", json!(false)),
                (
                    "/spec/template/metadata/labels/batch.kubernetes.io~1job-name",
                    json!("j"),
                ),
            ],
        ),
        (
            format!("/apis/batch/v1/namespaces/{NS}/cronjobs"),
            json!({"metadata": {"name": "cj"}, "spec": {"schedule": "*/5 * * * *", "jobTemplate": {"spec": {
             "template": {"spec": {"restartPolicy": "OnFailure", "containers": [{"name": "c", "image": "busybox"}]}}}}}}),
            vec![
                ("/spec/concurrencyPolicy", json!("Allow")),
                ("/spec/successfulJobsHistoryLimit", json!(3)),
                ("/spec/failedJobsHistoryLimit", json!(1)),
                ("/spec/suspend", json!(false)),
            ],
        ),
        (
            format!("/apis/policy/v1/namespaces/{NS}/poddisruptionbudgets"),
            json!({"metadata": {"name": "pdb"}, "spec": {"minAvailable": 1, "selector": sel}}),
            vec![("/spec/minAvailable", json!(1))],
        ),
        (
            "/apis/scheduling.k8s.io/v1/priorityclasses".into(),
            json!({"metadata": {"name": "high"}, "value": 1000}),
            vec![("/preemptionPolicy", json!("PreemptLowerPriority"))],
        ),
        (
            format!("/apis/networking.k8s.io/v1/namespaces/{NS}/ingresses"),
            json!({"metadata": {"name": "ing"}, "spec": {"defaultBackend": {"service": {"name": "s", "port": {"number": 80}}}}}),
            vec![("/metadata/generation", json!(1))],
        ),
        (
            "/apis/networking.k8s.io/v1/ingressclasses".into(),
            json!({"metadata": {"name": "nginx"}, "spec": {"controller": "k8s.io/ingress-nginx"}}),
            vec![("/spec/controller", json!("k8s.io/ingress-nginx"))],
        ),
        (
            format!("/apis/networking.k8s.io/v1/namespaces/{NS}/networkpolicies"),
            json!({"metadata": {"name": "np"}, "spec": {"podSelector": {}}}),
            vec![("/spec/policyTypes", json!(["Ingress"]))],
        ),
        (
            format!("/apis/rbac.authorization.k8s.io/v1/namespaces/{NS}/roles"),
            json!({"metadata": {"name": "r"}, "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get"]}]}),
            vec![("/rules/0/verbs", json!(["get"]))],
        ),
        (
            format!("/apis/rbac.authorization.k8s.io/v1/namespaces/{NS}/rolebindings"),
            json!({"metadata": {"name": "rb"}, "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "r"},
                "subjects": [{"kind": "User", "name": "jane"}]}),
            vec![("/subjects/0/apiGroup", json!("rbac.authorization.k8s.io"))],
        ),
        (
            "/apis/rbac.authorization.k8s.io/v1/clusterroles".into(),
            json!({"metadata": {"name": "cr"}, "rules": []}),
            vec![("/metadata/name", json!("cr"))],
        ),
        (
            "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings".into(),
            json!({"metadata": {"name": "crb"}, "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "cr"},
                "subjects": [{"kind": "ServiceAccount", "name": "default", "namespace": NS}]}),
            vec![("/subjects/0/namespace", json!(NS))],
        ),
        (
            format!("/apis/autoscaling/v2/namespaces/{NS}/horizontalpodautoscalers"),
            json!({"metadata": {"name": "hpa"}, "spec": {"maxReplicas": 5,
                "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "d"}}}),
            vec![
                ("/spec/minReplicas", json!(1)),
                (
                    "/spec/metrics/0/resource/target/averageUtilization",
                    json!(80),
                ),
            ],
        ),
        (
            "/apis/storage.k8s.io/v1/storageclasses".into(),
            json!({"metadata": {"name": "fast"}, "provisioner": "example.com/fast"}),
            vec![
                ("/reclaimPolicy", json!("Delete")),
                ("/volumeBindingMode", json!("Immediate")),
            ],
        ),
        (
            "/api/v1/persistentvolumes".into(),
            json!({"metadata": {"name": "pv"}, "spec": {"capacity": {"storage": "1Gi"}, "accessModes": ["ReadWriteOnce"],
                "hostPath": {"path": "/tmp/pv"}}}),
            vec![
                ("/spec/persistentVolumeReclaimPolicy", json!("Retain")),
                ("/status/phase", json!("Pending")),
                ("/spec/volumeMode", json!("Filesystem")),
            ],
        ),
        (
            format!("{core}/persistentvolumeclaims"),
            json!({"metadata": {"name": "pvc"}, "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}}),
            vec![
                ("/status/phase", json!("Pending")),
                ("/spec/volumeMode", json!("Filesystem")),
            ],
        ),
        (
            format!("{core}/resourcequotas"),
            json!({"metadata": {"name": "q"}, "spec": {"hard": {"pods": "10"}}, "status": {"used": {"pods": "3"}}}),
            vec![("/spec/hard/pods", json!("10")), ("/status", Value::Null)],
        ),
        (
            format!("{core}/limitranges"),
            json!({"metadata": {"name": "lr"}, "spec": {"limits": [{"type": "Container", "max": {"cpu": "1"}}]}}),
            vec![("/spec/limits/0/type", json!("Container"))],
        ),
        (
            format!("{core}/pods"),
            json!({"metadata": {"name": "p"}, "spec": {"containers": [{"name": "c", "image": "nginx"}]}}),
            vec![
                ("/spec/restartPolicy", json!("Always")),
                ("/spec/schedulerName", json!("default-scheduler")),
                ("/spec/terminationGracePeriodSeconds", json!(30)),
                ("/spec/enableServiceLinks", json!(true)),
                ("/spec/securityContext", json!({})),
                ("/spec/containers/0/imagePullPolicy", json!("Always")),
                (
                    "/spec/containers/0/terminationMessagePath",
                    json!("/dev/termination-log"),
                ),
                ("/spec/containers/0/terminationMessagePolicy", json!("File")),
                ("/status/phase", json!("Pending")),
            ],
        ),
        (
            format!("{core}/services"),
            json!({"metadata": {"name": "np"}, "spec": {"type": "NodePort", "selector": {"app": "w"}, "ports": [{"port": 80}]}}),
            vec![
                ("/spec/sessionAffinity", json!("None")),
                ("/spec/ipFamilies", json!(["IPv4"])),
                ("/spec/ipFamilyPolicy", json!("SingleStack")),
                ("/spec/ports/0/protocol", json!("TCP")),
                ("/spec/ports/0/targetPort", json!(80)),
                ("/spec/externalTrafficPolicy", json!("Cluster")),
                ("/spec/internalTrafficPolicy", json!("Cluster")),
            ],
        ),
    ]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn kinds_defaults_subresources_and_validation() {
    let server = Server::start(&[]);
    let api = server.api();
    let mut failures = Vec::new();
    for (path, manifest, expected) in kinds() {
        let created = post(&api, &path, manifest.clone()).await;
        if created.status != 201 {
            failures.push(format!(
                "POST {path}: {} {}",
                created.status,
                created.text()
            ));
            continue;
        }
        let name = manifest["metadata"]["name"].as_str().unwrap_or("");
        // The create's own answer: what the write stored. A later GET could already show a
        // controller's work (the quota controller fills a ResourceQuota's status).
        let got = created.json();
        for (pointer, want) in expected {
            let value = got.pointer(pointer).cloned().unwrap_or(Value::Null);
            if value != want {
                failures.push(format!("{path}/{name} {pointer}: got {value}, want {want}"));
            }
        }
    }
    // The NodePort Service got a port in range.
    let svc = call(
        &api,
        "GET",
        &format!("/api/v1/namespaces/{NS}/services/np"),
        None,
        &Value::Null,
    )
    .await
    .json();
    let node_port = svc["spec"]["ports"][0]["nodePort"].as_u64().unwrap_or(0);
    assert!((30000..=32767).contains(&node_port), "{svc}");
    assert!(failures.is_empty(), "{}", failures.join("\n"));

    // scale: GET, merge PATCH (what `kubectl scale` sends), PUT, and a negative count.
    let deploy = format!("/apis/apps/v1/namespaces/{NS}/deployments/d");
    let scale = call(&api, "GET", &format!("{deploy}/scale"), None, &Value::Null)
        .await
        .json();
    assert_eq!(scale["kind"], "Scale");
    assert_eq!(scale["apiVersion"], "autoscaling/v1");
    assert_eq!(scale["spec"]["replicas"], 1);
    assert_eq!(scale["status"]["selector"], "app=w");
    let patched = call(
        &api,
        "PATCH",
        &format!("{deploy}/scale"),
        Some("application/merge-patch+json"),
        &json!({"spec": {"replicas": 4}}),
    )
    .await;
    assert_eq!(patched.status, 200, "{}", patched.text());
    assert_eq!(patched.json()["spec"]["replicas"], 4);
    let d = call(&api, "GET", &deploy, None, &Value::Null).await.json();
    assert_eq!(d["spec"]["replicas"], 4);
    assert_eq!(d["metadata"]["generation"], 2);
    let scale_path = format!("{deploy}/scale");
    let put = read_modify_write(&api, &scale_path, &scale_path, |scale| {
        scale["spec"]["replicas"] = json!(2);
    })
    .await;
    assert_eq!(
        (put.status, put.json()["spec"]["replicas"].clone()),
        (200, json!(2)),
        "{}",
        put.text()
    );
    let stale = call(
        &api,
        "PUT",
        &format!("{deploy}/scale"),
        Some("application/json"),
        &patched.json(),
    )
    .await;
    assert_eq!(
        stale.status,
        409,
        "a stale resourceVersion: {}",
        stale.text()
    );
    let negative = call(
        &api,
        "PATCH",
        &format!("{deploy}/scale"),
        Some("application/merge-patch+json"),
        &json!({"spec": {"replicas": -1}}),
    )
    .await;
    assert_eq!(negative.status, 422, "{}", negative.text());
    assert_eq!(
        negative.json()["details"]["causes"][0]["field"],
        "spec.replicas"
    );
    let rc_scale = call(
        &api,
        "GET",
        &format!("/api/v1/namespaces/{NS}/replicationcontrollers/rc/scale"),
        None,
        &Value::Null,
    )
    .await
    .json();
    assert_eq!(rc_scale["status"]["selector"], "app=w");
    let no_scale = call(
        &api,
        "GET",
        &format!("/apis/apps/v1/namespaces/{NS}/daemonsets/ds/scale"),
        None,
        &Value::Null,
    )
    .await;
    assert_eq!(no_scale.status, 404);

    // status: the main resource ignores status, /status ignores everything else.
    let main = read_modify_write(&api, &deploy, &deploy, |d| {
        d["status"] = json!({"replicas": 7, "observedGeneration": 3});
    })
    .await
    .json();
    assert_ne!(main["status"]["replicas"], 7, "{main}");
    let status = read_modify_write(&api, &deploy, &format!("{deploy}/status"), |d| {
        d["status"] = json!({"replicas": 7, "observedGeneration": 3});
        d["spec"]["replicas"] = json!(9);
    })
    .await
    .json();
    assert_eq!(status["status"]["replicas"], 7);
    assert_eq!(status["spec"]["replicas"], 2);

    // A PUT that leaves out defaulted fields gets them back and is no spec change.
    let generation = call(&api, "GET", &deploy, None, &Value::Null).await.json()["metadata"]
        ["generation"]
        .clone();
    let put = read_modify_write(&api, &deploy, &deploy, |bare| {
        if let Some(spec) = bare["spec"].as_object_mut() {
            spec.remove("strategy");
            spec.remove("revisionHistoryLimit");
        }
    })
    .await
    .json();
    assert_eq!(put["spec"]["strategy"]["type"], "RollingUpdate", "{put}");
    assert_eq!(put["spec"]["revisionHistoryLimit"], 10);
    assert_eq!(put["metadata"]["generation"], generation);

    // Invalid writes: code, reason and the fields named in the causes.
    let cases: Vec<InvalidCase> = vec![
        (
            "selector mismatch",
            "POST",
            format!("/apis/apps/v1/namespaces/{NS}/deployments"),
            json!({"metadata": {"name": "bad"}, "spec": {"selector": {"matchLabels": {"app": "x"}}, "template": template(json!({"app": "y"}))}}),
            422,
            vec!["spec.template.metadata.labels"],
        ),
        (
            "selector missing",
            "POST",
            format!("/apis/apps/v1/namespaces/{NS}/replicasets"),
            json!({"metadata": {"name": "bad"}, "spec": {"template": template(json!({"app": "y"}))}}),
            422,
            vec!["spec.selector"],
        ),
        (
            "container name and image",
            "POST",
            format!("/api/v1/namespaces/{NS}/pods"),
            json!({"metadata": {"name": "bad"}, "spec": {"containers": [{"name": "Bad_Name"}]}}),
            422,
            vec!["spec.containers[0].name", "spec.containers[0].image"],
        ),
        (
            "container port",
            "POST",
            format!("/api/v1/namespaces/{NS}/pods"),
            json!({"metadata": {"name": "bad"}, "spec": {"containers": [{"name": "c", "image": "x", "ports": [{"containerPort": 0}]}]}}),
            422,
            vec!["spec.containers[0].ports[0].containerPort"],
        ),
        (
            "service port",
            "POST",
            format!("/api/v1/namespaces/{NS}/services"),
            json!({"metadata": {"name": "bad"}, "spec": {"ports": [{"port": 65536}]}}),
            // targetPort defaults to the port, so it is out of range too (as upstream reports).
            422,
            vec!["spec.ports[0].port", "spec.ports[0].targetPort"],
        ),
        (
            "nodePort out of range",
            "POST",
            format!("/api/v1/namespaces/{NS}/services"),
            json!({"metadata": {"name": "bad"}, "spec": {"type": "NodePort", "ports": [{"port": 80, "nodePort": 80}]}}),
            422,
            vec!["spec.ports[0].nodePort"],
        ),
        (
            "nodePort taken",
            "POST",
            format!("/api/v1/namespaces/{NS}/services"),
            json!({"metadata": {"name": "bad"}, "spec": {"type": "NodePort", "ports": [{"port": 80, "nodePort": node_port}]}}),
            422,
            vec!["spec.ports[0].nodePort"],
        ),
        (
            "deployment selector immutable",
            "PATCH",
            deploy.clone(),
            json!({"spec": {"selector": {"matchLabels": {"app": "z"}}, "template": {"metadata": {"labels": {"app": "z"}}}}}),
            422,
            vec!["spec.selector"],
        ),
        (
            "clusterIP immutable",
            "PATCH",
            format!("/api/v1/namespaces/{NS}/services/np"),
            json!({"spec": {"clusterIP": "10.43.99.99", "clusterIPs": ["10.43.99.99"]}}),
            422,
            vec!["spec.clusterIPs[0]"],
        ),
        (
            "job template immutable",
            "PATCH",
            format!("/apis/batch/v1/namespaces/{NS}/jobs/j"),
            json!({"spec": {"template": {"spec": {"containers": [{"name": "c", "image": "alpine"}]}}}}),
            422,
            vec!["spec.template"],
        ),
    ];
    let mut failures = Vec::new();
    for (name, method, path, body, code, fields) in cases {
        let ctype = if method == "PATCH" {
            "application/merge-patch+json"
        } else {
            "application/json"
        };
        let resp = call(&api, method, &path, Some(ctype), &body).await;
        let status = resp.json();
        let got_fields: Vec<String> = status["details"]["causes"]
            .as_array()
            .map(|c| {
                c.iter()
                    .map(|c| c["field"].as_str().unwrap_or("").to_string())
                    .collect()
            })
            .unwrap_or_default();
        if resp.status != code || status["reason"] != "Invalid" || got_fields != fields {
            failures.push(format!("{name}: {} {}", resp.status, resp.text()));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    let msg = call(&api, "PATCH", &deploy, Some("application/merge-patch+json"),
        &json!({"spec": {"selector": {"matchLabels": {"app": "z"}}, "template": {"metadata": {"labels": {"app": "z"}}}}})).await;
    assert!(msg.json()["message"].as_str().unwrap_or("").starts_with(
        r#"Deployment.apps "d" is invalid: spec.selector: Invalid value: v1.LabelSelector{MatchLabels:map[string]string{"app":"z"}, MatchExpressions:[]v1.LabelSelectorRequirement(nil)}: field is immutable"#),
        "{}", msg.text());
}

/// Creates `count` Services over `connections` connections at once; every third is a
/// NodePort Service. Returns the created objects.
async fn create_services(api: &Api, prefix: &str, count: usize, connections: usize) -> Vec<Value> {
    let mut tasks = Vec::new();
    for c in 0..connections {
        let api = api.clone();
        let prefix = prefix.to_string();
        tasks.push(tokio::spawn(async move {
            let mut conn = api.connect().await.expect("connect");
            let mut out = Vec::new();
            for i in (c..count).step_by(connections) {
                let svc_type = if i % 3 == 0 { "NodePort" } else { "ClusterIP" };
                let body = json!({"metadata": {"name": format!("{prefix}{i}")},
                    "spec": {"type": svc_type, "ports": [{"name": "a", "port": 80}, {"name": "b", "port": 443}]}});
                let resp = conn
                    .request("POST", &format!("/api/v1/namespaces/{NS}/services"), Some("application/json"),
                        serde_json::to_vec(&body).expect("serialize"))
                    .await
                    .expect("POST service");
                assert_eq!(resp.status, 201, "{}", resp.text());
                out.push(resp.json());
            }
            out
        }));
    }
    let mut all = Vec::new();
    for t in tasks {
        all.extend(t.await.expect("task"));
    }
    all
}

async fn delete_services(api: &Api, prefix: &str, count: usize, connections: usize) {
    let mut tasks = Vec::new();
    for c in 0..connections {
        let api = api.clone();
        let prefix = prefix.to_string();
        tasks.push(tokio::spawn(async move {
            let mut conn = api.connect().await.expect("connect");
            for i in (c..count).step_by(connections) {
                let resp = conn
                    .request(
                        "DELETE",
                        &format!("/api/v1/namespaces/{NS}/services/{prefix}{i}"),
                        None,
                        Vec::new(),
                    )
                    .await
                    .expect("DELETE service");
                assert_eq!(resp.status, 200, "{}", resp.text());
            }
        }));
    }
    for t in tasks {
        t.await.expect("task");
    }
}

fn allocations(services: &[Value]) -> (Vec<String>, Vec<u64>) {
    let ips = services
        .iter()
        .map(|s| s["spec"]["clusterIP"].as_str().unwrap_or("").to_string())
        .collect();
    let ports = services
        .iter()
        .flat_map(|s| s["spec"]["ports"].as_array().cloned().unwrap_or_default())
        .filter_map(|p| p["nodePort"].as_u64())
        .collect();
    (ips, ports)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn cluster_ips_and_node_ports_unique_and_reused() {
    let server = Server::start(&[]);
    let api = server.api();
    let services = create_services(&api, "s", 1000, 32).await;
    assert_eq!(services.len(), 1000);
    let (ips, ports) = allocations(&services);
    let unique_ips: HashSet<&String> = ips.iter().collect();
    assert_eq!(unique_ips.len(), 1000, "ClusterIPs handed out twice");
    assert!(!unique_ips.contains(&"10.43.0.1".to_string()));
    assert_eq!(ports.len(), 334 * 2, "two NodePorts per NodePort Service");
    let unique_ports: HashSet<&u64> = ports.iter().collect();
    assert_eq!(
        unique_ports.len(),
        ports.len(),
        "NodePorts handed out twice"
    );
    assert!(ports.iter().all(|p| (30000..=32767).contains(p)));

    // Taken addresses and ports are refused while their Services exist.
    let taken_ip = ips[1].clone();
    let taken_port = ports[0];
    let clash = post(&api, &format!("/api/v1/namespaces/{NS}/services"), json!({"metadata": {"name": "clash"},
        "spec": {"type": "NodePort", "clusterIP": taken_ip, "ports": [{"port": 80, "nodePort": taken_port}]}})).await;
    assert_eq!(clash.status, 422, "{}", clash.text());

    // Deleting frees them: the same address and port can be asked for again, and a second
    // round of 1,000 never repeats one still held.
    delete_services(&api, "s", 1000, 32).await;
    let reused = post(&api, &format!("/api/v1/namespaces/{NS}/services"), json!({"metadata": {"name": "reuse"},
        "spec": {"type": "NodePort", "clusterIP": taken_ip, "ports": [{"port": 80, "nodePort": taken_port}]}})).await;
    assert_eq!(reused.status, 201, "{}", reused.text());
    assert_eq!(reused.json()["spec"]["clusterIP"], json!(taken_ip));
    let again = create_services(&api, "t", 1000, 32).await;
    let (ips2, ports2) = allocations(&again);
    let mut all_ips: HashSet<String> = ips2.into_iter().collect();
    assert_eq!(all_ips.len(), 1000);
    assert!(
        all_ips.insert(taken_ip),
        "the reused address was handed out again"
    );
    let mut all_ports: HashSet<u64> = ports2.into_iter().collect();
    assert!(
        all_ports.insert(taken_port),
        "the reused port was handed out again"
    );
}
