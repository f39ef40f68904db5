//! What the Job controller reads from its pods and how it makes them: the tracking finalizer,
//! which pods count as active, terminating or failed, when a pod finished, the order in which
//! surplus pods are deleted (kube-controller-manager's `ActivePods`), and a new pod from the
//! Job's template (labels, annotations, finalizer, owner, the completion index of Indexed
//! Jobs with its hostname, label and `JOB_COMPLETION_INDEX` variable).

use std::cmp::Ordering;

use chrono::{DateTime, Utc};
use serde_json::{json, Map, Value};

use super::indexes::COMPLETION_INDEX;
use crate::controllers::objects::{
    condition, is_deleting, new_controller_ref, parse_time, pod_is_ready, pod_is_terminal,
    pod_phase,
};

/// The finalizer that keeps a pod until the Job controller has counted it.
pub const TRACKING_FINALIZER: &str = "batch.kubernetes.io/job-tracking";
/// Failures of an index so far, carried from pod to pod (jobs with `backoffLimitPerIndex`).
pub const INDEX_FAILURE_COUNT: &str = "batch.kubernetes.io/job-index-failure-count";
/// Failures of an index an `Ignore` rule did not count.
pub const INDEX_IGNORED_FAILURE_COUNT: &str = "batch.kubernetes.io/job-index-ignored-failure-count";
/// Generated names are cut to this length (kube-apiserver adds five characters).
const MAX_GENERATED_NAME: usize = 58;

pub fn has_tracking_finalizer(pod: &Value) -> bool {
    pod.pointer("/metadata/finalizers")
        .and_then(Value::as_array)
        .is_some_and(|f| f.iter().any(|v| v == TRACKING_FINALIZER))
}

/// Neither finished nor being deleted.
pub fn is_active(pod: &Value) -> bool {
    !pod_is_terminal(pod) && !is_deleting(pod)
}

/// Being deleted but not finished yet.
pub fn is_terminating(pod: &Value) -> bool {
    is_deleting(pod) && !pod_is_terminal(pod)
}

/// Failed, or (unless only failed pods are replaced) deleted before it succeeded: a pod
/// removed before it could reach a phase still counts as a failure.
pub fn is_failed(pod: &Value, only_replace_failed: bool) -> bool {
    if pod_phase(pod) == "Failed" {
        return true;
    }
    !only_replace_failed && is_deleting(pod) && pod_phase(pod) != "Succeeded"
}

pub fn uid(pod: &Value) -> &str {
    crate::controllers::objects::uid(pod)
}

pub fn name(pod: &Value) -> &str {
    crate::controllers::objects::name(pod)
}

fn time_at(value: &Value, pointer: &str) -> Option<DateTime<Utc>> {
    value
        .pointer(pointer)
        .and_then(Value::as_str)
        .and_then(parse_time)
}

/// When a pod finished: the last of its containers' ends when all ended, else when it became
/// not Ready, else its deletion time less the grace period, else its creation.
pub fn finish_time(pod: &Value) -> DateTime<Utc> {
    let statuses = pod
        .pointer("/status/containerStatuses")
        .and_then(Value::as_array);
    if let Some(statuses) = statuses.filter(|s| !s.is_empty()) {
        let ends: Option<Vec<DateTime<Utc>>> = statuses
            .iter()
            .map(|s| time_at(s, "/state/terminated/finishedAt"))
            .collect();
        if let Some(latest) = ends.and_then(|e| e.into_iter().max()) {
            return latest;
        }
    }
    if let Some(ready) = condition(pod, "Ready") {
        if ready.get("status").and_then(Value::as_str) == Some("False") {
            if let Some(t) = ready
                .get("lastTransitionTime")
                .and_then(Value::as_str)
                .and_then(parse_time)
            {
                return t;
            }
        }
    }
    if let Some(deleted) = time_at(pod, "/metadata/deletionTimestamp") {
        let grace = pod
            .pointer("/metadata/deletionGracePeriodSeconds")
            .and_then(Value::as_i64)
            .unwrap_or(0);
        return deleted - chrono::Duration::seconds(grace);
    }
    time_at(pod, "/metadata/creationTimestamp").unwrap_or(DateTime::<Utc>::MIN_UTC)
}

