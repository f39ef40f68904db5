//! POST (create), also used by PUT and server-side apply when they create: type and namespace
//! checks, name or generateName, the namespace's existence and lifecycle, server-set
//! metadata, kind defaults, and the Create mutation (retried on a generated-name collision).
//! Also when a create needs the read barrier (docs/guarantees.md, Reads), and when its commit
//! stands in for it.

use http::{Response, StatusCode};
use serde_json::Value;

use super::meta::{self, str_at};
use super::request::ApiRequest;
use super::status::{ApiError, Cause};
use super::{body, kinds, output, validation, ApiBody};
use crate::kube::mutation::{ApplyError, Mutation};
use crate::kube::object::{ObjectKey, ObjectRef};
use crate::kube::writer::WriteError;

/// The result of a write: what the store holds now, or with dryRun what it would hold.
pub enum Written {
    Stored(ObjectRef),
    DryRun(Value),
}

impl Written {
    pub fn respond(
        &self,
        req: &ApiRequest,
        code: StatusCode,
    ) -> Result<Response<ApiBody>, ApiError> {
        match self {
            Written::Stored(o) => output::stored(req, code, o),
            Written::DryRun(v) => output::object(req, code, v),
        }
    }
}

/// Attempts at a fresh generated name before giving up (upstream: a retryable 409).
const GENERATE_ATTEMPTS: usize = 8;

/// Serves POST on a collection.
///
/// The router does not pass the read barrier before a create: the barrier is there for handlers
/// that read the current object (docs/guarantees.md, Reads), and a create has none. A create whose
/// checks read nothing of the store but its namespace proposes at once, with
/// `requires_open_namespace`: the state machine checks the name and the namespace against the state
/// the entry commits into, and the commit, in the term of the leader that proposed it, proves that
/// answer current. An answer no commit of its own would back passes the barrier first and decides
/// on the store as it then stands: the namespace missing from this server's copy, a dry run, and
/// kinds whose defaults read the store (a Service's addresses and ports).
pub async fn post(req: &ApiRequest) -> Result<Response<ApiBody>, ApiError> {
    super::options::check(req, super::options::Options::Create)?;
    let encoding = body::encoding(&req.content_type)?;
    let object = body::decode_object(&req.body, encoding)?;
    if req.query.dry_run || kinds::create_reads_store(req.info()) {
        super::router::linearize(req).await?;
        return create(req, object).await?.respond(req, StatusCode::CREATED);
    }
    let written = match create_from(req, object, StoreView::Unconfirmed).await {
        Ok(written) => written,
        Err(CreateError::Refused(e)) => return Err(e),
        Err(CreateError::Unconfirmed) => {
            super::router::linearize(req).await?;
            create(req, body::decode_object(&req.body, encoding)?).await?
        }
    };
    written.respond(req, StatusCode::CREATED)
}

/// How current the store a create checks against is known to be.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum StoreView {
    /// The request passed the read barrier: the store holds every write acknowledged before
    /// it arrived.
    Linearized,
    /// No barrier: the store may lag. Only a commit may answer; a refusal read from the store
    /// is `Unconfirmed`.
    Unconfirmed,
}

enum CreateError {
    /// The answer to give.
    Refused(ApiError),
    /// The store refused the create but may be behind: pass the barrier and decide again.
    Unconfirmed,
}

impl From<ApiError> for CreateError {
    fn from(e: ApiError) -> Self {
        CreateError::Refused(e)
    }
}

/// Fails unless `namespace` exists and is not terminating.
pub fn check_namespace_open(req: &ApiRequest, namespace: &str, name: &str) -> Result<(), ApiError> {
    let ns_info = crate::kube::resources::find("", "v1", "namespaces")
        .ok_or_else(|| ApiError::Internal("namespaces are not registered".into()))?;
    let ns = req
        .ctx
        .store
        .get(&ObjectKey::new("namespaces", "", namespace))
        .ok_or_else(|| ApiError::not_found(ns_info, namespace))?;
    if ns.is_deleting() {
        return Err(ApiError::Forbidden(format!(
            "{} \"{name}\" is forbidden: unable to create new content in namespace {namespace} because it is being terminated",
            req.info().qualified_plural()
        )));
    }
    Ok(())
}

/// Creates `object` (decoded, any kind/apiVersion) in the request's resource and namespace;
/// the request has passed the read barrier.
pub async fn create(req: &ApiRequest, object: Value) -> Result<Written, ApiError> {
    match create_from(req, object, StoreView::Linearized).await {
        Ok(written) => Ok(written),
        Err(CreateError::Refused(e)) => Err(e),
        Err(CreateError::Unconfirmed) => Err(ApiError::Internal(
            "a create after the read barrier asked for it again".into(),
        )),
    }
}

