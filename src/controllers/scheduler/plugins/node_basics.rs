//! `NodeUnschedulable` and `NodeName`: a cordoned node (`spec.unschedulable`) takes only pods
//! that tolerate the `node.kubernetes.io/unschedulable:NoSchedule` taint, and a pod that names
//! a node goes nowhere else.
//!
//! A NotReady node is not refused here: kube-scheduler leaves that to the taints the node
//! lifecycle controller puts on it (`node.kubernetes.io/not-ready`, `unreachable`).

use super::{Plugin, Status};
use crate::controllers::scheduler::node::NodeInfo;
use crate::controllers::scheduler::pod::PodInfo;
use crate::controllers::scheduler::terms::{tolerated, Taint};

pub const ERR_UNSCHEDULABLE: &str = "node(s) were unschedulable";
pub const ERR_NODE_NAME: &str = "node(s) didn't match the requested node name";

/// The taint a cordoned node stands for.
pub const UNSCHEDULABLE_TAINT: &str = "node.kubernetes.io/unschedulable";

pub fn node_unschedulable(pod: &PodInfo, node: &NodeInfo) -> Option<Status> {
    if !node.spec.unschedulable {
        return None;
    }
    let taint = Taint {
        key: UNSCHEDULABLE_TAINT.into(),
        value: String::new(),
        effect: "NoSchedule".into(),
    };
    if tolerated(&pod.spec.tolerations, &taint) {
        return None;
    }
    Some(Status::unresolvable(
        Plugin::NodeUnschedulable,
        ERR_UNSCHEDULABLE,
    ))
}

pub fn node_name(pod: &PodInfo, node: &NodeInfo) -> Option<Status> {
    let wanted = &pod.spec.node_name;
    (!wanted.is_empty() && **wanted != *node.name)
        .then(|| Status::unresolvable(Plugin::NodeName, ERR_NODE_NAME))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::controllers::scheduler::testing::{cache, node, pod};
    use serde_json::json;

    #[test]
    fn cordoned_nodes_take_only_pods_tolerating_the_unschedulable_taint() {
        let c = cache(
            &[
                node("open", json!({})),
                node("cordoned", json!({"spec": {"unschedulable": true}})),
            ],
            &[],
        );
        let plain = pod("p", "1", json!({}));
        let tolerant = pod(
            "t",
            "1",
            json!({"spec": {"tolerations": [{"key": UNSCHEDULABLE_TAINT, "operator": "Exists",
                                             "effect": "NoSchedule"}]}}),
        );
        let everything = pod(
            "e",
            "1",
            json!({"spec": {"tolerations": [{"operator": "Exists"}]}}),
        );
        let cases = [
            (&plain, "open", None),
            (
                &plain,
                "cordoned",
                Some(Status::unresolvable(
                    Plugin::NodeUnschedulable,
                    ERR_UNSCHEDULABLE,
                )),
            ),
            (&tolerant, "cordoned", None),
            (&everything, "cordoned", None),
        ];
        for (p, n, want) in cases {
            assert_eq!(
                node_unschedulable(p, c.node(n).unwrap()),
                want,
                "{} on {n}",
                p.name()
            );
        }
    }

    #[test]
    fn a_named_node_is_the_only_one() {
        let c = cache(&[node("n1", json!({})), node("n2", json!({}))], &[]);
        let anywhere = pod("p", "1", json!({}));
        let named = pod("q", "1", json!({"spec": {"nodeName": "n1"}}));
        assert_eq!(node_name(&anywhere, c.node("n2").unwrap()), None);
        assert_eq!(node_name(&named, c.node("n1").unwrap()), None);
        assert_eq!(
            node_name(&named, c.node("n2").unwrap()),
            Some(Status::unresolvable(Plugin::NodeName, ERR_NODE_NAME))
        );
    }
}
