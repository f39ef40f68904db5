//! Faster failover when the leader's process is gone (docs/guarantees.md, Timers).
//!
//! With openraft 0.9 a follower campaigns only after the leader lease (3 s) plus its random
//! election timeout (1.5–3 s), and voters refuse every vote while the lease runs. That delay is
//! the rule for every failure litek8s cannot tell apart from a slow or cut-off leader. One
//! failure it can tell apart: the leader's *process* died while its host stayed up (a crash, an
//! OOM kill, SIGKILL). Its Raft port then refuses connections at once (`ECONNREFUSED`), which a
//! hung, stopped or partitioned leader never does (a stopped process still completes TCP
//! handshakes; a cut link times out).
//!
//! Each voting follower runs [`watch_leader`]: after two heartbeats without an AppendEntries it
//! probes the leader's Raft port; when two probes in a row are refused, the leader process is
//! gone and this follower campaigns the moment the lease it last saw has run out, instead of
//! waiting for its election timeout on top. To avoid split votes the survivors campaign one
//! after another, in the order of their node ids, a few heartbeats apart; each checks before
//! campaigning that no new leader appeared. A survivor that refuses its vote to an earlier one
//! because that one's log is behind its own (so it cannot win) campaigns at once instead of at
//! its turn. The election itself is ordinary Raft (the voters
//! still check the lease and the candidate's log), so this changes when a campaign starts,
//! never whether it may win.

use std::io::ErrorKind;
use std::sync::Arc;
use std::time::{Duration, Instant};

use openraft::ServerState;
use tokio::net::TcpStream;
use tokio_util::sync::CancellationToken;

use super::node::{ClusterNode, Leadership};
use crate::raft::types::NodeId;

/// Probes refused in a row before the leader's process counts as gone.
const REFUSED_PROBES: u32 = 2;

/// What a probe of the leader's Raft port found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Probe {
    /// Something accepted the connection: the leader may be slow, stopped or fine.
    Accepted,
    /// The host answered that nothing listens there: the process is gone.
    Refused,
    /// No answer in time, or another error: nothing can be concluded.
    Unknown,
}

async fn probe(addr: &str, timeout: Duration) -> Probe {
    match tokio::time::timeout(timeout, TcpStream::connect(addr)).await {
        Ok(Ok(_)) => Probe::Accepted,
        Ok(Err(e)) if e.kind() == ErrorKind::ConnectionRefused => Probe::Refused,
        Ok(Err(_)) | Err(_) => Probe::Unknown,
    }
}

/// This member's place among the voters that would replace `leader`, by node id; `None` when
/// it is not a voter.
fn campaign_rank(node: &ClusterNode, leader: NodeId) -> Option<u32> {
    let metrics = node.metrics();
    let membership = metrics.membership_config.membership();
    let mut voters: Vec<NodeId> = membership.voter_ids().filter(|id| *id != leader).collect();
    voters.sort_unstable();
    voters
        .iter()
        .position(|id| *id == node.id)
        .map(|rank| rank as u32)
}

/// Runs on every member until `shutdown` (it only acts while this member is a voting
/// follower of another leader).
pub async fn watch_leader(node: Arc<ClusterNode>, shutdown: CancellationToken) {
    let heartbeat = node.timers.heartbeat;
    let mut refused: u32 = 0;
    let mut watched: Option<NodeId> = None;
    loop {
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = tokio::time::sleep(heartbeat) => {}
        }
        let Leadership::Other { id: leader, member } = node.leadership() else {
            refused = 0;
            continue;
        };
        if watched != Some(leader) {
            watched = Some(leader);
            refused = 0;
        }
        let Some(heard_at) = node.heard_at() else {
            continue;
        };
        if heard_at.elapsed() < heartbeat * 2 {
            refused = 0;
            continue;
        }
        match probe(&member.raft, heartbeat).await {
            Probe::Refused => refused += 1,
            Probe::Accepted | Probe::Unknown => refused = 0,
        }
        if refused < REFUSED_PROBES {
            continue;
        }
        let Some(rank) = campaign_rank(&node, leader) else {
            continue;
        };
        refused = 0;
        tracing::info!(
            leader = %member.name,
            "the leader's process is gone (its Raft port refuses connections)"
        );
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = campaign_when_lease_ends(&node, leader, &member.raft, heard_at, rank) => {}
        }
    }
}

/// Waits until the lease heard at `heard_at` is over (plus this member's turn), then campaigns
/// if `leader` is still the leader this member knows and still refuses connections.
async fn campaign_when_lease_ends(
    node: &ClusterNode,
    leader: NodeId,
    leader_raft: &str,
    heard_at: Instant,
    rank: u32,
) {
    let heartbeat = node.timers.heartbeat;
    // The lease runs from the last AppendEntries a voter accepted; one heartbeat of margin
    // covers a heartbeat that reached another voter a little later than this one.
    let turn = heartbeat * (1 + 3 * rank);
    let at = heard_at + node.timers.election_max + turn;
    if rank == 0 {
        tokio::time::sleep_until(at.into()).await;
    } else {
        // A survivor ahead in turn whose log is behind this one's cannot win: this member
        // refuses it its vote. Then this member campaigns at once instead of at its turn.
        let first_turn = heard_at + node.timers.election_max + heartbeat;
        tokio::time::sleep_until(first_turn.into()).await;
        tokio::select! {
            _ = tokio::time::sleep_until(at.into()) => {}
            _ = node.refused_behind_candidate_after(heard_at) => {
                tracing::info!(rank, "refused a candidate with an older log: campaigning before my turn");
            }
        }
    }
    let metrics = node.metrics();
    let still_gone = metrics.state == ServerState::Follower
        && metrics.current_leader == Some(leader)
        && node.heard_at().is_some_and(|t| t <= heard_at)
        && probe(leader_raft, heartbeat).await == Probe::Refused;
    if !still_gone {
        return;
    }
    tracing::info!(rank, "campaigning now that the dead leader's lease is over");
    if let Err(e) = node.raft.trigger().elect().await {
        tracing::warn!("campaigning after the leader's process died: {e}");
        return;
    }
    // Give the election time to finish before watching again.
    let mut changes = node.raft.metrics();
    let _ = tokio::time::timeout(node.timers.election_max, async {
        while changes.borrow().current_leader == Some(leader) {
            if changes.changed().await.is_err() {
                return;
            }
        }
    })
    .await;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_closed_port_is_refused_and_an_open_one_accepted() {
        let listener = match tokio::net::TcpListener::bind("127.0.0.1:0").await {
            Ok(l) => l,
            Err(e) => panic!("bind: {e}"),
        };
        let addr = match listener.local_addr() {
            Ok(a) => a.to_string(),
            Err(e) => panic!("local_addr: {e}"),
        };
        assert_eq!(probe(&addr, Duration::from_secs(1)).await, Probe::Accepted);
        drop(listener);
        assert_eq!(probe(&addr, Duration::from_secs(1)).await, Probe::Refused);
    }
}