async fn create_from(
    req: &ApiRequest,
    mut object: Value,
    view: StoreView,
) -> Result<Written, CreateError> {
    let info = req.info();
    validation::check_type(info, &mut object)?;
    validation::check_value_types(info, &object)?;
    super::options::check_fields(req, info, &object)?;
    validation::check_namespace(info, req.target.namespace.as_deref(), &mut object)?;
    let given = str_at(&object, "/metadata/name").unwrap_or("").to_string();
    let prefix = str_at(&object, "/metadata/generateName")
        .unwrap_or("")
        .to_string();
    if given.is_empty() && prefix.is_empty() {
        return Err(ApiError::invalid(
            info,
            "",
            vec![Cause::required(
                "metadata.name",
                "name or generateName is required",
            )],
        )
        .into());
    }
    let namespace = str_at(&object, "/metadata/namespace")
        .unwrap_or("")
        .to_string();
    let shown_name = if given.is_empty() { &prefix } else { &given };
    if info.namespaced {
        match check_namespace_open(req, &namespace, shown_name) {
            Ok(()) => {}
            Err(_) if view == StoreView::Unconfirmed => return Err(CreateError::Unconfirmed),
            Err(e) => return Err(e.into()),
        }
    }
    let now = meta::now_rfc3339();
    let attempts = if given.is_empty() {
        GENERATE_ATTEMPTS
    } else {
        1
    };
    for attempt in 0..attempts {
        let name = if given.is_empty() {
            meta::generate_name(&prefix)
        } else {
            given.clone()
        };
        validation::check_metadata_maps(info, &name, &object)?;
        validation::check_name(info, &name)?;
        let mut candidate = object.clone();
        meta::prepare_create(info, &mut candidate, &name, &now);
        let reservation = kinds::prepare(&req.ctx, info, &name, None, &mut candidate)?;
        super::ownership::record_write(req, None, &mut candidate);
        if req.query.dry_run {
            let key = ObjectKey::new(info.store_key(), namespace.clone(), name.clone());
            if req.ctx.store.get(&key).is_some() {
                return Err(ApiError::AlreadyExists {
                    gr: super::status::Gr::of(info),
                    name,
                }
                .into());
            }
            return Ok(Written::DryRun(candidate));
        }
        let key = ObjectKey::new(info.store_key(), namespace.clone(), name.clone());
        let result = req
            .ctx
            .writer
            .write(Mutation::Create {
                key,
                object: candidate,
                requires_open_namespace: info.namespaced,
            })
            .await;
        drop(reservation);
        match result {
            Ok(stored) => return Ok(Written::Stored(stored)),
            Err(WriteError::Rejected(ApplyError::AlreadyExists(_)))
                if given.is_empty() && attempt + 1 < attempts =>
            {
                continue
            }
            // The namespace went away (or is going) after the check above: say which, as
            // the check would have. The store has applied this create's entry, so it shows
            // the namespace's state then or later.
            Err(WriteError::Rejected(ApplyError::NamespaceNotOpen(key))) => {
                return Err(match view {
                    StoreView::Unconfirmed => CreateError::Unconfirmed,
                    StoreView::Linearized => check_namespace_open(req, &namespace, shown_name)
                        .err()
                        .unwrap_or_else(|| {
                            ApiError::from_write(
                                info,
                                WriteError::Rejected(ApplyError::NamespaceNotOpen(key)),
                            )
                        })
                        .into(),
                })
            }
            Err(e) => return Err(ApiError::from_write(info, e).into()),
        }
    }
    Err(ApiError::Internal("could not generate a unique name".into()).into())
}

#[cfg(test)]
mod tests {
    //! The create path's use of the read barrier, against a store that plays a lagging
    //! replica: passing the barrier applies the writes it had not applied yet.

    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::{Arc, Mutex};

    use bytes::Bytes;
    use http::Request;
    use http_body_util::{BodyExt, Full};
    use serde_json::json;

    use super::*;
    use crate::api::{ApiContext, ApiSettings, User};
    use crate::kube::mutation::Precondition;
    use crate::kube::store::{Store, StoreConfig};
    use crate::kube::writer::{BarrierError, BarrierFuture, ReadBarrier, WriteFuture, Writer};

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
            let ctx = ApiContext::new(store.clone(), writer.clone(), settings)
                .with_reads(barrier.clone());
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
            let req = Request::builder()
                .method("POST")
                .uri(path)
                .header("content-type", "application/json")
                .body(Full::new(Bytes::from(body.to_string())))
                .unwrap();
            let resp = crate::api::router::serve(self.ctx.clone(), req, User::admin()).await;
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
}
