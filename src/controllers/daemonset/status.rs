//! A DaemonSet's status as upstream's `updateDaemonSetStatus` counts it, node by node: a node
//! that should run the pod is desired, and scheduled when it has a pod; its oldest pod
//! (scheduled first) decides whether it counts as ready, available (`minReadySeconds`) and
//! updated; a pod on a node that should not run one is misscheduled. The controller writes no
//! conditions.

use chrono::{DateTime, Utc};
use serde_json::{json, Map, Value};

use super::placement::NodeFacts;
use super::{by_node, oldest_first, Daemon};
use crate::controllers::claim::Candidate;
use crate::controllers::objects;

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DaemonStatus {
    pub observed_generation: i64,
    pub desired_number_scheduled: i64,
    pub current_number_scheduled: i64,
    pub number_misscheduled: i64,
    pub number_ready: i64,
    pub updated_number_scheduled: i64,
    pub number_available: i64,
    pub number_unavailable: i64,
    pub collision_count: Option<i64>,
}

impl DaemonStatus {
    pub fn of(set: &Value) -> DaemonStatus {
        let status = set.get("status");
        let int = |f: &str| {
            status
                .and_then(|s| s.get(f))
                .and_then(Value::as_i64)
                .unwrap_or(0)
        };
        DaemonStatus {
            observed_generation: int("observedGeneration"),
            desired_number_scheduled: int("desiredNumberScheduled"),
            current_number_scheduled: int("currentNumberScheduled"),
            number_misscheduled: int("numberMisscheduled"),
            number_ready: int("numberReady"),
            updated_number_scheduled: int("updatedNumberScheduled"),
            number_available: int("numberAvailable"),
            number_unavailable: int("numberUnavailable"),
            collision_count: status
                .and_then(|s| s.get("collisionCount"))
                .and_then(Value::as_i64),
        }
    }

    /// Counts the set's pods on `nodes` (generation and collision count left for the caller).
    pub fn count(
        daemon: &Daemon,
        nodes: &[NodeFacts],
        pods: &[Candidate],
        hash: &str,
        now: DateTime<Utc>,
    ) -> DaemonStatus {
        let by_node = by_node(pods, false);
        let mut status = DaemonStatus::default();
        for node in nodes {
            let scheduled = by_node.get(&node.name).filter(|p| !p.is_empty());
            if !daemon.placement.fit(node).should_run() {
                if scheduled.is_some() {
                    status.number_misscheduled += 1;
                }
                continue;
            }
            status.desired_number_scheduled += 1;
            let Some(list) = scheduled else {
                continue;
            };
            status.current_number_scheduled += 1;
            let mut list = list.clone();
            oldest_first(&mut list);
            let pod = &list[0].value;
            if objects::pod_is_ready(pod) {
                status.number_ready += 1;
                if objects::pod_is_available(pod, daemon.min_ready_seconds, now) {
                    status.number_available += 1;
                }
            }
            if daemon.is_updated(pod, hash) {
                status.updated_number_scheduled += 1;
            }
        }
        status.number_unavailable = status.desired_number_scheduled - status.number_available;
        status
    }

    /// Whether this status must be written over `stored` (upstream's `storeDaemonSetStatus`
    /// skips a write when every count is the same and the generation was observed; a new
    /// collision count is written too).
    pub fn differs_from(&self, stored: &DaemonStatus, generation: i64) -> bool {
        let counts = |s: &DaemonStatus| {
            [
                s.desired_number_scheduled,
                s.current_number_scheduled,
                s.number_misscheduled,
                s.number_ready,
                s.updated_number_scheduled,
                s.number_available,
                s.number_unavailable,
            ]
        };
        counts(self) != counts(stored)
            || stored.observed_generation < generation
            || self.collision_count != stored.collision_count
    }

    /// The status object: the four counts the API always carries, the others when set.
    pub fn to_value(&self) -> Value {
        let mut status = Map::new();
        for (field, value) in [
            ("currentNumberScheduled", self.current_number_scheduled),
            ("numberMisscheduled", self.number_misscheduled),
            ("desiredNumberScheduled", self.desired_number_scheduled),
            ("numberReady", self.number_ready),
        ] {
            status.insert(field.into(), json!(value));
        }
        for (field, value) in [
            ("observedGeneration", self.observed_generation),
            ("updatedNumberScheduled", self.updated_number_scheduled),
            ("numberAvailable", self.number_available),
            ("numberUnavailable", self.number_unavailable),
        ] {
            if value != 0 {
                status.insert(field.into(), json!(value));
            }
        }
        if let Some(count) = self.collision_count {
            status.insert("collisionCount".into(), json!(count));
        }
        Value::Object(status)
    }
}
