//! Health checks: what counts as a ready server (`/readyz` answering 200, over plain HTTP or
//! TLS, or only a TCP connect), and the loop that checks every known server once per
//! interval and hands each result to the server list as soon as it arrives (a hung server's
//! timeout does not delay the others).

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use futures::stream::{FuturesUnordered, StreamExt};
use http::StatusCode;
use tokio_util::sync::CancellationToken;

use super::Failover;
use crate::http_client::{self, ClientError, Limits, Transport};

/// The largest `/readyz` answer read (litek8s answers a few bytes).
const MAX_ANSWER: usize = 64 << 10;

/// How a server is checked.
#[derive(Debug, Clone)]
pub enum Check {
    /// `GET /readyz` (litek8s answers it on the API port, over plain HTTP and TLS).
    Readyz(Transport),
    /// Only a TCP connect.
    Tcp,
}

/// Why a server failed its check. The text is the reason in the transition's log line.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CheckError {
    /// No HTTP answer: refused, unreachable, hung, garbage.
    #[error("readyz: {0}")]
    NoAnswer(ClientError),
    /// It answered, and not with 200: up but not ready (no leader yet, still replaying).
    #[error("readyz answered {0}")]
    NotReady(u16),
    /// A TCP check could not connect.
    #[error("{0}")]
    Connect(ClientError),
}

/// A check function: `Ok` with the address it reached (a host name resolved) when `addr` is
/// ready, else why not. Tests give scripted ones.
pub type CheckFn = Arc<
    dyn Fn(String) -> futures::future::BoxFuture<'static, Result<SocketAddr, CheckError>>
        + Send
        + Sync,
>;

/// The real check, each attempt bounded by `limit`.
pub fn checker(check: Check, limit: Duration) -> CheckFn {
    Arc::new(move |addr: String| {
        let check = check.clone();
        Box::pin(async move {
            let transport = match check {
                Check::Tcp => {
                    let stream = http_client::connect(addr.as_str(), limit)
                        .await
                        .map_err(CheckError::Connect)?;
                    return stream.peer_addr().map_err(|e| {
                        CheckError::Connect(ClientError::Connect(format!("connected, then: {e}")))
                    });
                }
                Check::Readyz(transport) => transport,
            };
            let answer =
                http_client::get(&addr, "/readyz", &transport, Limits::new(limit, MAX_ANSWER))
                    .await
                    .map_err(CheckError::NoAnswer)?;
            match answer.status {
                StatusCode::OK => Ok(answer.reached),
                code => Err(CheckError::NotReady(code.as_u16())),
            }
        })
    })
}

/// Checks every server every `interval` until `stop`.
pub async fn run(
    servers: Arc<Failover>,
    check: CheckFn,
    interval: Duration,
    stop: CancellationToken,
) {
    let mut ticks = tokio::time::interval(interval);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = ticks.tick() => {}
        }
        let mut round: FuturesUnordered<_> = servers
            .addrs()
            .into_iter()
            .map(|addr| {
                let check = check.clone();
                async move {
                    let result = check(addr.clone()).await;
                    (addr, result)
                }
            })
            .collect();
        loop {
            tokio::select! {
                _ = stop.cancelled() => return,
                next = round.next() => match next {
                    Some((addr, result)) => servers.on_check(&addr, result),
                    None => break,
                },
            }
        }
    }
}
