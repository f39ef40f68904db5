//! The Deployment controller (kube-controller-manager's `deployment-controller`): a Deployment
//! owns ReplicaSets, one per pod template it has had, and moves pods from the old ones to the
//! new one with its strategy.
//!
//! A reconcile (upstream's `syncDeployment`) reads the Deployment and its ReplicaSets from one
//! store snapshot, claims the ReplicaSets (`claim`: adopt matching orphans, release those that
//! stopped matching), then, in upstream's order:
//! - a Deployment being deleted only gets its status;
//! - paused/resumed Deployments get the `Progressing` Unknown condition (`DeploymentPaused`,
//!   `DeploymentResumed`), so time spent paused never counts against the progress deadline;
//! - paused, or resized (a ReplicaSet's `desired-replicas` differs from `spec.replicas`): the
//!   ReplicaSets are resized in proportion (`sync::scale`), no rollout step is taken;
//! - otherwise one step of the strategy: [`rolling`] (the new ReplicaSet grows while the total
//!   stays within `replicas + maxSurge`, old ones shrink while the available pods stay at
//!   least `replicas - maxUnavailable`) or [`recreate`] (old ones to zero, and once none of
//!   their pods runs, the new one to full size);
//! - the status, conditions `Available`/`Progressing`/`ReplicaFailure` with upstream's
//!   reasons and messages, and `progressDeadlineSeconds` ([`progress`]).
//!
//! The new ReplicaSet is `<deployment>-<hash>` (`template::compute_hash` of the pod template
//! and `status.collisionCount`) with the `pod-template-hash` label added to its selector and
//! template; revisions live in the `deployment.kubernetes.io/revision` annotations
//! ([`replica_sets`]). `kubectl rollout undo` (kubectl ≥ 1.27) writes an old ReplicaSet's
//! template back into the Deployment; that ReplicaSet is then found as the new one again
//! (templates are compared, not names) and gets the next revision, its previous ones in
//! `revision-history`. Old ReplicaSets beyond `revisionHistoryLimit` are deleted once they
//! are empty.
//!
//! Differences from upstream, each on the safe side of the rollout's bounds: the total that a
//! new pod must fit under counts an old ReplicaSet at its `status.replicas` while that exceeds
//! its size (its controller has not yet seen its own deletions), and a ReplicaSet's available
//! pods count at most up to its size (its status may still count pods being deleted). So a
//! lagging status never lets a watcher see more than `replicas + maxSurge` pods or fewer than
//! `replicas - maxUnavailable` available. The Deployment's revision annotation is written with
//! a patch of the object (upstream sends it with the status update, which this API's status
//! subresource does not take metadata from). The deprecated `rollbackTo` annotation is not
//! acted on: no client of `apps/v1` sets it.

pub(crate) mod fenceposts;
mod progress;
mod recreate;
pub(crate) mod replica_sets;
mod rolling;
pub(crate) mod status;
mod sync;

use std::fmt;
use std::sync::Arc;

use serde_json::Value;

use super::claim::{self, Candidate, OwnedChange, RefManager, CONTROLLER_UID_INDEX};
use super::events::{EventRecorder, Involved};
use super::informer::{Change, Informers, InformersBuilder, KindCache, ObjectName};
use super::objects;
use super::queue::WorkQueue;
use super::replicaset::builtin;
use super::worker::{Controller, Outcome, ReconcileError};
use super::Shared;
use crate::client::Client;
use crate::kube::object::{ObjectKey, ObjectRef};
use crate::kube::resources::ResourceInfo;
use crate::kube::selectors::LabelSelector;
use crate::kube::store::StoreSnapshot;
use replica_sets::Rs;
use status::DeploymentStatus;

fn deployments() -> &'static ResourceInfo {
    builtin("apps", "v1", "deployments")
}

fn replicasets() -> &'static ResourceInfo {
    builtin("apps", "v1", "replicasets")
}

/// The strategy of a Deployment.
#[derive(Debug, Clone, PartialEq)]
pub enum Strategy {
    Recreate,
    /// The resolved bounds for `spec.replicas` (`fenceposts::resolve`).
    RollingUpdate {
        max_surge: i64,
        max_unavailable: i64,
    },
}

