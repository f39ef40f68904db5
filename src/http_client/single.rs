//! One request on a connection of its own (HTTP/1.1, `Connection: close`): for health checks,
//! member discovery, the join's CA fetch and `server list`'s readiness column. A fresh
//! connection is the point there: it shows that the server accepts connections now, and
//! which address a host name resolved to ([`Answer::reached`], where the balancer then sends
//! clients without a lookup of its own). The connection is driven inside the caller's
//! future, not by a spawned task, so a timeout or a dropped future closes it.

use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http::{header, HeaderMap, HeaderValue, Request, StatusCode};
use http_body_util::{BodyExt, Full, Limited};
use hyper_util::rt::TokioIo;
use rustls::pki_types::ServerName;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;

use super::error::{chain, ClientError};
use super::tls::Transport;
use super::Limits;

/// How many of the first bytes a server sent are kept to name an answer that is not HTTP.
const PREVIEW: usize = 40;

/// A whole answer.
#[derive(Debug)]
pub struct Answer {
    pub status: StatusCode,
    pub headers: HeaderMap,
    pub body: Bytes,
    /// The address the connection reached (`addr` with its host name resolved).
    pub reached: SocketAddr,
}

/// `GET path` on `addr` (`host:port`).
pub async fn get(
    addr: &str,
    path: &str,
    transport: &Transport,
    limits: Limits,
) -> Result<Answer, ClientError> {
    let request = Request::get(path)
        .header(header::ACCEPT, "*/*")
        .body(Full::new(Bytes::new()))
        .map_err(|e| ClientError::BadRequest {
            addr: addr.to_string(),
            reason: e.to_string(),
        })?;
    send(addr, transport, request, limits).await
}

/// Sends `request` (its URI a path) to `addr` (`host:port`) on a new connection and reads the
/// whole answer, within `limits`. `Host` defaults to `addr`.
pub async fn send(
    addr: &str,
    transport: &Transport,
    mut request: Request<Full<Bytes>>,
    limits: Limits,
) -> Result<Answer, ClientError> {
    one_shot_headers(addr, request.headers_mut())?;
    match tokio::time::timeout(limits.timeout, exchange(addr, transport, request, limits)).await {
        Ok(result) => result,
        Err(_) => Err(ClientError::Timeout(limits.timeout)),
    }
}

/// The headers of a request on a connection of its own: `Host` (`addr` unless given), a
/// `User-Agent`, and `Connection: close`.
pub(super) fn one_shot_headers(addr: &str, headers: &mut HeaderMap) -> Result<(), ClientError> {
    if !headers.contains_key(header::HOST) {
        let host = HeaderValue::from_str(addr).map_err(|e| ClientError::BadRequest {
            addr: addr.to_string(),
            reason: e.to_string(),
        })?;
        headers.insert(header::HOST, host);
    }
    headers
        .entry(header::USER_AGENT)
        .or_insert(HeaderValue::from_static("litek8s"));
    headers.insert(header::CONNECTION, HeaderValue::from_static("close"));
    Ok(())
}

/// A TCP connection to `addr` within `limit`.
pub async fn connect(
    addr: impl tokio::net::ToSocketAddrs,
    limit: Duration,
) -> Result<TcpStream, ClientError> {
    match tokio::time::timeout(limit, TcpStream::connect(addr)).await {
        Ok(Ok(stream)) => Ok(stream),
        Ok(Err(e)) => Err(ClientError::from_connect(&e)),
        Err(_) => Err(ClientError::ConnectTimeout(limit)),
    }
}

async fn exchange(
    addr: &str,
    transport: &Transport,
    request: Request<Full<Bytes>>,
    limits: Limits,
) -> Result<Answer, ClientError> {
    let (io, reached) = dial(addr, transport).await?;
    let preview = Preview::default();
    let io = Recording::new(io, &preview);
    let (parts, body) = http1(io, request, limits.max_body, &preview).await?;
    Ok(Answer {
        status: parts.status,
        headers: parts.headers,
        body,
        reached,
    })
}

/// A connection's byte stream, plain or TLS, as one type.
pub(super) trait Io: AsyncRead + AsyncWrite + Unpin + Send {}
impl<T: AsyncRead + AsyncWrite + Unpin + Send> Io for T {}

/// A new connection to `addr`, secured as `transport` says, and the address it reached.
pub(super) async fn dial(
    addr: &str,
    transport: &Transport,
) -> Result<(Box<dyn Io>, SocketAddr), ClientError> {
    let tcp = TcpStream::connect(addr)
        .await
        .map_err(|e| ClientError::from_connect(&e))?;
    let reached = tcp
        .peer_addr()
        .map_err(|e| ClientError::Connect(format!("connected, then: {e}")))?;
    let _ = tcp.set_nodelay(true);
    let io: Box<dyn Io> = match transport {
        Transport::Plain => Box::new(tcp),
        Transport::Tls(config) => Box::new(
            config
                .connector()
                .connect(server_name(addr)?, tcp)
                .await
                .map_err(|e| ClientError::Tls(e.to_string()))?,
        ),
    };
    Ok((io, reached))
}

