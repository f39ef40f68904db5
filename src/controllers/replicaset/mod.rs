//! The ReplicaSet and ReplicationController controllers (kube-controller-manager's
//! `replicaset-controller` and `replicationcontroller-controller`, one implementation as
//! upstream's ReplicationManager is the ReplicaSet controller under another kind): each owner
//! keeps `spec.replicas` active pods made from its template.
//!
//! A reconcile of one owner:
//! 1. reads the owner and the candidate pods from one store snapshot (pods its selector
//!    matches, and pods it controls, to let go of those that stopped matching), keeps the
//!    active ones (not Succeeded/Failed, not being deleted) and claims them (`claim`:
//!    adopt matching orphans, release what no longer matches, never touch another
//!    controller's pods);
//! 2. unless the owner is being deleted, creates the missing pods in slow-start batches
//!    (at most 500 per reconcile), or deletes the surplus, least valuable first
//!    ([`ranking`]);
//! 3. writes the status through `/status` when it changed ([`status`]), with
//!    `ReplicaFailure` while creates or deletes fail, and comes back when a Ready pod is due
//!    to become available (`minReadySeconds`).
//!
//! Never two pods for one slot: upstream remembers the creates and deletes it asked for
//! ("expectations") because its next sync reads an informer cache that may not show them yet.
//! Here a reconcile reads the store, and a write returns only once this server's store has
//! applied it; a key is reconciled by one worker at a time and each reconcile waits for all
//! its writes, so every reconcile sees every pod the previous ones created or deleted. The
//! informer caches only route changes to keys.

pub(crate) mod ranking;
pub(crate) mod status;

use std::fmt;
use std::marker::PhantomData;
use std::sync::Arc;
use std::time::Duration;

use chrono::Utc;
use serde_json::Value;

use super::claim::{self, Candidate, OwnedChange, RefManager, CONTROLLER_UID_INDEX};
use super::events::{EventRecorder, Involved};
use super::informer::{Change, Informers, InformersBuilder, KindCache, ObjectName};
use super::objects;
use super::pod_control::{self, PodControl, FAILED_CREATE, FAILED_DELETE};
use super::queue::WorkQueue;
use super::worker::{Controller, Outcome, ReconcileError};
use super::Shared;
use crate::client::{Client, ClientError};
use crate::kube::object::{ObjectKey, ObjectRef};
use crate::kube::resources::{self, ResourceInfo};
use crate::kube::selectors::LabelSelector;
use crate::kube::store::StoreSnapshot;
use ranking::PodFacts;
use status::{ManageFailure, ReplicaStatus};

/// Most pods created or deleted by one reconcile (upstream's `BurstReplicas`).
pub const BURST_REPLICAS: usize = 500;
/// A status write that conflicts is retried once on the fresh object, then the key is.
const STATUS_RETRIES: usize = 1;

/// What differs between the ReplicaSet and the ReplicationController controller.
pub trait Flavor: Send + Sync + 'static {
    /// The controller's name in logs.
    const NAME: &'static str;
    /// `source.component` of its events.
    const COMPONENT: &'static str;
    /// The owner kind.
    fn info() -> &'static ResourceInfo;
    /// The owner's selector (`None` selects nothing).
    fn selector(owner: &Value) -> Result<Option<LabelSelector>, String>;
}

/// `apps/v1` ReplicaSets: a `metav1.LabelSelector`.
pub struct ReplicaSetKind;

impl Flavor for ReplicaSetKind {
    const NAME: &'static str = "replicaset-controller";
    const COMPONENT: &'static str = "replicaset-controller";

    fn info() -> &'static ResourceInfo {
        builtin("apps", "v1", "replicasets")
    }

    fn selector(owner: &Value) -> Result<Option<LabelSelector>, String> {
        objects::label_selector(owner.pointer("/spec/selector"))
    }
}

/// `v1` ReplicationControllers: a map of labels.
pub struct ReplicationControllerKind;

impl Flavor for ReplicationControllerKind {
    const NAME: &'static str = "replicationcontroller-controller";
    const COMPONENT: &'static str = "replication-controller";