/// The highest restart count of the pod's containers.
fn max_restarts(pod: &Value) -> i64 {
    pod.pointer("/status/containerStatuses")
        .and_then(Value::as_array)
        .map(|s| {
            s.iter()
                .filter_map(|c| c.get("restartCount").and_then(Value::as_i64))
                .max()
                .unwrap_or(0)
        })
        .unwrap_or(0)
}

/// Restarts of all containers (init containers included) of pods still running or pending:
/// `restartPolicy: OnFailure` jobs count these against `backoffLimit`.
pub fn restarts_of_running(pod: &Value) -> i64 {
    if !matches!(pod_phase(pod), "Running" | "Pending") {
        return 0;
    }
    ["initContainerStatuses", "containerStatuses"]
        .iter()
        .filter_map(|k| {
            pod.pointer(&format!("/status/{k}"))
                .and_then(Value::as_array)
        })
        .flatten()
        .filter_map(|c| c.get("restartCount").and_then(Value::as_i64))
        .sum()
}

/// Earlier is deleted first: unassigned before assigned, Pending before Unknown before
/// Running, not ready before ready, ready for less time before more, more restarts before
/// fewer, newer before older (kube-controller-manager's `ActivePods`).
pub fn deletion_order(a: &Value, b: &Value) -> Ordering {
    let node = |p: &Value| {
        p.pointer("/spec/nodeName")
            .and_then(Value::as_str)
            .is_some_and(|n| !n.is_empty())
    };
    if node(a) != node(b) {
        return node(a).cmp(&node(b));
    }
    let phase = |p: &Value| match pod_phase(p) {
        "Pending" => 0,
        "Unknown" => 1,
        "Running" => 2,
        _ => 3,
    };
    if phase(a) != phase(b) {
        return phase(a).cmp(&phase(b));
    }
    if pod_is_ready(a) != pod_is_ready(b) {
        return pod_is_ready(a).cmp(&pod_is_ready(b));
    }
    if pod_is_ready(a) && pod_is_ready(b) {
        let since = |p: &Value| {
            condition(p, "Ready")
                .and_then(|c| c.get("lastTransitionTime"))
                .and_then(Value::as_str)
                .and_then(parse_time)
        };
        if let Some(o) = later_or_unset_first(since(a), since(b)) {
            return o;
        }
    }
    if max_restarts(a) != max_restarts(b) {
        return max_restarts(b).cmp(&max_restarts(a));
    }
    let created = |p: &Value| time_at(p, "/metadata/creationTimestamp");
    later_or_unset_first(created(a), created(b)).unwrap_or(Ordering::Equal)
}

/// Go's `afterOrZero` as an ordering: unset first, then the later time first.
fn later_or_unset_first(a: Option<DateTime<Utc>>, b: Option<DateTime<Utc>>) -> Option<Ordering> {
    match (a, b) {
        (x, y) if x == y => None,
        (None, _) => Some(Ordering::Less),
        (_, None) => Some(Ordering::Greater),
        (Some(x), Some(y)) => Some(y.cmp(&x)),
    }
}

/// Failure counts a replacement pod of an index carries (jobs with `backoffLimitPerIndex`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct IndexFailures {
    pub counted: i64,
    pub ignored: i64,
}

/// An annotation read as a non-negative 32-bit count (0 when missing or not one).
pub fn count_annotation(pod: &Value, key: &str) -> i64 {
    pod.pointer("/metadata/annotations")
        .and_then(|a| a.get(key))
        .and_then(Value::as_str)
        .and_then(|v| v.parse::<i64>().ok())
        .filter(|n| (0..=i64::from(i32::MAX)).contains(n))
        .unwrap_or(0)
}

