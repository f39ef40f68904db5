//! One cluster member's Raft node: the openraft instance over the segmented log and the store's
//! state machine, running on its own runtime (a dedicated thread) so API load never delays
//! heartbeats (docs/guarantees.md, Transport), plus what the rest of the server asks of it: who
//! leads, local proposals through the batcher, and what this member last heard from its leader.

use std::sync::Arc;
use std::time::{Duration, Instant};

use openraft::{Raft, RaftMetrics, ServerState};
use parking_lot::Mutex;

use super::error::ClusterError;
use super::join_token::ClusterSecret;
use super::member::Member;
use super::network::Network;
use super::peer::PeerClient;
use super::timers::Timers;
use crate::kube::store::Store;
use crate::raft::batcher::{BatchLimits, Batcher, ProposeError};
use crate::raft::log::{LogConfig, LogStore};
use crate::raft::state_machine::StateMachine;
use crate::raft::types::{Applied, NodeId, Proposal, TypeConfig};

/// The log engine's settings: the defaults, with writes that a control file can delay when
/// a test arms the fail point `raft_log::write_delay` (see `crate::failpoints`).
fn log_config() -> LogConfig {
    let mut config = LogConfig::default();
    if let Some(control) = crate::failpoints::log_write_delay() {
        config.io = Arc::new(crate::storage::io::DelayedIo { control });
    }
    config
}

/// Who leads, as this member sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Leadership {
    /// This member leads.
    Me,
    /// Another member leads.
    Other { id: NodeId, member: Member },
    /// No leader known (election in progress, or cut off).
    Unknown,
}

/// What a follower last heard from a leader (AppendEntries, heartbeats included).
#[derive(Debug, Clone, Copy, Default)]
struct Heard {
    at: Option<Instant>,
    leader_commit: Option<u64>,
}

/// Everything needed to start a node.
pub struct NodeConfig {
    pub id: NodeId,
    pub me: Member,
    pub store: Arc<Store>,
    pub secret: ClusterSecret,
    pub ca_pem: String,
    pub timers: Timers,
    pub log_dir: std::path::PathBuf,
    pub snapshot_dir: std::path::PathBuf,
}

/// Why a member is not ready ([`ClusterNode::readiness`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NotReady {
    /// It has not applied the commit index it learned from the leader: a joining or
    /// restarted member catching up, or one that keeps up but had not applied the newest
    /// entries yet when asked (the readiness loop tells the two apart, `cluster::readiness`).
    Behind { applied: u64, commit: u64 },
    /// No leader, no recent word from it (or, leading, from a quorum), an election, shutdown.
    Other(String),
}

impl std::fmt::Display for NotReady {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            NotReady::Behind { applied, commit } => write!(
                f,
                "applied {applied} behind the learned commit index {commit}"
            ),
            NotReady::Other(why) => f.write_str(why),
        }
    }
}

/// A running Raft member.
pub struct ClusterNode {
    pub id: NodeId,
    pub me: Member,
    pub raft: Raft<TypeConfig>,
    pub store: Arc<Store>,
    pub secret: ClusterSecret,
    pub timers: Timers,
    /// Client for forwarding from the API runtime (proposals, read indexes, joins).
    pub peers: PeerClient,
    /// The last log index when this process started. openraft 0.9 restores a former leader as
    /// leader at once, with a committed index read back from the log that may lag what it had
    /// acknowledged; its reads must wait until it has applied everything it held
    /// (docs/guarantees.md, Reads).
    pub startup_last_log: Option<u64>,
    /// The commit index this process read back from its log at start: openraft re-applies
    /// up to it on its own, so that much is "replaying the local log"; entries above it
    /// wait for a leader to say they are committed.
    pub startup_committed: Option<u64>,
    batcher: Batcher,
    heard: Mutex<Heard>,
    /// When this member last refused a vote to a candidate whose log is behind its own
    /// (`cluster::crash_watch` campaigns at once then).
    refused_behind_candidate: tokio::sync::watch::Sender<Option<Instant>>,
    /// Bytes of the snapshot being received from the leader and when the last chunk came,
    /// for the systemd status line; `None` when no transfer is under way.
    snapshot_receiving: Mutex<Option<(u64, Instant)>>,
    runtime: Mutex<Option<tokio::runtime::Runtime>>,
}

impl Drop for ClusterNode {
    fn drop(&mut self) {
        if let Some(runtime) = self.runtime.lock().take() {
            runtime.shutdown_background();
        }
    }
}

