//! kubelet's streaming endpoints on the node port: `/exec/{ns}/{pod}/{container}?command=…`,
//! `/attach/{ns}/{pod}/{container}` and `/portForward/{ns}/{pod}` (and kubelet's forms with
//! the pod's uid before the container, `/exec/{ns}/{pod}/{uid}/{container}`, the uid then
//! having to match), for tools that dial nodes directly. The caller speaks kubectl's own
//! protocols here: WebSocket (`v5.channel.k8s.io`, `v4.channel.k8s.io`) or SPDY/3.1 for exec
//! and attach, `portforward.k8s.io` over SPDY or inside WebSocket for port-forward.
//!
//! Through the tunnel a server speaks those protocols and the agent only sees the channel
//! frames (`crate::streams::frame`). Here the agent runs the server's protocol half itself
//! (`crate::streams::exec::accept`, `crate::streams::portforward::accept`) and joins it to the
//! same session code the tunnel reaches (`exec`, `attach`, `portforward`), so a command, an
//! attach or a forwarded connection behaves the same whichever way it came in.
//!
//! The node port authorized the caller before (`nodes/proxy`: `create` for a POST, `get` for a
//! GET, as kubelet maps them); the pod is looked up among this node's sandboxes by namespace
//! and name, never taken from a header.

use std::sync::Arc;

use bytes::Bytes;
use http::{Method, Request, Response, StatusCode};
use http_body_util::BodyExt;
use hyper::body::Incoming;
use tokio::sync::mpsc;

use super::{attach, exec, node, portforward, status, StreamsDeps};
use crate::agent::runtime::PodRef;
use crate::api::request::query_pairs;
use crate::api::ApiBody;
use crate::streams::exec as exec_protocol;
use crate::streams::portforward as forward_protocol;
use crate::streams::{channel_body, spdy};

/// The endpoints kubelet serves under these prefixes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Exec,
    Attach,
    PortForward,
}

/// One parsed path: the kind, the pod, kubelet's optional uid and the container (none for a
/// port-forward).
#[derive(Debug, PartialEq, Eq)]
struct Target<'a> {
    kind: Kind,
    namespace: &'a str,
    pod: &'a str,
    uid: Option<&'a str>,
    container: Option<&'a str>,
}

fn parse(path: &str) -> Option<Target<'_>> {
    let mut parts = path.strip_prefix('/')?.split('/');
    let kind = match parts.next()? {
        "exec" => Kind::Exec,
        "attach" => Kind::Attach,
        "portForward" => Kind::PortForward,
        _ => return None,
    };
    let (namespace, pod) = (parts.next()?, parts.next()?);
    let rest: Vec<&str> = parts.collect();
    if namespace.is_empty() || pod.is_empty() || rest.iter().any(|p| p.is_empty()) {
        return None;
    }
    let (uid, container) = match (kind, rest.as_slice()) {
        (Kind::PortForward, []) => (None, None),
        (Kind::PortForward, [uid]) => (Some(*uid), None),
        (Kind::Exec | Kind::Attach, [container]) => (None, Some(*container)),
        (Kind::Exec | Kind::Attach, [uid, container]) => (Some(*uid), Some(*container)),
        _ => return None,
    };
    Some(Target {
        kind,
        namespace,
        pod,
        uid,
        container,
    })
}

/// Whether `path` is one of kubelet's streaming endpoints.
pub fn owns(path: &str) -> bool {
    ["/exec/", "/attach/", "/portForward/"]
        .iter()
        .any(|p| path.starts_with(p))
}

fn bad_request(message: &str) -> Response<ApiBody> {
    status(StatusCode::BAD_REQUEST, "BadRequest", message)
}

/// Serves one request for kubelet's streaming endpoints.
pub async fn serve(deps: Arc<StreamsDeps>, mut req: Request<Incoming>) -> Response<ApiBody> {
    if req.method() != Method::GET && req.method() != Method::POST {
        return status(
            StatusCode::METHOD_NOT_ALLOWED,
            "MethodNotAllowed",
            "exec, attach and port-forward take GET or POST",
        );
    }
    let path = req.uri().path().to_string();
    let Some(target) = parse(&path) else {
        return status(StatusCode::NOT_FOUND, "NotFound", "no such stream");
    };
    let found = node::find_pod(&deps, target.namespace, target.pod)
        .filter(|p| target.uid.is_none_or(|uid| uid == p.uid));
    let Some(pod) = found else {
        return status(
            StatusCode::NOT_FOUND,
            "NotFound",
            &format!(
                "pod {}/{} is not on this node",
                target.namespace, target.pod
            ),
        );
    };
    match (target.kind, target.container) {
        (Kind::PortForward, _) => port_forward(deps, &mut req, pod),
        (kind, Some(container)) => {
            let container = container.to_string();
            session(deps, &mut req, kind, &pod, &container).await
        }
        (_, None) => bad_request("a container name is required"),
    }
}

