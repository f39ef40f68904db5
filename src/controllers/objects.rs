//! Reading and building the parts of objects that controllers share: label selectors in their
//! object form (`matchLabels`/`matchExpressions`), owner references and the controller
//! reference, pod phases and conditions, and API times.

use chrono::{DateTime, Utc};
use serde_json::{json, Map, Value};

use crate::kube::labels::Labels;
use crate::kube::selectors::{LabelRequirement, LabelSelector};

/// A `metav1.LabelSelector` object as a selector. `None` (absent or null) selects nothing,
/// as for Services and PodDisruptionBudgets; an empty object selects everything.
pub fn label_selector(selector: Option<&Value>) -> Result<Option<LabelSelector>, String> {
    LabelSelector::from_object(selector).map_err(|e| e.0)
}

/// A map of string labels (`spec.selector` of a Service or ReplicationController) as a
/// selector; `None` when absent. An empty map selects nothing here, as for Services.
pub fn map_selector(selector: Option<&Value>) -> Option<LabelSelector> {
    let map = selector?.as_object()?;
    if map.is_empty() {
        return None;
    }
    Some(LabelSelector {
        requirements: map
            .iter()
            .filter_map(|(k, v)| {
                v.as_str()
                    .map(|v| LabelRequirement::Equals(k.clone(), v.to_string()))
            })
            .collect(),
    })
}

/// The labels of an object's value (`metadata.labels`).
pub fn labels_of(object: &Value) -> Labels {
    object
        .pointer("/metadata/labels")
        .and_then(Value::as_object)
        .map(|m| {
            m.iter()
                .filter_map(|(k, v)| v.as_str().map(|v| (k.clone(), v.to_string())))
                .collect()
        })
        .unwrap_or_else(|| std::iter::empty::<(String, String)>().collect())
}

/// One entry of `metadata.ownerReferences`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OwnerRef {
    pub api_version: String,
    pub kind: String,
    pub name: String,
    pub uid: String,
    pub controller: bool,
    pub block_owner_deletion: bool,
}

impl OwnerRef {
    fn from_value(v: &Value) -> Option<OwnerRef> {
        let text = |f: &str| v.get(f).and_then(Value::as_str).map(str::to_string);
        Some(OwnerRef {
            api_version: text("apiVersion")?,
            kind: text("kind")?,
            name: text("name")?,
            uid: text("uid")?,
            controller: v.get("controller").and_then(Value::as_bool) == Some(true),
            block_owner_deletion: v.get("blockOwnerDeletion").and_then(Value::as_bool)
                == Some(true),
        })
    }
}

/// Every owner reference of `object`.
pub fn owner_refs(object: &Value) -> Vec<OwnerRef> {
    object
        .pointer("/metadata/ownerReferences")
        .and_then(Value::as_array)
        .map(|refs| refs.iter().filter_map(OwnerRef::from_value).collect())
        .unwrap_or_default()
}

/// The owner reference with `controller: true`, if any.
pub fn controller_ref(object: &Value) -> Option<OwnerRef> {
    owner_refs(object).into_iter().find(|r| r.controller)
}

/// The controller reference a controller puts on what it creates: `controller` and
/// `blockOwnerDeletion` true (so foreground deletion of the owner waits for it).
pub fn new_controller_ref(owner: &Value, api_version: &str, kind: &str) -> Value {
    json!({
        "apiVersion": api_version,
        "kind": kind,
        "name": owner.pointer("/metadata/name").cloned().unwrap_or(Value::Null),
        "uid": owner.pointer("/metadata/uid").cloned().unwrap_or(Value::Null),
        "controller": true,
        "blockOwnerDeletion": true,
    })
}

/// `metadata.uid`.
pub fn uid(object: &Value) -> &str {
    object
        .pointer("/metadata/uid")
        .and_then(Value::as_str)
        .unwrap_or("")
}

/// `metadata.name`.
pub fn name(object: &Value) -> &str {
    object
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or("")
}

