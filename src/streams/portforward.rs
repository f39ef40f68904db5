//! `pods/portforward` (`kubectl port-forward`). kubectl speaks SPDY/3.1 with the
//! `portforward.k8s.io` protocol: kubectl ≤ 1.30 after an HTTP upgrade to `SPDY/3.1`
//! (`X-Stream-Protocol-Version: portforward.k8s.io`), kubectl ≥ 1.31 (1.30 with
//! `KUBECTL_PORT_FORWARD_WEBSOCKETS=true`) inside a WebSocket
//! whose subprotocol is `SPDY/3.1+portforward.k8s.io`, every binary message a piece of the
//! same SPDY byte stream in either direction. When that WebSocket upgrade is refused
//! (any answer but 101) kubectl falls back to plain SPDY, so a request this server cannot
//! serve as WebSocket is answered 400 rather than upgraded.
//!
//! For each local connection kubectl opens two SPDY streams with the same `requestID`
//! header and the remote `port`: `streamType: error` (it only reads it) and then
//! `streamType: data`. Once both exist, the pair is forwarded: one HTTP/2 stream of the
//! node's tunnel (`/portforward/<ns>/<pod>?port=N`), kubectl's data to its request body, its
//! response body to kubectl. When the pod's side ends, the data stream and the error stream
//! are finished. When the agent cannot connect (nothing listens on the port), its message
//! goes on the error stream, which kubectl prints (`an error occurred forwarding …`); the
//! session itself goes on serving other connections. A malformed port header (missing, 0,
//! beyond 65535) is answered the same way without asking the agent. A client `requestID`
//! header is optional: without it the pair is found from the stream ids (error stream `n`,
//! data stream `n + 2`), as kubelet does for old clients.
//!
//! A relaying server passes the upgrade through untouched (`relay`); only the server that
//! holds the node's tunnel decodes SPDY. kubectl's SPDY has no flow control (module doc of
//! `spdy`): data for a connection waits in a small channel to its tunnel stream, whose
//! HTTP/2 window is what bounds memory, at the price that one stalled connection holds up
//! the reading of the others.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures::future::BoxFuture;
use futures::{SinkExt, StreamExt};
use http::{HeaderMap, Method, Request, Response};
use http_body_util::BodyExt;
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::sync::mpsc;
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;
use tokio_tungstenite::tungstenite::protocol::{CloseFrame, Role, WebSocketConfig};
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::WebSocketStream;
use tokio_util::sync::CancellationToken;

use super::route::{self, Route};
use super::spdy::{
    control, data, FrameReader, HeaderDeflater, HeaderInflater, SpdyFrame, FLAG_FIN, GOAWAY,
    HEADERS, PING, RST_STREAM, SYN_REPLY, SYN_STREAM,
};
use super::upgrade::{self, Requested};
use super::{channel_body, find_pod, placement, relay, relayed, POD_UID_HEADER};
use crate::api::status::ApiError;
use crate::api::{ApiBody, ApiContext, UserInfo};

/// The port-forward protocol over plain SPDY.
pub const SPDY_PROTOCOL: &str = "portforward.k8s.io";
/// The same, tunnelled in WebSocket messages.
pub const WEBSOCKET_PROTOCOL: &str = "SPDY/3.1+portforward.k8s.io";
/// The largest WebSocket message accepted (client-go writes one SPDY frame per message).
const MAX_MESSAGE: usize = 1 << 20;
/// The largest DATA frame sent to kubectl.
const MAX_DATA: usize = 32 * 1024;
/// Connections waiting for their second stream, at most (more is a broken client).
const MAX_PENDING: usize = 1024;
/// SPDY's RST_STREAM status for a stream the server will not serve.
const PROTOCOL_ERROR: u32 = 1;

/// How kubectl's connection is upgraded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Protocol {
    /// SPDY inside WebSocket binary messages; the accept key.
    WebSocket(String),
    Spdy,
}

