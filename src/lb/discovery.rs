//! Member discovery: every interval the balancer asks the best server it knows for the
//! cluster's API addresses (`GET /litek8s/v1/apiservers`, public and read-only, served by
//! every litek8s cluster member over plain HTTP and HTTPS) and hands the list to the server
//! list, which adds new members and drops departed ones. A server without that endpoint (a
//! single litek8s server, a kube-apiserver) answers 404: the given servers are then all
//! there is, said once in the log.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use serde::Deserialize;
use tokio_util::sync::CancellationToken;

use super::balancer::Balancer;
use super::probe::{self, Transport};
use crate::cluster::protocol::api_paths::APISERVERS;

/// How many servers one round asks at most before giving up until the next.
const ASK_PER_ROUND: usize = 2;

/// The endpoint's answer.
#[derive(Debug, Deserialize)]
pub struct Listing {
    pub servers: Vec<String>,
}

/// Why a server gave no member list.
#[derive(Debug, PartialEq, Eq)]
pub enum NoListing {
    /// The server has no such endpoint (404).
    NotACluster,
    /// Anything else: unreachable, not ready, garbage.
    Failed(String),
}

/// Asks `addr` for the member list.
pub async fn ask(
    addr: &str,
    transport: &Transport,
    limit: Duration,
) -> Result<Vec<String>, NoListing> {
    let answer = probe::get(addr, APISERVERS, transport, limit)
        .await
        .map_err(NoListing::Failed)?;
    match answer.status {
        200 => {}
        404 => return Err(NoListing::NotACluster),
        code => return Err(NoListing::Failed(format!("{APISERVERS} answered {code}"))),
    }
    let listing: Listing = serde_json::from_slice(&answer.body)
        .map_err(|e| NoListing::Failed(format!("{APISERVERS}: {e}")))?;
    let valid = listing
        .servers
        .into_iter()
        .filter(|a| {
            a.rsplit_once(':')
                .is_some_and(|(h, p)| !h.is_empty() && p.parse::<u16>().is_ok())
        })
        .collect();
    Ok(valid)
}

/// Learns the membership every `interval` until `stop`.
pub async fn run(
    balancer: Arc<Balancer>,
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
        for candidate in balancer.candidates().into_iter().take(ASK_PER_ROUND) {
            let addr = candidate.addr;
            let result = tokio::select! {
                _ = stop.cancelled() => return,
                result = ask(&addr, &transport, limit) => result,
            };
            match result {
                Ok(servers) => {
                    balancer.on_members(&servers);
                    break;
                }
                Err(NoListing::NotACluster) => {
                    if told_not_cluster.insert(addr.clone()) {
                        tracing::info!("{addr} does not list cluster members (a single server or not litek8s): using the servers known so far");
                    }
                    break;
                }
                Err(NoListing::Failed(reason)) => {
                    tracing::debug!("{addr}: no member list: {reason}");
                }
            }
        }
    }
}