/// What the controller reads from a Deployment's spec.
#[derive(Debug, Clone)]
pub struct Spec {
    pub replicas: i64,
    pub strategy: Strategy,
    pub min_ready_seconds: i64,
    pub revision_history_limit: Option<i64>,
    pub progress_deadline_seconds: Option<i64>,
    pub paused: bool,
    pub selector: LabelSelector,
    /// Whether `spec.selector` is `{}` (selects every pod; refused, as upstream).
    pub selects_all: bool,
    pub template: Value,
}

/// One Deployment during a reconcile.
#[derive(Debug, Clone)]
pub struct Deployment {
    /// As read at the start (events refer to it).
    pub stored: ObjectRef,
    /// As last written by this reconcile (its resourceVersion is the next write's
    /// precondition).
    pub value: Value,
    /// `metadata.generation` when read: what the status reports as observed.
    pub generation: i64,
    pub spec: Spec,
    pub status: DeploymentStatus,
}

impl Deployment {
    /// Reads a stored Deployment; an error names what is not usable.
    pub fn parse(stored: ObjectRef) -> Result<Deployment, String> {
        let value = stored.value();
        let int = |pointer: &str| value.pointer(pointer).and_then(Value::as_i64);
        let replicas = int("/spec/replicas").unwrap_or(1).max(0);
        let strategy = match value
            .pointer("/spec/strategy/type")
            .and_then(Value::as_str)
            .unwrap_or("RollingUpdate")
        {
            "Recreate" => Strategy::Recreate,
            "RollingUpdate" => {
                let (max_surge, max_unavailable) = fenceposts::resolve(
                    value.pointer("/spec/strategy/rollingUpdate/maxSurge"),
                    value.pointer("/spec/strategy/rollingUpdate/maxUnavailable"),
                    replicas,
                )?;
                Strategy::RollingUpdate {
                    max_surge,
                    max_unavailable,
                }
            }
            other => return Err(format!("unexpected deployment strategy type: {other}")),
        };
        let selector_value = value.pointer("/spec/selector");
        let selects_all =
            selector_value.is_some_and(|s| s.as_object().is_some_and(|m| m.is_empty()));
        let selector = objects::label_selector(selector_value)
            .map_err(|e| format!("invalid label selector: {e}"))?
            .ok_or("spec.selector is required")?;
        let spec = Spec {
            replicas,
            strategy,
            min_ready_seconds: int("/spec/minReadySeconds").unwrap_or(0),
            revision_history_limit: int("/spec/revisionHistoryLimit"),
            progress_deadline_seconds: int("/spec/progressDeadlineSeconds"),
            paused: value
                .pointer("/spec/paused")
                .and_then(Value::as_bool)
                .unwrap_or(false),
            selector,
            selects_all,
            template: value
                .pointer("/spec/template")
                .cloned()
                .unwrap_or_else(|| serde_json::json!({})),
        };
        Ok(Deployment {
            generation: int("/metadata/generation").unwrap_or(0),
            status: DeploymentStatus::of(&value),
            stored,
            value,
            spec,
        })
    }

    pub fn namespace(&self) -> &str {
        &self.stored.key.namespace
    }

    pub fn name(&self) -> &str {
        &self.stored.key.name
    }

    pub fn is_rolling(&self) -> bool {
        matches!(self.spec.strategy, Strategy::RollingUpdate { .. })
    }

    /// Upstream's `MaxSurge`: 0 unless rolling.
    pub fn max_surge(&self) -> i64 {
        match self.spec.strategy {
            Strategy::RollingUpdate { max_surge, .. } => max_surge,
            Strategy::Recreate => 0,
        }
    }

    /// Upstream's `MaxUnavailable`: 0 unless rolling with replicas, at most the replicas.
    pub fn max_unavailable(&self) -> i64 {
        match self.spec.strategy {
            Strategy::RollingUpdate {
                max_unavailable, ..
            } if self.spec.replicas > 0 => max_unavailable.min(self.spec.replicas),
            _ => 0,
        }
    }

    /// A progress deadline other than "never" (math.MaxInt32).
    pub fn has_progress_deadline(&self) -> bool {
        self.spec
            .progress_deadline_seconds
            .is_some_and(|s| s != i64::from(i32::MAX))
    }

