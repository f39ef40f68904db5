//! `persistentVolumeClaimRetentionPolicy`: which owner references a pod's claims carry so that
//! the garbage collector deletes them at the right time, as upstream's `isClaimOwnerUpToDate`
//! and `updateClaimOwnerRefForSetAndPod` decide.
//!
//! | whenScaled | whenDeleted | a claim of a pod in range | of a pod scaled away |
//! |------------|-------------|---------------------------|----------------------|
//! | Retain     | Retain      | no reference              | no reference         |
//! | Retain     | Delete      | the set                   | the set              |
//! | Delete     | Retain      | no reference              | the pod              |
//! | Delete     | Delete      | the set                   | the pod              |
//!
//! The references are controller references. A claim that refers to an earlier set or pod of
//! the same name (a different uid) is left alone: the collector is about to delete it, and a
//! new pod waits for that rather than reuse it ([`is_stale_for_new_pod`]). A claim another
//! controller manages is left alone too, beyond removing this set's and pod's references.

use serde_json::Value;

use crate::controllers::objects::{self, OwnerRef};

/// `Retain` or `Delete`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Policy {
    Retain,
    Delete,
}

impl Policy {
    /// An unknown value is treated as `Retain`, as upstream does.
    pub fn parse(value: Option<&Value>) -> Policy {
        match value.and_then(Value::as_str) {
            Some("Delete") => Policy::Delete,
            _ => Policy::Retain,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Retention {
    pub when_deleted: Policy,
    pub when_scaled: Policy,
}

impl Retention {
    pub fn of(set: &Value) -> Retention {
        let policy = set.pointer("/spec/persistentVolumeClaimRetentionPolicy");
        Retention {
            when_deleted: Policy::parse(policy.and_then(|p| p.get("whenDeleted"))),
            when_scaled: Policy::parse(policy.and_then(|p| p.get("whenScaled"))),
        }
    }

    fn retains_all(self) -> bool {
        self.when_deleted == Policy::Retain && self.when_scaled == Policy::Retain
    }
}

/// An owner a claim may refer to: the set or one of its pods.
#[derive(Debug, Clone, Copy)]
pub struct Owner<'a> {
    pub api_version: &'a str,
    pub kind: &'a str,
    pub name: &'a str,
    /// Empty for a pod not created yet.
    pub uid: &'a str,
}

impl Owner<'_> {
    /// Whether `reference` names this owner by kind and name (whatever its uid).
    fn named_by(&self, reference: &OwnerRef) -> bool {
        reference.api_version == self.api_version
            && reference.kind == self.kind
            && reference.name == self.name
    }
}

fn has_reference(claim: &[OwnerRef], owner: &Owner<'_>) -> bool {
    claim.iter().any(|r| r.uid == owner.uid)
}

/// A reference to an earlier object of the owner's kind and name (upstream's
/// `hasStaleOwnerRef`: the first reference naming it decides).
fn has_stale_reference(claim: &[OwnerRef], owner: &Owner<'_>) -> bool {
    claim
        .iter()
        .find(|r| owner.named_by(r))
        .is_some_and(|r| r.uid != owner.uid)
}

/// Another controller manages the claim, or an earlier set or pod of these names does.
fn has_unexpected_controller(
    claim: &[OwnerRef],
    retention: Retention,
    set: &Owner<'_>,
    pod: &Owner<'_>,
) -> bool {
    if retention.retains_all() {
        return false;
    }
    claim.iter().any(|r| {
        if set.named_by(r) {
            r.uid != set.uid
        } else if pod.named_by(r) {
            r.uid != pod.uid
        } else {
            r.controller
        }
    })
}

/// Whether a controller other than this set or pod manages the claim (an event tells the user
/// the policy is not applied to it).
pub fn conflicting_controller(
    claim: &Value,
    retention: Retention,
    set: &Owner<'_>,
    pod: &Owner<'_>,
) -> bool {
    has_unexpected_controller(&objects::owner_refs(claim), retention, set, pod)
}

/// Whether the claim's references follow the policy (see the module comment);
/// `scaled_down`: the pod's ordinal is outside the set's range.
pub fn up_to_date(
    claim: &Value,
    retention: Retention,
    set: &Owner<'_>,
    pod: &Owner<'_>,
    scaled_down: bool,
) -> bool {
    let refs = objects::owner_refs(claim);
    if has_stale_reference(&refs, set) || has_stale_reference(&refs, pod) {
        return true;
    }
    if has_unexpected_controller(&refs, retention, set, pod) {
        return !(has_reference(&refs, set) || has_reference(&refs, pod));
    }
    let not_controller = refs
        .iter()
        .any(|r| (r.uid == set.uid || r.uid == pod.uid) && !r.controller);
    if not_controller {
        return false;
    }
    let (want_set, want_pod) = wanted(retention, scaled_down);
    has_reference(&refs, set) == want_set && has_reference(&refs, pod) == want_pod
}

/// (a reference to the set, a reference to the pod) the policy wants.
fn wanted(retention: Retention, scaled_down: bool) -> (bool, bool) {
    let set = retention.when_deleted == Policy::Delete
        && !(retention.when_scaled == Policy::Delete && scaled_down);
    let pod = retention.when_scaled == Policy::Delete && scaled_down;
    (set, pod)
}

/// The claim's `ownerReferences` as the policy wants them: this set's and pod's references
/// replaced by controller references where wanted, every other reference kept. `set` and
/// `pod` are the objects' values (for their references).
pub fn updated_references(
    claim: &Value,
    retention: Retention,
    set: (&Owner<'_>, &Value),
    pod: (&Owner<'_>, &Value),
    scaled_down: bool,
) -> Vec<Value> {
    let refs = objects::owner_refs(claim);
    let unexpected = has_unexpected_controller(&refs, retention, set.0, pod.0);
    let mut kept: Vec<Value> = claim
        .pointer("/metadata/ownerReferences")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter(|raw| {
            let field = |f: &str| raw.get(f).and_then(Value::as_str).unwrap_or("");
            let names = |o: &Owner<'_>| {
                field("apiVersion") == o.api_version
                    && field("kind") == o.kind
                    && field("name") == o.name
            };
            !(names(set.0) || names(pod.0))
        })
        .cloned()
        .collect();
    if unexpected {
        return kept;
    }
    let (want_set, want_pod) = wanted(retention, scaled_down);
    if want_set {
        kept.push(objects::new_controller_ref(
            set.1,
            set.0.api_version,
            set.0.kind,
        ));
    }
    if want_pod {
        kept.push(objects::new_controller_ref(
            pod.1,
            pod.0.api_version,
            pod.0.kind,
        ));
    }
    kept
}

/// Whether an existing claim would make a new pod of this name wait: the policy deletes claims
/// of scaled-away pods and this one still refers to an earlier pod (upstream's
/// `PodClaimIsStale`; the collector deletes it shortly).
pub fn is_stale_for_new_pod(claim: &Value, retention: Retention, pod_name: &str) -> bool {
    if retention.when_scaled == Policy::Retain {
        return false;
    }
    let pod = Owner {
        api_version: "v1",
        kind: "Pod",
        name: pod_name,
        uid: "",
    };
    has_stale_reference(&objects::owner_refs(claim), &pod)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const SET: Owner<'static> = Owner {
        api_version: "apps/v1",
        kind: "StatefulSet",
        name: "web",
        uid: "u-set",
    };
    const POD: Owner<'static> = Owner {
        api_version: "v1",
        kind: "Pod",
        name: "web-1",
        uid: "u-pod",
    };

