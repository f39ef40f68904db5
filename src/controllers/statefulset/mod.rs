//! The StatefulSet controller (kube-controller-manager's `statefulset-controller`): pods with a
//! stable identity (`identity`: `<set>-<ordinal>` from `spec.ordinals.start`, hostname and
//! subdomain, one PersistentVolumeClaim per claim template), made in order and replaced one at a
//! time.
//!
//! A reconcile (upstream's `sync` and `UpdateStatefulSet`) reads the set from a store snapshot,
//! claims its ControllerRevisions and its pods (those named `<set>-N` that the selector matches:
//! `claim`), then:
//! 1. finds the update revision (the set's template: an existing revision with that template,
//!    renumbered if it is not the newest, or a new one) and the current revision
//!    (`status.currentRevision`, or the update revision at first) (`history`);
//! 2. runs [`update`]: with `OrderedReady`, each missing pod is created only when every lower
//!    ordinal is Running, Ready and available, pods beyond `replicas` are deleted from the
//!    highest ordinal down, one at a time, each waiting for the previous to be gone; with
//!    `Parallel` the same work is done at once. Then `RollingUpdate` deletes, from the highest
//!    ordinal down to `partition`, the first pod not at the update revision (its replacement is
//!    made from the update revision), waiting for each replacement to be available; `OnDelete`
//!    only recreates pods someone deleted;
//! 3. writes the status when it changed ([`status`]) and deletes the revisions beyond
//!    `revisionHistoryLimit` that no pod uses.
//!
//! A pod's claims are created before it (and for a pending pod that lacks them); their owner
//! references follow `persistentVolumeClaimRetentionPolicy` ([`retention`]), so the garbage
//! collector deletes them with the set or with a pod scaled away. Claims stay Pending: binding
//! them is a storage concern.
//!
//! As for ReplicaSets, a reconcile reads the store, which holds every write of the previous
//! reconciles of the set, so no pod is created twice and upstream's expectations are not
//! needed. `rollingUpdate.maxUnavailable` is read when it is set (upstream reads it only behind
//! the `MaxUnavailableStatefulSet` feature gate, alpha in 1.33); without it a rolling update
//! replaces one pod at a time, as upstream does with the gate off. Differences from upstream:
//! a claimed pod whose volumes no longer match the claim templates is not updated (a
//! pod's volumes cannot change; upstream's update fails and retries forever), only its missing
//! claims are created; a pod this set controls whose name is not one of the set's is ignored
//! rather than released.

mod identity;
mod pods;
mod retention;
mod status;
mod update;

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use chrono::Utc;
use serde_json::{Map, Value};

use super::claim::{self, Candidate, OwnedChange, RefManager, CONTROLLER_UID_INDEX};
use super::deployment::fenceposts;
use super::events::{EventRecorder, Involved};
use super::history::{self, Revision};
use super::informer::{Change, Informers, InformersBuilder, KindCache, ObjectName};
use super::objects;
use super::pod_control;
use super::queue::WorkQueue;
use super::replicaset::{builtin, status::next_available};
use super::worker::{Controller, Outcome, ReconcileError};
use super::Shared;
use crate::client::Client;
use crate::kube::object::{ObjectKey, ObjectRef};
use crate::kube::resources::ResourceInfo;
use crate::kube::selectors::LabelSelector;
use crate::kube::store::StoreSnapshot;
use retention::Retention;
use status::SetStatus;

fn stateful_sets() -> &'static ResourceInfo {
    builtin("apps", "v1", "statefulsets")
}

fn claims_info() -> &'static ResourceInfo {
    builtin("", "v1", "persistentvolumeclaims")
}

/// How pods replace those of an older revision.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Strategy {
    /// Deleted from the highest ordinal down to `partition` (absent without a
    /// `rollingUpdate`): one at a time, each replacement available before the next goes, or,
    /// with `maxUnavailable` (resolved against `replicas`, at least 1), as many at once as
    /// keep at most that many of the set's pods unavailable.
    RollingUpdate {
        partition: Option<i64>,
        max_unavailable: Option<i64>,
    },
    /// Only pods someone deleted are made again, from the update revision.
    OnDelete,
}

