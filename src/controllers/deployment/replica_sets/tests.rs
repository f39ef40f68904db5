//! The ReplicaSet arithmetic and bookkeeping of a Deployment, on values.

use serde_json::json;

use super::*;
use crate::kube::object::ObjectKey;
use crate::kube::store::stored_from_json;

fn deployment(replicas: i64, surge: Value, unavailable: Value) -> Deployment {
    let value = json!({
        "metadata": {"name": "web", "namespace": "ns", "uid": "d-uid", "resourceVersion": "1",
                     "generation": 1, "annotations": {"team": "a", REVISION: "4"}},
        "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": "web"}},
                 "strategy": {"type": "RollingUpdate",
                              "rollingUpdate": {"maxSurge": surge, "maxUnavailable": unavailable}},
                 "template": {"metadata": {"labels": {"app": "web"}},
                              "spec": {"containers": [{"name": "c", "image": "nginx"}]}}},
    });
    let stored = stored_from_json(
        ObjectKey::new("apps/deployments", "ns", "web"),
        value.to_string().as_bytes(),
    )
    .unwrap();
    Deployment::parse(std::sync::Arc::new(stored)).unwrap()
}

fn rs(
    name: &str,
    replicas: i64,
    status_replicas: i64,
    revision: Option<&str>,
    created: &str,
) -> Rs {
    let mut value = json!({
        "metadata": {"name": name, "uid": format!("uid-{name}"), "creationTimestamp": created,
                     "resourceVersion": "7", "annotations": {}},
        "spec": {"replicas": replicas, "template": {"metadata": {"labels": {"app": "web"}}}},
        "status": {"replicas": status_replicas, "availableReplicas": status_replicas},
    });
    if let Some(r) = revision {
        value["metadata"]["annotations"][REVISION] = json!(r);
    }
    Rs::of(value)
}

#[test]
fn the_new_replica_set_grows_within_the_surge() {
    // 4 replicas, surge 1: five pods at most across both.
    let d = deployment(4, json!(1), json!(0));
    let old = rs("old", 4, 4, Some("1"), "2025-01-01T00:00:00Z");
    let new = rs("new", 0, 0, None, "2025-01-01T00:01:00Z");
    assert_eq!(new_rs_new_replicas(&d, &[&old, &new], &new), 1);
    // The old one shrank to 3 in its spec but its controller still counts 4 pods: nothing
    // more may be added yet.
    let shrinking = rs("old", 3, 4, Some("1"), "2025-01-01T00:00:00Z");
    let one = rs("new", 1, 1, None, "2025-01-01T00:01:00Z");
    assert_eq!(new_rs_new_replicas(&d, &[&shrinking, &one], &one), 1);
    // Once it counts 3, one more.
    let shrunk = rs("old", 3, 3, Some("1"), "2025-01-01T00:00:00Z");
    assert_eq!(new_rs_new_replicas(&d, &[&shrunk, &one], &one), 2);
    // Never beyond the Deployment's replicas.
    let empty = rs("old", 0, 0, Some("1"), "2025-01-01T00:00:00Z");
    let three = rs("new", 3, 3, None, "2025-01-01T00:01:00Z");
    let wide = deployment(4, json!("100%"), json!(0));
    assert_eq!(new_rs_new_replicas(&wide, &[&empty, &three], &three), 4);
}

#[test]
fn bounds_of_a_deployment() {
    let d = deployment(10, json!("25%"), json!("25%"));
    assert_eq!((d.max_surge(), d.max_unavailable()), (3, 2));
    let zero = deployment(0, json!("25%"), json!("25%"));
    assert_eq!((zero.max_surge(), zero.max_unavailable()), (0, 0));
    let capped = deployment(2, json!(0), json!(5));
    assert_eq!(capped.max_unavailable(), 2);
}

#[test]
fn availability_and_pods_are_counted_on_the_safe_side() {
    let mut shrinking = rs("old", 2, 3, Some("1"), "2025-01-01T00:00:00Z");
    shrinking.available = 3;
    assert_eq!(shrinking.available_within_size(), 2);
    assert_eq!(shrinking.pods_counted(), 3);
}

