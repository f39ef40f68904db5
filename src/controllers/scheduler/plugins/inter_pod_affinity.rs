//! `InterPodAffinity`: where a pod may go, and prefers to go, given the pods already placed.
//!
//! The filter, in upstream's order:
//! 1. the pod's required affinity: every term must find a matching pod in the node's domain
//!    (the term's topology key and the node's value), unless no pod anywhere matches and the
//!    pod matches its own terms (the first of a group that wants to be together);
//! 2. the pod's required anti-affinity: no matching pod in the node's domain;
//! 3. the required anti-affinity of the pods already placed: none of them may reject the pod
//!    from the node's domains.
//!
//! The score (weight 2) sums, per domain, the weights of the pod's preferred terms matched by
//! pods there (anti-affinity subtracts), the preferred terms of pods there matching the pod,
//! and 1 for each required affinity term of theirs it matches; normalized between the lowest
//! and the highest node.

use std::collections::HashMap;

use super::{Plugin, Status, MAX_SCORE};
use crate::controllers::scheduler::cache::Cache;
use crate::controllers::scheduler::node::NodeInfo;
use crate::controllers::scheduler::pod::PodInfo;
use crate::controllers::scheduler::terms::AffinityTerm;

pub const WEIGHT: i64 = 2;
/// Weight of an existing pod's required affinity term that the new pod matches
/// (`hardPodAffinityWeight`).
const HARD_POD_AFFINITY_WEIGHT: i64 = 1;

pub const ERR_AFFINITY: &str = "node(s) didn't match pod affinity rules";
pub const ERR_ANTI_AFFINITY: &str = "node(s) didn't match pod anti-affinity rules";
pub const ERR_EXISTING_ANTI_AFFINITY: &str =
    "node(s) didn't satisfy existing pods anti-affinity rules";

/// A topology key and one of its values.
type Domain = (String, String);

/// Whether `pod` matches `term` (looking up its namespace's labels in `cache`).
fn term_matches(cache: &Cache, term: &AffinityTerm, pod: &PodInfo) -> bool {
    term.matches(
        pod.namespace(),
        pod.labels(),
        cache.namespace_labels(pod.namespace()),
    )
}

/// The filter's counts, computed once per decision.
#[derive(Debug, Default)]
pub struct FilterState {
    /// Domains where placed pods' required anti-affinity rejects the new pod.
    existing_anti_affinity: HashMap<Domain, i64>,
    /// Domains with pods matching all of the new pod's required affinity terms.
    affinity: HashMap<Domain, i64>,
    /// Domains with pods matching one of the new pod's required anti-affinity terms.
    anti_affinity: HashMap<Domain, i64>,
    /// Nothing to check.
    skip: bool,
}

impl FilterState {
    pub fn new(pod: &PodInfo, cache: &Cache) -> FilterState {
        let own = pod.spec.pod_affinity();
        let mut state = FilterState::default();
        for node in cache.nodes() {
            if node.with_required_anti_affinity > 0 {
                for existing in &node.pods {
                    for term in &existing.spec.pod_affinity().required_anti_affinity {
                        if let Some(value) = node.labels().get(&term.topology_key) {
                            if term_matches(cache, term, pod) {
                                *state
                                    .existing_anti_affinity
                                    .entry((term.topology_key.clone(), value.to_string()))
                                    .or_insert(0) += 1;
                            }
                        }
                    }
                }
            }
            if own.required_affinity.is_empty() && own.required_anti_affinity.is_empty() {
                continue;
            }
            for existing in &node.pods {
                if !own.required_affinity.is_empty()
                    && own
                        .required_affinity
                        .iter()
                        .all(|t| term_matches(cache, t, existing))
                {
                    for term in &own.required_affinity {
                        if let Some(value) = node.labels().get(&term.topology_key) {
                            *state
                                .affinity
                                .entry((term.topology_key.clone(), value.to_string()))
                                .or_insert(0) += 1;
                        }
                    }
                }
                for term in &own.required_anti_affinity {
                    if let Some(value) = node.labels().get(&term.topology_key) {
                        if term_matches(cache, term, existing) {
                            *state
                                .anti_affinity
                                .entry((term.topology_key.clone(), value.to_string()))
                                .or_insert(0) += 1;
                        }
                    }
                }
            }
        }
        state.skip = state.existing_anti_affinity.is_empty()
            && own.required_affinity.is_empty()
            && own.required_anti_affinity.is_empty();
        state
    }

