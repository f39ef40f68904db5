//! A Deployment's status and conditions as kube-controller-manager keeps them: the counts
//! summed over its ReplicaSets (`calculateStatus`), the `Available` condition, and the
//! condition helpers of upstream's `deployment/util` with their reasons.

use chrono::{DateTime, Utc};
use serde_json::{json, Map, Value};

use super::replica_sets::Rs;
use super::Deployment;
use crate::api::meta::format_time;
use crate::controllers::objects;

pub const AVAILABLE: &str = "Available";
pub const PROGRESSING: &str = "Progressing";
pub const REPLICA_FAILURE: &str = "ReplicaFailure";

pub const MINIMUM_REPLICAS_AVAILABLE: &str = "MinimumReplicasAvailable";
pub const MINIMUM_REPLICAS_UNAVAILABLE: &str = "MinimumReplicasUnavailable";
pub const REPLICA_SET_UPDATED: &str = "ReplicaSetUpdated";
pub const FAILED_RS_CREATE: &str = "ReplicaSetCreateError";
pub const NEW_REPLICA_SET: &str = "NewReplicaSetCreated";
pub const FOUND_NEW_RS: &str = "FoundNewReplicaSet";
pub const NEW_RS_AVAILABLE: &str = "NewReplicaSetAvailable";
pub const TIMED_OUT: &str = "ProgressDeadlineExceeded";
pub const PAUSED: &str = "DeploymentPaused";
pub const RESUMED: &str = "DeploymentResumed";

/// One entry of `status.conditions`.
#[derive(Debug, Clone, PartialEq)]
pub struct Condition {
    pub kind: String,
    pub status: String,
    pub last_update_time: String,
    pub last_transition_time: String,
    pub reason: String,
    pub message: String,
}

impl Condition {
    /// A condition that changes now (`NewDeploymentCondition`).
    pub fn new(
        kind: &str,
        status: &str,
        reason: &str,
        message: String,
        now: DateTime<Utc>,
    ) -> Condition {
        let now = format_time(now);
        Condition {
            kind: kind.into(),
            status: status.into(),
            last_update_time: now.clone(),
            last_transition_time: now,
            reason: reason.into(),
            message,
        }
    }

    fn of(value: &Value) -> Condition {
        let text = |f: &str| {
            value
                .get(f)
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_string()
        };
        Condition {
            kind: text("type"),
            status: text("status"),
            last_update_time: text("lastUpdateTime"),
            last_transition_time: text("lastTransitionTime"),
            reason: text("reason"),
            message: text("message"),
        }
    }

    fn to_value(&self) -> Value {
        let mut m = Map::new();
        m.insert("type".into(), json!(self.kind));
        m.insert("status".into(), json!(self.status));
        for (k, v) in [
            ("lastUpdateTime", &self.last_update_time),
            ("lastTransitionTime", &self.last_transition_time),
            ("reason", &self.reason),
            ("message", &self.message),
        ] {
            if !v.is_empty() {
                m.insert(k.into(), json!(v));
            }
        }
        Value::Object(m)
    }
}

/// The status fields the controller writes.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct DeploymentStatus {
    pub observed_generation: i64,
    pub replicas: i64,
    pub updated_replicas: i64,
    pub ready_replicas: i64,
    pub available_replicas: i64,
    pub unavailable_replicas: i64,
    pub conditions: Vec<Condition>,
    pub collision_count: Option<i64>,
}

impl DeploymentStatus {
    pub fn of(deployment: &Value) -> DeploymentStatus {
        let int = |f: &str| {
            deployment
                .pointer(&format!("/status/{f}"))
                .and_then(Value::as_i64)
                .unwrap_or(0)
        };
        DeploymentStatus {
            observed_generation: int("observedGeneration"),
            replicas: int("replicas"),
            updated_replicas: int("updatedReplicas"),
            ready_replicas: int("readyReplicas"),
            available_replicas: int("availableReplicas"),
            unavailable_replicas: int("unavailableReplicas"),
            conditions: deployment
                .pointer("/status/conditions")
                .and_then(Value::as_array)
                .map(|cs| cs.iter().map(Condition::of).collect())
                .unwrap_or_default(),
            collision_count: deployment
                .pointer("/status/collisionCount")
                .and_then(Value::as_i64),
        }
    }

    /// As the API writes it: zero counts left out (they are `omitempty` upstream).
    pub fn to_value(&self) -> Value {
        let mut m = Map::new();
        for (k, v) in [
            ("observedGeneration", self.observed_generation),
            ("replicas", self.replicas),
            ("updatedReplicas", self.updated_replicas),
            ("readyReplicas", self.ready_replicas),
            ("availableReplicas", self.available_replicas),
            ("unavailableReplicas", self.unavailable_replicas),
        ] {
            if v != 0 {
                m.insert(k.into(), json!(v));
            }
        }
        if !self.conditions.is_empty() {
            m.insert(
                "conditions".into(),
                Value::Array(self.conditions.iter().map(Condition::to_value).collect()),
            );
        }
        if let Some(c) = self.collision_count {
            m.insert("collisionCount".into(), json!(c));
        }
        Value::Object(m)
    }

    pub fn condition(&self, kind: &str) -> Option<&Condition> {
        self.conditions.iter().find(|c| c.kind == kind)
    }

    /// Upstream's `SetDeploymentCondition`: nothing changes when the same status and reason
    /// are set; the same status with another reason keeps the transition time; the new
    /// condition goes last.
    pub fn set_condition(&mut self, mut condition: Condition) {
        if let Some(current) = self.condition(&condition.kind) {
            if current.status == condition.status && current.reason == condition.reason {
                return;
            }
            if current.status == condition.status {
                condition.last_transition_time = current.last_transition_time.clone();
            }
        }
        self.remove_condition(&condition.kind.clone());
        self.conditions.push(condition);
    }

