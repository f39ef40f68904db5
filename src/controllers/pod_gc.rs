//! Pod garbage collection (kube-controller-manager's `pod-garbage-collector`):
//! - terminated pods (Succeeded or Failed) beyond `--terminated-pod-gc-threshold` (12,500)
//!   are deleted, oldest first;
//! - pods bound to a node that does not exist are deleted once the node has been seen missing
//!   for 40 s (a quarantine: a node object may be re-created by its agent), after being marked
//!   Failed with the `DisruptionTarget` condition, as upstream;
//! - pods being deleted that were never bound (no kubelet will confirm their end) are deleted
//!   at once.
//!
//! Work comes from changes: a pod turning terminal queues a count of terminated pods (one key,
//! so a burst costs one pass), a pod bound to a missing node or a deleted node queues the pods
//! concerned after the quarantine.

use std::sync::Arc;
use std::time::Duration;

use chrono::Utc;
use serde_json::json;

use super::informer::{Change, Informers, InformersBuilder, KindCache, ObjectName};
use super::objects::{is_deleting, pod_is_terminal};
use super::queue::WorkQueue;
use super::taint_eviction::{pod_node, pods, PODS_BY_NODE};
use super::worker::{Controller, Outcome, ReconcileError};
use super::Shared;
use crate::api::meta::format_time;
use crate::client::{Client, DeleteOptions, PatchKind};

/// How long a node must be missing before its pods are collected.
const QUARANTINE: Duration = Duration::from_secs(40);

#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum GcKey {
    /// Count the terminated pods against the threshold.
    Terminated,
    /// A pod that may be orphaned or stuck terminating.
    Pod(ObjectName),
    /// A node that was deleted: all its pods, after the quarantine.
    Node(String),
}

impl std::fmt::Display for GcKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            GcKey::Terminated => f.write_str("terminated pods"),
            GcKey::Pod(p) => write!(f, "pod {p}"),
            GcKey::Node(n) => write!(f, "node {n}"),
        }
    }
}

pub struct PodGc {
    client: Client,
    /// Nodes seen missing, and since when (the quarantine's start).
    missing_since: parking_lot::Mutex<std::collections::HashMap<String, tokio::time::Instant>>,
    threshold: usize,
    queue: WorkQueue<GcKey>,
    pods: Arc<KindCache>,
    nodes: Arc<KindCache>,
}

impl Controller for PodGc {
    type Key = GcKey;
    const NAME: &'static str = "pod-garbage-collector";
    const WORKERS: usize = 1;

    fn register(builder: &mut InformersBuilder, queue: &WorkQueue<GcKey>) {
        builder.index("pods", PODS_BY_NODE, pod_node);
        let q = queue.clone();
        builder.on_change(
            "pods",
            Arc::new(move |change: Change<'_>| {
                if matches!(change, Change::Deleted(_)) {
                    return;
                }
                let pod = change.object();
                let became_terminal = match change {
                    Change::Modified { old, .. } => {
                        !is_terminal_phase(old) && is_terminal_phase(pod)
                    }
                    _ => is_terminal_phase(pod),
                };
                if became_terminal {
                    // Batched: one pass a second at most, whatever the rate.
                    q.add_after(GcKey::Terminated, Duration::from_secs(1));
                }
                let unbound = pod_node(pod).is_empty();
                if !unbound || pod.is_deleting() {
                    q.add(GcKey::Pod(ObjectName::of(pod)));
                }
            }),
        );
        let q = queue.clone();
        builder.on_change(
            "nodes",
            Arc::new(move |change: Change<'_>| {
                if let Change::Deleted(node) = change {
                    q.add_after(GcKey::Node(node.key.name.clone()), QUARANTINE);
                }
            }),
        );
    }

    fn new(shared: &Shared, informers: &Arc<Informers>, queue: WorkQueue<GcKey>) -> Self {
        PodGc {
            client: shared.controller_manager.clone(),
            missing_since: Default::default(),
            threshold: shared.settings.terminated_pod_gc_threshold,
            queue,
            pods: informers.cache("pods").expect("registered in `register`"),
            nodes: informers.cache("nodes").expect("registered in `register`"),
        }
    }

    async fn reconcile(&self, key: &GcKey) -> Result<Outcome, ReconcileError> {
        match key {
            GcKey::Terminated => self.collect_terminated().await,
            GcKey::Node(node) => {
                // Queued a quarantine after the node's deletion.
                if self.nodes.get("", node).is_some() {
                    self.missing_since.lock().remove(node);
                    return Ok(Outcome::Done);
                }
                let pods = self.pods.by_index(PODS_BY_NODE, node);
                let mut missing = self.missing_since.lock();
                if pods.is_empty() {
                    missing.remove(node);
                } else {
                    missing
                        .entry(node.clone())
                        .or_insert_with(|| tokio::time::Instant::now() - QUARANTINE);
                }
                drop(missing);
                for pod in pods {
                    self.queue.add(GcKey::Pod(ObjectName::of(&pod)));
                }
                Ok(Outcome::Done)
            }
            GcKey::Pod(name) => self.check_pod(name).await,
        }
    }
}

