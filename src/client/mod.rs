//! The in-process API client: how code inside the server (controllers, the scheduler, the
//! bootstrap objects, the identity Lease, the `kubernetes` endpoints) writes objects.
//!
//! Every write is an HTTP request handed to `api::router::serve`, the same entry point a
//! kubectl request reaches after authentication, with an in-memory body and the caller's
//! identity. So an internal write gets exactly what a client's gets: defaults, validation,
//! generateName, server-set metadata, managedFields under the caller's field manager, the
//! ClusterIP/NodePort allocators, the read barrier and the writer of the context it was given
//! (on a cluster member either the client writer, which forwards a follower's own writes to the
//! leader as proposals, or the leader-only writer, which fails once this server stops
//! leading). No code outside `api/` builds a Mutation for an object.
//!
//! Reads do not go through the pipeline: callers read the local store (`Client::store`), which
//! on the leader holds every committed write it has applied, and watch it through
//! `controllers::informer`.
//!
//! Errors come back as the `Status` the API would send ([`ClientError::Status`]), so callers
//! act on the reason (`is_conflict`, `is_not_found`, …) exactly as client-go callers do.

use std::sync::Arc;

use bytes::Bytes;
use http::{Method, Request};
use http_body_util::{BodyExt, Full};
use serde_json::Value;

use crate::api::{router, ApiContext, UserInfo};
use crate::kube::object::{ObjectKey, ObjectRef};
use crate::kube::resources::ResourceInfo;
use crate::kube::store::Store;

/// Responses larger than this are refused (no internal write answers with more).
const MAX_RESPONSE: usize = 64 << 20;

/// Why a request failed.
#[derive(Debug, Clone, thiserror::Error)]
pub enum ClientError {
    /// The API answered with a failure `Status`.
    #[error("{code} {reason}: {message}")]
    Status {
        code: u16,
        reason: String,
        message: String,
    },
    /// The answer was not what the API sends (a bug, reported with the bytes' start).
    #[error("unreadable API response ({code}): {detail}")]
    Response { code: u16, detail: String },
}

impl ClientError {
    pub fn code(&self) -> u16 {
        match self {
            ClientError::Status { code, .. } | ClientError::Response { code, .. } => *code,
        }
    }

    pub fn reason(&self) -> &str {
        match self {
            ClientError::Status { reason, .. } => reason,
            ClientError::Response { .. } => "",
        }
    }

    pub fn is_not_found(&self) -> bool {
        self.code() == 404
    }

    pub fn is_conflict(&self) -> bool {
        self.code() == 409 && self.reason() == "Conflict"
    }

    pub fn is_already_exists(&self) -> bool {
        self.code() == 409 && self.reason() == "AlreadyExists"
    }

    /// A refusal that retrying the same request can change: conflicts, timeouts, throttling,
    /// a server without a leader or stopping.
    pub fn is_transient(&self) -> bool {
        matches!(self.code(), 409 | 429 | 500 | 503 | 504)
    }
}

/// How a patch body is to be read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PatchKind {
    /// RFC 7386 JSON merge patch.
    Merge,
    /// Kubernetes strategic merge patch.
    Strategic,
    /// RFC 6902 JSON patch.
    Json,
}

impl PatchKind {
    fn content_type(self) -> &'static str {
        match self {
            PatchKind::Merge => "application/merge-patch+json",
            PatchKind::Strategic => "application/strategic-merge-patch+json",
            PatchKind::Json => "application/json-patch+json",
        }
    }
}

/// What a delete asks for besides the name.
#[derive(Debug, Clone, Default)]
pub struct DeleteOptions {
    /// `Background`, `Foreground` or `Orphan`; the kind's default when unset.
    pub propagation: Option<&'static str>,
    /// Delete only the object with this uid (it may have been replaced under the same name).
    pub uid: Option<String>,
    /// Delete only at this resourceVersion.
    pub resource_version: Option<String>,
    pub grace_period_seconds: Option<i64>,
}

/// An API client for one internal caller (its user and field manager).
#[derive(Clone)]
pub struct Client {
    ctx: Arc<ApiContext>,
    user: UserInfo,
    /// The field manager of this caller's writes, also sent as its User-Agent.
    manager: Arc<str>,
}

impl Client {
    /// A client writing through `ctx` as `user`, recorded in managedFields as `manager`.
    pub fn new(ctx: Arc<ApiContext>, user: UserInfo, manager: &str) -> Client {
        Client {
            ctx,
            user,
            manager: manager.into(),
        }
    }

    /// The same context and user under another field manager.
    pub fn with_manager(&self, manager: &str) -> Client {
        Client {
            manager: manager.into(),
            ..self.clone()
        }
    }

    /// The local store (reads).
    pub fn store(&self) -> &Arc<Store> {
        &self.ctx.store
    }

    pub fn context(&self) -> &Arc<ApiContext> {
        &self.ctx
    }