    /// Takes the answer of a write of this Deployment as its current value.
    fn written(&mut self, value: Value) {
        self.status = DeploymentStatus::of(&value);
        self.value = value;
    }

    fn involved(&self) -> Involved {
        Involved::of(deployments(), &self.stored)
    }
}

/// A work-queue key.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Key {
    /// Reconcile this Deployment.
    Deployment(ObjectName),
    /// Queue the Deployments whose selector matches this orphan ReplicaSet.
    OrphanReplicaSet(ObjectName),
    /// Queue the Deployment that controls this ReplicaSet (one of its pods went away).
    ReplicaSetOwner(ObjectName),
}

impl fmt::Display for Key {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Key::Deployment(name) => write!(f, "{name}"),
            Key::OrphanReplicaSet(name) => write!(f, "orphan replicaset {name}"),
            Key::ReplicaSetOwner(name) => write!(f, "owner of replicaset {name}"),
        }
    }
}

pub struct Deployments {
    client: Client,
    recorder: EventRecorder,
    deployments: Arc<KindCache>,
    replica_sets: Arc<KindCache>,
    queue: WorkQueue<Key>,
}

impl Controller for Deployments {
    type Key = Key;
    const NAME: &'static str = "deployment-controller";
    const WORKERS: usize = 5;

    fn register(builder: &mut InformersBuilder, queue: &WorkQueue<Key>) {
        builder.index(
            "apps/replicasets",
            CONTROLLER_UID_INDEX,
            claim::controller_uid_index,
        );
        let q = queue.clone();
        builder.on_change(
            "apps/deployments",
            Arc::new(move |change: Change<'_>| {
                q.add(Key::Deployment(ObjectName::of(change.object())));
            }),
        );
        let q = queue.clone();
        builder.on_change(
            "apps/replicasets",
            Arc::new(move |change: Change<'_>| route_replica_set_change(&q, change)),
        );
        let q = queue.clone();
        builder.on_change(
            "pods",
            Arc::new(move |change: Change<'_>| {
                // Recreate waits for the old pods to be gone; their deletion says so.
                if let Change::Deleted(pod) = change {
                    if let Some(r) = claim::controller_of(pod).filter(|r| r.kind == "ReplicaSet") {
                        q.add(Key::ReplicaSetOwner(ObjectName::new(
                            pod.key.namespace.clone(),
                            r.name,
                        )));
                    }
                }
            }),
        );
    }

    fn new(shared: &Shared, informers: &Arc<Informers>, queue: WorkQueue<Key>) -> Self {
        let client = shared.controller_manager.clone();
        Deployments {
            recorder: EventRecorder::start(
                client.clone(),
                "deployment-controller",
                &shared.server_name,
                shared.stop.clone(),
            ),
            client,
            deployments: informers
                .cache("apps/deployments")
                .expect("registered in `register`"),
            replica_sets: informers
                .cache("apps/replicasets")
                .expect("registered in `register`"),
            queue,
        }
    }

    async fn reconcile(&self, key: &Key) -> Result<Outcome, ReconcileError> {
        match key {
            Key::Deployment(name) => self.sync_deployment(name).await,
            Key::OrphanReplicaSet(name) => {
                self.queue_deployments_of_orphan(name);
                Ok(Outcome::Done)
            }
            Key::ReplicaSetOwner(name) => {
                if let Some(rs) = self.replica_sets.get(&name.namespace, &name.name) {
                    if let Some(r) = claim::controller_of(&rs).filter(|r| r.kind == "Deployment") {
                        self.queue.add(Key::Deployment(ObjectName::new(
                            name.namespace.clone(),
                            r.name,
                        )));
                    }
                }
                Ok(Outcome::Done)
            }
        }
    }
}

/// A ReplicaSet change concerns its controlling Deployment (and the previous one when the
/// reference changed); an orphan that appeared or changed labels may be adopted.
fn route_replica_set_change(queue: &WorkQueue<Key>, change: Change<'_>) {
    claim::route_owned_change("Deployment", change, |to| match to {
        OwnedChange::Owner(deployment) => queue.add(Key::Deployment(deployment)),
        OwnedChange::Orphan(rs) => queue.add(Key::OrphanReplicaSet(rs)),
    });
}

