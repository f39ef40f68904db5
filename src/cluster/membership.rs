//! Membership changes, run on the leader (docs/guarantees.md, Membership): a joiner enters as a
//! learner, is promoted to voter once caught up, one change at a time, keeping 3 or 5 voters (a
//! fourth server waits as a learner for a fifth; the first servers of a growing cluster are
//! promoted as they come). A joiner under the name or Raft address of an existing member replaces
//! it.

use std::collections::BTreeSet;

use openraft::error::{ClientWriteError, RaftError};
use openraft::ChangeMembers;

use super::member::Member;
use super::node::ClusterNode;
use super::protocol::{MemberView, MembersReply};
use crate::raft::types::NodeId;

/// Why a membership change did not happen. A caller acts on [`MembershipError::NotLeader`]
/// (the joiner or `server remove` asks the new leader); the others are refusals to report.
#[derive(Debug, thiserror::Error)]
pub enum MembershipError {
    #[error("no member named {0:?}")]
    NoSuchMember(String),
    #[error(
        "{0} leads the cluster; stop it (or run the removal on another server after a new leader is elected)"
    )]
    RemovingLeader(String),
    #[error("{action}: this server stopped leading during the change")]
    NotLeader { action: String },
    #[error("{action}: {reason}")]
    Raft { action: String, reason: String },
}

impl MembershipError {
    fn of(
        action: String,
        e: RaftError<NodeId, ClientWriteError<NodeId, openraft::BasicNode>>,
    ) -> Self {
        if e.forward_to_leader::<openraft::BasicNode>().is_some() {
            MembershipError::NotLeader { action }
        } else {
            MembershipError::Raft {
                action,
                reason: e.to_string(),
            }
        }
    }
}

fn members_of(node: &ClusterNode) -> Vec<(NodeId, Member, bool)> {
    let metrics = node.metrics();
    let membership = metrics.membership_config.membership();
    let voters: BTreeSet<NodeId> = membership.voter_ids().collect();
    membership
        .nodes()
        .map(|(id, n)| (*id, Member::from_node(n), voters.contains(id)))
        .collect()
}

/// The membership and replication state from this member's metrics.
pub fn view(node: &ClusterNode) -> MembersReply {
    let metrics = node.metrics();
    let last = metrics.last_log_index;
    let replication = metrics.replication.clone().unwrap_or_default();
    let members = members_of(node)
        .into_iter()
        .map(|(id, member, voter)| {
            let matched = if id == node.id {
                last
            } else {
                replication.get(&id).and_then(|m| m.map(|l| l.index))
            };
            MemberView {
                node_id: id,
                name: member.name,
                raft: member.raft,
                api: member.api,
                voter,
                leader: metrics.current_leader == Some(id),
                matched,
                lag: match (last, matched) {
                    (Some(l), Some(m)) => Some(l.saturating_sub(m)),
                    (Some(l), None) => Some(l + 1),
                    _ => None,
                },
            }
        })
        .collect();
    MembersReply {
        term: metrics.current_term,
        leader: metrics.current_leader,
        last_log_index: last,
        members,
    }
}

/// Admits `member` as node `id`: replaces a stale identity under the same name or address,
/// adds it as a learner (returns once it caught up), then promotes voters per the policy.
pub async fn admit(node: &ClusterNode, id: NodeId, member: Member) -> Result<(), MembershipError> {
    for (old_id, old, _) in members_of(node) {
        if old_id != id && (old.name == member.name || old.raft == member.raft) {
            tracing::info!(name = %old.name, old_id, new_id = id, "replacing the old identity of a returning server");
            remove_id(node, old_id).await?;
        }
    }
    if !members_of(node).iter().any(|(nid, _, _)| *nid == id) {
        node.raft
            .add_learner(id, member.to_node(), true)
            .await
            .map_err(|e| MembershipError::of(format!("adding {} as a learner", member.name), e))?;
        tracing::info!(name = %member.name, id, "learner caught up");
    }
    promote(node).await
}

/// Promotes learners while that keeps the voter count on the path 1 → 2 → 3 → 5.
async fn promote(node: &ClusterNode) -> Result<(), MembershipError> {
    loop {
        let members = members_of(node);
        let voters = members.iter().filter(|m| m.2).count();
        let learners: Vec<NodeId> = members.iter().filter(|m| !m.2).map(|m| m.0).collect();
        let wanted = match (voters, learners.len()) {
            (0..=2, n) if n > 0 => 1,
            (3, n) if n >= 2 => 1,
            (4, n) if n > 0 => 1,
            _ => 0,
        };
        if wanted == 0 {
            return Ok(());
        }
        let id = learners[0];
        node.raft
            .change_membership(ChangeMembers::AddVoterIds(BTreeSet::from([id])), false)
            .await
            .map_err(|e| MembershipError::of(format!("promoting node {id}"), e))?;
        tracing::info!(id, "promoted to voter");
    }
}

/// Removes the member named `name`.
pub async fn remove(node: &ClusterNode, name: &str) -> Result<(), MembershipError> {
    let Some((id, _, _)) = members_of(node).into_iter().find(|m| m.1.name == name) else {
        return Err(MembershipError::NoSuchMember(name.to_string()));
    };
    if id == node.id {
        return Err(MembershipError::RemovingLeader(name.to_string()));
    }
    remove_id(node, id).await?;
    promote(node).await
}

async fn remove_id(node: &ClusterNode, id: NodeId) -> Result<(), MembershipError> {
    let is_voter = members_of(node).iter().any(|m| m.0 == id && m.2);
    let change = if is_voter {
        ChangeMembers::RemoveVoters(BTreeSet::from([id]))
    } else {
        ChangeMembers::RemoveNodes(BTreeSet::from([id]))
    };
    node.raft
        .change_membership(change, false)
        .await
        .map_err(|e| MembershipError::of(format!("removing node {id}"), e))?;
    tracing::info!(id, "member removed");
    Ok(())
}

#[cfg(test)]
mod tests {
    use openraft::error::{ClientWriteError, Fatal, ForwardToLeader, RaftError};

    use super::MembershipError;

    #[test]
    fn a_change_that_lost_leadership_is_told_apart_from_a_refusal() {
        let moved =
            RaftError::APIError(ClientWriteError::ForwardToLeader(ForwardToLeader::empty()));
        assert!(matches!(
            MembershipError::of("promoting node 2".into(), moved),
            MembershipError::NotLeader { .. }
        ));
        let stopped = RaftError::Fatal(Fatal::Stopped);
        let refused = MembershipError::of("promoting node 2".into(), stopped);
        assert!(matches!(refused, MembershipError::Raft { .. }));
        assert!(refused.to_string().starts_with("promoting node 2: "));
    }
}