/// The pod the Job creates: its template with the Job's controller reference, the tracking
/// finalizer and, for an index, the index's annotation, label, hostname, environment
/// variable and failure counts.
pub fn new_pod(job: &Value, index: Option<i64>, failures: Option<IndexFailures>) -> Value {
    let name = crate::controllers::objects::name(job);
    let template = job.pointer("/spec/template").cloned().unwrap_or(json!({}));
    let map_of = |key: &str| -> Map<String, Value> {
        template
            .pointer(&format!("/metadata/{key}"))
            .and_then(Value::as_object)
            .cloned()
            .unwrap_or_default()
    };
    let mut labels = map_of("labels");
    let mut annotations = map_of("annotations");
    let mut finalizers: Vec<Value> = template
        .pointer("/metadata/finalizers")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    if !finalizers.iter().any(|f| f == TRACKING_FINALIZER) {
        finalizers.push(json!(TRACKING_FINALIZER));
    }
    let mut spec = template.get("spec").cloned().unwrap_or(json!({}));
    let generate_name = match index {
        Some(ix) => {
            annotations.insert(COMPLETION_INDEX.into(), json!(ix.to_string()));
            labels.insert(COMPLETION_INDEX.into(), json!(ix.to_string()));
            if let Some(f) = failures {
                annotations.insert(INDEX_FAILURE_COUNT.into(), json!(f.counted.to_string()));
                if f.ignored > 0 {
                    annotations.insert(
                        INDEX_IGNORED_FAILURE_COUNT.into(),
                        json!(f.ignored.to_string()),
                    );
                }
            }
            spec["hostname"] = json!(format!("{name}-{ix}"));
            add_index_variable(&mut spec);
            indexed_generate_name(name, ix)
        }
        None => pods_prefix(name),
    };
    let mut metadata = json!({
        "generateName": generate_name,
        "namespace": job.pointer("/metadata/namespace").cloned().unwrap_or(Value::Null),
        "labels": labels,
        "finalizers": finalizers,
        "ownerReferences": [new_controller_ref(job, "batch/v1", "Job")],
    });
    if !annotations.is_empty() {
        metadata["annotations"] = Value::Object(annotations);
    }
    json!({"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": spec})
}

/// `<job>-` (the name alone when the prefix would not be a valid name).
fn pods_prefix(job: &str) -> String {
    let prefix = format!("{job}-");
    if prefix.len() > MAX_GENERATED_NAME + 5 {
        job.to_string()
    } else {
        prefix
    }
}

/// `<job>-<index>-`, the job's part cut so that the whole fits a generated name.
fn indexed_generate_name(job: &str, index: i64) -> String {
    let suffix = format!("-{index}-");
    let prefix = format!("{job}{suffix}");
    if prefix.len() <= MAX_GENERATED_NAME {
        return prefix;
    }
    let mut keep = MAX_GENERATED_NAME.saturating_sub(suffix.len());
    while !job.is_char_boundary(keep) {
        keep -= 1;
    }
    format!("{}{suffix}", &job[..keep])
}

