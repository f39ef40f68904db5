//! The agent's tunnel (module doc of `crate::streams`): one TLS connection to the best
//! server of the failover list, authenticated with the node certificate, upgraded, then
//! served as HTTP/2 with the server as client. When it ends (the server died, restarted or
//! dropped it) the agent dials again, from the then best server, after a short pause that
//! grows while dials fail. After each connection the Node's annotation is set to the
//! server's name, so the other servers know where to relay.

use std::sync::Arc;
use std::time::Duration;

use http::{header, Request, StatusCode};
use http_body_util::Empty;
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use serde_json::json;
use tokio::net::TcpStream;
use tokio_util::sync::CancellationToken;

use super::{handle, StreamsDeps};
use crate::agent::api::{ApiClient, PatchType};
use crate::http_client::TlsConfig;
use crate::streams::tunnel::{
    CONNECTION_WINDOW, KEEPALIVE, NODE_ANNOTATION, PATH, SERVER_HEADER, STREAM_WINDOW, UPGRADE,
};

const DIAL_TIMEOUT: Duration = Duration::from_secs(5);
const FIRST_PAUSE: Duration = Duration::from_millis(200);
const LONGEST_PAUSE: Duration = Duration::from_secs(5);

/// Keeps the tunnel up until `stop`.
pub async fn run(
    api: ApiClient,
    tls: TlsConfig,
    node_name: String,
    deps: Arc<StreamsDeps>,
    stop: CancellationToken,
) {
    let mut pause = FIRST_PAUSE;
    let mut annotated: Option<String> = None;
    while !stop.is_cancelled() {
        let mut connected = false;
        for candidate in api.servers().candidates() {
            let addr = candidate.addr;
            let (io, server) = match dial(&addr, &tls).await {
                Ok(pair) => pair,
                Err(e) => {
                    tracing::debug!(component = "streams", "tunnel to {addr}: {e}");
                    continue;
                }
            };
            connected = true;
            pause = FIRST_PAUSE;
            tracing::info!(component = "streams", "tunnel open to {addr} ({server})");
            let serving = serve(io, deps.clone());
            tokio::pin!(serving);
            if annotated.as_deref() != Some(server.as_str()) {
                tokio::select! {
                    _ = stop.cancelled() => return,
                    _ = &mut serving => {
                        tracing::info!(component = "streams", "tunnel to {addr} closed");
                        break;
                    }
                    ok = annotate(&api, &node_name, &server) => {
                        if ok { annotated = Some(server.clone()); }
                    }
                }
            }
            tokio::select! {
                _ = stop.cancelled() => return,
                _ = &mut serving => {}
            }
            tracing::info!(component = "streams", "tunnel to {addr} closed");
            break;
        }
        if !connected {
            pause = (pause * 2).min(LONGEST_PAUSE);
        }
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = tokio::time::sleep(pause) => {}
        }
    }
}

/// Writes the server's name in the Node's annotation (retried while the tunnel stays up).
async fn annotate(api: &ApiClient, node: &str, server: &str) -> bool {
    let patch = json!({"metadata": {"annotations": {NODE_ANNOTATION: server}}});
    let path = format!("/api/v1/nodes/{node}");
    let mut retry = Duration::from_millis(200);
    for _ in 0..10 {
        match api.patch(&path, &patch, PatchType::Merge).await {
            Ok(_) => return true,
            Err(e) => {
                tracing::warn!(
                    component = "streams",
                    "naming the tunnel's server on the Node: {e}"
                );
                tokio::time::sleep(retry).await;
                retry = (retry * 2).min(Duration::from_secs(5));
            }
        }
    }
    false
}

/// A TLS connection to `addr` upgraded to a tunnel, and the server's name.
async fn dial(addr: &str, tls: &TlsConfig) -> Result<(hyper::upgrade::Upgraded, String), String> {
    let host = addr
        .rsplit_once(':')
        .map(|(h, _)| h.trim_start_matches('[').trim_end_matches(']'))
        .unwrap_or(addr);
    let name = rustls::pki_types::ServerName::try_from(host.to_string())
        .map_err(|e| format!("bad address: {e}"))?;
    let tcp = tokio::time::timeout(DIAL_TIMEOUT, TcpStream::connect(addr))
        .await
        .map_err(|_| "connect timed out".to_string())?
        .map_err(|e| e.to_string())?;
    let _ = tcp.set_nodelay(true);
    let stream = tokio::time::timeout(DIAL_TIMEOUT, tls.connector().connect(name, tcp))
        .await
        .map_err(|_| "TLS handshake timed out".to_string())?
        .map_err(|e| e.to_string())?;
    let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .map_err(|e| e.to_string())?;
    tokio::spawn(async move {
        let _ = connection.with_upgrades().await;
    });
    let req = Request::builder()
        .method("GET")
        .uri(PATH)
        .header(header::HOST, addr)
        .header(header::CONNECTION, "upgrade")
        .header(header::UPGRADE, UPGRADE)
        .body(Empty::<bytes::Bytes>::new())
        .map_err(|e| e.to_string())?;
    let resp = tokio::time::timeout(DIAL_TIMEOUT, sender.send_request(req))
        .await
        .map_err(|_| "no answer to the tunnel request".to_string())?
        .map_err(|e| e.to_string())?;
    if resp.status() != StatusCode::SWITCHING_PROTOCOLS {
        return Err(format!("the server answered {}", resp.status()));
    }
    let server = resp
        .headers()
        .get(SERVER_HEADER)
        .and_then(|v| v.to_str().ok())
        .unwrap_or(addr)
        .to_string();
    let io = hyper::upgrade::on(resp).await.map_err(|e| e.to_string())?;
    Ok((io, server))
}

/// Serves the server's requests on the tunnel until it closes.
async fn serve(io: hyper::upgrade::Upgraded, deps: Arc<StreamsDeps>) {
    let service = service_fn(move |req| handle(deps.clone(), req));
    let result = hyper::server::conn::http2::Builder::new(TokioExecutor::new())
        .timer(TokioTimer::new())
        .keep_alive_interval(KEEPALIVE)
        .keep_alive_timeout(KEEPALIVE)
        .initial_stream_window_size(STREAM_WINDOW)
        .initial_connection_window_size(CONNECTION_WINDOW)
        .serve_connection(io, service)
        .await;
    if let Err(e) = result {
        tracing::debug!(component = "streams", "tunnel: {e}");
    }
}