/// One StatefulSet as a reconcile reads it.
#[derive(Debug, Clone)]
pub struct Set {
    pub stored: ObjectRef,
    pub value: Value,
    pub generation: i64,
    pub replicas: i64,
    /// `spec.ordinals.start`.
    pub start: i64,
    pub service_name: String,
    pub template: Value,
    pub selector: LabelSelector,
    /// `spec.selector.matchLabels`, which the claims get as labels.
    pub match_labels: Map<String, Value>,
    /// `podManagementPolicy: Parallel`.
    pub parallel: bool,
    pub strategy: Strategy,
    pub min_ready_seconds: i64,
    pub revision_history_limit: i64,
    pub retention: Retention,
    pub claim_templates: Vec<Value>,
    pub status: SetStatus,
}

impl Set {
    /// Reads a stored set; an error names what is not usable.
    pub fn parse(stored: ObjectRef) -> Result<Set, String> {
        let value = stored.value();
        let int = |pointer: &str| value.pointer(pointer).and_then(Value::as_i64);
        let selector = objects::label_selector(value.pointer("/spec/selector"))
            .map_err(|e| format!("invalid label selector: {e}"))?
            .ok_or("spec.selector is required")?;
        let strategy = match value
            .pointer("/spec/updateStrategy/type")
            .and_then(Value::as_str)
            .unwrap_or("RollingUpdate")
        {
            "OnDelete" => Strategy::OnDelete,
            "RollingUpdate" => {
                let rolling = value
                    .pointer("/spec/updateStrategy/rollingUpdate")
                    .filter(|r| r.is_object());
                let replicas = int("/spec/replicas").unwrap_or(1).max(0);
                let max_unavailable = match rolling.and_then(|r| r.get("maxUnavailable")) {
                    None | Some(Value::Null) => None,
                    // Rounded down, as upstream's getStatefulSetMaxUnavailable, and never
                    // below one (a small percentage would otherwise stop the rollout).
                    some => Some(
                        fenceposts::scaled_value(some, replicas, false)
                            .map_err(|e| format!("spec.updateStrategy.rollingUpdate: {e}"))?
                            .max(1),
                    ),
                };
                Strategy::RollingUpdate {
                    partition: rolling
                        .map(|r| r.get("partition").and_then(Value::as_i64).unwrap_or(0)),
                    max_unavailable,
                }
            }
            other => return Err(format!("unexpected update strategy type: {other}")),
        };
        Ok(Set {
            generation: int("/metadata/generation").unwrap_or(0),
            replicas: int("/spec/replicas").unwrap_or(1).max(0),
            start: int("/spec/ordinals/start").unwrap_or(0).max(0),
            service_name: value
                .pointer("/spec/serviceName")
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_string(),
            template: value
                .pointer("/spec/template")
                .cloned()
                .unwrap_or_else(|| serde_json::json!({})),
            selector,
            match_labels: value
                .pointer("/spec/selector/matchLabels")
                .and_then(Value::as_object)
                .cloned()
                .unwrap_or_default(),
            parallel: value
                .pointer("/spec/podManagementPolicy")
                .and_then(Value::as_str)
                == Some("Parallel"),
            strategy,
            min_ready_seconds: int("/spec/minReadySeconds").unwrap_or(0),
            revision_history_limit: int("/spec/revisionHistoryLimit").unwrap_or(10),
            retention: Retention::of(&value),
            claim_templates: value
                .pointer("/spec/volumeClaimTemplates")
                .and_then(Value::as_array)
                .cloned()
                .unwrap_or_default(),
            status: SetStatus::of(&value),
            stored,
            value,
        })
    }

    pub fn name(&self) -> &str {
        &self.stored.key.name
    }

    pub fn namespace(&self) -> &str {
        &self.stored.key.namespace
    }

