//! A ReplicaSet's (or ReplicationController's) status as kube-controller-manager computes it
//! (`calculateStatus`): counts over its active pods, the generation it acted on, and the
//! `ReplicaFailure` condition while creating or deleting pods fails.

use chrono::{DateTime, Utc};
use serde_json::{json, Map, Value};

use crate::api::meta::format_time;
use crate::controllers::objects;
use crate::kube::labels::Labels;

pub const REPLICA_FAILURE: &str = "ReplicaFailure";

/// The status fields the controller owns.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ReplicaStatus {
    pub replicas: i64,
    pub fully_labeled_replicas: i64,
    pub ready_replicas: i64,
    pub available_replicas: i64,
    pub observed_generation: i64,
    pub conditions: Vec<Value>,
}

impl ReplicaStatus {
    /// Reads `status` of a ReplicaSet or ReplicationController.
    pub fn of(object: &Value) -> ReplicaStatus {
        let int = |field: &str| {
            object
                .pointer(&format!("/status/{field}"))
                .and_then(Value::as_i64)
                .unwrap_or(0)
        };
        ReplicaStatus {
            replicas: int("replicas"),
            fully_labeled_replicas: int("fullyLabeledReplicas"),
            ready_replicas: int("readyReplicas"),
            available_replicas: int("availableReplicas"),
            observed_generation: int("observedGeneration"),
            conditions: object
                .pointer("/status/conditions")
                .and_then(Value::as_array)
                .cloned()
                .unwrap_or_default(),
        }
    }

    /// The status as the API writes it: `replicas` always, the other counts only when not
    /// zero (they are `omitempty` upstream).
    pub fn to_value(&self) -> Value {
        let mut status = Map::new();
        status.insert("replicas".into(), json!(self.replicas));
        for (field, value) in [
            ("fullyLabeledReplicas", self.fully_labeled_replicas),
            ("readyReplicas", self.ready_replicas),
            ("availableReplicas", self.available_replicas),
            ("observedGeneration", self.observed_generation),
        ] {
            if value != 0 {
                status.insert(field.into(), json!(value));
            }
        }
        if !self.conditions.is_empty() {
            status.insert("conditions".into(), Value::Array(self.conditions.clone()));
        }
        Value::Object(status)
    }

    /// The `ReplicaFailure` condition, if set.
    pub fn failure(&self) -> Option<&Value> {
        self.conditions
            .iter()
            .find(|c| c.get("type").and_then(Value::as_str) == Some(REPLICA_FAILURE))
    }
}

/// A failed create or delete of the last reconcile, for the `ReplicaFailure` condition.
#[derive(Debug, Clone)]
pub struct ManageFailure {
    /// `FailedCreate` or `FailedDelete`.
    pub reason: &'static str,
    pub message: String,
}

/// The status of `owner` (its value) with `pods` its active pods (upstream's
/// `calculateStatus`; `observedGeneration` is set when written). A failure sets
/// `ReplicaFailure` unless it is set already; a reconcile without failure removes it.
pub fn calculate(
    owner: &Value,
    pods: &[(&Labels, &Value)],
    failure: Option<&ManageFailure>,
    now: DateTime<Utc>,
) -> ReplicaStatus {
    let mut status = ReplicaStatus::of(owner);
    let min_ready = owner
        .pointer("/spec/minReadySeconds")
        .and_then(Value::as_i64)
        .unwrap_or(0);
    let template_labels: Vec<(String, String)> = owner
        .pointer("/spec/template/metadata/labels")
        .and_then(Value::as_object)
        .map(|m| {
            m.iter()
                .filter_map(|(k, v)| v.as_str().map(|v| (k.clone(), v.to_string())))
                .collect()
        })
        .unwrap_or_default();
    let (mut fully_labeled, mut ready, mut available) = (0, 0, 0);
    for (labels, pod) in pods {
        if template_labels
            .iter()
            .all(|(k, v)| labels.get(k) == Some(v.as_str()))
        {
            fully_labeled += 1;
        }
        if objects::pod_is_ready(pod) {
            ready += 1;
            if objects::pod_is_available(pod, min_ready, now) {
                available += 1;
            }
        }
    }
    match (failure, status.failure().is_some()) {
        (Some(failure), false) => status.conditions.push(json!({
            "type": REPLICA_FAILURE,
            "status": "True",
            "lastTransitionTime": format_time(now),
            "reason": failure.reason,
            "message": failure.message,
        })),
        (None, true) => status
            .conditions
            .retain(|c| c.get("type").and_then(Value::as_str) != Some(REPLICA_FAILURE)),
        _ => {}
    }
    status.replicas = pods.len() as i64;
    status.fully_labeled_replicas = fully_labeled;
    status.ready_replicas = ready;
    status.available_replicas = available;
    status
}

