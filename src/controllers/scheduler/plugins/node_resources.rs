//! `NodeResourcesFit` and `NodeResourcesBalancedAllocation`.
//!
//! The filter: a node takes the pod while the pod's requests fit in its allocatable minus what
//! the pods counted on it request — cpu, memory, ephemeral storage, every scalar resource the
//! pod asks for — and it has room for one more pod. Every shortage is a reason of its own
//! ("Insufficient cpu", "Too many pods").
//!
//! The scores (weight 1 each): `LeastAllocated` prefers nodes with the most cpu and memory
//! left, counting 100m and 200Mi for containers that name none; `BalancedAllocation` prefers
//! nodes whose cpu and memory would be used in equal shares (by the requests as given; pods
//! that request nothing skip it, so they do not pile onto one node).

use super::{Plugin, Status, MAX_SCORE};
use crate::controllers::scheduler::node::NodeInfo;
use crate::controllers::scheduler::pod::PodInfo;

pub const LEAST_ALLOCATED_WEIGHT: i64 = 1;
pub const BALANCED_ALLOCATION_WEIGHT: i64 = 1;

pub fn filter(pod: &PodInfo, node: &NodeInfo) -> Option<Status> {
    let want = &pod.spec.requests.resources;
    let have = &node.spec.allocatable;
    let used = &node.requested;
    let mut reasons = Vec::new();
    if node.pods.len() as i64 + 1 > have.pods {
        reasons.push("Too many pods".to_string());
    }
    if !want.is_zero() {
        if want.milli_cpu > 0 && want.milli_cpu > have.milli_cpu - used.milli_cpu {
            reasons.push("Insufficient cpu".to_string());
        }
        if want.memory > 0 && want.memory > have.memory - used.memory {
            reasons.push("Insufficient memory".to_string());
        }
        if want.ephemeral_storage > 0
            && want.ephemeral_storage > have.ephemeral_storage - used.ephemeral_storage
        {
            reasons.push("Insufficient ephemeral-storage".to_string());
        }
        for (name, amount) in &want.scalar {
            if *amount > 0 && *amount > have.scalar(name) - used.scalar(name) {
                reasons.push(format!("Insufficient {name}"));
            }
        }
    }
    (!reasons.is_empty()).then_some(Status {
        plugin: Plugin::NodeResourcesFit,
        unresolvable: false,
        reasons,
    })
}

/// `leastRequestedScore`: the share of `capacity` left, 0–100.
fn least_requested(requested: i64, capacity: i64) -> i64 {
    if capacity == 0 || requested > capacity {
        return 0;
    }
    (capacity - requested) * MAX_SCORE / capacity
}

/// `LeastAllocated` scores of `nodes` (cpu and memory, weight 1 each).
pub fn least_allocated(pod: &PodInfo, nodes: &[&NodeInfo]) -> Vec<i64> {
    let r = &pod.spec.requests;
    nodes
        .iter()
        .map(|n| {
            let pairs = [
                (
                    n.non_zero_milli_cpu + r.non_zero_milli_cpu,
                    n.spec.allocatable.milli_cpu,
                ),
                (
                    n.non_zero_memory + r.non_zero_memory,
                    n.spec.allocatable.memory,
                ),
            ];
            let (mut score, mut weights) = (0, 0);
            for (requested, allocatable) in pairs {
                if allocatable == 0 {
                    continue;
                }
                score += least_requested(requested, allocatable);
                weights += 1;
            }
            if weights == 0 {
                0
            } else {
                score / weights
            }
        })
        .collect()
}

