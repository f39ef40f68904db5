//! One scheduling decision (kube-scheduler's `schedulePod`): filter the nodes — starting where
//! the previous decision stopped, and stopping once enough feasible nodes are found in large
//! clusters — score the feasible ones, and pick the best (a random one among equals). When no
//! node fits, the answer is kube-scheduler's `FitError` message: how many nodes refused for
//! each reason, and what preemption would make of it.
//!
//! Preemption itself is not built: the message says what upstream's dry run finds when no
//! pod could be evicted to make room (pods of lower priority are the only candidates; for
//! equal priorities "No preemption victims found for incoming pod"). When evicting
//! lower-priority pods would make room, the message has no preemption part, as upstream's
//! would once it nominated a node.

use std::collections::HashMap;
use std::sync::Arc;

use super::cache::Cache;
use super::hints::Hints;
use super::node::NodeInfo;
use super::plugins::{
    inter_pod_affinity, node_affinity, node_basics, node_ports, node_resources, taint_toleration,
    topology_spread, Status,
};
use super::pod::PodInfo;

/// The message when the cluster has no node at all.
pub const NO_NODES: &str = "no nodes available to schedule pods";

/// The outcome of one decision.
#[derive(Debug)]
pub enum Decision {
    /// Bind the pod to this node.
    Node(Arc<str>),
    /// No node fits: kube-scheduler's `Unschedulable` with its message, and the filters that
    /// refused (what may make the pod schedulable later).
    Unschedulable { message: String, hints: Hints },
    /// The pod cannot be scheduled as it is (`SchedulerError`).
    Error(String),
}

/// Per-decision state: the pod, the cache, and what the cross-node filters precomputed.
pub struct Cycle<'a> {
    pub cache: &'a Cache,
    pub pod: &'a PodInfo,
    spread: topology_spread::FilterState,
    affinity: inter_pod_affinity::FilterState,
}

impl<'a> Cycle<'a> {
    pub fn new(cache: &'a Cache, pod: &'a PodInfo) -> Cycle<'a> {
        Cycle {
            cache,
            pod,
            spread: topology_spread::FilterState::new(pod, cache),
            affinity: inter_pod_affinity::FilterState::new(pod, cache),
        }
    }

    /// The first filter refusing `node`, in the default profile's order.
    pub fn filter(&self, node: &NodeInfo) -> Option<Status> {
        let pod = self.pod;
        node_basics::node_unschedulable(pod, node)
            .or_else(|| node_basics::node_name(pod, node))
            .or_else(|| taint_toleration::filter(pod, node))
            .or_else(|| node_affinity::filter(pod, node))
            .or_else(|| node_ports::filter(pod, node))
            .or_else(|| node_resources::filter(pod, node))
            .or_else(|| self.spread.filter(pod, node))
            .or_else(|| self.affinity.filter(self.cache, pod, node))
    }

    /// Weighted total scores of `nodes`.
    pub fn scores(&self, nodes: &[&NodeInfo]) -> Vec<i64> {
        let pod = self.pod;
        let mut total = vec![0i64; nodes.len()];
        let mut add = |scores: Option<Vec<i64>>, weight: i64| {
            for (t, s) in total.iter_mut().zip(scores.iter().flatten()) {
                *t += s * weight;
            }
        };
        add(
            Some(taint_toleration::scores(pod, nodes)),
            taint_toleration::WEIGHT,
        );
        add(
            Some(node_affinity::scores(pod, nodes)),
            node_affinity::WEIGHT,
        );
        add(
            Some(node_resources::least_allocated(pod, nodes)),
            node_resources::LEAST_ALLOCATED_WEIGHT,
        );
        add(
            node_resources::balanced_allocation(pod, nodes),
            node_resources::BALANCED_ALLOCATION_WEIGHT,
        );
        add(
            topology_spread::scores(pod, self.cache, nodes),
            topology_spread::WEIGHT,
        );
        add(
            inter_pod_affinity::scores(pod, self.cache, nodes),
            inter_pod_affinity::WEIGHT,
        );
        total
    }
}

/// `numFeasibleNodesToFind` with the adaptive default: every node up to 100, then a share
/// shrinking from 50% (never under 5%, never under 100 nodes).
pub fn feasible_nodes_to_find(all: usize) -> usize {
    const MIN_NODES: usize = 100;
    if all < MIN_NODES {
        return all;
    }
    let percentage = 50usize.saturating_sub(all / 125).max(5);
    (all * percentage / 100).max(MIN_NODES)
}

/// The scheduler's state between decisions: where the next search starts and its random
/// source for ties.
pub struct Chooser {
    next_start: usize,
    rng: u64,
}

impl Chooser {
    pub fn new(seed: u64) -> Chooser {
        Chooser {
            next_start: 0,
            rng: seed | 1,
        }
    }

    /// A pseudo-random number below `n` (xorshift: ties need no better).
    fn below(&mut self, n: usize) -> usize {
        self.rng ^= self.rng << 13;
        self.rng ^= self.rng >> 7;
        self.rng ^= self.rng << 17;
        (self.rng % n as u64) as usize
    }