fn is_terminal_phase(pod: &crate::kube::object::StoredObject) -> bool {
    matches!(pod.field("status.phase"), Some("Succeeded" | "Failed"))
}

impl PodGc {
    async fn collect_terminated(&self) -> Result<Outcome, ReconcileError> {
        if self.threshold == 0 {
            return Ok(Outcome::Done);
        }
        let mut terminated: Vec<_> = self
            .pods
            .list(None)
            .into_iter()
            .filter(|p| is_terminal_phase(p) && !p.is_deleting())
            .collect();
        if terminated.len() <= self.threshold {
            return Ok(Outcome::Done);
        }
        // Oldest first: by creationTimestamp, then name (upstream sorts by creation time).
        let mut aged: Vec<(String, Arc<crate::kube::object::StoredObject>)> = terminated
            .drain(..)
            .map(|p| {
                let created = p.value()["metadata"]["creationTimestamp"]
                    .as_str()
                    .unwrap_or("")
                    .to_string();
                (created, p)
            })
            .collect();
        aged.sort_by(|a, b| a.0.cmp(&b.0).then_with(|| a.1.key.cmp(&b.1.key)));
        let excess = aged.len() - self.threshold;
        tracing::info!(
            component = "controllers",
            excess,
            threshold = self.threshold,
            "deleting terminated pods over the threshold"
        );
        for (_, pod) in aged.into_iter().take(excess) {
            self.force_delete(&pod).await?;
        }
        Ok(Outcome::Done)
    }

    async fn check_pod(&self, name: &ObjectName) -> Result<Outcome, ReconcileError> {
        let Some(pod) = self.pods.get(&name.namespace, &name.name) else {
            return Ok(Outcome::Done);
        };
        let Some(node) = pod_node(&pod).pop() else {
            // Never bound and being deleted: nobody else will finish it.
            if pod.is_deleting() {
                self.force_delete(&pod).await?;
            }
            return Ok(Outcome::Done);
        };
        if self.nodes.get("", &node).is_some() {
            self.missing_since.lock().remove(&node);
            return Ok(Outcome::Done);
        }
        // The node is missing: collect the pod once it has been missing for the quarantine.
        let since = *self
            .missing_since
            .lock()
            .entry(node.clone())
            .or_insert_with(tokio::time::Instant::now);
        if since.elapsed() < QUARANTINE {
            return Ok(Outcome::RequeueAfter(
                QUARANTINE - since.elapsed() + Duration::from_millis(100),
            ));
        }
        let value = pod.value();
        let now = Utc::now();
        if !pod_is_terminal(&value) && !is_deleting(&value) {
            let failed = json!({"status": {"phase": "Failed", "conditions": [{
                "type": "DisruptionTarget",
                "status": "True",
                "reason": "DeletionByPodGC",
                "message": "PodGC: node no longer exists",
                "lastTransitionTime": format_time(now),
            }]}});
            let _ = self
                .client
                .patch(
                    pods(),
                    &name.namespace,
                    &name.name,
                    Some("status"),
                    PatchKind::Strategic,
                    &failed,
                )
                .await;
        }
        tracing::info!(component = "controllers", pod = %name, %node, "deleting a pod bound to a node that no longer exists");
        self.force_delete(&pod).await?;
        Ok(Outcome::Done)
    }

