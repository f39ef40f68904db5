//! What the StatefulSet controller reads from its pods: phase, readiness, availability
//! (`minReadySeconds`), termination and revision (upstream's `isRunningAndReady`,
//! `isRunningAndAvailable`, `isTerminating`, `getPodRevision`).

use chrono::{DateTime, Utc};
use serde_json::Value;

use crate::controllers::history::REVISION_HASH;
use crate::controllers::objects;

pub fn running_and_ready(pod: &Value) -> bool {
    objects::pod_phase(pod) == "Running" && objects::pod_is_ready(pod)
}

/// Ready for `minReadySeconds`.
pub fn available(pod: &Value, min_ready_seconds: i64, now: DateTime<Utc>) -> bool {
    objects::pod_is_available(pod, min_ready_seconds, now)
}

pub fn terminating(pod: &Value) -> bool {
    objects::is_deleting(pod)
}

/// Not running, ready and available, or on its way out: what an ordered set waits for.
pub fn unavailable(pod: &Value, min_ready_seconds: i64, now: DateTime<Utc>) -> bool {
    !running_and_ready(pod) || terminating(pod) || !available(pod, min_ready_seconds, now)
}

/// Succeeded or Failed: replaced, whatever the exit code.
pub fn finished(pod: &Value) -> bool {
    objects::pod_is_terminal(pod)
}

pub fn pending(pod: &Value) -> bool {
    objects::pod_phase(pod) == "Pending"
}

/// The revision the pod was made from (`controller-revision-hash`).
pub fn revision(pod: &Value) -> &str {
    pod.pointer("/metadata/labels")
        .and_then(|l| l.get(REVISION_HASH))
        .and_then(Value::as_str)
        .unwrap_or("")
}
