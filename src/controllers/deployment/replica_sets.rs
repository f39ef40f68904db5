//! A Deployment's ReplicaSets as its controller reads them: which one is new (its template is
//! the Deployment's), the orders upstream sorts them in, revisions and the annotations that
//! carry them (`deployment.kubernetes.io/revision`, `revision-history`, `desired-replicas`,
//! `max-replicas`), and the size of the new ReplicaSet during a rolling update.

use std::cmp::Ordering;

use chrono::{DateTime, Utc};
use serde_json::{json, Map, Value};

use super::Deployment;
use crate::controllers::objects;
use crate::controllers::template;

pub const REVISION: &str = "deployment.kubernetes.io/revision";
pub const REVISION_HISTORY: &str = "deployment.kubernetes.io/revision-history";
pub const DESIRED_REPLICAS: &str = "deployment.kubernetes.io/desired-replicas";
pub const MAX_REPLICAS: &str = "deployment.kubernetes.io/max-replicas";
/// The annotation apps/v1beta1's rollback subresource set (kept out of copies, as upstream).
const ROLLBACK_TO: &str = "deprecated.deployment.rollback.to";
const LAST_APPLIED: &str = "kubectl.kubernetes.io/last-applied-configuration";
/// Longest `revision-history` kept (about 100 revisions).
const MAX_REVISION_HISTORY_CHARS: usize = 2000;

/// Annotations of a Deployment that are not copied to its ReplicaSets.
fn skip_copy(key: &str) -> bool {
    matches!(
        key,
        LAST_APPLIED | REVISION | REVISION_HISTORY | DESIRED_REPLICAS | MAX_REPLICAS | ROLLBACK_TO
    )
}

/// One ReplicaSet: its value and what the controller reads from it.
#[derive(Debug, Clone)]
pub struct Rs {
    pub value: Value,
    pub name: String,
    pub uid: String,
    /// `spec.replicas`.
    pub replicas: i64,
    /// `status.replicas`: its active pods, as its controller last counted them.
    pub status_replicas: i64,
    pub ready: i64,
    pub available: i64,
    pub generation: i64,
    pub observed_generation: i64,
    pub created: Option<DateTime<Utc>>,
    pub deleting: bool,
}

impl Rs {
    pub fn of(value: Value) -> Rs {
        let int = |pointer: &str| value.pointer(pointer).and_then(Value::as_i64).unwrap_or(0);
        Rs {
            name: objects::name(&value).to_string(),
            uid: objects::uid(&value).to_string(),
            replicas: value
                .pointer("/spec/replicas")
                .and_then(Value::as_i64)
                .unwrap_or(1),
            status_replicas: int("/status/replicas"),
            ready: int("/status/readyReplicas"),
            available: int("/status/availableReplicas"),
            generation: int("/metadata/generation"),
            observed_generation: int("/status/observedGeneration"),
            created: value
                .pointer("/metadata/creationTimestamp")
                .and_then(Value::as_str)
                .and_then(objects::parse_time),
            deleting: objects::is_deleting(&value),
            value,
        }
    }

    pub fn annotation(&self, key: &str) -> Option<&str> {
        annotation(&self.value, key)
    }

    pub fn template(&self) -> &Value {
        self.value.pointer("/spec/template").unwrap_or(&Value::Null)
    }

    pub fn resource_version(&self) -> &str {
        self.value
            .pointer("/metadata/resourceVersion")
            .and_then(Value::as_str)
            .unwrap_or("")
    }

    /// Its available replicas, counted at most up to its size: while it scales down its
    /// status may still count pods it is deleting. Used wherever availability permits
    /// deleting more pods, so a status that lags never allows more than the Deployment's
    /// `maxUnavailable`.
    pub fn available_within_size(&self) -> i64 {
        self.available.min(self.replicas)
    }

    /// The pods it may have: its size, or more while its controller has not yet seen the
    /// deletions of a scale-down. Used where pods are added, so a scale-down the
    /// ReplicaSet controller has not finished never lets the total exceed `maxSurge`.
    pub fn pods_counted(&self) -> i64 {
        self.replicas.max(self.status_replicas)
    }

    /// `deployment.kubernetes.io/revision` (0 when absent; `None` when not a number).
    pub fn revision(&self) -> Option<i64> {
        revision_of(&self.value)
    }
}

pub fn annotation<'a>(object: &'a Value, key: &str) -> Option<&'a str> {
    object
        .pointer("/metadata/annotations")
        .and_then(|a| a.get(key))
        .and_then(Value::as_str)
}

