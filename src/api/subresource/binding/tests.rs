//! Bindings through the in-process client (the same pipeline as an HTTP request): the pod gets
//! its node once, the refusals are kube-apiserver's, and the legacy collection works too.

use bytes::Bytes;
use http::Method;
use serde_json::{json, Value};

use super::bind;
use crate::client::testing::{apiserver_client, wal_context};
use crate::client::{Client, ClientError};
use crate::kube::resources::{find, ResourceInfo};

fn pods() -> &'static ResourceInfo {
    find("", "v1", "pods").expect("pods are registered")
}

async fn setup(dir: &std::path::Path) -> Client {
    let client = apiserver_client(&wal_context(dir));
    client
        .create(
            find("", "v1", "namespaces").expect("registered"),
            "",
            &json!({"metadata": {"name": "ns"}}),
        )
        .await
        .expect("namespace");
    client
}

async fn pod(client: &Client, name: &str, extra: Value) -> Value {
    let pod = json!({
        "metadata": {"name": name},
        "spec": {"containers": [{"name": "c", "image": "busybox"}]},
    });
    let pod = crate::kube::patch::apply_merge_patch(&pod, &extra).expect("a merge patch");
    client
        .create(pods(), "ns", &pod)
        .await
        .expect("pod created")
}

fn binding(name: &str, node: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "Binding", "metadata": {"name": name},
           "target": {"apiVersion": "v1", "kind": "Node", "name": node}})
}

async fn post_binding(client: &Client, pod: &str, body: &Value) -> Result<Value, ClientError> {
    client
        .create_subresource(pods(), "ns", pod, "binding", body)
        .await
}

fn stored(client: &Client, name: &str) -> Value {
    client.get(pods(), "ns", name).expect("pod stored").value()
}

fn scheduled_condition(pod: &Value) -> Value {
    pod["status"]["conditions"]
        .as_array()
        .and_then(|c| c.iter().find(|c| c["type"] == "PodScheduled").cloned())
        .unwrap_or(Value::Null)
}

#[tokio::test]
async fn a_binding_sets_the_node_the_annotations_and_pod_scheduled() {
    let dir = tempfile::tempdir().unwrap();
    let client = setup(dir.path()).await;
    let created = pod(&client, "p", json!({})).await;
    let mut body = binding("p", "n1");
    body["metadata"]["annotations"] = json!({"scheduler.example/decision": "x"});
    let answer = post_binding(&client, "p", &body).await.unwrap();
    assert_eq!(
        answer,
        json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success",
               "code": 201})
    );
    let bound = stored(&client, "p");
    assert_eq!(bound["spec"]["nodeName"], "n1");
    assert_eq!(
        bound["metadata"]["annotations"]["scheduler.example/decision"],
        "x"
    );
    let condition = scheduled_condition(&bound);
    assert_eq!(condition["status"], "True", "{bound}");
    assert!(condition["lastProbeTime"].is_null());
    assert!(condition["lastTransitionTime"].is_string());
    // A binding is no update of the pod: no managedFields entry of its own.
    assert_eq!(
        bound["metadata"]["managedFields"],
        created["metadata"]["managedFields"]
    );
}

#[tokio::test]
async fn a_pod_is_bound_once() {
    let dir = tempfile::tempdir().unwrap();
    let client = setup(dir.path()).await;
    pod(&client, "p", json!({})).await;
    post_binding(&client, "p", &binding("p", "n1"))
        .await
        .unwrap();
    let again = post_binding(&client, "p", &binding("p", "n2"))
        .await
        .unwrap_err();
    assert!(again.is_conflict(), "{again}");
    assert_eq!(
        again.to_string(),
        "409 Conflict: Operation cannot be fulfilled on pods/binding \"p\": pod p is already assigned to node \"n1\""
    );
    assert_eq!(stored(&client, "p")["spec"]["nodeName"], "n1");
}