    pub fn filter(&self, cache: &Cache, pod: &PodInfo, node: &NodeInfo) -> Option<Status> {
        if self.skip {
            return None;
        }
        let own = pod.spec.pod_affinity();
        let labels = node.labels();
        let count = |map: &HashMap<Domain, i64>, key: &str, value: &str| {
            map.get(&(key.to_string(), value.to_string()))
                .copied()
                .unwrap_or(0)
        };
        // 1. Required affinity.
        let mut pods_exist = true;
        for term in &own.required_affinity {
            match labels.get(&term.topology_key) {
                Some(value) => {
                    if count(&self.affinity, &term.topology_key, value) <= 0 {
                        pods_exist = false;
                    }
                }
                None => return Some(Status::unresolvable(Plugin::InterPodAffinity, ERR_AFFINITY)),
            }
        }
        if !pods_exist {
            let first_of_its_group = self.affinity.is_empty()
                && own
                    .required_affinity
                    .iter()
                    .all(|t| term_matches(cache, t, pod));
            if !first_of_its_group {
                return Some(Status::unresolvable(Plugin::InterPodAffinity, ERR_AFFINITY));
            }
        }
        // 2. Required anti-affinity.
        for term in &own.required_anti_affinity {
            if let Some(value) = labels.get(&term.topology_key) {
                if count(&self.anti_affinity, &term.topology_key, value) > 0 {
                    return Some(Status::unschedulable(
                        Plugin::InterPodAffinity,
                        ERR_ANTI_AFFINITY,
                    ));
                }
            }
        }
        // 3. Placed pods' required anti-affinity.
        if !self.existing_anti_affinity.is_empty()
            && labels
                .iter()
                .any(|(k, v)| count(&self.existing_anti_affinity, k, v) > 0)
        {
            return Some(Status::unschedulable(
                Plugin::InterPodAffinity,
                ERR_EXISTING_ANTI_AFFINITY,
            ));
        }
        None
    }
}