/// The TLS server name of `host:port`: a DNS name or an IP address (brackets removed).
pub(super) fn server_name(addr: &str) -> Result<ServerName<'static>, ClientError> {
    let host = addr.rsplit_once(':').map_or(addr, |(h, _)| h);
    ServerName::try_from(host.trim_matches(['[', ']']).to_string()).map_err(|e| {
        ClientError::BadRequest {
            addr: addr.to_string(),
            reason: format!("TLS server name {host:?}: {e}"),
        }
    })
}

/// Why an exchange failed before it was classified.
enum Failure {
    Http(hyper::Error),
    Body(Box<dyn std::error::Error + Send + Sync>),
}

async fn http1<S>(
    io: Recording<S>,
    request: Request<Full<Bytes>>,
    max_body: usize,
    preview: &Preview,
) -> Result<(http::response::Parts, Bytes), ClientError>
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(io))
        .await
        .map_err(|e| classify(&e, preview))?;
    let exchange = async move {
        let response = sender.send_request(request).await.map_err(Failure::Http)?;
        let (parts, body) = response.into_parts();
        let body = Limited::new(body, max_body)
            .collect()
            .await
            .map_err(Failure::Body)?
            .to_bytes();
        Ok::<_, Failure>((parts, body))
    };
    tokio::pin!(exchange);
    tokio::pin!(conn);
    // The connection future moves the bytes; the exchange ends when the body is in. When the
    // connection ends first with an error, that error is the cause of whatever the exchange
    // then reports.
    let mut conn_result: Option<Result<(), hyper::Error>> = None;
    loop {
        tokio::select! {
            result = &mut exchange => {
                return result.map_err(|failure| match (conn_result, failure) {
                    (Some(Err(e)), _) | (_, Failure::Http(e)) => classify(&e, preview),
                    (_, Failure::Body(e)) => classify_body(e, max_body, preview),
                });
            }
            done = &mut conn, if conn_result.is_none() => conn_result = Some(done),
        }
    }
}

pub(super) fn classify(e: &hyper::Error, preview: &Preview) -> ClientError {
    if e.is_parse() || e.is_parse_status() {
        return ClientError::NotHttp {
            preview: preview.text(),
        };
    }
    if (e.is_incomplete_message() || e.is_canceled() || e.is_closed()) && preview.is_empty() {
        return ClientError::Closed;
    }
    ClientError::Lost(chain(e))
}

fn classify_body(
    e: Box<dyn std::error::Error + Send + Sync>,
    max_body: usize,
    preview: &Preview,
) -> ClientError {
    if e.is::<http_body_util::LengthLimitError>() {
        return ClientError::TooLarge { limit: max_body };
    }
    match e.downcast::<hyper::Error>() {
        Ok(e) => classify(&e, preview),
        Err(e) => ClientError::Lost(chain(&*e)),
    }
}

/// The first bytes read from a connection.
#[derive(Clone, Default)]
pub(super) struct Preview(Arc<parking_lot::Mutex<Vec<u8>>>);

impl Preview {
    pub(super) fn text(&self) -> String {
        String::from_utf8_lossy(&self.0.lock()).into_owned()
    }

    pub(super) fn is_empty(&self) -> bool {
        self.0.lock().is_empty()
    }
}

/// A stream that copies the first [`PREVIEW`] bytes it reads into a [`Preview`].
pub(super) struct Recording<S> {
    inner: S,
    preview: Preview,
    full: bool,
}

impl<S> Recording<S> {
    pub(super) fn new(inner: S, preview: &Preview) -> Recording<S> {
        Recording {
            inner,
            preview: preview.clone(),
            full: false,
        }
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for Recording<S> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let this = self.get_mut();
        let before = buf.filled().len();
        let poll = Pin::new(&mut this.inner).poll_read(cx, buf);
        if !this.full && matches!(poll, Poll::Ready(Ok(()))) {
            let mut kept = this.preview.0.lock();
            let new = &buf.filled()[before..];
            let room = PREVIEW.saturating_sub(kept.len());
            kept.extend_from_slice(&new[..new.len().min(room)]);
            this.full = kept.len() >= PREVIEW;
        }
        poll
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Recording<S> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.get_mut().inner).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.get_mut().inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_shutdown(cx)
    }
}
