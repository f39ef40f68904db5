//! Step 3 of a sync while the Job runs: pods created towards `parallelism` and the remaining
//! completions (after the backoff delay when pods failed; for Indexed Jobs the first indexes
//! not taken, each after its own delay with `backoffLimitPerIndex`), surplus pods deleted
//! least advanced first (for Indexed Jobs repeated indexes first), every active pod deleted
//! while the Job is suspended. Creations go in batches of 1, 2, 4 …, so a Job whose pods are
//! refused stops after the first refusals instead of sending every request.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};

use futures::future::join_all;
use serde_json::Value;

use super::backoff;
use super::failure_policy::judge;
use super::indexes::{self, first_pending, valid_index, Intervals};
use super::pods::{
    self, count_annotation, deletion_order, has_tracking_finalizer, is_terminating, IndexFailures,
    INDEX_FAILURE_COUNT, INDEX_IGNORED_FAILURE_COUNT,
};
use super::pods_info;
use super::sync::{remove_finalizer, Sync};
use crate::client::ClientError;
use crate::controllers::objects::pod_is_ready;
use crate::controllers::pod_control::{
    is_namespace_terminating, slow_start_batch, status_text, FAILED_CREATE,
};

/// Pods created or deleted per sync at most.
const MAX_CREATE_DELETE: usize = 500;

