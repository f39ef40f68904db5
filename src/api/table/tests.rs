use chrono::{Duration, TimeZone, Utc};
use serde_json::json;

use super::*;
use crate::kube::resources::{self, RESOURCES};

fn now() -> chrono::DateTime<Utc> {
    Utc.with_ymd_and_hms(2026, 1, 10, 12, 0, 0).unwrap()
}

fn info(group: &str, plural: &str) -> &'static ResourceInfo {
    resources::find(group, "v1", plural).unwrap()
}

fn headers(info: &ResourceInfo) -> Vec<(String, u64)> {
    column_definitions(info)
        .iter()
        .map(|c| {
            (
                c["name"].as_str().unwrap().to_uppercase(),
                c["priority"].as_u64().unwrap(),
            )
        })
        .collect()
}

fn normal(info: &ResourceInfo) -> Vec<String> {
    headers(info)
        .into_iter()
        .filter(|(_, p)| *p == 0)
        .map(|(n, _)| n)
        .collect()
}

fn wide_only(info: &ResourceInfo) -> Vec<String> {
    headers(info)
        .into_iter()
        .filter(|(_, p)| *p == 1)
        .map(|(n, _)| n)
        .collect()
}

fn cells(info: &ResourceInfo, obj: Value) -> Vec<Value> {
    let table = render(info, &[obj], json!({}), IncludeObject::None, now());
    table["rows"][0]["cells"].as_array().unwrap().clone()
}

fn created(ago: Duration) -> String {
    (now() - ago).to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
}

#[test]
fn human_duration_matches_apimachinery() {
    let cases = [
        (-5, "<invalid>"),
        (-1, "0s"),
        (0, "0s"),
        (5, "5s"),
        (119, "119s"),
        (120, "2m"),
        (150, "2m30s"),
        (9 * 60 + 59, "9m59s"),
        (10 * 60 + 30, "10m"),
        (179 * 60, "179m"),
        (3 * 3600, "3h"),
        (3 * 3600 + 10 * 60, "3h10m"),
        (8 * 3600 + 59 * 60, "8h"),
        (47 * 3600, "47h"),
        (48 * 3600, "2d"),
        (5 * 86400 + 2 * 3600, "5d2h"),
        (8 * 86400, "8d"),
        (729 * 86400, "729d"),
        (730 * 86400, "2y"),
        (740 * 86400, "2y10d"),
        (9 * 365 * 86400, "9y"),
    ];
    for (secs, want) in cases {
        assert_eq!(human_duration(Duration::seconds(secs)), want, "{secs}s");
    }
}

#[test]
fn column_sets_match_kube_apiserver() {
    assert_eq!(normal(info("", "namespaces")), ["NAME", "STATUS", "AGE"]);
    assert_eq!(
        normal(info("", "nodes")),
        ["NAME", "STATUS", "ROLES", "AGE", "VERSION"]
    );
    assert_eq!(
        wide_only(info("", "nodes")),
        [
            "INTERNAL-IP",
            "EXTERNAL-IP",
            "OS-IMAGE",
            "KERNEL-VERSION",
            "CONTAINER-RUNTIME"
        ]
    );
    assert_eq!(
        normal(info("", "pods")),
        ["NAME", "READY", "STATUS", "RESTARTS", "AGE"]
    );
    assert_eq!(
        wide_only(info("", "pods")),
        ["IP", "NODE", "NOMINATED NODE", "READINESS GATES"]
    );
    assert_eq!(
        normal(info("", "services")),
        [
            "NAME",
            "TYPE",
            "CLUSTER-IP",
            "EXTERNAL-IP",
            "PORT(S)",
            "AGE"
        ]
    );
    assert_eq!(wide_only(info("", "services")), ["SELECTOR"]);
    assert_eq!(normal(info("", "endpoints")), ["NAME", "ENDPOINTS", "AGE"]);
    assert_eq!(
        normal(info("discovery.k8s.io", "endpointslices")),
        ["NAME", "ADDRESSTYPE", "PORTS", "ENDPOINTS", "AGE"]
    );
    assert_eq!(normal(info("", "configmaps")), ["NAME", "DATA", "AGE"]);
    assert_eq!(normal(info("", "secrets")), ["NAME", "TYPE", "DATA", "AGE"]);
    assert_eq!(
        normal(info("", "serviceaccounts")),
        ["NAME", "SECRETS", "AGE"]
    );
    for group in ["", "events.k8s.io"] {
        assert_eq!(
            normal(info(group, "events")),
            ["LAST SEEN", "TYPE", "REASON", "OBJECT", "MESSAGE"]
        );
        assert_eq!(
            wide_only(info(group, "events")),
            ["SUBOBJECT", "SOURCE", "FIRST SEEN", "COUNT", "NAME"]
        );
    }
    assert_eq!(
        normal(info("coordination.k8s.io", "leases")),
        ["NAME", "HOLDER", "AGE"]
    );
    // Every served kind has a name column with format "name", and every row has one cell per
    // column.
    for r in RESOURCES {
        let defs = column_definitions(r);
        assert_eq!(
            defs.iter().filter(|c| c["format"] == "name").count(),
            1,
            "{}",
            r.kind
        );
        let row = cells(r, json!({"metadata": {"name": "x"}}));
        assert_eq!(row.len(), defs.len(), "{}", r.kind);
    }
}