impl ClusterNode {
    /// Opens the log and the state machine (restoring the store from the snapshot and log)
    /// and starts openraft on a dedicated runtime. The Raft listener is started separately
    /// (`rpc::serve`) with the returned node.
    pub async fn start(config: NodeConfig) -> Result<Arc<ClusterNode>, ClusterError> {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("litek8s-raft")
            .enable_all()
            .build()
            .map_err(|e| ClusterError::raft("starting the Raft runtime", e))?;
        let raft_config = Arc::new(
            config
                .timers
                .raft_config()
                .map_err(|e| ClusterError::raft("Raft configuration", e))?,
        );
        let (log_dir, snapshot_dir, store) = (
            config.log_dir.clone(),
            config.snapshot_dir.clone(),
            config.store.clone(),
        );
        let (log, state_machine) = tokio::task::spawn_blocking(move || {
            let log = LogStore::open(&log_dir, log_config())
                .map_err(|e| ClusterError::raft(log_dir.display().to_string(), e))?;
            let sm = StateMachine::open(&snapshot_dir, store)
                .map_err(|e| ClusterError::raft(snapshot_dir.display().to_string(), e))?;
            Ok::<_, ClusterError>((log, sm))
        })
        .await
        .map_err(|e| ClusterError::raft("opening the Raft log", e))??;
        let startup_committed = log.committed().map(|l| l.index);
        // From the log itself: openraft's metrics only show it once its core task has run,
        // which `Raft::new` does not wait for.
        let startup_last_log = log
            .log_state()
            .map_err(|e| ClusterError::raft("reading the Raft log's state", e))?
            .1
            .map(|l| l.index);

        let raft_peers = {
            let _guard = runtime.enter();
            PeerClient::new(&config.ca_pem, config.secret.clone())
                .map_err(|e| ClusterError::raft("peer client", e))?
        };
        let id = config.id;
        let raft = runtime
            .spawn(async move {
                Raft::new(
                    id,
                    raft_config,
                    Network { client: raft_peers },
                    log,
                    state_machine,
                )
                .await
            })
            .await
            .map_err(|e| ClusterError::raft("starting Raft", e))?
            .map_err(|e| ClusterError::raft("starting Raft", e))?;
        let peers = PeerClient::new(&config.ca_pem, config.secret.clone())
            .map_err(|e| ClusterError::raft("peer client", e))?;
        let batcher = Batcher::start(Arc::new(raft.clone()), BatchLimits::default());
        Ok(Arc::new(ClusterNode {
            startup_last_log,
            startup_committed,
            id,
            me: config.me,
            raft,
            store: config.store,
            secret: config.secret,
            timers: config.timers,
            peers,
            batcher,
            heard: Mutex::new(Heard::default()),
            refused_behind_candidate: tokio::sync::watch::Sender::new(None),
            snapshot_receiving: Mutex::new(None),
            runtime: Mutex::new(Some(runtime)),
        }))
    }

    /// A handle to the Raft runtime (for the Raft listener).
    pub fn raft_runtime(&self) -> Option<tokio::runtime::Handle> {
        self.runtime.lock().as_ref().map(|rt| rt.handle().clone())
    }

    pub fn metrics(&self) -> RaftMetrics<NodeId, openraft::BasicNode> {
        self.raft.metrics().borrow().clone()
    }

    /// The index a linearizable read must have applied, as this member (the leader) gives it to its
    /// own reads and to its followers' (docs/guarantees.md, Reads): openraft's read index after a
    /// heartbeat round, raised to `startup_last_log`, which openraft's does not cover when it
    /// restored this process as leader with a lagging commit index.
    pub async fn leader_read_index(
        &self,
    ) -> Result<
        Option<u64>,
        openraft::error::RaftError<
            NodeId,
            openraft::error::CheckIsLeaderError<NodeId, openraft::BasicNode>,
        >,
    > {
        let (read, _applied) = self.raft.get_read_log_id().await?;
        Ok(read.map(|l| l.index).max(self.startup_last_log))
    }

    /// Who leads, from the latest metrics.
    pub fn leadership(&self) -> Leadership {
        let metrics = self.metrics();
        match metrics.current_leader {
            Some(id) if id == self.id && metrics.state == ServerState::Leader => Leadership::Me,
            Some(id) if id != self.id => {
                let node = metrics
                    .membership_config
                    .nodes()
                    .find(|(nid, _)| **nid == id)
                    .map(|(_, node)| Member::from_node(node));
                match node {
                    Some(member) => Leadership::Other { id, member },
                    None => Leadership::Unknown,
                }
            }
            _ => Leadership::Unknown,
        }
    }

    /// Waits up to `timeout` for a leader to be known.
    pub async fn wait_for_leader(&self, timeout: Duration) -> Leadership {
        let deadline = tokio::time::Instant::now() + timeout;
        let mut metrics = self.raft.metrics();
        loop {
            let now = self.leadership();
            if now != Leadership::Unknown {
                return now;
            }
            if tokio::time::timeout_at(deadline, metrics.changed())
                .await
                .is_err()
            {
                return Leadership::Unknown;
            }
        }
    }

    /// Proposes a Mutation on this member, which must lead: committed and applied locally
    /// before it returns. Never forwarded (leader-only writers rely on that).
    pub async fn propose_here(&self, proposal: Proposal) -> Result<Applied, ProposeError> {
        self.batcher.submit(proposal).await
    }