    pub fn manager(&self) -> &str {
        &self.manager
    }

    /// The stored object of `info` at `namespace`/`name`, from the local store.
    pub fn get(&self, info: &ResourceInfo, namespace: &str, name: &str) -> Option<ObjectRef> {
        self.ctx
            .store
            .get(&ObjectKey::new(info.store_key(), namespace, name))
    }

    /// POST to the collection; `namespace` is ignored for cluster-scoped kinds.
    pub async fn create(
        &self,
        info: &ResourceInfo,
        namespace: &str,
        object: &Value,
    ) -> Result<Value, ClientError> {
        let path = collection_path(info, namespace);
        self.send(Method::POST, &path, "application/json", json_bytes(object))
            .await
    }

    /// PUT of the whole object (its `metadata.resourceVersion` is the precondition).
    pub async fn update(
        &self,
        info: &ResourceInfo,
        namespace: &str,
        name: &str,
        object: &Value,
    ) -> Result<Value, ClientError> {
        let path = object_path(info, namespace, name, None);
        self.send(Method::PUT, &path, "application/json", json_bytes(object))
            .await
    }

    /// PUT to the `status` subresource.
    pub async fn update_status(
        &self,
        info: &ResourceInfo,
        namespace: &str,
        name: &str,
        object: &Value,
    ) -> Result<Value, ClientError> {
        let path = object_path(info, namespace, name, Some("status"));
        self.send(Method::PUT, &path, "application/json", json_bytes(object))
            .await
    }

    /// PATCH of the object or of a subresource (`status`, `scale`).
    pub async fn patch(
        &self,
        info: &ResourceInfo,
        namespace: &str,
        name: &str,
        subresource: Option<&str>,
        kind: PatchKind,
        patch: &Value,
    ) -> Result<Value, ClientError> {
        let path = object_path(info, namespace, name, subresource);
        self.send(Method::PATCH, &path, kind.content_type(), json_bytes(patch))
            .await
    }

    /// Server-side apply of `object` under this client's field manager.
    pub async fn apply(
        &self,
        info: &ResourceInfo,
        namespace: &str,
        name: &str,
        object: &Value,
        force: bool,
    ) -> Result<Value, ClientError> {
        let mut path = object_path(info, namespace, name, None);
        if force {
            path.push_str("?force=true");
        }
        self.send(
            Method::PATCH,
            &path,
            "application/apply-patch+yaml",
            json_bytes(object),
        )
        .await
    }

    /// POST to a subresource of an object (`pods/binding`, `pods/eviction`).
    pub async fn create_subresource(
        &self,
        info: &ResourceInfo,
        namespace: &str,
        name: &str,
        subresource: &str,
        body: &Value,
    ) -> Result<Value, ClientError> {
        let path = object_path(info, namespace, name, Some(subresource));
        self.send(Method::POST, &path, "application/json", json_bytes(body))
            .await
    }

    /// DELETE; the answer is the object as it stands after the request (still present when
    /// finalizers or a grace period hold it) or a success `Status`.
    pub async fn delete(
        &self,
        info: &ResourceInfo,
        namespace: &str,
        name: &str,
        options: &DeleteOptions,
    ) -> Result<Value, ClientError> {
        let path = object_path(info, namespace, name, None);
        let mut body = serde_json::json!({"kind": "DeleteOptions", "apiVersion": "v1"});
        if let Some(p) = options.propagation {
            body["propagationPolicy"] = p.into();
        }
        if let Some(g) = options.grace_period_seconds {
            body["gracePeriodSeconds"] = g.into();
        }
        if options.uid.is_some() || options.resource_version.is_some() {
            let mut pre = serde_json::Map::new();
            if let Some(uid) = &options.uid {
                pre.insert("uid".into(), uid.clone().into());
            }
            if let Some(rv) = &options.resource_version {
                pre.insert("resourceVersion".into(), rv.clone().into());
            }
            body["preconditions"] = Value::Object(pre);
        }
        self.send(Method::DELETE, &path, "application/json", json_bytes(&body))
            .await
    }

