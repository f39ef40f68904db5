//! Per-request policy of the transport: authenticate, start the request's audit record
//! (`audit`), then hand the request to the API router with its user (`system:anonymous` for an HTTPS request without credentials; the
//! router authorizes it), or answer the few things the transport decides itself (401 for a
//! credential that does not check out, 404 for plain HTTP outside the health endpoints), as
//! `ApiError`s that `api::status` turns into a `Status`.

use std::convert::Infallible;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;

use futures::FutureExt;

use http::{Request, Response};
use hyper::body::Incoming;

use super::authn::{Authenticated, Authenticator, Connection};
use crate::api::status::ApiError;
use crate::api::{router, ApiBody, ApiContext, UserInfo};
use crate::audit::request::Carried;
use crate::audit::{Auditor, TeeBody};
use crate::cluster::endpoints::ClusterEndpoints;
use crate::cluster::forward::{self, Routed};
use crate::cluster::node::Leadership;
use crate::cluster::protocol::api_paths;
use crate::streams::tunnel;

/// What every connection task shares.
pub struct Dispatch {
    pub ctx: Arc<ApiContext>,
    pub authn: Authenticator,
    /// The cluster endpoints of the API port (`/cacerts`, the server list, node credentials;
    /// joins on cluster members).
    pub cluster: Arc<ClusterEndpoints>,
    /// The audit log, when one is configured.
    pub audit: Option<Arc<Auditor>>,
}

impl Dispatch {
    /// Answers one request. Never fails: every outcome is an HTTP response.
    pub async fn handle(
        self: Arc<Self>,
        conn: Arc<Connection>,
        req: Request<Incoming>,
    ) -> Result<Response<ApiBody>, Infallible> {
        if ClusterEndpoints::owns(req.uri().path()) {
            return Ok(self.cluster.handle(req, conn.tls).await);
        }
        let node = self.cluster.node();
        // A write a follower forwarded (the cluster secret vouches for the user). The
        // follower audits it (crate::audit), with the annotations made here.
        if let (Some(node), true) = (node, conn.tls) {
            if let Some(user) = forward::forwarded_user(node, &req) {
                let carried = Carried::default();
                let mut req = req;
                req.extensions_mut().insert(carried.clone());
                let mut resp = router::serve(self.ctx.clone(), req, user).await;
                forward::stamp_leader_version(node, &mut resp);
                forward::carry_annotations(&carried, &mut resp);
                return Ok(resp);
            }
        }
        // Only a peer holding the cluster secret may say who a request is from.
        if req.headers().contains_key(forward::FORWARDED_USER) {
            tracing::warn!(
                component = "server",
                path = %req.uri().path(),
                "ignored a forwarded-user header that did not come with the cluster secret"
            );
        }
        // Health endpoints answer everyone the same way, credentials or not.
        if let Some(resp) = router::serve_anonymous(self.ctx.clone(), &req).await {
            return Ok(resp);
        }
        let user = match self.authn.authenticate(&conn, &req) {
            Authenticated::User(user) => user,
            Authenticated::Anonymous if conn.tls => UserInfo::anonymous(),
            Authenticated::Anonymous => return Ok(ApiError::HttpsRequired.into_response()),
            Authenticated::Refused => {
                // Recorded as kube-apiserver records failed authentication: no user.
                let resp = ApiError::Unauthorized.into_response();
                let tracker = self
                    .audit
                    .as_ref()
                    .and_then(|audit| audit.begin(&UserInfo::default(), &req, conn.peer));
                return Ok(match tracker {
                    Some(tracker) => tracker.wrap_response(resp),
                    None => resp,
                });
            }
        };
        if req.uri().path() == api_paths::NODE_SERVING_CERTIFICATE {
            return Ok(self.cluster.serving_certificate(req, &user).await);
        }
        if req.uri().path() == tunnel::PATH {
            let name = node.map_or(&self.ctx.settings.server_name, |n| &n.me.name);
            return Ok(tunnel::accept(
                self.ctx.streams.tunnels.clone(),
                req,
                &user,
                name,
            ));
        }
        let Some(tracker) = self
            .audit
            .as_ref()
            .and_then(|audit| audit.begin(&user, &req, conn.peer))
        else {
            return Ok(self.serve(req.map(TeeBody::plain), user).await);
        };
        let served = AssertUnwindSafe(self.serve(tracker.wrap_request(req), user))
            .catch_unwind()
            .await;
        match served {
            Ok(resp) => Ok(tracker.wrap_response(resp)),
            Err(panic) => {
                let message = panic
                    .downcast_ref::<&str>()
                    .map(|s| s.to_string())
                    .or_else(|| panic.downcast_ref::<String>().cloned())
                    .unwrap_or_default();
                tracker.panicked(&message);
                std::panic::resume_unwind(panic)
            }
        }
    }

    /// Serves an authenticated request here, or forwards a write to the leader.
    async fn serve(&self, req: Request<TeeBody<Incoming>>, user: UserInfo) -> Response<ApiBody> {
        if let Some(node) = self.cluster.node() {
            if forward::is_forwardable_write(&req) && node.leadership() != Leadership::Me {
                return match forward::route(node, req, &user).await {
                    Routed::Answered(resp) => resp,
                    Routed::Local(req) => router::serve(self.ctx.clone(), req, user).await,
                };
            }
        }
        router::serve(self.ctx.clone(), req, user).await
    }
}
