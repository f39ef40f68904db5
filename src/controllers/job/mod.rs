//! The Job controller: kube-controller-manager's `job-controller` as of Kubernetes 1.33
//! (`pkg/controller/job`), with the features that version enables by default: pod replacement
//! policy and terminating pods in the status, the interim `FailureTarget` and
//! `SuccessCriteriaMet` conditions before `Failed` and `Complete`, `backoffLimitPerIndex`,
//! success policies, the completion index label, and `spec.managedBy` (a Job another
//! controller manages is left alone).
//!
//! - [`sync`]: one Job's sync and what it decides; [`manage`]: the pods it creates and
//!   deletes; [`track`]: how finished pods are counted and the final condition.
//! - [`pods`]: pod predicates, the deletion order, and new pods from the template.
//! - [`indexes`]: completion indexes and their interval strings; [`backoff`]: the delay after
//!   failed pods; [`failure_policy`]: `podFailurePolicy` rules; [`status`]: the status fields
//!   and conditions.
//!
//! Work comes from the informers as upstream's does: a Job's creation, deletion or spec change
//! syncs it at once; a change of one of its pods or of its status syncs it after a one-second
//! batching period (so a hundred pods finishing together cost one sync). Pods still holding
//! the tracking finalizer whose Job is gone or finished are released by their own key, and an
//! orphan pod is offered to the Jobs of its namespace whose selector matches it.

mod backoff;
mod failure_policy;
mod indexes;
mod manage;
mod pods;
mod status;
mod sync;
#[cfg(test)]
pub(crate) mod tests;
mod track;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use serde::Deserialize;
use serde_json::Value;

use self::backoff::BackoffRecord;
use self::pods::has_tracking_finalizer;
use self::status::is_finished;
use super::claim::{self, Candidate, RefManager, CONTROLLER_UID_INDEX};
use super::events::{EventRecorder, Involved};
use super::informer::{Change, Informers, InformersBuilder, KindCache, ObjectName};
use super::objects::{controller_ref, label_selector};
use super::pod_control::PodControl;
use super::queue::WorkQueue;
use super::worker::{Controller, Outcome, ReconcileError};
use super::Shared;
use crate::client::Client;
use crate::kube::object::StoredObject;
use crate::kube::resources::{self, ResourceInfo};
use crate::kube::selectors::LabelSelector;

/// The label linking pods to the Job that made them (the generated selector's).
pub const CONTROLLER_UID: &str = "batch.kubernetes.io/controller-uid";

/// Where a controller reads the time (a test swaps it).
pub type Clock = Arc<dyn Fn() -> DateTime<Utc> + Send + Sync>;

/// How long pod and status changes are gathered before the Job syncs.
const BATCH: Duration = Duration::from_secs(1);
/// The label every pod of a Job carries with the Job's name.
const JOB_NAME: &str = "batch.kubernetes.io/job-name";
/// The `spec.managedBy` value of Jobs this controller manages (as when unset).
const MANAGED_BY_US: &str = "kubernetes.io/job-controller";

pub fn jobs_info() -> &'static ResourceInfo {
    resources::find("batch", "v1", "jobs")
        .unwrap_or_else(|| panic!("built-in kind jobs.batch is not registered"))
}

pub fn pods_info() -> &'static ResourceInfo {
    resources::find("", "v1", "pods")
        .unwrap_or_else(|| panic!("built-in kind pods is not registered"))
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum JobKey {
    /// Sync the Job.
    Job(ObjectName),
    /// A pod holding the tracking finalizer that may no longer be any live Job's to count.
    OrphanPod(ObjectName),
    /// An orphan pod some Job of its namespace may adopt.
    Adopter(ObjectName),
}

impl std::fmt::Display for JobKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            JobKey::Job(n) => write!(f, "job {n}"),
            JobKey::OrphanPod(n) => write!(f, "orphan pod {n}"),
            JobKey::Adopter(n) => write!(f, "adoptable pod {n}"),
        }
    }
}

pub struct Jobs {
    client: Client,
    recorder: EventRecorder,
    pod_control: PodControl,
    jobs: Arc<KindCache>,
    pods: Arc<KindCache>,
    queue: WorkQueue<JobKey>,
    /// Failures since the last success, per Job (the pod backoff's memory).
    backoff: parking_lot::Mutex<HashMap<ObjectName, BackoffRecord>>,
    clock: Clock,
}