/// The protocol of a port-forward request, or why none fits.
pub fn negotiate(headers: &HeaderMap) -> Result<Protocol, ApiError> {
    match upgrade::requested(headers, SPDY_PROTOCOL)? {
        Requested::WebSocket { offered, accept } => {
            if !offered
                .iter()
                .any(|p| p.eq_ignore_ascii_case(WEBSOCKET_PROTOCOL))
            {
                return Err(ApiError::BadRequest(format!(
                    "no WebSocket subprotocol in common: offered {offered:?}, served {WEBSOCKET_PROTOCOL:?}"
                )));
            }
            Ok(Protocol::WebSocket(accept))
        }
        Requested::Spdy => Ok(Protocol::Spdy),
    }
}

/// What a forwarded connection becomes: given the port and the bytes kubectl sends, the
/// bytes that come back, or the message for kubectl's error stream.
pub type Dial = Arc<
    dyn Fn(u16, mpsc::Receiver<Bytes>) -> BoxFuture<'static, Result<ApiBody, String>> + Send + Sync,
>;

pub async fn serve<B: Send + 'static>(
    ctx: &Arc<ApiContext>,
    ns: &str,
    name: &str,
    mut req: Request<B>,
    user: &UserInfo,
) -> Result<Response<ApiBody>, ApiError> {
    if req.method() != Method::GET && req.method() != Method::POST {
        return Err(ApiError::MethodNotAllowed);
    }
    let pod = find_pod(ctx, ns, name)?;
    let (uid, node) = placement(&pod, name)?;
    let protocol = negotiate(req.headers())?;
    let tunnel = match route::route(ctx, &node, relayed(&req)) {
        Route::Local(tunnel) => tunnel,
        Route::Relay { server, addr } => {
            let Some(peers) = ctx.streams.peers.get() else {
                return Err(ApiError::ServiceUnavailable("no peers".into()));
            };
            return relay::relay(peers, &server, &addr, req, user).await;
        }
        Route::Unavailable(why) => return Err(ApiError::ServiceUnavailable(why)),
    };
    let path = format!("/portforward/{ns}/{name}");
    let dial: Dial = Arc::new(move |port, to_pod| {
        let (mut tunnel, node, uid, path) =
            (tunnel.clone(), node.clone(), uid.clone(), path.clone());
        Box::pin(async move {
            let request = Request::builder()
                .method(Method::POST)
                .uri(format!("http://{node}{path}?port={port}"))
                .header(POD_UID_HEADER, uid)
                .body(channel_body(to_pod))
                .map_err(|e| format!("bad port-forward request: {e}"))?;
            let answer = route::send(&mut tunnel, &node, request)
                .await
                .map_err(|e| e.to_string())?;
            if answer.status().is_success() {
                return Ok(answer.into_body().map_err(std::io::Error::other).boxed());
            }
            let status = answer.status();
            let body = http_body_util::Limited::new(answer.into_body(), 64 * 1024)
                .collect()
                .await
                .map(|c| c.to_bytes())
                .unwrap_or_default();
            let message = serde_json::from_slice::<serde_json::Value>(&body)
                .ok()
                .and_then(|v| v["message"].as_str().map(str::to_string))
                .unwrap_or_else(|| format!("the node answered {status}"));
            Err(message)
        })
    });
    Ok(accept(&mut req, protocol, dial))
}

/// Answers kubectl's upgrade (`101`) and runs the port-forward session on the upgraded
/// connection, each forwarded connection made by `dial`. The node port uses it too, with a
/// `dial` that connects inside the pod on its own node.
pub fn accept<B: Send + 'static>(
    req: &mut Request<B>,
    protocol: Protocol,
    dial: Dial,
) -> Response<ApiBody> {
    let upgrade = hyper::upgrade::on(req);
    let upgraded = protocol.clone();
    tokio::spawn(async move {
        let io = match upgrade.await {
            Ok(io) => TokioIo::new(io),
            Err(e) => {
                tracing::debug!(component = "streams", "port-forward upgrade failed: {e}");
                return;
            }
        };
        match upgraded {
            Protocol::Spdy => {
                let (rd, wr) = tokio::io::split(io);
                run(rd, wr, dial).await
            }
            Protocol::WebSocket(_) => over_websocket(io, dial).await,
        }
    });
    match protocol {
        Protocol::WebSocket(accept) => upgrade::websocket_accepted(&accept, WEBSOCKET_PROTOCOL),
        Protocol::Spdy => upgrade::spdy_accepted(SPDY_PROTOCOL),
    }
}

