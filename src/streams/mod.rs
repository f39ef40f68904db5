//! Streams to a node's agent: `pods/log`, `pods/exec`, `pods/attach`, `pods/portforward` and
//! the pod, Service and node proxies, served by whichever server kubectl reaches, carried to
//! the agent of the pod's node.
//!
//! - `tunnel`: the agent's one long-lived connection to its server. The agent dials the
//!   server's API port with its node certificate and upgrades the HTTP/1.1 connection; on the
//!   upgraded bytes the roles swap: the server is the HTTP/2 *client* and the agent the HTTP/2
//!   *server*, so the server opens as many concurrent streams to the agent as requests need,
//!   with HTTP/2's own flow control per stream, and the agent needs no inbound port. The
//!   server keeps a registry node name → tunnel. The agent writes the name of the server it
//!   is connected to in its Node's [`tunnel::NODE_ANNOTATION`], and writes it again when it
//!   reconnects elsewhere after a failover.
//! - `route`: where a request for a node goes: this server's tunnel, another server named by
//!   the annotation (`relay`, over the cluster transport: HTTPS pinned to the cluster CA with
//!   the cluster secret, the user in `x-litek8s-forwarded-user` as `cluster::forward` does), or
//!   nowhere (503 naming the node). A relay passes kubectl's request through untouched,
//!   protocol upgrades included, so the relaying server decodes nothing.
//! - `logs`: `pods/log` (options checked here, the files read by the agent).
//! - `exec`: `pods/exec` and `pods/attach` over WebSocket (`websocket`: `v5.channel.k8s.io`,
//!   `v4.channel.k8s.io`) or SPDY/3.1 (`spdy`), turned into the tunnel's frames (`frame`).
//! - `portforward`: `pods/portforward` over SPDY/3.1 (`portforward.k8s.io`), directly or
//!   tunnelled in WebSocket messages (`SPDY/3.1+portforward.k8s.io`); each forwarded
//!   connection is one HTTP/2 stream of the tunnel.
//! - `proxy`: `pods/proxy`, `services/proxy` (to a ready endpoint's pod) and `nodes/proxy`,
//!   HTTP requests passed to the agent of the pod's node, which dials its own pods.
//! - `dial`: a byte stream to a Service's port for the server's own use (webhooks and
//!   aggregated API servers by Service reference), to a pod through its node's tunnel (relayed
//!   as an upgrade of a `pods/portforward` request between servers) or to a plain address;
//!   `service_http`: HTTPS with kept connections over it, answers read whole or streamed.
//!
//! Every request is authorized by `api::router` before it gets here (`get pods/log`, `create`
//! or `get pods/exec`, `create pods/portforward`, `get pods/proxy`…), like any other request.

pub(crate) mod dial;
pub(crate) mod exec;
pub(crate) mod frame;
pub(crate) mod logs;
pub(crate) mod portforward;
pub(crate) mod proxy;
pub(crate) mod relay;
pub(crate) mod route;
pub(crate) mod service_http;
pub(crate) mod spdy;
pub(crate) mod tunnel;
pub(crate) mod upgrade;
pub(crate) mod websocket;

use std::sync::{Arc, OnceLock};

use bytes::Bytes;
use http::{Request, Response};

use crate::api::status::ApiError;
use crate::api::{ApiBody, ApiContext, UserInfo};
use crate::cluster::node::ClusterNode;
use crate::http_client::TlsConfig;

/// How this server reaches the other servers of its cluster.
pub struct Peers {
    pub node: Arc<ClusterNode>,
    /// Pinned to the cluster CA.
    pub tls: TlsConfig,
}

/// The streams state of one server process.
#[derive(Default)]
pub struct Streams {
    pub tunnels: Arc<tunnel::Registry>,
    /// Set once on a cluster member; a single server relays nowhere.
    pub peers: OnceLock<Peers>,
}

/// Whether `path` is a stream subresource this module serves.
pub fn owns(path: &str) -> bool {
    target(path).is_some() || proxy::parse(path).is_some()
}

/// The namespace, pod and subresource of a stream path.
fn target(path: &str) -> Option<(&str, &str, &str)> {
    let rest = path.strip_prefix("/api/v1/namespaces/")?;
    let mut parts = rest.split('/');
    let (ns, pods, pod, sub) = (parts.next()?, parts.next()?, parts.next()?, parts.next()?);
    if pods != "pods" || parts.next().is_some() || ns.is_empty() || pod.is_empty() {
        return None;
    }
    matches!(sub, "log" | "exec" | "attach" | "portforward").then_some((ns, pod, sub))
}

/// Serves a stream request of `user` (already authorized).
pub async fn serve<B>(ctx: Arc<ApiContext>, req: Request<B>, user: UserInfo) -> Response<ApiBody>
where
    B: hyper::body::Body<Data = Bytes> + Send + 'static,
{
    let path = req.uri().path().to_string();
    if let Some(proxied) = proxy::parse(&path) {
        return proxy::serve(&ctx, proxied, req, &user)
            .await
            .unwrap_or_else(|e| e.into_response());
    }
    let Some((ns, pod, sub)) = target(&path) else {
        return ApiError::NoRoute.into_response();
    };
    let result = match sub {
        "log" => logs::serve(&ctx, ns, pod, req, &user).await,
        "attach" => exec::serve(&ctx, exec::Session::Attach, ns, pod, req, &user).await,
        "portforward" if dial::is_relayed_dial(&req) => {
            dial::serve_relayed(&ctx, ns, pod, req).await
        }
        "portforward" => portforward::serve(&ctx, ns, pod, req, &user).await,
        _ => exec::serve(&ctx, exec::Session::Exec, ns, pod, req, &user).await,
    };
    result.unwrap_or_else(|e| e.into_response())
}

