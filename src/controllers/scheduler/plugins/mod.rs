//! kube-scheduler's default plugins (1.33), one file per plugin, each a filter (may the pod go
//! to this node, and if not, why) and/or a score (0–100 per feasible node, after the plugin's
//! own normalization), with the default profile's weights:
//!
//! | plugin | filter | score weight |
//! |---|---|---|
//! | `NodeUnschedulable`, `NodeName` ([`node_basics`]) | yes | – |
//! | `TaintToleration` ([`taint_toleration`]) | NoSchedule/NoExecute | 3 (PreferNoSchedule) |
//! | `NodeAffinity` ([`node_affinity`]) | nodeSelector, required terms | 2 (preferred terms) |
//! | `NodePorts` ([`node_ports`]) | host ports | – |
//! | `NodeResourcesFit` ([`node_resources`]) | requests vs allocatable | 1 (LeastAllocated) |
//! | `NodeResourcesBalancedAllocation` ([`node_resources`]) | – | 1 |
//! | `PodTopologySpread` ([`topology_spread`]) | DoNotSchedule | 2 (ScheduleAnyway, system defaults) |
//! | `InterPodAffinity` ([`inter_pod_affinity`]) | required (anti-)affinity | 2 (preferred terms) |
//!
//! Filters run in this order and a node's first refusal is its reason, as upstream. Not
//! built: the volume plugins (PersistentVolumeClaims are not bound by anything here),
//! `ImageLocality` (nodes report no images) and DynamicResources.

pub(crate) mod inter_pod_affinity;
pub(crate) mod node_affinity;
pub(crate) mod node_basics;
pub(crate) mod node_ports;
pub(crate) mod node_resources;
pub(crate) mod taint_toleration;
pub(crate) mod topology_spread;

use super::hints::{self, Hints};

/// The highest score a plugin gives a node (`framework.MaxNodeScore`).
pub const MAX_SCORE: i64 = 100;

/// A filter plugin, as named in upstream's statuses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Plugin {
    NodeUnschedulable,
    NodeName,
    TaintToleration,
    NodeAffinity,
    NodePorts,
    NodeResourcesFit,
    PodTopologySpread,
    InterPodAffinity,
}

impl Plugin {
    /// The cluster changes that may make a node this plugin refused acceptable.
    pub fn hints(self) -> Hints {
        match self {
            Plugin::NodeUnschedulable => hints::NODE_UNSCHEDULABLE,
            Plugin::NodeName => hints::NODE_NAME,
            Plugin::TaintToleration => hints::TAINTS,
            Plugin::NodeAffinity => hints::NODE_AFFINITY,
            Plugin::NodePorts => hints::PORTS,
            Plugin::NodeResourcesFit => hints::RESOURCES,
            Plugin::PodTopologySpread => hints::SPREAD,
            Plugin::InterPodAffinity => hints::INTER_POD_AFFINITY,
        }
    }
}

/// Why a filter refused a node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Status {
    pub plugin: Plugin,
    /// `UnschedulableAndUnresolvable`: removing pods from the node (preemption) cannot help.
    pub unresolvable: bool,
    /// The reasons counted in the "0/N nodes are available" message.
    pub reasons: Vec<String>,
}

impl Status {
    /// `Unschedulable`: the node might take the pod if pods left it.
    pub fn unschedulable(plugin: Plugin, reason: impl Into<String>) -> Status {
        Status {
            plugin,
            unresolvable: false,
            reasons: vec![reason.into()],
        }
    }

    /// `UnschedulableAndUnresolvable`.
    pub fn unresolvable(plugin: Plugin, reason: impl Into<String>) -> Status {
        Status {
            plugin,
            unresolvable: true,
            reasons: vec![reason.into()],
        }
    }
}

/// `helper.DefaultNormalizeScore`: scales scores so the highest is `MAX_SCORE` (all zero stay
/// zero); `reverse` turns high into low (then all zero become `MAX_SCORE`).
pub fn default_normalize(scores: &mut [i64], reverse: bool) {
    let max = scores.iter().copied().max().unwrap_or(0).max(0);
    if max == 0 {
        if reverse {
            scores.iter_mut().for_each(|s| *s = MAX_SCORE);
        }
        return;
    }
    for s in scores.iter_mut() {
        let scaled = MAX_SCORE * *s / max;
        *s = if reverse { MAX_SCORE - scaled } else { scaled };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_normalization_scales_to_the_highest() {
        let cases: &[(&[i64], bool, &[i64])] = &[
            (&[0, 0, 0], false, &[0, 0, 0]),
            (&[0, 0, 0], true, &[100, 100, 100]),
            (&[1, 2, 4], false, &[25, 50, 100]),
            (&[1, 2, 4], true, &[75, 50, 0]),
            (&[3, 0], false, &[100, 0]),
        ];
        for (input, reverse, want) in cases {
            let mut scores = input.to_vec();
            default_normalize(&mut scores, *reverse);
            assert_eq!(&scores, want, "{input:?} reverse={reverse}");
        }
    }
}