/// Runs the SPDY session on the byte stream a WebSocket's binary messages carry.
async fn over_websocket<S>(io: S, dial: Dial)
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let mut config = WebSocketConfig::default();
    config.max_message_size = Some(MAX_MESSAGE);
    config.max_frame_size = Some(MAX_MESSAGE);
    let ws = WebSocketStream::from_raw_socket(io, Role::Server, Some(config)).await;
    let (mut sink, mut stream) = ws.split();
    let (session, pipe) = tokio::io::duplex(256 * 1024);
    let (mut pipe_rd, mut pipe_wr) = tokio::io::split(pipe);
    let inbound = tokio::spawn(async move {
        while let Some(Ok(message)) = stream.next().await {
            match message {
                Message::Binary(bytes) if pipe_wr.write_all(&bytes).await.is_err() => break,
                Message::Close(_) => break,
                _ => {}
            }
        }
        let _ = pipe_wr.shutdown().await;
    });
    let outbound = tokio::spawn(async move {
        let mut buf = vec![0u8; 64 * 1024];
        loop {
            match pipe_rd.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => {
                    let message = Message::Binary(Bytes::copy_from_slice(&buf[..n]));
                    if sink.send(message).await.is_err() {
                        return;
                    }
                }
            }
        }
        let close = CloseFrame {
            code: CloseCode::Normal,
            reason: "".into(),
        };
        let _ = sink.send(Message::Close(Some(close))).await;
        let _ = sink.close().await;
    });
    let (rd, wr) = tokio::io::split(session);
    run(rd, wr, dial).await;
    let _ = tokio::time::timeout(Duration::from_secs(2), outbound).await;
    inbound.abort();
}

/// A connection of which kubectl opened one stream so far.
#[derive(Default)]
struct Pending {
    error: Option<u32>,
    data: Option<u32>,
    port: Option<String>,
}

/// A forwarded connection, by its data stream.
struct Forward {
    /// kubectl's data for the pod; dropped at its FIN.
    to_pod: Option<mpsc::Sender<Bytes>>,
    /// Cancelled by kubectl's reset of the data stream.
    reset: CancellationToken,
}

/// The port a header names, or the message for kubectl.
pub fn parse_port(header: Option<&str>) -> Result<u16, String> {
    let Some(value) = header.filter(|v| !v.is_empty()) else {
        return Err("invalid port forward request: the port header is missing".into());
    };
    match value.parse::<u16>() {
        Ok(p) if p != 0 => Ok(p),
        _ => Err(format!(
            "invalid port forward request: port {value:?} is not a number from 1 to 65535"
        )),
    }
}

