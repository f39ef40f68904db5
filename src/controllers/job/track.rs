//! Steps 4 and 5 of a sync: finished pods counted through `status.uncountedTerminatedPods`
//! and the tracking finalizer (see `sync`), then the final condition and its event.

use std::collections::HashSet;

use futures::future::join_all;

use super::failure_policy::judge;
use super::indexes::{self, valid_index};
use super::jobs_info;
use super::pods::{self, has_tracking_finalizer, is_failed};
use super::status::{
    new_condition, Finish, JobStatus, COMPLETE, FAILED, FAILURE_TARGET, SUCCESS_CRITERIA_MET,
};
use super::sync::{remove_finalizer, Sync};
use crate::api::meta::format_time;
use crate::controllers::objects::{is_deleting, pod_phase};
use crate::controllers::worker::ReconcileError;

/// Finished pods counted per sync at most (status stays under ~20 KB; big Jobs do not starve
/// small ones).
const MAX_UNCOUNTED: usize = 500;

impl Sync<'_> {
    /// Whether the pod's finalizer may go now: always once the Job is done or deleted, or
    /// the pod succeeded; a failed pod unless it is kept for its index's replacement.
    fn can_remove_finalizer(&self, i: usize, failed: bool) -> bool {
        let pod = &self.pods[i];
        if is_deleting(&self.job) || self.finished.is_some() || pod_phase(pod) == "Succeeded" {
            return true;
        }
        if !failed {
            return false;
        }
        if self.spec.per_index() {
            if let Some(ix) = indexes::completion_index(pod) {
                if self.delayed_deletion.get(&ix) == Some(&i) {
                    return false;
                }
            }
        }
        true
    }

    /// Steps 4 and 5.
    pub(super) async fn track(&mut self, mut needs_flush: bool) -> Result<(), ReconcileError> {
        let completions = self.spec.completions_or_zero();
        let mut order: Vec<usize> = (0..self.pods.len()).collect();
        if self.spec.indexed {
            order.sort_by_key(|&i| indexes::completion_index(&self.pods[i]).unwrap_or(-1));
        }
        let mut with_finalizer: HashSet<String> = self
            .pods
            .iter()
            .filter(|p| has_tracking_finalizer(p))
            .map(|p| pods::uid(p).to_string())
            .collect();
        if clean_uncounted(&mut self.status, &with_finalizer) {
            needs_flush = true;
        }
        let mut to_release = Vec::new();
        let mut new_indexes = Vec::new();
        let mut reached_max = false;
        let finished_not_success = self
            .finished
            .as_ref()
            .is_some_and(|f| f.kind != SUCCESS_CRITERIA_MET);
        for i in order {
            let pod = &self.pods[i];
            if !has_tracking_finalizer(pod) {
                continue;
            }
            let failed = is_failed(pod, self.spec.only_replace_failed);
            if !self.can_remove_finalizer(i, failed) {
                continue;
            }
            to_release.push(i);
            let uid = pods::uid(pod).to_string();
            if pod_phase(pod) == "Succeeded" && !self.found_uncounted_failed.contains(&uid) {
                if self.spec.indexed {
                    if let Some(ix) = valid_index(pod, completions) {
                        if !self.prev_succeeded_indexes.has(ix) {
                            new_indexes.push(ix);
                            needs_flush = true;
                        }
                    }
                } else if !self.found_uncounted_succeeded.contains(&uid) {
                    needs_flush = true;
                    self.status.uncounted_succeeded.push(uid);
                }
            } else if failed || finished_not_success {
                let index_ok = !self.spec.indexed || valid_index(pod, completions).is_some();
                if !self.found_uncounted_failed.contains(&uid)
                    && index_ok
                    && judge(self.spec.failure_policy.as_ref(), pod).counts
                {
                    self.status.uncounted_failed.push(uid);
                    needs_flush = true;
                }
            }
            let pending = new_indexes.len()
                + self.status.uncounted_succeeded.len()
                + self.status.uncounted_failed.len();
            if pending >= MAX_UNCOUNTED {
                reached_max = true;
                break;
            }
        }
        if self.spec.indexed {
            self.succeeded_indexes = self.succeeded_indexes.with_indexes(new_indexes);
            let text = self.succeeded_indexes.to_string();
            if text != self.status.completed_indexes {
                needs_flush = true;
            }
            self.status.succeeded = self.succeeded_indexes.total();
            self.status.completed_indexes = text;
            let failed_text = self.failed_indexes.as_ref().map(ToString::to_string);
            if failed_text != self.status.failed_indexes {
                self.status.failed_indexes = failed_text;
                needs_flush = true;
            }
        }
        match self.finished.clone() {
            Some(f) if f.kind == FAILURE_TARGET => {
                // Recorded before any finalizer goes, so the reason survives a crash.
                self.status.conditions.push(new_condition(
                    FAILURE_TARGET,
                    "True",
                    &f.reason,
                    &f.message,
                    self.now,
                ));
                needs_flush = true;
                self.finished = Some(Finish::new(FAILED, &f.reason, &f.message));
            }
            Some(f) if f.kind == SUCCESS_CRITERIA_MET => {
                if !self.status.is_true(SUCCESS_CRITERIA_MET) {
                    self.status.conditions.push(new_condition(
                        SUCCESS_CRITERIA_MET,
                        "True",
                        &f.reason,
                        &f.message,
                        self.now,
                    ));
                    needs_flush = true;
                }
                self.finished = Some(Finish::new(COMPLETE, &f.reason, &f.message));
            }
            _ => {}
        }
        needs_flush = self
            .flush_and_remove_finalizers(&to_release, &mut with_finalizer, needs_flush)
            .await?;
        let job_finished = !reached_max && self.enact_finished();
        if job_finished || needs_flush {
            self.write_status().await?;
        }
        if job_finished {
            self.record_finished();
        }
        Ok(())
    }

    /// Writes the uncounted pods, removes the finalizers, moves what was removed into the
    /// counters. Whether a write is still owed.
    async fn flush_and_remove_finalizers(
        &mut self,
        to_release: &[usize],
        with_finalizer: &mut HashSet<String>,
        mut needs_flush: bool,
    ) -> Result<bool, ReconcileError> {
        if needs_flush {
            self.write_status().await?;
            self.ctl
                .backoff
                .lock()
                .insert(self.key.clone(), self.new_backoff);
            needs_flush = false;
        }
        let ctl = self.ctl;
        let namespace = self.key.namespace.as_str();
        let names: Vec<&str> = to_release
            .iter()
            .map(|&i| pods::name(&self.pods[i]))
            .collect();
        let results = join_all(
            names
                .iter()
                .map(|name| remove_finalizer(ctl, namespace, name)),
        )
        .await;
        let mut error = None;
        for (result, &i) in results.into_iter().zip(to_release) {
            match result {
                Ok(()) => {}
                Err(e) if e.is_not_found() => {}
                Err(e) => {
                    error.get_or_insert(e);
                    continue;
                }
            }
            with_finalizer.remove(pods::uid(&self.pods[i]));
        }
        if clean_uncounted(&mut self.status, with_finalizer) {
            needs_flush = true;
        }
        if let Some(e) = error {
            if needs_flush {
                self.write_status().await?;
            }
            return Err(e.into());
        }
        Ok(needs_flush)
    }

    /// Step 5: the final condition once every pod is counted and none terminates.
    fn enact_finished(&mut self) -> bool {
        let Some(finish) = self.finished.clone() else {
            return false;
        };
        if !self.status.uncounted_succeeded.is_empty() || !self.status.uncounted_failed.is_empty() {
            return false;
        }
        if self.terminating > 0 {
            return false;
        }
        self.status.ensure_condition(
            finish.kind,
            "True",
            &finish.reason,
            &finish.message,
            self.now,
        );
        if finish.kind == COMPLETE {
            self.status.completion_time = Some(format_time(self.now));
        }
        true
    }

    fn record_finished(&self) {
        let Some(finish) = &self.finished else {
            return;
        };
        let involved = self.ctl.involved(&self.job);
        if finish.kind == COMPLETE {
            if self
                .spec
                .completions
                .is_some_and(|c| self.status.succeeded > c)
            {
                self.ctl.recorder.warning(
                    involved.clone(),
                    "TooManySucceededPods",
                    "Too many succeeded pods running after completion count reached",
                );
            }
            self.ctl
                .recorder
                .normal(involved, "Completed", "Job completed");
        } else {
            self.ctl
                .recorder
                .warning(involved, &finish.reason, &finish.message);
        }
        self.ctl.backoff.lock().remove(self.key);
    }

    /// PUTs the status; the Job read back carries the new resourceVersion.
    async fn write_status(&mut self) -> Result<(), ReconcileError> {
        self.status.write_into(&mut self.job);
        let written = self
            .ctl
            .client
            .update_status(jobs_info(), &self.key.namespace, &self.key.name, &self.job)
            .await?;
        self.job = written;
        Ok(())
    }
}

/// Moves uncounted pods whose finalizer is gone into the counters; whether any moved.
fn clean_uncounted(status: &mut JobStatus, with_finalizer: &HashSet<String>) -> bool {
    let before = (
        status.uncounted_succeeded.len(),
        status.uncounted_failed.len(),
    );
    status
        .uncounted_succeeded
        .retain(|uid| with_finalizer.contains(uid));
    status
        .uncounted_failed
        .retain(|uid| with_finalizer.contains(uid));
    let moved_ok = (before.0 - status.uncounted_succeeded.len()) as i64;
    let moved_bad = (before.1 - status.uncounted_failed.len()) as i64;
    status.succeeded += moved_ok;
    status.failed += moved_bad;
    moved_ok + moved_bad > 0
}
