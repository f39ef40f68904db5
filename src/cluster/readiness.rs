//! A member's readiness: `/readyz`, sd_notify `READY=1`/`STATUS=` and the journal follow the
//! Raft state. A member is ready when it knows a leader, has applied up to the commit index it
//! learned, has heard from the leader (or a quorum) recently, and its store has once held the
//! objects every cluster has (the caller's `bootstrapped` check). Also the watchdog's liveness
//! signal: it beats only while the Raft core answers.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use openraft::ServerState;
use tokio_util::sync::CancellationToken;

use super::node::{ClusterNode, Leadership, NotReady};
use crate::api::ApiContext;
use crate::kube::store::Store;
use crate::systemd::readiness::{Readiness, ReadinessReporter, Role};

/// Beats `heartbeat` (the systemd watchdog's liveness signal) once a second while the Raft
/// core answers, until `shutdown`.
pub async fn beat_while_core_responds(
    node: Arc<ClusterNode>,
    heartbeat: crate::systemd::watchdog::Heartbeat,
    shutdown: CancellationToken,
) {
    while !shutdown.is_cancelled() {
        if node.core_responds(Duration::from_secs(5)).await {
            heartbeat.beat();
        }
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = tokio::time::sleep(Duration::from_secs(1)) => {}
        }
    }
}

/// How long a ready member may go without applying the commit index it had learned, before it
/// counts as behind ([`ApplyLag`]).
pub const APPLY_LAG_TOLERANCE: Duration = Duration::from_secs(1);

/// Tells a ready member that keeps up from one that fell behind. A follower learns a new commit
/// index from the leader a moment before it applies the entries up to it, so under writes it is
/// "behind" at almost any instant; judged sample by sample it would flap between ready and not
/// ready (`/readyz`, the status line) with every write. It stays ready while, each time, it
/// applies within [`APPLY_LAG_TOLERANCE`] everything that was committed when it was first seen
/// behind. A member not yet ready gets no tolerance: a joining or restarted one becomes ready
/// only once it has applied all it learned.
#[derive(Debug, Default)]
struct ApplyLag {
    /// Since when it has been behind, and the commit index it had learned then.
    behind: Option<(Instant, u64)>,
}

impl ApplyLag {
    /// The member's readiness at `now` with the tolerance: a member that `was_ready` and is
    /// only behind while keeping up stays ready.
    fn judge(
        &mut self,
        verdict: Result<(), NotReady>,
        was_ready: bool,
        now: Instant,
    ) -> Result<(), NotReady> {
        match verdict {
            Err(NotReady::Behind { applied, commit })
                if was_ready && self.keeps_up(applied, commit, now) =>
            {
                Ok(())
            }
            Err(NotReady::Behind { .. }) => verdict,
            // In step, or not ready for another reason: the next lag is timed afresh.
            other => {
                self.behind = None;
                other
            }
        }
    }

    /// A ready member `applied` behind the learned `commit` at `now`: whether it keeps up.
    fn keeps_up(&mut self, applied: u64, commit: u64, now: Instant) -> bool {
        match self.behind {
            Some((since, target)) if applied < target => {
                now.duration_since(since) < APPLY_LAG_TOLERANCE
            }
            // First seen behind, or it applied all that was committed then: time it afresh.
            _ => {
                self.behind = Some((now, commit));
                true
            }
        }
    }
}

/// The Raft role as journal entries name it (`RAFT_ROLE=`).
fn role_name(state: ServerState) -> &'static str {
    match state {
        ServerState::Leader => "leader",
        ServerState::Follower => "follower",
        ServerState::Learner => "learner",
        ServerState::Candidate => "candidate",
        ServerState::Shutdown => "shutdown",
    }
}

