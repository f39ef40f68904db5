//! kube-rs against the real binary: load the generated kubeconfig, list namespaces, create a
//! ConfigMap, see it through `kube::runtime::watcher`, merge-patch it and see the change,
//! delete it and see the deletion.

mod support;

use std::time::Duration;

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::runtime::watcher;
use kube::{Client, Config};
use support::Server;

/// Hang guard for each wait on the watch stream (not a performance assertion).
const STEP_TIMEOUT: Duration = Duration::from_secs(30);

async fn client_for(server: &Server) -> Client {
    support::install_crypto_provider();
    let kubeconfig = Kubeconfig::read_from(server.kubeconfig_path()).expect("read kubeconfig.yaml");
    let config = Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
        .await
        .expect("kubeconfig.yaml is a valid kubeconfig");
    Client::try_from(config).expect("build kube client")
}

/// Reads watcher events until `pred` accepts one; returns that ConfigMap.
async fn next_matching<S>(
    stream: &mut S,
    what: &str,
    pred: impl Fn(&watcher::Event<ConfigMap>) -> bool,
) -> watcher::Event<ConfigMap>
where
    S: futures::Stream<Item = Result<watcher::Event<ConfigMap>, watcher::Error>> + Unpin,
{
    loop {
        let next = tokio::time::timeout(STEP_TIMEOUT, stream.try_next())
            .await
            .unwrap_or_else(|_| panic!("no watch event for {what} within {STEP_TIMEOUT:?}"));
        match next {
            Ok(Some(event)) if pred(&event) => return event,
            Ok(Some(_)) => continue,
            Ok(None) => panic!("watch stream ended while waiting for {what}"),
            Err(e) => panic!("watcher error while waiting for {what}: {e}"),
        }
    }
}

fn data_of(cm: &ConfigMap, key: &str) -> Option<String> {
    cm.data.as_ref()?.get(key).cloned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kube_rs_list_create_watch_patch_delete() {
    let server = Server::start(&[]);
    let client = client_for(&server).await;

    let namespaces: Api<Namespace> = Api::all(client.clone());
    let names: Vec<String> = namespaces
        .list(&ListParams::default())
        .await
        .expect("list namespaces")
        .items
        .into_iter()
        .filter_map(|ns| ns.metadata.name)
        .collect();
    for expected in ["default", "kube-system", "kube-public", "kube-node-lease"] {
        assert!(
            names.iter().any(|n| n == expected),
            "{expected} missing from {names:?}"
        );
    }

    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    let stream = watcher(
        cms.clone(),
        watcher::Config::default().fields("metadata.name=kube-rs-cm"),
    )
    .boxed();
    let mut stream = stream;
    // The initial (empty) list completes before the object exists.
    next_matching(&mut stream, "InitDone", |e| {
        matches!(e, watcher::Event::InitDone)
    })
    .await;

    let cm: ConfigMap = serde_json::from_value(serde_json::json!({
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "kube-rs-cm", "labels": {"app": "kube-rs"}},
        "data": {"greeting": "hello"},
    }))
    .expect("ConfigMap literal");
    let created = cms
        .create(&PostParams::default(), &cm)
        .await
        .expect("create ConfigMap");
    let created_rv = created
        .metadata
        .resource_version
        .clone()
        .expect("created object has a resourceVersion");
    assert!(created.metadata.uid.is_some(), "created object has a uid");

    let seen = next_matching(&mut stream, "the created ConfigMap", |e| {
        matches!(e, watcher::Event::Apply(cm) if data_of(cm, "greeting").as_deref() == Some("hello"))
    })
    .await;
    if let watcher::Event::Apply(cm) = seen {
        assert_eq!(
            cm.metadata.resource_version.as_deref(),
            Some(created_rv.as_str())
        );
    }

    let patch = serde_json::json!({"data": {"greeting": "bonjour", "extra": "1"}});
    let patched = cms
        .patch(
            "kube-rs-cm",
            &PatchParams::apply("kube-rs-test"),
            &Patch::Merge(&patch),
        )
        .await
        .expect("merge-patch ConfigMap");
    assert_eq!(data_of(&patched, "greeting").as_deref(), Some("bonjour"));
    assert_eq!(data_of(&patched, "extra").as_deref(), Some("1"));
    let patched_rv: u64 = patched
        .metadata
        .resource_version
        .as_deref()
        .and_then(|rv| rv.parse().ok())
        .expect("numeric resourceVersion");
    assert!(patched_rv > created_rv.parse::<u64>().expect("numeric resourceVersion"));

    next_matching(&mut stream, "the patched ConfigMap", |e| {
        matches!(e, watcher::Event::Apply(cm) if data_of(cm, "greeting").as_deref() == Some("bonjour"))
    })
    .await;

    let fetched = cms.get("kube-rs-cm").await.expect("get patched ConfigMap");
    assert_eq!(data_of(&fetched, "greeting").as_deref(), Some("bonjour"));

    cms.delete("kube-rs-cm", &DeleteParams::default())
        .await
        .expect("delete ConfigMap");
    next_matching(&mut stream, "the deletion", |e| {
        matches!(e, watcher::Event::Delete(cm) if cm.metadata.name.as_deref() == Some("kube-rs-cm"))
    })
    .await;

    let err = cms
        .get("kube-rs-cm")
        .await
        .expect_err("deleted ConfigMap is gone");
    match err {
        kube::Error::Api(status) => assert_eq!(status.code, 404, "{status:?}"),
        other => panic!("expected a 404 Status, got {other}"),
    }
    assert!(cms.get_opt("kube-rs-cm").await.expect("get_opt").is_none());
}