/// The SPDY port-forward session on `rd`/`wr` until kubectl closes it.
pub async fn run<R, W>(mut rd: R, mut wr: W, dial: Dial)
where
    R: AsyncRead + Unpin + Send + 'static,
    W: AsyncWrite + Unpin + Send + 'static,
{
    let (out_tx, mut out_rx) = mpsc::channel::<Bytes>(64);
    let writer = tokio::spawn(async move {
        while let Some(bytes) = out_rx.recv().await {
            if wr.write_all(&bytes).await.is_err() {
                break;
            }
        }
        let _ = wr.shutdown().await;
    });
    let mut frames = FrameReader::default();
    let mut inflater = HeaderInflater::default();
    let mut deflater = HeaderDeflater::default();
    let mut pending: HashMap<String, Pending> = HashMap::new();
    let mut forwards: HashMap<u32, Forward> = HashMap::new();
    let mut tasks = tokio::task::JoinSet::new();
    'read: loop {
        loop {
            let next = match frames.next_frame() {
                Ok(Some(f)) => f,
                Ok(None) => break,
                Err(e) => {
                    tracing::debug!(component = "streams", "port-forward over SPDY: {e}");
                    break 'read;
                }
            };
            match next {
                SpdyFrame::Control {
                    kind, data: body, ..
                } => match kind {
                    SYN_STREAM if body.len() >= 10 => {
                        let id =
                            u32::from_be_bytes([body[0], body[1], body[2], body[3]]) & 0x7fff_ffff;
                        let headers = match inflater.headers(&body[10..]) {
                            Ok(h) => h,
                            Err(e) => {
                                tracing::debug!(component = "streams", "port-forward: {e}");
                                break 'read;
                            }
                        };
                        let get = |name: &str| {
                            headers
                                .iter()
                                .find(|(k, _)| k.eq_ignore_ascii_case(name))
                                .map(|(_, v)| v.clone())
                        };
                        let kind = get("streamtype").unwrap_or_default();
                        let is_error = kind == "error";
                        if !is_error && kind != "data" {
                            let mut rst = id.to_be_bytes().to_vec();
                            rst.extend_from_slice(&PROTOCOL_ERROR.to_be_bytes());
                            let _ = out_tx.send(control(RST_STREAM, 0, &rst)).await;
                            continue;
                        }
                        let request =
                            get("requestid")
                                .filter(|r| !r.is_empty())
                                .unwrap_or_else(|| {
                                    if is_error { id } else { id.saturating_sub(2) }.to_string()
                                });
                        let mut reply = id.to_be_bytes().to_vec();
                        reply.extend_from_slice(&deflater.block(&[]));
                        if out_tx.send(control(SYN_REPLY, 0, &reply)).await.is_err() {
                            break 'read;
                        }
                        if pending.len() >= MAX_PENDING && !pending.contains_key(&request) {
                            tracing::debug!(
                                component = "streams",
                                "port-forward: too many half-open connections"
                            );
                            break 'read;
                        }
                        let entry = pending.entry(request.clone()).or_default();
                        if is_error {
                            entry.error = Some(id);
                        } else {
                            entry.data = Some(id);
                        }
                        // The data stream's port counts (kubelet reads that one).
                        if entry.port.is_none() || !is_error {
                            if let Some(p) = get("port") {
                                entry.port = Some(p);
                            }
                        }
                        let (Some(error), Some(data_id)) = (entry.error, entry.data) else {
                            continue;
                        };
                        let port = entry.port.take();
                        pending.remove(&request);
                        let (to_pod, rx) = mpsc::channel::<Bytes>(16);
                        let reset = CancellationToken::new();
                        forwards.insert(
                            data_id,
                            Forward {
                                to_pod: Some(to_pod),
                                reset: reset.clone(),
                            },
                        );
                        tasks.spawn(forward(
                            parse_port(port.as_deref()),
                            error,
                            data_id,
                            rx,
                            dial.clone(),
                            out_tx.clone(),
                            reset,
                        ));
                    }
                    SYN_STREAM => break 'read,
                    // Inflated only to keep the compression context in step.
                    HEADERS if body.len() >= 4 && inflater.headers(&body[4..]).is_err() => {
                        break 'read;
                    }
                    PING => {
                        let _ = out_tx.send(control(PING, 0, &body)).await;
                    }
                    RST_STREAM if body.len() >= 4 => {
                        let id =
                            u32::from_be_bytes([body[0], body[1], body[2], body[3]]) & 0x7fff_ffff;
                        if let Some(f) = forwards.remove(&id) {
                            f.reset.cancel();
                        }
                    }
                    GOAWAY => break 'read,
                    _ => {}
                },
                SpdyFrame::Data {
                    stream,
                    flags,
                    data: bytes,
                } => {
                    let Some(f) = forwards.get_mut(&stream) else {
                        continue;
                    };
                    if !bytes.is_empty() {
                        if let Some(to_pod) = &f.to_pod {
                            if to_pod.send(bytes).await.is_err() {
                                f.to_pod = None;
                            }
                        }
                    }
                    if flags & FLAG_FIN != 0 {
                        f.to_pod = None;
                    }
                }
            }
        }
        // Finished forwards leave the table (their tasks are done).
        while tasks.try_join_next().is_some() {}
        forwards.retain(|_, f| !f.reset.is_cancelled());
        match rd.read_buf(frames.buffer()).await {
            Ok(0) | Err(_) => break,
            Ok(_) => {}
        }
    }
    for f in forwards.values() {
        f.reset.cancel();
    }
    tasks.abort_all();
    drop(out_tx);
    let _ = tokio::time::timeout(Duration::from_secs(2), writer).await;
}

