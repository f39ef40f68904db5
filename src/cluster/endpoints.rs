//! The cluster endpoints of the API port, on every server: `/cacerts` for joiners (public: a
//! joiner checks its hash against the token), `/litek8s/v1/apiservers` for load balancers and
//! node agents (public: the servers' API addresses, nothing else), and the secret-authenticated
//! node credential (`node_credential`: signed here, by whichever server is asked). On cluster
//! members also the join bundle, join, member list and removal, which run on the leader
//! (forwarded over the Raft listener when this member follows).

use std::sync::Arc;
use std::time::Duration;

use http::{header, Request, Response, StatusCode};
use http_body_util::{BodyExt, Limited};
use hyper::body::Incoming;

use super::join_token::ClusterSecret;
use super::member::Member;
use super::membership;
use super::node::{ClusterNode, Leadership};
use super::node_credential::{
    self, NodeCredential, NodeCredentialRequest, ServingCertificate, ServingRequest, NODES_GROUP,
    NODE_USER_PREFIX,
};
use super::peer::PeerError;
use super::protocol::{
    api_paths, paths, ApiServers, JoinBundle, JoinRequest, MembershipReply, RemoveRequest,
};
use crate::api::{response, ApiBody, UserInfo};

/// How long a join may take (a learner catching up with a large store included).
const JOIN_TIMEOUT: Duration = Duration::from_secs(90);

/// What the endpoints serve from.
pub struct ClusterEndpoints {
    pub servers: Servers,
    /// The join secret: this cluster's, or a single server's own.
    pub secret: ClusterSecret,
    pub ca_cert: String,
    pub ca_key: String,
    pub admin_token: String,
}

/// Which servers there are.
pub enum Servers {
    /// A single server, reached at this API address.
    Single { api: String },
    /// A cluster member: the membership says.
    Member(Arc<ClusterNode>),
}

fn text(status: StatusCode, message: &str) -> Response<ApiBody> {
    response::with_type(status, "text/plain; charset=utf-8", format!("{message}\n"))
}

fn json<T: serde::Serialize>(value: &T) -> Response<ApiBody> {
    match serde_json::to_vec(value) {
        Ok(bytes) => response::with_type(StatusCode::OK, "application/json", bytes),
        Err(e) => text(StatusCode::INTERNAL_SERVER_ERROR, &e.to_string()),
    }
}

impl ClusterEndpoints {
    /// Whether `path` is one of these endpoints.
    pub fn owns(path: &str) -> bool {
        path == api_paths::CACERTS
            || (path.starts_with("/litek8s/v1/") && path != api_paths::NODE_SERVING_CERTIFICATE)
    }

    /// Answers a request for one of these endpoints (`owns` was true). `tls` says whether the
    /// connection is HTTPS: only `/cacerts` is served over plain HTTP.
    pub async fn handle(&self, req: Request<Incoming>, tls: bool) -> Response<ApiBody> {
        let path = req.uri().path().to_string();
        if path == api_paths::CACERTS {
            return response::with_type(
                StatusCode::OK,
                "application/x-pem-file",
                self.ca_cert.clone(),
            );
        }
        if path == api_paths::APISERVERS {
            return json(&self.api_servers());
        }
        if !tls {
            return text(StatusCode::NOT_FOUND, "use HTTPS");
        }
        let authorized = req
            .headers()
            .get(header::AUTHORIZATION)
            .and_then(|v| v.as_bytes().strip_prefix(b"Bearer "))
            .is_some_and(|token| self.secret.matches(token));
        if !authorized {
            return text(StatusCode::UNAUTHORIZED, "the cluster secret is required");
        }
        let body = match Limited::new(req.into_body(), 64 << 10).collect().await {
            Ok(collected) => collected.to_bytes(),
            Err(e) => return text(StatusCode::BAD_REQUEST, &format!("reading the body: {e}")),
        };
        if path == api_paths::NODE_CREDENTIAL {
            return match serde_json::from_slice::<NodeCredentialRequest>(&body) {
                Ok(request) => self.node_credential(&request),
                Err(e) => text(
                    StatusCode::BAD_REQUEST,
                    &format!("node credential request: {e}"),
                ),
            };
        }
        let node = match &self.servers {
            Servers::Member(node) => node,
            Servers::Single { .. } => {
                return text(
                    StatusCode::NOT_FOUND,
                    "this is a single server, not a cluster member (start it with --cluster-init to form a cluster)",
                )
            }
        };
        match path.as_str() {
            api_paths::BUNDLE => json(&self.bundle(node)),
            api_paths::JOIN => match serde_json::from_slice::<JoinRequest>(&body) {
                Ok(request) => json(&on_leader(node, paths::JOIN, &request, JOIN_TIMEOUT).await),
                Err(e) => text(StatusCode::BAD_REQUEST, &format!("join request: {e}")),
            },
            api_paths::MEMBERS => {
                json(&on_leader(node, paths::MEMBERS, &(), Duration::from_secs(5)).await)
            }
            api_paths::REMOVE => match serde_json::from_slice::<RemoveRequest>(&body) {
                Ok(request) => json(&on_leader(node, paths::REMOVE, &request, JOIN_TIMEOUT).await),
                Err(e) => text(StatusCode::BAD_REQUEST, &format!("remove request: {e}")),
            },
            _ => text(StatusCode::NOT_FOUND, "no such endpoint"),
        }
    }