#[tokio::test]
async fn refusals_are_kube_apiservers() {
    let dir = tempfile::tempdir().unwrap();
    let client = setup(dir.path()).await;
    pod(&client, "p", json!({})).await;
    pod(
        &client,
        "gated",
        json!({"spec": {"schedulingGates": [{"name": "wait"}]}}),
    )
    .await;
    pod(
        &client,
        "going",
        json!({"metadata": {"finalizers": ["example.com/hold"]}}),
    )
    .await;
    client
        .delete(pods(), "ns", "going", &Default::default())
        .await
        .unwrap();
    let uid = stored(&client, "p")["metadata"]["uid"]
        .as_str()
        .unwrap()
        .to_string();
    let mut wrong_uid = binding("p", "n1");
    wrong_uid["metadata"]["uid"] = json!("not-the-uid");
    let mut old_rv = binding("p", "n1");
    old_rv["metadata"]["resourceVersion"] = json!("1");
    let mut not_a_node = binding("p", "n1");
    not_a_node["target"]["kind"] = json!("Pod");
    let cases: Vec<(&str, Value, u16, String)> = vec![
        (
            "p",
            binding("q", "n1"),
            400,
            "name in URL does not match name in Binding object".into(),
        ),
        (
            "p",
            binding("p", ""),
            422,
            "Binding \"p\" is invalid: target.name: Required value".into(),
        ),
        (
            "p",
            not_a_node,
            422,
            "Binding \"p\" is invalid: target.kind: Unsupported value: \"Pod\": supported values: \"Node\", \"<empty>\"".into(),
        ),
        (
            "p",
            wrong_uid,
            409,
            format!("Operation cannot be fulfilled on pods \"p\": Precondition failed: UID in precondition: not-the-uid, UID in object meta: {uid}"),
        ),
        ("p", old_rv, 409, "Operation cannot be fulfilled on pods \"p\": Precondition failed: ResourceVersion in precondition: 1".into()),
        (
            "gated",
            binding("gated", "n1"),
            409,
            "Operation cannot be fulfilled on pods/binding \"gated\": pod gated has non-empty .spec.schedulingGates".into(),
        ),
        (
            "going",
            binding("going", "n1"),
            409,
            "Operation cannot be fulfilled on pods/binding \"going\": pod going is being deleted, cannot be assigned to a host".into(),
        ),
        ("nope", binding("nope", "n1"), 404, "pods \"nope\" not found".into()),
        (
            "p",
            json!({"kind": "Pod", "metadata": {"name": "p"}, "target": {"name": "n1"}}),
            400,
            "the kind in the data (Pod) does not match the expected kind (Binding)".into(),
        ),
    ];
    for (name, body, code, message) in cases {
        let err = post_binding(&client, name, &body).await.unwrap_err();
        assert_eq!(err.code(), code, "{name} {body}: {err}");
        let ClientError::Status { message: got, .. } = &err else {
            panic!("{err}");
        };
        assert!(got.starts_with(&message), "{name} {body}: {got}");
    }
    // Nothing was bound.
    for name in ["p", "gated", "going"] {
        assert!(stored(&client, name)["spec"].get("nodeName").is_none());
    }
    // The right uid and resourceVersion bind.
    let current = client.get(pods(), "ns", "p").unwrap();
    let mut right = binding("p", "n1");
    right["metadata"]["uid"] = json!(uid);
    right["metadata"]["resourceVersion"] = json!(current.resource_version.to_string());
    post_binding(&client, "p", &right).await.unwrap();
}

#[tokio::test]
async fn a_dry_run_binds_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let client = setup(dir.path()).await;
    pod(&client, "p", json!({})).await;
    let before = client.get(pods(), "ns", "p").unwrap().resource_version;
    let answer = client
        .send(
            Method::POST,
            "/api/v1/namespaces/ns/pods/p/binding?dryRun=All",
            "application/json",
            Bytes::from(binding("p", "n1").to_string()),
        )
        .await
        .unwrap();
    assert_eq!(answer["status"], "Success");
    assert_eq!(
        client.get(pods(), "ns", "p").unwrap().resource_version,
        before
    );
}

#[tokio::test]
async fn the_legacy_collection_binds_by_the_bodys_name() {
    let dir = tempfile::tempdir().unwrap();
    let client = setup(dir.path()).await;
    pod(&client, "p", json!({})).await;
    let post = |body: Value| {
        let client = client.clone();
        async move {
            client
                .send(
                    Method::POST,
                    "/api/v1/namespaces/ns/bindings",
                    "application/json",
                    Bytes::from(body.to_string()),
                )
                .await
        }
    };
    // Not a subresource: the uid is wiped, not a precondition.
    let mut body = binding("p", "n2");
    body["metadata"]["uid"] = json!("whatever");
    post(body).await.unwrap();
    assert_eq!(stored(&client, "p")["spec"]["nodeName"], "n2");
    let unnamed = post(json!({"target": {"name": "n2"}})).await.unwrap_err();
    assert_eq!(unnamed.code(), 400, "{unnamed}");
    let missing = post(binding("nope", "n2")).await.unwrap_err();
    assert!(missing.is_not_found(), "{missing}");
    // Nothing is stored under `bindings`: reads and other verbs are refused.
    for (method, path) in [
        (Method::GET, "/api/v1/namespaces/ns/bindings"),
        (Method::GET, "/api/v1/namespaces/ns/bindings/p"),
        (Method::DELETE, "/api/v1/namespaces/ns/bindings/p"),
        (Method::GET, "/api/v1/namespaces/ns/pods/p/binding"),
    ] {
        let err = client
            .send(method.clone(), path, "application/json", Bytes::new())
            .await
            .unwrap_err();
        assert_eq!(err.code(), 405, "{method} {path}: {err}");
    }
}

#[test]
fn binding_replaces_a_false_condition_and_keeps_a_true_ones_time() {
    let mut pod = json!({"spec": {}, "status": {"conditions": [
        {"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
         "message": "0/3 nodes are available", "lastTransitionTime": "2025-01-01T00:00:00Z"},
        {"type": "Other", "status": "True"}]}});
    bind(
        &mut pod,
        "n1",
        &serde_json::Map::new(),
        "2025-02-02T00:00:00Z",
    );
    assert_eq!(
        pod["status"]["conditions"],
        json!([{"type": "PodScheduled", "status": "True", "lastProbeTime": null,
                "lastTransitionTime": "2025-02-02T00:00:00Z"},
               {"type": "Other", "status": "True"}])
    );
    let mut already = json!({"status": {"conditions": [
        {"type": "PodScheduled", "status": "True", "lastTransitionTime": "2025-01-01T00:00:00Z"}]}});
    bind(
        &mut already,
        "n1",
        &serde_json::Map::new(),
        "2025-02-02T00:00:00Z",
    );
    assert_eq!(
        already["status"]["conditions"][0]["lastTransitionTime"],
        "2025-01-01T00:00:00Z"
    );
    let mut bare = json!({"metadata": {"name": "p"}});
    bind(
        &mut bare,
        "n1",
        &serde_json::Map::new(),
        "2025-02-02T00:00:00Z",
    );
    assert_eq!(bare["spec"]["nodeName"], "n1");
    assert_eq!(bare["status"]["conditions"][0]["status"], "True");
}
