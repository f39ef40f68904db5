//! The pod lifecycle event generator: relists the runtime every second and turns changes in
//! container state into per-pod events, so that pod workers wake when one of their
//! containers starts, exits or disappears, as kubelet's generic PLEG does.
//!
//! Events, from the previous relist to this one (no previous = not there):
//! - → running: `Started`;
//! - running, created or absent → exited: `Died` (a container that ran and exited between two
//!   relists is only seen dead);
//! - present → absent: `Removed`;
//! - any other change (created, unknown): `Changed`.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::{ContainerState, ContainerStatus, Runtime};

/// What happened to one container.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventKind {
    Started,
    Died,
    Removed,
    Changed,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodEvent {
    pub pod_uid: String,
    pub container_id: String,
    pub kind: EventKind,
}

/// kubelet's relist period.
pub const RELIST_PERIOD: Duration = Duration::from_secs(1);

/// The state seen at the previous relist.
#[derive(Debug, Default)]
pub struct Pleg {
    last: HashMap<String, (String, ContainerState)>,
}

impl Pleg {
    pub fn new() -> Self {
        Pleg::default()
    }

    /// The events between the previous list and `now` (ordered by pod, then container).
    pub fn relist(&mut self, now: &[ContainerStatus]) -> Vec<PodEvent> {
        let mut events = Vec::new();
        let mut next = HashMap::with_capacity(now.len());
        for s in now {
            let before = self.last.get(&s.id).map(|(_, state)| *state);
            let kind = match (before, s.state) {
                (Some(b), n) if b == n => None,
                (_, ContainerState::Running) => Some(EventKind::Started),
                (_, ContainerState::Exited) => Some(EventKind::Died),
                _ => Some(EventKind::Changed),
            };
            if let Some(kind) = kind {
                events.push(PodEvent {
                    pod_uid: s.pod.uid.clone(),
                    container_id: s.id.clone(),
                    kind,
                });
            }
            next.insert(s.id.clone(), (s.pod.uid.clone(), s.state));
        }
        for (id, (pod_uid, _)) in &self.last {
            if !next.contains_key(id) {
                events.push(PodEvent {
                    pod_uid: pod_uid.clone(),
                    container_id: id.clone(),
                    kind: EventKind::Removed,
                });
            }
        }
        events.sort_by(|a, b| (&a.pod_uid, &a.container_id).cmp(&(&b.pod_uid, &b.container_id)));
        self.last = next;
        events
    }
}

/// Relists `runtime` every `period` and sends the events until `stop` (or until the
/// receiver is gone). The channel is bounded: a slow consumer slows the relist, events
/// are not dropped.
pub async fn run(
    runtime: Arc<Runtime>,
    period: Duration,
    events: mpsc::Sender<PodEvent>,
    stop: CancellationToken,
) {
    let mut pleg = Pleg::new();
    let mut tick = tokio::time::interval(period);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = tick.tick() => {}
        }
        for event in pleg.relist(&runtime.list()) {
            tokio::select! {
                _ = stop.cancelled() => return,
                sent = events.send(event) => if sent.is_err() { return },
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::agent::runtime::PodRef;
    use std::time::SystemTime;

    fn status(id: &str, pod: &str, state: ContainerState) -> ContainerStatus {
        ContainerStatus {
            id: id.into(),
            pod: PodRef {
                uid: pod.into(),
                namespace: "default".into(),
                name: pod.into(),
            },
            name: id.into(),
            restart_count: 0,
            state,
            created_at: SystemTime::UNIX_EPOCH,
            started_at: None,
            finished_at: None,
            exit_code: None,
            reason: None,
            message: None,
            pid: None,
            log_path: "/x".into(),
            annotations: Default::default(),
        }
    }

    fn kinds(events: &[PodEvent]) -> Vec<(&str, EventKind)> {
        events
            .iter()
            .map(|e| (e.container_id.as_str(), e.kind))
            .collect()
    }

    #[test]
    fn transitions_become_events() {
        use ContainerState::*;
        use EventKind::*;
        let mut pleg = Pleg::new();
        let e = pleg.relist(&[status("a", "p1", Created), status("b", "p2", Running)]);
        assert_eq!(kinds(&e), [("a", Changed), ("b", Started)]);
        assert_eq!(e[1].pod_uid, "p2");
        assert!(pleg
            .relist(&[status("a", "p1", Created), status("b", "p2", Running)])
            .is_empty());
        let e = pleg.relist(&[status("a", "p1", Running), status("b", "p2", Exited)]);
        assert_eq!(kinds(&e), [("a", Started), ("b", Died)]);
        // Created and exited between two relists: seen dead.
        let e = pleg.relist(&[
            status("a", "p1", Running),
            status("b", "p2", Exited),
            status("c", "p2", Exited),
        ]);
        assert_eq!(kinds(&e), [("c", Died)]);
        let e = pleg.relist(&[status("a", "p1", Unknown)]);
        assert_eq!(kinds(&e), [("a", Changed), ("b", Removed), ("c", Removed)]);
        assert_eq!(e[1].pod_uid, "p2");
        assert_eq!(kinds(&pleg.relist(&[])), [("a", Removed)]);
    }
}
