//! `PodTopologySpread`: pods matching a constraint's selector are kept within `maxSkew` of
//! each other across the values of its topology key (nodes, zones).
//!
//! - `DoNotSchedule` constraints filter: a node is refused when placing the pod there would
//!   make its domain's count exceed the smallest domain's by more than `maxSkew` (the smallest
//!   counts as 0 while fewer than `minDomains` domains exist); a node without the topology
//!   label is refused outright. Counting honors the node inclusion policies: by default only
//!   nodes matching the pod's node selector and affinity count, whatever their taints.
//! - `ScheduleAnyway` constraints score (weight 2): fewer matching pods in the node's
//!   domains is better, each constraint weighted by the log of its number of domains.
//! - A pod with no constraints of its own gets the system defaults — spread over hostnames
//!   (maxSkew 3) and zones (maxSkew 5), ScheduleAnyway — with the selector of the Services and
//!   controller selecting it: this is how pods of one ReplicaSet spread over nodes
//!   (kube-scheduler's former SelectorSpread).

use std::collections::HashMap;

use super::{Plugin, Status, MAX_SCORE};
use crate::controllers::scheduler::cache::Cache;
use crate::controllers::scheduler::node::NodeInfo;
use crate::controllers::scheduler::pod::{PodInfo, SpreadConstraint, Unsatisfiable};
use crate::controllers::scheduler::terms::first_untolerated;
use crate::kube::selectors::LabelSelector;

pub const WEIGHT: i64 = 2;
pub const ERR_CONSTRAINTS: &str = "node(s) didn't match pod topology spread constraints";
pub const ERR_MISSING_LABEL: &str =
    "node(s) didn't match pod topology spread constraints (missing required label)";

pub const HOSTNAME: &str = "kubernetes.io/hostname";
pub const ZONE: &str = "topology.kubernetes.io/zone";

/// The pod's constraints for `action`, and whether they are the system defaults.
fn constraints(
    pod: &PodInfo,
    cache: &Cache,
    action: Unsatisfiable,
) -> (Vec<SpreadConstraint>, bool) {
    if !pod.spec.spread.is_empty() {
        let own = pod
            .spec
            .spread
            .iter()
            .filter(|c| c.when_unsatisfiable == action)
            .cloned()
            .collect();
        return (own, false);
    }
    if action == Unsatisfiable::DoNotSchedule {
        return (Vec::new(), true);
    }
    let Some(selector) = cache.default_selector(pod) else {
        return (Vec::new(), true);
    };
    let default = |key: &str, max_skew| SpreadConstraint {
        max_skew,
        topology_key: key.to_string(),
        when_unsatisfiable: Unsatisfiable::ScheduleAnyway,
        selector: Some(selector.clone()),
        min_domains: 1,
        honor_node_affinity: true,
        honor_node_taints: false,
    };
    (vec![default(HOSTNAME, 3), default(ZONE, 5)], true)
}

/// Pods on `node` in `namespace` that `selector` matches, not counting terminating ones (an
/// absent or empty selector counts none).
fn count_matching(node: &NodeInfo, selector: Option<&LabelSelector>, namespace: &str) -> i64 {
    let Some(selector) = selector.filter(|s| !s.is_empty()) else {
        return 0;
    };
    node.pods
        .iter()
        .filter(|p| !p.spec.deleting && p.namespace() == namespace && selector.matches(p.labels()))
        .count() as i64
}

fn has_all_keys(node: &NodeInfo, constraints: &[SpreadConstraint]) -> bool {
    constraints
        .iter()
        .all(|c| node.labels().contains_key(&c.topology_key))
}

/// `matchNodeInclusionPolicies`: whether `node` counts for `constraint`.
fn included(constraint: &SpreadConstraint, pod: &PodInfo, node: &NodeInfo) -> bool {
    if constraint.honor_node_affinity
        && !pod
            .spec
            .required_node_affinity
            .matches(&node.name, node.labels())
    {
        return false;
    }
    if constraint.honor_node_taints
        && first_untolerated(&node.spec.taints, &pod.spec.tolerations, |t| {
            t.effect == "NoSchedule" || t.effect == "NoExecute"
        })
        .is_some()
    {
        return false;
    }
    true
}

