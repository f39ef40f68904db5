//! A rolling update of a DaemonSet's pods (upstream's `rollingUpdate`), run after the per-node
//! pass left every node with at most one old and one new pod. Nodes are visited in name order.
//!
//! Without surge (`maxSurge` 0): new pods not yet available, nodes still missing their pod and
//! nodes with two pods count as unavailable; old pods that are not available are deleted at
//! once, and of the available old pods as many as keep the unavailable count within
//! `maxUnavailable`. The per-node pass then makes their replacements. Deleted pods do not
//! count, so an update goes on past nodes that are down.
//!
//! With surge: a node whose old pod is not available gets its new pod at once; otherwise up
//! to `maxSurge` nodes (less the new pods still becoming available) get a new pod beside the
//! old one; an old pod is deleted once the new one on its node is available. An old pod on a
//! node that no longer takes the set's pods is deleted only while more pods are available than
//! nodes want one, so the set never drops below full availability.
//!
//! Both numbers are read from `desiredNumberScheduled`, rounded up; when both come out 0, one
//! pod may be unavailable.

use std::collections::HashMap;

use chrono::{DateTime, Utc};

use super::placement::NodeFacts;
use super::{by_node, Daemon, DaemonSets};
use crate::controllers::claim::Candidate;
use crate::controllers::objects;
use crate::controllers::worker::ReconcileError;

/// What a rolling update does now.
#[derive(Debug, Default)]
pub struct RollingPlan<'a> {
    pub delete: Vec<&'a Candidate>,
    /// Nodes that get a new pod beside their old one.
    pub create: Vec<String>,
}

/// The new and old pod of a node, `None` when it has more than one of either
/// (`findUpdatedPodsOnNode`: the per-node pass prunes those first).
fn new_and_old<'a>(
    daemon: &Daemon,
    pods: &[&'a Candidate],
    hash: &str,
) -> Option<(Option<&'a Candidate>, Option<&'a Candidate>)> {
    let (mut new, mut old) = (None, None);
    for pod in pods.iter().copied() {
        if objects::is_deleting(&pod.value) {
            continue;
        }
        let slot = if daemon.is_updated(&pod.value, hash) {
            &mut new
        } else {
            &mut old
        };
        if slot.replace(pod).is_some() {
            return None;
        }
    }
    Some((new, old))
}

/// Upstream's `rollingUpdate` with `updatedDesiredNodeCounts`.
pub fn plan<'a>(
    daemon: &Daemon,
    nodes: &[NodeFacts],
    pods: &'a [Candidate],
    hash: &str,
    now: DateTime<Utc>,
) -> Result<RollingPlan<'a>, String> {
    let mut by_node = by_node(pods, false);
    let facts: HashMap<&str, &NodeFacts> = nodes.iter().map(|n| (n.name.as_str(), n)).collect();
    let should_run = |node: &str| {
        facts
            .get(node)
            .is_some_and(|n| daemon.placement.fit(n).should_run())
    };
    let mut desired = 0;
    for node in nodes {
        if daemon.placement.fit(node).should_run() {
            desired += 1;
            by_node.entry(node.name.clone()).or_default();
        }
    }
    let max_surge = daemon.strategy.surge(desired)?;
    let mut max_unavailable = daemon.strategy.unavailable(desired)?;
    if desired > 0 && max_surge == 0 && max_unavailable == 0 {
        max_unavailable = 1;
    }
    let available =
        |pod: &Candidate| objects::pod_is_available(&pod.value, daemon.min_ready_seconds, now);
    let mut plan = RollingPlan::default();

    if max_surge == 0 {
        let mut unavailable = 0;
        let mut candidates = Vec::new();
        for pods in by_node.values() {
            match new_and_old(daemon, pods, hash) {
                // Excess pods: the per-node pass removes them first.
                None => unavailable += 1,
                Some((None, None)) | Some((Some(_), Some(_))) => unavailable += 1,
                Some((Some(new), None)) => {
                    if !available(new) {
                        unavailable += 1;
                    }
                }
                Some((None, Some(old))) => {
                    if !available(old) {
                        plan.delete.push(old);
                        unavailable += 1;
                    } else if unavailable < max_unavailable {
                        candidates.push(old);
                    }
                }
            }
        }
        let room = (max_unavailable - unavailable).clamp(0, candidates.len() as i64) as usize;
        plan.delete.extend(candidates.into_iter().take(room));
        return Ok(plan);
    }

    let mut surging = 0;
    let mut available_count = 0;
    let mut allowed = Vec::new();
    let mut candidates = Vec::new();
    let mut sunset = Vec::new();
    for (node, pods) in &by_node {
        let Some((new, old)) = new_and_old(daemon, pods, hash) else {
            surging += 1;
            continue;
        };
        if let Some(pod) = old.or(new) {
            if available(pod) {
                available_count += 1;
            }
        }
        match (new, old) {
            (_, None) => {}
            (None, Some(old)) if !available(old) => {
                if should_run(node) {
                    allowed.push(node.clone());
                } else {
                    plan.delete.push(old);
                }
            }
            (None, Some(old)) => {
                if !should_run(node) {
                    sunset.push(old);
                } else if surging < max_surge {
                    candidates.push(node.clone());
                }
            }
            (Some(new), Some(old)) => {
                if available(new) {
                    plan.delete.push(old);
                } else {
                    surging += 1;
                }
            }
        }
    }
    // Old pods on nodes that no longer take one go only while availability stays whole.
    let deletable = (available_count - desired).clamp(0, sunset.len() as i64) as usize;
    plan.delete.extend(sunset.into_iter().take(deletable));
    let room = (max_surge - surging).clamp(0, candidates.len() as i64) as usize;
    plan.create = allowed;
    plan.create.extend(candidates.into_iter().take(room));
    Ok(plan)
}

impl DaemonSets {
    pub(super) async fn rolling_update(
        &self,
        daemon: &Daemon,
        nodes: &[NodeFacts],
        pods: &[Candidate],
        hash: &str,
        now: DateTime<Utc>,
    ) -> Result<(), ReconcileError> {
        let plan = plan(daemon, nodes, pods, hash, now).map_err(|e| {
            ReconcileError::Invalid(format!(
                "daemonset {}/{}: {e}",
                daemon.namespace(),
                daemon.name()
            ))
        })?;
        if plan.delete.is_empty() && plan.create.is_empty() {
            return Ok(());
        }
        self.sync_nodes(daemon, &plan.delete, &plan.create, hash)
            .await
    }
}