/// The parts of an object's metadata and status the handlers need, read without building
/// the whole value.
#[derive(Default, Deserialize)]
struct Peek {
    #[serde(default)]
    metadata: PeekMeta,
    #[serde(default)]
    status: PeekStatus,
}

#[derive(Default, Deserialize)]
struct PeekMeta {
    #[serde(default)]
    generation: i64,
    #[serde(default, rename = "ownerReferences")]
    owner_references: Vec<PeekOwner>,
    #[serde(default)]
    finalizers: Vec<String>,
    #[serde(default, rename = "deletionTimestamp")]
    deletion_timestamp: Option<String>,
}

#[derive(Default, Deserialize, PartialEq, Eq, Clone)]
struct PeekOwner {
    #[serde(default, rename = "apiVersion")]
    api_version: String,
    #[serde(default)]
    kind: String,
    #[serde(default)]
    name: String,
    #[serde(default)]
    uid: String,
    #[serde(default)]
    controller: Option<bool>,
}

#[derive(Default, Deserialize)]
struct PeekStatus {
    #[serde(default)]
    phase: Option<String>,
}

impl Peek {
    fn of(object: &StoredObject) -> Peek {
        serde_json::from_slice(&object.json).unwrap_or_default()
    }

    fn controller(&self) -> Option<&PeekOwner> {
        self.metadata
            .owner_references
            .iter()
            .find(|o| o.controller == Some(true))
    }

    /// The name of the batch/v1 Job controlling the object, if one does.
    fn job_owner(&self) -> Option<&str> {
        self.controller()
            .filter(|o| o.kind == "Job" && o.api_version == "batch/v1")
            .map(|o| o.name.as_str())
    }

    fn has_finalizer(&self) -> bool {
        self.metadata
            .finalizers
            .iter()
            .any(|f| f == pods::TRACKING_FINALIZER)
    }

    /// Finished or being deleted: when a Job's finalizer may be due to go.
    fn winding_down(&self) -> bool {
        self.metadata.deletion_timestamp.is_some()
            || matches!(self.status.phase.as_deref(), Some("Succeeded" | "Failed"))
    }
}

fn job_key(namespace: &str, name: &str) -> JobKey {
    JobKey::Job(ObjectName::new(namespace, name))
}

/// Maps a pod's change to the keys it concerns (upstream's `addPod`, `updatePod`,
/// `deletePod`).
fn on_pod_change(queue: &WorkQueue<JobKey>, change: Change<'_>) {
    let pod = change.object();
    let namespace = pod.key.namespace.as_str();
    let now = Peek::of(pod);
    let mut labels_changed = matches!(change, Change::Added(_));
    match change {
        Change::Resync(_) => return,
        Change::Modified { old, .. } => {
            if old.resource_version == pod.resource_version {
                return;
            }
            labels_changed = old.labels != pod.labels;
            let before = Peek::of(old);
            if before.controller() != now.controller() {
                labels_changed = true;
                if let Some(job) = before.job_owner() {
                    queue.add_after(job_key(namespace, job), BATCH);
                }
            }
        }
        _ => {}
    }
    let deleted = matches!(change, Change::Deleted(_));
    if let Some(job) = now.job_owner() {
        queue.add_after(job_key(namespace, job), BATCH);
        if !deleted && now.has_finalizer() && now.winding_down() {
            queue.add(JobKey::OrphanPod(ObjectName::of(pod)));
        }
        return;
    }
    if now.controller().is_some() || deleted {
        return;
    }
    if now.has_finalizer() {
        queue.add(JobKey::OrphanPod(ObjectName::of(pod)));
    }
    if labels_changed {
        queue.add(JobKey::Adopter(ObjectName::of(pod)));
    }
}

impl Controller for Jobs {
    type Key = JobKey;
    const NAME: &'static str = "job-controller";
    /// kube-controller-manager's `--concurrent-job-syncs`.
    const WORKERS: usize = 5;

