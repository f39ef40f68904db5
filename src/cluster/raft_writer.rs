//! Writes of a cluster member (docs/guarantees.md, Writes): on the leader a Mutation goes through
//! the batcher into the Raft log; on a follower it is forwarded to the leader as a proposal, and
//! the answer waits until this member has applied it (read-your-writes through one server).
//!
//! A forwarded proposal carries this server's client session and a sequence number
//! (`raft::sessions`), so an attempt whose answer was lost (the leader died or the connection
//! broke after it proposed) is sent again, to whoever leads then, and applies once. Local
//! proposals on the leader carry no session: they are retried only when the attempt certainly
//! had no effect (the batcher found this server no longer leading before proposing). After
//! 15 s without an answer the write is a 504 that "may or may not have been applied"
//! (as with etcd's timeouts). `LeaderOnlyWriter` never forwards: leader-only loops must fail
//! once their server stops leading, rather than act on a stale view.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;

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

/// How long a write waits for a leader before answering 504 (docs/guarantees.md, Writes).
pub const NO_LEADER_TIMEOUT: Duration = Duration::from_secs(15);
/// Pause before retrying after an attempt that had no effect.
const RETRY_PAUSE: Duration = Duration::from_millis(100);
/// How long a forwarded proposal may take at the leader.
const FORWARD_TIMEOUT: Duration = Duration::from_secs(10);

/// The writer of API handlers on a cluster member.
pub struct ClusterWriter {
    pub node: Arc<ClusterNode>,
    session: ClientSession,
}

/// This server's client session: a random id drawn at start, the next sequence number and
/// the proposals still waiting for their answer.
struct ClientSession {
    id: u64,
    state: Mutex<SessionState>,
}

#[derive(Default)]
struct SessionState {
    next_seq: u64,
    waiting: BTreeSet<u64>,
}

impl ClientSession {
    fn new() -> ClientSession {
        ClientSession {
            id: rand::random::<u64>() >> 1,
            state: Mutex::new(SessionState {
                next_seq: 1,
                waiting: BTreeSet::new(),
            }),
        }
    }

    /// Takes the next sequence number; it waits until [`ClientSession::answered`].
    fn start(&self) -> u64 {
        let mut state = self.state.lock();
        let seq = state.next_seq;
        state.next_seq += 1;
        state.waiting.insert(seq);
        seq
    }

    /// Every seq below the oldest one still waiting has its answer.
    fn acked(&self) -> u64 {
        let state = self.state.lock();
        match state.waiting.first() {
            Some(oldest) => oldest - 1,
            None => state.next_seq - 1,
        }
    }

    fn answered(&self, seq: u64) {
        self.state.lock().waiting.remove(&seq);
    }
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
    pub fn new(node: Arc<ClusterNode>) -> ClusterWriter {
        ClusterWriter {
            node,
            session: ClientSession::new(),
        }
    }

    async fn write_with_retries(&self, mutation: Mutation) -> Result<ObjectRef, WriteError> {
        let deadline = Instant::now() + NO_LEADER_TIMEOUT;
        // Taken at the first forwarded attempt and kept by every retry of it.
        let mut seq: Option<u64> = None;
        let result = self.attempts(&mutation, deadline, &mut seq).await;
        if let Some(seq) = seq {
            self.session.answered(seq);
        }
        result
    }

    async fn attempts(
        &self,
        mutation: &Mutation,
        deadline: Instant,
        seq: &mut Option<u64>,
    ) -> Result<ObjectRef, WriteError> {
        loop {
            let remaining = deadline.saturating_duration_since(Instant::now());
            if remaining.is_zero() {
                return Err(WriteError::Timeout);
            }
            match self.node.wait_for_leader(remaining).await {
                Leadership::Unknown => return Err(WriteError::Timeout),
                Leadership::Me if seq.is_none() => {
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
                // A retry of a forwarded proposal keeps its session even if this server now
                // leads, so that the copy already in the log is recognised.
                Leadership::Me => {
                    let proposal = self.session_proposal(mutation, seq);
                    match self.node.propose_here(proposal).await {
                        Ok(applied) => {
                            return applied.object.ok_or_else(|| {
                                WriteError::Unavailable("applied without an object".into())
                            })
                        }
                        Err(ProposeError::Rejected(e)) => return Err(WriteError::Rejected(e)),
                        Err(ProposeError::Stopped) => {
                            return Err(from_propose(ProposeError::Stopped))
                        }
                        Err(e) => tracing::debug!("proposal of a retried write: {e}; retrying"),
                    }
                }
                Leadership::Other { member, .. } => {
                    let proposal = self.session_proposal(mutation, seq);
                    match self.forward(&member.raft, proposal, deadline).await {
                        Attempt::Done(result) => return result,
                        Attempt::Retry => {}
                    }
                }
            }
            tokio::time::sleep(RETRY_PAUSE).await;
        }
    }

    /// The proposal of `mutation` in this server's session, taking a seq on the first try.
    fn session_proposal(&self, mutation: &Mutation, seq: &mut Option<u64>) -> Proposal {
        let seq = *seq.get_or_insert_with(|| self.session.start());
        Proposal {
            mutation: mutation.clone(),
            session: Some(self.session.id),
            seq: Some(seq),
            acked: Some(self.session.acked()),
            prepared: Default::default(),
        }
    }

    async fn forward(&self, leader: &str, proposal: Proposal, deadline: Instant) -> Attempt {
        let request = ProposeRequest {
            mutation: proposal.mutation,
            session: proposal.session,
            seq: proposal.seq,
            acked: proposal.acked,
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
            Ok(ProposeReply::NotLeader) | Err(PeerError::Unreachable { .. }) => Attempt::Retry,
            // The outcome is unknown: the session makes sending it again safe.
            Ok(ProposeReply::Failed(reason)) => {
                tracing::info!(%leader, "forwarded write: {reason}; sending it again");
                Attempt::Retry
            }
            Err(e) => {
                tracing::info!(%leader, "forwarded write: {e}; sending it again");
                Attempt::Retry
            }
        }
    }
}

enum Attempt {
    Done(Result<ObjectRef, WriteError>),
    /// No answer: send the same proposal again (to whoever leads by then).
    Retry,
}
