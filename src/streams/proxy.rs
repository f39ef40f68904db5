//! `pods/proxy`, `services/proxy` and `nodes/proxy`: an HTTP request passed to a pod's port,
//! a Service's ready endpoint or a node's agent, through the agent of that pod's node.
//!
//! Paths are kube-apiserver's: `/api/v1/namespaces/<ns>/pods/<name>/proxy/<rest>`, the same
//! for `services`, and `/api/v1/nodes/<node>/proxy/<rest>`; a pod or Service name may carry
//! a port and a scheme, `[http:|https:]name[:port]` (a port number or a port's name). A
//! Service is resolved here to one of its ready endpoints (an EndpointSlice endpoint backed
//! by a pod, on the slice port named as the Service port) and then proxied as that pod. The
//! agent dials only its own pods' addresses (module doc of `agent::streams::proxy`) and
//! serves its own node's endpoints (`healthz`, `stats/summary`).
//!
//! Authorized as the subresource verbs (`get pods/proxy`, `create services/proxy`…), like any
//! request. The request body streams to the agent and the answer streams back; hop-by-hop
//! headers and the caller's credentials stay here.

use std::sync::Arc;

use bytes::Bytes;
use http::{header, HeaderMap, HeaderName, HeaderValue, Method, Request, Response};
use http_body_util::BodyExt;
use serde_json::Value;

use super::route::{self, Route};
use super::{channel_body, find_pod, placement, relay, relayed, POD_UID_HEADER};
use crate::api::status::ApiError;
use crate::api::{ApiBody, ApiContext, UserInfo};
use crate::kube::object::ObjectKey;

/// The scheme the agent speaks to the pod (`http` or `https`).
pub const SCHEME_HEADER: &str = "x-litek8s-scheme";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Pod,
    Service,
    Node,
}

/// A proxy path taken apart.
#[derive(Debug, PartialEq, Eq)]
pub struct Target<'a> {
    pub kind: Kind,
    pub namespace: &'a str,
    /// `[scheme:]name[:port]`.
    pub spec: &'a str,
    /// The path after `/proxy` (empty or starting with `/`).
    pub rest: &'a str,
}

/// `name/proxy[/rest]` as (name, rest).
fn split_proxy(rest: &str) -> Option<(&str, &str)> {
    let (spec, after) = rest.split_once('/')?;
    let tail = after.strip_prefix("proxy")?;
    (!spec.is_empty() && (tail.is_empty() || tail.starts_with('/'))).then_some((spec, tail))
}

/// The proxy target of `path`, if it is a proxy path.
pub fn parse(path: &str) -> Option<Target<'_>> {
    if let Some(rest) = path.strip_prefix("/api/v1/nodes/") {
        let (spec, rest) = split_proxy(rest)?;
        return Some(Target {
            kind: Kind::Node,
            namespace: "",
            spec,
            rest,
        });
    }
    let rest = path.strip_prefix("/api/v1/namespaces/")?;
    let (namespace, rest) = rest.split_once('/')?;
    let (kind, rest) = match rest.split_once('/')? {
        ("pods", rest) => (Kind::Pod, rest),
        ("services", rest) => (Kind::Service, rest),
        _ => return None,
    };
    let (spec, rest) = split_proxy(rest)?;
    (!namespace.is_empty()).then_some(Target {
        kind,
        namespace,
        spec,
        rest,
    })
}

/// `[scheme:]name[:port]` as (scheme, name, port).
pub fn name_spec(spec: &str) -> Result<(&str, &str, &str), ApiError> {
    let parts: Vec<&str> = spec.split(':').collect();
    let (scheme, name, port) = match parts.as_slice() {
        [name] => ("", *name, ""),
        [name, port] => ("", *name, *port),
        [scheme, name, port] => (*scheme, *name, *port),
        _ => {
            return Err(ApiError::BadRequest(format!(
                "invalid proxy target {spec:?}: [scheme:]name[:port] expected"
            )))
        }
    };
    if !matches!(scheme, "" | "http" | "https") || name.is_empty() {
        return Err(ApiError::BadRequest(format!(
            "invalid proxy target {spec:?}: [http:|https:]name[:port] expected"
        )));
    }
    Ok((if scheme.is_empty() { "http" } else { scheme }, name, port))
}

/// The port number `port` names in `pod` (a number, or a container port's name); none
/// given: the scheme's.
fn pod_port(pod: &Value, port: &str, scheme: &str) -> Result<u16, ApiError> {
    if port.is_empty() {
        return Ok(if scheme == "https" { 443 } else { 80 });
    }
    if let Ok(n) = port.parse::<u16>() {
        if n != 0 {
            return Ok(n);
        }
    }
    pod["spec"]["containers"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|c| c["ports"].as_array())
        .flatten()
        .find(|p| p["name"].as_str() == Some(port))
        .and_then(|p| p["containerPort"].as_u64())
        .and_then(|p| u16::try_from(p).ok())
        .ok_or_else(|| ApiError::BadRequest(format!("no port {port:?} in the pod")))
}