/// `JOB_COMPLETION_INDEX` from the pod's index label, in every container and init container
/// that does not set it already.
fn add_index_variable(spec: &mut Value) {
    for key in ["initContainers", "containers"] {
        let Some(containers) = spec.get_mut(key).and_then(Value::as_array_mut) else {
            continue;
        };
        for container in containers {
            let Some(c) = container.as_object_mut() else {
                continue;
            };
            let env = c.entry("env").or_insert_with(|| json!([]));
            let Some(env) = env.as_array_mut() else {
                continue;
            };
            if env.iter().any(|e| e["name"] == "JOB_COMPLETION_INDEX") {
                continue;
            }
            env.push(
                json!({"name": "JOB_COMPLETION_INDEX", "valueFrom": {"fieldRef": {
                "fieldPath": format!("metadata.labels['{COMPLETION_INDEX}']")}}}),
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn surplus_pods_are_deleted_least_advanced_first() {
        let pod = |name: &str, node: &str, phase: &str, ready: bool, created: &str| {
            json!({"metadata": {"name": name, "creationTimestamp": created},
                   "spec": {"nodeName": node},
                   "status": {"phase": phase, "conditions": [{"type": "Ready",
                      "status": if ready {"True"} else {"False"},
                      "lastTransitionTime": created}]}})
        };
        let mut pods = [
            pod(
                "running-ready-old",
                "n1",
                "Running",
                true,
                "2024-01-01T00:00:00Z",
            ),
            pod(
                "running-ready-new",
                "n1",
                "Running",
                true,
                "2024-01-01T00:05:00Z",
            ),
            pod("running", "n1", "Running", false, "2024-01-01T00:00:00Z"),
            pod("pending", "n1", "Pending", false, "2024-01-01T00:00:00Z"),
            pod("unbound", "", "Pending", false, "2024-01-01T00:00:00Z"),
        ];
        pods.sort_by(deletion_order);
        let names: Vec<&str> = pods.iter().map(name).collect();
        assert_eq!(
            names,
            [
                "unbound",
                "pending",
                "running",
                "running-ready-new",
                "running-ready-old"
            ]
        );
    }

    #[test]
    fn an_indexed_pod_carries_its_index() {
        let job = json!({"metadata": {"name": "work", "namespace": "ns", "uid": "u1"},
            "spec": {"template": {"metadata": {"labels": {"app": "w"}},
                "spec": {"containers": [{"name": "c", "image": "busybox"}]}}}});
        let pod = new_pod(
            &job,
            Some(3),
            Some(IndexFailures {
                counted: 1,
                ignored: 0,
            }),
        );
        assert_eq!(pod["metadata"]["generateName"], "work-3-");
        assert_eq!(pod["metadata"]["labels"][COMPLETION_INDEX], "3");
        assert_eq!(pod["metadata"]["annotations"][COMPLETION_INDEX], "3");
        assert_eq!(pod["metadata"]["annotations"][INDEX_FAILURE_COUNT], "1");
        assert!(pod["metadata"]["annotations"]
            .get(INDEX_IGNORED_FAILURE_COUNT)
            .is_none());
        assert_eq!(pod["spec"]["hostname"], "work-3");
        assert_eq!(
            pod["spec"]["containers"][0]["env"][0]["valueFrom"]["fieldRef"]["fieldPath"],
            "metadata.labels['batch.kubernetes.io/job-completion-index']"
        );
        assert_eq!(pod["metadata"]["finalizers"], json!([TRACKING_FINALIZER]));
        assert_eq!(pod["metadata"]["ownerReferences"][0]["uid"], "u1");
        let plain = new_pod(&job, None, None);
        assert_eq!(plain["metadata"]["generateName"], "work-");
        assert!(plain["metadata"].get("annotations").is_none());
        let long = "x".repeat(60);
        assert_eq!(
            indexed_generate_name(&long, 12),
            format!("{}-12-", "x".repeat(54))
        );
    }

    #[test]
    fn finish_times() {
        let ended = json!({"status": {"containerStatuses": [
            {"state": {"terminated": {"finishedAt": "2024-01-01T00:00:05Z"}}},
            {"state": {"terminated": {"finishedAt": "2024-01-01T00:00:09Z"}}}]}});
        assert_eq!(
            finish_time(&ended),
            parse_time("2024-01-01T00:00:09Z").unwrap()
        );
        let deleted = json!({"metadata": {"deletionTimestamp": "2024-01-01T00:01:00Z",
            "deletionGracePeriodSeconds": 30, "creationTimestamp": "2024-01-01T00:00:00Z"},
            "status": {"containerStatuses": [{"state": {"running": {}}}]}});
        assert_eq!(
            finish_time(&deleted),
            parse_time("2024-01-01T00:00:30Z").unwrap()
        );
    }
}
