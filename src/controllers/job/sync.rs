//! One sync of one Job, in kube-controller-manager's order (`syncJob`, `manageJob`,
//! `trackJobStatusAndRemoveFinalizers`):
//!
//! 1. Claim the pods; count active, ready and terminating ones, and the finished pods not yet
//!    counted (those still holding the tracking finalizer).
//! 2. Decide whether the Job is done: a `SuccessCriteriaMet` or `FailureTarget` condition
//!    already set, a `FailJob` rule, the backoff limit, the active deadline, failed or too
//!    many failed indexes, the success policy, or enough completions.
//! 3. If done, delete the active pods (keeping their finalizers, so they are counted);
//!    otherwise create or delete pods towards `parallelism` and the remaining completions
//!    (after the backoff delay when pods failed), or delete them all while suspended.
//! 4. Count finished pods in three steps so none is lost or counted twice: their uids go to
//!    `status.uncountedTerminatedPods` (written), their finalizers are removed, and pods
//!    whose finalizer is gone move from the uncounted lists to `succeeded`/`failed`
//!    (written). A pod deleted before it was counted keeps its finalizer, so it is still
//!    there to count.
//! 5. Only when nothing is uncounted and no pod is terminating: the interim condition
//!    (`FailureTarget`, `SuccessCriteriaMet`) becomes `Failed` or `Complete`.
//!
//! Pods and the Job are read from the store, which holds every write of this controller by
//! the time the write returns: a sync never misses a pod it created, so it cannot create one
//! twice (upstream needs "expectations" because its cache can lag its own writes).

use std::collections::{BTreeMap, HashSet};

use chrono::{DateTime, Utc};
use serde_json::{json, Value};

use super::backoff::BackoffRecord;
use super::failure_policy::{judge, Action};
use super::indexes::{self, success_policy_met, valid_index, Intervals};
use super::pods::{
    self, count_annotation, has_tracking_finalizer, is_active, is_failed, is_terminating,
    restarts_of_running, INDEX_FAILURE_COUNT, INDEX_IGNORED_FAILURE_COUNT, TRACKING_FINALIZER,
};
use super::status::{Finish, JobStatus, FAILED, FAILURE_TARGET, SUCCESS_CRITERIA_MET, SUSPENDED};
use super::{pods_info, Jobs};
use crate::api::meta::format_time;
use crate::client::{ClientError, PatchKind};
use crate::controllers::informer::ObjectName;
use crate::controllers::objects::{is_deleting, parse_time, pod_is_ready, pod_phase};
use crate::controllers::worker::ReconcileError;

/// The spec fields a sync reads.
#[derive(Debug, Clone)]
pub struct Spec {
    pub completions: Option<i64>,
    pub parallelism: i64,
    pub backoff_limit: i64,
    pub backoff_limit_per_index: Option<i64>,
    pub max_failed_indexes: Option<i64>,
    pub active_deadline: Option<i64>,
    pub indexed: bool,
    pub suspend: bool,
    pub failure_policy: Option<Value>,
    pub success_policy: Option<Value>,
    /// `podReplacementPolicy: Failed` (implied by a pod failure policy): a pod being deleted
    /// is replaced only once it has failed.
    pub only_replace_failed: bool,
    pub restart_on_failure: bool,
}