/// The revision annotation of an object: 0 when absent, `None` when not a number.
pub fn revision_of(object: &Value) -> Option<i64> {
    match annotation(object, REVISION) {
        None => Some(0),
        Some(text) => text.parse().ok(),
    }
}

fn annotations_mut(object: &mut Value) -> &mut Map<String, Value> {
    if !object["metadata"].is_object() {
        object["metadata"] = json!({});
    }
    let metadata = &mut object["metadata"];
    if !metadata["annotations"].is_object() {
        metadata["annotations"] = json!({});
    }
    metadata["annotations"]
        .as_object_mut()
        .expect("made an object above")
}

/// Upstream's `ReplicaSetsByCreationTimestamp`: oldest first, then by name.
pub fn by_creation(a: &Rs, b: &Rs) -> Ordering {
    match (a.created, b.created) {
        (x, y) if x == y => a.name.cmp(&b.name),
        (Some(x), Some(y)) => x.cmp(&y),
        // A missing time is the zero time, before every other.
        (None, _) => Ordering::Less,
        (_, None) => Ordering::Greater,
    }
}

/// Largest first; among equal sizes the older first (`ReplicaSetsBySizeOlder`).
pub fn by_size_older(a: &Rs, b: &Rs) -> Ordering {
    b.replicas.cmp(&a.replicas).then_with(|| by_creation(a, b))
}

/// Largest first; among equal sizes the newer first (`ReplicaSetsBySizeNewer`).
pub fn by_size_newer(a: &Rs, b: &Rs) -> Ordering {
    b.replicas.cmp(&a.replicas).then_with(|| by_creation(b, a))
}

/// Lowest revision first; equal or unreadable revisions by creation (`ReplicaSetsByRevision`).
pub fn by_revision(a: &Rs, b: &Rs) -> Ordering {
    match (a.revision(), b.revision()) {
        (Some(x), Some(y)) if x != y => x.cmp(&y),
        _ => by_creation(a, b),
    }
}

/// The index in `list` of the Deployment's new ReplicaSet: the oldest whose template is the
/// Deployment's, ignoring the hash label (`FindNewReplicaSet`).
pub fn find_new(d_template: &Value, list: &[Rs]) -> Option<usize> {
    let mut matching: Vec<usize> = (0..list.len())
        .filter(|&i| template::equal_ignoring_hash(list[i].template(), d_template))
        .collect();
    matching.sort_by(|&a, &b| by_creation(&list[a], &list[b]));
    matching.first().copied()
}

/// The highest revision among `list` (`MaxRevision`; unreadable ones skipped).
pub fn max_revision<'a>(list: impl IntoIterator<Item = &'a Rs>) -> i64 {
    list.into_iter()
        .filter_map(Rs::revision)
        .max()
        .unwrap_or(0)
        .max(0)
}

/// Sets the new ReplicaSet's annotations (`SetNewReplicaSetAnnotations`): the Deployment's
/// own annotations (but not the revision bookkeeping), `revision` raised to `new_revision`
/// (remembering the revision it had in `revision-history`: it is being rolled back to), and,
/// for a ReplicaSet about to be created, `desired-replicas` and `max-replicas`. Whether
/// anything changed.
pub fn set_new_rs_annotations(
    d: &Deployment,
    rs: &mut Value,
    new_revision: i64,
    exists: bool,
) -> bool {
    let mut changed = copy_deployment_annotations(&d.value, rs);
    let old_text = annotation(rs, REVISION).map(str::to_string);
    let old = match &old_text {
        None => 0,
        Some(text) => match text.parse::<i64>() {
            Ok(v) => v,
            // Upstream gives up on a ReplicaSet whose revision is not a number.
            Err(_) => return false,
        },
    };
    let annotations = annotations_mut(rs);
    if old < new_revision {
        annotations.insert(REVISION.into(), json!(new_revision.to_string()));
        changed = true;
        if let Some(old_text) = old_text {
            let history = annotations
                .get(REVISION_HISTORY)
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_string();
            let history = append_history(&history, &old_text);
            annotations.insert(REVISION_HISTORY.into(), json!(history));
        }
    }
    if !exists && set_replicas_annotations(rs, d.spec.replicas, d.spec.replicas + d.max_surge()) {
        changed = true;
    }
    changed
}

