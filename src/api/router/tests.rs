//! The read barrier as requests meet it (`barrier::decide`, and the create that commits
//! first in `write`), against a store that plays a lagging replica: passing the barrier
//! applies the writes it had not applied yet.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use http::Request;
use http_body_util::{BodyExt, Full};
use serde_json::json;

use crate::api::{ApiContext, ApiSettings, UserInfo};
use crate::kube::mutation::{Mutation, Precondition};
use crate::kube::object::ObjectKey;
use crate::kube::store::{Store, StoreConfig};
use crate::kube::writer::{
    BarrierError, BarrierFuture, ReadBarrier, WriteError, WriteFuture, Writer,
};

/// Applies each write to the store, after the writes queued in `first` (another client's
/// writes that commit ahead of this one).
struct StoreWriter {
    store: Arc<Store>,
    first: Mutex<Vec<Mutation>>,
}

impl Writer for StoreWriter {
    fn write(&self, mutation: Mutation) -> WriteFuture<'_> {
        let ahead: Vec<Mutation> = std::mem::take(&mut *self.first.lock().unwrap());
        for m in ahead {
            self.store.apply(m).unwrap();
        }
        let result = self.store.apply(mutation).map_err(WriteError::from);
        Box::pin(async move { result })
    }
}

/// Counts its rounds; each applies the writes the replica lagged behind on.
struct CatchUpBarrier {
    store: Arc<Store>,
    lagging: Mutex<Vec<Mutation>>,
    rounds: AtomicUsize,
}

impl ReadBarrier for CatchUpBarrier {
    fn linearize(&self) -> BarrierFuture<'_> {
        self.rounds.fetch_add(1, Ordering::SeqCst);
        for m in std::mem::take(&mut *self.lagging.lock().unwrap()) {
            self.store.apply(m).unwrap();
        }
        Box::pin(async { Ok::<(), BarrierError>(()) })
    }
}

struct Replica {
    ctx: Arc<ApiContext>,
    store: Arc<Store>,
    writer: Arc<StoreWriter>,
    barrier: Arc<CatchUpBarrier>,
}

impl Replica {
    fn new() -> Replica {
        let store = Arc::new(Store::new(StoreConfig::default()));
        let writer = Arc::new(StoreWriter {
            store: store.clone(),
            first: Mutex::default(),
        });
        let barrier = Arc::new(CatchUpBarrier {
            store: store.clone(),
            lagging: Mutex::default(),
            rounds: AtomicUsize::new(0),
        });
        let settings = ApiSettings {
            server_name: "test".into(),
            node_ips: vec!["10.0.0.5".parse().unwrap()],
            api_port: 6443,
            service_cidr: "10.96.0.0/12".into(),
        };
        let ctx =
            ApiContext::new(store.clone(), writer.clone(), settings).with_reads(barrier.clone());
        Replica {
            ctx: Arc::new(ctx),
            store,
            writer,
            barrier,
        }
    }

    fn rounds(&self) -> usize {
        self.barrier.rounds.load(Ordering::SeqCst)
    }

    async fn post(&self, path: &str, body: serde_json::Value) -> (u16, serde_json::Value) {
        self.send("POST", path, Some(body)).await
    }

    async fn send(
        &self,
        method: &str,
        path: &str,
        body: Option<serde_json::Value>,
    ) -> (u16, serde_json::Value) {
        let body = body.map(|b| b.to_string()).unwrap_or_default();
        let req = Request::builder()
            .method(method)
            .uri(path)
            .header("content-type", "application/json")
            .body(Full::new(Bytes::from(body)))
            .unwrap();
        let resp = super::serve(self.ctx.clone(), req, UserInfo::admin()).await;
        let status = resp.status().as_u16();
        let bytes = resp.into_body().collect().await.unwrap().to_bytes();
        (status, serde_json::from_slice(&bytes).unwrap())
    }
}

fn namespace(name: &str) -> Mutation {
    Mutation::Create {
        key: ObjectKey::new("namespaces", "", name),
        object: json!({"apiVersion": "v1", "kind": "Namespace",
            "metadata": {"name": name, "uid": format!("uid-{name}")}}),
        requires_open_namespace: false,
    }
}

fn terminating(name: &str) -> Mutation {
    Mutation::Update {
        key: ObjectKey::new("namespaces", "", name),
        object: json!({"apiVersion": "v1", "kind": "Namespace",
            "metadata": {"name": name, "uid": format!("uid-{name}"),
                "deletionTimestamp": "2026-01-01T00:00:00Z"}}),
        precondition: Precondition::none(),
    }
}

fn configmap(name: &str) -> serde_json::Value {
    json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name},
        "data": {"k": "v"}})
}