#[test]
fn unknown_kind_gets_name_and_created_at() {
    let fake = ResourceInfo {
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
    assert_eq!(normal(&fake), ["NAME", "CREATED AT"]);
    let row = cells(
        &fake,
        json!({"metadata": {"name": "w", "creationTimestamp": "2026-01-10T11:57:30Z"}}),
    );
    assert_eq!(row, [json!("w"), json!("2026-01-10T11:57:30Z")]);
    let row = cells(&fake, json!({"metadata": {"name": "w"}}));
    assert_eq!(row[1], "0001-01-01T00:00:00Z");
}

#[test]
fn table_shape_and_include_object() {
    let cm = json!({"kind": "ConfigMap", "apiVersion": "v1",
        "metadata": {"name": "c", "namespace": "default", "resourceVersion": "7",
                     "labels": {"a": "b"}, "creationTimestamp": created(Duration::seconds(5))},
        "data": {"k": "v", "k2": "v"}, "binaryData": {"b": "AA=="}});
    let info = info("", "configmaps");
    let meta = json!({"resourceVersion": "9"});
    let table = render(
        info,
        std::slice::from_ref(&cm),
        meta.clone(),
        IncludeObject::Metadata,
        now(),
    );
    assert_eq!(table["kind"], "Table");
    assert_eq!(table["apiVersion"], "meta.k8s.io/v1");
    assert_eq!(table["metadata"], meta);
    assert_eq!(table["columnDefinitions"][0]["format"], "name");
    let row = &table["rows"][0];
    assert_eq!(row["cells"], json!(["c", 3, "5s"]));
    assert_eq!(row["object"]["kind"], "PartialObjectMetadata");
    assert_eq!(row["object"]["apiVersion"], "meta.k8s.io/v1");
    assert_eq!(row["object"]["metadata"], cm["metadata"]);
    let table = render(
        info,
        std::slice::from_ref(&cm),
        json!({}),
        IncludeObject::Object,
        now(),
    );
    assert_eq!(table["rows"][0]["object"], cm);
    let table = render(info, &[cm], json!({}), IncludeObject::None, now());
    assert!(table["rows"][0].get("object").is_none());
    let table = render(info, &[], json!({}), IncludeObject::Metadata, now());
    assert_eq!(table["rows"], json!([]));
    assert_eq!(IncludeObject::from_query(None), IncludeObject::Metadata);
    assert_eq!(
        IncludeObject::from_query(Some("Object")),
        IncludeObject::Object
    );
    assert_eq!(IncludeObject::from_query(Some("None")), IncludeObject::None);
}

#[test]
fn pod_cells() {
    let pods = info("", "pods");
    let pending = json!({"metadata": {"name": "p", "creationTimestamp": created(Duration::minutes(3))},
        "spec": {"containers": [{"name": "a"}, {"name": "b"}]},
        "status": {"phase": "Pending"}});
    assert_eq!(
        cells(pods, pending),
        json!(["p", "0/2", "Pending", "0", "3m", "<none>", "<none>", "<none>", "<none>"])
            .as_array()
            .unwrap()
            .clone()
    );
    let running = json!({"metadata": {"name": "p", "creationTimestamp": created(Duration::hours(2))},
        "spec": {"nodeName": "n1", "containers": [{"name": "a"}, {"name": "b"}],
                 "readinessGates": [{"conditionType": "x/ready"}]},
        "status": {"phase": "Running", "podIPs": [{"ip": "10.1.0.4"}],
            "conditions": [{"type": "Ready", "status": "True"}, {"type": "x/ready", "status": "False"}],
            "containerStatuses": [
                {"name": "a", "ready": true, "restartCount": 2, "state": {"running": {}},
                 "lastState": {"terminated": {"exitCode": 1, "finishedAt": created(Duration::seconds(90))}}},
                {"name": "b", "ready": false, "restartCount": 0,
                 "state": {"waiting": {"reason": "CrashLoopBackOff"}}}]}});
    let row = cells(pods, running);
    assert_eq!(row[1], "1/2");
    assert_eq!(row[2], "CrashLoopBackOff");
    assert_eq!(row[3], "2 (90s ago)");
    assert_eq!(row[5], "10.1.0.4");
    assert_eq!(row[6], "n1");
    assert_eq!(row[8], "0/1");
    let init = json!({"metadata": {"name": "p"},
        "spec": {"initContainers": [{"name": "i1"}, {"name": "i2"}], "containers": [{"name": "a"}]},
        "status": {"phase": "Pending", "initContainerStatuses": [
            {"name": "i1", "state": {"terminated": {"exitCode": 0}}},
            {"name": "i2", "state": {"running": {}}}]}});
    assert_eq!(cells(pods, init)[2], "Init:1/2");
    let deleting = json!({"metadata": {"name": "p", "deletionTimestamp": created(Duration::seconds(1))},
        "spec": {"containers": [{"name": "a"}]}, "status": {"phase": "Running"}});
    assert_eq!(cells(pods, deleting)[2], "Terminating");
    let done = json!({"metadata": {"name": "p"}, "spec": {"containers": [{"name": "a"}]},
        "status": {"phase": "Succeeded", "containerStatuses": [
            {"name": "a", "state": {"terminated": {"exitCode": 0, "reason": "Completed"}}}]}});
    let table = render(pods, &[done], json!({}), IncludeObject::None, now());
    assert_eq!(table["rows"][0]["cells"][2], "Completed");
    assert_eq!(table["rows"][0]["conditions"][0]["reason"], "Succeeded");
}

#[test]
fn node_service_and_endpoint_cells() {
    let node = json!({"metadata": {"name": "n1", "labels": {
            "node-role.kubernetes.io/control-plane": "", "kubernetes.io/role": "worker"}},
        "spec": {"unschedulable": true},
        "status": {"conditions": [{"type": "Ready", "status": "True"}],
            "addresses": [{"type": "InternalIP", "address": "10.0.0.5"}],
            "nodeInfo": {"kubeletVersion": "v1.33.0", "osImage": "Debian"}}});
    let row = cells(info("", "nodes"), node);
    assert_eq!(row[1], "Ready,SchedulingDisabled");
    assert_eq!(row[2], "control-plane,worker");
    assert_eq!(row[4], "v1.33.0");
    assert_eq!(row[5], "10.0.0.5");
    assert_eq!(row[6], "<none>");
    assert_eq!(row[7], "Debian");
    assert_eq!(row[8], "<unknown>");
    let bare = cells(info("", "nodes"), json!({"metadata": {"name": "n2"}}));
    assert_eq!(bare[1], "Unknown");
    assert_eq!(bare[2], "<none>");

    let svc = json!({"metadata": {"name": "s"},
        "spec": {"type": "NodePort", "clusterIPs": ["10.96.0.10"], "selector": {"b": "2", "a": "1"},
            "ports": [{"port": 80, "nodePort": 30080, "protocol": "TCP"}, {"port": 53, "protocol": "UDP"}]}});
    let row = cells(info("", "services"), svc);
    assert_eq!(
        row[1..5],
        [
            json!("NodePort"),
            json!("10.96.0.10"),
            json!("<none>"),
            json!("80:30080/TCP,53/UDP")
        ]
    );
    assert_eq!(row[6], "a=1,b=2");
    let lb =
        json!({"metadata": {"name": "s"}, "spec": {"type": "LoadBalancer", "clusterIP": "None"}});
    let row = cells(info("", "services"), lb);
    assert_eq!(row[2], "None");
    assert_eq!(row[3], "<pending>");
    assert_eq!(row[4], "<none>");
    assert_eq!(row[6], "<none>");

    let ep = json!({"metadata": {"name": "e"}, "subsets": [
        {"addresses": [{"ip": "10.1.0.1"}, {"ip": "fd00::1"}], "ports": [{"port": 80}, {"port": 443}]}]});
    assert_eq!(
        cells(info("", "endpoints"), ep)[1],
        "10.1.0.1:80,[fd00::1]:80,10.1.0.1:443 + 1 more..."
    );
    assert_eq!(
        cells(info("", "endpoints"), json!({"metadata": {"name": "e"}}))[1],
        "<none>"
    );

    let slice = json!({"metadata": {"name": "s-abc"}, "addressType": "IPv4",
        "ports": [{"port": 80}, {"name": "dns"}, {}],
        "endpoints": [{"addresses": ["10.1.0.1"]}, {"addresses": ["10.1.0.2"]}]});
    let row = cells(info("discovery.k8s.io", "endpointslices"), slice);
    assert_eq!(
        row[1..4],
        [json!("IPv4"), json!("80,dns,*"), json!("10.1.0.1,10.1.0.2")]
    );
    let empty = cells(
        info("discovery.k8s.io", "endpointslices"),
        json!({"metadata": {"name": "x"}}),
    );
    assert_eq!(empty[2], "<unset>");
    assert_eq!(empty[3], "<unset>");
}

#[test]
fn small_kinds_cells() {
    let t = created(Duration::days(3));
    let ns = json!({"metadata": {"name": "default", "creationTimestamp": t}, "status": {"phase": "Active"}});
    assert_eq!(
        cells(info("", "namespaces"), ns),
        [json!("default"), json!("Active"), json!("3d")]
    );
    let secret = json!({"metadata": {"name": "s"}, "type": "Opaque", "data": {"a": "", "b": ""}});
    assert_eq!(
        cells(info("", "secrets"), secret)[1..3],
        [json!("Opaque"), json!(2)]
    );
    let sa = json!({"metadata": {"name": "default"}});
    assert_eq!(cells(info("", "serviceaccounts"), sa)[1], 0);
    let lease = json!({"metadata": {"name": "l"}, "spec": {"holderIdentity": "me"}});
    assert_eq!(cells(info("coordination.k8s.io", "leases"), lease)[1], "me");
    let no_holder = json!({"metadata": {"name": "l"}, "spec": {}});
    assert_eq!(
        cells(info("coordination.k8s.io", "leases"), no_holder)[1],
        ""
    );
}

#[test]
fn event_cells_both_versions() {
    let core = json!({"metadata": {"name": "p.123"},
        "involvedObject": {"kind": "Pod", "name": "p", "fieldPath": "spec.containers{a}"},
        "reason": "Pulled", "message": " pulled \n", "type": "Normal",
        "source": {"component": "kubelet", "host": "n1"},
        "firstTimestamp": created(Duration::minutes(5)), "lastTimestamp": created(Duration::seconds(30)),
        "count": 4});
    assert_eq!(
        cells(info("", "events"), core),
        json!([
            "30s",
            "Normal",
            "Pulled",
            "pod/p",
            "spec.containers{a}",
            "kubelet, n1",
            "pulled",
            "5m",
            4,
            "p.123"
        ])
        .as_array()
        .unwrap()
        .clone()
    );
    let new = json!({"metadata": {"name": "e"}, "regarding": {"kind": "Node", "name": "n1"},
        "reason": "Starting", "note": "hi", "type": "Normal",
        "reportingController": "kubelet", "eventTime": "2026-01-10T11:59:00.000000Z"});
    let row = cells(info("events.k8s.io", "events"), new);
    assert_eq!(row[0], "60s");
    assert_eq!(row[3], "node/n1");
    assert_eq!(row[5], "kubelet");
    assert_eq!(row[6], "hi");
    assert_eq!(row[7], "60s");
    assert_eq!(row[8], 1);
    let series = json!({"metadata": {"name": "e"}, "involvedObject": {"kind": "Pod"},
        "series": {"count": 7, "lastObservedTime": "2026-01-10T11:59:50.000000Z"}});
    let row = cells(info("", "events"), series);
    assert_eq!(row[0], "10s");
    assert_eq!(row[3], "pod");
    assert_eq!(row[7], "<unknown>");
    assert_eq!(row[8], 7);
}

#[test]
fn workload_cells() {
    let age = created(Duration::seconds(150));
    let deploy = resources::find("apps", "v1", "deployments").unwrap();
    let d = json!({"metadata": {"name": "web", "creationTimestamp": age},
        "spec": {"replicas": 3, "selector": {"matchLabels": {"b": "2", "a": "1"},
                 "matchExpressions": [{"key": "t", "operator": "In", "values": ["y", "x"]}]},
                 "template": {"spec": {"containers": [{"name": "a", "image": "i1"}, {"name": "b", "image": "i2"}]}}},
        "status": {"readyReplicas": 1, "updatedReplicas": 2, "availableReplicas": 1}});
    assert_eq!(
        cells(deploy, d),
        [
            json!("web"),
            json!("1/3"),
            json!(2),
            json!(1),
            json!("2m30s"),
            json!("a,b"),
            json!("i1,i2"),
            json!("a=1,b=2,t in (x,y)")
        ]
    );
    assert_eq!(wide_only(deploy), ["CONTAINERS", "IMAGES", "SELECTOR"]);

    let jobs = resources::find("batch", "v1", "jobs").unwrap();
    let start = created(Duration::seconds(100));
    let done = created(Duration::seconds(40));
    let j = json!({"metadata": {"name": "j", "creationTimestamp": age},
        "spec": {"completions": 2, "template": {"spec": {"containers": []}}},
        "status": {"succeeded": 2, "startTime": start, "completionTime": done,
                   "conditions": [{"type": "Complete", "status": "True"}]}});
    assert_eq!(
        cells(jobs, j)[..4],
        [json!("j"), json!("Complete"), json!("2/2"), json!("60s")]
    );
    let running = json!({"metadata": {"name": "p"}, "spec": {"parallelism": 3}});
    assert_eq!(
        cells(jobs, running)[1..3],
        [json!("Running"), json!("0/1 of 3")]
    );

    let sts = resources::find("apps", "v1", "statefulsets").unwrap();
    assert_eq!(normal(sts), ["NAME", "READY", "AGE"]);
    let s =
        json!({"metadata": {"name": "s"}, "spec": {"replicas": 3}, "status": {"readyReplicas": 2}});
    assert_eq!(cells(sts, s)[1], "2/3");

    let cj = resources::find("batch", "v1", "cronjobs").unwrap();
    let c = json!({"metadata": {"name": "c"}, "spec": {"schedule": "@hourly", "suspend": false}});
    assert_eq!(
        cells(cj, c)[1..6],
        [
            json!("@hourly"),
            json!("<none>"),
            json!("False"),
            json!(0),
            json!("<none>")
        ]
    );
}

#[test]
fn cluster_kind_cells() {
    let pv = resources::find("", "v1", "persistentvolumes").unwrap();
    let v = json!({"metadata": {"name": "pv"}, "spec": {"capacity": {"storage": "5Gi"},
        "accessModes": ["ReadWriteMany", "ReadWriteOnce"], "persistentVolumeReclaimPolicy": "Retain",
        "claimRef": {"namespace": "ns", "name": "c"}, "storageClassName": "fast"},
        "status": {"phase": "Bound"}});
    assert_eq!(
        cells(pv, v)[..9],
        [
            json!("pv"),
            json!("5Gi"),
            json!("RWO,RWX"),
            json!("Retain"),
            json!("Bound"),
            json!("ns/c"),
            json!("fast"),
            json!("<unset>"),
            json!("")
        ]
    );
    let sc = resources::find("storage.k8s.io", "v1", "storageclasses").unwrap();
    let s = json!({"metadata": {"name": "std", "annotations": {"storageclass.kubernetes.io/is-default-class": "true"}},
        "provisioner": "p"});
    assert_eq!(
        cells(sc, s)[..5],
        [
            json!("std (default)"),
            json!("p"),
            json!("Delete"),
            json!("Immediate"),
            json!(false)
        ]
    );
    let rb = info_in("rbac.authorization.k8s.io", "rolebindings");
    let b = json!({"metadata": {"name": "b"}, "roleRef": {"kind": "Role", "name": "r"},
        "subjects": [{"kind": "User", "name": "u1"}, {"kind": "User", "name": "u2"},
                     {"kind": "ServiceAccount", "namespace": "n", "name": "sa"}]});
    let row = cells(rb, b);
    assert_eq!(
        (
            row[1].clone(),
            row[3].clone(),
            row[4].clone(),
            row[5].clone()
        ),
        (json!("Role/r"), json!("u1, u2"), json!(""), json!("n/sa"))
    );
    let roles = info_in("rbac.authorization.k8s.io", "roles");
    assert_eq!(normal(roles), ["NAME", "CREATED AT"]);
    let quota = resources::find("", "v1", "resourcequotas").unwrap();
    let q = json!({"metadata": {"name": "q"}, "status": {"hard": {"pods": "10", "limits.cpu": "2", "cpu": "1"},
        "used": {"pods": "3", "cpu": "500m"}}});
    assert_eq!(
        cells(quota, q)[1..3],
        [json!("cpu: 500m/1, pods: 3/10"), json!("limits.cpu: 0/2")]
    );
    let np = info_in("networking.k8s.io", "networkpolicies");
    assert_eq!(
        cells(
            np,
            json!({"metadata": {"name": "n"}, "spec": {"podSelector": {}}})
        )[1],
        "<none>"
    );
    let ing = info_in("networking.k8s.io", "ingresses");
    let i = json!({"metadata": {"name": "i"}, "spec": {"rules": [{"host": "a"}, {}, {"host": "b"}, {"host": "c"}],
        "tls": [{}]}, "status": {"loadBalancer": {"ingress": [{"ip": "1.2.3.4"}]}}});
    assert_eq!(
        cells(ing, i)[1..5],
        [
            json!("<none>"),
            json!("a,b,c"),
            json!("1.2.3.4"),
            json!("80, 443")
        ]
    );
    let many = json!({"metadata": {"name": "i"}, "spec": {"ingressClassName": "nginx",
        "rules": [{"host": "a"}, {"host": "b"}, {"host": "c"}, {"host": "d"}, {"host": "e"}]}});
    assert_eq!(
        cells(ing, many)[1..5],
        [
            json!("nginx"),
            json!("a,b,c + 2 more..."),
            json!(""),
            json!("80")
        ]
    );
}

fn info_in(group: &str, plural: &str) -> &'static ResourceInfo {
    resources::RESOURCES
        .iter()
        .find(|r| r.group == group && r.plural == plural)
        .unwrap()
}

