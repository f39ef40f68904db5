//! The ReadIndex barrier of a cluster member (docs/guarantees.md, Reads). A round asks the leader
//! (itself, or over the Raft listener) for its read index — openraft confirms leadership with a
//! heartbeat round to a quorum — then waits until this member has applied that far. Concurrent
//! callers share rounds: callers that arrive while a round runs wait for the next one (a round must
//! start after the caller arrived to be linearizable), and the next round serves them all.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{mpsc, oneshot};
use tokio::time::Instant;

use super::node::{ClusterNode, Leadership};
use super::peer::PeerError;
use super::protocol::{paths, ReadIndexReply};
use crate::kube::writer::{BarrierError, BarrierFuture, ReadBarrier};

/// How long a barrier may take before the read answers 504.
const BARRIER_TIMEOUT: Duration = Duration::from_secs(15);
const RETRY_PAUSE: Duration = Duration::from_millis(100);

type Waiter = oneshot::Sender<Result<(), BarrierError>>;

/// The coalescing barrier; cheap to share.
pub struct ReadIndexBarrier {
    tx: mpsc::Sender<Waiter>,
}

impl ReadIndexBarrier {
    /// Starts the round loop on the current runtime.
    pub fn start(node: Arc<ClusterNode>) -> ReadIndexBarrier {
        let (tx, rx) = mpsc::channel(4096);
        tokio::spawn(rounds(node, rx));
        ReadIndexBarrier { tx }
    }
}

impl ReadBarrier for ReadIndexBarrier {
    fn linearize(&self) -> BarrierFuture<'_> {
        Box::pin(async move {
            let (tx, rx) = oneshot::channel();
            self.tx
                .send(tx)
                .await
                .map_err(|_| BarrierError::Unavailable("the server is stopping".into()))?;
            rx.await
                .map_err(|_| BarrierError::Unavailable("the server is stopping".into()))?
        })
    }
}

async fn rounds(node: Arc<ClusterNode>, mut rx: mpsc::Receiver<Waiter>) {
    while let Some(first) = rx.recv().await {
        let mut waiters = vec![first];
        while let Ok(more) = rx.try_recv() {
            waiters.push(more);
        }
        let outcome = round(&node).await;
        for waiter in waiters {
            let _ = waiter.send(outcome.clone());
        }
    }
}

/// One barrier round: a read index from the leader, then local apply up to it.
async fn round(node: &ClusterNode) -> Result<(), BarrierError> {
    let deadline = Instant::now() + BARRIER_TIMEOUT;
    let index = loop {
        let remaining = deadline.saturating_duration_since(Instant::now());
        if remaining.is_zero() {
            return Err(timeout());
        }
        let leadership = node.wait_for_leader(remaining).await;
        let attempt = match &leadership {
            Leadership::Unknown => return Err(timeout()),
            Leadership::Me => match node.leader_read_index().await {
                Ok(index) => Some(index),
                Err(e) if e.forward_to_leader().is_some() => None,
                Err(e) => return Err(BarrierError::Unavailable(e.to_string())),
            },
            Leadership::Other { member, .. } => {
                let asked = node
                    .peers
                    .post(&member.raft, paths::READ_INDEX, &(), remaining);
                // A leader cut off from us never answers; stop waiting for it as soon as
                // this member sees another leader (or an election), and ask again.
                let reply: Result<ReadIndexReply, PeerError> = tokio::select! {
                    reply = asked => reply,
                    _ = leadership_changes(node, &leadership) => {
                        tracing::debug!("read index from {}: leadership changed", member.name);
                        tokio::time::sleep(RETRY_PAUSE).await;
                        continue;
                    }
                };
                match reply {
                    Ok(ReadIndexReply::Index(index)) => Some(index),
                    Ok(ReadIndexReply::NotLeader) | Err(PeerError::Unreachable { .. }) => None,
                    Ok(ReadIndexReply::Failed(reason)) => {
                        tracing::debug!("read index from {}: {reason}", member.name);
                        None
                    }
                    Err(e) => {
                        tracing::debug!("read index from {}: {e}", member.name);
                        None
                    }
                }
            }
        };
        match attempt {
            Some(index) => break index,
            None => tokio::time::sleep(RETRY_PAUSE).await,
        }
    };
    let Some(index) = index else { return Ok(()) };
    let remaining = deadline.saturating_duration_since(Instant::now());
    node.raft
        .wait(Some(remaining))
        .applied_index_at_least(Some(index), "read index")
        .await
        .map(|_| ())
        .map_err(|_| timeout())
}

/// Resolves once this member's view of who leads differs from `seen`.
async fn leadership_changes(node: &ClusterNode, seen: &Leadership) {
    let mut metrics = node.raft.metrics();
    loop {
        if node.leadership() != *seen {
            return;
        }
        if metrics.changed().await.is_err() {
            // Raft stopped: nothing will change any more.
            std::future::pending::<()>().await;
        }
    }
}

fn timeout() -> BarrierError {
    BarrierError::Timeout(
        "no leader confirmed the read in time (this server may be cut off from the cluster)".into(),
    )
}