    fn info() -> &'static ResourceInfo {
        builtin("", "v1", "replicationcontrollers")
    }

    fn selector(owner: &Value) -> Result<Option<LabelSelector>, String> {
        Ok(objects::map_selector(owner.pointer("/spec/selector")))
    }
}

pub type ReplicaSets = Replicas<ReplicaSetKind>;
pub type ReplicationControllers = Replicas<ReplicationControllerKind>;

pub(crate) fn builtin(group: &str, version: &str, plural: &str) -> &'static ResourceInfo {
    resources::find(group, version, plural)
        .unwrap_or_else(|| panic!("built-in kind {plural} is not registered"))
}

/// A work-queue key.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Key {
    /// Reconcile this owner.
    Owner(ObjectName),
    /// Find the owners whose selector matches this orphan pod, and queue them (done by a
    /// worker: it reads every owner of the namespace, too much for the informer's task).
    OrphanPod(ObjectName),
}

impl fmt::Display for Key {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Key::Owner(name) => write!(f, "{name}"),
            Key::OrphanPod(name) => write!(f, "orphan pod {name}"),
        }
    }
}

pub struct Replicas<F: Flavor> {
    client: Client,
    control: PodControl,
    pods: Arc<KindCache>,
    owners: Arc<KindCache>,
    queue: WorkQueue<Key>,
    flavor: PhantomData<F>,
}

impl<F: Flavor> Controller for Replicas<F> {
    type Key = Key;
    const NAME: &'static str = F::NAME;
    const WORKERS: usize = 5;

    fn register(builder: &mut InformersBuilder, queue: &WorkQueue<Key>) {
        let owners = F::info().store_key();
        builder.index("pods", CONTROLLER_UID_INDEX, claim::controller_uid_index);
        builder.index(&owners, CONTROLLER_UID_INDEX, claim::controller_uid_index);
        let q = queue.clone();
        builder.on_change(
            &owners,
            Arc::new(move |change: Change<'_>| {
                q.add(Key::Owner(ObjectName::of(change.object())));
            }),
        );
        let q = queue.clone();
        builder.on_change(
            "pods",
            Arc::new(move |change: Change<'_>| route_pod_change::<F>(&q, change)),
        );
    }

    fn new(shared: &Shared, informers: &Arc<Informers>, queue: WorkQueue<Key>) -> Self {
        let client = shared.controller_manager.clone();
        let recorder = EventRecorder::start(
            client.clone(),
            F::COMPONENT,
            &shared.server_name,
            shared.stop.clone(),
        );
        Replicas {
            control: PodControl::new(client.clone(), recorder),
            client,
            pods: informers.cache("pods").expect("registered in `register`"),
            owners: informers
                .cache(&F::info().store_key())
                .expect("registered in `register`"),
            queue,
            flavor: PhantomData,
        }
    }

    async fn reconcile(&self, key: &Key) -> Result<Outcome, ReconcileError> {
        match key {
            Key::Owner(name) => self.sync(name).await,
            Key::OrphanPod(name) => {
                self.queue_owners_of_orphan(name);
                Ok(Outcome::Done)
            }
        }
    }
}

/// Which keys a pod change concerns: its controller if that is one of ours (the old one too
/// when the reference changed), or, for an orphan that appeared or changed its labels, the
/// owners that may adopt it.
fn route_pod_change<F: Flavor>(queue: &WorkQueue<Key>, change: Change<'_>) {
    claim::route_owned_change(F::info().kind, change, |to| match to {
        OwnedChange::Owner(owner) => queue.add(Key::Owner(owner)),
        OwnedChange::Orphan(pod) => queue.add(Key::OrphanPod(pod)),
    });
}