impl Sync<'_> {
    /// Step 3 while the Job runs: the number of active pods after creating or deleting.
    pub(super) async fn manage(&mut self) -> (i64, Option<ClientError>) {
        let mut active = self.active.len() as i64;
        if self.spec.suspend {
            let all = self.pods_for_removal(active as usize);
            let (removed_ready, removed, error) = self.delete_pods(&all, true).await;
            self.terminating += removed;
            self.ready -= removed_ready;
            return (active - removed, error);
        }
        let parallelism = self.spec.parallelism;
        let want = match self.spec.completions {
            None if self.succeeded > 0 => active,
            None => parallelism,
            Some(c) => (c - self.succeeded).clamp(0, parallelism),
        };
        let mut surplus = self.pods_for_removal((active - want).max(0) as usize);
        surplus.truncate(MAX_CREATE_DELETE);
        if !surplus.is_empty() {
            // Deleting takes precedence: one or the other per sync.
            let (removed_ready, removed, error) = self.delete_pods(&surplus, true).await;
            self.terminating += removed;
            self.ready -= removed_ready;
            return (active - removed, error);
        }
        let terminating = if self.spec.only_replace_failed {
            self.terminating
        } else {
            0
        };
        let diff = want - terminating - active;
        if diff <= 0 {
            return (active, None);
        }
        if !self.spec.per_index() {
            let wait = self.new_backoff.remaining(self.now);
            if !wait.is_zero() {
                self.requeue_after(wait);
                return (active, None);
            }
        }
        let mut count = (diff as usize).min(MAX_CREATE_DELETE);
        let mut indexes: Vec<Option<i64>> = vec![None; count];
        if self.spec.indexed {
            let mut pending =
                first_pending(&self.busy_indexes(), count, self.spec.completions_or_zero());
            if self.spec.per_index() {
                let (now, wait) = self.indexes_ready_now(pending);
                if now.is_empty() && !wait.is_zero() {
                    self.requeue_after(wait);
                    return (active, None);
                }
                pending = now;
            }
            count = pending.len();
            indexes = pending.into_iter().map(Some).collect();
        }
        let (created, error) = self.create_pods(&indexes[..count]).await;
        active += created;
        (active, error)
    }

    /// Queues the Job again after `wait` (at least the one-second batching period).
    fn requeue_after(&self, wait: std::time::Duration) {
        let wait = wait.max(std::time::Duration::from_secs(1));
        self.ctl
            .queue
            .add_after(super::JobKey::Job(self.key.clone()), wait);
    }

    /// Indexes not to start again: succeeded, running, failed, and (when only failed pods
    /// are replaced) those whose pod is still terminating.
    fn busy_indexes(&self) -> Intervals {
        let active = indexes::indexes_of(self.active.iter().map(|&i| &self.pods[i]));
        let mut busy = self.succeeded_indexes.with_indexes(active);
        if self.spec.only_replace_failed {
            let terminating = indexes::indexes_of(self.pods.iter().filter(|p| is_terminating(p)));
            busy = busy.with_indexes(terminating);
        }
        if let Some(failed) = &self.failed_indexes {
            busy = busy.merge(failed);
        }
        busy
    }

    /// Of `pending` indexes, those whose own backoff has passed; else the shortest wait.
    fn indexes_ready_now(&self, pending: Vec<i64>) -> (Vec<i64>, std::time::Duration) {
        let mut now = Vec::new();
        let mut shortest: Option<std::time::Duration> = None;
        for ix in pending {
            let wait = match self.delayed_deletion.get(&ix) {
                None => std::time::Duration::ZERO,
                Some(&i) => {
                    let pod = &self.pods[i];
                    let failures = count_annotation(pod, INDEX_FAILURE_COUNT)
                        + count_annotation(pod, INDEX_IGNORED_FAILURE_COUNT)
                        + 1;
                    backoff::remaining(failures as u32, Some(pods::finish_time(pod)), self.now)
                }
            };
            if wait.is_zero() {
                now.push(ix);
            } else {
                shortest = Some(shortest.map_or(wait, |s| s.min(wait)));
            }
        }
        if !now.is_empty() {
            return (now, std::time::Duration::ZERO);
        }
        (now, shortest.unwrap_or_default())
    }

    /// Active pods to delete: for Indexed Jobs every pod without a valid index and all but
    /// one pod of a repeated index, then the least advanced ones up to `at_least`.
    fn pods_for_removal(&self, at_least: usize) -> Vec<usize> {
        let mut remove = Vec::new();
        let mut left: Vec<usize> = Vec::new();
        if self.spec.indexed {
            let completions = self.spec.completions_or_zero();
            let mut by_index: BTreeMap<i64, Vec<usize>> = BTreeMap::new();
            for &i in &self.active {
                match valid_index(&self.pods[i], completions) {
                    Some(ix) => by_index.entry(ix).or_default().push(i),
                    None => remove.push(i),
                }
            }
            for (_, mut same) in by_index {
                same.sort_by(|&a, &b| deletion_order(&self.pods[a], &self.pods[b]));
                let keep = same.pop();
                remove.extend(same);
                left.extend(keep);
            }
        } else {
            left = self.active.clone();
        }
        if remove.len() < at_least {
            left.sort_by(|&a, &b| deletion_order(&self.pods[a], &self.pods[b]));
            let more = at_least - remove.len();
            remove.extend(left.into_iter().take(more));
        }
        remove
    }

    /// Creates pods (one per entry: an index or none), in slow-start batches of 1, 2, 4 … so a
    /// Job whose pods cannot be created stops after the first failures. The number created.
    async fn create_pods(&self, indexes: &[Option<i64>]) -> (i64, Option<ClientError>) {
        let namespace = self.key.namespace.as_str();
        let involved = self.ctl.involved(&self.job);
        let bodies: Vec<Value> = indexes
            .iter()
            .map(|ix| {
                let failures = match ix {
                    Some(ix) if self.spec.per_index() => Some(self.failures_for_replacement(*ix)),
                    _ => None,
                };
                pods::new_pod(&self.job, *ix, failures)
            })
            .collect();
        let next = AtomicUsize::new(0);
        let (created, error) = slow_start_batch(bodies.len(), 1, || {
            let body = &bodies[next.fetch_add(1, Ordering::Relaxed)];
            let involved = &involved;
            async move {
                match self.ctl.client.create(pods_info(), namespace, body).await {
                    Ok(pod) => {
                        let name = pods::name(&pod).to_string();
                        self.ctl.recorder.normal(
                            involved.clone(),
                            "SuccessfulCreate",
                            &format!("Created pod: {name}"),
                        );
                        Ok(())
                    }
                    Err(e) => {
                        if !is_namespace_terminating(&e) {
                            self.ctl.recorder.warning(
                                involved.clone(),
                                FAILED_CREATE,
                                &format!("Error creating: {}", status_text(&e)),
                            );
                        }
                        Err(e)
                    }
                }
            }
        })
        .await;
        // A namespace being deleted refuses every create: nothing is wrong with the Job.
        let error = error.filter(|e| !is_namespace_terminating(e));
        (created as i64, error)
    }

    /// The failure counts a new pod of index `ix` carries, from the failed pod it replaces.
    fn failures_for_replacement(&self, ix: i64) -> IndexFailures {
        let Some(&i) = self.delayed_deletion.get(&ix) else {
            return IndexFailures::default();
        };
        let pod = &self.pods[i];
        let mut counts = IndexFailures {
            counted: count_annotation(pod, INDEX_FAILURE_COUNT),
            ignored: count_annotation(pod, INDEX_IGNORED_FAILURE_COUNT),
        };
        if judge(self.spec.failure_policy.as_ref(), pod).counts {
            counts.counted += 1;
        } else {
            counts.ignored += 1;
        }
        counts
    }

    /// Deletes pods: `release` first removes their finalizer (pods the Job no longer wants
    /// are not counted), otherwise they keep it and are counted as failed. A pod already gone
    /// counts as deleted. Returns (ready pods deleted, pods deleted, first error).
    pub(super) async fn delete_pods(
        &self,
        which: &[usize],
        release: bool,
    ) -> (i64, i64, Option<ClientError>) {
        let namespace = self.key.namespace.as_str();
        let involved = self.ctl.involved(&self.job);
        let results = join_all(which.iter().map(|&i| {
            let involved = &involved;
            async move {
                let pod = &self.pods[i];
                let name = pods::name(pod);
                if release && has_tracking_finalizer(pod) {
                    remove_finalizer(self.ctl, namespace, name).await?;
                }
                self.ctl
                    .pod_control
                    .delete(namespace, name, pods::uid(pod), involved)
                    .await
            }
        }))
        .await;
        let mut ready = 0;
        let mut deleted = 0;
        let mut error = None;
        for (result, &i) in results.into_iter().zip(which) {
            match result {
                Ok(()) => {}
                Err(e) if e.is_not_found() => {}
                Err(e) => {
                    error.get_or_insert(e);
                    continue;
                }
            }
            deleted += 1;
            if pod_is_ready(&self.pods[i]) {
                ready += 1;
            }
        }
        (ready, deleted, error)
    }
}
