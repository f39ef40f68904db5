//! The scheduling queue (kube-scheduler's `PriorityQueue`). A pending pod is in one state:
//!
//! - `Active`: waiting its turn; the highest `spec.priority` first, then the longest waiting;
//! - `Backoff`: failed recently; waits 1 s, doubling per attempt up to 10 s, then is active;
//! - `Unschedulable`: no node took it; waits for a cluster change that may help one of the
//!   filters that refused it (its hints), or 5 minutes at most, then is active (or backs off
//!   first if its backoff has not run out);
//! - `Gated`: `spec.schedulingGates` not empty; waits for a change of the pod;
//! - `InFlight`: being decided; changes that arrive meanwhile are remembered, so a pod refused
//!   on the state before such a change backs off instead of waiting for a change that already
//!   happened;
//! - `Binding`: its binding is on its way; it leaves the queue when the informer shows it
//!   bound, or backs off if the binding fails.
//!
//! Nothing here polls: the scheduler sleeps until a pod is active or the earliest backoff or
//! 5-minute deadline, and an idle queue has no deadline at all.

use std::cmp::Reverse;
use std::collections::{BTreeSet, BinaryHeap, HashMap, VecDeque};
use std::time::Duration;

use tokio::time::Instant;

use super::hints::Hints;
use super::pod::PodInfo;

/// Backoff of a pod's first failure (`podInitialBackoffSeconds`).
pub const INITIAL_BACKOFF: Duration = Duration::from_secs(1);
/// The longest backoff (`podMaxBackoffSeconds`).
pub const MAX_BACKOFF: Duration = Duration::from_secs(10);
/// The longest an unschedulable pod waits without a change (`podMaxInUnschedulablePodsDuration`).
pub const MAX_UNSCHEDULABLE: Duration = Duration::from_secs(300);

#[derive(Debug, Clone, PartialEq)]
enum State {
    Active,
    Backoff(Instant),
    Unschedulable {
        since: Instant,
        hints: Hints,
    },
    Gated,
    /// The event count when the pod was taken.
    InFlight(u64),
    Binding,
}

struct Entry {
    pod: PodInfo,
    state: State,
    attempts: u32,
    last_attempt: Option<Instant>,
    /// Order among equal priorities: when it last became active.
    sequence: u64,
}

impl Entry {
    fn backoff_until(&self) -> Option<Instant> {
        let last = self.last_attempt?;
        Some(last + backoff(self.attempts))
    }
}

/// The backoff after `attempts` attempts.
pub fn backoff(attempts: u32) -> Duration {
    let mut d = INITIAL_BACKOFF;
    for _ in 1..attempts {
        d = (d * 2).min(MAX_BACKOFF);
    }
    d
}

#[derive(Default)]
pub struct SchedulingQueue {
    entries: HashMap<String, Entry>,
    /// (priority, earliest first, uid); stale entries are skipped when popped.
    active: BinaryHeap<(i64, Reverse<u64>, String)>,
    /// (due, uid) of backing-off pods.
    backoff: BTreeSet<(Instant, String)>,
    /// (since, uid) of unschedulable pods, so changes and the 5-minute flush visit only them.
    unschedulable: BTreeSet<(Instant, String)>,
    sequence: u64,
    /// Cluster changes so far, and the recent ones while pods are in flight.
    events: u64,
    recent: VecDeque<(u64, Hints)>,
    in_flight: usize,
}

impl SchedulingQueue {
    pub fn new() -> SchedulingQueue {
        SchedulingQueue::default()
    }

    #[cfg(test)]
    /// Whether a pod is ready to be taken.
    pub fn has_active(&self) -> bool {
        !self.active.is_empty()
    }

    fn activate(&mut self, uid: &str) {
        let Some(e) = self.entries.get_mut(uid) else {
            return;
        };
        self.sequence += 1;
        e.sequence = self.sequence;
        e.state = State::Active;
        self.active
            .push((e.pod.spec.priority, Reverse(e.sequence), uid.to_string()));
    }

    fn back_off(&mut self, uid: &str, until: Instant) {
        if let Some(e) = self.entries.get_mut(uid) {
            e.state = State::Backoff(until);
            self.backoff.insert((until, uid.to_string()));
        }
    }

