//! Member discovery: every interval, ask the best server known for the cluster's API
//! addresses (`GET /litek8s/v1/apiservers`, public and read-only, served by
//! every litek8s cluster member over plain HTTP and HTTPS) and hand the list to the server
//! list, which adds new members and drops departed ones. A server without that endpoint (a
//! single litek8s server, a kube-apiserver) answers 404: the given servers are then all
//! there is, said once in the log.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use serde::Deserialize;
use tokio_util::sync::CancellationToken;

use super::Failover;
use crate::cluster::protocol::api_paths::APISERVERS;
use crate::http_client::{self, ClientError, Limits, ServerUrl, Transport};

/// How many servers one round asks at most before giving up until the next.
const ASK_PER_ROUND: usize = 2;

/// The largest member list read (a list of 5 servers is a few hundred bytes).
const MAX_LISTING: usize = 64 << 10;

/// The endpoint's answer.
#[derive(Debug, Deserialize)]
pub struct Listing {
    pub servers: Vec<String>,
}

/// Why a server gave no member list.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum NoListing {
    /// The server has no such endpoint (404): a single server or not litek8s.
    #[error("{APISERVERS} answered 404")]
    NotACluster,
    #[error("{0}")]
    NoAnswer(ClientError),
    #[error("{APISERVERS} answered {0}")]
    Status(u16),
    #[error("{APISERVERS}: {0}")]
    Undecodable(String),
}

/// Asks `addr` for the member list.
pub async fn ask(
    addr: &str,
    transport: &Transport,
    limit: Duration,
) -> Result<Vec<String>, NoListing> {
    let limits = Limits::new(limit, MAX_LISTING);
    let answer = http_client::get(addr, APISERVERS, transport, limits)
        .await
        .map_err(NoListing::NoAnswer)?;
    match answer.status.as_u16() {
        200 => {}
        404 => return Err(NoListing::NotACluster),
        code => return Err(NoListing::Status(code)),
    }
    let listing: Listing =
        serde_json::from_slice(&answer.body).map_err(|e| NoListing::Undecodable(e.to_string()))?;
    Ok(listing
        .servers
        .into_iter()
        .filter(|a| is_address(a))
        .collect())
}

/// Whether a listed member is a plain `host:port`, written as the server list writes it.
fn is_address(listed: &str) -> bool {
    ServerUrl::parse(listed).is_ok_and(|url| url.scheme.is_none() && url.authority() == listed)
}

/// Learns the membership every `interval` until `stop`.
pub async fn run(
    servers: Arc<Failover>,
    transport: Transport,
    interval: Duration,
    limit: Duration,
    stop: CancellationToken,
) {
    let mut told_not_cluster = HashSet::new();
    let mut ticks = tokio::time::interval(interval);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = ticks.tick() => {}
        }
        for candidate in servers.candidates().into_iter().take(ASK_PER_ROUND) {
            let addr = candidate.addr;
            let result = tokio::select! {
                _ = stop.cancelled() => return,
                result = ask(&addr, &transport, limit) => result,
            };
            match result {
                Ok(listed) => {
                    servers.on_members(&listed);
                    break;
                }
                Err(NoListing::NotACluster) => {
                    if told_not_cluster.insert(addr.clone()) {
                        tracing::info!("{addr} does not list cluster members (a single server or not litek8s): using the servers known so far");
                    }
                    break;
                }
                Err(reason) => {
                    tracing::debug!("{addr}: no member list: {reason}");
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::is_address;

    #[test]
    fn only_plain_host_port_members_are_taken() {
        for good in ["10.0.0.1:6443", "cp1.example:7443", "[fd00::1]:6443"] {
            assert!(is_address(good), "{good}");
        }
        for bad in [
            "",
            "10.0.0.1",
            "https://10.0.0.1:6443",
            "10.0.0.1:6443/",
            "x:0",
            "fd00::1:6443",
            "a b:1",
        ] {
            assert!(!is_address(bad), "{bad}");
        }
    }
}
