//! One pod per node (upstream's `manage`, `podsShouldBeOnNode` and `syncNodes`): for each node,
//! what its daemon pods must become, then the creates and deletes, at most
//! [`BURST_REPLICAS`] of each per reconcile, creates in slow-start batches.
//!
//! On a node that should run the pod and has none, one is created. On a node where a pod may
//! stay: a failed pod is deleted (once per backoff period per node, so a kubelet that keeps
//! rejecting the pod is not fought in a hot loop: [`FailedPodBackoff`]), a succeeded one too,
//! and of the running ones only the oldest is kept; while surging, the oldest new and the
//! oldest old pod may both stay until the new one is available (or the old one not ready). On a
//! node that takes no pod, every pod is deleted. Unbound pods meant for a node that no longer
//! exists are deleted (the pod garbage collector only removes bound ones).

use std::collections::HashMap;
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use serde_json::{json, Value};

use super::placement::{self, NodeFacts};
use super::{by_node, oldest_first, Daemon, DaemonSets, TEMPLATE_GENERATION_LABEL};
use crate::controllers::claim::Candidate;
use crate::controllers::history::REVISION_HASH;
use crate::controllers::objects;
use crate::controllers::pod_control::{self, is_namespace_terminating};
use crate::controllers::worker::ReconcileError;

/// Most pods created, and most deleted, by one reconcile (upstream's `BurstReplicas`).
pub const BURST_REPLICAS: usize = 250;
/// The first wait before a node's next failed pod is deleted, and the longest
/// (upstream's `failedPodsBackoff`: 1 s doubling to 15 min).
const BACKOFF_INITIAL: Duration = Duration::from_secs(1);
const BACKOFF_MAX: Duration = Duration::from_secs(15 * 60);

/// What a reconcile's per-node pass decided.
#[derive(Debug, Default)]
pub struct NodePlan<'a> {
    /// Nodes that get a new pod.
    pub create: Vec<String>,
    /// Pods to delete.
    pub delete: Vec<&'a Candidate>,
    /// Failed pods to delete (each after its node's backoff allows it), with their node.
    pub failed: Vec<(&'a Candidate, String)>,
    /// Succeeded pods to delete, with their node.
    pub succeeded: Vec<(&'a Candidate, String)>,
}

/// What `manage` did.
#[derive(Debug, Default)]
pub struct Managed {
    /// Whether it created or deleted any pod.
    pub changed: bool,
    /// When a failed pod held back by its backoff may be deleted.
    pub retry_after: Option<Duration>,
}

/// Upstream's `podsShouldBeOnNode` over every node, and `getUnscheduledPodsWithoutNode`.
pub fn plan<'a>(
    daemon: &Daemon,
    nodes: &[NodeFacts],
    pods: &'a [Candidate],
    hash: &str,
) -> NodePlan<'a> {
    let mut plan = NodePlan::default();
    let by_node = by_node(pods, true);
    let surge = daemon.strategy.allows_surge();
    for node in nodes {
        let fit = daemon.placement.fit(node);
        let daemon_pods = by_node.get(&node.name);
        match daemon_pods {
            None if fit.should_run() => plan.create.push(node.name.clone()),
            None => {}
            Some(list) if fit.should_continue() => {
                let mut running: Vec<&Candidate> = Vec::new();
                for pod in list.iter().copied() {
                    if objects::is_deleting(&pod.value) {
                        continue;
                    }
                    match objects::pod_phase(&pod.value) {
                        "Failed" => plan.failed.push((pod, node.name.clone())),
                        "Succeeded" => plan.succeeded.push((pod, node.name.clone())),
                        _ => running.push(pod),
                    }
                }
                oldest_first(&mut running);
                if !surge {
                    plan.delete.extend(running.iter().skip(1));
                    continue;
                }
                if running.is_empty() {
                    // While surging a node still needs one pod not being deleted.
                    if fit.should_run() {
                        plan.create.push(node.name.clone());
                    }
                    continue;
                }
                let (mut oldest_new, mut oldest_old) = (None, None);
                for pod in running {
                    let slot = if daemon.is_updated(&pod.value, hash) {
                        &mut oldest_new
                    } else {
                        &mut oldest_old
                    };
                    match slot {
                        None => *slot = Some(pod),
                        Some(_) => plan.delete.push(pod),
                    }
                }
                if let (Some(new), Some(old)) = (oldest_new, oldest_old) {
                    let now = chrono::Utc::now();
                    if !objects::pod_is_ready(&old.value)
                        || objects::pod_is_available(&new.value, daemon.min_ready_seconds, now)
                    {
                        plan.delete.push(old);
                    }
                }
            }
            Some(list) => plan.delete.extend(
                list.iter()
                    .copied()
                    .filter(|p| !objects::is_deleting(&p.value)),
            ),
        }
    }
    let known: std::collections::HashSet<&str> = nodes.iter().map(|n| n.name.as_str()).collect();
    for (node, list) in &by_node {
        if known.contains(node.as_str()) {
            continue;
        }
        plan.delete.extend(list.iter().copied().filter(|p| {
            p.value
                .pointer("/spec/nodeName")
                .and_then(Value::as_str)
                .is_none_or(str::is_empty)
        }));
    }
    plan
}

/// The failed-pod backoff per set, generation and node (upstream's `failedPodsBackoff`,
/// keyed as `failedPodsBackoffKey`).
#[derive(Default)]
pub struct FailedPodBackoff {
    entries: Mutex<HashMap<String, Entry>>,
}

