//! The DaemonSet controller (kube-controller-manager's `daemonset-controller`): one pod of the
//! set's template on every eligible node, replaced when the template changes.
//!
//! A reconcile (upstream's `syncDaemonSet`) reads the set from a store snapshot, claims its
//! pods (`claim`) and its ControllerRevisions, then:
//! 1. finds the revision of the current template, making one if there is none (a template
//!    coming back gets the next number; duplicates are merged) ([`revisions`]): its
//!    `controller-revision-hash` label is the hash new pods carry;
//! 2. decides per node ([`placement`]: node name, node selector, required node affinity,
//!    taints against the template's tolerations plus the daemon ones) and brings each node to
//!    one pod ([`manage`]): creates the missing ones (unbound, with a required affinity on the
//!    node's name, for the scheduler to bind), deletes those on nodes that no longer take them,
//!    failed and succeeded pods (failed ones with a per-node backoff), and surplus pods;
//! 3. with `RollingUpdate` and nothing changed by step 2, replaces old pods ([`rolling`]):
//!    deleting as many as `maxUnavailable` allows, or, with `maxSurge`, first creating new pods
//!    beside old ones and deleting each old pod once its replacement is available; `OnDelete`
//!    only ever makes new pods where someone deleted old ones;
//! 4. deletes the old revisions beyond `revisionHistoryLimit` that no pod uses, and writes the
//!    status ([`status`]) counted from a fresh snapshot.
//!
//! Steps 2 and 3 read one snapshot; a reconcile that created or deleted pods in step 2 leaves
//! the rolling update to the next one (the pod changes queue it), which is what upstream's
//! expectations make it do. Every reconcile reads the store, which holds the writes of the
//! previous ones, so no pod is created twice.
//!
//! Node changes that cannot change a placement (heartbeats: a condition's times, status
//! other than the conditions' statuses) are ignored; others queue every set. A set being
//! deleted is left alone, as upstream leaves it (its pods and revisions go with the garbage
//! collector). Upstream sets `pod-template-generation` on pods from the
//! `deprecated.daemonset.template.generation` annotation its API server keeps; this API does
//! not keep it, so pods get the label only when a client wrote the annotation.

mod manage;
pub mod placement;
mod revisions;
mod rolling;
mod status;

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use chrono::Utc;
use serde::Deserialize;
use serde_json::Value;

use super::claim::{self, Candidate, OwnedChange, RefManager, CONTROLLER_UID_INDEX};
use super::deployment::fenceposts;
use super::events::{EventRecorder, Involved};
use super::history;
use super::informer::{Change, Informers, InformersBuilder, KindCache, ObjectName};
use super::objects;
use super::pod_control::{self, PodControl};
use super::queue::WorkQueue;
use super::replicaset::{builtin, status::next_available};
use super::worker::{Controller, Outcome, ReconcileError};
use super::Shared;
use crate::client::Client;
use crate::kube::object::{ObjectKey, ObjectRef, StoredObject};
use crate::kube::resources::ResourceInfo;
use crate::kube::selectors::LabelSelector;
use crate::kube::store::StoreSnapshot;
use manage::FailedPodBackoff;
use placement::{NodeFacts, Placement};
use status::DaemonStatus;

/// The label of pods made from a template generation (see the module comment).
pub const TEMPLATE_GENERATION_LABEL: &str = "pod-template-generation";
/// The annotation holding a set's template generation.
const TEMPLATE_GENERATION_ANNOTATION: &str = "deprecated.daemonset.template.generation";

fn daemon_sets() -> &'static ResourceInfo {
    builtin("apps", "v1", "daemonsets")
}

fn nodes() -> &'static ResourceInfo {
    builtin("", "v1", "nodes")
}

/// How pods of an older template are replaced.
#[derive(Debug, Clone, PartialEq)]
pub enum Strategy {
    /// `maxUnavailable` and `maxSurge` as written (numbers or percentages).
    RollingUpdate {
        max_unavailable: Option<Value>,
        max_surge: Option<Value>,
    },
    /// Only pods someone deleted are made again, from the current template.
    OnDelete,
}

impl Strategy {
    /// `maxSurge` for `desired` nodes (rounded up, as upstream's `SurgeCount`); 0 for OnDelete.
    pub fn surge(&self, desired: i64) -> Result<i64, String> {
        match self {
            Strategy::RollingUpdate { max_surge, .. } => {
                fenceposts::scaled_value(max_surge.as_ref(), desired, true)
            }
            Strategy::OnDelete => Ok(0),
        }
    }

    /// `maxUnavailable` for `desired` nodes (rounded up, `UnavailableCount`); 0 for OnDelete.
    pub fn unavailable(&self, desired: i64) -> Result<i64, String> {
        match self {
            Strategy::RollingUpdate {
                max_unavailable, ..
            } => fenceposts::scaled_value(max_unavailable.as_ref(), desired, true),
            Strategy::OnDelete => Ok(0),
        }
    }

