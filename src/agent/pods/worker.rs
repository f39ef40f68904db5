//! One pod's worker, as kubelet's pod workers: a task per pod UID that owns everything done
//! to the pod on this node, one step at a time, in three states ([`PodState`]):
//!
//! ```text
//!   Syncing ──(deleted, gone from the API, or finished)──▶ Terminating ──▶ Terminated ──▶ (ends)
//! ```
//!
//! - **Syncing**: each pass (`sync.rs`) makes the node match the spec — sandbox, images,
//!   init containers in order, app containers, restarts with their back-off — and writes
//!   the status when it changed. A pass runs when the pod changes, when the PLEG or a probe
//!   wakes the pod, when a back-off ends, and every resync period.
//! - **Terminating** (`terminate.rs`): every container is stopped (preStop hook, SIGTERM,
//!   the grace period, SIGKILL), the last status written, then the sandbox, root
//!   filesystems and volumes released. A shorter grace period or the pod's removal from the
//!   API while it runs starts the stop again with the shorter one.
//! - **Terminated**: nothing runs. A deleted pod is deleted from the API for good (with
//!   its uid as precondition, as kubelet's status manager does); a pod the API no longer
//!   has has its containers, directory and logs removed; then the worker ends. A pod that
//!   finished (Succeeded or Failed) but is not deleted waits here, its containers kept
//!   for their logs and status.
//!
//! Every change of state goes through [`Worker::transition`], which logs
//! `pod old -> new (reason)`.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;
use tokio::sync::{watch, Notify};
use tokio_util::sync::CancellationToken;

use super::backoff::Backoff;
use super::context::PodsContext;
use super::pod::Pod;
use super::status::{Phase, Waiting};
use super::volumes::PodVolumes;
use super::PodCounts;
use crate::agent::metrics::METRICS;
use crate::agent::runtime::ContainerStatus;
use crate::agent::sandbox::Sandbox;

/// What the dispatcher last saw of the pod.
#[derive(Debug, Clone)]
pub enum Observed {
    /// The API has it, as here.
    Present(Box<Pod>),
    /// The API no longer has it.
    Gone,
}

/// Where a pod is in its life on this node.
#[derive(Debug, Clone, PartialEq)]
pub enum PodState {
    /// Its containers are kept as the spec says: started, restarted as the restart policy
    /// says.
    Syncing,
    /// Its containers are being stopped within `grace`.
    Terminating { grace: Duration },
    /// Nothing of it runs; it waits for the API to delete it (or is being removed).
    Terminated,
}

impl std::fmt::Display for PodState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            PodState::Syncing => f.write_str("syncing"),
            PodState::Terminating { grace } => write!(f, "terminating (grace {grace:?})"),
            PodState::Terminated => f.write_str("terminated"),
        }
    }
}

/// How a terminated worker goes on.
pub(super) enum Finish {
    /// Everything is removed: the worker ends.
    Done,
    /// Not yet (a request failed, or the pod stays in the API): wait, then look again.
    Wait(Option<Duration>),
}

pub struct Worker {
    pub(super) ctx: Arc<PodsContext>,
    pub(super) pod: Pod,
    /// The API still has the pod.
    pub(super) in_api: bool,
    pub(super) state: PodState,
    /// Why containers wait, by name (kubelet's reason cache).
    pub(super) waiting: HashMap<String, Waiting>,
    /// CrashLoopBackOff per container name.
    pub(super) crash_backoff: Backoff<String>,
    /// ImagePullBackOff per image, and the last pull error of each.
    pub(super) pull_backoff: Backoff<String>,
    pub(super) pull_errors: HashMap<String, String>,
    pub(super) sandbox: Option<Sandbox>,
    /// The pod's volumes, once made.
    pub(super) volumes: Option<PodVolumes>,
    /// Why the sandbox could not be made (shown on waiting containers).
    pub(super) sandbox_error: Option<String>,
    /// Termination messages of exited containers, by id (read once).
    pub(super) messages: HashMap<String, String>,
    pub(super) messages_read: HashSet<String>,
    /// Containers whose probes were started.
    pub(super) probed: HashSet<String>,
    pub(super) start_time: Option<String>,
    /// The status the API has, as far as this worker knows: the pod's, or the last one
    /// written, whichever is newer.
    pub(super) api_status: Value,
    pub(super) api_status_rv: Option<u64>,
    pub(super) counts: PodCounts,
}

