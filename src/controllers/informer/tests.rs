//! Informers over a real store written through the in-process client.

use std::sync::Mutex;

use serde_json::json;

use super::*;
use crate::api::{ApiContext, ApiSettings};
use crate::client::testing::apiserver_client;
use crate::client::{Client, DeleteOptions};
use crate::kube::resources::{find, ResourceInfo};
use crate::kube::store::StoreConfig;
use crate::kube::wal::{WalConfig, WalWriter};

fn configmaps() -> &'static ResourceInfo {
    find("", "v1", "configmaps").unwrap()
}

/// A context whose store keeps only `live_buffer` events for live watchers.
fn context(dir: &std::path::Path, live_buffer: usize) -> Arc<ApiContext> {
    let store = Arc::new(Store::new(StoreConfig {
        history_window: 10_000,
        live_buffer,
    }));
    let (writer, _) = WalWriter::open(dir, store.clone(), WalConfig::default()).unwrap();
    Arc::new(ApiContext::new(
        store,
        Arc::new(writer),
        ApiSettings {
            server_name: "s1".into(),
            node_ips: vec!["127.0.0.1".parse().unwrap()],
            api_port: 6443,
            service_cidr: "10.43.0.0/16".into(),
        },
    ))
}

async fn setup(client: &Client) {
    for ns in ["a", "b"] {
        client
            .create(
                find("", "v1", "namespaces").unwrap(),
                "",
                &json!({"metadata": {"name": ns}}),
            )
            .await
            .unwrap();
    }
}

async fn configmap(client: &Client, ns: &str, name: &str, color: &str) {
    client
        .create(
            configmaps(),
            ns,
            &json!({"metadata": {"name": name, "labels": {"color": color}}}),
        )
        .await
        .unwrap();
}

/// Records what handlers are told, as `KIND ns/name rv`.
#[derive(Default)]
struct Seen(Mutex<Vec<String>>);

impl Seen {
    fn handler(self: &Arc<Self>) -> Handler {
        let seen = self.clone();
        Arc::new(move |change: Change<'_>| {
            let kind = match change {
                Change::Added(_) => "ADDED",
                Change::Modified { .. } => "MODIFIED",
                Change::Deleted(_) => "DELETED",
                Change::Resync(_) => "RESYNC",
            };
            let o = change.object();
            seen.0
                .lock()
                .unwrap()
                .push(format!("{kind} {}/{}", o.key.namespace, o.key.name));
        })
    }

    fn take(&self) -> Vec<String> {
        std::mem::take(&mut *self.0.lock().unwrap())
    }
}

fn color(object: &StoredObject) -> Vec<String> {
    object
        .labels
        .get("color")
        .map(str::to_string)
        .into_iter()
        .collect()
}

#[tokio::test]
async fn start_lists_what_exists_then_follows_changes() {
    let dir = tempfile::tempdir().unwrap();
    let ctx = context(dir.path(), 1024);
    let client = apiserver_client(&ctx);
    setup(&client).await;
    configmap(&client, "a", "one", "red").await;
    configmap(&client, "b", "two", "blue").await;

    let seen = Arc::new(Seen::default());
    let mut builder = InformersBuilder::new();
    builder
        .on_change("configmaps", seen.handler())
        .index("configmaps", "color", color);
    let informers = Arc::new(builder.start(ctx.store.clone()));
    let mut initial = seen.take();
    initial.sort();
    assert_eq!(initial, ["ADDED a/one", "ADDED b/two"]);
    let cache = informers.cache("configmaps").unwrap();
    assert_eq!(cache.len(), 2);
    assert_eq!(cache.list(Some("a")).len(), 1);
    assert_eq!(cache.by_index("color", "red")[0].key.name, "one");
    assert!(informers.cache("pods").is_none());

    let stop = CancellationToken::new();
    let running = {
        let (informers, stop) = (informers.clone(), stop.clone());
        tokio::spawn(async move { informers.run(stop).await })
    };
    configmap(&client, "a", "three", "red").await;
    client
        .patch(
            configmaps(),
            "a",
            "one",
            None,
            crate::client::PatchKind::Merge,
            &json!({"metadata": {"labels": {"color": "green"}}}),
        )
        .await
        .unwrap();
    client
        .delete(configmaps(), "b", "two", &DeleteOptions::default())
        .await
        .unwrap();
    wait_until(|| seen.0.lock().unwrap().len() == 3).await;
    assert_eq!(
        seen.take(),
        ["ADDED a/three", "MODIFIED a/one", "DELETED b/two"]
    );
    // The index follows the label change and the delete.
    let mut red: Vec<String> = cache
        .by_index("color", "red")
        .iter()
        .map(|o| o.key.name.clone())
        .collect();
    red.sort();
    assert_eq!(red, ["three"]);
    assert_eq!(cache.by_index("color", "green")[0].key.name, "one");
    assert!(cache.by_index("color", "blue").is_empty());
    assert!(cache.get("b", "two").is_none());
    // Objects of kinds nobody registered are not cached.
    client
        .create(
            find("coordination.k8s.io", "v1", "leases").unwrap(),
            "a",
            &json!({"metadata": {"name": "l"}, "spec": {}}),
        )
        .await
        .unwrap();
    stop.cancel();
    running.await.unwrap();
    assert!(seen.take().is_empty());
}

