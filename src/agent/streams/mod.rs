//! The agent's end of the streams (`crate::streams` is the server's): the tunnel it keeps
//! to its server (`tunnel`), on which it serves, as an HTTP/2 server, what the server asks
//! for its pods: a container's log (`logs`, its lines read with a bound by `log_lines`, a
//! followed one woken by `log_wake`), exec sessions (`exec`), attach sessions (`attach`),
//! connections to a pod's ports (`portforward`), HTTP requests to a pod (`proxy`), and the
//! node's own endpoints (`node`: `healthz`, the stats summary of `stats`, `metrics/resource`,
//! `pods`, `containerLogs`).
//!
//! The same router ([`handle`]) serves the node port (`node_port`, kubelet's 10250 for tools
//! that dial nodes directly), after that port authenticated and authorized the caller through
//! the API server (`webhook`); requests through the tunnel come already authorized by the
//! server. kubelet's streaming endpoints on that port (`/exec`, `/attach`, `/portForward`)
//! speak kubectl's protocols themselves (`node_streams`).
//!
//! Requests name the pod by namespace and name in the path and by uid in a header; the agent
//! serves only what it finds on this node for that exact pod instance (its log directory,
//! its running container), so a forged path reaches nothing of another node or pod.

pub(crate) mod attach;
pub(crate) mod exec;
pub(crate) mod log_lines;
pub(crate) mod log_wake;
pub(crate) mod logs;
pub(crate) mod node;
pub(crate) mod node_port;
pub(crate) mod node_streams;
pub(crate) mod portforward;
pub(crate) mod proxy;
pub(crate) mod stats;
pub(crate) mod tunnel;
pub(crate) mod webhook;

use std::convert::Infallible;
use std::sync::Arc;

use bytes::Bytes;
use http::{Request, Response, StatusCode};
use http_body_util::BodyExt;
use hyper::body::Incoming;
use tokio::sync::mpsc;

use super::runtime::layout::path_component;
use super::runtime::PodRef;
use super::runtime::Runtime;
use super::sandbox::Sandboxes;
use crate::api::request::query_pairs;
use crate::api::ApiBody;
use crate::streams::{CONTAINER_HEADER, POD_UID_HEADER};

/// What the agent's stream handlers share.
pub struct StreamsDeps {
    pub runtime: Arc<Runtime>,
    /// Where a pod's network namespace and IP are (port-forward, proxies).
    pub sandboxes: Arc<Sandboxes>,
    pub node_name: String,
}

/// A Status answer (the server passes it to the client as it is).
fn status(code: StatusCode, reason: &str, message: &str) -> Response<ApiBody> {
    let body = serde_json::json!({
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
        "code": code.as_u16(),
    });
    let mut resp = Response::new(crate::api::response::body(body.to_string()));
    *resp.status_mut() = code;
    resp.headers_mut().insert(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_static("application/json"),
    );
    resp
}

/// The pod and container a request is for, checked to be usable as path components (a
/// port-forward is for the pod: it names no container).
fn pod_of(
    req: &Request<Incoming>,
    ns: &str,
    name: &str,
    needs_container: bool,
) -> Result<(PodRef, String), String> {
    let header = |h: &str| {
        req.headers()
            .get(h)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
            .to_string()
    };
    let pod = PodRef {
        uid: header(POD_UID_HEADER),
        namespace: ns.to_string(),
        name: name.to_string(),
    };
    let container = header(CONTAINER_HEADER);
    for (what, v) in [
        ("pod uid", &pod.uid),
        ("namespace", &pod.namespace),
        ("pod name", &pod.name),
        ("container", &container),
    ] {
        if what == "container" && !needs_container {
            continue;
        }
        if let Err(e) = path_component(what, v) {
            return Err(e.to_string());
        }
    }
    Ok((pod, container))
}

/// Answers one request from the server.
pub async fn handle(
    deps: Arc<StreamsDeps>,
    req: Request<Incoming>,
) -> Result<Response<ApiBody>, Infallible> {
    let path = req.uri().path().to_string();
    if let Some(rest) = path.strip_prefix("/nodeproxy") {
        return Ok(node::serve(&deps, &req, rest));
    }
    if node::owns(&path) {
        return Ok(node::serve(&deps, &req, &path));
    }
    let mut parts = path.trim_start_matches('/').splitn(5, '/');
    let (kind, ns, name) = (
        parts.next().unwrap_or(""),
        parts.next().unwrap_or(""),
        parts.next().unwrap_or(""),
    );
    let needs_container = !matches!(kind, "portforward" | "podproxy");
    let (pod, container) = match pod_of(&req, ns, name, needs_container) {
        Ok(found) => found,
        Err(why) => return Ok(status(StatusCode::BAD_REQUEST, "BadRequest", &why)),
    };
    let boxed = |req: Request<Incoming>| req.map(|b| b.map_err(std::io::Error::other).boxed());
    Ok(match kind {
        "logs" => serve_logs(&deps, &req, &pod, &container),
        "exec" => exec::serve(&deps, boxed(req), &pod, &container).await,
        "attach" => attach::serve(&deps, boxed(req), &pod, &container).await,
        "portforward" => portforward::serve(&deps, boxed(req), &pod).await,
        "podproxy" => {
            let port = parts.next().unwrap_or("").to_string();
            let rest = format!(
                "/{}{}",
                parts.next().unwrap_or(""),
                req.uri()
                    .query()
                    .map(|q| format!("?{q}"))
                    .unwrap_or_default()
            );
            proxy::pod(&deps, req, &pod, &port, &rest).await
        }
        _ => status(StatusCode::NOT_FOUND, "NotFound", "no such stream"),
    })
}

fn serve_logs(
    deps: &StreamsDeps,
    req: &Request<Incoming>,
    pod: &PodRef,
    container: &str,
) -> Response<ApiBody> {
    let pairs = query_pairs(req.uri().query().unwrap_or(""));
    let opts = logs::LogOptions::from_query(&pairs, chrono::Utc::now());
    let dir = deps.runtime.layout().pod_log_dir(pod).join(container);
    let (restart, file) = match logs::choose_file(&dir, opts.previous) {
        Ok(found) => found,
        Err(e) => {
            return status(
                StatusCode::NOT_FOUND,
                "NotFound",
                &format!("container {container:?} in pod {:?}: {e}", pod.name),
            )
        }
    };
    let (tx, rx) = mpsc::channel::<Bytes>(logs::CHANNEL);
    let follow = (opts.follow && !opts.previous).then(|| logs::Follow {
        runtime: deps.runtime.clone(),
        uid: pod.uid.clone(),
        container: container.to_string(),
    });
    tokio::task::spawn_blocking(move || {
        if let Err(e) = logs::stream(&file, restart, &opts, follow, tx) {
            tracing::warn!(component = "streams", "serving a log: {e}");
        }
    });
    let mut resp = Response::new(crate::streams::channel_body(rx));
    resp.headers_mut().insert(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_static("text/plain"),
    );
    resp
}