    /// Sends one request through the API pipeline and reads the JSON answer.
    pub async fn send(
        &self,
        method: Method,
        path: &str,
        content_type: &str,
        body: Bytes,
    ) -> Result<Value, ClientError> {
        let path = with_field_manager(path, &method, &self.manager);
        let request = Request::builder()
            .method(method)
            .uri(path)
            .header(http::header::CONTENT_TYPE, content_type)
            .header(http::header::ACCEPT, "application/json")
            .header(http::header::USER_AGENT, &*self.manager)
            .body(Full::new(body))
            .map_err(|e| ClientError::Response {
                code: 0,
                detail: format!("building the request: {e}"),
            })?;
        let response = router::serve(self.ctx.clone(), request, self.user.clone()).await;
        let code = response.status().as_u16();
        let bytes = http_body_util::Limited::new(response.into_body(), MAX_RESPONSE)
            .collect()
            .await
            .map_err(|e| ClientError::Response {
                code,
                detail: e.to_string(),
            })?
            .to_bytes();
        let value: Value = serde_json::from_slice(&bytes).map_err(|e| ClientError::Response {
            code,
            detail: format!(
                "{e}: {}",
                String::from_utf8_lossy(&bytes[..bytes.len().min(200)])
            ),
        })?;
        if (200..300).contains(&code) {
            return Ok(value);
        }
        let text = |field: &str| value[field].as_str().unwrap_or_default().to_string();
        Err(ClientError::Status {
            code,
            reason: text("reason"),
            message: text("message"),
        })
    }
}

fn json_bytes(value: &Value) -> Bytes {
    Bytes::from(serde_json::to_vec(value).unwrap_or_default())
}

/// Adds `fieldManager=` to writes that record one (not to deletes, which record none).
fn with_field_manager(path: &str, method: &Method, manager: &str) -> String {
    if matches!(*method, Method::GET | Method::DELETE) || path.contains("fieldManager=") {
        return path.to_string();
    }
    let separator = if path.contains('?') { '&' } else { '?' };
    let encoded =
        percent_encoding::utf8_percent_encode(manager, percent_encoding::NON_ALPHANUMERIC);
    format!("{path}{separator}fieldManager={encoded}")
}

/// `/api/v1/namespaces/ns/pods` or `/apis/apps/v1/deployments` (cluster-wide or
/// cluster-scoped when `namespace` is empty).
pub fn collection_path(info: &ResourceInfo, namespace: &str) -> String {
    let prefix = if info.group.is_empty() {
        format!("/api/{}", info.version)
    } else {
        format!("/apis/{}/{}", info.group, info.version)
    };
    if info.namespaced && !namespace.is_empty() {
        format!("{prefix}/namespaces/{namespace}/{}", info.plural)
    } else {
        format!("{prefix}/{}", info.plural)
    }
}

/// The path of one object, or of one of its subresources.
pub fn object_path(
    info: &ResourceInfo,
    namespace: &str,
    name: &str,
    subresource: Option<&str>,
) -> String {
    let mut path = format!("{}/{name}", collection_path(info, namespace));
    if let Some(sub) = subresource {
        path.push('/');
        path.push_str(sub);
    }
    path
}

/// The identities internal callers act as: the users kube-apiserver's own components
/// authenticate as, authorized like any other caller.
pub mod identities {
    use crate::auth::user::{AUTHENTICATED, MASTERS};
    use crate::auth::UserInfo;

    /// kube-controller-manager's user. Upstream each controller acts as a service account
    /// of its own bound to its `system:controller:*` role; the in-process controllers share
    /// this one identity, so it is in `system:masters` (docs/guarantees.md, Authentication
    /// and authorization).
    pub fn controller_manager() -> UserInfo {
        UserInfo::new("system:kube-controller-manager", &[MASTERS, AUTHENTICATED])
    }

    /// kube-scheduler's user: what it may do is the default `system:kube-scheduler` and
    /// `system:volume-scheduler` ClusterRoles.
    pub fn scheduler() -> UserInfo {
        UserInfo::new("system:kube-scheduler", &[AUTHENTICATED])
    }

    /// The API server's own loopback user (bootstrap objects, identity Leases, endpoints).
    pub fn apiserver() -> UserInfo {
        UserInfo::new("system:apiserver", &[MASTERS, AUTHENTICATED])
    }
}

/// Contexts and clients for unit tests of code that writes through the client.
#[cfg(test)]
pub mod testing {
    use std::path::Path;
    use std::sync::Arc;

    use super::{identities, Client};
    use crate::api::{ApiContext, ApiSettings};
    use crate::kube::store::{Store, StoreConfig};
    use crate::kube::wal::{WalConfig, WalWriter};

    /// A single server's context over a fresh store and objects.wal in `dir`.
    pub fn wal_context(dir: &Path) -> Arc<ApiContext> {
        let store = Arc::new(Store::new(StoreConfig::default()));
        let (writer, _) = WalWriter::open(dir, store.clone(), WalConfig::default())
            .expect("a fresh objects.wal opens");
        Arc::new(ApiContext::new(
            store,
            Arc::new(writer),
            ApiSettings {
                server_name: "s1".into(),
                node_ips: vec!["127.0.0.1".parse().expect("an IP")],
                api_port: 6443,
                service_cidr: "10.43.0.0/16".into(),
            },
        ))
    }

    /// The API server's own client over `ctx`.
    pub fn apiserver_client(ctx: &Arc<ApiContext>) -> Client {
        Client::new(ctx.clone(), identities::apiserver(), "kube-apiserver")
    }
}

#[cfg(test)]
mod tests;
