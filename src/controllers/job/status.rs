//! A Job's `status` as the controller reads and writes it, and its conditions.
//!
//! Fields are written the way kube-controller-manager's typed client serializes them:
//! `active`, `succeeded`, `failed` and `completedIndexes` only when not zero or empty, `ready`
//! and `terminating` always, `uncountedTerminatedPods` always (its lists when not empty),
//! `failedIndexes` for jobs with `backoffLimitPerIndex`.

use chrono::{DateTime, Utc};
use serde_json::{json, Map, Value};

use crate::api::meta::format_time;

pub const COMPLETE: &str = "Complete";
pub const FAILED: &str = "Failed";
pub const SUSPENDED: &str = "Suspended";
pub const FAILURE_TARGET: &str = "FailureTarget";
pub const SUCCESS_CRITERIA_MET: &str = "SuccessCriteriaMet";

/// A condition the sync decided on (its status is `True`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Finish {
    pub kind: &'static str,
    pub reason: String,
    pub message: String,
}

impl Finish {
    pub fn new(kind: &'static str, reason: &str, message: &str) -> Finish {
        Finish {
            kind,
            reason: reason.to_string(),
            message: message.to_string(),
        }
    }
}

/// The fields of a Job's status this controller owns.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct JobStatus {
    pub start_time: Option<String>,
    pub completion_time: Option<String>,
    pub active: i64,
    pub ready: Option<i64>,
    pub terminating: Option<i64>,
    pub succeeded: i64,
    pub failed: i64,
    pub completed_indexes: String,
    pub failed_indexes: Option<String>,
    pub uncounted_succeeded: Vec<String>,
    pub uncounted_failed: Vec<String>,
    pub conditions: Vec<Value>,
}

fn int(status: &Value, key: &str) -> i64 {
    status.get(key).and_then(Value::as_i64).unwrap_or(0)
}