#[test]
fn streamed_table_equals_rendered_table() {
    let pods = info("", "pods");
    let objects = [
        json!({"apiVersion": "v1", "kind": "Pod",
               "metadata": {"name": "a", "namespace": "d", "creationTimestamp": created(Duration::seconds(5)),
                            "labels": {"x": "y"}, "resourceVersion": "7",
                            "managedFields": [{"manager": "m", "operation": "Update"}]},
               "spec": {"containers": [{"name": "c", "image": "i"}]},
               "status": {"phase": "Succeeded"}}),
        json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "b\u{e9}\\", "resourceVersion": "8"}, "spec": {}}),
    ];
    assert_streamed_equals_rendered(pods, &stored_objects(pods, &objects));
}

/// Stores `objects` under `info`'s resource.
fn stored_objects(info: &ResourceInfo, objects: &[Value]) -> Vec<crate::kube::object::ObjectRef> {
    use crate::kube::object::ObjectKey;
    objects
        .iter()
        .map(|o| {
            let key = ObjectKey::new(info.plural, "d", o["metadata"]["name"].as_str().unwrap());
            let bytes = serde_json::to_vec(o).unwrap();
            std::sync::Arc::new(crate::kube::store::stored_from_json(key, &bytes).unwrap())
        })
        .collect()
}