impl<F: Flavor> Replicas<F> {
    fn queue_owners_of_orphan(&self, pod: &ObjectName) {
        let Some(pod) = self.pods.get(&pod.namespace, &pod.name) else {
            return;
        };
        if claim::controller_of(&pod).is_some() || pod.is_deleting() {
            return;
        }
        for owner in self.owners.list(Some(&pod.key.namespace)) {
            let matches = F::selector(&owner.value())
                .ok()
                .flatten()
                .is_some_and(|s| s.matches(&pod.labels));
            if matches {
                self.queue.add(Key::Owner(ObjectName::of(&owner)));
            }
        }
    }

    async fn sync(&self, name: &ObjectName) -> Result<Outcome, ReconcileError> {
        let info = F::info();
        let snapshot = self.client.store().snapshot();
        let key = ObjectKey::new(info.store_key(), name.namespace.clone(), name.name.clone());
        let Some(stored) = snapshot.get(&key).cloned() else {
            return Ok(Outcome::Done);
        };
        let owner = stored.value();
        let selector = F::selector(&owner).map_err(|e| {
            ReconcileError::Invalid(format!("{} {name}: invalid selector: {e}", info.kind))
        })?;
        let owned = self.pods.by_index(CONTROLLER_UID_INDEX, &stored.uid);
        let candidates: Vec<Candidate> = claim::candidates(
            &snapshot,
            "pods",
            &name.namespace,
            selector.as_ref(),
            &owned,
        )
        .into_iter()
        .map(Candidate::new)
        .filter(|c| objects::pod_is_active(&c.value))
        .collect();
        let pods = RefManager::new(
            &self.client,
            info,
            &owner,
            selector.as_ref(),
            pod_control::pods(),
        )
        .claim(candidates)
        .await?;

        let failure = if objects::is_deleting(&owner) {
            None
        } else {
            self.manage(&stored, &owner, &pods, &snapshot).await.err()
        };

        let now = Utc::now();
        let counted: Vec<_> = pods.iter().map(|p| (&p.object.labels, &p.value)).collect();
        let status = status::calculate(&owner, &counted, failure.as_ref().map(|f| &f.0), now);
        self.write_status(&stored, &owner, status).await?;
        if let Some((_, error)) = failure {
            return Err(error.into());
        }
        let min_ready = owner
            .pointer("/spec/minReadySeconds")
            .and_then(Value::as_i64)
            .unwrap_or(0);
        let values: Vec<&Value> = pods.iter().map(|p| &p.value).collect();
        Ok(match status::next_available(&values, min_ready, now) {
            Some(wait) => Outcome::RequeueAfter(wait + Duration::from_millis(50)),
            None => Outcome::Done,
        })
    }

    /// Creates or deletes pods so that `pods` (the owner's active pods) becomes
    /// `spec.replicas`.
    async fn manage(
        &self,
        stored: &ObjectRef,
        owner: &Value,
        pods: &[Candidate],
        snapshot: &StoreSnapshot,
    ) -> Result<(), (ManageFailure, ClientError)> {
        let info = F::info();
        let replicas = owner
            .pointer("/spec/replicas")
            .and_then(Value::as_i64)
            .unwrap_or(1)
            .max(0) as usize;
        let involved = Involved::of(info, stored);
        let namespace = &stored.key.namespace;
        if pods.len() < replicas {
            let count = (replicas - pods.len()).min(BURST_REPLICAS);
            let Some(template) = owner.pointer("/spec/template").filter(|t| t.is_object()) else {
                let e = ClientError::Status {
                    code: 422,
                    reason: "Invalid".into(),
                    message: format!("{} has no pod template", info.kind),
                };
                return Err(failed(FAILED_CREATE, e));
            };
            // Pods the selector would not find again would be created on every reconcile
            // (the API refuses such owners; a ReplicationController's map is not checked).
            let selected = F::selector(owner)
                .ok()
                .flatten()
                .is_some_and(|s| s.matches(&objects::labels_of(template)));
            if !selected {
                let e = ClientError::Status {
                    code: 422,
                    reason: "Invalid".into(),
                    message: "`selector` does not match template `labels`".into(),
                };
                return Err(failed(FAILED_CREATE, e));
            }
            let reference = objects::new_controller_ref(owner, &info.api_version(), info.kind);
            let (_, error) = pod_control::slow_start_batch(count, 1, || async {
                match self
                    .control
                    .create(namespace, template, &involved, &reference)
                    .await
                {
                    Ok(_) => Ok(()),
                    // Every create fails in a terminating namespace; nothing to report.
                    Err(e) if pod_control::is_namespace_terminating(&e) => Ok(()),
                    Err(e) => Err(e),
                }
            })
            .await;
            return match error {
                Some(e) => Err(failed(FAILED_CREATE, e)),
                None => Ok(()),
            };
        }
        if pods.len() > replicas {
            let count = (pods.len() - replicas).min(BURST_REPLICAS);
            let facts: Vec<PodFacts> = pods.iter().map(|p| PodFacts::of(&p.value)).collect();
            let related = self.related_pod_nodes(owner, snapshot);
            let victims = ranking::pods_to_delete(&facts, &related, count, Utc::now());
            let deletes = victims.iter().map(|&i| {
                let pod = &facts[i];
                self.control
                    .delete(namespace, &pod.name, &pod.uid, &involved)
            });
            let results = futures::future::join_all(deletes).await;
            for result in results {
                match result {
                    Ok(()) => {}
                    Err(e) if e.is_not_found() => {}
                    Err(e) => return Err(failed(FAILED_DELETE, e)),
                }
            }
        }
        Ok(())
    }