impl Worker {
    pub fn new(ctx: Arc<PodsContext>, pod: Pod, in_api: bool, counts: PodCounts) -> Worker {
        let api_status = pod.raw["status"].clone();
        let api_status_rv = pod.resource_version;
        Worker {
            ctx,
            in_api,
            state: PodState::Syncing,
            waiting: HashMap::new(),
            crash_backoff: Backoff::kubelet(),
            pull_backoff: Backoff::kubelet(),
            pull_errors: HashMap::new(),
            sandbox: None,
            volumes: None,
            sandbox_error: None,
            messages: HashMap::new(),
            messages_read: HashSet::new(),
            probed: HashSet::new(),
            start_time: pod.raw["status"]["startTime"].as_str().map(str::to_string),
            api_status,
            api_status_rv,
            counts,
            pod,
        }
    }

    /// `namespace/name`, for logs.
    pub(super) fn name(&self) -> String {
        format!("{}/{}", self.pod.namespace, self.pod.name)
    }

    /// The one place the state changes.
    pub(super) fn transition(&mut self, to: PodState, reason: &str) {
        tracing::info!(
            component = "pods",
            pod = %self.name(),
            uid = %self.pod.uid,
            "{} -> {to} ({reason})",
            self.state
        );
        self.state = to;
    }

    /// Takes the dispatcher's latest view of the pod.
    fn observe(&mut self, observed: &Observed) {
        match observed {
            Observed::Present(pod) => {
                if pod.resource_version >= self.api_status_rv || self.api_status_rv.is_none() {
                    self.api_status = pod.raw["status"].clone();
                    self.api_status_rv = pod.resource_version;
                }
                self.pod = (**pod).clone();
                self.in_api = true;
            }
            Observed::Gone => self.in_api = false,
        }
    }

    /// Why the pod must stop now, if it must.
    fn why_stop(&self) -> Option<String> {
        if !self.in_api {
            return Some("the pod is gone from the API".into());
        }
        if self.pod.deleting {
            return Some("the pod is being deleted".into());
        }
        if self.pod.api_phase_is_terminal() {
            return Some(format!(
                "the pod has finished ({})",
                self.pod.phase.as_deref().unwrap_or_default()
            ));
        }
        None
    }

    fn grace(&self) -> Duration {
        Duration::from_secs(self.pod.grace_seconds() as u64)
    }

    /// This pod's container instances, by name then restart count.
    pub(super) fn instances(&self) -> Vec<ContainerStatus> {
        self.ctx
            .runtime
            .list()
            .into_iter()
            .filter(|s| s.pod.uid == self.pod.uid)
            .collect()
    }

