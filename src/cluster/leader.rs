//! Leader-only loops (docs/guarantees.md, Leader-only loops): started once this member leads
//! and has applied an entry of its own term (so its store holds everything committed before),
//! cancelled as soon as it stops leading. Their writes go through `LeaderOnlyWriter` and fail,
//! never forward, on a member that no longer leads. The loops: the bootstrap objects, and the
//! `default/kubernetes` Endpoints/EndpointSlice published from the members that are up to date
//! (docs/guarantees.md, Identity Leases and the kubernetes endpoints).

use std::net::IpAddr;
use std::sync::Arc;
use std::time::Duration;

use openraft::ServerState;
use tokio_util::sync::CancellationToken;

use super::membership;
use super::node::ClusterNode;
use super::writer::LeaderOnlyWriter;
use crate::api::{ApiContext, ApiSettings};
use crate::kube::store::Store;

/// How often the leader re-checks the published endpoints.
const RECONCILE_EVERY: Duration = Duration::from_secs(5);
/// A member at most this many entries behind counts as up to date for the endpoints.
const UP_TO_DATE_LAG: u64 = 1_000;

/// Whether the metrics say "leader, with an applied entry of its own term".
fn leading_and_caught_up(node: &ClusterNode) -> bool {
    let m = node.metrics();
    m.state == ServerState::Leader
        && m.vote.is_committed()
        && m.last_applied
            .as_ref()
            .is_some_and(|applied| &applied.leader_id == m.vote.leader_id())
}

/// Runs until `shutdown`, starting and stopping the leader-only loops as leadership comes
/// and goes.
pub async fn run(
    node: Arc<ClusterNode>,
    store: Arc<Store>,
    settings: ApiSettings,
    shutdown: CancellationToken,
) {
    let mut metrics = node.raft.metrics();
    let mut running: Option<CancellationToken> = None;
    loop {
        let leading = leading_and_caught_up(&node);
        match (leading, &running) {
            (true, None) => {
                let term = node.metrics().current_term;
                tracing::info!(term, "leading: starting the leader-only loops");
                let token = shutdown.child_token();
                tokio::spawn(reconcile_loop(
                    node.clone(),
                    store.clone(),
                    settings.clone(),
                    token.clone(),
                ));
                running = Some(token);
            }
            (false, Some(token)) => {
                tracing::info!("no longer leading: stopping the leader-only loops");
                token.cancel();
                running = None;
            }
            _ => {}
        }
        tokio::select! {
            _ = shutdown.cancelled() => return,
            changed = metrics.changed() => if changed.is_err() { return },
        }
    }
}

/// `LITEK8S_FAILPOINT_BOOTSTRAP_DELAY_MS=N`: a new leader waits N ms before its first pass
/// over the bootstrap objects, so that a test can show readiness waiting for them. Unset in
/// production.
fn bootstrap_delay_failpoint() -> Option<Duration> {
    let ms = std::env::var("LITEK8S_FAILPOINT_BOOTSTRAP_DELAY_MS").ok()?;
    ms.parse().ok().map(Duration::from_millis)
}

/// The IPs of the members whose API is up to date, the leader's first.
fn up_to_date_ips(node: &ClusterNode) -> Vec<IpAddr> {
    let view = membership::view(node);
    let mut ips: Vec<IpAddr> = Vec::new();
    let mut members = view.members;
    members.sort_by_key(|m| (!m.leader, m.name.clone()));
    for m in members {
        if !m.voter || m.lag.is_some_and(|lag| lag > UP_TO_DATE_LAG) {
            continue;
        }
        if let Some(ip) = host_ip(&m.api) {
            if !ips.contains(&ip) {
                ips.push(ip);
            }
        }
    }
    ips
}

fn host_ip(addr: &str) -> Option<IpAddr> {
    addr.parse::<std::net::SocketAddr>().ok().map(|a| a.ip())
}

async fn reconcile_loop(
    node: Arc<ClusterNode>,
    store: Arc<Store>,
    settings: ApiSettings,
    stop: CancellationToken,
) {
    if let Some(delay) = bootstrap_delay_failpoint() {
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = tokio::time::sleep(delay) => {}
        }
    }
    loop {
        let mut current = settings.clone();
        let ips = up_to_date_ips(&node);
        if !ips.is_empty() {
            current.node_ips = ips;
        }
        let ctx = ApiContext::new(
            store.clone(),
            Arc::new(LeaderOnlyWriter { node: node.clone() }),
            current,
        );
        tokio::select! {
            _ = stop.cancelled() => return,
            result = crate::server::bootstrap::ensure_all(&ctx) => {
                if let Err(e) = result {
                    tracing::warn!("leader: bootstrap objects: {e}");
                }
            }
        }
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = tokio::time::sleep(RECONCILE_EVERY) => {}
        }
    }
}