    /// Active now, or backing off if its backoff has not run out.
    fn wake(&mut self, uid: &str, now: Instant) {
        let until = self.entries.get(uid).and_then(Entry::backoff_until);
        match until {
            Some(until) if until > now => self.back_off(uid, until),
            _ => self.activate(uid),
        }
    }

    fn leave_state(&mut self, uid: &str) {
        if let Some(e) = self.entries.get(uid) {
            match e.state {
                State::Backoff(at) => {
                    self.backoff.remove(&(at, uid.to_string()));
                }
                State::Unschedulable { since, .. } => {
                    self.unschedulable.remove(&(since, uid.to_string()));
                }
                State::InFlight(_) => self.in_flight -= 1,
                _ => {}
            }
        }
    }

    /// A pending pod this scheduler is to place, new or changed. Returns whether it became
    /// active or started a backoff (the scheduler's next wake-up changed).
    pub fn upsert(&mut self, pod: PodInfo, now: Instant) -> bool {
        let uid = pod.uid().to_string();
        let gated = pod.spec.gated;
        match self.entries.get_mut(&uid) {
            None => {
                self.entries.insert(
                    uid.clone(),
                    Entry {
                        pod,
                        state: State::Gated,
                        attempts: 0,
                        last_attempt: None,
                        sequence: 0,
                    },
                );
                if gated {
                    false
                } else {
                    self.activate(&uid);
                    true
                }
            }
            Some(e) => {
                let changed =
                    !e.pod.spec.same_for_scheduling(&pod.spec) || e.pod.labels() != pod.labels();
                e.pod = pod;
                let waiting = matches!(e.state, State::Unschedulable { .. } | State::Gated);
                if !(changed && waiting) {
                    return false;
                }
                self.leave_state(&uid);
                if gated {
                    if let Some(e) = self.entries.get_mut(&uid) {
                        e.state = State::Gated;
                    }
                    return false;
                }
                self.wake(&uid, now);
                true
            }
        }
    }

    /// A pod that left: deleted, bound, or no longer this scheduler's.
    pub fn remove(&mut self, uid: &str) {
        self.leave_state(uid);
        self.entries.remove(uid);
    }

    /// Whether the queue still holds the pod (it was not bound or deleted meanwhile).
    pub fn contains(&self, uid: &str) -> bool {
        self.entries.contains_key(uid)
    }

    /// Takes the next active pod.
    pub fn pop(&mut self, now: Instant) -> Option<PodInfo> {
        while let Some((_, Reverse(sequence), uid)) = self.active.pop() {
            let Some(e) = self.entries.get_mut(&uid) else {
                continue;
            };
            if e.state != State::Active || e.sequence != sequence {
                continue;
            }
            e.state = State::InFlight(self.events);
            e.attempts += 1;
            e.last_attempt = Some(now);
            self.in_flight += 1;
            return Some(e.pod.clone());
        }
        None
    }

    /// A taken pod was assumed on a node; its binding is on its way.
    pub fn binding(&mut self, uid: &str) {
        self.leave_state(uid);
        if let Some(e) = self.entries.get_mut(uid) {
            e.state = State::Binding;
        }
        self.trim();
    }

    /// No node took the pod; `hints` are the filters that refused it.
    pub fn unschedulable(&mut self, uid: &str, hints: Hints, now: Instant) {
        let Some(State::InFlight(taken_at)) = self.entries.get(uid).map(|e| e.state.clone()) else {
            return;
        };
        self.leave_state(uid);
        let missed = self
            .recent
            .iter()
            .any(|(n, h)| *n > taken_at && h & hints != 0);
        if missed {
            let until = self
                .entries
                .get(uid)
                .and_then(Entry::backoff_until)
                .unwrap_or(now);
            self.back_off(uid, until);
        } else if let Some(e) = self.entries.get_mut(uid) {
            e.state = State::Unschedulable { since: now, hints };
            self.unschedulable.insert((now, uid.to_string()));
        }
        self.trim();
    }

    /// The decision or the binding failed with an error: retry after the backoff.
    pub fn failed(&mut self, uid: &str, now: Instant) {
        if !self.entries.contains_key(uid) {
            return;
        }
        self.leave_state(uid);
        let until = self
            .entries
            .get(uid)
            .and_then(Entry::backoff_until)
            .unwrap_or(now);
        self.back_off(uid, until);
        self.trim();
    }