#[test]
fn revisions_and_their_history() {
    let d = deployment(3, json!(1), json!(0));
    let list = [
        rs("a", 0, 0, Some("2"), "2025-01-01T00:00:00Z"),
        rs("b", 0, 0, Some("x"), "2025-01-01T00:00:00Z"),
        rs("c", 0, 0, None, "2025-01-01T00:00:00Z"),
    ];
    assert_eq!(max_revision(&list), 2);

    // A ReplicaSet rolled back to: revision 5, its old revision remembered.
    let mut value = rs("a", 0, 0, Some("2"), "2025-01-01T00:00:00Z").value;
    value["metadata"]["annotations"][REVISION_HISTORY] = json!("1");
    assert!(set_new_rs_annotations(&d, &mut value, 5, true));
    let annotations = &value["metadata"]["annotations"];
    assert_eq!(annotations[REVISION], "5");
    assert_eq!(annotations[REVISION_HISTORY], "1,2");
    // The Deployment's own annotations are copied, its revision is not.
    assert_eq!(annotations["team"], "a");
    // Existing ReplicaSets keep their replica annotations (the scaling step sets them).
    assert!(annotations.get(DESIRED_REPLICAS).is_none());
    // Nothing new: no change.
    assert!(!set_new_rs_annotations(&d, &mut value, 5, true));

    // A ReplicaSet about to be created gets its sizes.
    let mut fresh = json!({"metadata": {"name": "n"}});
    assert!(set_new_rs_annotations(&d, &mut fresh, 1, false));
    let annotations = &fresh["metadata"]["annotations"];
    assert_eq!(
        (
            annotations[DESIRED_REPLICAS].as_str(),
            annotations[MAX_REPLICAS].as_str()
        ),
        (Some("3"), Some("4"))
    );
    assert!(annotations.get(REVISION_HISTORY).is_none());
}

#[test]
fn a_long_history_drops_its_oldest_entries() {
    let history: Vec<String> = (1..=700).map(|i| i.to_string()).collect();
    let joined = history.join(",");
    let appended = append_history(&joined, "701");
    assert!(
        appended.len() <= MAX_REVISION_HISTORY_CHARS,
        "{}",
        appended.len()
    );
    assert!(appended.ends_with(",700,701"));
    assert!(!appended.starts_with("1,"));
}

#[test]
fn sort_orders() {
    let a = rs("a", 2, 2, Some("3"), "2025-01-01T00:00:00Z");
    let b = rs("b", 5, 5, Some("1"), "2025-01-01T00:01:00Z");
    let c = rs("c", 2, 2, Some("2"), "2025-01-01T00:02:00Z");
    let sorted = |order: fn(&Rs, &Rs) -> Ordering| {
        let mut v = [&a, &b, &c];
        v.sort_by(|x, y| order(x, y));
        v.iter()
            .map(|r| r.name.as_str())
            .collect::<Vec<_>>()
            .join("")
    };
    assert_eq!(sorted(by_creation), "abc");
    assert_eq!(sorted(by_size_older), "bac");
    assert_eq!(sorted(by_size_newer), "bca");
    assert_eq!(sorted(by_revision), "bca");
}

#[test]
fn the_new_replica_set_is_the_oldest_with_the_template() {
    let d = deployment(3, json!(1), json!(0));
    let mut newer = rs("newer", 0, 0, None, "2025-01-02T00:00:00Z");
    newer.value["spec"]["template"] = json!({"metadata": {"labels": {"app": "web", POD_HASH: "x"}},
        "spec": {"containers": [{"name": "c", "image": "nginx"}]}});
    let mut older = newer.clone();
    older.name = "older".into();
    older.created = objects::parse_time("2025-01-01T00:00:00Z");
    let other = rs("other", 0, 0, None, "2024-01-01T00:00:00Z");
    let list = [newer, other, older];
    assert_eq!(find_new(&d.spec.template, &list), Some(2));
    assert_eq!(find_new(&json!({"metadata": {}}), &list), None);
}

#[test]
fn resizing_mid_rollout_shares_in_proportion() {
    // 10 → 20 replicas while an old and a new ReplicaSet share 13 pods (10 + surge 3).
    let d = deployment(20, json!("25%"), json!("25%"));
    let mut old = rs("old", 8, 8, Some("1"), "2025-01-01T00:00:00Z");
    let mut new = rs("new", 5, 5, Some("2"), "2025-01-01T00:01:00Z");
    for r in [&mut old, &mut new] {
        set_replicas_annotations(&mut r.value, 10, 13);
        *r = Rs::of(r.value.clone());
    }
    // Allowed: 20 + 5 = 25, so 12 to add: 8·25/13 ≈ 15 and 5·25/13 ≈ 10.
    assert_eq!(proportion(&old, &d, 12, 0), 7);
    assert_eq!(proportion(&new, &d, 12, 7), 5);
    // Down to zero: everything goes.
    let none = deployment(0, json!("25%"), json!("25%"));
    assert_eq!(proportion(&old, &none, -13, 0), -8);
    assert!(!is_saturated(&d, &new));
}

const POD_HASH: &str = crate::controllers::template::POD_TEMPLATE_HASH;