fn strings(value: Option<&Value>) -> Vec<String> {
    value
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(|v| v.as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default()
}

impl JobStatus {
    pub fn read(job: &Value) -> JobStatus {
        let status = job.get("status").cloned().unwrap_or(json!({}));
        let text = |key: &str| status.get(key).and_then(Value::as_str).map(str::to_string);
        JobStatus {
            start_time: text("startTime"),
            completion_time: text("completionTime"),
            active: int(&status, "active"),
            ready: status.get("ready").and_then(Value::as_i64),
            terminating: status.get("terminating").and_then(Value::as_i64),
            succeeded: int(&status, "succeeded"),
            failed: int(&status, "failed"),
            completed_indexes: text("completedIndexes").unwrap_or_default(),
            failed_indexes: text("failedIndexes"),
            uncounted_succeeded: strings(status.pointer("/uncountedTerminatedPods/succeeded")),
            uncounted_failed: strings(status.pointer("/uncountedTerminatedPods/failed")),
            conditions: status
                .get("conditions")
                .and_then(Value::as_array)
                .cloned()
                .unwrap_or_default(),
        }
    }

    /// Writes these fields into `job.status`, keeping any others.
    pub fn write_into(&self, job: &mut Value) {
        let mut status: Map<String, Value> = job
            .get("status")
            .and_then(Value::as_object)
            .cloned()
            .unwrap_or_default();
        let mut set = |key: &str, value: Option<Value>| match value {
            Some(v) => {
                status.insert(key.to_string(), v);
            }
            None => {
                status.remove(key);
            }
        };
        set("startTime", self.start_time.clone().map(Value::String));
        set(
            "completionTime",
            self.completion_time.clone().map(Value::String),
        );
        set("active", (self.active != 0).then(|| json!(self.active)));
        set("ready", self.ready.map(|n| json!(n)));
        set("terminating", self.terminating.map(|n| json!(n)));
        set(
            "succeeded",
            (self.succeeded != 0).then(|| json!(self.succeeded)),
        );
        set("failed", (self.failed != 0).then(|| json!(self.failed)));
        set(
            "completedIndexes",
            (!self.completed_indexes.is_empty()).then(|| json!(self.completed_indexes)),
        );
        set(
            "failedIndexes",
            self.failed_indexes.clone().map(Value::String),
        );
        let mut uncounted = Map::new();
        if !self.uncounted_succeeded.is_empty() {
            uncounted.insert("succeeded".into(), json!(self.uncounted_succeeded));
        }
        if !self.uncounted_failed.is_empty() {
            uncounted.insert("failed".into(), json!(self.uncounted_failed));
        }
        set("uncountedTerminatedPods", Some(Value::Object(uncounted)));
        set(
            "conditions",
            (!self.conditions.is_empty()).then(|| Value::Array(self.conditions.clone())),
        );
        job["status"] = Value::Object(status);
    }

    /// The condition of type `kind`, if any.
    pub fn condition(&self, kind: &str) -> Option<&Value> {
        self.conditions.iter().find(|c| c["type"] == kind)
    }

    /// Whether the condition `kind` is `True`.
    pub fn is_true(&self, kind: &str) -> bool {
        self.condition(kind).is_some_and(|c| c["status"] == "True")
    }

    /// Sets condition `kind`: replaced when its status, reason or message differ, appended
    /// when missing unless `False` (a missing condition already means false). Whether the
    /// list changed.
    pub fn ensure_condition(
        &mut self,
        kind: &str,
        status: &str,
        reason: &str,
        message: &str,
        now: DateTime<Utc>,
    ) -> bool {
        let fresh = new_condition(kind, status, reason, message, now);
        if let Some(existing) = self.conditions.iter_mut().find(|c| c["type"] == kind) {
            let same = existing["status"] == status
                && existing.get("reason").and_then(Value::as_str).unwrap_or("") == reason
                && existing
                    .get("message")
                    .and_then(Value::as_str)
                    .unwrap_or("")
                    == message;
            if same {
                return false;
            }
            *existing = fresh;
            return true;
        }
        if status == "False" {
            return false;
        }
        self.conditions.push(fresh);
        true
    }
}

/// A Job condition as kube-controller-manager writes it.
pub fn new_condition(
    kind: &str,
    status: &str,
    reason: &str,
    message: &str,
    now: DateTime<Utc>,
) -> Value {
    let at = format_time(now);
    let mut c =
        json!({"type": kind, "status": status, "lastProbeTime": at, "lastTransitionTime": at});
    if !reason.is_empty() {
        c["reason"] = json!(reason);
    }
    if !message.is_empty() {
        c["message"] = json!(message);
    }
    c
}

/// Complete or Failed: the Job will do nothing more.
pub fn is_finished(job: &Value) -> bool {
    finished_as(job).is_some()
}

/// `Complete` or `Failed`, whichever is true.
pub fn finished_as(job: &Value) -> Option<&'static str> {
    let conditions = job
        .pointer("/status/conditions")
        .and_then(Value::as_array)?;
    conditions.iter().find_map(|c| {
        if c["status"] != "True" {
            return None;
        }
        match c["type"].as_str() {
            Some(COMPLETE) => Some(COMPLETE),
            Some(FAILED) => Some(FAILED),
            _ => None,
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_round_trips_with_upstreams_omissions() {
        let mut job = json!({"status": {"other": 1}});
        let mut s = JobStatus::read(&job);
        s.ready = Some(0);
        s.terminating = Some(0);
        s.write_into(&mut job);
        assert_eq!(
            job["status"],
            json!({"other": 1, "ready": 0, "terminating": 0, "uncountedTerminatedPods": {}})
        );
        s.succeeded = 2;
        s.uncounted_failed = vec!["u1".into()];
        s.completed_indexes = "0,1".into();
        s.write_into(&mut job);
        assert_eq!(JobStatus::read(&job), s);
        assert_eq!(
            job["status"]["uncountedTerminatedPods"],
            json!({"failed": ["u1"]})
        );
    }

    #[test]
    fn conditions_change_only_when_they_differ() {
        let now = Utc::now();
        let mut s = JobStatus::default();
        assert!(!s.ensure_condition(SUSPENDED, "False", "JobResumed", "Job resumed", now));
        assert!(s.ensure_condition(SUSPENDED, "True", "JobSuspended", "Job suspended", now));
        assert!(!s.ensure_condition(SUSPENDED, "True", "JobSuspended", "Job suspended", now));
        assert!(s.ensure_condition(SUSPENDED, "False", "JobResumed", "Job resumed", now));
        assert_eq!(s.conditions.len(), 1);
        assert_eq!(s.conditions[0]["reason"], "JobResumed");
        let mut job = json!({});
        s.ensure_condition(COMPLETE, "True", "CompletionsReached", "x", now);
        s.write_into(&mut job);
        assert_eq!(finished_as(&job), Some(COMPLETE));
    }
}
