//! One forwarded connection (`kubectl port-forward`): the server asks for a port of a pod
//! (`/portforward/<ns>/<pod>?port=N`, the pod's uid in a header), the agent connects to
//! `localhost:N` inside the pod's network namespace, and the HTTP/2 stream carries the bytes:
//! the request body to the pod, the response body from it. The end of the request body is
//! the client's end of input (the socket's write half is shut down); the response ends when
//! the pod closes its side.
//!
//! Connecting *inside* the namespace, rather than to the pod IP from the node, is what
//! kubelet's runtimes do and what users expect: a server that listens on 127.0.0.1 only is
//! reachable, and no route or network policy between the node and the pod is involved. A
//! short-lived thread enters the namespace (`setns` changes only the calling thread's
//! network namespace) and connects; a socket stays in the namespace it was created in, so
//! the connected socket is then used from the async runtime like any other. A pod on the
//! host's network is connected to from the agent's own namespace.
//!
//! A port nothing listens on (or a pod without a sandbox here) is an HTTP error with a
//! Status whose message the server writes on kubectl's error stream.

use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr};
use std::path::PathBuf;
use std::time::Duration;

use bytes::Bytes;
use http::{Request, Response, StatusCode};
use http_body_util::BodyExt;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::mpsc;

use super::{status, StreamsDeps};
use crate::agent::runtime::PodRef;
use crate::api::request::query_pairs;
use crate::api::ApiBody;
use crate::streams::channel_body;

const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// A pipe holds 64 KiB by default: one read takes what a full pipe (or socket) has.
const READ_SIZE: usize = 64 * 1024;

/// The port a request names (1 to 65535).
pub fn port_of(query: &str) -> Option<u16> {
    query_pairs(query)
        .into_iter()
        .find(|(k, _)| k == "port")
        .and_then(|(_, v)| v.parse::<u16>().ok())
        .filter(|p| *p != 0)
}

pub async fn serve(deps: &StreamsDeps, req: Request<ApiBody>, pod: &PodRef) -> Response<ApiBody> {
    let Some(port) = port_of(req.uri().query().unwrap_or("")) else {
        return status(
            StatusCode::BAD_REQUEST,
            "BadRequest",
            "a port from 1 to 65535 is required",
        );
    };
    let sandbox = match deps.sandboxes.load(&pod.uid) {
        Ok(Some(s)) if s.pod.namespace == pod.namespace && s.pod.name == pod.name => s,
        Ok(_) => {
            return status(
                StatusCode::NOT_FOUND,
                "NotFound",
                &format!("pod {:?} (uid {}) is not on this node", pod.name, pod.uid),
            )
        }
        Err(e) => {
            return status(
                StatusCode::INTERNAL_SERVER_ERROR,
                "InternalError",
                &format!("pod {:?}: {e}", pod.name),
            )
        }
    };
    let stream = match connect(sandbox.netns(), port).await {
        Ok(s) => s,
        Err(e) => {
            let e = plain(&e);
            return status(
                StatusCode::BAD_GATEWAY,
                "BadGateway",
                &format!(
                    "error forwarding port {port} to pod {}/{}, uid {}: failed to connect to localhost:{port} inside the pod's network namespace: {e}",
                    pod.namespace, pod.name, pod.uid
                ),
            );
        }
    };
    let _ = stream.set_nodelay(true);
    let (mut from_pod, mut to_pod) = stream.into_split();
    let mut body = req.into_body();
    tokio::spawn(async move {
        while let Some(Ok(piece)) = body.frame().await {
            let Ok(data) = piece.into_data() else {
                continue;
            };
            if to_pod.write_all(&data).await.is_err() {
                return;
            }
        }
        let _ = to_pod.shutdown().await;
    });
    let (tx, rx) = mpsc::channel::<Bytes>(8);
    tokio::spawn(async move {
        let mut buf = vec![0u8; READ_SIZE];
        loop {
            match from_pod.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(n) => {
                    if tx.send(Bytes::copy_from_slice(&buf[..n])).await.is_err() {
                        return;
                    }
                }
            }
        }
    });
    Response::new(channel_body(rx))
}

/// An error as Go prints it (`connection refused`), without Rust's `(os error N)`.
fn plain(e: &std::io::Error) -> String {
    let text = e.to_string();
    let text = match text.rfind(" (os error ") {
        Some(at) => &text[..at],
        None => &text,
    };
    let mut chars = text.chars();
    match chars.next() {
        Some(first) => first.to_lowercase().chain(chars).collect(),
        None => String::new(),
    }
}

/// A connection to `localhost:port` in network namespace `netns` (the agent's own when
/// `None`): IPv4 first, then IPv6, as kubelet's runtimes try them.
async fn connect(netns: Option<PathBuf>, port: u16) -> std::io::Result<tokio::net::TcpStream> {
    let (tx, rx) = tokio::sync::oneshot::channel();
    std::thread::Builder::new()
        .name("litek8s-portfwd".into())
        .spawn(move || {
            let _ = tx.send(connect_blocking(netns, port));
        })?;
    let stream = rx
        .await
        .map_err(|_| std::io::Error::other("the connecting thread failed"))??;
    stream.set_nonblocking(true)?;
    tokio::net::TcpStream::from_std(stream)
}

/// Runs on a thread of its own, which ends afterwards: it may have left the agent's
/// network namespace.
fn connect_blocking(netns: Option<PathBuf>, port: u16) -> std::io::Result<std::net::TcpStream> {
    if let Some(path) = netns {
        let ns = std::fs::File::open(&path)?;
        nix::sched::setns(ns, nix::sched::CloneFlags::CLONE_NEWNET)
            .map_err(|e| std::io::Error::other(format!("entering the namespace: {e}")))?;
    }
    let v4 = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
    let v6 = SocketAddr::from((Ipv6Addr::LOCALHOST, port));
    std::net::TcpStream::connect_timeout(&v4, CONNECT_TIMEOUT)
        .or_else(|e4| std::net::TcpStream::connect_timeout(&v6, CONNECT_TIMEOUT).map_err(|_| e4))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ports_are_1_to_65535() {
        assert_eq!(port_of("port=8080"), Some(8080));
        assert_eq!(port_of("x=1&port=65535"), Some(65535));
        assert_eq!(port_of("port=0"), None);
        assert_eq!(port_of("port=70000"), None);
        assert_eq!(port_of("port=-1"), None);
        assert_eq!(port_of(""), None);
    }

    #[tokio::test]
    async fn connects_in_the_agents_namespace_and_refusal_is_an_error() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let mut s = connect(None, port).await.unwrap();
        let (mut accepted, _) = listener.accept().await.unwrap();
        s.write_all(b"hi").await.unwrap();
        let mut buf = [0u8; 2];
        accepted.read_exact(&mut buf).await.unwrap();
        assert_eq!(&buf, b"hi");
        drop(listener);
        let refused = connect(None, port).await.unwrap_err();
        assert_eq!(plain(&refused), "connection refused");
    }
}