    pub fn remove_condition(&mut self, kind: &str) {
        self.conditions.retain(|c| c.kind != kind);
    }
}

/// The status the ReplicaSets add up to, with the `Available` condition
/// (`calculateStatus`). `all` includes `new`.
pub fn calculate(
    all: &[&Rs],
    new: Option<&Rs>,
    d: &Deployment,
    now: DateTime<Utc>,
) -> DeploymentStatus {
    let available: i64 = all.iter().map(|rs| rs.available).sum();
    let total: i64 = all.iter().map(|rs| rs.replicas).sum();
    let mut status = DeploymentStatus {
        observed_generation: d.generation,
        replicas: all.iter().map(|rs| rs.status_replicas).sum(),
        updated_replicas: new.map_or(0, |rs| rs.status_replicas),
        ready_replicas: all.iter().map(|rs| rs.ready).sum(),
        available_replicas: available,
        // More available than wanted happens while scaling down.
        unavailable_replicas: (total - available).max(0),
        conditions: d.status.conditions.clone(),
        collision_count: d.status.collision_count,
    };
    let condition = if available >= d.spec.replicas - d.max_unavailable() {
        Condition::new(
            AVAILABLE,
            "True",
            MINIMUM_REPLICAS_AVAILABLE,
            "Deployment has minimum availability.".into(),
            now,
        )
    } else {
        Condition::new(
            AVAILABLE,
            "False",
            MINIMUM_REPLICAS_UNAVAILABLE,
            "Deployment does not have minimum availability.".into(),
            now,
        )
    };
    status.set_condition(condition);
    status
}

/// Every pod updated, available, nothing else left, the latest spec observed
/// (`DeploymentComplete`).
pub fn complete(d: &Deployment, status: &DeploymentStatus) -> bool {
    let want = d.spec.replicas;
    status.updated_replicas == want
        && status.replicas == want
        && status.available_replicas == want
        && status.observed_generation >= d.generation
}

/// Whether `new` shows progress over the Deployment's current status
/// (`DeploymentProgressing`).
pub fn progressing(d: &Deployment, new: &DeploymentStatus) -> bool {
    let old = &d.status;
    new.updated_replicas > old.updated_replicas
        || (new.replicas - new.updated_replicas) < (old.replicas - old.updated_replicas)
        || new.ready_replicas > old.ready_replicas
        || new.available_replicas > old.available_replicas
}

/// Whether the rollout has gone `progressDeadlineSeconds` without progress
/// (`DeploymentTimedOut`).
pub fn timed_out(d: &Deployment, status: &DeploymentStatus, now: DateTime<Utc>) -> bool {
    if !d.has_progress_deadline() {
        return false;
    }
    let Some(condition) = status.condition(PROGRESSING) else {
        return false;
    };
    match condition.reason.as_str() {
        NEW_RS_AVAILABLE => false,
        TIMED_OUT => true,
        _ => deadline(d, condition).is_some_and(|at| at < now),
    }
}

/// When a rollout whose last progress is `condition` times out.
pub fn deadline(d: &Deployment, condition: &Condition) -> Option<DateTime<Utc>> {
    let from = objects::parse_time(&condition.last_update_time)?;
    Some(from + chrono::Duration::seconds(d.spec.progress_deadline_seconds.unwrap_or(0)))
}

/// A ReplicaSet condition as the Deployment's (`ReplicaSetToDeploymentCondition`).
pub fn from_replica_set_condition(c: &Value) -> Condition {
    let mut condition = Condition::of(c);
    condition.last_update_time = condition.last_transition_time.clone();
    condition
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn setting_a_condition_keeps_what_upstream_keeps() {
        let t0 = objects::parse_time("2025-01-01T00:00:00Z").unwrap();
        let t1 = t0 + chrono::Duration::seconds(30);
        let mut status = DeploymentStatus::default();
        status.set_condition(Condition::new(
            PROGRESSING,
            "True",
            NEW_REPLICA_SET,
            "a".into(),
            t0,
        ));
        status.set_condition(Condition::new(
            AVAILABLE,
            "False",
            MINIMUM_REPLICAS_UNAVAILABLE,
            "b".into(),
            t0,
        ));
        // Same status and reason: nothing changes, not even the message.
        status.set_condition(Condition::new(
            PROGRESSING,
            "True",
            NEW_REPLICA_SET,
            "c".into(),
            t1,
        ));
        assert_eq!(status.condition(PROGRESSING).unwrap().message, "a");
        // Same status, new reason: the transition time stays, the condition moves last.
        status.set_condition(Condition::new(
            PROGRESSING,
            "True",
            NEW_RS_AVAILABLE,
            "d".into(),
            t1,
        ));
        let p = status.conditions.last().unwrap();
        assert_eq!(
            (p.kind.as_str(), p.reason.as_str()),
            (PROGRESSING, NEW_RS_AVAILABLE)
        );
        assert_eq!(p.last_transition_time, "2025-01-01T00:00:00Z");
        assert_eq!(p.last_update_time, "2025-01-01T00:00:30Z");
        // Another status: a new transition.
        status.set_condition(Condition::new(
            PROGRESSING,
            "False",
            TIMED_OUT,
            "e".into(),
            t1,
        ));
        assert_eq!(
            status.condition(PROGRESSING).unwrap().last_transition_time,
            "2025-01-01T00:00:30Z"
        );
        // Round trip through JSON, zero counts left out.
        let value = json!({"status": status.to_value()});
        assert_eq!(DeploymentStatus::of(&value), status);
        assert!(value["status"].get("replicas").is_none());
    }
}
