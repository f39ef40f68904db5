//! The data path: accept client connections (bounded by `--max-connections`), connect each
//! to the best server that takes it, and move bytes both ways untouched (`lb::relay`: copied
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
use super::probe;
use super::relay;
use super::servers::Candidate;

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
    for candidate in balancer.candidates() {
        let attempt = tokio::select! {
            _ = kill.cancelled() => return,
            attempt = probe::connect(&candidate.addr, settings.connect_timeout) => attempt,
        };
        match attempt {
            Ok(server) => return forward(client, server, peer, candidate, kill).await,
            Err(reason) => {
                balancer.on_connect_failed(&candidate.addr, reason);
                tried.push(candidate.addr);
            }
        }
    }
    balancer.counters.unserved.fetch_add(1, Ordering::Relaxed);
    tracing::warn!("client {peer}: no server took the connection (tried {tried:?}); closing it");
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