/// `BalancedAllocation` scores of `nodes`; `None` when the pod requests neither cpu nor
/// memory (the plugin skips it).
pub fn balanced_allocation(pod: &PodInfo, nodes: &[&NodeInfo]) -> Option<Vec<i64>> {
    let want = &pod.spec.requests.resources;
    if want.milli_cpu == 0 && want.memory == 0 {
        return None;
    }
    Some(
        nodes
            .iter()
            .map(|n| {
                let pairs = [
                    (
                        n.requested.milli_cpu + want.milli_cpu,
                        n.spec.allocatable.milli_cpu,
                    ),
                    (n.requested.memory + want.memory, n.spec.allocatable.memory),
                ];
                let fractions: Vec<f64> = pairs
                    .iter()
                    .filter(|(_, allocatable)| *allocatable != 0)
                    .map(|(requested, allocatable)| {
                        (*requested as f64 / *allocatable as f64).min(1.0)
                    })
                    .collect();
                let std = match fractions.as_slice() {
                    [a, b] => ((a - b) / 2.0).abs(),
                    _ => 0.0,
                };
                ((1.0 - std) * MAX_SCORE as f64) as i64
            })
            .collect(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::controllers::scheduler::testing::{bound, cache, node, pod};
    use serde_json::json;

    fn asking(name: &str, requests: serde_json::Value) -> PodInfo {
        pod(
            name,
            "0",
            json!({"spec": {"containers": [{"name": "c", "image": "i",
                "resources": {"requests": requests}}]}}),
        )
    }

    #[test]
    fn requests_must_fit_in_what_is_left() {
        let c = cache(
            &[
                node(
                    "n1",
                    json!({"status": {"allocatable": {"example.com/gpu": "1"}}}),
                ),
                node(
                    "small",
                    json!({"status": {"allocatable": {"cpu": "1", "memory": "1Gi",
                                                                "pods": "1"}}}),
                ),
            ],
            &[
                bound("a", "n1", "3", json!({})),
                bound("b", "small", "100m", json!({})),
            ],
        );
        let n1 = c.node("n1").unwrap();
        let small = c.node("small").unwrap();
        let cases: Vec<(PodInfo, &NodeInfo, Vec<&str>)> = vec![
            (asking("fits", json!({"cpu": "1"})), n1, vec![]),
            (
                asking("cpu", json!({"cpu": "1100m"})),
                n1,
                vec!["Insufficient cpu"],
            ),
            (
                asking("mem", json!({"memory": "9Gi"})),
                n1,
                vec!["Insufficient memory"],
            ),
            (
                asking("eph", json!({"ephemeral-storage": "101Gi"})),
                n1,
                vec!["Insufficient ephemeral-storage"],
            ),
            (asking("gpu", json!({"example.com/gpu": "1"})), n1, vec![]),
            (
                asking("gpus", json!({"example.com/gpu": "2"})),
                n1,
                vec!["Insufficient example.com/gpu"],
            ),
            (
                asking("unknown", json!({"example.com/fpga": "1"})),
                n1,
                vec!["Insufficient example.com/fpga"],
            ),
            (
                asking("all", json!({"cpu": "2", "memory": "2Gi"})),
                small,
                vec!["Too many pods", "Insufficient cpu", "Insufficient memory"],
            ),
            // A pod asking nothing only needs a pod slot.
            (asking("none", json!({})), small, vec!["Too many pods"]),
            (asking("none2", json!({})), n1, vec![]),
        ];
        for (p, n, want) in cases {
            let got = filter(&p, n);
            let reasons: Vec<String> = got.as_ref().map(|s| s.reasons.clone()).unwrap_or_default();
            assert_eq!(reasons, want, "{} on {}", p.name(), n.name);
            if let Some(s) = got {
                assert!(!s.unresolvable);
            }
        }
    }

    #[test]
    fn least_allocated_prefers_the_emptiest_node() {
        // 4 cpus and 8Gi each; n2 has 2 cpus and 4Gi requested.
        let c = cache(
            &[node("n1", json!({})), node("n2", json!({}))],
            &[bound(
                "busy",
                "n2",
                "2",
                json!({"spec": {"containers": [{"name": "c", "image": "i",
                    "resources": {"requests": {"cpu": "2", "memory": "4Gi"}}}]}}),
            )],
        );
        let nodes: Vec<_> = c.nodes().collect();
        let p = asking("p", json!({"cpu": "1", "memory": "2Gi"}));
        // n1: cpu (4000-1000)/4000 = 75, memory (8-2)/8 = 75 → 75.
        // n2: cpu (4000-3000)/4000 = 25, memory (8-6)/8 = 25 → 25.
        assert_eq!(least_allocated(&p, &nodes), [75, 25]);
        // A pod naming nothing counts 100m and 200Mi.
        let empty = asking("e", json!({}));
        // n1: cpu 3900*100/4000 = 97, memory (8192-200)*100/8192 = 97 → 97.
        assert_eq!(least_allocated(&empty, &nodes)[0], 97);
    }

    #[test]
    fn balanced_allocation_prefers_equal_shares() {
        let c = cache(
            &[node("n1", json!({})), node("n2", json!({}))],
            &[bound(
                "cpu-heavy",
                "n2",
                "2",
                json!({"spec": {"containers": [{"name": "c", "image": "i",
                    "resources": {"requests": {"cpu": "2"}}}]}}),
            )],
        );
        let nodes: Vec<_> = c.nodes().collect();
        let p = asking("p", json!({"cpu": "1", "memory": "2Gi"}));
        // n1: cpu 1/4, memory 2/8: equal → 100. n2: cpu 3/4, memory 2/8 → std 0.25 → 75.
        assert_eq!(balanced_allocation(&p, &nodes), Some(vec![100, 75]));
        // Over capacity counts as full.
        let big = asking("big", json!({"cpu": "8", "memory": "1Gi"}));
        // n1: cpu min(2,1)=1, memory 1/8 → std 0.4375 → 56.
        assert_eq!(balanced_allocation(&big, &nodes).unwrap()[0], 56);
        assert_eq!(
            balanced_allocation(&asking("none", json!({})), &nodes),
            None
        );
    }
}