/// A ready endpoint of Service `ns/name` for its port `port`: the backing pod and the port
/// number on it.
fn service_endpoint(
    ctx: &ApiContext,
    ns: &str,
    name: &str,
    port: &str,
) -> Result<(String, u16), ApiError> {
    let services = crate::kube::resources::find("", "v1", "services").ok_or(ApiError::NoRoute)?;
    let service = ctx
        .store
        .get(&ObjectKey::new(services.store_key(), ns, name))
        .map(|o| o.value())
        .ok_or_else(|| ApiError::not_found(services, name))?;
    let ports = service["spec"]["ports"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let chosen = ports.iter().find(|p| {
        port.is_empty() && ports.len() == 1
            || p["name"].as_str() == Some(port)
            || p["port"].as_u64().map(|n| n.to_string()).as_deref() == Some(port)
    });
    let Some(chosen) = chosen else {
        return Err(ApiError::ServiceUnavailable(format!(
            "no service port {port:?} found for service {name:?}"
        )));
    };
    let port_name = chosen["name"].as_str().unwrap_or("");
    let slices = crate::kube::resources::find("discovery.k8s.io", "v1", "endpointslices")
        .ok_or(ApiError::NoRoute)?;
    let snapshot = ctx.store.snapshot();
    let mut candidates = Vec::new();
    for slice in snapshot.with_label(
        &slices.store_key(),
        Some(ns),
        "kubernetes.io/service-name",
        name,
    ) {
        let slice = slice.value();
        let number = slice["ports"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|p| p["name"].as_str().unwrap_or("") == port_name)
            .and_then(|p| p["port"].as_u64())
            .and_then(|p| u16::try_from(p).ok());
        let Some(number) = number else { continue };
        for e in slice["endpoints"].as_array().into_iter().flatten() {
            let ready = e["conditions"]["ready"].as_bool() != Some(false);
            if ready && e["targetRef"]["kind"].as_str() == Some("Pod") {
                if let Some(pod) = e["targetRef"]["name"].as_str() {
                    candidates.push((pod.to_string(), number));
                }
            }
        }
    }
    if candidates.is_empty() {
        return Err(ApiError::ServiceUnavailable(format!(
            "no endpoints available for service {name:?}"
        )));
    }
    let pick = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos() as usize)
        .unwrap_or(0)
        % candidates.len();
    Ok(candidates.swap_remove(pick))
}

/// Headers that belong to one hop, or to the caller's authentication here.
fn passed(name: &HeaderName) -> bool {
    let n = name.as_str();
    !(n == header::AUTHORIZATION
        || n == header::HOST
        || n == header::CONNECTION
        || n == header::TRANSFER_ENCODING
        || n == header::UPGRADE
        || n == header::TE
        || n == "keep-alive"
        || n == "proxy-connection"
        || n.starts_with("impersonate-")
        || n.starts_with("x-litek8s-"))
}

fn copy_headers(from: &HeaderMap, to: &mut HeaderMap) {
    for (k, v) in from {
        if passed(k) {
            to.append(k.clone(), v.clone());
        }
    }
}

/// The request's body as a stream (bounded: a slow agent holds the sender).
fn stream_body<B>(body: B) -> ApiBody
where
    B: hyper::body::Body<Data = Bytes> + Send + 'static,
{
    let (tx, rx) = tokio::sync::mpsc::channel::<Bytes>(8);
    tokio::spawn(async move {
        let mut body = std::pin::pin!(body);
        loop {
            // Taken apart before the next await: the body's error need not be `Send`.
            let data = match body.frame().await {
                Some(Ok(frame)) => match frame.into_data() {
                    Ok(data) => data,
                    Err(_) => continue,
                },
                _ => return,
            };
            if tx.send(data).await.is_err() {
                return;
            }
        }
    });
    channel_body(rx)
}