/// An exec or attach session: the command started (or the container attached) first, so that
/// a refusal is a plain HTTP answer, then the caller's connection upgraded.
async fn session(
    deps: Arc<StreamsDeps>,
    req: &mut Request<Incoming>,
    kind: Kind,
    pod: &PodRef,
    container: &str,
) -> Response<ApiBody> {
    let pairs = query_pairs(req.uri().query().unwrap_or(""));
    let flag = |k: &str| {
        pairs
            .iter()
            .any(|(n, v)| n == k && v != "false" && v != "0")
    };
    let expected = spdy::Expected {
        stdin: flag("stdin"),
        stdout: flag("stdout"),
        stderr: flag("stderr"),
    };
    if kind == Kind::Exec && !pairs.iter().any(|(k, _)| k == "command") {
        return bad_request("you must specify at least one command for the container");
    }
    if !(expected.stdin || expected.stdout || expected.stderr) {
        return bad_request("you must specify at least 1 of stdin, stdout, stderr");
    }
    let protocol = match exec_protocol::negotiate(req.headers()) {
        Ok(p) => p,
        Err(e) => return e.into_response(),
    };
    let (to_agent, rx) = mpsc::channel::<Bytes>(16);
    let mut inner = Request::new(channel_body(rx));
    *inner.uri_mut() = req.uri().clone();
    let answer = match kind {
        Kind::Attach => attach::serve(&deps, inner, pod, container).await,
        _ => exec::serve(&deps, inner, pod, container).await,
    };
    if !answer.status().is_success() {
        return answer;
    }
    exec_protocol::accept(req, protocol, expected, to_agent, answer.into_body())
}

/// A port-forward session: each forwarded connection made in the pod's network namespace.
fn port_forward(
    deps: Arc<StreamsDeps>,
    req: &mut Request<Incoming>,
    pod: PodRef,
) -> Response<ApiBody> {
    let protocol = match forward_protocol::negotiate(req.headers()) {
        Ok(p) => p,
        Err(e) => return e.into_response(),
    };
    let dial: forward_protocol::Dial = Arc::new(move |port, to_pod| {
        let (deps, pod) = (deps.clone(), pod.clone());
        Box::pin(async move {
            let inner = Request::builder()
                .uri(format!("/portforward?port={port}"))
                .body(channel_body(to_pod))
                .map_err(|e| format!("bad port-forward request: {e}"))?;
            let answer = portforward::serve(&deps, inner, &pod).await;
            if answer.status().is_success() {
                return Ok(answer.into_body());
            }
            let code = answer.status();
            let body = http_body_util::Limited::new(answer.into_body(), 64 * 1024)
                .collect()
                .await
                .map(|c| c.to_bytes())
                .unwrap_or_default();
            Err(serde_json::from_slice::<serde_json::Value>(&body)
                .ok()
                .and_then(|v| v["message"].as_str().map(str::to_string))
                .unwrap_or_else(|| format!("the port-forward failed: {code}")))
        })
    });
    forward_protocol::accept(req, protocol, dial)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kubelets_paths_are_read_as_kubelet_reads_them() {
        let t = parse("/exec/default/web/c").unwrap();
        assert_eq!(
            (t.kind, t.namespace, t.pod, t.uid, t.container),
            (Kind::Exec, "default", "web", None, Some("c"))
        );
        let t = parse("/attach/default/web/u-1/c").unwrap();
        assert_eq!(
            (t.kind, t.uid, t.container),
            (Kind::Attach, Some("u-1"), Some("c"))
        );
        let t = parse("/portForward/default/web").unwrap();
        assert_eq!(
            (t.kind, t.uid, t.container),
            (Kind::PortForward, None, None)
        );
        assert_eq!(
            parse("/portForward/default/web/u-1").unwrap().uid,
            Some("u-1")
        );
        for bad in [
            "/exec/default/web",
            "/exec/default//c",
            "/exec/default/web/a/b/c",
            "/portforward/default/web",
            "/portForward/default/web/u/x",
            "/exec/default/web/c/",
        ] {
            assert_eq!(parse(bad), None, "{bad}");
        }
        assert!(owns("/portForward/default/web"));
        assert!(!owns("/portforward/default/web"));
        assert!(!owns("/execx/a/b/c"));
    }
}