/// Scores of the feasible `nodes` (normalized); `None` when no preference applies.
pub fn scores(pod: &PodInfo, cache: &Cache, nodes: &[&NodeInfo]) -> Option<Vec<i64>> {
    let own = pod.spec.pod_affinity();
    let has_preferences =
        !own.preferred_affinity.is_empty() || !own.preferred_anti_affinity.is_empty();
    // topology key → value → score.
    let mut topology: HashMap<&str, HashMap<&str, i64>> = HashMap::new();
    for node in cache.nodes() {
        if node.labels().is_empty() || !(has_preferences || node.with_affinity > 0) {
            continue;
        }
        for existing in &node.pods {
            let theirs = existing.spec.pod_affinity();
            let mut credit = |term: &AffinityTerm, amount: i64| {
                if let Some((key, value)) =
                    node.labels().iter().find(|(k, _)| *k == term.topology_key)
                {
                    *topology.entry(key).or_default().entry(value).or_insert(0) += amount;
                }
            };
            for term in &own.preferred_affinity {
                if term_matches(cache, term, existing) {
                    credit(term, term.weight);
                }
            }
            for term in &own.preferred_anti_affinity {
                if term_matches(cache, term, existing) {
                    credit(term, -term.weight);
                }
            }
            for term in &theirs.required_affinity {
                if term_matches(cache, term, pod) {
                    credit(term, HARD_POD_AFFINITY_WEIGHT);
                }
            }
            for term in &theirs.preferred_affinity {
                if term_matches(cache, term, pod) {
                    credit(term, term.weight);
                }
            }
            for term in &theirs.preferred_anti_affinity {
                if term_matches(cache, term, pod) {
                    credit(term, -term.weight);
                }
            }
        }
    }
    if topology.is_empty() {
        return None;
    }
    let raw: Vec<i64> = nodes
        .iter()
        .map(|n| {
            topology
                .iter()
                .filter_map(|(key, values)| {
                    n.labels()
                        .get(key)
                        .map(|v| values.get(v).copied().unwrap_or(0))
                })
                .sum()
        })
        .collect();
    let min = raw.iter().copied().min().unwrap_or(0);
    let max = raw.iter().copied().max().unwrap_or(0);
    Some(
        raw.iter()
            .map(|s| {
                if max > min {
                    (MAX_SCORE as f64 * ((s - min) as f64 / (max - min) as f64)) as i64
                } else {
                    0
                }
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
        node(name, json!({"metadata": {"labels": {"zone": zone}}}))
    }

    fn labelled(name: &str, node: &str, app: &str, affinity: Value) -> PodInfo {
        bound(
            name,
            node,
            "100m",
            json!({"metadata": {"labels": {"app": app}}, "spec": {"affinity": affinity}}),
        )
    }

    fn term(app: &str, key: &str) -> Value {
        json!({"labelSelector": {"matchLabels": {"app": app}}, "topologyKey": key})
    }

    fn new_pod(app: &str, affinity: Value) -> PodInfo {
        pod(
            "new",
            "100m",
            json!({"metadata": {"labels": {"app": app}}, "spec": {"affinity": affinity}}),
        )
    }

    fn verdicts(c: &Cache, p: &PodInfo) -> Vec<Option<&'static str>> {
        let state = FilterState::new(p, c);
        c.nodes()
            .map(|n| {
                state.filter(c, p, n).map(|s| match s.reasons[0].as_str() {
                    ERR_AFFINITY => "affinity",
                    ERR_ANTI_AFFINITY => "anti",
                    ERR_EXISTING_ANTI_AFFINITY => "existing",
                    _ => "?",
                })
            })
            .collect()
    }

    #[test]
    fn required_terms_filter_in_upstreams_order() {
        // n1 (zone a) runs db, n2 (zone a) nothing, n3 (zone b) runs web with anti-affinity
        // against "cache" pods on its host.
        let c = cache(
            &[zoned("n1", "a"), zoned("n2", "a"), zoned("n3", "b")],
            &[
                labelled("db", "n1", "db", json!({})),
                labelled(
                    "web",
                    "n3",
                    "web",
                    json!({"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution":
                        [term("cache", "kubernetes.io/hostname")]}}),
                ),
            ],
        );
        let near_db = new_pod(
            "x",
            json!({"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [term("db", "zone")]}}),
        );
        assert_eq!(verdicts(&c, &near_db), [None, None, Some("affinity")]);
        let away_from_db = new_pod(
            "x",
            json!({"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [term("db", "zone")]}}),
        );
        assert_eq!(
            verdicts(&c, &away_from_db),
            [Some("anti"), Some("anti"), None]
        );
        let cache_pod = new_pod("cache", json!({}));
        assert_eq!(verdicts(&c, &cache_pod), [None, None, Some("existing")]);
        // A node without the topology key cannot satisfy an affinity term.
        let by_rack = new_pod(
            "x",
            json!({"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [term("db", "rack")]}}),
        );
        assert_eq!(
            verdicts(&c, &by_rack),
            [Some("affinity"), Some("affinity"), Some("affinity")]
        );
    }

    #[test]
    fn the_first_pod_of_a_group_may_go_anywhere() {
        let c = cache(&[zoned("n1", "a"), zoned("n2", "b")], &[]);
        let together = new_pod(
            "group",
            json!({"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [term("group", "zone")]}}),
        );
        assert_eq!(verdicts(&c, &together), [None, None]);
        // Unless it does not match its own terms.
        let elsewhere = new_pod(
            "other",
            json!({"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [term("group", "zone")]}}),
        );
        assert_eq!(
            verdicts(&c, &elsewhere),
            [Some("affinity"), Some("affinity")]
        );
    }

    #[test]
    fn preferences_score_by_domain() {
        let c = cache(
            &[zoned("n1", "a"), zoned("n2", "a"), zoned("n3", "b")],
            &[
                labelled("db", "n1", "db", json!({})),
                labelled("web", "n3", "web", json!({})),
            ],
        );
        let nodes: Vec<_> = c.nodes().collect();
        let p = new_pod(
            "x",
            json!({"podAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
                       {"weight": 10, "podAffinityTerm": term("db", "zone")}]},
                   "podAntiAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
                       {"weight": 5, "podAffinityTerm": term("web", "zone")}]}}),
        );
        // Zone a: +10, zone b: −5 → raw 10, 10, −5 → 100, 100, 0.
        assert_eq!(scores(&p, &c, &nodes), Some(vec![100, 100, 0]));
        assert_eq!(scores(&new_pod("y", json!({})), &c, &nodes), None);
        // A placed pod's preference for the new one counts too.
        let c = cache(
            &[zoned("n1", "a"), zoned("n2", "b")],
            &[labelled(
                "likes-x",
                "n2",
                "z",
                json!({"podAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
                    {"weight": 7, "podAffinityTerm": term("x", "zone")}]}}),
            )],
        );
        let nodes: Vec<_> = c.nodes().collect();
        assert_eq!(
            scores(&new_pod("x", json!({})), &c, &nodes),
            Some(vec![0, 100])
        );
    }
}