/// What the filter needs, computed once per decision: matching pods per domain.
#[derive(Debug, Default)]
pub struct FilterState {
    constraints: Vec<SpreadConstraint>,
    /// Per constraint: matching pods per value of its topology key, over the counted nodes.
    counts: Vec<HashMap<String, i64>>,
}

impl FilterState {
    pub fn new(pod: &PodInfo, cache: &Cache) -> FilterState {
        let (constraints, _) = constraints(pod, cache, Unsatisfiable::DoNotSchedule);
        let mut counts = vec![HashMap::new(); constraints.len()];
        if constraints.is_empty() {
            return FilterState::default();
        }
        for node in cache.nodes() {
            if !has_all_keys(node, &constraints) {
                continue;
            }
            for (i, c) in constraints.iter().enumerate() {
                if !included(c, pod, node) {
                    continue;
                }
                let value = node.labels().get(&c.topology_key).unwrap_or_default();
                *counts[i].entry(value.to_string()).or_insert(0) +=
                    count_matching(node, c.selector.as_ref(), pod.namespace());
            }
        }
        FilterState {
            constraints,
            counts,
        }
    }

    /// The global minimum of constraint `i` (0 while fewer than `minDomains` domains count).
    fn min_match(&self, i: usize) -> i64 {
        let counts = &self.counts[i];
        if (counts.len() as i64) < self.constraints[i].min_domains {
            return 0;
        }
        counts
            .values()
            .copied()
            .min()
            .unwrap_or(i64::from(i32::MAX))
    }

    pub fn filter(&self, pod: &PodInfo, node: &NodeInfo) -> Option<Status> {
        for (i, c) in self.constraints.iter().enumerate() {
            let Some(value) = node.labels().get(&c.topology_key) else {
                return Some(Status::unresolvable(
                    Plugin::PodTopologySpread,
                    ERR_MISSING_LABEL,
                ));
            };
            let own = c.selector.as_ref().is_some_and(|s| s.matches(pod.labels())) as i64;
            let matching = self.counts[i].get(value).copied().unwrap_or(0);
            if matching + own - self.min_match(i) > c.max_skew {
                return Some(Status::unschedulable(
                    Plugin::PodTopologySpread,
                    ERR_CONSTRAINTS,
                ));
            }
        }
        None
    }
}