    /// Whether a node may hold an old and a new pod at once (`AllowsSurge`).
    pub fn allows_surge(&self) -> bool {
        self.surge(1).is_ok_and(|s| s != 0)
    }
}

/// One DaemonSet as a reconcile reads it.
#[derive(Debug, Clone)]
pub struct Daemon {
    pub stored: ObjectRef,
    pub value: Value,
    pub generation: i64,
    pub selector: LabelSelector,
    pub template: Value,
    pub placement: Placement,
    pub strategy: Strategy,
    pub min_ready_seconds: i64,
    pub revision_history_limit: i64,
    /// The `deprecated.daemonset.template.generation` annotation, when a client wrote it.
    pub template_generation: Option<String>,
    pub status: DaemonStatus,
}

impl Daemon {
    /// Reads a stored set; an error names what is not usable.
    pub fn parse(stored: ObjectRef) -> Result<Daemon, String> {
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
                let field = |f: &str| {
                    value
                        .pointer(&format!("/spec/updateStrategy/rollingUpdate/{f}"))
                        .filter(|v| !v.is_null())
                        .cloned()
                };
                Strategy::RollingUpdate {
                    max_unavailable: field("maxUnavailable"),
                    max_surge: field("maxSurge"),
                }
            }
            other => return Err(format!("unexpected update strategy type: {other}")),
        };
        // Bad numbers are refused here rather than in the middle of an update.
        strategy
            .surge(1)
            .and_then(|_| strategy.unavailable(1))
            .map_err(|e| format!("spec.updateStrategy.rollingUpdate: {e}"))?;
        let template = value
            .pointer("/spec/template")
            .cloned()
            .unwrap_or_else(|| serde_json::json!({}));
        Ok(Daemon {
            generation: int("/metadata/generation").unwrap_or(0),
            selector,
            placement: Placement::of(&template),
            template,
            strategy,
            min_ready_seconds: int("/spec/minReadySeconds").unwrap_or(0),
            revision_history_limit: int("/spec/revisionHistoryLimit").unwrap_or(10),
            template_generation: value
                .pointer(&format!(
                    "/metadata/annotations/{}",
                    TEMPLATE_GENERATION_ANNOTATION.replace('/', "~1")
                ))
                .and_then(Value::as_str)
                .map(str::to_string),
            status: DaemonStatus::of(&value),
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

    fn involved(&self) -> Involved {
        Involved::of(daemon_sets(), &self.stored)
    }

    /// Whether a pod is of the current template (`IsPodUpdated`): its hash label is `hash`,
    /// or its template generation label is the set's.
    pub fn is_updated(&self, pod: &Value, hash: &str) -> bool {
        let label = |k: &str| {
            pod.pointer("/metadata/labels")
                .and_then(|l| l.get(k))
                .and_then(Value::as_str)
        };
        (!hash.is_empty() && label(history::REVISION_HASH) == Some(hash))
            || self
                .template_generation
                .as_deref()
                .is_some_and(|g| label(TEMPLATE_GENERATION_LABEL) == Some(g))
    }
}

/// A work-queue key.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Key {
    /// Reconcile this set.
    Set(ObjectName),
    /// Queue the sets that may adopt this orphan pod.
    OrphanPod(ObjectName),
    /// A node changed in a way that may change placements: queue every set.
    AllSets,
}

impl fmt::Display for Key {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Key::Set(name) => write!(f, "{name}"),
            Key::OrphanPod(name) => write!(f, "orphan pod {name}"),
            Key::AllSets => f.write_str("every daemon set (a node changed)"),
        }
    }
}

pub struct DaemonSets {
    client: Client,
    recorder: EventRecorder,
    pod_control: PodControl,
    sets: Arc<KindCache>,
    pods: Arc<KindCache>,
    nodes: Arc<KindCache>,
    revisions: Arc<KindCache>,
    queue: WorkQueue<Key>,
    backoff: FailedPodBackoff,
}

impl Controller for DaemonSets {
    type Key = Key;
    const NAME: &'static str = "daemonset-controller";
    const WORKERS: usize = 2;