    fn register(builder: &mut InformersBuilder, queue: &WorkQueue<JobKey>) {
        let q = queue.clone();
        builder.on_change(
            &jobs_info().store_key(),
            Arc::new(move |change: Change<'_>| {
                let key = JobKey::Job(ObjectName::of(change.object()));
                match change {
                    Change::Added(_) | Change::Deleted(_) => q.add(key),
                    Change::Modified { old, new } => {
                        // A spec change syncs now; a status change is batched with the pods'.
                        if Peek::of(old).metadata.generation != Peek::of(new).metadata.generation {
                            q.add(key);
                        } else {
                            q.add_after(key, BATCH);
                        }
                    }
                    Change::Resync(_) => {}
                }
            }),
        );
        builder.index(
            &pods_info().store_key(),
            CONTROLLER_UID_INDEX,
            claim::controller_uid_index,
        );
        let q = queue.clone();
        builder.on_change(
            &pods_info().store_key(),
            Arc::new(move |change: Change<'_>| on_pod_change(&q, change)),
        );
    }

    fn new(shared: &Shared, informers: &Arc<Informers>, queue: WorkQueue<JobKey>) -> Self {
        let recorder = EventRecorder::start(
            shared.controller_manager.clone(),
            "job-controller",
            &shared.server_name,
            shared.stop.clone(),
        );
        Jobs {
            client: shared.controller_manager.clone(),
            pod_control: PodControl::new(shared.controller_manager.clone(), recorder.clone()),
            recorder,
            jobs: informers
                .cache(&jobs_info().store_key())
                .expect("registered in `register`"),
            pods: informers
                .cache(&pods_info().store_key())
                .expect("registered in `register`"),
            queue,
            backoff: Default::default(),
            clock: Arc::new(Utc::now),
        }
    }

    async fn reconcile(&self, key: &JobKey) -> Result<Outcome, ReconcileError> {
        match key {
            JobKey::Job(name) => self.sync(name).await.map(|()| Outcome::Done),
            JobKey::OrphanPod(name) => self.release_orphan(name).await.map(|()| Outcome::Done),
            JobKey::Adopter(name) => {
                self.offer_orphan(name);
                Ok(Outcome::Done)
            }
        }
    }
}

/// Whether `spec.managedBy` names another controller.
fn managed_elsewhere(job: &Value) -> bool {
    job.pointer("/spec/managedBy")
        .and_then(Value::as_str)
        .is_some_and(|m| m != MANAGED_BY_US)
}

impl Jobs {
    fn involved(&self, job: &Value) -> Involved {
        let text = |p: &str| {
            job.pointer(p)
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_string()
        };
        Involved {
            api_version: "batch/v1".into(),
            kind: "Job".into(),
            namespace: text("/metadata/namespace"),
            name: text("/metadata/name"),
            uid: text("/metadata/uid"),
            resource_version: text("/metadata/resourceVersion"),
        }
    }

    async fn sync(&self, key: &ObjectName) -> Result<(), ReconcileError> {
        let Some(stored) = self.client.get(jobs_info(), &key.namespace, &key.name) else {
            self.backoff.lock().remove(key);
            return self.release_pods_of_missing_job(key).await;
        };
        let job = stored.value();
        if managed_elsewhere(&job) {
            return Ok(());
        }
        if is_finished(&job) {
            self.backoff.lock().remove(key);
            return self.release_pods_of_finished_job(&job).await;
        }
        let mode = job
            .pointer("/spec/completionMode")
            .and_then(Value::as_str)
            .unwrap_or("NonIndexed");
        if !matches!(mode, "NonIndexed" | "Indexed") {
            self.recorder.warning(
                self.involved(&job),
                "UnknownCompletionMode",
                "Skipped Job sync because completion mode is unknown",
            );
            return Ok(());
        }
        let selector = label_selector(job.pointer("/spec/selector"))
            .map_err(|e| ReconcileError::Invalid(format!("job {key}: selector: {e}")))?
            .ok_or_else(|| ReconcileError::Invalid(format!("job {key} has no selector")))?;
        self.sync_job(key, job, &selector).await
    }

