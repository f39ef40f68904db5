//! A world for unit tests of controllers that work together (a Deployment's and its
//! ReplicaSets'): a real store with objects.wal and the API pipeline, a namespace, clients
//! under the control plane's and a user's identities, and any number of controllers built the
//! way the runner builds them over that one store (`testing::session` builds one), so a test
//! drives their `reconcile`s in turn and plays the kubelet through the client.

use std::sync::Arc;
use std::time::Duration;

use serde_json::{json, Value};
use tokio_util::sync::CancellationToken;

use super::informer::{Informers, InformersBuilder};
use super::queue::WorkQueue;
use super::worker::Controller;
use super::Shared;
use crate::api::meta::format_time;
use crate::client::testing::{apiserver_client, wal_context};
use crate::client::{identities, Client, PatchKind};
use crate::kube::resources::{self, ResourceInfo};

pub fn info(group: &str, plural: &str) -> &'static ResourceInfo {
    let version = "v1";
    resources::find(group, version, plural).expect("a built-in kind")
}

pub struct Env {
    _dir: tempfile::TempDir,
    /// Writes as kube-controller-manager.
    pub client: Client,
    /// Writes as a user would (kubectl).
    pub admin: Client,
    pub shared: Shared,
    pub stop: CancellationToken,
}

impl Drop for Env {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

impl Env {
    /// A fresh store with namespace `ns`.
    pub async fn new(ns: &str) -> Env {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let ctx = wal_context(dir.path());
        let admin = apiserver_client(&ctx);
        admin
            .create(
                info("", "namespaces"),
                "",
                &json!({"metadata": {"name": ns}}),
            )
            .await
            .expect("namespace created");
        let client = Client::new(
            ctx.clone(),
            identities::controller_manager(),
            "kube-controller-manager",
        );
        let stop = CancellationToken::new();
        let shared = Shared {
            controller_manager: client.clone(),
            scheduler: client.clone(),
            apiserver: admin.clone(),
            server_name: "s1".into(),
            settings: Arc::new(super::testing::settings()),
            stop: stop.clone(),
        };
        Env {
            _dir: dir,
            client,
            admin,
            shared,
            stop,
        }
    }

    /// Controller `C` as the runner builds it, its informers following the store; its queue
    /// is returned for the test to read (no workers run).
    pub fn start<C: Controller>(&self) -> (C, WorkQueue<C::Key>) {
        let queue = WorkQueue::<C::Key>::new();
        let mut builder = InformersBuilder::new();
        C::register(&mut builder, &queue);
        let informers: Arc<Informers> = Arc::new(builder.start(self.client.store().clone()));
        {
            let (informers, stop) = (informers.clone(), self.stop.clone());
            tokio::spawn(async move { informers.run(stop).await });
        }
        let controller = C::new(&self.shared, &informers, queue.clone());
        (controller, queue)
    }

    pub async fn create(&self, info: &ResourceInfo, ns: &str, object: Value) -> Value {
        self.admin
            .create(info, ns, &object)
            .await
            .unwrap_or_else(|e| panic!("creating {object}: {e}"))
    }

    /// The objects of `info` in `ns`, as the store holds them now.
    pub fn list(&self, info: &ResourceInfo, ns: &str) -> Vec<Value> {
        self.client
            .store()
            .snapshot()
            .range(&info.store_key(), Some(ns), None)
            .map(|o| o.value())
            .collect()
    }

    pub fn get(&self, info: &ResourceInfo, ns: &str, name: &str) -> Value {
        self.client
            .get(info, ns, name)
            .unwrap_or_else(|| panic!("{} {ns}/{name} exists", info.kind))
            .value()
    }

    /// Plays the kubelet: pod `name` Running and Ready since `ready_for` ago.
    pub async fn make_ready(&self, ns: &str, name: &str, ready_for: Duration) {
        let since = chrono::Utc::now() - chrono::Duration::from_std(ready_for).unwrap_or_default();
        let patch = json!({"status": {"phase": "Running", "conditions": [
            {"type": "Ready", "status": "True", "lastTransitionTime": format_time(since)}]}});
        self.admin
            .patch(
                info("", "pods"),
                ns,
                name,
                Some("status"),
                PatchKind::Merge,
                &patch,
            )
            .await
            .expect("pod status patched");
    }

    /// Waits (a little) until `probe` holds: for informers to catch up with the store.
    pub async fn until(&self, mut probe: impl FnMut() -> bool) {
        for _ in 0..200 {
            if probe() {
                return;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        panic!("condition not reached within 1 s");
    }
}

/// A pod template labelled `labels`, bound to node n1.
pub fn pod_template(labels: Value) -> Value {
    json!({
        "metadata": {"labels": labels},
        "spec": {"nodeName": "n1", "containers": [{"name": "c", "image": "nginx"}]},
    })
}

/// A bare pod named `name` labelled `labels`.
pub fn pod(name: &str, labels: Value) -> Value {
    let mut pod = pod_template(labels);
    pod["metadata"]["name"] = json!(name);
    pod
}