/// One forwarded connection, from the pair of streams to their end: both finished when
/// the pod's side ends or the agent refused, the error stream alone when kubectl reset
/// the data stream (kubectl waits for the error stream's end before it lets go).
async fn forward(
    port: Result<u16, String>,
    error: u32,
    data_id: u32,
    to_pod: mpsc::Receiver<Bytes>,
    dial: Dial,
    out: mpsc::Sender<Bytes>,
    reset: CancellationToken,
) {
    let copy = async {
        let port = match port {
            Ok(p) => p,
            Err(message) => return Some(message),
        };
        let mut body = match dial(port, to_pod).await {
            Ok(body) => body,
            Err(message) => return Some(message),
        };
        while let Some(Ok(piece)) = body.frame().await {
            let Ok(bytes) = piece.into_data() else {
                continue;
            };
            for chunk in bytes.chunks(MAX_DATA) {
                if out.send(data(data_id, 0, chunk)).await.is_err() {
                    return None;
                }
            }
        }
        None
    };
    let outcome = tokio::select! {
        outcome = copy => Some(outcome),
        _ = reset.cancelled() => None,
    };
    if let Some(Some(message)) = &outcome {
        tracing::debug!(component = "streams", "port-forward: {message}");
        let _ = out.send(data(error, 0, message.as_bytes())).await;
    }
    if outcome.is_some() {
        let _ = out.send(data(data_id, FLAG_FIN, &[])).await;
    }
    let _ = out.send(data(error, FLAG_FIN, &[])).await;
    reset.cancel();
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::HeaderValue;

    fn headers(pairs: &[(&str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.append(
                http::HeaderName::from_bytes(k.as_bytes()).unwrap(),
                HeaderValue::from_str(v).unwrap(),
            );
        }
        h
    }

    #[test]
    fn both_upgrades_kubectl_uses_are_understood() {
        let ws = headers(&[
            ("upgrade", "websocket"),
            ("sec-websocket-key", "dGhlIHNhbXBsZSBub25jZQ=="),
            ("sec-websocket-version", "13"),
            ("sec-websocket-protocol", "SPDY/3.1+portforward.k8s.io"),
        ]);
        assert_eq!(
            negotiate(&ws).unwrap(),
            Protocol::WebSocket("s3pPLMBiTxaQ9kYGzzhZRbK+xOo=".into())
        );
        let spdy = headers(&[
            ("upgrade", "SPDY/3.1"),
            ("x-stream-protocol-version", "portforward.k8s.io"),
        ]);
        assert_eq!(negotiate(&spdy).unwrap(), Protocol::Spdy);
        // The old base64 WebSocket port-forward is refused, so kubectl falls back to SPDY.
        let old = headers(&[
            ("upgrade", "websocket"),
            ("sec-websocket-key", "dGhlIHNhbXBsZSBub25jZQ=="),
            ("sec-websocket-version", "13"),
            ("sec-websocket-protocol", "v4.channel.k8s.io"),
        ]);
        assert!(negotiate(&old).is_err());
        assert!(negotiate(&headers(&[("upgrade", "SPDY/3.1")])).is_err());
    }

    #[test]
    fn ports_are_checked() {
        assert_eq!(parse_port(Some("80")), Ok(80));
        for bad in [
            None,
            Some(""),
            Some("0"),
            Some("70000"),
            Some("x"),
            Some("-1"),
        ] {
            assert!(parse_port(bad).is_err(), "{bad:?}");
        }
    }

    /// A client end of a session: writes frames, reads them back by stream.
    struct Client {
        wr: tokio::io::WriteHalf<tokio::io::DuplexStream>,
        rd: tokio::io::ReadHalf<tokio::io::DuplexStream>,
        frames: FrameReader,
        deflater: HeaderDeflater,
        received: HashMap<u32, (Vec<u8>, bool)>,
    }

    impl Client {
        async fn open(&mut self, id: u32, headers: &[(&str, &str)]) {
            let mut body = id.to_be_bytes().to_vec();
            body.extend_from_slice(&[0, 0, 0, 0, 0, 0]);
            body.extend_from_slice(&self.deflater.block(headers));
            self.wr
                .write_all(&control(SYN_STREAM, 0, &body))
                .await
                .unwrap();
        }

        async fn send(&mut self, stream: u32, flags: u8, bytes: &[u8]) {
            self.wr
                .write_all(&data(stream, flags, bytes))
                .await
                .unwrap();
        }

        /// The data of `stream` once kubectl would see it finished.
        async fn until_fin(&mut self, stream: u32) -> Vec<u8> {
            loop {
                if self.received.get(&stream).is_some_and(|(_, fin)| *fin) {
                    return self.received.remove(&stream).unwrap_or_default().0;
                }
                while let Some(f) = self.frames.next_frame().unwrap() {
                    if let SpdyFrame::Data {
                        stream: s,
                        flags,
                        data,
                    } = f
                    {
                        let entry = self.received.entry(s).or_default();
                        entry.0.extend_from_slice(&data);
                        entry.1 |= flags & FLAG_FIN != 0;
                    }
                }
                if self.received.get(&stream).is_some_and(|(_, fin)| *fin) {
                    continue;
                }
                let n = tokio::time::timeout(
                    Duration::from_secs(5),
                    self.rd.read_buf(self.frames.buffer()),
                )
                .await
                .expect("an answer in time")
                .unwrap();
                assert!(n > 0, "the session ended");
            }
        }
    }

    /// A session whose "pod" echoes port 7 upper-cased and refuses every other port.
    fn session() -> Client {
        let (ours, theirs) = tokio::io::duplex(1 << 20);
        let dial: Dial = Arc::new(|port, mut to_pod: mpsc::Receiver<Bytes>| {
            Box::pin(async move {
                if port != 7 {
                    return Err(format!("connection refused on port {port}"));
                }
                let (tx, rx) = mpsc::channel(4);
                tokio::spawn(async move {
                    while let Some(b) = to_pod.recv().await {
                        let _ = tx.send(Bytes::from(b.to_ascii_uppercase())).await;
                    }
                });
                Ok(channel_body(rx))
            })
        });
        let (rd, wr) = tokio::io::split(theirs);
        tokio::spawn(run(rd, wr, dial));
        let (rd, wr) = tokio::io::split(ours);
        Client {
            wr,
            rd,
            frames: FrameReader::default(),
            deflater: HeaderDeflater::default(),
            received: HashMap::new(),
        }
    }

    #[tokio::test]
    async fn pairs_forward_and_errors_leave_the_session_usable() {
        let mut c = session();
        let pair = |kind: &'static str, port: &'static str, req: &'static str| {
            [("streamtype", kind), ("port", port), ("requestid", req)]
        };
        // Nothing on port 9: the message on the error stream, both streams finished.
        c.open(1, &pair("error", "9", "0")).await;
        c.open(3, &pair("data", "9", "0")).await;
        let message = c.until_fin(1).await;
        assert!(
            String::from_utf8_lossy(&message).contains("connection refused on port 9"),
            "{message:?}"
        );
        // Malformed ports: the same, without dialing.
        for (i, port) in ["", "0", "70000"].into_iter().enumerate() {
            let (e, d) = (5 + 4 * i as u32, 7 + 4 * i as u32);
            let req = (i + 1).to_string();
            let mut err = vec![("streamtype", "error"), ("requestid", req.as_str())];
            let mut dat = vec![("streamtype", "data"), ("requestid", req.as_str())];
            if !port.is_empty() {
                err.push(("port", port));
                dat.push(("port", port));
            }
            c.open(e, &err).await;
            c.open(d, &dat).await;
            let message = String::from_utf8(c.until_fin(e).await).unwrap();
            assert!(
                message.contains("invalid port forward request"),
                "{port:?}: {message}"
            );
        }
        // The session still forwards; two connections at once, one without a requestID.
        c.open(21, &pair("error", "7", "10")).await;
        c.open(23, &pair("data", "7", "10")).await;
        c.open(25, &[("streamtype", "error"), ("port", "7")]).await;
        c.open(27, &[("streamtype", "data"), ("port", "7")]).await;
        c.send(23, 0, b"hello").await;
        c.send(27, FLAG_FIN, b"other").await;
        let other = c.until_fin(27).await;
        assert_eq!(other, b"OTHER");
        c.send(23, FLAG_FIN, b" world").await;
        let got = c.until_fin(23).await;
        assert_eq!(got, b"HELLO WORLD");
        assert!(c.until_fin(21).await.is_empty(), "no error message");
    }
}