impl Spec {
    pub fn read(job: &Value) -> Result<Spec, String> {
        let spec = job.get("spec").cloned().unwrap_or(json!({}));
        let int = |key: &str| spec.get(key).and_then(Value::as_i64);
        let present = |key: &str| spec.get(key).filter(|v| !v.is_null()).cloned();
        let indexed = spec.get("completionMode").and_then(Value::as_str) == Some("Indexed");
        let completions = int("completions");
        if indexed && completions.is_none() {
            return Err("an Indexed Job needs spec.completions".into());
        }
        let failure_policy = present("podFailurePolicy");
        Ok(Spec {
            completions,
            parallelism: int("parallelism").unwrap_or(1).max(0),
            backoff_limit: int("backoffLimit").unwrap_or(6),
            backoff_limit_per_index: int("backoffLimitPerIndex").filter(|_| indexed),
            max_failed_indexes: int("maxFailedIndexes"),
            active_deadline: int("activeDeadlineSeconds"),
            indexed,
            suspend: spec.get("suspend").and_then(Value::as_bool) == Some(true),
            only_replace_failed: failure_policy.is_some()
                || spec.get("podReplacementPolicy").and_then(Value::as_str) == Some("Failed"),
            failure_policy,
            success_policy: present("successPolicy").filter(|_| indexed),
            restart_on_failure: job
                .pointer("/spec/template/spec/restartPolicy")
                .and_then(Value::as_str)
                == Some("OnFailure"),
        })
    }

    pub(super) fn per_index(&self) -> bool {
        self.backoff_limit_per_index.is_some()
    }

    pub(super) fn completions_or_zero(&self) -> i64 {
        self.completions.unwrap_or(0)
    }
}

/// The state of one sync.
pub(super) struct Sync<'a> {
    pub(super) ctl: &'a Jobs,
    pub(super) key: &'a ObjectName,
    pub(super) now: DateTime<Utc>,
    pub(super) job: Value,
    pub(super) spec: Spec,
    pub(super) status: JobStatus,
    pub(super) pods: Vec<Value>,
    /// Indexes into `pods` of the active ones.
    pub(super) active: Vec<usize>,
    /// The uncounted uids as the sync found them.
    pub(super) found_uncounted_succeeded: HashSet<String>,
    pub(super) found_uncounted_failed: HashSet<String>,
    pub(super) finished: Option<Finish>,
    pub(super) succeeded: i64,
    pub(super) failed: i64,
    pub(super) prev_succeeded_indexes: Intervals,
    pub(super) succeeded_indexes: Intervals,
    pub(super) failed_indexes: Option<Intervals>,
    /// Per index, the failed pod kept until its replacement exists (its failure count goes
    /// to the replacement).
    pub(super) delayed_deletion: BTreeMap<i64, usize>,
    pub(super) new_backoff: BackoffRecord,
    pub(super) terminating: i64,
    pub(super) ready: i64,
}

impl Jobs {
    /// Syncs the Job at `key` (present in the store as `job`).
    pub(super) async fn sync_job(
        &self,
        key: &ObjectName,
        job: Value,
        selector: &crate::kube::selectors::LabelSelector,
    ) -> Result<(), ReconcileError> {
        let spec = Spec::read(&job).map_err(ReconcileError::Invalid)?;
        let pods = self.claim_pods(&job, selector).await?;
        let status = JobStatus::read(&job);
        let mut sync = Sync {
            ctl: self,
            key,
            now: (self.clock)(),
            found_uncounted_succeeded: status.uncounted_succeeded.iter().cloned().collect(),
            found_uncounted_failed: status.uncounted_failed.iter().cloned().collect(),
            active: (0..pods.len()).filter(|&i| is_active(&pods[i])).collect(),
            terminating: pods.iter().filter(|p| is_terminating(p)).count() as i64,
            ready: 0,
            job,
            spec,
            status,
            pods,
            finished: None,
            succeeded: 0,
            failed: 0,
            prev_succeeded_indexes: Intervals::default(),
            succeeded_indexes: Intervals::default(),
            failed_indexes: None,
            delayed_deletion: BTreeMap::new(),
            new_backoff: BackoffRecord::default(),
        };
        sync.ready = sync
            .active
            .iter()
            .filter(|&&i| pod_is_ready(&sync.pods[i]))
            .count() as i64;
        sync.run().await
    }
}