    /// A cluster change that may help pods refused by the filters in `hints`. Returns
    /// whether a pod became active or started a backoff.
    pub fn event(&mut self, hints: Hints, now: Instant) -> bool {
        if hints == 0 {
            return false;
        }
        self.events += 1;
        if self.in_flight > 0 {
            self.recent.push_back((self.events, hints));
        }
        let woken: Vec<String> = self
            .unschedulable
            .iter()
            .filter(|(_, uid)| {
                self.entries.get(uid).is_some_and(
                    |e| matches!(e.state, State::Unschedulable { hints: h, .. } if h & hints != 0),
                )
            })
            .map(|(_, uid)| uid.clone())
            .collect();
        for uid in &woken {
            self.leave_state(uid);
            self.wake(uid, now);
        }
        !woken.is_empty()
    }

    /// Forgets remembered changes no pod in flight can have missed.
    fn trim(&mut self) {
        if self.in_flight == 0 {
            self.recent.clear();
        }
    }

    /// Moves pods whose backoff ran out, and unschedulable pods waiting 5 minutes, to active.
    pub fn flush(&mut self, now: Instant) {
        while let Some((at, uid)) = self.backoff.first().cloned() {
            if at > now {
                break;
            }
            self.backoff.pop_first();
            self.activate(&uid);
        }
        while let Some((since, uid)) = self.unschedulable.first().cloned() {
            if now < since + MAX_UNSCHEDULABLE {
                break;
            }
            self.unschedulable.pop_first();
            if self.entries.contains_key(&uid) {
                self.wake(&uid, now);
            }
        }
    }

