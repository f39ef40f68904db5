//! The data path: accept client connections (bounded by `--max-connections`), connect each
//! to the best server that takes it (at the address its last passing check reached: no name
//! lookup per client), and move bytes both ways untouched (`lb::relay`: copied
//! through a small buffer, spliced once a transfer is bulk) until either side
//! closes, the server fails (its connections are closed so clients reconnect through a
//! healthy one), or the balancer stops. A server that refuses the connection is marked
//! failed at once and the next candidate is tried; a client for whom no server answers is
//! closed, never left waiting.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::balancer::Balancer;
use super::relay;
use crate::failover::Candidate;
use crate::http_client::{self, ClientError};

/// Tuning of the data path.
#[derive(Debug, Clone)]
pub struct ProxySettings {
    /// How long one connection attempt to a server may take before the next is tried.
    pub connect_timeout: Duration,
    /// Client connections open at once; more wait in the listen backlog.
    pub max_connections: usize,
}

/// Counts a connection as open while it lives.
struct OpenGuard<'a>(&'a AtomicUsize);

impl<'a> OpenGuard<'a> {
    fn new(counter: &'a AtomicUsize) -> Self {
        counter.fetch_add(1, Ordering::Relaxed);
        OpenGuard(counter)
    }
}

impl Drop for OpenGuard<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

/// Accepts until `stop`; every connection task is tracked by `tracker` and closed on `kill`.
pub async fn serve(
    listener: TcpListener,
    balancer: Arc<Balancer>,
    settings: ProxySettings,
    tracker: TaskTracker,
    stop: CancellationToken,
    kill: CancellationToken,
) {
    let permits = Arc::new(Semaphore::new(settings.max_connections));
    loop {
        let permit = tokio::select! {
            _ = stop.cancelled() => return,
            permit = permits.clone().acquire_owned() => match permit {
                Ok(permit) => permit,
                Err(_) => return,
            },
        };
        let (client, peer) = tokio::select! {
            _ = stop.cancelled() => return,
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(e) => {
                    // EMFILE and friends: back off instead of spinning.
                    tracing::warn!("accepting a connection: {e}");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            },
        };
        balancer.counters.accepted.fetch_add(1, Ordering::Relaxed);
        let (balancer, settings, kill) = (balancer.clone(), settings.clone(), kill.clone());
        tracker.spawn(async move {
            handle(client, peer, &balancer, &settings, &kill).await;
            drop(permit);
        });
    }
}

/// One client connection, from accept to close.
async fn handle(
    client: TcpStream,
    peer: SocketAddr,
    balancer: &Balancer,
    settings: &ProxySettings,
    kill: &CancellationToken,
) {
    let _open = OpenGuard::new(&balancer.counters.open);
    let _ = client.set_nodelay(true);
    let mut tried = Vec::new();
    for candidate in balancer.servers.candidates() {
        let attempt = tokio::select! {
            _ = kill.cancelled() => return,
            attempt = connect(&candidate, settings.connect_timeout) => attempt,
        };
        match attempt {
            Ok(server) => return forward(client, server, peer, candidate, kill).await,
            Err(reason) => {
                balancer.servers.on_connect_failed(&candidate.addr, &reason);
                tried.push(candidate.addr);
            }
        }
    }
    balancer.counters.unserved.fetch_add(1, Ordering::Relaxed);
    tracing::warn!("client {peer}: no server took the connection (tried {tried:?}); closing it");
}

/// Connects to where the candidate's last passing check connected, else (never checked, or
/// failed since) to its address as given, resolving a host name.
async fn connect(candidate: &Candidate, limit: Duration) -> Result<TcpStream, ClientError> {
    match candidate.reached {
        Some(reached) => http_client::connect(reached, limit).await,
        None => http_client::connect(candidate.addr.as_str(), limit).await,
    }
}

/// Copies bytes both ways until one side closes, the server fails, or the balancer stops.
async fn forward(
    client: TcpStream,
    server: TcpStream,
    peer: SocketAddr,
    candidate: Candidate,
    kill: &CancellationToken,
) {
    let _ = server.set_nodelay(true);
    let _open = OpenGuard::new(&candidate.counters.open);
    candidate.counters.total.fetch_add(1, Ordering::Relaxed);
    let copy = relay::relay(&client, &server);
    tokio::select! {
        copied = copy => {
            if let Err(e) = copied {
                tracing::debug!("client {peer} <-> {}: {e}", candidate.addr);
            }
        }
        _ = candidate.closed.cancelled() => {
            tracing::debug!("client {peer}: closed because {} failed", candidate.addr);
        }
        _ = kill.cancelled() => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::failover::Failover;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    /// A balancer in front of `name` only, serving on a fresh port; the backend it may
    /// reach answers `pong` to `ping`. Returns what a client that sends `ping` reads.
    async fn ping_through(
        name: &str,
        reached: Option<SocketAddr>,
        backend: TcpListener,
    ) -> Vec<u8> {
        tokio::spawn(async move {
            while let Ok((mut conn, _)) = backend.accept().await {
                tokio::spawn(async move {
                    let mut ping = [0u8; 4];
                    if conn.read_exact(&mut ping).await.is_ok() {
                        let _ = conn.write_all(b"pong").await;
                    }
                });
            }
        });
        let servers = Failover::new(vec![name.to_string()], &[], None);
        if let Some(reached) = reached {
            servers.on_check(name, Ok(reached));
        }
        let balancer = Arc::new(Balancer::new(Arc::new(servers)));
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let front = listener.local_addr().unwrap();
        let (stop, kill) = (CancellationToken::new(), CancellationToken::new());
        let settings = ProxySettings {
            connect_timeout: Duration::from_secs(2),
            max_connections: 8,
        };
        let serving = tokio::spawn(serve(
            listener,
            balancer,
            settings,
            TaskTracker::new(),
            stop.clone(),
            kill.clone(),
        ));
        let mut client = TcpStream::connect(front).await.unwrap();
        client.write_all(b"ping").await.unwrap();
        let mut answer = Vec::new();
        let _ =
            tokio::time::timeout(Duration::from_secs(10), client.read_to_end(&mut answer)).await;
        stop.cancel();
        kill.cancel();
        let _ = serving.await;
        answer
    }

    #[tokio::test]
    async fn connections_go_where_the_last_passing_check_connected_without_a_lookup() {
        // The name cannot resolve (`.invalid` is reserved): only the address the check
        // reached can serve the client.
        let backend = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let reached = backend.local_addr().unwrap();
        let answer = ping_through("server.invalid:6443", Some(reached), backend).await;
        assert_eq!(answer, b"pong");
    }

    #[tokio::test]
    async fn a_server_never_checked_is_connected_by_name() {
        let backend = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = backend.local_addr().unwrap().port();
        let answer = ping_through(&format!("127.0.0.1:{port}"), None, backend).await;
        assert_eq!(answer, b"pong");
        // And an unresolvable name with no check behind it serves nobody.
        let backend = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let answer = ping_through("server.invalid:6443", None, backend).await;
        assert!(answer.is_empty(), "{answer:?}");
    }
}