impl Sync<'_> {
    async fn run(&mut self) -> Result<(), ReconcileError> {
        let (new_succeeded, new_failed) = self.new_finished_pods();
        let non_ignored = new_failed
            .iter()
            .filter(|&&i| judge(self.spec.failure_policy.as_ref(), &self.pods[i]).counts)
            .count() as i64;
        self.succeeded = self.status.succeeded
            + new_succeeded.len() as i64
            + self.found_uncounted_succeeded.len() as i64;
        self.failed = self.status.failed + non_ignored + self.found_uncounted_failed.len() as i64;
        if self.status.start_time.is_none() && !self.spec.suspend {
            self.status.start_time = Some(format_time(self.now));
        }
        {
            let previous = self
                .ctl
                .backoff
                .lock()
                .get(self.key)
                .copied()
                .unwrap_or_default();
            let ok: Vec<&Value> = new_succeeded.iter().map(|&i| &self.pods[i]).collect();
            let bad: Vec<&Value> = new_failed.iter().map(|&i| &self.pods[i]).collect();
            self.new_backoff = previous.after(&ok, &bad);
        }
        self.decide_failure();
        if self.spec.indexed {
            self.count_indexes();
        }

        let mut manage_error = None;
        let mut suspend_changed = false;
        let mut active = self.active.len() as i64;
        if self.finished.is_some() {
            let doomed: Vec<usize> = self.active.clone();
            let (deleted_ready, deleted, error) = self.delete_pods(&doomed, false).await;
            if deleted != active {
                // Pods remain: the Job is not finished until they are gone.
                self.finished = None;
            }
            active -= deleted;
            self.terminating += deleted;
            self.ready -= deleted_ready;
            manage_error = error;
        } else {
            let mut managed = false;
            if !is_deleting(&self.job) {
                let (now_active, error) = self.manage().await;
                active = now_active;
                manage_error = error;
                managed = true;
            }
            let complete = match self.spec.completions {
                None => self.succeeded > 0 && active == 0,
                Some(c) => self.succeeded >= c && active == 0,
            };
            if complete {
                self.finished = Some(Finish::new(
                    SUCCESS_CRITERIA_MET,
                    "CompletionsReached",
                    "Reached expected number of succeeded pods",
                ));
            } else if managed {
                suspend_changed = self.note_suspension();
            }
        }

        let needs_flush = suspend_changed
            || active != self.status.active
            || self.status.ready != Some(self.ready)
            || self.status.terminating != Some(self.terminating);
        self.status.active = active;
        self.status.ready = Some(self.ready);
        self.status.terminating = Some(self.terminating);
        self.track(needs_flush).await?;
        match manage_error {
            Some(e) => Err(e.into()),
            None => Ok(()),
        }
    }

    /// Finished pods not counted yet: they hold the finalizer and are not in the uncounted
    /// lists (indexed: only pods of a valid index).
    fn new_finished_pods(&self) -> (Vec<usize>, Vec<usize>) {
        let completions = self.spec.completions_or_zero();
        let mut succeeded = Vec::new();
        let mut failed = Vec::new();
        for (i, pod) in self.pods.iter().enumerate() {
            if !has_tracking_finalizer(pod) {
                continue;
            }
            if self.spec.indexed && valid_index(pod, completions).is_none() {
                continue;
            }
            let uid = pods::uid(pod);
            if pod_phase(pod) == "Succeeded" && !self.found_uncounted_succeeded.contains(uid) {
                succeeded.push(i);
            }
            if is_failed(pod, self.spec.only_replace_failed)
                && !self.found_uncounted_failed.contains(uid)
            {
                failed.push(i);
            }
        }
        (succeeded, failed)
    }

    /// Step 2 for the failure and interim conditions; also queues the deadline's check.
    fn decide_failure(&mut self) {
        if self.status.is_true(SUCCESS_CRITERIA_MET) {
            let c = self
                .status
                .condition(SUCCESS_CRITERIA_MET)
                .cloned()
                .unwrap_or_default();
            self.finished = Some(Finish::new(
                SUCCESS_CRITERIA_MET,
                c["reason"].as_str().unwrap_or(""),
                c["message"].as_str().unwrap_or(""),
            ));
            return;
        }
        if self.status.is_true(FAILURE_TARGET) {
            let c = self
                .status
                .condition(FAILURE_TARGET)
                .cloned()
                .unwrap_or_default();
            self.finished = Some(Finish::new(
                FAILED,
                c["reason"].as_str().unwrap_or(""),
                c["message"].as_str().unwrap_or(""),
            ));
            return;
        }
        if let Some(message) = self.fail_job_message() {
            self.finished = Some(Finish::new(FAILURE_TARGET, "PodFailurePolicy", &message));
            return;
        }
        let restarts: i64 = if self.spec.restart_on_failure {
            self.pods.iter().map(restarts_of_running).sum()
        } else {
            0
        };
        let past_restarts = self.spec.restart_on_failure
            && if self.spec.backoff_limit == 0 {
                restarts > 0
            } else {
                restarts >= self.spec.backoff_limit
            };
        if self.failed > self.spec.backoff_limit || past_restarts {
            self.finished = Some(Finish::new(
                FAILURE_TARGET,
                "BackoffLimitExceeded",
                "Job has reached the specified backoff limit",
            ));
        } else if let Some(left) = self.deadline_left() {
            if left.is_zero() {
                self.finished = Some(Finish::new(
                    FAILURE_TARGET,
                    "DeadlineExceeded",
                    "Job was active longer than specified deadline",
                ));
            } else {
                self.ctl
                    .queue
                    .add_after(super::JobKey::Job(self.key.clone()), left);
            }
        }
    }

    /// Time left before `activeDeadlineSeconds` (none when unset or suspended).
    fn deadline_left(&self) -> Option<std::time::Duration> {
        let deadline = self.spec.active_deadline?;
        if self.spec.suspend {
            return None;
        }
        let start = self.status.start_time.as_deref().and_then(parse_time)?;
        let allowed = chrono::Duration::seconds(deadline);
        let left = (start + allowed - self.now).to_std().unwrap_or_default();
        Some(left)
    }

    /// The message of the first `FailJob` rule a failed pod matches.
    fn fail_job_message(&self) -> Option<String> {
        let policy = self.spec.failure_policy.as_ref()?;
        self.pods
            .iter()
            .filter(|p| is_failed(p, self.spec.only_replace_failed))
            .find_map(|p| judge(Some(policy), p).fail_job)
    }

    /// Succeeded (and failed) indexes, the per-index limits and the success policy.
    fn count_indexes(&mut self) {
        let completions = self.spec.completions_or_zero();
        self.prev_succeeded_indexes = Intervals::parse(&self.status.completed_indexes, completions);
        let new: std::collections::BTreeSet<i64> = self
            .pods
            .iter()
            .filter(|p| pod_phase(p) == "Succeeded" && has_tracking_finalizer(p))
            .filter_map(|p| valid_index(p, completions))
            .collect();
        self.succeeded_indexes = self.prev_succeeded_indexes.with_indexes(new);
        self.succeeded = self.succeeded_indexes.total();
        if self.spec.per_index() {
            let previous = self
                .status
                .failed_indexes
                .as_deref()
                .map(|t| Intervals::parse(t, completions))
                .unwrap_or_default();
            let new: std::collections::BTreeSet<i64> = self
                .pods
                .iter()
                .filter(|p| has_tracking_finalizer(p) && self.index_failed(p))
                .filter_map(|p| valid_index(p, completions))
                .collect();
            let failed = previous.with_indexes(new);
            if self.finished.is_none() {
                if self
                    .spec
                    .max_failed_indexes
                    .is_some_and(|max| failed.total() > max)
                {
                    self.finished = Some(Finish::new(
                        FAILURE_TARGET,
                        "MaxFailedIndexesExceeded",
                        "Job has exceeded the specified maximal number of failed indexes",
                    ));
                } else if failed.total() > 0
                    && failed.total() + self.succeeded_indexes.total() >= completions
                {
                    self.finished = Some(Finish::new(
                        FAILURE_TARGET,
                        "FailedIndexes",
                        "Job has failed indexes",
                    ));
                }
            }
            self.failed_indexes = Some(failed);
            self.delayed_deletion = self.pods_with_delayed_deletion();
        }
        if self.finished.is_none() {
            if let Some(policy) = &self.spec.success_policy {
                if let Some(message) =
                    success_policy_met(policy, completions, &self.succeeded_indexes)
                {
                    self.finished =
                        Some(Finish::new(SUCCESS_CRITERIA_MET, "SuccessPolicy", &message));
                }
            }
        }
    }

    /// An index fails with a `FailIndex` rule, or when a counted failure finds the index's
    /// earlier failures at `backoffLimitPerIndex`.
    fn index_failed(&self, pod: &Value) -> bool {
        if !is_failed(pod, self.spec.only_replace_failed) {
            return false;
        }
        let verdict = judge(self.spec.failure_policy.as_ref(), pod);
        if verdict.action == Some(Action::FailIndex) {
            return true;
        }
        let limit = self.spec.backoff_limit_per_index.unwrap_or(i64::MAX);
        verdict.counts && count_annotation(pod, INDEX_FAILURE_COUNT) >= limit
    }

    /// For each index with no pod running and not finished, its latest failed pod still
    /// holding the finalizer.
    fn pods_with_delayed_deletion(&self) -> BTreeMap<i64, usize> {
        let completions = self.spec.completions_or_zero();
        let active = indexes::indexes_of(self.active.iter().map(|&i| &self.pods[i]));
        let failed = self.failed_indexes.clone().unwrap_or_default();
        let absolute = |p: &Value| {
            count_annotation(p, INDEX_FAILURE_COUNT)
                + count_annotation(p, INDEX_IGNORED_FAILURE_COUNT)
        };
        let mut kept: BTreeMap<i64, usize> = BTreeMap::new();
        for (i, pod) in self.pods.iter().enumerate() {
            if !has_tracking_finalizer(pod) || !is_failed(pod, self.spec.only_replace_failed) {
                continue;
            }
            let Some(ix) = valid_index(pod, completions) else {
                continue;
            };
            if self.succeeded_indexes.has(ix) || failed.has(ix) || active.contains(&ix) {
                continue;
            }
            match kept.get(&ix) {
                Some(&j) => {
                    let other = &self.pods[j];
                    if absolute(other) <= absolute(pod)
                        && pods::finish_time(pod) >= pods::finish_time(other)
                    {
                        kept.insert(ix, i);
                    }
                }
                None => {
                    kept.insert(ix, i);
                }
            }
        }
        kept
    }

    /// The `Suspended` condition after a managed sync; whether it changed.
    fn note_suspension(&mut self) -> bool {
        let involved = self.ctl.involved(&self.job);
        if self.spec.suspend {
            let changed = self.status.ensure_condition(
                SUSPENDED,
                "True",
                "JobSuspended",
                "Job suspended",
                self.now,
            );
            if changed {
                self.ctl
                    .recorder
                    .normal(involved, "Suspended", "Job suspended");
            }
            changed
        } else {
            let changed = self.status.ensure_condition(
                SUSPENDED,
                "False",
                "JobResumed",
                "Job resumed",
                self.now,
            );
            if changed {
                self.ctl.recorder.normal(involved, "Resumed", "Job resumed");
                // The deadline counts time active: a resumed Job starts its clock again.
                self.status.start_time = Some(format_time(self.now));
            }
            changed
        }
    }
}

/// Removes the tracking finalizer from a pod (a strategic merge patch, so a concurrent
/// change to its other finalizers is kept).
pub(super) async fn remove_finalizer(
    ctl: &Jobs,
    namespace: &str,
    name: &str,
) -> Result<(), ClientError> {
    let patch = json!({"metadata": {"$deleteFromPrimitiveList/finalizers": [TRACKING_FINALIZER]}});
    ctl.client
        .patch(
            pods_info(),
            namespace,
            name,
            None,
            PatchKind::Strategic,
            &patch,
        )
        .await
        .map(|_| ())
}