    /// The nodes of the active pods of every owner controlled by the same controller as this
    /// one (a Deployment's ReplicaSets), each pod once; none when it has no controller.
    fn related_pod_nodes(&self, owner: &Value, snapshot: &StoreSnapshot) -> Vec<String> {
        let Some(controller) = objects::controller_ref(owner) else {
            return Vec::new();
        };
        let mut seen = std::collections::HashSet::new();
        let mut nodes = Vec::new();
        for sibling in self.owners.by_index(CONTROLLER_UID_INDEX, &controller.uid) {
            let Ok(Some(selector)) = F::selector(&sibling.value()) else {
                continue;
            };
            let matching = claim::candidates(
                snapshot,
                "pods",
                &sibling.key.namespace,
                Some(&selector),
                &[],
            );
            for pod in matching {
                let active = !matches!(pod.field("status.phase"), Some("Succeeded" | "Failed"))
                    && !pod.is_deleting();
                if active && seen.insert(pod.uid.clone()) {
                    nodes.push(pod.field("spec.nodeName").unwrap_or("").to_string());
                }
            }
        }
        nodes
    }

    /// Writes `status` (with the generation it was computed for) unless nothing changed;
    /// a conflict is retried once on the owner as the store holds it now.
    async fn write_status(
        &self,
        stored: &ObjectRef,
        owner: &Value,
        mut status: ReplicaStatus,
    ) -> Result<(), ReconcileError> {
        let generation = owner
            .pointer("/metadata/generation")
            .and_then(Value::as_i64)
            .unwrap_or(0);
        let current = ReplicaStatus::of(owner);
        status.observed_generation = generation;
        if current == status {
            return Ok(());
        }
        let info = F::info();
        let (namespace, name) = (&stored.key.namespace, &stored.key.name);
        let mut object = owner.clone();
        for attempt in 0..=STATUS_RETRIES {
            object["status"] = status.to_value();
            match self
                .client
                .update_status(info, namespace, name, &object)
                .await
            {
                Ok(_) => return Ok(()),
                Err(e) if e.is_conflict() && attempt < STATUS_RETRIES => {
                    let Some(fresh) = self.client.get(info, namespace, name) else {
                        return Ok(());
                    };
                    if fresh.uid != stored.uid {
                        return Ok(());
                    }
                    object = fresh.value();
                }
                Err(e) if e.is_not_found() => return Ok(()),
                Err(e) => return Err(e.into()),
            }
        }
        Ok(())
    }
}

fn failed(reason: &'static str, error: ClientError) -> (ManageFailure, ClientError) {
    (
        ManageFailure {
            reason,
            message: pod_control::status_text(&error),
        },
        error,
    )
}

#[cfg(test)]
mod tests;
