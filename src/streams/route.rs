//! Where a stream request for a node goes: into this server's tunnel to the node, to the
//! server the Node's annotation names (relayed), or nowhere (a 503 naming the node).

use http::{Request, Response};
use hyper::body::Incoming;
use hyper::client::conn::http2::SendRequest;

use super::tunnel::NODE_ANNOTATION;
use crate::api::status::ApiError;
use crate::api::{ApiBody, ApiContext};
use crate::cluster::member::Member;
use crate::kube::object::ObjectKey;

/// Marks a request one server relayed to another: the receiver serves it from its own
/// tunnel or answers 503, never relays it again (no loops while annotations move).
pub const RELAYED: &str = "x-litek8s-relayed";

pub enum Route {
    /// The node's tunnel is here.
    Local(SendRequest<ApiBody>),
    /// The node is connected to server `server`, API address `addr`.
    Relay { server: String, addr: String },
    /// Not connected anywhere this server can reach.
    Unavailable(String),
}

/// Where a request for `node` goes (`relayed`: the request came from another server).
pub fn route(ctx: &ApiContext, node: &str, relayed: bool) -> Route {
    if let Some(tunnel) = ctx.streams.tunnels.get(node) {
        return Route::Local(tunnel);
    }
    let peers = ctx.streams.peers.get();
    let me = peers.map_or(&ctx.settings.server_name, |p| &p.node.me.name);
    if relayed {
        return Route::Unavailable(format!("node {node:?} is not connected to server {me:?}"));
    }
    let annotated = ctx
        .store
        .get(&ObjectKey::new("nodes", "", node))
        .and_then(|n| {
            n.value()["metadata"]["annotations"][NODE_ANNOTATION]
                .as_str()
                .map(str::to_string)
        });
    let (Some(server), Some(peers)) = (annotated, peers) else {
        return Route::Unavailable(format!("node {node:?} is not connected to any server"));
    };
    if server == *me {
        return Route::Unavailable(format!(
            "node {node:?} is not connected to any server (its last server, {me:?}, lost it)"
        ));
    }
    let addr = peers
        .node
        .metrics()
        .membership_config
        .nodes()
        .map(|(_, n)| Member::from_node(n))
        .find(|m| m.name == server)
        .map(|m| m.api)
        .filter(|a| !a.is_empty());
    match addr {
        Some(addr) => Route::Relay { server, addr },
        None => Route::Unavailable(format!(
            "node {node:?} is connected to server {server:?}, which is not a member of this cluster"
        )),
    }
}

/// Sends one request into a tunnel.
pub async fn send(
    tunnel: &mut SendRequest<ApiBody>,
    node: &str,
    req: Request<ApiBody>,
) -> Result<Response<Incoming>, ApiError> {
    let lost = |e: hyper::Error| {
        ApiError::ServiceUnavailable(format!("the tunnel to node {node:?} failed: {e}"))
    };
    tunnel.ready().await.map_err(lost)?;
    tunnel.send_request(req).await.map_err(lost)
}