/// How long until the next of `pods` that is Ready but not yet available becomes available
/// (Ready for `minReadySeconds`), if any is waiting.
pub fn next_available(
    pods: &[&Value],
    min_ready_seconds: i64,
    now: DateTime<Utc>,
) -> Option<std::time::Duration> {
    if min_ready_seconds <= 0 {
        return None;
    }
    pods.iter()
        .filter(|p| {
            objects::pod_is_ready(p) && !objects::pod_is_available(p, min_ready_seconds, now)
        })
        .filter_map(|p| {
            objects::condition(p, "Ready")
                .and_then(|c| c.get("lastTransitionTime"))
                .and_then(Value::as_str)
                .and_then(objects::parse_time)
        })
        .map(|since| since + chrono::Duration::seconds(min_ready_seconds) - now)
        .min()
        .map(|wait| wait.to_std().unwrap_or_default())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels(pairs: &[(&str, &str)]) -> Labels {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn counts_conditions_and_omitted_zeroes() {
        let now = Utc::now();
        let owner = json!({
            "metadata": {"generation": 3},
            "spec": {"replicas": 3, "minReadySeconds": 10,
                     "template": {"metadata": {"labels": {"app": "web", "tier": "x"}}}},
            "status": {"replicas": 1, "observedGeneration": 2},
        });
        let ready_since = |s: i64| {
            json!({"status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True",
                "lastTransitionTime": format_time(now - chrono::Duration::seconds(s))}]}})
        };
        let (long, short, starting) = (ready_since(60), ready_since(2), json!({}));
        let (full, partial) = (
            labels(&[("app", "web"), ("tier", "x"), ("extra", "1")]),
            labels(&[("app", "web")]),
        );
        let pods = [(&full, &long), (&full, &short), (&partial, &starting)];
        let failure = ManageFailure {
            reason: "FailedCreate",
            message: "quota".into(),
        };
        let status = calculate(&owner, &pods, Some(&failure), now);
        assert_eq!(
            (
                status.replicas,
                status.fully_labeled_replicas,
                status.ready_replicas,
                status.available_replicas
            ),
            (3, 2, 2, 1)
        );
        assert_eq!(status.failure().unwrap()["reason"], "FailedCreate");
        // observedGeneration is the writer's to set.
        assert_eq!(status.observed_generation, 2);
        // The pod Ready for 2 s becomes available in 8 s.
        let wait = next_available(&[&long, &short, &starting], 10, now).unwrap();
        assert!(wait.as_secs() >= 7 && wait.as_secs() <= 8, "{wait:?}");
        assert_eq!(next_available(&[&long], 10, now), None);

        // A failure already recorded keeps its time; a good reconcile removes it.
        let mut with_failure = owner.clone();
        with_failure["status"] = status.to_value();
        let again = calculate(
            &with_failure,
            &pods,
            Some(&failure),
            now + chrono::Duration::seconds(5),
        );
        assert_eq!(again.conditions, status.conditions);
        assert!(calculate(&with_failure, &pods, None, now)
            .failure()
            .is_none());

        let empty = ReplicaStatus::default().to_value();
        assert_eq!(empty, json!({"replicas": 0}));
    }
}