/// `history` with `revision` appended, dropping the oldest entries to stay within
/// `MAX_REVISION_HISTORY_CHARS`.
fn append_history(history: &str, revision: &str) -> String {
    if history.is_empty() {
        return revision.to_string();
    }
    let mut entries: Vec<&str> = history.split(',').collect();
    entries.push(revision);
    let mut total = history.len() + 1 + revision.len();
    let mut start = 0;
    while total > MAX_REVISION_HISTORY_CHARS && start < entries.len() - 1 {
        total -= entries[start].len() + 1;
        start += 1;
    }
    entries[start..].join(",")
}

/// Copies the Deployment's annotations onto the ReplicaSet (`copyDeploymentAnnotationsToReplicaSet`).
fn copy_deployment_annotations(d: &Value, rs: &mut Value) -> bool {
    let Some(source) = d
        .pointer("/metadata/annotations")
        .and_then(Value::as_object)
    else {
        return false;
    };
    let mut changed = false;
    let target = annotations_mut(rs);
    for (k, v) in source {
        if skip_copy(k) || target.get(k) == Some(v) {
            continue;
        }
        target.insert(k.clone(), v.clone());
        changed = true;
    }
    changed
}

/// Sets `desired-replicas` and `max-replicas`; whether they changed.
pub fn set_replicas_annotations(rs: &mut Value, desired: i64, max: i64) -> bool {
    let annotations = annotations_mut(rs);
    let mut changed = false;
    for (key, value) in [(DESIRED_REPLICAS, desired), (MAX_REPLICAS, max)] {
        let text = json!(value.to_string());
        if annotations.get(key) != Some(&text) {
            annotations.insert(key.into(), text);
            changed = true;
        }
    }
    changed
}

/// Whether `set_replicas_annotations` would change anything.
pub fn replicas_annotations_need_update(rs: &Rs, desired: i64, max: i64) -> bool {
    rs.annotation(DESIRED_REPLICAS) != Some(desired.to_string().as_str())
        || rs.annotation(MAX_REPLICAS) != Some(max.to_string().as_str())
}

/// Ready ReplicaSets with a size (`FilterActiveReplicaSets`).
pub fn is_active(rs: &Rs) -> bool {
    rs.replicas > 0
}

/// The size of the new ReplicaSet during a rollout (`NewRSNewReplicas`): a rolling update
/// adds up to `maxSurge` pods over `spec.replicas` across every ReplicaSet; Recreate goes to
/// `spec.replicas` at once. `all` includes `new`.
pub fn new_rs_new_replicas(d: &Deployment, all: &[&Rs], new: &Rs) -> i64 {
    if !d.is_rolling() {
        return d.spec.replicas;
    }
    let current: i64 = all.iter().map(|rs| rs.pods_counted()).sum();
    let max_total = d.spec.replicas + d.max_surge();
    if current >= max_total {
        return new.replicas;
    }
    let scale_up = (max_total - current).min(d.spec.replicas - new.replicas);
    new.replicas + scale_up.max(0)
}

/// How much of `to_add` (positive or negative) goes to `rs` when a Deployment is resized in
/// the middle of a rollout (`GetReplicaSetProportion`).
pub fn proportion(rs: &Rs, d: &Deployment, to_add: i64, added: i64) -> i64 {
    if rs.replicas == 0 || to_add == 0 || to_add == added {
        return 0;
    }
    let fraction = fraction(rs, d);
    let allowed = to_add - added;
    if to_add > 0 {
        fraction.min(allowed)
    } else {
        fraction.max(allowed)
    }
}

/// `getReplicaSetFraction`: the ReplicaSet's share of the new size, against the size it was
/// annotated with.
fn fraction(rs: &Rs, d: &Deployment) -> i64 {
    if d.spec.replicas == 0 {
        return -rs.replicas;
    }
    let deployment_replicas = d.spec.replicas + d.max_surge();
    let annotated = rs
        .annotation(MAX_REPLICAS)
        .and_then(|v| v.parse::<i64>().ok())
        .filter(|v| *v != 0)
        .unwrap_or(d.status.replicas);
    if annotated == 0 {
        return 0;
    }
    let size = (rs.replicas * deployment_replicas) as f64 / annotated as f64;
    size.round() as i64 - rs.replicas
}

/// Upstream's `IsSaturated`: the ReplicaSet has the Deployment's size, was made for it, and
/// all its pods are available.
pub fn is_saturated(d: &Deployment, rs: &Rs) -> bool {
    let desired = rs
        .annotation(DESIRED_REPLICAS)
        .and_then(|v| v.parse::<i64>().ok());
    rs.replicas == d.spec.replicas
        && desired == Some(d.spec.replicas)
        && rs.available == d.spec.replicas
}

#[cfg(test)]
mod tests;