    /// Decides where `pod` goes.
    pub fn decide(&mut self, cache: &Cache, pod: &PodInfo) -> Decision {
        if let Some(reason) = &pod.spec.invalid {
            return Decision::Error(reason.clone());
        }
        let nodes: Vec<&NodeInfo> = cache.nodes().collect();
        if nodes.is_empty() {
            return Decision::Unschedulable {
                message: NO_NODES.to_string(),
                hints: super::hints::ALL,
            };
        }
        let cycle = Cycle::new(cache, pod);
        let to_find = feasible_nodes_to_find(nodes.len());
        let mut feasible = Vec::new();
        let mut refused = Vec::new();
        let mut processed = 0;
        for i in 0..nodes.len() {
            if feasible.len() >= to_find {
                break;
            }
            let node = nodes[(self.next_start + i) % nodes.len()];
            processed += 1;
            match cycle.filter(node) {
                None => feasible.push(node),
                Some(status) => refused.push((node, status)),
            }
        }
        self.next_start = (self.next_start + processed) % nodes.len();
        match feasible.len() {
            0 => {
                let hints = refused.iter().fold(0, |h, (_, s)| h | s.plugin.hints());
                let statuses: Vec<&Status> = refused.iter().map(|(_, s)| s).collect();
                let mut message = fit_error(nodes.len(), &statuses);
                if let Some(preemption) = preemption_message(&cycle, &refused) {
                    message.push(' ');
                    message.push_str(&preemption);
                }
                Decision::Unschedulable { message, hints }
            }
            1 => Decision::Node(feasible[0].name.clone()),
            _ => {
                let scores = cycle.scores(&feasible);
                let best = scores.iter().copied().max().unwrap_or(0);
                // Reservoir sampling among the best: each equally likely.
                let mut chosen = 0;
                let mut seen = 0;
                for (i, s) in scores.iter().enumerate() {
                    if *s == best {
                        seen += 1;
                        if self.below(seen) == 0 {
                            chosen = i;
                        }
                    }
                }
                Decision::Node(feasible[chosen].name.clone())
            }
        }
    }
}

/// `FitError.Error()`: "0/N nodes are available: " and the count of each reason, sorted as
/// strings ("1 node(s) had untolerated taint {k: v}, 2 Insufficient cpu."). Each reason of a
/// node counts (a node short of cpu and memory counts for both).
pub fn fit_error(all_nodes: usize, statuses: &[&Status]) -> String {
    let mut counts: HashMap<&str, usize> = HashMap::new();
    for status in statuses {
        for reason in &status.reasons {
            *counts.entry(reason.as_str()).or_insert(0) += 1;
        }
    }
    let mut parts: Vec<String> = counts
        .iter()
        .map(|(reason, n)| format!("{n} {reason}"))
        .collect();
    parts.sort();
    let mut message = format!("0/{all_nodes} nodes are available:");
    if !parts.is_empty() {
        message.push_str(&format!(" {}.", parts.join(", ")));
    }
    message
}

