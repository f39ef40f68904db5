//! Relaying a stream request to the server a node is connected to: a new HTTPS connection
//! to that server's API port (pinned to the cluster CA), the request sent as it came with the
//! cluster secret as bearer token and the user this server authenticated (the receiver
//! authorizes them again, as `cluster::forward` does for writes), then the answer passed back:
//! a streamed body piece by piece, or, for a protocol upgrade (exec), the upgraded bytes
//! copied both ways until either side closes. HTTP/1.1 on that hop, because upgrades are
//! HTTP/1.1's; one connection per stream, so streams never share a window.

use std::time::Duration;

use bytes::Bytes;
use http::{header, HeaderValue, Request, Response, StatusCode};
use http_body_util::{BodyExt, Empty};
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;

use super::route::RELAYED;
use super::Peers;
use crate::api::status::ApiError;
use crate::api::{ApiBody, UserInfo};
use crate::cluster::forward::{user_header, FORWARDED_USER};

const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// Each direction's copy buffer for an upgraded stream. tokio's default (8 KiB) cuts every
/// 16 KiB TLS record read from one side into two writes to the other, each its own record
/// and system call: at exec's and port-forward's hundreds of MiB/s that per-piece cost is
/// what the relaying server spends its time on. Two records' worth, and no more: an idle
/// session (100 open `kubectl exec` shells) holds both buffers for as long as it lasts.
const RELAY_BUFFER: usize = 32 * 1024;

/// Relays `req` of `user` to server `server` at `addr` (its body is not read: stream
/// requests have none, or upgrade).
pub async fn relay<B>(
    peers: &Peers,
    server: &str,
    addr: &str,
    req: Request<B>,
    user: &UserInfo,
) -> Result<Response<ApiBody>, ApiError> {
    let empty = Empty::<Bytes>::new().map_err(|e| match e {}).boxed();
    relay_with_body(peers, server, addr, req, empty, user).await
}

/// Relays `req` with `body` (a proxied request's).
pub async fn relay_with_body<B>(
    peers: &Peers,
    server: &str,
    addr: &str,
    mut req: Request<B>,
    body: ApiBody,
    user: &UserInfo,
) -> Result<Response<ApiBody>, ApiError> {
    let unreachable = |what: String| {
        ApiError::ServiceUnavailable(format!("relaying to server {server:?} ({addr}): {what}"))
    };
    let host = addr
        .rsplit_once(':')
        .map(|(h, _)| h.trim_start_matches('[').trim_end_matches(']'))
        .unwrap_or(addr);
    let name = rustls::pki_types::ServerName::try_from(host.to_string())
        .map_err(|e| unreachable(format!("bad address: {e}")))?;
    let tcp = tokio::time::timeout(CONNECT_TIMEOUT, TcpStream::connect(addr))
        .await
        .map_err(|_| unreachable("connect timed out".into()))?
        .map_err(|e| unreachable(e.to_string()))?;
    let _ = tcp.set_nodelay(true);
    let tls = tokio::time::timeout(CONNECT_TIMEOUT, peers.tls.connector().connect(name, tcp))
        .await
        .map_err(|_| unreachable("TLS handshake timed out".into()))?
        .map_err(|e| unreachable(e.to_string()))?;
    let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(tls))
        .await
        .map_err(|e| unreachable(e.to_string()))?;
    tokio::spawn(async move {
        let _ = connection.with_upgrades().await;
    });

    let path = req
        .uri()
        .path_and_query()
        .map(|p| p.as_str().to_string())
        .unwrap_or_else(|| "/".into());
    let mut out = Request::builder()
        .method(req.method().clone())
        .uri(path)
        .body(body)
        .map_err(|e| ApiError::BadRequest(format!("request cannot be relayed: {e}")))?;
    for (k, v) in req.headers() {
        // The user sent is the one impersonation already resolved to: the receiver must not
        // resolve it again (the user would be impersonating itself).
        let impersonation = k.as_str().starts_with("impersonate-");
        if k != header::AUTHORIZATION
            && k != header::HOST
            && k != FORWARDED_USER
            && k != RELAYED
            && !impersonation
        {
            out.headers_mut().append(k.clone(), v.clone());
        }
    }
    let headers = out.headers_mut();
    if let Ok(v) = HeaderValue::from_str(addr) {
        headers.insert(header::HOST, v);
    }
    if let Ok(v) = HeaderValue::from_str(&format!("Bearer {}", peers.node.secret.as_str())) {
        headers.insert(header::AUTHORIZATION, v);
    }
    if let Some(v) = user_header(user) {
        headers.insert(FORWARDED_USER, v);
    }
    headers.insert(RELAYED, HeaderValue::from_static("1"));

    let client_upgrade = hyper::upgrade::on(&mut req);
    let mut answer = sender
        .send_request(out)
        .await
        .map_err(|e| unreachable(e.to_string()))?;
    let status = answer.status();
    let mut resp = Response::new(http_body_util::Empty::new().map_err(|e| match e {}).boxed());
    *resp.status_mut() = status;
    for (k, v) in answer.headers() {
        if k != header::CONTENT_LENGTH && k != header::TRANSFER_ENCODING {
            resp.headers_mut().append(k.clone(), v.clone());
        }
    }
    if status == StatusCode::SWITCHING_PROTOCOLS {
        let server_upgrade = hyper::upgrade::on(&mut answer);
        tokio::spawn(async move {
            let (Ok(client), Ok(server)) = (client_upgrade.await, server_upgrade.await) else {
                return;
            };
            let _ = tokio::io::copy_bidirectional_with_sizes(
                &mut TokioIo::new(client),
                &mut TokioIo::new(server),
                RELAY_BUFFER,
                RELAY_BUFFER,
            )
            .await;
        });
        return Ok(resp);
    }
    let body = answer.into_body().map_err(std::io::Error::other).boxed();
    *resp.body_mut() = body;
    Ok(resp)
}
