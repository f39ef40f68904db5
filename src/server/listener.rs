//! The API port: one TCP listener serving TLS and plain HTTP side by side.
//!
//! Each accepted connection is classified by its first byte: 0x16 (a TLS handshake record)
//! goes through rustls, anything else is plain HTTP (which `dispatch` limits to the health
//! endpoints). Both are served by hyper-util's auto builder (HTTP/1.1 and HTTP/2, connection
//! upgrades allowed: exec, attach and port-forward will need them; docs/guarantees.md, Streams).
//! Idle connections are bounded by timeouts: the first byte and the TLS handshake
//! (`Limits::handshake`), each HTTP/1 request head (`Limits::header_read`, idle keep-alive
//! included), HTTP/2 keep-alive pings.
//!
//! Shutdown protocol: when the shutdown token fires, the accept loop stops and drops the
//! listening socket; every connection task is told to shut down gracefully (finish in-flight
//! requests, accept no new ones); the loop then waits up to `Limits::drain` for the tasks to
//! end. Connections still open after that (long watches) are dropped with the runtime.
//! Accepts are bounded by a semaphore; a connection's error is logged in its own task and
//! never reaches the listener.

use std::sync::Arc;
use std::time::Duration;

use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncWrite, BufReader};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Semaphore;
use tokio_rustls::TlsAcceptor;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::authn::Connection;
use super::dispatch::Dispatch;

/// First byte of a TLS connection: the ContentType of a handshake record.
const TLS_HANDSHAKE: u8 = 0x16;

/// Bounds on what clients can hold open.
#[derive(Debug, Clone)]
pub struct Limits {
    /// Connections served at once; further clients wait in the kernel's accept queue.
    pub max_connections: usize,
    /// Time for a new connection to send its first byte and finish the TLS handshake.
    pub handshake: Duration,
    /// Time for an HTTP/1 client to send a complete request head.
    pub header_read: Duration,
    /// Time in-flight requests get to finish after shutdown begins.
    pub drain: Duration,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_connections: 4096,
            handshake: Duration::from_secs(10),
            header_read: Duration::from_secs(30),
            drain: Duration::from_secs(5),
        }
    }
}

/// The bound API port, ready to serve.
pub struct Listener {
    pub tcp: TcpListener,
    pub tls: TlsAcceptor,
    pub dispatch: Arc<Dispatch>,
    pub limits: Limits,
}

impl Listener {
    /// Serves connections until `shutdown` fires, then drains (see the module docs).
    pub async fn run(self, shutdown: CancellationToken) {
        let permits = Arc::new(Semaphore::new(self.limits.max_connections));
        let tracker = TaskTracker::new();
        loop {
            let permit = tokio::select! {
                _ = shutdown.cancelled() => break,
                permit = permits.clone().acquire_owned() => match permit {
                    Ok(permit) => permit,
                    Err(_) => break, // the semaphore is never closed
                },
            };
            let (stream, peer) = tokio::select! {
                _ = shutdown.cancelled() => break,
                accepted = self.tcp.accept() => match accepted {
                    Ok(accepted) => accepted,
                    Err(e) => {
                        // Usually EMFILE/ENFILE: back off instead of spinning; the
                        // connections that hold descriptors will finish.
                        tracing::warn!(error = %e, "accept failed");
                        tokio::time::sleep(Duration::from_millis(100)).await;
                        continue;
                    }
                },
            };
            let tls = self.tls.clone();
            let dispatch = self.dispatch.clone();
            let limits = self.limits.clone();
            let shutdown = shutdown.clone();
            tracker.spawn(async move {
                if let Err(e) =
                    serve_connection(stream, peer, tls, dispatch, &limits, shutdown).await
                {
                    tracing::debug!(%peer, error = %e, "connection ended with an error");
                }
                drop(permit);
            });
        }
        drop(self.tcp);
        tracker.close();
        tracing::info!(connections = tracker.len(), "stopped accepting; draining");
        if tokio::time::timeout(self.limits.drain, tracker.wait())
            .await
            .is_err()
        {
            tracing::info!(
                connections = tracker.len(),
                "drain timeout; closing remaining connections"
            );
        }
    }
}

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// Classifies one connection by its first byte and serves it.
async fn serve_connection(
    stream: TcpStream,
    peer: std::net::SocketAddr,
    tls: TlsAcceptor,
    dispatch: Arc<Dispatch>,
    limits: &Limits,
    shutdown: CancellationToken,
) -> Result<(), BoxError> {
    let _ = stream.set_nodelay(true);
    let mut first = [0u8; 1];
    let n = tokio::select! {
        _ = shutdown.cancelled() => return Ok(()),
        peeked = tokio::time::timeout(limits.handshake, stream.peek(&mut first)) => {
            peeked.map_err(|_| "no data before the handshake timeout")??
        }
    };
    if n == 0 {
        return Ok(()); // closed without sending anything (a TCP health check)
    }
    if first[0] == TLS_HANDSHAKE {
        let stream = tokio::time::timeout(limits.handshake, tls.accept(stream))
            .await
            .map_err(|_| "TLS handshake timed out")??;
        // Once per connection: the chain check is the costly part of a client certificate.
        let client_cert = stream
            .get_ref()
            .1
            .peer_certificates()
            .map(|chain| dispatch.authn.client_certificate(chain))
            .unwrap_or_default();
        // hyper-util first reads the start of the stream to tell HTTP/1 from HTTP/2, with no
        // timeout of its own: wait for the first request bytes here, under the handshake
        // timeout, so a client that completes TLS and then goes quiet is dropped.
        let mut stream = BufReader::new(stream);
        tokio::select! {
            // Nothing in flight yet: shutting down just closes the connection.
            _ = shutdown.cancelled() => return Ok(()),
            read = tokio::time::timeout(limits.handshake, stream.fill_buf()) => {
                read.map_err(|_| "no request after the TLS handshake")??;
            }
        }
        let conn = Connection {
            tls: true,
            client_cert,
            peer: Some(peer.ip()),
            ..Connection::default()
        };
        serve_http(stream, conn, dispatch, limits, shutdown).await
    } else {
        let conn = Connection {
            peer: Some(peer.ip()),
            ..Connection::default()
        };
        serve_http(stream, conn, dispatch, limits, shutdown).await
    }
}

/// Serves HTTP/1.1 or HTTP/2 on an established stream until it closes or shutdown drains it.
async fn serve_http<S>(
    stream: S,
    conn: Connection,
    dispatch: Arc<Dispatch>,
    limits: &Limits,
    shutdown: CancellationToken,
) -> Result<(), BoxError>
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let mut builder = auto::Builder::new(TokioExecutor::new());
    builder
        .http1()
        .timer(TokioTimer::new())
        .header_read_timeout(limits.header_read);
    builder
        .http2()
        .timer(TokioTimer::new())
        .keep_alive_interval(Some(Duration::from_secs(30)))
        .keep_alive_timeout(Duration::from_secs(20));
    let conn = Arc::new(conn);
    let service = service_fn(move |req| dispatch.clone().handle(conn.clone(), req));
    let connection = builder.serve_connection_with_upgrades(TokioIo::new(stream), service);
    tokio::pin!(connection);
    tokio::select! {
        result = connection.as_mut() => return result,
        _ = shutdown.cancelled() => connection.as_mut().graceful_shutdown(),
    }
    connection.await
}