fn assert_streamed_equals_rendered(info: &ResourceInfo, stored: &[crate::kube::object::ObjectRef]) {
    let values: Vec<Value> = stored.iter().map(|o| o.value()).collect();
    for include in [
        IncludeObject::None,
        IncludeObject::Metadata,
        IncludeObject::Object,
    ] {
        let meta = json!({"resourceVersion": "9"});
        let streamed: Value =
            serde_json::from_slice(&render_stored(info, "v1", stored, &meta, include, now()))
                .unwrap();
        let rendered = render(info, &values, meta, include, now());
        assert_eq!(streamed, rendered, "{} {include:?}", info.kind);
    }
}

/// Pods that exercise every branch of the Pod printer: the streamed Table parses only the
/// fields it lists as printed (`fields::POD`), and must print exactly what the full object
/// prints.
#[test]
fn streamed_pod_rows_equal_rendered_rows_for_every_printer_branch() {
    let pods = info("", "pods");
    let meta = |name: &str| {
        json!({"name": name, "namespace": "d", "uid": "u", "resourceVersion": "5",
               "creationTimestamp": created(Duration::minutes(5)), "labels": {"app": "x"},
               "annotations": {"a": "b"}, "ownerReferences": [{"kind": "ReplicaSet", "name": "r"}],
               "managedFields": [{"manager": "m", "fieldsV1": {"f:spec": {}}}]})
    };
    let finished = created(Duration::minutes(1));
    let spec = json!({
        "initContainers": [
            {"name": "setup", "image": "busybox", "command": ["true"]},
            {"name": "sidecar", "image": "envoy", "restartPolicy": "Always"}],
        "containers": [
            {"name": "app", "image": "nginx", "ports": [{"containerPort": 80}],
             "env": [{"name": "A", "value": "1"}], "resources": {"limits": {"cpu": "1"}}},
            {"name": "log", "image": "fluent"}],
        "readinessGates": [{"conditionType": "example.com/ready"}, {"conditionType": "other"}],
        "nodeName": "node-1", "dnsPolicy": "ClusterFirst", "tolerations": [{"key": "k"}]
    });
    let objects = [
        // Running, with restarts, sidecar started, readiness gates half true.
        json!({"apiVersion": "v1", "kind": "Pod", "metadata": meta("running"), "spec": spec,
               "status": {"phase": "Running", "podIPs": [{"ip": "10.0.0.7"}], "podIP": "10.0.0.7",
                          "nominatedNodeName": "node-2",
                          "conditions": [{"type": "Initialized", "status": "True"},
                                         {"type": "Ready", "status": "True"},
                                         {"type": "example.com/ready", "status": "True"}],
                          "initContainerStatuses": [
                              {"name": "setup", "restartCount": 0, "state": {"terminated": {"exitCode": 0}}},
                              {"name": "sidecar", "restartCount": 2, "started": true, "ready": true,
                               "lastState": {"terminated": {"finishedAt": finished}}, "state": {"running": {}}}],
                          "containerStatuses": [
                              {"name": "app", "ready": true, "restartCount": 3, "state": {"running": {}},
                               "lastState": {"terminated": {"finishedAt": finished}}},
                              {"name": "log", "ready": false, "restartCount": 0,
                               "state": {"waiting": {"reason": "CrashLoopBackOff"}}}]}}),
        // Still initializing, one init container failed.
        json!({"apiVersion": "v1", "kind": "Pod", "metadata": meta("init"), "spec": spec,
               "status": {"phase": "Pending",
                          "initContainerStatuses": [
                              {"name": "setup", "restartCount": 1,
                               "state": {"terminated": {"exitCode": 2, "reason": "Error"}}}]}}),
        // Scheduling gated.
        json!({"apiVersion": "v1", "kind": "Pod", "metadata": meta("gated"), "spec": spec,
               "status": {"phase": "Pending", "conditions": [
                   {"type": "PodScheduled", "status": "False", "reason": "SchedulingGated"}]}}),
        // Terminating, and completed.
        json!({"apiVersion": "v1", "kind": "Pod",
               "metadata": {"name": "terminating", "resourceVersion": "6", "deletionTimestamp": created(Duration::seconds(3))},
               "spec": spec, "status": {"phase": "Running", "reason": "NodeLost"}}),
        json!({"apiVersion": "v1", "kind": "Pod", "metadata": meta("done"), "spec": spec,
               "status": {"phase": "Succeeded", "containerStatuses": [
                   {"name": "app", "state": {"terminated": {"exitCode": 0, "reason": "Completed"}}}]}}),
    ];
    assert_streamed_equals_rendered(pods, &stored_objects(pods, &objects));
}

