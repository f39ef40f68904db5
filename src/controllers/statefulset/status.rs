//! A StatefulSet's status as upstream computes it: pods counted by readiness, availability
//! (`minReadySeconds`) and revision, the revisions, the collision count, and the end of a
//! rolling update (`completeRollingUpdate`: once every replica is updated and ready, the update
//! revision becomes the current one). The controller writes no conditions.

use chrono::{DateTime, Utc};
use serde_json::{json, Map, Value};

use super::pods;

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SetStatus {
    pub observed_generation: i64,
    pub replicas: i64,
    pub ready_replicas: i64,
    pub current_replicas: i64,
    pub updated_replicas: i64,
    pub available_replicas: i64,
    pub current_revision: String,
    pub update_revision: String,
    pub collision_count: Option<i64>,
}

impl SetStatus {
    pub fn of(set: &Value) -> SetStatus {
        let status = set.get("status");
        let int = |f: &str| {
            status
                .and_then(|s| s.get(f))
                .and_then(Value::as_i64)
                .unwrap_or(0)
        };
        let text = |f: &str| {
            status
                .and_then(|s| s.get(f))
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_string()
        };
        SetStatus {
            observed_generation: int("observedGeneration"),
            replicas: int("replicas"),
            ready_replicas: int("readyReplicas"),
            current_replicas: int("currentReplicas"),
            updated_replicas: int("updatedReplicas"),
            available_replicas: int("availableReplicas"),
            current_revision: text("currentRevision"),
            update_revision: text("updateRevision"),
            collision_count: status
                .and_then(|s| s.get("collisionCount"))
                .and_then(Value::as_i64),
        }
    }

    pub fn to_value(&self) -> Value {
        let mut status = Map::new();
        status.insert("observedGeneration".into(), json!(self.observed_generation));
        // `replicas` and `availableReplicas` are written even when zero (no omitempty in the
        // API's types), the other counts only when set.
        status.insert("replicas".into(), json!(self.replicas));
        status.insert("availableReplicas".into(), json!(self.available_replicas));
        for (field, value) in [
            ("readyReplicas", self.ready_replicas),
            ("currentReplicas", self.current_replicas),
            ("updatedReplicas", self.updated_replicas),
        ] {
            if value != 0 {
                status.insert(field.into(), json!(value));
            }
        }
        for (field, value) in [
            ("currentRevision", &self.current_revision),
            ("updateRevision", &self.update_revision),
        ] {
            if !value.is_empty() {
                status.insert(field.into(), json!(value));
            }
        }
        if let Some(count) = self.collision_count {
            status.insert("collisionCount".into(), json!(count));
        }
        Value::Object(status)
    }

    /// Recounts the pods (upstream's `updateStatus`): every existing pod counts as a replica;
    /// those neither terminating count for their revision.
    pub fn count<'a>(
        &mut self,
        pods: impl IntoIterator<Item = &'a Value>,
        min_ready_seconds: i64,
        now: DateTime<Utc>,
    ) {
        let (mut replicas, mut ready, mut available, mut current, mut updated) = (0, 0, 0, 0, 0);
        for pod in pods {
            replicas += 1;
            if pods::running_and_ready(pod) {
                ready += 1;
                if pods::available(pod, min_ready_seconds, now) {
                    available += 1;
                }
            }
            if !pods::terminating(pod) {
                let revision = pods::revision(pod);
                if revision == self.current_revision {
                    current += 1;
                }
                if revision == self.update_revision {
                    updated += 1;
                }
            }
        }
        self.replicas = replicas;
        self.ready_replicas = ready;
        self.available_replicas = available;
        self.current_replicas = current;
        self.updated_replicas = updated;
    }

    /// `completeRollingUpdate`: with every one of `spec_replicas` pods present, updated and
    /// ready, the update revision is the current one.
    pub fn complete_rolling_update(&mut self, rolling: bool, spec_replicas: i64) {
        if rolling
            && self.updated_replicas == spec_replicas
            && self.ready_replicas == spec_replicas
            && self.replicas == spec_replicas
        {
            self.current_replicas = self.updated_replicas;
            self.current_revision = self.update_revision.clone();
        }
    }

    /// Whether this status says something `stored` does not (`inconsistentStatus`, plus the
    /// collision count).
    pub fn differs_from(&self, stored: &SetStatus) -> bool {
        self.observed_generation > stored.observed_generation
            || self.replicas != stored.replicas
            || self.current_replicas != stored.current_replicas
            || self.ready_replicas != stored.ready_replicas
            || self.updated_replicas != stored.updated_replicas
            || self.current_revision != stored.current_revision
            || self.available_replicas != stored.available_replicas
            || self.update_revision != stored.update_revision
            || self.collision_count != stored.collision_count
    }
}
