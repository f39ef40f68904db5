//! The in-process client against a real store and objects.wal: writes get the pipeline's
//! defaults, generated names and managedFields, and failures come back as the API's Status.

use serde_json::json;

use super::testing::{apiserver_client, wal_context};
use super::*;
use crate::kube::resources::find;

fn configmaps() -> &'static ResourceInfo {
    find("", "v1", "configmaps").expect("configmaps are registered")
}

fn namespaces() -> &'static ResourceInfo {
    find("", "v1", "namespaces").expect("namespaces are registered")
}

fn pods() -> &'static ResourceInfo {
    find("", "v1", "pods").expect("pods are registered")
}

async fn with_namespace(client: &Client, name: &str) {
    client
        .create(namespaces(), "", &json!({"metadata": {"name": name}}))
        .await
        .expect("namespace created");
}

#[tokio::test]
async fn a_create_gets_generate_name_defaults_and_the_callers_field_manager() {
    let dir = tempfile::tempdir().unwrap();
    let ctx = wal_context(dir.path());
    let client = Client::new(
        ctx.clone(),
        identities::controller_manager(),
        "kube-controller-manager",
    );
    with_namespace(&client, "ns").await;
    let pod = json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"generateName": "web-", "namespace": "ns"},
        "spec": {"containers": [{"name": "c", "image": "busybox"}]},
    });
    let created = client.create(pods(), "ns", &pod).await.unwrap();
    let name = created["metadata"]["name"].as_str().unwrap();
    assert!(name.starts_with("web-") && name.len() == 9, "{name}");
    // Defaults of the pipeline: restartPolicy, the container's pull policy and more.
    assert_eq!(created["spec"]["restartPolicy"], "Always");
    assert_eq!(
        created["spec"]["containers"][0]["terminationMessagePath"],
        "/dev/termination-log"
    );
    assert_eq!(
        created["metadata"]["managedFields"][0]["manager"],
        "kube-controller-manager"
    );
    let stored = client.get(pods(), "ns", name).expect("stored");
    assert_eq!(
        stored.resource_version.to_string(),
        created["metadata"]["resourceVersion"].as_str().unwrap()
    );
}

#[tokio::test]
async fn failures_come_back_as_the_apis_status() {
    let dir = tempfile::tempdir().unwrap();
    let ctx = wal_context(dir.path());
    let client = apiserver_client(&ctx);
    // The namespace does not exist.
    let err = client
        .create(configmaps(), "nowhere", &json!({"metadata": {"name": "a"}}))
        .await
        .unwrap_err();
    assert!(err.is_not_found(), "{err}");
    with_namespace(&client, "ns").await;
    let cm = json!({"metadata": {"name": "a"}, "data": {"k": "v"}});
    let first = client.create(configmaps(), "ns", &cm).await.unwrap();
    let err = client.create(configmaps(), "ns", &cm).await.unwrap_err();
    assert!(err.is_already_exists(), "{err}");
    // An update at a stale resourceVersion is a conflict.
    let mut stale = first.clone();
    stale["data"]["k"] = json!("w");
    client
        .update(configmaps(), "ns", "a", &stale)
        .await
        .unwrap();
    let err = client
        .update(configmaps(), "ns", "a", &stale)
        .await
        .unwrap_err();
    assert!(err.is_conflict(), "{err}");
    assert!(err.is_transient());
    // Validation: 422 Invalid.
    let err = client
        .create(
            configmaps(),
            "ns",
            &json!({"metadata": {"name": "Bad_Name"}}),
        )
        .await
        .unwrap_err();
    assert_eq!((err.code(), err.reason()), (422, "Invalid"), "{err}");
}

#[tokio::test]
async fn patches_and_deletes_with_preconditions() {
    let dir = tempfile::tempdir().unwrap();
    let ctx = wal_context(dir.path());
    let client = apiserver_client(&ctx);
    with_namespace(&client, "ns").await;
    let created = client
        .create(configmaps(), "ns", &json!({"metadata": {"name": "a"}}))
        .await
        .unwrap();
    let patched = client
        .patch(
            configmaps(),
            "ns",
            "a",
            None,
            PatchKind::Merge,
            &json!({"data": {"x": "1"}}),
        )
        .await
        .unwrap();
    assert_eq!(patched["data"]["x"], "1");
    // A delete for another uid (the object was replaced) is refused.
    let err = client
        .delete(
            configmaps(),
            "ns",
            "a",
            &DeleteOptions {
                uid: Some("not-the-uid".into()),
                ..Default::default()
            },
        )
        .await
        .unwrap_err();
    assert!(err.is_conflict(), "{err}");
    let uid = created["metadata"]["uid"].as_str().unwrap().to_string();
    client
        .delete(
            configmaps(),
            "ns",
            "a",
            &DeleteOptions {
                uid: Some(uid),
                ..Default::default()
            },
        )
        .await
        .unwrap();
    assert!(client.get(configmaps(), "ns", "a").is_none());
}

#[test]
fn paths_and_field_managers() {
    assert_eq!(
        object_path(pods(), "ns", "p", Some("binding")),
        "/api/v1/namespaces/ns/pods/p/binding"
    );
    let deployments = find("apps", "v1", "deployments").unwrap();
    assert_eq!(
        collection_path(deployments, ""),
        "/apis/apps/v1/deployments"
    );
    assert_eq!(
        with_field_manager("/api/v1/pods?force=true", &Method::PATCH, "kube scheduler"),
        "/api/v1/pods?force=true&fieldManager=kube%20scheduler"
    );
    assert_eq!(
        with_field_manager("/api/v1/pods", &Method::DELETE, "m"),
        "/api/v1/pods"
    );
}