/// Keeps `/readyz` and sd_notify in step with the Raft state until `shutdown`, so an isolated
/// member turns not ready within 3 s (docs/guarantees.md, Isolation and readiness).
/// Each change of role or term is logged with `COMPONENT=raft`, `RAFT_ROLE=`, `RAFT_TERM=`;
/// while the entries found in the local log at start-up are being re-applied, the status is
/// the replay progress (which also extends systemd's start timeout).
pub async fn readiness_loop(
    node: Arc<ClusterNode>,
    ctx: Arc<ApiContext>,
    bootstrapped_check: Arc<dyn Fn(&Store) -> bool + Send + Sync>,
    reporter: Arc<ReadinessReporter>,
    shutdown: CancellationToken,
) {
    let mut tick = tokio::time::interval(Duration::from_millis(100));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut last_role: Option<(ServerState, u64)> = None;
    // Latched: once this member's store has held the bootstrap objects, their later deletion
    // and re-creation by the leader's reconciler does not make it flap.
    let mut bootstrapped = false;
    // Re-evaluated when the role, leader or term changes (so READY=1 follows an election at
    // once) and every tick (the "heard from the leader" window ages without any change; the
    // applied index changes with every write and is only sampled by the tick).
    let mut changes = node.raft.metrics();
    let mut last_key = None;
    let mut lag = ApplyLag::default();
    loop {
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = tick.tick() => {}
            changed = changes.changed() => {
                if changed.is_err() {
                    return; // Raft stopped: the process is shutting down.
                }
                let key = {
                    let m = changes.borrow_and_update();
                    (m.state, m.current_leader, m.current_term)
                };
                if last_key == Some(key) {
                    continue;
                }
            }
        }
        let metrics = node.metrics();
        last_key = Some((metrics.state, metrics.current_leader, metrics.current_term));
        let applied = metrics.last_applied.map(|l| l.index).unwrap_or(0);
        let leader_name = match node.leadership() {
            Leadership::Other { member, .. } => member.name,
            Leadership::Me => node.me.name.clone(),
            Leadership::Unknown => String::new(),
        };
        if last_role != Some((metrics.state, metrics.current_term)) {
            last_role = Some((metrics.state, metrics.current_term));
            tracing::info!(
                component = "raft",
                raft_term = metrics.current_term,
                raft_role = role_name(metrics.state),
                raft_leader = %leader_name,
                applied,
                "{} in term {}",
                role_name(metrics.state),
                metrics.current_term
            );
        }
        let verdict = lag.judge(
            node.readiness(),
            ctx.ready.load(Ordering::SeqCst),
            Instant::now(),
        );
        let verdict = verdict.map_err(|why| why.to_string()).and_then(|()| {
            bootstrapped = bootstrapped || bootstrapped_check(&ctx.store);
            if bootstrapped {
                Ok(())
            } else {
                Err(
                    "the system namespaces and default/kubernetes have not reached this server yet"
                        .to_string(),
                )
            }
        });
        match verdict {
            Ok(()) => {
                if !ctx.ready.swap(true, Ordering::SeqCst) {
                    tracing::info!(
                        component = "raft",
                        raft_term = metrics.current_term,
                        raft_role = role_name(metrics.state),
                        applied,
                        "ready"
                    );
                }
                let role = match metrics.state {
                    ServerState::Leader => Role::Leader,
                    ServerState::Learner => Role::Learner {
                        leader: leader_name,
                    },
                    _ => Role::Follower {
                        leader: leader_name,
                    },
                };
                reporter.set(
                    Readiness::Ready {
                        role,
                        term: metrics.current_term,
                        applied,
                    },
                    "in step with the leader",
                );
            }
            Err(why) => {
                if ctx.ready.swap(false, Ordering::SeqCst) {
                    tracing::info!(
                        component = "raft",
                        raft_term = metrics.current_term,
                        raft_role = role_name(metrics.state),
                        reason = %why,
                        "not ready"
                    );
                }
                let (status, reason) = status_while_not_ready(
                    node.snapshot_progress(),
                    node.startup_committed,
                    applied,
                    reporter.ready_sent(),
                    why,
                );
                reporter.set(status, reason);
            }
        }
    }
}