/// Headers the server adds to requests into a tunnel: which pod instance and container.
pub const POD_UID_HEADER: &str = "x-litek8s-pod-uid";
pub const CONTAINER_HEADER: &str = "x-litek8s-container";

/// A pod as a stream request needs it.
pub struct PodTarget {
    pub pod: serde_json::Value,
    pub uid: String,
    pub node: String,
    pub container: String,
}

/// The pod `ns/name`, with the error kube-apiserver gives for a missing one.
fn find_pod(ctx: &ApiContext, ns: &str, name: &str) -> Result<serde_json::Value, ApiError> {
    ctx.store
        .get(&crate::kube::object::ObjectKey::new("pods", ns, name))
        .map(|o| o.value())
        .ok_or_else(|| {
            let info = crate::kube::resources::find("", "v1", "pods");
            match info {
                Some(info) => ApiError::not_found(info, name),
                None => ApiError::NoRoute,
            }
        })
}

/// The uid of `pod` and the node it is on (an unscheduled pod is a 400).
fn placement(pod: &serde_json::Value, name: &str) -> Result<(String, String), ApiError> {
    let node = pod["spec"]["nodeName"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    if node.is_empty() {
        return Err(ApiError::BadRequest(format!(
            "pod {name} does not have a host assigned"
        )));
    }
    let uid = pod["metadata"]["uid"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    Ok((uid, node))
}

/// The pod `ns/name` and the container the request names (or its only one), with the
/// errors kube-apiserver gives for a missing pod, an unscheduled one and a bad container.
pub fn pod_target(
    ctx: &ApiContext,
    ns: &str,
    name: &str,
    container: Option<&str>,
) -> Result<PodTarget, ApiError> {
    let pod = find_pod(ctx, ns, name)?;
    let names = |list: &str| -> Vec<String> {
        pod["spec"][list]
            .as_array()
            .map(|l| {
                l.iter()
                    .filter_map(|c| c["name"].as_str().map(str::to_string))
                    .collect()
            })
            .unwrap_or_default()
    };
    let main = names("containers");
    let container = match container.filter(|c| !c.is_empty()) {
        Some(c) => {
            let known = main.iter().any(|m| m == c)
                || names("initContainers").iter().any(|m| m == c)
                || names("ephemeralContainers").iter().any(|m| m == c);
            if !known {
                return Err(ApiError::BadRequest(format!(
                    "container {c} is not valid for pod {name}"
                )));
            }
            c.to_string()
        }
        None if main.len() == 1 => main[0].clone(),
        None => {
            return Err(ApiError::BadRequest(format!(
                "a container name must be specified for pod {name}, choose one of: [{}]",
                main.join(" ")
            )))
        }
    };
    let (uid, node) = placement(&pod, name)?;
    Ok(PodTarget {
        pod,
        uid,
        node,
        container,
    })
}

/// The status of `container` in `pod` (init containers included).
pub fn container_status<'a>(
    pod: &'a serde_json::Value,
    container: &str,
) -> Option<&'a serde_json::Value> {
    [
        "containerStatuses",
        "initContainerStatuses",
        "ephemeralContainerStatuses",
    ]
    .iter()
    .filter_map(|list| pod["status"][*list].as_array())
    .flatten()
    .find(|c| c["name"].as_str() == Some(container))
}

/// A body fed piece by piece through a channel (bounded: a slow reader holds the writer).
pub fn channel_body(rx: tokio::sync::mpsc::Receiver<Bytes>) -> ApiBody {
    use http_body_util::BodyExt;
    let stream = futures::stream::unfold(rx, |mut rx| async move {
        rx.recv()
            .await
            .map(|b| (Ok::<_, std::io::Error>(hyper::body::Frame::data(b)), rx))
    });
    http_body_util::StreamBody::new(stream).boxed()
}

/// Whether a request came relayed from another server.
fn relayed<B>(req: &Request<B>) -> bool {
    req.headers().contains_key(route::RELAYED)
}

/// The request into the tunnel for `target`: `path` on the agent, the pod's uid and the
/// container in headers, `body` streamed.
fn tunnel_request(
    method: http::Method,
    path_and_query: &str,
    target: &PodTarget,
    body: ApiBody,
) -> Result<Request<ApiBody>, ApiError> {
    Request::builder()
        .method(method)
        .uri(format!("http://{}{path_and_query}", target.node))
        .header(POD_UID_HEADER, &target.uid)
        .header(CONTAINER_HEADER, &target.container)
        .body(body)
        .map_err(|e| ApiError::BadRequest(format!("bad stream request: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_pod_log_and_exec_paths_are_streams() {
        assert_eq!(
            target("/api/v1/namespaces/default/pods/web/log"),
            Some(("default", "web", "log"))
        );
        assert!(owns("/api/v1/namespaces/d/pods/w/exec"));
        assert!(owns("/api/v1/namespaces/d/pods/w/attach"));
        assert!(owns("/api/v1/namespaces/d/pods/w/portforward"));
        assert!(!owns("/api/v1/namespaces/d/pods/w/status"));
        assert!(!owns("/api/v1/namespaces/d/pods/w/log/x"));
        assert!(!owns("/api/v1/namespaces/d/services/w/log"));
        assert!(!owns("/api/v1/namespaces//pods/w/log"));
    }
}