    fn register(builder: &mut InformersBuilder, queue: &WorkQueue<Key>) {
        builder.index("pods", CONTROLLER_UID_INDEX, claim::controller_uid_index);
        history::register(builder);
        let q = queue.clone();
        builder.on_change(
            &daemon_sets().store_key(),
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
            &nodes().store_key(),
            Arc::new(move |change: Change<'_>| {
                let relevant = match change {
                    Change::Modified { old, new } => placement_may_differ(old, new),
                    Change::Resync(_) => false,
                    Change::Added(_) | Change::Deleted(_) => true,
                };
                if relevant {
                    q.add(Key::AllSets);
                }
            }),
        );
        let q = queue.clone();
        builder.on_change(
            &history::store_key(),
            Arc::new(move |change: Change<'_>| {
                let revision = change.object();
                if let Some(owner) =
                    claim::controller_of(revision).filter(|r| r.kind == "DaemonSet")
                {
                    q.add(Key::Set(ObjectName::new(
                        revision.key.namespace.clone(),
                        owner.name,
                    )));
                }
            }),
        );
    }

    fn new(shared: &Shared, informers: &Arc<Informers>, queue: WorkQueue<Key>) -> Self {
        let client = shared.controller_manager.clone();
        let cache = |resource: &str| informers.cache(resource).expect("registered in `register`");
        let recorder = EventRecorder::start(
            client.clone(),
            "daemonset-controller",
            &shared.server_name,
            shared.stop.clone(),
        );
        DaemonSets {
            pod_control: PodControl::new(client.clone(), recorder.clone()),
            recorder,
            client,
            sets: cache(&daemon_sets().store_key()),
            pods: cache("pods"),
            nodes: cache(&nodes().store_key()),
            revisions: cache(&history::store_key()),
            queue,
            backoff: FailedPodBackoff::default(),
        }
    }

    async fn reconcile(&self, key: &Key) -> Result<Outcome, ReconcileError> {
        match key {
            Key::Set(name) => self.sync(name).await,
            Key::OrphanPod(name) => {
                self.queue_sets_of_orphan(name);
                Ok(Outcome::Done)
            }
            Key::AllSets => {
                for set in self.sets.list(None) {
                    self.queue.add(Key::Set(ObjectName::of(&set)));
                }
                Ok(Outcome::Done)
            }
        }
    }
}

/// A pod change concerns its controlling set (the previous one too when the reference
/// changed); an orphan that appeared or changed labels may be adopted.
fn route_pod_change(queue: &WorkQueue<Key>, change: Change<'_>) {
    claim::route_owned_change("DaemonSet", change, |to| match to {
        OwnedChange::Owner(set) => queue.add(Key::Set(set)),
        OwnedChange::Orphan(pod) => queue.add(Key::OrphanPod(pod)),
    });
}

/// Whether a node update may change where daemon pods go (upstream's
/// `shouldIgnoreNodeUpdate`, inverted): labels, spec, metadata other than the version, or the
/// status of a condition changed. Heartbeats only move times.
fn placement_may_differ(old: &StoredObject, new: &StoredObject) -> bool {
    #[derive(Deserialize, PartialEq)]
    struct Facts {
        #[serde(default)]
        spec: Value,
        #[serde(default)]
        status: Option<Status>,
    }
    #[derive(Deserialize, PartialEq)]
    struct Status {
        #[serde(default)]
        conditions: Vec<Condition>,
    }
    #[derive(Deserialize, PartialEq)]
    struct Condition {
        #[serde(rename = "type", default)]
        kind: String,
        #[serde(default)]
        status: String,
    }
    if old.labels != new.labels {
        return true;
    }
    let facts = |o: &StoredObject| serde_json::from_slice::<Facts>(&o.json).ok();
    facts(old) != facts(new)
}

impl DaemonSets {
    fn queue_sets_of_orphan(&self, name: &ObjectName) {
        let Some(pod) = self.pods.get(&name.namespace, &name.name) else {
            return;
        };
        if claim::controller_of(&pod).is_some() || pod.is_deleting() {
            return;
        }
        for set in self.sets.list(Some(&name.namespace)) {
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
            daemon_sets().store_key(),
            name.namespace.clone(),
            name.name.clone(),
        );
        let Some(stored) = snapshot.get(&key).cloned() else {
            return Ok(Outcome::Done);
        };
        let daemon = Daemon::parse(stored)
            .map_err(|e| ReconcileError::Invalid(format!("daemonset {name}: {e}")))?;
        if daemon.selector.requirements.is_empty() {
            self.recorder.warning(
                daemon.involved(),
                "SelectingAll",
                "This daemon set is selecting all pods. A non-empty selector is required.",
            );
            return Ok(Outcome::Done);
        }
        if daemon.stored.is_deleting() {
            return Ok(Outcome::Done);
        }
        let pods = self.claim_pods(&daemon, &snapshot).await?;
        let history = self.construct_history(&daemon, &snapshot, &pods).await?;
        let nodes: Vec<NodeFacts> = self
            .nodes
            .list(None)
            .iter()
            .map(|n| NodeFacts::of(n))
            .collect();
        let now = Utc::now();

        let managed = self.manage(&daemon, &nodes, &pods, &history.hash).await;
        let mut retry = managed.as_ref().ok().and_then(|m| m.retry_after);
        let result = match managed {
            Ok(m) if !m.changed && daemon.strategy != Strategy::OnDelete => {
                self.rolling_update(&daemon, &nodes, &pods, &history.hash, now)
                    .await
            }
            Ok(_) => Ok(()),
            Err(e) => Err(e),
        };
        let cleaned = self.cleanup_history(&daemon, &pods, &history.old).await;

        // Counted from the store as it is now, after this reconcile's writes.
        let fresh = self.client.store().snapshot();
        let owned = self.owned_pods(&daemon, &fresh);
        let mut status = DaemonStatus::count(&daemon, &nodes, &owned, &history.hash, now);
        status.observed_generation = daemon.generation;
        status.collision_count = history.collision_count;
        let written = if status.differs_from(&daemon.status, daemon.generation) {
            self.write_status(&daemon, &status).await
        } else {
            Ok(())
        };
        result?;
        cleaned?;
        written?;

        let values: Vec<&Value> = owned.iter().map(|p| &p.value).collect();
        if let Some(wait) = next_available(&values, daemon.min_ready_seconds, Utc::now()) {
            let wait = wait + Duration::from_millis(50);
            retry = Some(retry.map_or(wait, |r| r.min(wait)));
        }
        Ok(retry.map_or(Outcome::Done, Outcome::RequeueAfter))
    }

