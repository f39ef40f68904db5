//! `TaintToleration`: a node's NoSchedule and NoExecute taints keep away pods that do not
//! tolerate them (the first untolerated one is named in the reason); PreferNoSchedule taints
//! only lower the node's score, by how many the pod does not tolerate (weight 3).

use super::{default_normalize, Plugin, Status};
use crate::controllers::scheduler::node::NodeInfo;
use crate::controllers::scheduler::pod::PodInfo;
use crate::controllers::scheduler::terms::{first_untolerated, tolerated, Taint, Toleration};

pub const WEIGHT: i64 = 3;

/// The reason for a node whose `taint` the pod does not tolerate, as kube-scheduler 1.33
/// words it. (Later releases drop the key and value: "node(s) had untolerated taint(s)".)
pub fn reason(taint: &Taint) -> String {
    format!(
        "node(s) had untolerated taint {{{}: {}}}",
        taint.key, taint.value
    )
}

fn hard(taint: &Taint) -> bool {
    taint.effect == "NoSchedule" || taint.effect == "NoExecute"
}

pub fn filter(pod: &PodInfo, node: &NodeInfo) -> Option<Status> {
    let taint = first_untolerated(&node.spec.taints, &pod.spec.tolerations, hard)?;
    Some(Status::unresolvable(Plugin::TaintToleration, reason(taint)))
}

/// Scores of `nodes` (normalized, before the weight): fewer untolerated PreferNoSchedule
/// taints score higher.
pub fn scores(pod: &PodInfo, nodes: &[&NodeInfo]) -> Vec<i64> {
    // Only tolerations that can tolerate PreferNoSchedule count.
    let tolerations: Vec<Toleration> = pod
        .spec
        .tolerations
        .iter()
        .filter(|t| t.effect.is_empty() || t.effect == "PreferNoSchedule")
        .cloned()
        .collect();
    let mut scores: Vec<i64> = nodes
        .iter()
        .map(|n| {
            n.spec
                .taints
                .iter()
                .filter(|t| t.effect == "PreferNoSchedule" && !tolerated(&tolerations, t))
                .count() as i64
        })
        .collect();
    default_normalize(&mut scores, true);
    scores
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::controllers::scheduler::testing::{cache, node, pod};
    use serde_json::json;

    fn tainted(name: &str, taints: serde_json::Value) -> crate::kube::object::ObjectRef {
        node(name, json!({"spec": {"taints": taints}}))
    }

    #[test]
    fn untolerated_hard_taints_refuse_the_node_naming_the_first() {
        let c = cache(
            &[
                tainted("clean", json!([])),
                tainted("soft", json!([{"key": "s", "effect": "PreferNoSchedule"}])),
                tainted(
                    "gpu",
                    json!([{"key": "gpu", "value": "true", "effect": "NoSchedule"}]),
                ),
                tainted(
                    "drain",
                    json!([{"key": "soft", "effect": "PreferNoSchedule"},
                                        {"key": "node.kubernetes.io/unreachable", "effect": "NoExecute"},
                                        {"key": "gpu", "value": "true", "effect": "NoSchedule"}]),
                ),
            ],
            &[],
        );
        let plain = pod("p", "1", json!({}));
        let gpu = pod(
            "g",
            "1",
            json!({"spec": {"tolerations": [{"key": "gpu", "operator": "Equal", "value": "true",
                                             "effect": "NoSchedule"}]}}),
        );
        let cases = [
            (&plain, "clean", None),
            (&plain, "soft", None),
            (
                &plain,
                "gpu",
                Some("node(s) had untolerated taint {gpu: true}"),
            ),
            (&gpu, "gpu", None),
            (
                &gpu,
                "drain",
                Some("node(s) had untolerated taint {node.kubernetes.io/unreachable: }"),
            ),
            (
                &plain,
                "drain",
                Some("node(s) had untolerated taint {node.kubernetes.io/unreachable: }"),
            ),
        ];
        for (p, n, want) in cases {
            let got = filter(p, c.node(n).unwrap());
            assert_eq!(
                got.as_ref().map(|s| s.reasons[0].as_str()),
                want,
                "{} on {n}",
                p.name()
            );
            if let Some(s) = got {
                assert!(s.unresolvable);
            }
        }
    }

    #[test]
    fn prefer_no_schedule_taints_lower_the_score() {
        let c = cache(
            &[
                tainted("a", json!([])),
                tainted("b", json!([{"key": "x", "effect": "PreferNoSchedule"}])),
                tainted(
                    "c",
                    json!([{"key": "x", "effect": "PreferNoSchedule"},
                                    {"key": "y", "effect": "PreferNoSchedule"},
                                    {"key": "z", "effect": "NoSchedule"}]),
                ),
            ],
            &[],
        );
        let nodes: Vec<_> = c.nodes().collect();
        let plain = pod("p", "1", json!({}));
        assert_eq!(scores(&plain, &nodes), [100, 50, 0]);
        let tolerant = pod(
            "t",
            "1",
            json!({"spec": {"tolerations": [{"key": "x", "operator": "Exists"}]}}),
        );
        assert_eq!(scores(&tolerant, &nodes), [100, 100, 0]);
        // A toleration for another effect does not count.
        let wrong_effect = pod(
            "w",
            "1",
            json!({"spec": {"tolerations": [{"key": "x", "operator": "Exists",
                                             "effect": "NoSchedule"}]}}),
        );
        assert_eq!(scores(&wrong_effect, &nodes), [100, 50, 0]);
    }
}