    pub fn uid(&self) -> &str {
        &self.stored.uid
    }

    /// The last ordinal in range (inclusive); below `start` when there are no replicas.
    pub fn end(&self) -> i64 {
        self.start + self.replicas - 1
    }

    pub fn in_range(&self, ordinal: i64) -> bool {
        ordinal >= self.start && ordinal <= self.end()
    }

    fn involved(&self) -> Involved {
        Involved::of(stateful_sets(), &self.stored)
    }
}

/// A work-queue key.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Key {
    /// Reconcile this set.
    Set(ObjectName),
    /// Queue the sets that may adopt this orphan pod.
    OrphanPod(ObjectName),
    /// A claim of this namespace was deleted: queue its sets that have claim templates (a
    /// pod may be waiting for an earlier pod's claim to go).
    ClaimGone(String),
}

impl fmt::Display for Key {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Key::Set(name) => write!(f, "{name}"),
            Key::OrphanPod(name) => write!(f, "orphan pod {name}"),
            Key::ClaimGone(namespace) => write!(f, "claim deleted in {namespace}"),
        }
    }
}

pub struct StatefulSets {
    client: Client,
    recorder: EventRecorder,
    sets: Arc<KindCache>,
    pods: Arc<KindCache>,
    revisions: Arc<KindCache>,
    queue: WorkQueue<Key>,
}

impl Controller for StatefulSets {
    type Key = Key;
    const NAME: &'static str = "statefulset-controller";
    const WORKERS: usize = 5;

    fn register(builder: &mut InformersBuilder, queue: &WorkQueue<Key>) {
        builder.index("pods", CONTROLLER_UID_INDEX, claim::controller_uid_index);
        history::register(builder);
        let q = queue.clone();
        builder.on_change(
            &stateful_sets().store_key(),
            Arc::new(move |change: Change<'_>| {
                q.add(Key::Set(ObjectName::of(change.object())));
            }),
        );
        let q = queue.clone();
        builder.on_change(
            "pods",
            Arc::new(move |change: Change<'_>| route_pod_change(&q, change)),
        );
        let q = queue.clone();
        builder.on_change(
            &claims_info().store_key(),
            Arc::new(move |change: Change<'_>| {
                if let Change::Deleted(claim) = change {
                    q.add(Key::ClaimGone(claim.key.namespace.clone()));
                }
            }),
        );
    }

    fn new(shared: &Shared, informers: &Arc<Informers>, queue: WorkQueue<Key>) -> Self {
        let client = shared.controller_manager.clone();
        let cache = |resource: &str| informers.cache(resource).expect("registered in `register`");
        StatefulSets {
            recorder: EventRecorder::start(
                client.clone(),
                "statefulset-controller",
                &shared.server_name,
                shared.stop.clone(),
            ),
            client,
            sets: cache(&stateful_sets().store_key()),
            pods: cache("pods"),
            revisions: cache(&history::store_key()),
            queue,
        }
    }

    async fn reconcile(&self, key: &Key) -> Result<Outcome, ReconcileError> {
        match key {
            Key::Set(name) => self.sync(name).await,
            Key::OrphanPod(name) => {
                self.queue_sets_of_orphan(name);
                Ok(Outcome::Done)
            }
            Key::ClaimGone(namespace) => {
                for set in self.sets.list(Some(namespace)) {
                    let has_templates = set
                        .value()
                        .pointer("/spec/volumeClaimTemplates")
                        .and_then(Value::as_array)
                        .is_some_and(|t| !t.is_empty());
                    if has_templates {
                        self.queue.add(Key::Set(ObjectName::of(&set)));
                    }
                }
                Ok(Outcome::Done)
            }
        }
    }
}

/// A pod change concerns its controlling set (the previous one too when the reference
/// changed); an orphan that appeared or changed labels may be adopted.
fn route_pod_change(queue: &WorkQueue<Key>, change: Change<'_>) {
    claim::route_owned_change("StatefulSet", change, |to| match to {
        OwnedChange::Owner(set) => queue.add(Key::Set(set)),
        OwnedChange::Orphan(pod) => queue.add(Key::OrphanPod(pod)),
    });
}