    /// The set's pods after adoption and release, every one of them (terminal and deleted
    /// ones too: the per-node decisions look at them).
    async fn claim_pods(
        &self,
        daemon: &Daemon,
        snapshot: &StoreSnapshot,
    ) -> Result<Vec<Candidate>, ReconcileError> {
        let owned = self.pods.by_index(CONTROLLER_UID_INDEX, daemon.uid());
        let candidates: Vec<Candidate> = claim::candidates(
            snapshot,
            "pods",
            daemon.namespace(),
            Some(&daemon.selector),
            &owned,
        )
        .into_iter()
        .map(Candidate::new)
        .collect();
        let claimed = RefManager::new(
            &self.client,
            daemon_sets(),
            &daemon.value,
            Some(&daemon.selector),
            pod_control::pods(),
        )
        .claim(candidates)
        .await?;
        Ok(claimed)
    }

    /// The pods `snapshot` shows this set controlling (no claims: for counting).
    fn owned_pods(&self, daemon: &Daemon, snapshot: &StoreSnapshot) -> Vec<Candidate> {
        let owned = self.pods.by_index(CONTROLLER_UID_INDEX, daemon.uid());
        claim::candidates(
            snapshot,
            "pods",
            daemon.namespace(),
            Some(&daemon.selector),
            &owned,
        )
        .into_iter()
        .filter(|p| claim::controller_of(p).is_some_and(|r| r.uid == daemon.uid()))
        .map(Candidate::new)
        .collect()
    }

    /// Writes `status`; a conflict is retried once on the set as the store holds it now.
    async fn write_status(
        &self,
        daemon: &Daemon,
        status: &DaemonStatus,
    ) -> Result<(), ReconcileError> {
        let info = daemon_sets();
        let (namespace, name) = (daemon.namespace(), daemon.name());
        let mut object = daemon.value.clone();
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
                        Some(fresh) if fresh.uid == daemon.uid() => object = fresh.value(),
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

/// The set's pods by the node they are for (pods naming no node are left out, as upstream
/// leaves them). `include_finished`: pods both terminal and being deleted count too (the
/// per-node decisions see them; the rolling update and the status do not).
pub(crate) fn by_node<'a>(
    pods: &'a [Candidate],
    include_finished: bool,
) -> BTreeMap<String, Vec<&'a Candidate>> {
    let mut map: BTreeMap<String, Vec<&'a Candidate>> = BTreeMap::new();
    for pod in pods {
        if !include_finished
            && objects::pod_is_terminal(&pod.value)
            && objects::is_deleting(&pod.value)
        {
            continue;
        }
        if let Some(node) = placement::target_node(&pod.value) {
            map.entry(node).or_default().push(pod);
        }
    }
    map
}

/// Scheduled pods first, then the oldest, then by name (upstream's
/// `podByCreationTimestampAndPhase`).
pub(crate) fn oldest_first(pods: &mut [&Candidate]) {
    let key = |c: &Candidate| {
        let unscheduled = c
            .value
            .pointer("/spec/nodeName")
            .and_then(Value::as_str)
            .is_none_or(str::is_empty);
        let created = c
            .value
            .pointer("/metadata/creationTimestamp")
            .and_then(Value::as_str)
            .and_then(objects::parse_time);
        (unscheduled, created, c.name().to_string())
    };
    pods.sort_by_cached_key(|c| key(c));
}

#[cfg(test)]
mod tests;
