//! `NodeAffinity`: the pod's `nodeSelector` and required node affinity decide which nodes it
//! may go to; its preferred terms add their weights on the nodes they match (weight 2).

use super::{default_normalize, Plugin, Status};
use crate::controllers::scheduler::node::NodeInfo;
use crate::controllers::scheduler::pod::PodInfo;

pub const WEIGHT: i64 = 2;
pub const ERR_REASON: &str = "node(s) didn't match Pod's node affinity/selector";

pub fn filter(pod: &PodInfo, node: &NodeInfo) -> Option<Status> {
    let required = &pod.spec.required_node_affinity;
    if required.is_empty() || required.matches(&node.name, node.labels()) {
        return None;
    }
    Some(Status::unresolvable(Plugin::NodeAffinity, ERR_REASON))
}

/// Scores of `nodes` (normalized): the sum of the weights of the preferred terms each matches.
pub fn scores(pod: &PodInfo, nodes: &[&NodeInfo]) -> Vec<i64> {
    let terms = &pod.spec.preferred_node_terms;
    let mut scores: Vec<i64> = nodes
        .iter()
        .map(|n| {
            terms
                .iter()
                .filter(|t| t.term.matches(&n.name, n.labels()))
                .map(|t| t.weight)
                .sum()
        })
        .collect();
    default_normalize(&mut scores, false);
    scores
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::controllers::scheduler::testing::{cache, node, pod};
    use serde_json::json;

    fn labelled(name: &str, labels: serde_json::Value) -> crate::kube::object::ObjectRef {
        node(name, json!({"metadata": {"labels": labels}}))
    }

    #[test]
    fn the_node_selector_and_required_terms_filter() {
        let c = cache(
            &[
                labelled("ssd-a", json!({"disk": "ssd", "zone": "a"})),
                labelled("hdd-b", json!({"disk": "hdd", "zone": "b"})),
            ],
            &[],
        );
        let by_selector = pod("s", "1", json!({"spec": {"nodeSelector": {"disk": "ssd"}}}));
        let by_term = pod(
            "t",
            "1",
            json!({"spec": {"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution":
                {"nodeSelectorTerms": [{"matchExpressions": [{"key": "zone", "operator": "In", "values": ["b"]}]}]}}}}}),
        );
        let by_field = pod(
            "f",
            "1",
            json!({"spec": {"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution":
                {"nodeSelectorTerms": [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["ssd-a"]}]}]}}}}}),
        );
        let nowhere = pod(
            "n",
            "1",
            json!({"spec": {"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution":
                {"nodeSelectorTerms": [{}]}}}}}),
        );
        let anywhere = pod("a", "1", json!({}));
        let cases = [
            (&by_selector, "ssd-a", true),
            (&by_selector, "hdd-b", false),
            (&by_term, "ssd-a", false),
            (&by_term, "hdd-b", true),
            (&by_field, "ssd-a", true),
            (&by_field, "hdd-b", false),
            (&nowhere, "ssd-a", false),
            (&anywhere, "hdd-b", true),
        ];
        for (p, n, fits) in cases {
            let got = filter(p, c.node(n).unwrap());
            assert_eq!(got.is_none(), fits, "{} on {n}", p.name());
            if let Some(s) = got {
                assert_eq!(s, Status::unresolvable(Plugin::NodeAffinity, ERR_REASON));
            }
        }
    }

    #[test]
    fn preferred_terms_add_their_weights() {
        let c = cache(
            &[
                labelled("a", json!({"disk": "ssd", "zone": "a"})),
                labelled("b", json!({"disk": "ssd"})),
                labelled("c", json!({})),
            ],
            &[],
        );
        let nodes: Vec<_> = c.nodes().collect();
        let p = pod(
            "p",
            "1",
            json!({"spec": {"affinity": {"nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
                {"weight": 20, "preference": {"matchExpressions": [{"key": "disk", "operator": "In", "values": ["ssd"]}]}},
                {"weight": 60, "preference": {"matchExpressions": [{"key": "zone", "operator": "Exists"}]}},
                {"weight": 0, "preference": {"matchExpressions": [{"key": "disk", "operator": "Exists"}]}}]}}}}),
        );
        assert_eq!(scores(&p, &nodes), [100, 25, 0]);
        assert_eq!(scores(&pod("q", "1", json!({})), &nodes), [0, 0, 0]);
    }
}