/// What the status line says while this member is not ready, with the reason logged for the
/// change: a snapshot transfer, the re-application of the entries known committed when the
/// process started (only before the first `READY=1`), or otherwise the reason it is waiting.
/// An uncommitted tail above `startup_committed` is not replay: it needs a leader.
fn status_while_not_ready(
    snapshot_bytes: Option<u64>,
    startup_committed: Option<u64>,
    applied: u64,
    ready_sent: bool,
    why: String,
) -> (Readiness, &'static str) {
    match (snapshot_bytes, startup_committed) {
        (Some(done), _) => (
            Readiness::InstallingSnapshot { done, total: 0 },
            "receiving a snapshot from the leader",
        ),
        (None, Some(total)) if applied < total && !ready_sent => (
            Readiness::ReplayingLog {
                done: applied,
                total,
            },
            "re-applying the local log",
        ),
        _ => (Readiness::Waiting { why }, "not in step with a leader"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_member_that_applies_each_commit_soon_keeps_up_under_writes() {
        // A new commit index every 100 ms, each applied by the next sample: behind at every
        // sample, for far longer than the tolerance, yet never stuck.
        let start = Instant::now();
        let mut lag = ApplyLag::default();
        for i in 0..50u64 {
            let now = start + Duration::from_millis(100 * i);
            assert!(lag.keeps_up(i, i + 1, now), "sample {i}");
        }
    }

    #[test]
    fn a_member_that_stops_applying_falls_behind_after_the_tolerance() {
        let start = Instant::now();
        let mut lag = ApplyLag::default();
        assert!(lag.keeps_up(10, 12, start));
        // New commits arrive, nothing more is applied.
        assert!(lag.keeps_up(11, 14, start + Duration::from_millis(500)));
        assert!(!lag.keeps_up(11, 16, start + APPLY_LAG_TOLERANCE));
        // Once it has applied what was committed when it fell behind, it is timed afresh.
        assert!(lag.keeps_up(12, 16, start + APPLY_LAG_TOLERANCE * 2));
        // In step again: a later lag starts its own time.
        assert_eq!(
            lag.judge(Ok(()), true, start + APPLY_LAG_TOLERANCE * 9),
            Ok(())
        );
        assert!(lag.keeps_up(16, 20, start + APPLY_LAG_TOLERANCE * 10));
    }

    #[test]
    fn only_a_member_that_was_ready_gets_the_tolerance() {
        let now = Instant::now();
        let behind = || {
            Err(NotReady::Behind {
                applied: 3,
                commit: 9,
            })
        };
        // Joining or restarting: not ready until it applied all it learned.
        assert_eq!(ApplyLag::default().judge(behind(), false, now), behind());
        assert_eq!(ApplyLag::default().judge(behind(), true, now), Ok(()));
        // Other reasons are never tolerated.
        let no_leader = Err(NotReady::Other("no leader known".into()));
        assert_eq!(
            ApplyLag::default().judge(no_leader.clone(), true, now),
            no_leader
        );
    }

    fn status(
        snapshot: Option<u64>,
        committed: Option<u64>,
        applied: u64,
        sent: bool,
    ) -> Readiness {
        status_while_not_ready(snapshot, committed, applied, sent, "no leader".into()).0
    }

    #[test]
    fn committed_entries_left_to_apply_are_replay_progress() {
        assert_eq!(
            status(None, Some(40), 12, false),
            Readiness::ReplayingLog {
                done: 12,
                total: 40
            }
        );
    }

    #[test]
    fn an_uncommitted_tail_waits_for_a_leader_instead_of_replaying_forever() {
        // Applied everything known committed at start; the log may hold more, but only a
        // leader can commit it: the status says why the member is not ready.
        let waiting = Readiness::Waiting {
            why: "no leader".into(),
        };
        assert_eq!(status(None, Some(40), 40, false), waiting);
        assert_eq!(status(None, None, 0, false), waiting);
        // After READY=1, falling behind is not a replay either.
        assert_eq!(status(None, Some(40), 12, true), waiting);
    }

    #[test]
    fn a_snapshot_transfer_shows_its_bytes() {
        assert_eq!(
            status(Some(4096), Some(40), 12, false),
            Readiness::InstallingSnapshot {
                done: 4096,
                total: 0
            }
        );
    }
}
