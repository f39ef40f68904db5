//! The agent's end of the proxies (`crate::streams::proxy`): an HTTP request to one of this
//! node's pods (`/podproxy/<ns>/<pod>/<port>/<rest>`, the pod's uid in a header), sent to
//! the pod's IP from the node.
//!
//! The pod's address comes from its sandbox on this node, found by uid and checked against
//! the namespace and name, so a request reaches only a pod of this node, never an address
//! the caller chose. A pod on the host's network is reached on 127.0.0.1. `https` proxies
//! do not verify the pod's certificate (kube-apiserver does not either).

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::time::Duration;

use http::{header, HeaderValue, Request, Response, StatusCode};
use http_body_util::BodyExt;
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;

use super::{status, StreamsDeps};
use crate::agent::runtime::PodRef;
use crate::api::ApiBody;
use crate::http_client::TlsConfig;
use crate::streams::proxy::SCHEME_HEADER;

const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// Headers of the server's request that are not the pod's business.
fn internal(name: &header::HeaderName) -> bool {
    name.as_str().starts_with("x-litek8s-") || name == header::HOST
}

/// Proxies `req` to `port` of `pod`, path `rest` (with the query).
pub async fn pod(
    deps: &StreamsDeps,
    req: Request<Incoming>,
    pod: &PodRef,
    port: &str,
    rest: &str,
) -> Response<ApiBody> {
    let Some(port) = port.parse::<u16>().ok().filter(|p| *p != 0) else {
        return status(
            StatusCode::BAD_REQUEST,
            "BadRequest",
            "a port from 1 to 65535 is required",
        );
    };
    let sandbox = match deps.sandboxes.load(&pod.uid) {
        Ok(Some(s)) if s.pod.namespace == pod.namespace && s.pod.name == pod.name => s,
        _ => {
            return status(
                StatusCode::NOT_FOUND,
                "NotFound",
                &format!("pod {:?} (uid {}) is not on this node", pod.name, pod.uid),
            )
        }
    };
    let ip = if sandbox.host_network {
        IpAddr::V4(Ipv4Addr::LOCALHOST)
    } else {
        match sandbox.ip() {
            Some(ip) => ip,
            None => {
                return status(
                    StatusCode::SERVICE_UNAVAILABLE,
                    "ServiceUnavailable",
                    &format!("pod {:?} has no IP yet", pod.name),
                )
            }
        }
    };
    let https = req
        .headers()
        .get(SCHEME_HEADER)
        .is_some_and(|v| v.as_bytes() == b"https");
    let addr = SocketAddr::new(ip, port);
    match send(req, addr, https, rest).await {
        Ok(resp) => resp,
        Err(e) => status(
            StatusCode::BAD_GATEWAY,
            "BadGateway",
            &format!("error trying to reach pod {:?} at {addr}: {e}", pod.name),
        ),
    }
}

/// Sends `req` to `addr` on a connection of its own, path `rest`.
async fn send(
    req: Request<Incoming>,
    addr: SocketAddr,
    https: bool,
    rest: &str,
) -> Result<Response<ApiBody>, String> {
    let tcp = tokio::time::timeout(CONNECT_TIMEOUT, TcpStream::connect(addr))
        .await
        .map_err(|_| "connect timed out".to_string())?
        .map_err(|e| e.to_string())?;
    let _ = tcp.set_nodelay(true);
    let (parts, body) = req.into_parts();
    let mut out = Request::builder()
        .method(parts.method)
        .uri(rest)
        .body(body)
        .map_err(|e| e.to_string())?;
    for (k, v) in &parts.headers {
        if !internal(k) {
            out.headers_mut().append(k.clone(), v.clone());
        }
    }
    if let Ok(host) = HeaderValue::from_str(&addr.to_string()) {
        out.headers_mut().insert(header::HOST, host);
    }
    let answer = if https {
        let tls = TlsConfig::unverified().map_err(|e| e.to_string())?;
        let name = rustls::pki_types::ServerName::from(addr.ip());
        let stream = tokio::time::timeout(CONNECT_TIMEOUT, tls.connector().connect(name, tcp))
            .await
            .map_err(|_| "TLS handshake timed out".to_string())?
            .map_err(|e| e.to_string())?;
        exchange(TokioIo::new(stream), out).await?
    } else {
        exchange(TokioIo::new(tcp), out).await?
    };
    let (parts, body) = answer.into_parts();
    let mut resp = Response::new(body.map_err(std::io::Error::other).boxed());
    *resp.status_mut() = parts.status;
    *resp.headers_mut() = parts.headers;
    for hop in [header::CONNECTION, header::TRANSFER_ENCODING] {
        resp.headers_mut().remove(hop);
    }
    Ok(resp)
}

async fn exchange<T>(io: T, req: Request<Incoming>) -> Result<Response<Incoming>, String>
where
    T: hyper::rt::Read + hyper::rt::Write + Unpin + Send + 'static,
{
    let (mut sender, connection) = hyper::client::conn::http1::handshake(io)
        .await
        .map_err(|e| e.to_string())?;
    tokio::spawn(async move {
        let _ = connection.await;
    });
    sender.send_request(req).await.map_err(|e| e.to_string())
}
