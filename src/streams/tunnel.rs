//! The server's end of the agents' tunnels (module doc of `streams`): the upgrade that turns
//! an agent's HTTP/1.1 request into an HTTP/2 connection on which this server is the client,
//! and the registry of those connections by node name.
//!
//! A node has at most one tunnel per server: a new one replaces the old (an agent that
//! reconnected before the server noticed its old connection died). A tunnel leaves the
//! registry when its connection ends, unless a newer one replaced it already.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use http::{header, HeaderValue, Request, Response, StatusCode};
use hyper::client::conn::http2::SendRequest;
use hyper_util::rt::{TokioExecutor, TokioTimer};
use parking_lot::Mutex;

use crate::api::status::ApiError;
use crate::api::{response, ApiBody, UserInfo};

/// Where an agent opens its tunnel (on the API port).
pub const PATH: &str = "/litek8s/node-tunnel";
/// The `Upgrade` token of a tunnel.
pub const UPGRADE: &str = "litek8s-tunnel";
/// The server's name, in the answer to a tunnel request.
pub const SERVER_HEADER: &str = "x-litek8s-server";
/// The Node annotation naming the server the node's agent is connected to.
pub const NODE_ANNOTATION: &str = "litek8s.io/tunnel-server";
/// How often an idle tunnel is pinged, and how long a ping may go unanswered: a server
/// that vanished without closing the connection is noticed within about this.
pub const KEEPALIVE: Duration = Duration::from_secs(10);
/// The HTTP/2 receive windows of a tunnel, each end's for what it reads (the agent: stdin and
/// port-forward uploads; the server: output, downloads, logs). A stream sends at most a window
/// per round trip, and on a busy 2-core machine a "round trip" is as long as the other end
/// waits for a core: hyper's defaults (1–2 MiB per stream) capped a single exec at about
/// 200 MiB/s there. A window is a bound on what a stream whose reader stalls may buffer, not
/// memory held by idle streams.
pub const STREAM_WINDOW: u32 = 8 << 20;
pub const CONNECTION_WINDOW: u32 = 32 << 20;

/// The user name prefix of node certificates.
const NODE_USER_PREFIX: &str = "system:node:";
const NODES_GROUP: &str = "system:nodes";

/// The tunnels this server holds.
#[derive(Default)]
pub struct Registry {
    next: AtomicU64,
    nodes: Mutex<HashMap<String, (u64, SendRequest<ApiBody>)>>,
}

impl Registry {
    /// The tunnel of `node`, if it is connected here and still open.
    pub fn get(&self, node: &str) -> Option<SendRequest<ApiBody>> {
        let nodes = self.nodes.lock();
        let (_, sender) = nodes.get(node)?;
        (!sender.is_closed()).then(|| sender.clone())
    }

    fn insert(&self, node: &str, sender: SendRequest<ApiBody>) -> u64 {
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        self.nodes.lock().insert(node.to_string(), (id, sender));
        id
    }

    fn remove(&self, node: &str, id: u64) {
        let mut nodes = self.nodes.lock();
        if nodes.get(node).is_some_and(|(current, _)| *current == id) {
            nodes.remove(node);
        }
    }
}

/// The node a user is, for a node certificate (`system:node:<name>` in `system:nodes`).
fn node_of(user: &UserInfo) -> Option<&str> {
    let name = user.name.strip_prefix(NODE_USER_PREFIX)?;
    (user.groups.iter().any(|g| g == NODES_GROUP) && !name.is_empty()).then_some(name)
}

/// Answers an agent's tunnel request: 101, then the tunnel runs on the upgraded connection
/// until it closes.
pub fn accept<B: Send + 'static>(
    registry: std::sync::Arc<Registry>,
    mut req: Request<B>,
    user: &UserInfo,
    server_name: &str,
) -> Response<ApiBody> {
    let Some(node) = node_of(user).map(str::to_string) else {
        return ApiError::Forbidden(format!(
            "{:?} is not a node: only nodes open tunnels",
            user.name
        ))
        .into_response();
    };
    let asked = req
        .headers()
        .get(header::UPGRADE)
        .is_some_and(|v| v.as_bytes().eq_ignore_ascii_case(UPGRADE.as_bytes()));
    if !asked {
        return ApiError::BadRequest(format!("a tunnel needs `Upgrade: {UPGRADE}`"))
            .into_response();
    }
    let upgrade = hyper::upgrade::on(&mut req);
    tokio::spawn(async move {
        let io = match upgrade.await {
            Ok(io) => io,
            Err(e) => {
                tracing::warn!(component = "streams", %node, "tunnel upgrade failed: {e}");
                return;
            }
        };
        let handshake = hyper::client::conn::http2::Builder::new(TokioExecutor::new())
            .timer(TokioTimer::new())
            .keep_alive_interval(KEEPALIVE)
            .keep_alive_timeout(KEEPALIVE)
            .keep_alive_while_idle(true)
            .initial_stream_window_size(STREAM_WINDOW)
            .initial_connection_window_size(CONNECTION_WINDOW)
            .handshake::<_, ApiBody>(io)
            .await;
        let (sender, connection) = match handshake {
            Ok(pair) => pair,
            Err(e) => {
                tracing::warn!(component = "streams", %node, "tunnel handshake failed: {e}");
                return;
            }
        };
        let id = registry.insert(&node, sender);
        tracing::info!(component = "streams", %node, "node connected its tunnel");
        let result = connection.await;
        registry.remove(&node, id);
        match result {
            Ok(()) => tracing::info!(component = "streams", %node, "tunnel closed"),
            Err(e) => tracing::info!(component = "streams", %node, "tunnel ended: {e}"),
        }
    });
    let mut resp = Response::new(response::body(bytes::Bytes::new()));
    *resp.status_mut() = StatusCode::SWITCHING_PROTOCOLS;
    let headers = resp.headers_mut();
    headers.insert(header::CONNECTION, HeaderValue::from_static("upgrade"));
    headers.insert(header::UPGRADE, HeaderValue::from_static(UPGRADE));
    if let Ok(name) = HeaderValue::from_str(server_name) {
        headers.insert(SERVER_HEADER, name);
    }
    resp
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_node_certificates_open_tunnels() {
        let node = UserInfo::new("system:node:n1", &["system:nodes"]);
        assert_eq!(node_of(&node), Some("n1"));
        assert_eq!(node_of(&UserInfo::new("system:node:n1", &["x"])), None);
        assert_eq!(node_of(&UserInfo::new("alice", &["system:nodes"])), None);
    }
}