/// `metadata.finalizers`.
pub fn finalizers_of(object: &Value) -> Vec<String> {
    object
        .pointer("/metadata/finalizers")
        .and_then(Value::as_array)
        .map(|f| {
            f.iter()
                .filter_map(|v| v.as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default()
}

/// Whether `metadata.deletionTimestamp` is set.
pub fn is_deleting(object: &Value) -> bool {
    object
        .pointer("/metadata/deletionTimestamp")
        .is_some_and(|v| !v.is_null())
}

/// A pod's `status.phase` (`Pending` when unset).
pub fn pod_phase(pod: &Value) -> &str {
    pod.pointer("/status/phase")
        .and_then(Value::as_str)
        .unwrap_or("Pending")
}

/// Succeeded or Failed: the pod's containers will not run again.
pub fn pod_is_terminal(pod: &Value) -> bool {
    matches!(pod_phase(pod), "Succeeded" | "Failed")
}

/// Counted by workload controllers: not terminal and not being deleted.
pub fn pod_is_active(pod: &Value) -> bool {
    !pod_is_terminal(pod) && !is_deleting(pod)
}

/// A condition of `status.conditions` by type.
pub fn condition<'a>(object: &'a Value, kind: &str) -> Option<&'a Map<String, Value>> {
    object
        .pointer("/status/conditions")
        .and_then(Value::as_array)?
        .iter()
        .filter_map(Value::as_object)
        .find(|c| c.get("type").and_then(Value::as_str) == Some(kind))
}

/// Whether the pod's `Ready` condition is `True`.
pub fn pod_is_ready(pod: &Value) -> bool {
    condition(pod, "Ready")
        .and_then(|c| c.get("status"))
        .and_then(Value::as_str)
        == Some("True")
}

/// Ready for at least `min_ready_seconds` at `now` (a Deployment's "available").
pub fn pod_is_available(pod: &Value, min_ready_seconds: i64, now: DateTime<Utc>) -> bool {
    if !pod_is_ready(pod) {
        return false;
    }
    if min_ready_seconds <= 0 {
        return true;
    }
    condition(pod, "Ready")
        .and_then(|c| c.get("lastTransitionTime"))
        .and_then(Value::as_str)
        .and_then(parse_time)
        .is_some_and(|since| (now - since).num_seconds() >= min_ready_seconds)
}

/// Parses a `metav1.Time` or `MicroTime`.
pub fn parse_time(text: &str) -> Option<DateTime<Utc>> {
    DateTime::parse_from_rfc3339(text)
        .ok()
        .map(|t| t.with_timezone(&Utc))
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
    fn selectors_in_object_form() {
        let s = label_selector(Some(&json!({
            "matchLabels": {"app": "web"},
            "matchExpressions": [
                {"key": "tier", "operator": "In", "values": ["a", "b"]},
                {"key": "canary", "operator": "DoesNotExist"},
            ],
        })))
        .unwrap()
        .unwrap();
        assert!(s.matches(&labels(&[("app", "web"), ("tier", "b")])));
        assert!(!s.matches(&labels(&[("app", "web"), ("tier", "c")])));
        assert!(!s.matches(&labels(&[("app", "web"), ("tier", "a"), ("canary", "1")])));
        // Empty selects everything; absent or null selects nothing.
        assert!(label_selector(Some(&json!({})))
            .unwrap()
            .unwrap()
            .matches(&labels(&[])));
        assert!(label_selector(None).unwrap().is_none());
        assert!(label_selector(Some(&Value::Null)).unwrap().is_none());
        assert!(label_selector(Some(&json!({"matchExpressions": [
            {"key": "k", "operator": "Sometimes"}]})))
        .is_err());
        assert!(map_selector(Some(&json!({}))).is_none());
    }

    #[test]
    fn controller_references() {
        let owner = json!({"metadata": {"name": "rs", "uid": "u-rs"}});
        let pod = json!({"metadata": {"ownerReferences": [
            {"apiVersion": "v1", "kind": "Node", "name": "n", "uid": "u-n"},
            new_controller_ref(&owner, "apps/v1", "ReplicaSet"),
        ]}});
        let c = controller_ref(&pod).unwrap();
        assert_eq!((c.kind.as_str(), c.uid.as_str()), ("ReplicaSet", "u-rs"));
        assert!(c.block_owner_deletion);
        assert_eq!(owner_refs(&pod).len(), 2);
    }

    #[test]
    fn pod_readiness_and_availability() {
        let now = Utc::now();
        let since = (now - chrono::Duration::seconds(30)).to_rfc3339();
        let pod = json!({"status": {"phase": "Running", "conditions": [
            {"type": "Ready", "status": "True", "lastTransitionTime": since}]}});
        assert!(pod_is_ready(&pod) && pod_is_active(&pod));
        assert!(pod_is_available(&pod, 10, now));
        assert!(!pod_is_available(&pod, 60, now));
        let done = json!({"status": {"phase": "Succeeded"}});
        assert!(pod_is_terminal(&done) && !pod_is_active(&done));
        assert_eq!(pod_phase(&json!({})), "Pending");
    }
}