    /// The cluster member behind these endpoints, if this server is one.
    pub fn node(&self) -> Option<&Arc<ClusterNode>> {
        match &self.servers {
            Servers::Member(node) => Some(node),
            Servers::Single { .. } => None,
        }
    }

    /// A node agent's serving certificate, for `user`, the authenticated caller: only a
    /// node (`system:node:<name>` in `system:nodes`) gets one, for its own name.
    pub async fn serving_certificate(
        &self,
        req: Request<Incoming>,
        user: &UserInfo,
    ) -> Response<ApiBody> {
        let node_name = match user.name.strip_prefix(NODE_USER_PREFIX) {
            Some(name) if user.groups.iter().any(|g| g == NODES_GROUP) => name.to_string(),
            _ => {
                return text(
                    StatusCode::FORBIDDEN,
                    &format!(
                        "{:?} is not a node: only a node certificate gets a serving certificate",
                        user.name
                    ),
                )
            }
        };
        let body = match Limited::new(req.into_body(), 64 << 10).collect().await {
            Ok(collected) => collected.to_bytes(),
            Err(e) => return text(StatusCode::BAD_REQUEST, &format!("reading the body: {e}")),
        };
        let request = match serde_json::from_slice::<ServingRequest>(&body) {
            Ok(request) => request,
            Err(e) => {
                return text(
                    StatusCode::BAD_REQUEST,
                    &format!("serving certificate request: {e}"),
                )
            }
        };
        match node_credential::sign_serving(&self.ca_cert, &self.ca_key, &node_name, &request) {
            Ok(certificate) => {
                tracing::info!(
                    component = "server",
                    node = %node_name,
                    addresses = ?request.addresses,
                    "issued a node serving certificate"
                );
                json(&ServingCertificate { certificate })
            }
            Err(e) if e.is_bad_request() => text(StatusCode::BAD_REQUEST, &e.to_string()),
            Err(e) => {
                tracing::error!(component = "server", "{e}");
                text(StatusCode::INTERNAL_SERVER_ERROR, &e.to_string())
            }
        }
    }

    /// A node agent's certificate (see `node_credential`).
    fn node_credential(&self, request: &NodeCredentialRequest) -> Response<ApiBody> {
        match node_credential::sign(&self.ca_cert, &self.ca_key, request) {
            Ok(certificate) => {
                tracing::info!(
                    component = "server",
                    node = %request.node_name,
                    "issued a node certificate"
                );
                json(&NodeCredential {
                    certificate,
                    ca: self.ca_cert.clone(),
                    servers: self.api_servers().servers,
                })
            }
            Err(e) if e.is_bad_request() => text(StatusCode::BAD_REQUEST, &e.to_string()),
            Err(e) => {
                tracing::error!(component = "server", "{e}");
                text(StatusCode::INTERNAL_SERVER_ERROR, &e.to_string())
            }
        }
    }

    /// The API addresses of the servers: a single server's own, or the members in this
    /// member's view of the membership (voters and learners; a balancer checks each one's
    /// /readyz before using it).
    fn api_servers(&self) -> ApiServers {
        let node = match &self.servers {
            Servers::Single { api } => {
                return ApiServers {
                    servers: vec![api.clone()],
                }
            }
            Servers::Member(node) => node,
        };
        let metrics = node.metrics();
        let mut servers: Vec<String> = metrics
            .membership_config
            .nodes()
            .map(|(_, n)| Member::from_node(n).api)
            .filter(|api| !api.is_empty())
            .collect();
        servers.sort();
        servers.dedup();
        ApiServers { servers }
    }

    fn bundle(&self, node: &ClusterNode) -> JoinBundle {
        let metrics = node.metrics();
        JoinBundle {
            ca_cert: self.ca_cert.clone(),
            ca_key: self.ca_key.clone(),
            admin_token: self.admin_token.clone(),
            members: metrics
                .membership_config
                .nodes()
                .map(|(_, n)| Member::from_node(n))
                .collect(),
        }
    }
}

/// Runs a membership request on the leader: here if this member leads, else forwarded.
async fn on_leader<T: serde::Serialize>(
    node: &ClusterNode,
    path: &str,
    request: &T,
    timeout: Duration,
) -> MembershipReply {
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        let remaining = deadline.saturating_duration_since(tokio::time::Instant::now());
        match node.wait_for_leader(remaining).await {
            Leadership::Unknown => return MembershipReply::NotLeader,
            Leadership::Me if path == paths::MEMBERS => {
                return MembershipReply::Done(membership::view(node))
            }
            Leadership::Me | Leadership::Other { .. } => {}
        }
        let target = match node.leadership() {
            Leadership::Me => node.me.raft.clone(),
            Leadership::Other { member, .. } => member.raft,
            Leadership::Unknown => continue,
        };
        let reply: Result<MembershipReply, PeerError> = node
            .peers
            .post(
                &target,
                path,
                request,
                remaining.max(Duration::from_secs(1)),
            )
            .await;
        match reply {
            Ok(MembershipReply::NotLeader) | Err(PeerError::Unreachable { .. })
                if tokio::time::Instant::now() < deadline =>
            {
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            Ok(reply) => return reply,
            Err(e) => return MembershipReply::Refused(e.to_string()),
        }
    }
}