impl StatefulSets {
    fn queue_sets_of_orphan(&self, name: &ObjectName) {
        let Some(pod) = self.pods.get(&name.namespace, &name.name) else {
            return;
        };
        if claim::controller_of(&pod).is_some() || pod.is_deleting() {
            return;
        }
        let parent = identity::parent_and_ordinal(&pod.key.name).map(|(p, _)| p.to_string());
        for set in self.sets.list(Some(&name.namespace)) {
            if parent.as_deref() != Some(set.key.name.as_str()) {
                continue;
            }
            let matches = objects::label_selector(set.value().pointer("/spec/selector"))
                .ok()
                .flatten()
                .is_some_and(|s| s.matches(&pod.labels));
            if matches {
                self.queue.add(Key::Set(ObjectName::of(&set)));
            }
        }
    }

    async fn sync(&self, name: &ObjectName) -> Result<Outcome, ReconcileError> {
        let snapshot = self.client.store().snapshot();
        let key = ObjectKey::new(
            stateful_sets().store_key(),
            name.namespace.clone(),
            name.name.clone(),
        );
        let Some(stored) = snapshot.get(&key).cloned() else {
            return Ok(Outcome::Done);
        };
        let set = Set::parse(stored)
            .map_err(|e| ReconcileError::Invalid(format!("statefulset {name}: {e}")))?;
        if set.stored.is_deleting() {
            return self.sync_deleting(&set, &snapshot).await;
        }
        let mut revisions = history::claim(
            &self.client,
            &snapshot,
            &self.revisions,
            stateful_sets(),
            &set.value,
            &set.selector,
        )
        .await?;
        history::sort(&mut revisions);
        let pods = self.claim_pods(&set, &snapshot).await?;

        let (current, update, collision_count) = self.revisions(&set, &revisions).await?;
        let now = Utc::now();
        let mut status = SetStatus {
            observed_generation: set.generation,
            current_revision: current.name.clone(),
            update_revision: update.name.clone(),
            collision_count: Some(i64::from(collision_count)),
            ..SetStatus::default()
        };
        let result = self
            .update(&set, &current, &update, &pods, &mut status, now)
            .await;
        let rolling = matches!(set.strategy, Strategy::RollingUpdate { .. });
        status.complete_rolling_update(rolling, set.replicas);
        let written = if status.differs_from(&set.status) {
            self.write_status(&set, &status).await
        } else {
            Ok(())
        };
        let truncated = self
            .truncate_history(&set, &pods, &revisions, &current, &update)
            .await;
        result?;
        written?;
        truncated?;

        let values: Vec<&Value> = pods.iter().map(|p| &p.value).collect();
        Ok(
            match next_available(&values, set.min_ready_seconds, Utc::now()) {
                Some(wait) => Outcome::RequeueAfter(wait + Duration::from_millis(50)),
                None => Outcome::Done,
            },
        )
    }

    /// A set being deleted makes no pods, claims or revisions; its status keeps counting the
    /// pods the garbage collector has yet to delete (a foreground deletion waits for them).
    async fn sync_deleting(
        &self,
        set: &Set,
        snapshot: &StoreSnapshot,
    ) -> Result<Outcome, ReconcileError> {
        // A deleted owner adopts and releases nothing, so this claim writes nothing.
        let pods = self.claim_pods(set, snapshot).await?;
        let mut status = SetStatus {
            observed_generation: set.generation,
            ..set.status.clone()
        };
        status.count(
            pods.iter().map(|p| &p.value),
            set.min_ready_seconds,
            Utc::now(),
        );
        if status.differs_from(&set.status) {
            self.write_status(set, &status).await?;
        }
        Ok(Outcome::Done)
    }

