//! A planned stop of the leader (SIGTERM, an upgrade) with as little write unavailability as
//! openraft 0.9 allows. 0.9 has no leadership transfer, and every voter rejects vote requests
//! while the leader lease it last saw (3 s by default) runs (engine `handle_vote_req`). So the
//! stopping leader names a successor — the voter with the most replicated log — and stops
//! sending heartbeats; the successor campaigns the moment the lease has run out instead of
//! after the lease plus a random 1.5–3 s election delay. bench/HA.md measures the window (its
//! SIGTERM rows): a faster handoff would need a leadership transfer that the voters honour
//! during the lease, which openraft 0.9 does not offer.

use std::sync::Arc;
use std::time::Duration;

use openraft::ServerState;

use super::membership;
use super::node::{ClusterNode, Leadership};
use super::protocol::paths;

/// Margin after the lease, for timer granularity and the last heartbeat in flight.
const LEASE_MARGIN: Duration = Duration::from_millis(50);

/// Called on the leader as it stops: tells the best successor to campaign once the lease is
/// over. Best effort: a failure only means the ordinary election timeout applies.
pub async fn hand_off(node: &ClusterNode) {
    if node.leadership() != Leadership::Me {
        return;
    }
    let view = membership::view(node);
    let successor = view
        .members
        .iter()
        .filter(|m| m.voter && m.node_id != node.id)
        .max_by_key(|m| m.matched);
    let Some(successor) = successor else { return };
    let sent: Result<(), _> = node
        .peers
        .post(
            &successor.raft,
            paths::LEADER_LEAVING,
            &(),
            Duration::from_secs(1),
        )
        .await;
    match sent {
        Ok(()) => tracing::info!(successor = %successor.name, "stopping: handed leadership off"),
        Err(e) => {
            tracing::warn!(successor = %successor.name, "stopping: handoff not delivered: {e}")
        }
    }
}

/// On the successor: waits for the old leader's lease to run out, then campaigns (unless a
/// new leader appeared meanwhile).
pub async fn campaign_after_lease(node: Arc<ClusterNode>) {
    let old_leader = node.metrics().current_leader;
    tokio::time::sleep(node.timers.election_max + LEASE_MARGIN).await;
    let metrics = node.metrics();
    if metrics.state == ServerState::Follower && metrics.current_leader == old_leader {
        tracing::info!("the leader stopped: campaigning now that its lease is over");
        if let Err(e) = node.raft.trigger().elect().await {
            tracing::warn!("campaigning after the leader stopped: {e}");
        }
    }
}
