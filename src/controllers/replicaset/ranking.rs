//! Which surplus pods a ReplicaSet deletes first: kube-controller-manager's
//! `ActivePodsWithRanks` order, least valuable first:
//! 1. not yet bound to a node;
//! 2. phase Pending, then Unknown, then Running;
//! 3. not Ready;
//! 4. lower `controller.kubernetes.io/pod-deletion-cost`;
//! 5. more pods of the same owner family (the ReplicaSets of one Deployment) active on its node
//!    (its rank), so scale-down spreads what remains;
//! 6. Ready for less time (the newest Ready first; times compared on a logarithmic scale, so
//!    pods that became Ready within the same power-of-two age are alike, as upstream's
//!    `LogarithmicScaleDown` does);
//! 7. more container restarts (regular containers, then restartable init containers);
//! 8. created more recently (on the same logarithmic scale; no creation time first);
//! 9. and among pods alike in all of that, by uid (upstream: random, through the uid).
//!
//! Upstream sorts with a comparison that jumps from step 6 to the uid when two pods became
//! Ready at different times of the same age class; here every step is one part of a sort key
//! so the order is total (Rust's sort requires it), and such pods are told apart by restarts
//! and age class before the uid.

use chrono::{DateTime, Utc};
use serde_json::Value;

use crate::controllers::objects;

/// The annotation that tells a controller which of its pods costs least to delete.
pub const POD_DELETION_COST: &str = "controller.kubernetes.io/pod-deletion-cost";

/// What the order reads from a pod.
#[derive(Debug, Clone, PartialEq)]
pub struct PodFacts {
    pub name: String,
    pub uid: String,
    pub node_name: String,
    pub phase: String,
    pub ready: bool,
    /// When the Ready condition became True, for a Ready pod.
    pub ready_since: Option<DateTime<Utc>>,
    pub deletion_cost: i32,
    /// Highest restart count of a regular container, and of a restartable init container.
    pub restarts: (i64, i64),
    pub created: Option<DateTime<Utc>>,
}

impl PodFacts {
    pub fn of(pod: &Value) -> PodFacts {
        let text = |pointer: &str| {
            pod.pointer(pointer)
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_string()
        };
        let ready = objects::pod_is_ready(pod);
        let ready_since = if ready {
            objects::condition(pod, "Ready")
                .and_then(|c| c.get("lastTransitionTime"))
                .and_then(Value::as_str)
                .and_then(objects::parse_time)
        } else {
            None
        };
        let deletion_cost = pod
            .pointer("/metadata/annotations")
            .and_then(|a| a.get(POD_DELETION_COST))
            .and_then(Value::as_str)
            .and_then(|v| v.parse::<i32>().ok())
            .unwrap_or(0);
        PodFacts {
            name: text("/metadata/name"),
            uid: text("/metadata/uid"),
            node_name: text("/spec/nodeName"),
            phase: objects::pod_phase(pod).to_string(),
            ready,
            ready_since,
            deletion_cost,
            restarts: restarts(pod),
            created: pod
                .pointer("/metadata/creationTimestamp")
                .and_then(Value::as_str)
                .and_then(objects::parse_time),
        }
    }
}

fn restarts(pod: &Value) -> (i64, i64) {
    let max_restarts = |statuses: Option<&Value>, only: &dyn Fn(&str) -> bool| {
        statuses
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter(|s| only(s.get("name").and_then(Value::as_str).unwrap_or("")))
            .filter_map(|s| s.get("restartCount").and_then(Value::as_i64))
            .max()
            .unwrap_or(0)
    };
    let sidecars: Vec<&str> = pod
        .pointer("/spec/initContainers")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter(|c| c.get("restartPolicy").and_then(Value::as_str) == Some("Always"))
        .filter_map(|c| c.get("name").and_then(Value::as_str))
        .collect();
    (
        max_restarts(pod.pointer("/status/containerStatuses"), &|_| true),
        max_restarts(pod.pointer("/status/initContainerStatuses"), &|name| {
            sidecars.contains(&name)
        }),
    )
}