    /// Records an AppendEntries from the leader (heartbeats included).
    pub fn heard_from_leader(&self, leader_commit: Option<u64>) {
        let mut heard = self.heard.lock();
        heard.at = Some(Instant::now());
        if leader_commit > heard.leader_commit {
            heard.leader_commit = leader_commit;
        }
    }

    /// When this member last heard from a leader (AppendEntries, heartbeats included).
    pub fn heard_at(&self) -> Option<Instant> {
        self.heard.lock().at
    }

    /// Answers a vote request (the Raft listener's VOTE), noting a refusal because the
    /// candidate's log is behind this member's.
    pub async fn vote(
        &self,
        request: openraft::raft::VoteRequest<NodeId>,
    ) -> Result<openraft::raft::VoteResponse<NodeId>, openraft::error::RaftError<NodeId>> {
        let candidate_log = request.last_log_id;
        let answer = self.raft.vote(request).await;
        if let Ok(response) = &answer {
            if !response.vote_granted && response.last_log_id > candidate_log {
                tracing::info!(
                    candidate_last_log = %candidate_log.map_or("none".to_string(), |id| id.to_string()),
                    my_last_log = %response.last_log_id.map_or("none".to_string(), |id| id.to_string()),
                    "refused a vote: the candidate's log is behind this member's"
                );
                self.refused_behind_candidate
                    .send_replace(Some(Instant::now()));
            }
        }
        answer
    }

    /// Resolves once this member has refused a vote, after `since`, to a candidate whose log
    /// was behind its own.
    pub async fn refused_behind_candidate_after(&self, since: Instant) {
        let mut refusals = self.refused_behind_candidate.subscribe();
        if refusals
            .wait_for(|at| at.is_some_and(|at| at > since))
            .await
            .is_err()
        {
            std::future::pending::<()>().await;
        }
    }

    /// Records a snapshot chunk from the leader: `end` bytes received so far, `done` when it
    /// was the last one.
    pub fn snapshot_chunk(&self, end: u64, done: bool) {
        *self.snapshot_receiving.lock() = (!done).then(|| (end, Instant::now()));
    }

    /// Bytes of the snapshot being received, if a chunk came within the install timeout.
    pub fn snapshot_progress(&self) -> Option<u64> {
        match *self.snapshot_receiving.lock() {
            Some((bytes, at)) if at.elapsed() < Duration::from_secs(10) => Some(bytes),
            _ => None,
        }
    }

    /// Readiness (docs/guarantees.md, Isolation and readiness): a leader is known, this member has
    /// applied up to the commit index it learned, and it heard from the leader (or, leading, from a
    /// quorum) within the isolation window. `Err` says why not.
    pub fn readiness(&self) -> Result<(), NotReady> {
        let metrics = self.metrics();
        let isolation = self.timers.isolation();
        let applied = metrics.last_applied.map(|l| l.index);
        match metrics.state {
            ServerState::Leader => {
                let acked = metrics.millis_since_quorum_ack;
                let quorum_recent = acked.is_some_and(|ms| Duration::from_millis(ms) < isolation);
                if !quorum_recent {
                    return Err(NotReady::Other(format!(
                        "leading without a quorum heard from recently ({acked:?} ms)"
                    )));
                }
                Ok(())
            }
            ServerState::Follower | ServerState::Learner => {
                if metrics.current_leader.is_none() {
                    return Err(NotReady::Other("no leader known".into()));
                }
                let heard = *self.heard.lock();
                match heard.at {
                    Some(at) if at.elapsed() < isolation => {}
                    Some(at) => {
                        return Err(NotReady::Other(format!(
                            "nothing from the leader for {} ms",
                            at.elapsed().as_millis()
                        )))
                    }
                    None => {
                        return Err(NotReady::Other("nothing heard from the leader yet".into()))
                    }
                }
                match heard.leader_commit {
                    Some(commit) if applied < Some(commit) => Err(NotReady::Behind {
                        applied: applied.unwrap_or(0),
                        commit,
                    }),
                    _ => Ok(()),
                }
            }
            ServerState::Candidate => Err(NotReady::Other("election in progress".into())),
            ServerState::Shutdown => Err(NotReady::Other("shutting down".into())),
        }
    }

    /// Whether the Raft core loop answers a no-op sent through its command channel within
    /// `limit`: the liveness the systemd watchdog checks (a hung core stops answering even
    /// while its metrics, a watch channel, still read fine).
    pub async fn core_responds(&self, limit: Duration) -> bool {
        matches!(
            tokio::time::timeout(limit, self.raft.with_raft_state(|_| ())).await,
            Ok(Ok(()))
        )
    }

    /// Stops Raft (on shutdown).
    pub async fn shutdown(&self) {
        if let Err(e) = self.raft.shutdown().await {
            tracing::warn!("stopping Raft: {e}");
        }
    }
}