    /// The set's pods: members by name that its selector matches, after adoption and release.
    async fn claim_pods(
        &self,
        set: &Set,
        snapshot: &StoreSnapshot,
    ) -> Result<Vec<Candidate>, ReconcileError> {
        let owned = self.pods.by_index(CONTROLLER_UID_INDEX, set.uid());
        let candidates: Vec<Candidate> = claim::candidates(
            snapshot,
            "pods",
            set.namespace(),
            Some(&set.selector),
            &owned,
        )
        .into_iter()
        .filter(|pod| identity::ordinal_in(set, &pod.key.name).is_some())
        .map(Candidate::new)
        .collect();
        let claimed = RefManager::new(
            &self.client,
            stateful_sets(),
            &set.value,
            Some(&set.selector),
            pod_control::pods(),
        )
        .claim(candidates)
        .await?;
        Ok(claimed)
    }

    /// The current and update revisions, and the collision count their names were made with
    /// (upstream's `getStatefulSetRevisions`); `revisions` sorted oldest first.
    async fn revisions(
        &self,
        set: &Set,
        revisions: &[Revision],
    ) -> Result<(Revision, Revision, u32), ReconcileError> {
        let mut collision_count = Some(
            set.status
                .collision_count
                .unwrap_or(0)
                .clamp(0, i64::from(u32::MAX)) as u32,
        );
        let equal: Vec<&Revision> = revisions
            .iter()
            .filter(|r| {
                r.template()
                    .is_ok_and(|t| history::same_template(&t, &set.template))
            })
            .collect();
        let next = history::next_number(revisions);
        let update = match (equal.last(), revisions.last()) {
            (Some(found), Some(newest)) if found.uid == newest.uid => (*found).clone(),
            (Some(found), _) => history::renumber(&self.client, found, next).await?,
            (None, _) => {
                let draft = history::Draft {
                    owner_info: stateful_sets(),
                    owner: &set.value,
                    template: &set.template,
                    number: next,
                    hash_label: history::HASH_LABEL,
                };
                history::create(&self.client, &draft, &mut collision_count).await?
            }
        };
        let current = revisions
            .iter()
            .find(|r| r.name == set.status.current_revision)
            .cloned()
            .unwrap_or_else(|| update.clone());
        Ok((current, update, collision_count.unwrap_or(0)))
    }

    /// Deletes the oldest revisions beyond the history limit that neither the status nor a
    /// pod uses (upstream's `truncateHistory`).
    async fn truncate_history(
        &self,
        set: &Set,
        pods: &[Candidate],
        revisions: &[Revision],
        current: &Revision,
        update: &Revision,
    ) -> Result<(), ReconcileError> {
        if set.revision_history_limit < 0 {
            return Ok(());
        }
        let live = |r: &Revision| {
            r.name == current.name
                || r.name == update.name
                || pods.iter().any(|p| pods::revision(&p.value) == r.name)
        };
        let all: Vec<&Revision> = revisions.iter().collect();
        let doomed = history::surplus(
            &all,
            set.revision_history_limit,
            live,
            history::LimitCounts::Unused,
        );
        for revision in doomed {
            history::delete(&self.client, revision).await?;
        }
        Ok(())
    }

    /// Writes `status`; a conflict is retried once on the set as the store holds it now.
    async fn write_status(&self, set: &Set, status: &SetStatus) -> Result<(), ReconcileError> {
        let info = stateful_sets();
        let (namespace, name) = (set.namespace(), set.name());
        let mut object = set.value.clone();
        for attempt in 0..2 {
            object["status"] = status.to_value();
            match self
                .client
                .update_status(info, namespace, name, &object)
                .await
            {
                Ok(_) => return Ok(()),
                Err(e) if e.is_conflict() && attempt == 0 => {
                    match self.client.get(info, namespace, name) {
                        Some(fresh) if fresh.uid == set.uid() => object = fresh.value(),
                        _ => return Ok(()),
                    }
                }
                Err(e) if e.is_not_found() => return Ok(()),
                Err(e) => return Err(e.into()),
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests;
