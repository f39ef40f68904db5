//! Writes of a cluster member (SPEC H4): on the leader a Mutation goes through the batcher
//! into the Raft log; on a follower it is forwarded to the leader as a proposal, and the
//! answer waits until this member has applied it (read-your-writes through one server).
//!
//! Retries only happen when the attempt certainly had no effect (no leader known, the target
//! said it does not lead, the target was unreachable); an attempt whose fate is unknown is a
//! 504 that "may or may not have been applied" (SPEC H11). `LeaderOnlyWriter` never forwards:
//! leader-only loops (SPEC H6) must fail once their server stops leading.

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use super::node::{ClusterNode, Leadership};
use super::peer::PeerError;
use super::protocol::{paths, ProposeReply, ProposeRequest};
use crate::kube::mutation::Mutation;
use crate::kube::object::ObjectRef;
use crate::kube::store::stored_from_json;
use crate::kube::writer::{WriteError, WriteFuture, Writer};
use crate::raft::batcher::ProposeError;
use crate::raft::types::Proposal;

/// How long a write waits for a leader before answering 504 (SPEC H11).
pub const NO_LEADER_TIMEOUT: Duration = Duration::from_secs(15);
/// Pause before retrying after an attempt that had no effect.
const RETRY_PAUSE: Duration = Duration::from_millis(100);
/// How long a forwarded proposal may take at the leader.
const FORWARD_TIMEOUT: Duration = Duration::from_secs(10);

/// The writer of API handlers on a cluster member.
pub struct ClusterWriter {
    pub node: Arc<ClusterNode>,
}

/// The writer of leader-only loops: proposes locally or fails.
pub struct LeaderOnlyWriter {
    pub node: Arc<ClusterNode>,
}

fn from_propose(e: ProposeError) -> WriteError {
    match e {
        ProposeError::Rejected(e) => WriteError::Rejected(e),
        ProposeError::NotLeader => {
            WriteError::Unavailable("this server stopped leading the cluster".into())
        }
        ProposeError::Raft(_) => WriteError::Timeout,
        ProposeError::Stopped => WriteError::Unavailable("the server is stopping".into()),
    }
}

impl Writer for LeaderOnlyWriter {
    fn write(&self, mutation: Mutation) -> WriteFuture<'_> {
        Box::pin(async move {
            if self.node.leadership() != Leadership::Me {
                return Err(WriteError::Unavailable(
                    "this server does not lead the cluster".into(),
                ));
            }
            let applied = self
                .node
                .propose_here(Proposal::new(mutation))
                .await
                .map_err(from_propose)?;
            applied
                .object
                .ok_or_else(|| WriteError::Unavailable("applied without an object".into()))
        })
    }
}

impl Writer for ClusterWriter {
    fn write(&self, mutation: Mutation) -> WriteFuture<'_> {
        Box::pin(self.write_with_retries(mutation))
    }
}

impl ClusterWriter {
    async fn write_with_retries(&self, mutation: Mutation) -> Result<ObjectRef, WriteError> {
        let deadline = Instant::now() + NO_LEADER_TIMEOUT;
        loop {
            let remaining = deadline.saturating_duration_since(Instant::now());
            if remaining.is_zero() {
                return Err(WriteError::Timeout);
            }
            match self.node.wait_for_leader(remaining).await {
                Leadership::Unknown => return Err(WriteError::Timeout),
                Leadership::Me => {
                    match self
                        .node
                        .propose_here(Proposal::new(mutation.clone()))
                        .await
                    {
                        Ok(applied) => {
                            return applied.object.ok_or_else(|| {
                                WriteError::Unavailable("applied without an object".into())
                            })
                        }
                        Err(ProposeError::NotLeader) => {}
                        Err(e) => return Err(from_propose(e)),
                    }
                }
                Leadership::Other { member, .. } => {
                    match self.forward(&member.raft, &mutation, deadline).await {
                        Attempt::Done(result) => return result,
                        Attempt::NoEffect => {}
                    }
                }
            }
            tokio::time::sleep(RETRY_PAUSE).await;
        }
    }

    async fn forward(&self, leader: &str, mutation: &Mutation, deadline: Instant) -> Attempt {
        let request = ProposeRequest {
            mutation: mutation.clone(),
        };
        let reply: Result<ProposeReply, PeerError> = self
            .node
            .peers
            .post(leader, paths::PROPOSE, &request, FORWARD_TIMEOUT)
            .await;
        match reply {
            Ok(ProposeReply::Applied {
                resource_version,
                key,
                json,
            }) => {
                // Read-your-writes: answer once this member has applied the write too.
                let remaining = deadline.saturating_duration_since(Instant::now());
                let reached = self
                    .node
                    .store
                    .wait_for(resource_version, remaining.max(Duration::from_secs(3)))
                    .await;
                if reached < resource_version {
                    return Attempt::Done(Err(WriteError::Timeout));
                }
                Attempt::Done(
                    stored_from_json(key, json.as_bytes())
                        .map(|mut object| {
                            object.resource_version = resource_version;
                            Arc::new(object)
                        })
                        .map_err(WriteError::Rejected),
                )
            }
            Ok(ProposeReply::Rejected(e)) => Attempt::Done(Err(WriteError::Rejected(e))),
            Ok(ProposeReply::NotLeader) => Attempt::NoEffect,
            Ok(ProposeReply::Failed(reason)) => {
                tracing::warn!(%leader, "forwarded write failed: {reason}");
                Attempt::Done(Err(WriteError::Timeout))
            }
            Err(PeerError::Unreachable { .. }) => Attempt::NoEffect,
            Err(e) => {
                tracing::warn!(%leader, "forwarded write: {e}");
                Attempt::Done(Err(WriteError::Timeout))
            }
        }
    }
}

enum Attempt {
    Done(Result<ObjectRef, WriteError>),
    NoEffect,
}