/// Sort key: smaller sorts first, so is deleted first.
type Key<'a> = (bool, u8, bool, i32, i64, i64, (i64, i64), i64, &'a str);

fn key<'a>(pod: &'a PodFacts, rank: usize, now: DateTime<Utc>) -> Key<'a> {
    let phase = match pod.phase.as_str() {
        "Unknown" => 1,
        "Running" => 2,
        _ => 0,
    };
    (
        !pod.node_name.is_empty(),
        phase,
        pod.ready,
        pod.deletion_cost,
        -(rank as i64),
        if pod.ready {
            age_class(pod.ready_since, now)
        } else {
            0
        },
        (-pod.restarts.0, -pod.restarts.1),
        age_class(pod.created, now),
        &pod.uid,
    )
}

/// `floor(log2(age in ns))` (upstream's `logarithmicRankDiff` scale): -1 for an age that is
/// not positive, and the lowest of all for an unknown time, which sorts first as upstream's
/// zero time does.
fn age_class(time: Option<DateTime<Utc>>, now: DateTime<Utc>) -> i64 {
    let Some(time) = time else {
        return i64::MIN;
    };
    match (now - time).num_nanoseconds() {
        Some(ns) if ns > 0 => (ns as f64).log2() as i64,
        Some(_) => -1,
        None => i64::MAX,
    }
}

/// The indexes of `pods` in deletion order (`ranks[i]`: active pods of the owner family on
/// pod i's node).
pub fn deletion_order(pods: &[PodFacts], ranks: &[usize], now: DateTime<Utc>) -> Vec<usize> {
    let mut order: Vec<usize> = (0..pods.len()).collect();
    order.sort_by_key(|&i| key(&pods[i], ranks.get(i).copied().unwrap_or(0), now));
    order
}