    /// The next time `flush` has something to do, if any.
    pub fn next_deadline(&self) -> Option<Instant> {
        let backoff = self.backoff.first().map(|(at, _)| *at);
        let stale = self
            .unschedulable
            .first()
            .map(|(since, _)| *since + MAX_UNSCHEDULABLE);
        match (backoff, stale) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// Pods by state, for tests and logs: (active, backoff, unschedulable, gated, in flight
    /// or binding).
    pub fn counts(&self) -> (usize, usize, usize, usize, usize) {
        let mut c = (0, 0, 0, 0, 0);
        for e in self.entries.values() {
            match e.state {
                State::Active => c.0 += 1,
                State::Backoff(_) => c.1 += 1,
                State::Unschedulable { .. } => c.2 += 1,
                State::Gated => c.3 += 1,
                State::InFlight(_) | State::Binding => c.4 += 1,
            }
        }
        c
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::controllers::scheduler::hints;
    use crate::controllers::scheduler::testing::pod;
    use serde_json::json;

    fn at(base: Instant, secs: u64) -> Instant {
        base + Duration::from_secs(secs)
    }

    #[test]
    fn higher_priority_first_then_the_longest_waiting() {
        let now = Instant::now();
        let mut q = SchedulingQueue::new();
        q.upsert(pod("a", "1", json!({})), now);
        q.upsert(pod("b", "1", json!({"spec": {"priority": 10}})), now);
        q.upsert(pod("c", "1", json!({})), now);
        q.upsert(
            pod(
                "gated",
                "1",
                json!({"spec": {"schedulingGates": [{"name": "g"}]}}),
            ),
            now,
        );
        let order: Vec<String> = std::iter::from_fn(|| q.pop(now))
            .map(|p| p.name().to_string())
            .collect();
        assert_eq!(order, ["b", "a", "c"]);
        assert_eq!(q.counts(), (0, 0, 0, 1, 3));
        // Lifting the gate activates the pod.
        assert!(q.upsert(pod("gated", "1", json!({})), now));
        assert_eq!(q.pop(now).unwrap().name(), "gated");
    }

    #[test]
    fn unschedulable_pods_wait_for_a_change_that_may_help() {
        let t0 = Instant::now();
        let mut q = SchedulingQueue::new();
        q.upsert(pod("p", "1", json!({})), t0);
        let p = q.pop(t0).unwrap();
        q.unschedulable(p.uid(), hints::RESOURCES, t0);
        assert_eq!(q.counts(), (0, 0, 1, 0, 0));
        // A taint change cannot help a pod refused for cpu.
        assert!(!q.event(hints::TAINTS, at(t0, 2)));
        assert_eq!(q.counts(), (0, 0, 1, 0, 0));
        // A deleted pod can; the 1 s backoff has run out, so it is active at once.
        assert!(q.event(hints::ASSIGNED_POD_GONE, at(t0, 2)));
        let p = q.pop(at(t0, 2)).unwrap();
        // Second failure: a change within its 2 s backoff puts it in backoff, not active
        // (still news for the loop: it must wake at the backoff's end).
        q.unschedulable(p.uid(), hints::RESOURCES, at(t0, 2));
        assert!(q.event(hints::RESOURCES, at(t0, 3)));
        assert!(!q.has_active());
        assert_eq!(q.counts(), (0, 1, 0, 0, 0));
        assert_eq!(q.next_deadline(), Some(at(t0, 4)));
        q.flush(at(t0, 4));
        assert_eq!(q.pop(at(t0, 4)).unwrap().name(), "p");
    }

    #[test]
    fn a_change_during_the_decision_is_not_missed() {
        let t0 = Instant::now();
        let mut q = SchedulingQueue::new();
        q.upsert(pod("p", "1", json!({})), t0);
        let p = q.pop(t0).unwrap();
        // A node is added while the pod is being decided on the state before it.
        q.event(hints::ALL, t0);
        q.unschedulable(p.uid(), hints::RESOURCES, t0);
        assert_eq!(q.counts(), (0, 1, 0, 0, 0));
        q.flush(at(t0, 1));
        assert!(q.pop(at(t0, 1)).is_some());
    }

    #[test]
    fn unschedulable_pods_are_retried_after_five_minutes_and_idle_queues_sleep() {
        let t0 = Instant::now();
        let mut q = SchedulingQueue::new();
        assert_eq!(q.next_deadline(), None);
        q.upsert(pod("p", "1", json!({})), t0);
        q.upsert(pod("gone", "1", json!({})), t0);
        let p = q.pop(t0).unwrap();
        let gone = q.pop(t0).unwrap();
        q.unschedulable(p.uid(), hints::TAINTS, t0);
        q.unschedulable(gone.uid(), hints::TAINTS, at(t0, 1));
        // A pod deleted while it waits leaves no deadline behind.
        q.remove(gone.uid());
        assert_eq!(q.counts(), (0, 0, 1, 0, 0));
        assert_eq!(q.next_deadline(), Some(t0 + MAX_UNSCHEDULABLE));
        q.flush(t0 + MAX_UNSCHEDULABLE);
        assert_eq!(q.next_deadline(), None);
        assert_eq!(q.pop(t0 + MAX_UNSCHEDULABLE).unwrap().name(), "p");
    }

    #[test]
    fn bound_and_failed_bindings() {
        let t0 = Instant::now();
        let mut q = SchedulingQueue::new();
        q.upsert(pod("p", "1", json!({})), t0);
        q.upsert(pod("q", "1", json!({})), t0);
        let p = q.pop(t0).unwrap();
        let r = q.pop(t0).unwrap();
        q.binding(p.uid());
        q.binding(r.uid());
        // The informer shows p bound: it leaves.
        q.remove(p.uid());
        // q's binding failed: it backs off.
        q.failed(r.uid(), t0);
        assert_eq!(q.counts(), (0, 1, 0, 0, 0));
        assert_eq!(q.next_deadline(), Some(at(t0, 1)));
        // A status-only change of a waiting pod changes nothing.
        let p = pod("s", "1", json!({}));
        q.upsert(p.clone(), t0);
        let taken = q.pop(t0).unwrap();
        q.unschedulable(taken.uid(), hints::TAINTS, t0);
        assert!(!q.upsert(
            pod(
                "s",
                "1",
                json!({"status": {"conditions": [{"type": "PodScheduled", "status": "False"}]}})
            ),
            t0
        ));
        assert_eq!(q.counts().2, 1);
        // A change of its spec wakes it.
        assert!(q.upsert(
            pod(
                "s",
                "1",
                json!({"spec": {"tolerations": [{"operator": "Exists"}]}})
            ),
            at(t0, 5)
        ));
    }

    #[test]
    fn backoff_doubles_up_to_ten_seconds() {
        let secs: Vec<u64> = (1..=6).map(|n| backoff(n).as_secs()).collect();
        assert_eq!(secs, [1, 2, 4, 8, 10, 10]);
    }
}