    /// Runs the pod until it is removed (or `stop`: the agent stops, the pod keeps running).
    ///
    /// Each step (a sync pass, the stop, the release, the removal) is boxed while it runs:
    /// inline, the largest step's state (a pass reaches the sandbox, the image store, the
    /// runtime and the API) would be part of every pod's task for the pod's whole life,
    /// though a running pod's worker spends almost all of it waiting.
    pub async fn run(
        mut self,
        mut updates: watch::Receiver<Observed>,
        wake: Arc<Notify>,
        stop: CancellationToken,
    ) {
        loop {
            let observed = updates.borrow_and_update().clone();
            self.observe(&observed);
            let wait = match self.state.clone() {
                PodState::Syncing => {
                    if let Some(why) = self.why_stop() {
                        let grace = self.grace();
                        self.transition(PodState::Terminating { grace }, &why);
                        continue;
                    }
                    let pass = tokio::select! {
                        biased;
                        _ = stop.cancelled() => return,
                        _ = must_stop(updates.clone()) => None,
                        next = async {
                            let started = std::time::Instant::now();
                            let next = Box::pin(self.sync_pass()).await;
                            METRICS.pod_synced(started.elapsed());
                            next
                        } => Some(next),
                    };
                    let Some((next, phase)) = pass else {
                        // The pass was cut short: the pod is deleted or gone.
                        continue;
                    };
                    if phase.is_terminal() {
                        let grace = self.grace();
                        self.transition(
                            PodState::Terminating { grace },
                            &format!("the pod has finished ({})", phase.as_str()),
                        );
                        continue;
                    }
                    Some(next)
                }
                PodState::Terminating { grace } => {
                    let cut = tokio::select! {
                        biased;
                        _ = stop.cancelled() => return,
                        shorter = shorter_grace(updates.clone(), grace) => Some(shorter),
                        () = Box::pin(self.terminate(grace)) => None,
                    };
                    match cut {
                        Some(shorter) => {
                            self.transition(
                                PodState::Terminating { grace: shorter },
                                "a shorter grace period was asked for",
                            );
                        }
                        None => {
                            Box::pin(self.release()).await;
                            self.transition(PodState::Terminated, "its containers stopped");
                        }
                    }
                    continue;
                }
                PodState::Terminated => match Box::pin(self.finish()).await {
                    Finish::Done => {
                        self.counts.remove(&self.pod.uid);
                        return;
                    }
                    Finish::Wait(wait) => wait,
                },
            };
            let deadline = wait.map(|w| tokio::time::Instant::now() + w);
            loop {
                tokio::select! {
                    _ = stop.cancelled() => return,
                    changed = updates.changed() => {
                        if changed.is_err() {
                            // The dispatcher is gone: the agent is stopping.
                            return;
                        }
                        if self.state != PodState::Syncing || self.needs_pass(&updates.borrow()) {
                            break;
                        }
                        // Only the status changed (most often: this worker's own write).
                        let observed = updates.borrow_and_update().clone();
                        self.observe(&observed);
                    }
                    _ = wake.notified() => break,
                    _ = sleep_until(deadline) => break,
                }
            }
        }
    }

    /// Whether `observed` changes anything a sync pass acts on: the spec, or the metadata
    /// (deletion, labels and annotations the downward API shows); not the status.
    fn needs_pass(&self, observed: &Observed) -> bool {
        let Observed::Present(pod) = observed else {
            return true;
        };
        let meta = |raw: &Value| {
            let mut m = raw["metadata"].clone();
            if let Some(m) = m.as_object_mut() {
                m.remove("resourceVersion");
                m.remove("managedFields");
            }
            m
        };
        pod.raw["spec"] != self.pod.raw["spec"] || meta(&pod.raw) != meta(&self.pod.raw)
    }

    /// Records the pod's phase for the node's counts.
    pub(super) fn count(&self, phase: Phase) {
        self.counts.set(&self.pod.uid, phase);
    }
}

async fn sleep_until(deadline: Option<tokio::time::Instant>) {
    match deadline {
        Some(d) => tokio::time::sleep_until(d).await,
        None => std::future::pending().await,
    }
}

/// Returns once the pod is deleted or gone from the API (a sync pass in progress is then
/// abandoned). Reads a copy of the worker's receiver, so the worker still sees every update.
async fn must_stop(mut updates: watch::Receiver<Observed>) {
    loop {
        if updates.changed().await.is_err() {
            return std::future::pending().await;
        }
        let stop = match &*updates.borrow() {
            Observed::Gone => true,
            Observed::Present(pod) => pod.deleting,
        };
        if stop {
            return;
        }
    }
}

/// Returns a grace period shorter than `grace` once the API asks for one.
async fn shorter_grace(mut updates: watch::Receiver<Observed>, grace: Duration) -> Duration {
    loop {
        if updates.changed().await.is_err() {
            return std::future::pending().await;
        }
        let asked = match &*updates.borrow() {
            Observed::Gone => None,
            Observed::Present(pod) => pod
                .deletion_grace_seconds
                .map(|s| Duration::from_secs(s.max(0) as u64)),
        };
        if let Some(asked) = asked.filter(|a| *a < grace) {
            return asked;
        }
    }
}
