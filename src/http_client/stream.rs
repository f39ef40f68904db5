//! One request on a connection of its own whose answer body is read piece by piece, for
//! bodies too large to hold in memory (container image layers, written to a file as they
//! arrive). The head must come within one limit; after that each piece must follow the
//! previous one within another, so a slow but steady download of any size finishes while a
//! peer that stops sending fails ([`ClientError::Stalled`]) instead of holding the caller
//! forever. As in [`super::send`], the connection is driven inside the caller's futures (no
//! spawned task): dropping the [`Streaming`] closes it.

use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use http::{HeaderMap, Request, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncRead, AsyncWrite};

use super::error::{chain, ClientError};
use super::single::{classify, dial, one_shot_headers, Preview, Recording};
use super::tls::Transport;

/// The bounds of a streamed answer.
#[derive(Debug, Clone, Copy)]
pub struct StreamLimits {
    /// From connecting to the answer's head (status and headers).
    pub head: Duration,
    /// Between two pieces of the body.
    pub idle: Duration,
}

/// The connection's future, whatever the stream under it.
type Connection = Pin<Box<dyn Future<Output = Result<(), hyper::Error>> + Send>>;

/// An answer whose head has arrived; the body is read with [`Streaming::chunk`].
pub struct Streaming {
    pub status: StatusCode,
    pub headers: HeaderMap,
    /// The address the connection reached.
    pub reached: SocketAddr,
    body: Incoming,
    conn: Connection,
    /// How the connection ended, once it has: the cause of a body error that follows.
    conn_result: Option<Result<(), hyper::Error>>,
    idle: Duration,
    preview: Preview,
}

/// Sends `request` (its URI a path) to `addr` (`host:port`) on a new connection and returns
/// once the answer's head is in, within `limits.head`. `Host` defaults to `addr`.
pub async fn open(
    addr: &str,
    transport: &Transport,
    mut request: Request<Full<Bytes>>,
    limits: StreamLimits,
) -> Result<Streaming, ClientError> {
    one_shot_headers(addr, request.headers_mut())?;
    match tokio::time::timeout(limits.head, head(addr, transport, request, limits.idle)).await {
        Ok(result) => result,
        Err(_) => Err(ClientError::Timeout(limits.head)),
    }
}

async fn head(
    addr: &str,
    transport: &Transport,
    request: Request<Full<Bytes>>,
    idle: Duration,
) -> Result<Streaming, ClientError> {
    let (io, reached) = dial(addr, transport).await?;
    let preview = Preview::default();
    let io = Recording::new(io, &preview);
    exchange(io, request, reached, idle, preview).await
}

async fn exchange<S>(
    io: Recording<S>,
    request: Request<Full<Bytes>>,
    reached: SocketAddr,
    idle: Duration,
    preview: Preview,
) -> Result<Streaming, ClientError>
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(io))
        .await
        .map_err(|e| classify(&e, &preview))?;
    let mut conn: Connection = Box::pin(conn);
    let response = sender.send_request(request);
    tokio::pin!(response);
    let mut conn_result: Option<Result<(), hyper::Error>> = None;
    let response = loop {
        tokio::select! {
            result = &mut response => break result,
            done = &mut conn, if conn_result.is_none() => conn_result = Some(done),
        }
    };
    let response = response.map_err(|e| match &conn_result {
        Some(Err(cause)) => classify(cause, &preview),
        _ => classify(&e, &preview),
    })?;
    let (parts, body) = response.into_parts();
    Ok(Streaming {
        status: parts.status,
        headers: parts.headers,
        reached,
        body,
        conn,
        conn_result,
        idle,
        preview,
    })
}

impl Streaming {
    /// The next piece of the body, `None` at its end. A piece that does not come within the
    /// idle limit is [`ClientError::Stalled`].
    pub async fn chunk(&mut self) -> Result<Option<Bytes>, ClientError> {
        let idle = self.idle;
        match tokio::time::timeout(idle, self.next_data()).await {
            Ok(result) => result,
            Err(_) => Err(ClientError::Stalled(idle)),
        }
    }

    async fn next_data(&mut self) -> Result<Option<Bytes>, ClientError> {
        loop {
            tokio::select! {
                frame = self.body.frame() => match frame {
                    None => return Ok(None),
                    Some(Ok(frame)) => {
                        // Trailers carry no data: read on.
                        if let Ok(data) = frame.into_data() {
                            if !data.is_empty() {
                                return Ok(Some(data));
                            }
                        }
                    }
                    Some(Err(e)) => {
                        return Err(match &self.conn_result {
                            Some(Err(cause)) => classify(cause, &self.preview),
                            _ => ClientError::Lost(chain(&e)),
                        })
                    }
                },
                done = &mut self.conn, if self.conn_result.is_none() => {
                    self.conn_result = Some(done);
                }
            }
        }
    }

    /// The whole rest of the body, at most `max` bytes ([`ClientError::TooLarge`] beyond):
    /// for the small bodies that come with errors.
    pub async fn collect(mut self, max: usize) -> Result<Bytes, ClientError> {
        let mut all = BytesMut::new();
        while let Some(piece) = self.chunk().await? {
            if all.len() + piece.len() > max {
                return Err(ClientError::TooLarge { limit: max });
            }
            all.extend_from_slice(&piece);
        }
        Ok(all.freeze())
    }
}

impl std::fmt::Debug for Streaming {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Streaming")
            .field("status", &self.status)
            .field("reached", &self.reached)
            .finish_non_exhaustive()
    }
}