#[tokio::test]
async fn a_create_in_a_namespace_this_copy_holds_commits_without_a_barrier_round() {
    let replica = Replica::new();
    replica.store.apply(namespace("ns")).unwrap();
    let (status, body) = replica
        .post("/api/v1/namespaces/ns/configmaps", configmap("a"))
        .await;
    assert_eq!(status, 201, "{body}");
    assert_eq!(replica.rounds(), 0);
    // The name check is the state machine's: a second create of the name is refused by
    // the commit, still without a round.
    let (status, body) = replica
        .post("/api/v1/namespaces/ns/configmaps", configmap("a"))
        .await;
    assert_eq!(
        (status, body["reason"].as_str()),
        (409, Some("AlreadyExists"))
    );
    assert_eq!(replica.rounds(), 0);
}

#[tokio::test]
async fn a_namespace_this_copy_lacks_is_looked_up_again_after_the_barrier() {
    let replica = Replica::new();
    replica
        .barrier
        .lagging
        .lock()
        .unwrap()
        .push(namespace("late"));
    let (status, body) = replica
        .post("/api/v1/namespaces/late/configmaps", configmap("a"))
        .await;
    assert_eq!(status, 201, "{body}");
    assert_eq!(replica.rounds(), 1);

    let (status, body) = replica
        .post("/api/v1/namespaces/missing/configmaps", configmap("a"))
        .await;
    assert_eq!((status, body["reason"].as_str()), (404, Some("NotFound")));
    assert_eq!(body["details"]["kind"], "namespaces");
    assert_eq!(replica.rounds(), 2);
}

#[tokio::test]
async fn a_namespace_deleted_before_the_create_commits_refuses_it_with_the_reason() {
    let replica = Replica::new();
    replica.store.apply(namespace("going")).unwrap();
    // This copy sees the namespace open; another client's delete commits first.
    replica
        .writer
        .first
        .lock()
        .unwrap()
        .push(terminating("going"));
    let (status, body) = replica
        .post("/api/v1/namespaces/going/configmaps", configmap("a"))
        .await;
    assert_eq!(
        (status, body["reason"].as_str()),
        (403, Some("Forbidden")),
        "{body}"
    );
    assert!(body["message"]
        .as_str()
        .unwrap()
        .contains("because it is being terminated"));
    assert_eq!(replica.rounds(), 1);
    let key = ObjectKey::new("configmaps", "going", "a");
    assert!(replica.store.get(&key).is_none(), "the create applied");
}

#[tokio::test]
async fn services_and_dry_runs_pass_the_barrier_before_reading_the_store() {
    let replica = Replica::new();
    replica.store.apply(namespace("ns")).unwrap();
    let service = json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "s"},
        "spec": {"ports": [{"port": 80}]}});
    let (status, body) = replica
        .post("/api/v1/namespaces/ns/services", service)
        .await;
    assert_eq!(status, 201, "{body}");
    assert_eq!(replica.rounds(), 1);
    let (status, body) = replica
        .post(
            "/api/v1/namespaces/ns/configmaps?dryRun=All",
            configmap("d"),
        )
        .await;
    assert_eq!(status, 201, "{body}");
    assert_eq!(replica.rounds(), 2);
}

#[tokio::test]
async fn latest_reads_and_writes_of_a_current_object_pass_the_barrier_first() {
    let replica = Replica::new();
    replica.store.apply(namespace("ns")).unwrap();
    let (status, body) = replica
        .post("/api/v1/namespaces/ns/configmaps", configmap("c"))
        .await;
    assert_eq!(status, 201, "{body}");
    assert_eq!(replica.rounds(), 0);
    let path = "/api/v1/namespaces/ns/configmaps/c";
    // (method, path, body, rounds it adds)
    let steps = [
        ("GET", path.to_string(), None, 1),
        ("GET", format!("{path}?resourceVersion=0"), None, 0),
        ("GET", "/api/v1/namespaces/ns/configmaps".into(), None, 1),
        (
            "GET",
            format!(
                "/api/v1/namespaces/ns/configmaps?resourceVersion={}",
                replica.store.resource_version()
            ),
            None,
            0,
        ),
        ("PUT", path.into(), Some(configmap("c")), 1),
        ("DELETE", path.into(), None, 1),
        // A create of a namespaced kind outside a namespace is no create: refused after the
        // barrier, as every other non-GET request.
        ("POST", "/api/v1/configmaps".into(), Some(configmap("x")), 1),
    ];
    for (method, path, body, added) in steps {
        let before = replica.rounds();
        let (status, answer) = replica.send(method, &path, body).await;
        assert!(status < 500, "{method} {path}: {status} {answer}");
        assert_eq!(replica.rounds() - before, added, "{method} {path}");
    }
}