#[derive(Debug, Clone, Copy)]
struct Entry {
    delay: Duration,
    updated: Instant,
}

impl FailedPodBackoff {
    /// `Ok` when a failed pod on the node may be deleted now (the backoff then grows), or the
    /// time left before it may.
    pub fn attempt(&self, key: &str, now: Instant) -> Result<(), Duration> {
        let mut entries = self.entries.lock();
        // Entries untouched for twice the longest delay are forgotten (upstream's GC), which
        // also bounds the map to the nodes failing recently.
        entries.retain(|_, e| now.saturating_duration_since(e.updated) <= 2 * BACKOFF_MAX);
        match entries.get_mut(key) {
            Some(entry) if now.saturating_duration_since(entry.updated) < entry.delay => {
                Err(entry.delay - now.saturating_duration_since(entry.updated))
            }
            Some(entry) => {
                entry.delay = (entry.delay * 2).min(BACKOFF_MAX);
                entry.updated = now;
                Ok(())
            }
            None => {
                entries.insert(
                    key.to_string(),
                    Entry {
                        delay: BACKOFF_INITIAL,
                        updated: now,
                    },
                );
                Ok(())
            }
        }
    }
}

impl DaemonSets {
    /// Runs [`plan`] and makes its creates and deletes.
    pub(super) async fn manage(
        &self,
        daemon: &Daemon,
        nodes: &[NodeFacts],
        pods: &[Candidate],
        hash: &str,
    ) -> Result<Managed, ReconcileError> {
        let plan = plan(daemon, nodes, pods, hash);
        let mut managed = Managed::default();
        let mut delete = plan.delete;
        let involved = daemon.involved();
        let now = Instant::now();
        for (pod, node) in plan.failed {
            let key = format!(
                "{}/{}/{node}",
                daemon.uid(),
                daemon.status.observed_generation
            );
            match self.backoff.attempt(&key, now) {
                Ok(()) => {
                    self.recorder.warning(
                        involved.clone(),
                        "FailedDaemonPod",
                        &format!(
                            "Found failed daemon pod {}/{} on node {node}, will try to kill it",
                            daemon.namespace(),
                            pod.name()
                        ),
                    );
                    delete.push(pod);
                }
                Err(wait) => {
                    managed.retry_after = Some(managed.retry_after.map_or(wait, |r| r.min(wait)));
                }
            }
        }
        for (pod, node) in plan.succeeded {
            self.recorder.normal(
                involved.clone(),
                "SucceededDaemonPod",
                &format!(
                    "Found succeeded daemon pod {}/{} on node {node}, will try to delete it",
                    daemon.namespace(),
                    pod.name()
                ),
            );
            delete.push(pod);
        }
        managed.changed = !plan.create.is_empty() || !delete.is_empty();
        self.sync_nodes(daemon, &delete, &plan.create, hash).await?;
        Ok(managed)
    }

    /// Deletes `delete` and creates a pod on each of `create` (upstream's `syncNodes`).
    pub(super) async fn sync_nodes(
        &self,
        daemon: &Daemon,
        delete: &[&Candidate],
        create: &[String],
        hash: &str,
    ) -> Result<(), ReconcileError> {
        let involved = daemon.involved();
        let template = self.pod_template(daemon, hash);
        let controller_ref = objects::new_controller_ref(&daemon.value, "apps/v1", "DaemonSet");
        let create = &create[..create.len().min(BURST_REPLICAS)];
        let mut next = 0;
        let (_, create_error) = pod_control::slow_start_batch(create.len(), 1, || {
            let node = &create[next];
            next += 1;
            let pod = placement::pod_template_for(&template, node);
            let (involved, controller_ref) = (&involved, &controller_ref);
            async move {
                match self
                    .pod_control
                    .create(daemon.namespace(), &pod, involved, controller_ref)
                    .await
                {
                    Ok(_) => Ok(()),
                    // Every create fails the same way; nothing is wrong with the set.
                    Err(e) if is_namespace_terminating(&e) => Ok(()),
                    Err(e) => Err(e),
                }
            }
        })
        .await;
        let deletes = delete.iter().take(BURST_REPLICAS).map(|pod| {
            let involved = &involved;
            async move {
                match self
                    .pod_control
                    .delete(daemon.namespace(), pod.name(), &pod.object.uid, involved)
                    .await
                {
                    Err(e) if !e.is_not_found() => Err(e),
                    _ => Ok(()),
                }
            }
        });
        let delete_error = futures::future::join_all(deletes)
            .await
            .into_iter()
            .find_map(Result::err);
        match create_error.or(delete_error) {
            Some(e) => Err(e.into()),
            None => Ok(()),
        }
    }

    /// The set's template with the labels of its current revision (upstream's
    /// `CreatePodTemplate`).
    fn pod_template(&self, daemon: &Daemon, hash: &str) -> Value {
        let mut template = daemon.template.clone();
        if !template["metadata"].is_object() {
            template["metadata"] = json!({});
        }
        let labels = &mut template["metadata"]["labels"];
        if !labels.is_object() {
            *labels = json!({});
        }
        if let Some(generation) = &daemon.template_generation {
            labels[TEMPLATE_GENERATION_LABEL] = json!(generation);
        }
        if !hash.is_empty() {
            labels[REVISION_HASH] = json!(hash);
        }
        template
    }
}
