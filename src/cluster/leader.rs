//! What the leader-gated singletons (controllers, scheduler, bootstrap objects, the
//! `kubernetes` endpoints; docs/guarantees.md, Leader-only loops) need from the cluster: when they may run, what their writes and
//! reads go through, and which members' API servers are up to date.
//!
//! They may run once this member leads and has applied an entry of its own term (so its store
//! holds everything committed before it), and must stop as soon as it stops leading. Their
//! writes go through `LeaderOnlyWriter`, which proposes locally and fails, never forwards, on
//! a member that no longer leads: a deposed leader's controllers cannot act on stale state,
//! because a proposal of an old term never commits.

use std::net::IpAddr;
use std::sync::Arc;

use openraft::ServerState;
use tokio::sync::watch;

use super::membership;
use super::node::{ClusterNode, Leadership};
use crate::kube::writer::{BarrierError, BarrierFuture, ReadBarrier};

/// A member at most this many entries behind counts as up to date for the endpoints.
const UP_TO_DATE_LAG: u64 = 1_000;

/// The term this member leads in, if it leads and has applied an entry of that term.
fn leading_term(node: &ClusterNode) -> Option<u64> {
    let m = node.metrics();
    let caught_up = m.state == ServerState::Leader
        && m.vote.is_committed()
        && m.last_applied
            .as_ref()
            .is_some_and(|applied| &applied.leader_id == m.vote.leader_id());
    caught_up.then_some(m.current_term)
}

/// A receiver of `Some(term)` while this member may run the leader-gated singletons, `None`
/// otherwise; it follows the Raft metrics until the node stops.
pub fn watch_leading(node: Arc<ClusterNode>) -> watch::Receiver<Option<u64>> {
    let (tx, rx) = watch::channel(leading_term(&node));
    let mut metrics = node.raft.metrics();
    tokio::spawn(async move {
        loop {
            let now = leading_term(&node);
            tx.send_if_modified(|current| {
                let changed = *current != now;
                *current = now;
                changed
            });
            tokio::select! {
                _ = tx.closed() => return,
                changed = metrics.changed() => if changed.is_err() {
                    tx.send_replace(None);
                    return;
                },
            }
        }
    });
    rx
}

/// The read barrier of leader-gated writers: passes while this member leads. A full ReadIndex
/// round is not needed: what such a writer reads only decides a proposal, and a proposal of a
/// member that has been deposed never commits.
pub struct LeaderReads {
    pub node: Arc<ClusterNode>,
}

impl ReadBarrier for LeaderReads {
    fn linearize(&self) -> BarrierFuture<'_> {
        let leading = self.node.leadership() == Leadership::Me;
        Box::pin(async move {
            if leading {
                Ok(())
            } else {
                Err(BarrierError::Unavailable(
                    "this server does not lead the cluster".into(),
                ))
            }
        })
    }
}

/// The IPs of the members whose API is up to date, the leader's first.
pub fn up_to_date_ips(node: &ClusterNode) -> Vec<IpAddr> {
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