/// Scores of the feasible `nodes` (normalized); `None` when the pod has no ScheduleAnyway
/// constraints, not even the defaults (the plugin skips it).
pub fn scores(pod: &PodInfo, cache: &Cache, nodes: &[&NodeInfo]) -> Option<Vec<i64>> {
    let (constraints, system_defaulted) = constraints(pod, cache, Unsatisfiable::ScheduleAnyway);
    if constraints.is_empty() || nodes.is_empty() {
        return None;
    }
    // Only constraints of the pod's own require every key on a node: a node without a zone
    // still gets hostname spreading from the defaults.
    let require_all = !system_defaulted;
    let ignored: Vec<bool> = nodes
        .iter()
        .map(|n| require_all && !has_all_keys(n, &constraints))
        .collect();
    let counted_nodes = ignored.iter().filter(|i| !**i).count();
    let mut domain_counts: Vec<HashMap<String, i64>> = vec![HashMap::new(); constraints.len()];
    for (node, _) in nodes.iter().zip(&ignored).filter(|(_, i)| !**i) {
        for (i, c) in constraints.iter().enumerate() {
            if c.topology_key != HOSTNAME {
                let value = node.labels().get(&c.topology_key).unwrap_or_default();
                domain_counts[i].entry(value.to_string()).or_insert(0);
            }
        }
    }
    let weights: Vec<f64> = constraints
        .iter()
        .enumerate()
        .map(|(i, c)| {
            let size = if c.topology_key == HOSTNAME {
                counted_nodes
            } else {
                domain_counts[i].len()
            };
            ((size + 2) as f64).ln()
        })
        .collect();
    // Matching pods per domain, over every node the pod could go to.
    let required = &pod.spec.required_node_affinity;
    for node in cache.nodes() {
        if !required.matches(&node.name, node.labels())
            || (require_all && !has_all_keys(node, &constraints))
        {
            continue;
        }
        for (i, c) in constraints.iter().enumerate() {
            if c.topology_key == HOSTNAME || !included(c, pod, node) {
                continue;
            }
            let value = node.labels().get(&c.topology_key).unwrap_or_default();
            if let Some(count) = domain_counts[i].get_mut(value) {
                *count += count_matching(node, c.selector.as_ref(), pod.namespace());
            }
        }
    }
    let raw: Vec<Option<i64>> = nodes
        .iter()
        .zip(&ignored)
        .map(|(node, ignored)| {
            if *ignored {
                return None;
            }
            let mut score = 0.0;
            for (i, c) in constraints.iter().enumerate() {
                let Some(value) = node.labels().get(&c.topology_key) else {
                    continue;
                };
                let count = if c.topology_key == HOSTNAME {
                    count_matching(node, c.selector.as_ref(), pod.namespace())
                } else {
                    domain_counts[i].get(value).copied().unwrap_or(0)
                };
                score += count as f64 * weights[i] + (c.max_skew - 1) as f64;
            }
            Some(score.round() as i64)
        })
        .collect();
    let counted: Vec<i64> = raw.iter().flatten().copied().collect();
    let min = counted.iter().copied().min().unwrap_or(0);
    let max = counted.iter().copied().max().unwrap_or(0);
    Some(
        raw.iter()
            .map(|s| match s {
                None => 0,
                Some(_) if max == 0 => MAX_SCORE,
                Some(s) => MAX_SCORE * (max + min - s) / max,
            })
            .collect(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::controllers::scheduler::testing::{bound, cache, node, pod};
    use serde_json::{json, Value};

    fn zoned(name: &str, zone: &str) -> crate::kube::object::ObjectRef {
        node(name, json!({"metadata": {"labels": {ZONE: zone}}}))
    }

    fn web(name: &str, node: &str) -> PodInfo {
        bound(
            name,
            node,
            "100m",
            json!({"metadata": {"labels": {"app": "web"}}}),
        )
    }

    fn spread(key: &str, max_skew: i64, action: &str, extra: Value) -> PodInfo {
        let mut c = json!({"maxSkew": max_skew, "topologyKey": key, "whenUnsatisfiable": action,
                           "labelSelector": {"matchLabels": {"app": "web"}}});
        crate::controllers::scheduler::testing::merge(&mut c, &extra);
        pod(
            "new",
            "100m",
            json!({"metadata": {"labels": {"app": "web"}},
                   "spec": {"topologySpreadConstraints": [c]}}),
        )
    }

    #[test]
    fn do_not_schedule_keeps_domains_within_max_skew() {
        // Zone a: n1 (2 web pods), n2 (1); zone b: n3 (0); n4 has no zone label.
        let c = cache(
            &[
                zoned("n1", "a"),
                zoned("n2", "a"),
                zoned("n3", "b"),
                node("n4", json!({})),
            ],
            &[web("w1", "n1"), web("w2", "n1"), web("w3", "n2")],
        );
        let by_zone = spread(ZONE, 1, "DoNotSchedule", json!({}));
        let state = FilterState::new(&by_zone, &c);
        let verdict = |n: &str| {
            state
                .filter(&by_zone, c.node(n).unwrap())
                .map(|s| (s.unresolvable, s.reasons[0].clone()))
        };
        // Zone a has 3, zone b 0: a fourth in a would be skew 4.
        assert_eq!(verdict("n1"), Some((false, ERR_CONSTRAINTS.to_string())));
        assert_eq!(verdict("n2"), Some((false, ERR_CONSTRAINTS.to_string())));
        assert_eq!(verdict("n3"), None);
        assert_eq!(verdict("n4"), Some((true, ERR_MISSING_LABEL.to_string())));

        let by_host = spread(HOSTNAME, 2, "DoNotSchedule", json!({}));
        let state = FilterState::new(&by_host, &c);
        // Per host 2, 1, 0, 0: n1 would be 3 − 0 > 2.
        assert!(state.filter(&by_host, c.node("n1").unwrap()).is_some());
        assert!(state.filter(&by_host, c.node("n2").unwrap()).is_none());

        // minDomains 3 with two zones: the minimum counts as 0 — and zone b (0 + 1) passes.
        let min_domains = spread(ZONE, 1, "DoNotSchedule", json!({"minDomains": 3}));
        let state = FilterState::new(&min_domains, &c);
        assert!(state.filter(&min_domains, c.node("n3").unwrap()).is_none());

        // Only nodes matching the node selector count (nodeAffinityPolicy Honor): among
        // zone-a nodes alone the minimum is zone a's own count.
        let mut honoring = spread(ZONE, 1, "DoNotSchedule", json!({}));
        let mut spec = (*honoring.spec).clone();
        spec.required_node_affinity.node_selector = vec![(ZONE.into(), "a".into())];
        honoring.spec = std::sync::Arc::new(spec);
        let state = FilterState::new(&honoring, &c);
        assert!(state.filter(&honoring, c.node("n2").unwrap()).is_none());

        // ScheduleAnyway constraints do not filter.
        let soft = spread(ZONE, 1, "ScheduleAnyway", json!({}));
        assert!(FilterState::new(&soft, &c)
            .filter(&soft, c.node("n1").unwrap())
            .is_none());
    }

    #[test]
    fn schedule_anyway_prefers_the_emptier_domains() {
        let c = cache(
            &[zoned("n1", "a"), zoned("n2", "a"), zoned("n3", "b")],
            &[web("w1", "n1"), web("w2", "n1"), web("w3", "n2")],
        );
        let nodes: Vec<_> = c.nodes().collect();
        let by_host = spread(HOSTNAME, 1, "ScheduleAnyway", json!({}));
        // Raw: count × ln(3 + 2) + 0 → 2·1.609 = 3.2 → 3, 1.6 → 2, 0.
        // Normalized: 100·(3 + 0 − s)/3 → 0, 33, 100.
        assert_eq!(scores(&by_host, &c, &nodes), Some(vec![0, 33, 100]));
        let by_zone = spread(ZONE, 2, "ScheduleAnyway", json!({}));
        // Zone a 3 pods, zone b 0; two zones: ln 4 = 1.386. Raw 3·1.386 + 1 = 5.2 → 5, 5, 1.
        // Normalized: 100·(5 + 1 − s)/5 → 20, 20, 100.
        assert_eq!(scores(&by_zone, &c, &nodes), Some(vec![20, 20, 100]));
        assert_eq!(scores(&pod("plain", "1", json!({})), &c, &nodes), None);
    }

    #[test]
    fn pods_of_one_controller_spread_over_nodes_by_default() {
        let mut c = cache(
            &[node("n1", json!({})), node("n2", json!({}))],
            &[web("w1", "n1"), web("w2", "n1")],
        );
        c.set_service("ns", "web", vec![("app".into(), "web".into())]);
        let nodes: Vec<_> = c.nodes().collect();
        let p = pod(
            "new",
            "100m",
            json!({"metadata": {"labels": {"app": "web"}}}),
        );
        // Hostname (maxSkew 3), two nodes: 2·ln 4 + 2 = 4.77 → 5 and 2; the zone default
        // adds nothing on nodes without a zone. Normalized: 100·(5 + 2 − s)/5 → 40, 100.
        assert_eq!(scores(&p, &c, &nodes), Some(vec![40, 100]));
        // Not selected by anything: no default spreading.
        let other = pod(
            "other",
            "100m",
            json!({"metadata": {"labels": {"app": "db"}}}),
        );
        assert_eq!(scores(&other, &c, &nodes), None);
    }
}