    fn values() -> (Value, Value) {
        (
            json!({"metadata": {"name": "web", "uid": "u-set"}}),
            json!({"metadata": {"name": "web-1", "uid": "u-pod"}}),
        )
    }

    fn claim(refs: Value) -> Value {
        json!({"metadata": {"name": "data-web-1", "ownerReferences": refs}})
    }

    fn retention(when_scaled: Policy, when_deleted: Policy) -> Retention {
        Retention {
            when_deleted,
            when_scaled,
        }
    }

    #[test]
    fn references_follow_the_policy_table() {
        use Policy::{Delete, Retain};
        let (set_v, pod_v) = values();
        // (whenScaled, whenDeleted, scaled down) -> (set ref, pod ref)
        let table = [
            (Retain, Retain, false, (false, false)),
            (Retain, Retain, true, (false, false)),
            (Retain, Delete, false, (true, false)),
            (Retain, Delete, true, (true, false)),
            (Delete, Retain, false, (false, false)),
            (Delete, Retain, true, (false, true)),
            (Delete, Delete, false, (true, false)),
            (Delete, Delete, true, (false, true)),
        ];
        for (scaled, deleted, down, (want_set, want_pod)) in table {
            let r = retention(scaled, deleted);
            let bare = claim(
                json!([{"apiVersion": "v1", "kind": "ConfigMap", "name": "x", "uid": "u-x"}]),
            );
            let refs = updated_references(&bare, r, (&SET, &set_v), (&POD, &pod_v), down);
            let fixed = claim(Value::Array(refs.clone()));
            let owners = objects::owner_refs(&fixed);
            let case = format!("{scaled:?}/{deleted:?} down={down}");
            assert_eq!(has_reference(&owners, &SET), want_set, "{case}");
            assert_eq!(has_reference(&owners, &POD), want_pod, "{case}");
            assert!(owners.iter().any(|o| o.uid == "u-x"), "{case}: others kept");
            assert!(
                owners
                    .iter()
                    .filter(|o| o.uid != "u-x")
                    .all(|o| o.controller),
                "{case}: controller references"
            );
            assert!(up_to_date(&fixed, r, &SET, &POD, down), "{case}");
            let expected_bare = !want_set && !want_pod;
            assert_eq!(
                up_to_date(&bare, r, &SET, &POD, down),
                expected_bare,
                "{case}"
            );
        }
    }

    #[test]
    fn earlier_owners_and_other_controllers_are_left_alone() {
        let r = retention(Policy::Delete, Policy::Delete);
        // A reference to an earlier pod web-1: stale, up to date (hands off), and a new
        // pod waits for the collector.
        let stale = claim(json!([{"apiVersion": "v1", "kind": "Pod", "name": "web-1",
            "uid": "u-old", "controller": true}]));
        assert!(up_to_date(&stale, r, &SET, &POD, false));
        assert!(is_stale_for_new_pod(&stale, r, "web-1"));
        assert!(!is_stale_for_new_pod(
            &stale,
            retention(Policy::Retain, Policy::Delete),
            "web-1"
        ));
        assert!(!is_stale_for_new_pod(&claim(json!([])), r, "web-1"));
        // Another controller: nothing added on top of it.
        let (set_v, pod_v) = values();
        let other = claim(json!([{"apiVersion": "v1", "kind": "Thing", "name": "t",
            "uid": "u-t", "controller": true}]));
        assert!(up_to_date(&other, r, &SET, &POD, false));
        let refs = updated_references(&other, r, (&SET, &set_v), (&POD, &pod_v), false);
        assert_eq!(refs.len(), 1);
        // A plain (not controller) reference to the set is made a controller reference.
        let plain = claim(json!([{"apiVersion": "apps/v1", "kind": "StatefulSet",
            "name": "web", "uid": "u-set"}]));
        assert!(!up_to_date(&plain, r, &SET, &POD, false));
    }
}