#[tokio::test]
async fn an_informer_that_fell_behind_lists_again_and_reports_the_difference() {
    let dir = tempfile::tempdir().unwrap();
    // The store keeps 16 events for a live watcher: 40 writes cut the informer off.
    let ctx = context(dir.path(), 16);
    let client = apiserver_client(&ctx);
    setup(&client).await;
    configmap(&client, "a", "kept", "red").await;
    configmap(&client, "a", "gone", "red").await;
    let seen = Arc::new(Seen::default());
    let mut builder = InformersBuilder::new();
    builder
        .on_change("configmaps", seen.handler())
        .index("configmaps", "color", color);
    let informers = Arc::new(builder.start(ctx.store.clone()));
    seen.take();
    // Not running while the writes happen.
    client
        .delete(configmaps(), "a", "gone", &DeleteOptions::default())
        .await
        .unwrap();
    for i in 0..40 {
        configmap(&client, "b", &format!("n{i}"), "blue").await;
    }
    let stop = CancellationToken::new();
    let running = {
        let (informers, stop) = (informers.clone(), stop.clone());
        tokio::spawn(async move { informers.run(stop).await })
    };
    let cache = informers.cache("configmaps").unwrap();
    wait_until(|| cache.len() == 41).await;
    let changes = seen.take();
    assert!(
        changes.contains(&"DELETED a/gone".to_string()),
        "{changes:?}"
    );
    assert_eq!(
        changes.iter().filter(|c| c.starts_with("ADDED b/")).count(),
        40
    );
    assert!(!changes.iter().any(|c| c.contains("a/kept")), "{changes:?}");
    assert_eq!(cache.by_index("color", "blue").len(), 40);
    assert!(cache.by_index("color", "red").len() == 1);
    // After the relist it follows the new subscription.
    configmap(&client, "a", "late", "red").await;
    wait_until(|| cache.len() == 42).await;
    stop.cancel();
    running.await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn handlers_with_a_period_see_every_object_again() {
    let dir = tempfile::tempdir().unwrap();
    let ctx = context(dir.path(), 1024);
    let client = apiserver_client(&ctx);
    setup(&client).await;
    configmap(&client, "a", "one", "red").await;
    let seen = Arc::new(Seen::default());
    let quiet = Arc::new(Seen::default());
    let mut builder = InformersBuilder::new();
    builder
        .on_change_with_resync("configmaps", Duration::from_secs(30), seen.handler())
        .on_change("configmaps", quiet.handler());
    let informers = Arc::new(builder.start(ctx.store.clone()));
    seen.take();
    quiet.take();
    let stop = CancellationToken::new();
    let running = {
        let (informers, stop) = (informers.clone(), stop.clone());
        tokio::spawn(async move { informers.run(stop).await })
    };
    tokio::time::sleep(Duration::from_secs(29)).await;
    assert!(seen.take().is_empty());
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(seen.take(), ["RESYNC a/one"]);
    tokio::time::sleep(Duration::from_secs(30)).await;
    assert_eq!(seen.take(), ["RESYNC a/one"]);
    assert!(
        quiet.take().is_empty(),
        "only handlers that asked are resynced"
    );
    stop.cancel();
    running.await.unwrap();
}

/// Polls `done` (the informer runs on another task) for up to 5 s.
async fn wait_until(done: impl Fn() -> bool) {
    for _ in 0..500 {
        if done() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("condition not reached in 5 s");
}