impl Deployments {
    fn queue_deployments_of_orphan(&self, name: &ObjectName) {
        let Some(rs) = self.replica_sets.get(&name.namespace, &name.name) else {
            return;
        };
        if claim::controller_of(&rs).is_some() || rs.is_deleting() {
            return;
        }
        for d in self.deployments.list(Some(&name.namespace)) {
            let value = d.value();
            let matches = objects::label_selector(value.pointer("/spec/selector"))
                .ok()
                .flatten()
                .is_some_and(|s| !s.is_empty() && s.matches(&rs.labels));
            if matches {
                self.queue.add(Key::Deployment(ObjectName::of(&d)));
            }
        }
    }

    /// Upstream's `syncDeployment`.
    async fn sync_deployment(&self, name: &ObjectName) -> Result<Outcome, ReconcileError> {
        let snapshot = self.client.store().snapshot();
        let key = ObjectKey::new(
            deployments().store_key(),
            name.namespace.clone(),
            name.name.clone(),
        );
        let Some(stored) = snapshot.get(&key).cloned() else {
            return Ok(Outcome::Done);
        };
        let mut d = Deployment::parse(stored)
            .map_err(|e| ReconcileError::Invalid(format!("deployment {name}: {e}")))?;
        if d.spec.selects_all {
            self.recorder.warning(
                d.involved(),
                "SelectingAll",
                "This deployment is selecting all pods. A non-empty selector is required.",
            );
            if d.status.observed_generation < d.generation {
                let mut status = d.status.clone();
                status.observed_generation = d.generation;
                self.write_status(&mut d, status).await?;
            }
            return Ok(Outcome::Done);
        }
        let mut list = self.claim_replica_sets(&d, &snapshot).await?;
        if objects::is_deleting(&d.value) {
            let new = self.new_replica_set(&mut d, &mut list, false).await?;
            self.sync_deployment_status(&mut d, &list, new).await?;
            return Ok(Outcome::Done);
        }
        self.check_paused_conditions(&mut d).await?;
        if d.spec.paused {
            return self.sync(&mut d, &mut list).await;
        }
        if self.is_scaling_event(&mut d, &mut list).await? {
            return self.sync(&mut d, &mut list).await;
        }
        match d.spec.strategy {
            Strategy::Recreate => self.rollout_recreate(&mut d, &mut list, &snapshot).await,
            Strategy::RollingUpdate { .. } => self.rollout_rolling(&mut d, &mut list).await,
        }
    }

    /// The ReplicaSets this Deployment controls, after adoption and release
    /// (`getReplicaSetsForDeployment`).
    async fn claim_replica_sets(
        &self,
        d: &Deployment,
        snapshot: &StoreSnapshot,
    ) -> Result<Vec<Rs>, ReconcileError> {
        let owned = self
            .replica_sets
            .by_index(CONTROLLER_UID_INDEX, &d.stored.uid);
        let candidates = claim::candidates(
            snapshot,
            &replicasets().store_key(),
            d.namespace(),
            Some(&d.spec.selector),
            &owned,
        )
        .into_iter()
        .map(Candidate::new)
        .collect();
        let claimed = RefManager::new(
            &self.client,
            deployments(),
            &d.value,
            Some(&d.spec.selector),
            replicasets(),
        )
        .claim(candidates)
        .await?;
        Ok(claimed.into_iter().map(|c| Rs::of(c.value)).collect())
    }

    /// Whether one of the active ReplicaSets was sized for another `spec.replicas`
    /// (`isScalingEvent`).
    async fn is_scaling_event(
        &self,
        d: &mut Deployment,
        list: &mut Vec<Rs>,
    ) -> Result<bool, ReconcileError> {
        self.new_replica_set(d, list, false).await?;
        Ok(list
            .iter()
            .filter(|rs| replica_sets::is_active(rs))
            .any(|rs| {
                rs.annotation(replica_sets::DESIRED_REPLICAS)
                    .and_then(|v| v.parse::<i64>().ok())
                    .is_some_and(|desired| desired != d.spec.replicas)
            }))
    }
}

#[cfg(test)]
mod tests;