pub async fn serve<B>(
    ctx: &Arc<ApiContext>,
    target: Target<'_>,
    req: Request<B>,
    user: &UserInfo,
) -> Result<Response<ApiBody>, ApiError>
where
    B: hyper::body::Body<Data = Bytes> + Send + 'static,
{
    let query = req
        .uri()
        .query()
        .map(|q| format!("?{q}"))
        .unwrap_or_default();
    let rest = if target.rest.is_empty() {
        "/"
    } else {
        target.rest
    };
    let (node, agent_path, uid, scheme) = match target.kind {
        Kind::Node => {
            let (_, name, _) = name_spec(target.spec)?;
            let nodes = crate::kube::resources::find("", "v1", "nodes").ok_or(ApiError::NoRoute)?;
            if ctx
                .store
                .get(&ObjectKey::new(nodes.store_key(), "", name))
                .is_none()
            {
                return Err(ApiError::not_found(nodes, name));
            }
            (
                name.to_string(),
                format!("/nodeproxy{rest}{query}"),
                String::new(),
                "http",
            )
        }
        Kind::Pod | Kind::Service => {
            let (scheme, name, port) = name_spec(target.spec)?;
            let (pod_name, port) = if target.kind == Kind::Service {
                service_endpoint(ctx, target.namespace, name, port)?
            } else {
                let pod = find_pod(ctx, target.namespace, name)?;
                let number = pod_port(&pod, port, scheme)?;
                (name.to_string(), number)
            };
            let pod = find_pod(ctx, target.namespace, &pod_name)?;
            let (uid, node) = placement(&pod, &pod_name)?;
            let path = format!(
                "/podproxy/{}/{pod_name}/{port}{rest}{query}",
                target.namespace
            );
            (node, path, uid, scheme)
        }
    };
    let mut tunnel = match route::route(ctx, &node, relayed(&req)) {
        Route::Local(tunnel) => tunnel,
        Route::Relay { server, addr } => {
            let Some(peers) = ctx.streams.peers.get() else {
                return Err(ApiError::ServiceUnavailable("no peers".into()));
            };
            let (parts, body) = req.into_parts();
            let body = stream_body(body);
            let req = Request::from_parts(parts, ());
            return relay::relay_with_body(peers, &server, &addr, req, body, user).await;
        }
        Route::Unavailable(why) => return Err(ApiError::ServiceUnavailable(why)),
    };
    let (parts, body) = req.into_parts();
    let mut request = Request::builder()
        .method(parts.method.clone())
        .uri(format!("http://{node}{agent_path}"))
        .body(
            if parts.method == Method::GET || parts.method == Method::HEAD {
                channel_body(tokio::sync::mpsc::channel(1).1)
            } else {
                stream_body(body)
            },
        )
        .map_err(|e| ApiError::BadRequest(format!("bad proxy request: {e}")))?;
    copy_headers(&parts.headers, request.headers_mut());
    let headers = request.headers_mut();
    if let Ok(v) = HeaderValue::from_str(&uid) {
        headers.insert(POD_UID_HEADER, v);
    }
    let scheme = if scheme == "https" { "https" } else { "http" };
    headers.insert(SCHEME_HEADER, HeaderValue::from_static(scheme));
    let answer = route::send(&mut tunnel, &node, request).await?;
    let (parts, body) = answer.into_parts();
    let mut resp = Response::new(body.map_err(std::io::Error::other).boxed());
    *resp.status_mut() = parts.status;
    copy_headers(&parts.headers, resp.headers_mut());
    Ok(resp)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn proxy_paths_are_recognized() {
        assert_eq!(
            parse("/api/v1/namespaces/d/pods/web:80/proxy/a/b"),
            Some(Target {
                kind: Kind::Pod,
                namespace: "d",
                spec: "web:80",
                rest: "/a/b"
            })
        );
        assert_eq!(
            parse("/api/v1/namespaces/d/services/https:web:443/proxy"),
            Some(Target {
                kind: Kind::Service,
                namespace: "d",
                spec: "https:web:443",
                rest: ""
            })
        );
        assert_eq!(
            parse("/api/v1/nodes/n1/proxy/stats/summary").map(|t| (t.kind, t.rest)),
            Some((Kind::Node, "/stats/summary"))
        );
        assert_eq!(parse("/api/v1/namespaces/d/pods/web/proxyx"), None);
        assert_eq!(parse("/api/v1/namespaces/d/pods/web/log"), None);
        assert_eq!(parse("/api/v1/namespaces/d/configmaps/web/proxy/"), None);
        assert_eq!(parse("/api/v1/nodes//proxy/"), None);
    }

    #[test]
    fn name_specs_read_like_kube_apiservers() {
        assert_eq!(name_spec("web").unwrap(), ("http", "web", ""));
        assert_eq!(name_spec("web:80").unwrap(), ("http", "web", "80"));
        assert_eq!(name_spec("https:web:443").unwrap(), ("https", "web", "443"));
        assert!(name_spec("ftp:web:21").is_err());
        assert!(name_spec("a:b:c:d").is_err());
        let pod = serde_json::json!({"spec": {"containers": [{"ports": [{"name": "http", "containerPort": 8080}]}]}});
        assert_eq!(pod_port(&pod, "http", "http").unwrap(), 8080);
        assert_eq!(pod_port(&pod, "81", "http").unwrap(), 81);
        assert_eq!(pod_port(&pod, "", "https").unwrap(), 443);
        assert!(pod_port(&pod, "nope", "http").is_err());
    }
}