/// The `diff` pods to delete (upstream's `getPodsToDelete`): ranked by how many `related`
/// pods (node names of the active pods of every ReplicaSet with the same controller) share
/// each pod's node. All of them, unsorted, when all go.
pub fn pods_to_delete(
    pods: &[PodFacts],
    related_nodes: &[String],
    diff: usize,
    now: DateTime<Utc>,
) -> Vec<usize> {
    if diff >= pods.len() {
        return (0..pods.len()).collect();
    }
    let mut on_node: std::collections::HashMap<&str, usize> = std::collections::HashMap::new();
    for node in related_nodes {
        *on_node.entry(node.as_str()).or_default() += 1;
    }
    let ranks: Vec<usize> = pods
        .iter()
        .map(|p| on_node.get(p.node_name.as_str()).copied().unwrap_or(0))
        .collect();
    let mut order = deletion_order(pods, &ranks, now);
    order.truncate(diff);
    order
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn now() -> DateTime<Utc> {
        objects::parse_time("2025-01-01T12:00:00Z").unwrap()
    }

    fn ago(seconds: i64) -> String {
        (now() - chrono::Duration::seconds(seconds)).to_rfc3339()
    }

    /// A Running, Ready pod on n1, created and ready `age` seconds ago.
    fn pod(name: &str, age: i64) -> Value {
        json!({
            "metadata": {"name": name, "uid": format!("uid-{name}"), "creationTimestamp": ago(age)},
            "spec": {"nodeName": "n1"},
            "status": {"phase": "Running", "conditions": [
                {"type": "Ready", "status": "True", "lastTransitionTime": ago(age)}]},
        })
    }

    fn order(pods: &[Value], ranks: &[usize]) -> Vec<String> {
        let facts: Vec<PodFacts> = pods.iter().map(PodFacts::of).collect();
        deletion_order(&facts, ranks, now())
            .into_iter()
            .map(|i| facts[i].name.clone())
            .collect()
    }

    #[test]
    fn each_step_of_the_order_decides_when_the_earlier_ones_tie() {
        let mut unbound = pod("unbound", 1000);
        unbound["spec"] = json!({});
        let mut pending = pod("pending", 1000);
        pending["status"]["phase"] = json!("Pending");
        let mut unknown = pod("unknown", 1000);
        unknown["status"]["phase"] = json!("Unknown");
        let mut not_ready = pod("not-ready", 1000);
        not_ready["status"]["conditions"][0]["status"] = json!("False");
        let mut cheap = pod("cheap", 1000);
        cheap["metadata"]["annotations"] = json!({POD_DELETION_COST: "-5"});
        let mut costly = pod("costly", 1000);
        costly["metadata"]["annotations"] = json!({POD_DELETION_COST: "100"});
        let plain = pod("plain", 1000);
        let pods = [
            costly.clone(),
            plain.clone(),
            cheap.clone(),
            not_ready.clone(),
            unknown.clone(),
            pending.clone(),
            unbound.clone(),
        ];
        assert_eq!(
            order(&pods, &[]),
            [
                "unbound",
                "pending",
                "unknown",
                "not-ready",
                "cheap",
                "plain",
                "costly"
            ]
        );
    }

    #[test]
    fn doubled_up_then_newest_ready_then_restarts_then_newest() {
        // Rank: more colocated pods first.
        let pods = [pod("alone", 1000), pod("crowded", 1000)];
        assert_eq!(order(&pods, &[1, 3]), ["crowded", "alone"]);
        // Ready for less time first (10 s and 1000 s are different age classes).
        let pods = [pod("old", 1000), pod("young", 10)];
        assert_eq!(order(&pods, &[]), ["young", "old"]);
        // Same age class: more restarts first.
        let mut restarted = pod("restarted", 1000);
        restarted["status"]["containerStatuses"] = json!([{"name": "c", "restartCount": 3}]);
        let pods = [pod("steady", 1001), restarted];
        assert_eq!(order(&pods, &[]), ["restarted", "steady"]);
        // Not ready pods: by creation time, newest first, no creation time before all.
        let mut a = pod("a-new", 5);
        a["status"] = json!({"phase": "Pending"});
        let mut b = pod("b-old", 5000);
        b["status"] = json!({"phase": "Pending"});
        let mut c = pod("c-timeless", 5);
        c["status"] = json!({"phase": "Pending"});
        c["metadata"]
            .as_object_mut()
            .unwrap()
            .remove("creationTimestamp");
        assert_eq!(order(&[b, a, c], &[]), ["c-timeless", "a-new", "b-old"]);
    }

    #[test]
    fn a_sidecars_restarts_count_after_the_regular_containers() {
        let mut sidecar = pod("sidecar", 1000);
        sidecar["spec"]["initContainers"] =
            json!([{"name": "s", "restartPolicy": "Always"}, {"name": "init"}]);
        sidecar["status"]["initContainerStatuses"] =
            json!([{"name": "s", "restartCount": 2}, {"name": "init", "restartCount": 9}]);
        let facts = PodFacts::of(&sidecar);
        assert_eq!(facts.restarts, (0, 2));
        let pods = [pod("plain", 1000), sidecar];
        assert_eq!(order(&pods, &[]), ["sidecar", "plain"]);
    }

    #[test]
    fn a_bad_deletion_cost_counts_as_zero() {
        let mut bad = pod("bad", 1000);
        bad["metadata"]["annotations"] = json!({POD_DELETION_COST: "lots"});
        assert_eq!(PodFacts::of(&bad).deletion_cost, 0);
        let mut big = pod("big", 1000);
        big["metadata"]["annotations"] = json!({POD_DELETION_COST: "99999999999"});
        assert_eq!(PodFacts::of(&big).deletion_cost, 0);
    }

    #[test]
    fn pods_to_delete_ranks_by_related_pods_on_the_node() {
        let mut on_n2 = pod("on-n2", 1000);
        on_n2["spec"]["nodeName"] = json!("n2");
        let facts: Vec<PodFacts> = [pod("on-n1", 1000), on_n2]
            .iter()
            .map(PodFacts::of)
            .collect();
        // Three related pods on n2, one on n1: the pod on n2 goes.
        let related = ["n1", "n2", "n2", "n2"].map(String::from);
        assert_eq!(pods_to_delete(&facts, &related, 1, now()), vec![1]);
        // All of them: every index, without sorting.
        assert_eq!(pods_to_delete(&facts, &related, 5, now()), vec![0, 1]);
    }
}