/// The metadata the streamed Table parses (`fields::METADATA`) is all any printer reads.
#[test]
fn streamed_rows_equal_rendered_rows_for_every_kind() {
    for info in resources::RESOURCES.iter() {
        let object = json!({"apiVersion": "v1", "kind": info.kind,
            "metadata": {"name": "x", "namespace": "d", "uid": "u", "generation": 3,
                         "resourceVersion": "11",
                         "creationTimestamp": created(Duration::hours(3)),
                         "deletionTimestamp": created(Duration::seconds(1)),
                         "labels": {"app": "x", "tier": "web"},
                         "annotations": {"kubectl.kubernetes.io/default-container": "c",
                                         "ingressclass.kubernetes.io/is-default-class": "true",
                                         "storageclass.kubernetes.io/is-default-class": "true"},
                         "ownerReferences": [{"kind": "Deployment", "name": "d", "controller": true}],
                         "managedFields": [{"manager": "m"}]},
            "spec": {"replicas": 2}, "status": {"replicas": 1}});
        assert_streamed_equals_rendered(info, &stored_objects(info, &[object]));
    }
}

#[test]
fn printer_field_access_agrees_with_json_pointer() {
    use format::At;
    let doc = json!({
        "spec": {"containers": [{"name": "a"}, {"name": "b", "ports": [{"containerPort": 80}]}]},
        "metadata": {"annotations": {"a/b": "slash", "m~n": "tilde", "": "empty key"}},
        "status": {"phase": "Running", "list": [1, 2, 3]}
    });
    for pointer in [
        "",
        "/",
        "/spec",
        "/spec/containers/0/name",
        "/spec/containers/1/ports/0/containerPort",
        "/spec/containers/2/name",
        "/spec/containers/01/name",
        "/spec/containers/-1/name",
        "/spec/containers/+1/name",
        "/spec/containers/name",
        "/status/phase/more",
        "/status/list/2",
        "/metadata/annotations/a~1b",
        "/metadata/annotations/m~0n",
        "/metadata/annotations/",
        "/missing/deeper",
        "spec",
    ] {
        assert_eq!(doc.at(pointer), doc.pointer(pointer), "{pointer:?}");
    }
}
