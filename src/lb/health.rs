//! Health checks: what counts as a ready server (`/readyz` answering 200 over plain HTTP, or
//! over TLS with `--https-check`, or only a TCP connect with `--tcp-check`), and the loop
//! that checks every known server once per interval and hands each result to the server
//! list as soon as it arrives (a hung server's timeout does not delay the others).

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use futures::stream::{FuturesUnordered, StreamExt};
use tokio_util::sync::CancellationToken;

use super::balancer::Balancer;
use super::probe::{self, Transport};

/// How a server is checked.
#[derive(Debug, Clone)]
pub enum CheckMode {
    /// `GET /readyz` over plain HTTP (litek8s answers it on the API port).
    Http,
    /// `GET /readyz` over TLS (kube-apiservers that allow anonymous /readyz).
    Https,
    /// Only a TCP connect.
    Tcp,
}

impl CheckMode {
    pub fn name(&self) -> &'static str {
        match self {
            CheckMode::Http => "http",
            CheckMode::Https => "https",
            CheckMode::Tcp => "tcp",
        }
    }
}

/// A check function: `Ok` with the address it reached (a host name resolved) when `addr` is
/// ready, else why not.
pub type CheckFn = Arc<
    dyn Fn(String) -> futures::future::BoxFuture<'static, Result<SocketAddr, String>> + Send + Sync,
>;

/// The real check for `mode`, each attempt bounded by `limit`.
pub fn checker(mode: &CheckMode, limit: Duration) -> Result<CheckFn, String> {
    let transport = match mode {
        CheckMode::Http | CheckMode::Tcp => Transport::Plain,
        CheckMode::Https => Transport::unverified_tls()?,
    };
    let tcp_only = matches!(mode, CheckMode::Tcp);
    Ok(Arc::new(move |addr: String| {
        let transport = transport.clone();
        Box::pin(async move {
            if tcp_only {
                let stream = probe::connect(addr.as_str(), limit).await?;
                return stream
                    .peer_addr()
                    .map_err(|e| format!("connected, then: {e}"));
            }
            let (answer, reached) = probe::get_reaching(&addr, "/readyz", &transport, limit)
                .await
                .map_err(|e| format!("readyz: {e}"))?;
            match answer.status {
                200 => Ok(reached),
                code => Err(format!("readyz answered {code}")),
            }
        })
    }))
}

/// Checks every server every `interval` until `stop`.
pub async fn run(
    balancer: Arc<Balancer>,
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
        let mut round: FuturesUnordered<_> = balancer
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
                    Some((addr, result)) => balancer.on_check(&addr, result),
                    None => break,
                },
            }
        }
    }
}
