//! batch/v1 defaults (`SetDefaults_Job`, `SetDefaults_CronJob`) and the selector the job
//! strategy generates for a job without `manualSelector: true`.

use serde_json::{json, Value};

use super::pod::template;
use super::{child, default};

/// The labels the job strategy puts on a job's pod template and selects on.
pub const CONTROLLER_UID: &str = "batch.kubernetes.io/controller-uid";
pub const LEGACY_CONTROLLER_UID: &str = "controller-uid";
pub const JOB_NAME: &str = "batch.kubernetes.io/job-name";
pub const LEGACY_JOB_NAME: &str = "job-name";

pub fn job(object: &mut Value) {
    template(object, &["spec", "template"]);
    let spec = child(object, "spec");
    if spec.get("completions").is_none_or(Value::is_null)
        && spec.get("parallelism").is_none_or(Value::is_null)
    {
        spec["completions"] = json!(1);
        spec["parallelism"] = json!(1);
    }
    default(spec, "parallelism", json!(1));
    let backoff = if spec
        .get("backoffLimitPerIndex")
        .is_some_and(|v| !v.is_null())
    {
        json!(i32::MAX)
    } else {
        json!(6)
    };
    default(spec, "backoffLimit", backoff);
    default(spec, "completionMode", json!("NonIndexed"));
    default(spec, "suspend", json!(false));
    let replacement = if spec.get("podFailurePolicy").is_some_and(|v| !v.is_null()) {
        "Failed"
    } else {
        "TerminatingOrFailed"
    };
    default(spec, "podReplacementPolicy", json!(replacement));
    generate_selector(object);
    // Defaulting runs again when kube-apiserver reads the job back: a job without labels shows
    // its template's (generated) labels.
    let template_labels = object.pointer("/spec/template/metadata/labels").cloned();
    let metadata = child(object, "metadata");
    if metadata
        .get("labels")
        .and_then(Value::as_object)
        .is_none_or(|m| m.is_empty())
    {
        if let Some(labels) = template_labels {
            metadata["labels"] = labels;
        }
    }
}

/// The job strategy's `generateSelector`: unless `manualSelector` is true, the template gets
/// the controller-uid and job-name labels (new and legacy spellings) and the selector matches
/// the new controller-uid label. A label the user already set is kept (validation then
/// reports a mismatch).
fn generate_selector(object: &mut Value) {
    if object
        .pointer("/spec/manualSelector")
        .and_then(Value::as_bool)
        == Some(true)
    {
        return;
    }
    let uid = object
        .pointer("/metadata/uid")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_string();
    let name = object
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_string();
    let labels = child(
        child(child(child(object, "spec"), "template"), "metadata"),
        "labels",
    );
    for (key, value) in [
        (CONTROLLER_UID, &uid),
        (LEGACY_CONTROLLER_UID, &uid),
        (JOB_NAME, &name),
        (LEGACY_JOB_NAME, &name),
    ] {
        default(labels, key, json!(value));
    }
    let match_labels = child(child(child(object, "spec"), "selector"), "matchLabels");
    default(match_labels, CONTROLLER_UID, json!(uid));
}

pub fn cron_job(object: &mut Value) {
    template(object, &["spec", "jobTemplate", "spec", "template"]);
    let spec = child(object, "spec");
    default(spec, "concurrencyPolicy", json!("Allow"));
    default(spec, "suspend", json!(false));
    default(spec, "successfulJobsHistoryLimit", json!(3));
    default(spec, "failedJobsHistoryLimit", json!(1));
}