    async fn force_delete(
        &self,
        pod: &crate::kube::object::StoredObject,
    ) -> Result<(), ReconcileError> {
        let options = DeleteOptions {
            uid: Some(pod.uid.clone()),
            grace_period_seconds: Some(0),
            ..Default::default()
        };
        match self
            .client
            .delete(pods(), &pod.key.namespace, &pod.key.name, &options)
            .await
        {
            Ok(_) => Ok(()),
            Err(e) if e.is_not_found() || e.is_conflict() => Ok(()),
            Err(e) => Err(e.into()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::controllers::testing::{session, settings, until};
    use crate::kube::object::ObjectKey;
    use crate::kube::resources;

    async fn namespace(client: &Client) {
        client
            .create(
                resources::find("", "v1", "namespaces").unwrap(),
                "",
                &json!({"metadata": {"name": "ns"}}),
            )
            .await
            .unwrap();
    }

    async fn pod(client: &Client, name: &str, node: Option<&str>, phase: Option<&str>) {
        let mut p = json!({"metadata": {"name": name},
            "spec": {"containers": [{"name": "c", "image": "busybox"}]}});
        if let Some(n) = node {
            p["spec"]["nodeName"] = json!(n);
        }
        let created = client.create(pods(), "ns", &p).await.unwrap();
        if let Some(phase) = phase {
            let mut v = created;
            v["status"] = json!({"phase": phase});
            client.update_status(pods(), "ns", name, &v).await.unwrap();
        }
    }

    fn exists(s: &crate::controllers::testing::Session<PodGc>, name: &str) -> bool {
        s.client
            .store()
            .get(&ObjectKey::new("pods", "ns", name))
            .is_some()
    }

    #[tokio::test]
    async fn terminated_pods_over_the_threshold_go_oldest_first() {
        let mut config = settings();
        config.terminated_pod_gc_threshold = 2;
        let s = session::<PodGc>(config, async |c: &Client| {
            namespace(c).await;
            // No Node objects: the pods name a node that exists in no store, which is not
            // this test's concern (those are collected only after the quarantine).
            for (name, phase) in [
                ("a-done", Some("Succeeded")),
                ("b-failed", Some("Failed")),
                ("c-done", Some("Succeeded")),
                ("d-running", Some("Running")),
            ] {
                pod(c, name, Some("n1"), phase).await;
            }
        })
        .await;
        until(|| {
            s.client
                .store()
                .snapshot()
                .range("pods", Some("ns"), None)
                .count()
                == 4
        })
        .await;
        s.controller.reconcile(&GcKey::Terminated).await.unwrap();
        // Same creation second: the names decide; one over the threshold of 2 goes.
        assert!(!exists(&s, "a-done"));
        assert!(exists(&s, "b-failed") && exists(&s, "c-done") && exists(&s, "d-running"));
        s.controller.reconcile(&GcKey::Terminated).await.unwrap();
        until(|| !exists(&s, "a-done")).await;
        assert!(exists(&s, "b-failed"), "at the threshold nothing more goes");
    }

    #[tokio::test]
    async fn an_unbound_pod_being_deleted_is_finished_and_a_bound_one_waits_for_its_node() {
        let s = session::<PodGc>(settings(), async |c: &Client| {
            namespace(c).await;
            c.create(
                resources::find("", "v1", "nodes").unwrap(),
                "",
                &json!({"metadata": {"name": "n1"}}),
            )
            .await
            .unwrap();
            pod(c, "unbound", None, None).await;
            // A finalizer holds it: the delete only marks it.
            c.patch(
                pods(),
                "ns",
                "unbound",
                None,
                PatchKind::Merge,
                &json!({"metadata": {"finalizers": ["test/hold"]}}),
            )
            .await
            .unwrap();
            c.delete(pods(), "ns", "unbound", &DeleteOptions::default())
                .await
                .unwrap();
            pod(c, "bound", Some("n1"), Some("Running")).await;
            pod(c, "orphan", Some("gone"), Some("Running")).await;
        })
        .await;
        let name = |n: &str| ObjectName::new("ns", n);
        until(|| {
            s.client
                .store()
                .snapshot()
                .range("pods", Some("ns"), None)
                .count()
                == 3
        })
        .await;
        // Being deleted, never bound: the delete with grace 0 leaves it to its finalizer.
        s.controller
            .reconcile(&GcKey::Pod(name("unbound")))
            .await
            .unwrap();
        let unbound = s
            .client
            .store()
            .get(&ObjectKey::new("pods", "ns", "unbound"))
            .unwrap()
            .value();
        assert_eq!(unbound["metadata"]["deletionGracePeriodSeconds"], 0);
        // Its node exists: nothing happens.
        assert_eq!(
            s.controller
                .reconcile(&GcKey::Pod(name("bound")))
                .await
                .unwrap(),
            Outcome::Done
        );
        assert!(exists(&s, "bound"));
        // Its node is missing: first the quarantine.
        match s
            .controller
            .reconcile(&GcKey::Pod(name("orphan")))
            .await
            .unwrap()
        {
            Outcome::RequeueAfter(d) => assert!(d > Duration::from_secs(39), "{d:?}"),
            other => panic!("{other:?}"),
        }
        assert!(exists(&s, "orphan"));
    }
}
