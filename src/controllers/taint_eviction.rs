//! Taint-based eviction (kube-controller-manager's `taint-eviction-controller`): a pod on a
//! node with a `NoExecute` taint it does not tolerate is deleted at once; one that tolerates
//! it for `tolerationSeconds` is deleted when that time has passed since the taint's
//! `timeAdded`; one that tolerates it without a limit stays. Before deleting, the pod gets the
//! `DisruptionTarget` condition (reason `DeletionByTaintManager`) and an Event
//! `TaintManagerEviction`, as upstream.
//!
//! Pods are queued when they are bound or change, and all pods of a node when its taints
//! change (an index of pods by node); a pending eviction is a work-queue delay, not a poll.

use std::sync::Arc;
use std::time::Duration;

use chrono::Utc;
use serde_json::{json, Value};

use super::events::{EventRecorder, Involved};
use super::informer::{Change, Informers, InformersBuilder, KindCache, ObjectName};
use super::objects::{is_deleting, parse_time, pod_is_terminal};
use super::queue::WorkQueue;
use super::taints::{node_taints, pod_tolerations, Effect};
use super::worker::{Controller, Outcome, ReconcileError};
use super::Shared;
use crate::api::meta::format_time;
use crate::client::{Client, DeleteOptions, PatchKind};
use crate::kube::object::StoredObject;
use crate::kube::resources::{self, ResourceInfo};

/// The index of pods by `spec.nodeName`.
pub const PODS_BY_NODE: &str = "node";

/// Pods by the node they are bound to.
pub fn pod_node(pod: &StoredObject) -> Vec<String> {
    pod.field("spec.nodeName")
        .filter(|n| !n.is_empty())
        .map(|n| vec![n.to_string()])
        .unwrap_or_default()
}

pub struct TaintEviction {
    queue: WorkQueue<EvictionKey>,
    client: Client,
    events: EventRecorder,
    nodes: Arc<KindCache>,
    pods: Arc<KindCache>,
}

pub(crate) fn pods() -> &'static ResourceInfo {
    resources::find("", "v1", "pods")
        .unwrap_or_else(|| panic!("built-in kind pods is not registered"))
}

/// The NoExecute taints of a node, as (key, value) pairs for comparison.
fn no_execute_keys(node: &StoredObject) -> Vec<(String, String)> {
    let mut keys: Vec<(String, String)> = node_taints(&node.value())
        .into_iter()
        .filter(|t| t.effect == Effect::NoExecute)
        .map(|t| (t.key, t.value))
        .collect();
    keys.sort();
    keys
}

/// What the workers take: a pod to check, or a node whose pods all need checking.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum EvictionKey {
    Node(String),
    Pod(ObjectName),
}

impl std::fmt::Display for EvictionKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            EvictionKey::Node(n) => write!(f, "node {n}"),
            EvictionKey::Pod(p) => write!(f, "pod {p}"),
        }
    }
}

impl Controller for TaintEviction {
    type Key = EvictionKey;
    const NAME: &'static str = "taint-eviction-controller";
    const WORKERS: usize = 2;