    /// The Job's pods (upstream's `getPodsForJob`): candidates read from the store (so a pod
    /// this controller just created is always among them), orphans the selector matches
    /// adopted with the tracking finalizer, pods that stopped matching released.
    async fn claim_pods(
        &self,
        job: &Value,
        selector: &LabelSelector,
    ) -> Result<Vec<Value>, ReconcileError> {
        let namespace = job
            .pointer("/metadata/namespace")
            .and_then(Value::as_str)
            .unwrap_or("");
        let owned = self
            .pods
            .by_index(CONTROLLER_UID_INDEX, super::objects::uid(job));
        let snapshot = self.client.store().snapshot();
        let candidates = claim::candidates(
            &snapshot,
            &pods_info().store_key(),
            namespace,
            Some(selector),
            &owned,
        );
        let claimed = RefManager::new(&self.client, jobs_info(), job, Some(selector), pods_info())
            .adding_finalizer(pods::TRACKING_FINALIZER)
            .claim(candidates.into_iter().map(Candidate::new).collect())
            .await?;
        Ok(claimed.into_iter().map(|c| c.value).collect())
    }

    /// A finished Job counts nothing more: its pods' finalizers go.
    async fn release_pods_of_finished_job(&self, job: &Value) -> Result<(), ReconcileError> {
        let namespace = job
            .pointer("/metadata/namespace")
            .and_then(Value::as_str)
            .unwrap_or("");
        let uid = super::objects::uid(job);
        let snapshot = self.client.store().snapshot();
        let held: Vec<String> = snapshot
            .with_label(
                &pods_info().store_key(),
                Some(namespace),
                CONTROLLER_UID,
                uid,
            )
            .into_iter()
            .filter(|p| Peek::of(p).has_finalizer())
            .map(|p| p.key.name.clone())
            .collect();
        for name in held {
            self.queue
                .add(JobKey::OrphanPod(ObjectName::new(namespace, name)));
        }
        Ok(())
    }

    /// The Job was deleted: pods it left with the finalizer are released.
    async fn release_pods_of_missing_job(&self, key: &ObjectName) -> Result<(), ReconcileError> {
        let snapshot = self.client.store().snapshot();
        let held: Vec<String> = snapshot
            .with_label(
                &pods_info().store_key(),
                Some(&key.namespace),
                JOB_NAME,
                &key.name,
            )
            .into_iter()
            .filter(|p| Peek::of(p).has_finalizer())
            .map(|p| p.key.name.clone())
            .collect();
        for name in held {
            self.queue.add(JobKey::OrphanPod(ObjectName::new(
                key.namespace.clone(),
                name,
            )));
        }
        Ok(())
    }

    /// Removes the tracking finalizer from a pod no live, unfinished Job of ours controls
    /// (upstream's `syncOrphanPod`).
    async fn release_orphan(&self, key: &ObjectName) -> Result<(), ReconcileError> {
        let Some(stored) = self.client.get(pods_info(), &key.namespace, &key.name) else {
            return Ok(());
        };
        let pod = stored.value();
        if !has_tracking_finalizer(&pod) {
            return Ok(());
        }
        if let Some(owner) = controller_ref(&pod) {
            if owner.kind != "Job" || owner.api_version != "batch/v1" {
                return Ok(());
            }
            let job = self
                .client
                .get(jobs_info(), &key.namespace, &owner.name)
                .filter(|j| j.uid == owner.uid)
                .map(|j| j.value());
            if let Some(job) = job {
                if managed_elsewhere(&job) || !is_finished(&job) {
                    return Ok(());
                }
            }
        }
        match sync::remove_finalizer(self, &key.namespace, &key.name).await {
            Ok(()) => Ok(()),
            Err(e) if e.is_not_found() => Ok(()),
            Err(e) => Err(e.into()),
        }
    }

    /// Queues the Jobs of the pod's namespace whose selector matches it, so one adopts it.
    fn offer_orphan(&self, key: &ObjectName) {
        let Some(pod) = self.client.get(pods_info(), &key.namespace, &key.name) else {
            return;
        };
        for job in self.jobs.list(Some(&key.namespace)) {
            let value = job.value();
            let Ok(Some(selector)) = label_selector(value.pointer("/spec/selector")) else {
                continue;
            };
            if selector.matches(&pod.labels) {
                self.queue
                    .add_after(JobKey::Job(ObjectName::of(&job)), BATCH);
            }
        }
    }
}