/// What `DefaultPreemption` says when it finds nothing to evict; `None` when evicting
/// lower-priority pods would make room somewhere (upstream would then preempt, and its
/// message would have no preemption part).
fn preemption_message(cycle: &Cycle<'_>, refused: &[(&NodeInfo, Status)]) -> Option<String> {
    const NOT_HELPFUL: &str = "Preemption is not helpful for scheduling";
    const NO_VICTIMS: &str = "No preemption victims found for incoming pod";
    let pod = cycle.pod;
    if pod.spec.never_preempts {
        return Some("preemption: not eligible due to preemptionPolicy=Never.".into());
    }
    let mut statuses = Vec::with_capacity(refused.len());
    for (node, status) in refused {
        if status.unresolvable {
            statuses.push(Status::unresolvable(status.plugin, NOT_HELPFUL));
            continue;
        }
        let lower: Vec<&str> = node
            .pods
            .iter()
            .filter(|p| p.spec.priority < pod.spec.priority)
            .map(|p| p.uid())
            .collect();
        if lower.is_empty() {
            statuses.push(Status::unresolvable(status.plugin, NO_VICTIMS));
            continue;
        }
        // The node without the lower-priority pods.
        let mut emptied = (*node).clone();
        for uid in lower {
            emptied.remove_pod(uid);
        }
        match cycle.filter(&emptied) {
            Some(status) => statuses.push(status),
            None => return None,
        }
    }
    let refs: Vec<&Status> = statuses.iter().collect();
    Some(format!(
        "preemption: {}",
        fit_error(cycle.cache.node_count(), &refs)
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::controllers::scheduler::plugins::Plugin;
    use crate::controllers::scheduler::testing::{bound, cache, node, pod};
    use serde_json::json;

    fn decide(c: &Cache, p: &PodInfo) -> Decision {
        Chooser::new(7).decide(c, p)
    }

    fn message(d: Decision) -> String {
        match d {
            Decision::Unschedulable { message, .. } => message,
            other => panic!("expected unschedulable, got {other:?}"),
        }
    }

    #[test]
    fn the_message_is_kube_schedulers() {
        // n1 tainted; n2 and n3 full of cpu.
        let c = cache(
            &[
                node(
                    "n1",
                    json!({"spec": {"taints": [{"key": "k", "value": "v", "effect": "NoSchedule"}]}}),
                ),
                node("n2", json!({})),
                node("n3", json!({})),
            ],
            &[
                bound("a", "n2", "4", json!({})),
                bound("b", "n3", "3500m", json!({})),
            ],
        );
        let p = pod("p", "1", json!({}));
        assert_eq!(
            message(decide(&c, &p)),
            "0/3 nodes are available: 1 node(s) had untolerated taint {k: v}, 2 Insufficient cpu. \
             preemption: 0/3 nodes are available: 1 Preemption is not helpful for scheduling, \
             2 No preemption victims found for incoming pod."
        );
        let never = pod("q", "1", json!({"spec": {"preemptionPolicy": "Never"}}));
        assert_eq!(
            message(decide(&c, &never)),
            "0/3 nodes are available: 1 node(s) had untolerated taint {k: v}, 2 Insufficient cpu. \
             preemption: not eligible due to preemptionPolicy=Never."
        );
        // Every reason of a node counts; counts sort as strings.
        let statuses = [
            Status {
                plugin: Plugin::NodeResourcesFit,
                unresolvable: false,
                reasons: vec!["Insufficient cpu".into(), "Insufficient memory".into()],
            },
            Status::unresolvable(Plugin::NodeAffinity, node_affinity::ERR_REASON),
        ];
        let mut many: Vec<&Status> = vec![&statuses[0]];
        many.extend(std::iter::repeat_n(&statuses[1], 10));
        assert_eq!(
            fit_error(11, &many),
            "0/11 nodes are available: 1 Insufficient cpu, 1 Insufficient memory, \
             10 node(s) didn't match Pod's node affinity/selector."
        );
        assert_eq!(message(decide(&cache(&[], &[]), &p)), NO_NODES);
    }

    #[test]
    fn lower_priority_pods_change_the_preemption_part() {
        let c = cache(
            &[node("n1", json!({})), node("n2", json!({}))],
            &[
                bound("low", "n1", "4", json!({"spec": {"priority": -5}})),
                bound("high", "n2", "4", json!({"spec": {"priority": 100}})),
            ],
        );
        // Evicting the lower-priority pod would make room on n1: no preemption part.
        let p = pod("p", "1", json!({}));
        assert_eq!(
            message(decide(&c, &p)),
            "0/2 nodes are available: 2 Insufficient cpu."
        );
        // Too big even for an emptied node: its reason stays.
        let big = pod("big", "5", json!({}));
        assert_eq!(
            message(decide(&c, &big)),
            "0/2 nodes are available: 2 Insufficient cpu. preemption: 0/2 nodes are available: \
             1 Insufficient cpu, 1 No preemption victims found for incoming pod."
        );
    }

    #[test]
    fn the_best_node_wins_and_ties_are_shared() {
        let c = cache(
            &[
                node("n1", json!({})),
                node("n2", json!({})),
                node("n3", json!({})),
            ],
            &[bound("a", "n1", "2", json!({}))],
        );
        let p = pod("p", "1", json!({}));
        let mut chooser = Chooser::new(42);
        let mut seen = std::collections::BTreeSet::new();
        for _ in 0..50 {
            match chooser.decide(&c, &p) {
                Decision::Node(n) => {
                    seen.insert(n.to_string());
                }
                other => panic!("{other:?}"),
            }
        }
        // n1 scores lower (half its cpu is taken); n2 and n3 tie and both get chosen.
        assert_eq!(
            seen.into_iter().collect::<Vec<_>>(),
            ["n2".to_string(), "n3".to_string()]
        );
        // One feasible node is chosen without scoring.
        let c = cache(
            &[
                node("n1", json!({})),
                node("n2", json!({"spec": {"unschedulable": true}})),
            ],
            &[],
        );
        assert!(matches!(decide(&c, &p), Decision::Node(n) if &*n == "n1"));
    }

    #[test]
    fn large_clusters_search_a_share_of_their_nodes() {
        assert_eq!(feasible_nodes_to_find(3), 3);
        assert_eq!(feasible_nodes_to_find(99), 99);
        assert_eq!(feasible_nodes_to_find(100), 100);
        assert_eq!(feasible_nodes_to_find(1000), 420);
        assert_eq!(feasible_nodes_to_find(5000), 500);
        assert_eq!(feasible_nodes_to_find(6000), 300);
    }

    #[test]
    fn an_unusable_spec_is_a_scheduler_error() {
        let c = cache(&[node("n1", json!({}))], &[]);
        let p = pod("p", "1", json!({"spec": {"priority": "high"}}));
        assert!(matches!(decide(&c, &p), Decision::Error(_)));
    }
}