    fn register(builder: &mut InformersBuilder, queue: &WorkQueue<EvictionKey>) {
        builder.index("pods", PODS_BY_NODE, pod_node);
        let q = queue.clone();
        builder.on_change(
            "pods",
            Arc::new(move |change: Change<'_>| {
                let pod = change.object();
                if !matches!(change, Change::Deleted(_)) && !pod_node(pod).is_empty() {
                    q.add(EvictionKey::Pod(ObjectName::of(pod)));
                }
            }),
        );
        let q = queue.clone();
        builder.on_change(
            "nodes",
            Arc::new(move |change: Change<'_>| {
                let node = change.object();
                let changed = match change {
                    Change::Added(_) | Change::Resync(_) => !no_execute_keys(node).is_empty(),
                    Change::Modified { old, new } => {
                        let now = no_execute_keys(new);
                        !now.is_empty() && now != no_execute_keys(old)
                    }
                    Change::Deleted(_) => false,
                };
                if changed {
                    q.add(EvictionKey::Node(node.key.name.clone()));
                }
            }),
        );
    }

    fn new(shared: &Shared, informers: &Arc<Informers>, queue: WorkQueue<EvictionKey>) -> Self {
        let pods = informers.cache("pods").expect("registered in `register`");
        let nodes = informers.cache("nodes").expect("registered in `register`");
        TaintEviction {
            queue,
            client: shared.controller_manager.clone(),
            events: EventRecorder::start(
                shared.controller_manager.clone(),
                "taint-eviction-controller",
                &shared.server_name,
                shared.stop.clone(),
            ),
            nodes,
            pods,
        }
    }

    async fn reconcile(&self, key: &EvictionKey) -> Result<Outcome, ReconcileError> {
        let key = match key {
            EvictionKey::Node(node) => {
                for pod in self.pods.by_index(PODS_BY_NODE, node) {
                    self.queue.add(EvictionKey::Pod(ObjectName::of(&pod)));
                }
                return Ok(Outcome::Done);
            }
            EvictionKey::Pod(pod) => pod,
        };
        let Some(pod_ref) = self.pods.get(&key.namespace, &key.name) else {
            return Ok(Outcome::Done);
        };
        let pod = pod_ref.value();
        if is_deleting(&pod) || pod_is_terminal(&pod) {
            return Ok(Outcome::Done);
        }
        let Some(node_name) = pod_node(&pod_ref).pop() else {
            return Ok(Outcome::Done);
        };
        let Some(node) = self.nodes.get("", &node_name) else {
            return Ok(Outcome::Done);
        };
        let taints: Vec<_> = node_taints(&node.value())
            .into_iter()
            .filter(|t| t.effect == Effect::NoExecute)
            .collect();
        if taints.is_empty() {
            return Ok(Outcome::Done);
        }
        let tolerations = pod_tolerations(&pod);
        let now = Utc::now();
        // As upstream's getMinTolerationTime: every NoExecute taint must be tolerated, else
        // now; the tolerations used for them give the shortest limit (≤ 0 is now), none with
        // a limit is forever. The limit runs from the latest taint's `timeAdded`.
        if taints
            .iter()
            .any(|taint| !tolerations.iter().any(|t| t.tolerates(taint)))
        {
            return self.evict(&pod_ref, &pod).await;
        }
        let limit = tolerations
            .iter()
            .filter(|t| taints.iter().any(|taint| t.tolerates(taint)))
            .filter_map(|t| t.seconds)
            .min();
        let added = taints
            .iter()
            .filter_map(|t| t.time_added.as_deref().and_then(parse_time))
            .max()
            .unwrap_or(now);
        let evict_at = limit.map(|seconds| added + chrono::Duration::seconds(seconds.max(0)));
        let Some(at) = evict_at else {
            return Ok(Outcome::Done);
        };
        if at > now {
            let left = (at - now).to_std().unwrap_or_default();
            return Ok(Outcome::RequeueAfter(left + Duration::from_millis(50)));
        }
        self.evict(&pod_ref, &pod).await
    }
}

impl TaintEviction {
    async fn evict(&self, stored: &StoredObject, pod: &Value) -> Result<Outcome, ReconcileError> {
        let (ns, name) = (&stored.key.namespace, &stored.key.name);
        tracing::info!(component = "controllers", pod = %format!("{ns}/{name}"), "evicting a pod from a tainted node");
        self.events.normal(
            Involved::of(pods(), stored),
            "TaintManagerEviction",
            &format!("Marking for deletion Pod {ns}/{name}"),
        );
        let condition = json!({"status": {"conditions": [{
            "type": "DisruptionTarget",
            "status": "True",
            "reason": "DeletionByTaintManager",
            "message": "Taint manager: deleting due to NoExecute taint",
            "lastTransitionTime": format_time(Utc::now()),
        }]}});
        // Best effort: the deletion is what matters.
        let _ = self
            .client
            .patch(
                pods(),
                ns,
                name,
                Some("status"),
                PatchKind::Strategic,
                &condition,
            )
            .await;
        let options = DeleteOptions {
            uid: Some(super::objects::uid(pod).to_string()),
            ..Default::default()
        };
        match self.client.delete(pods(), ns, name, &options).await {
            Ok(_) => Ok(Outcome::Done),
            Err(e) if e.is_not_found() || e.is_conflict() => Ok(Outcome::Done),
            Err(e) => Err(e.into()),
        }
    }
}
