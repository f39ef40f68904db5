//! One pass over a set's pods (upstream's `updateStatefulSet` with `processReplica`,
//! `processCondemned` and the rolling update), and the pod and claim writes it makes
//! (upstream's `StatefulPodControl`, with its event reasons and messages).
//!
//! The range `start ..= start + replicas - 1` is walked in order: a finished pod is deleted
//! (made again once it is gone), a missing one created from the current revision below the
//! partition and from the update revision above it. An ordered set stops at the first pod it
//! creates or that is not Running, Ready and available; a parallel one goes through all of
//! them at once (in slow-start batches). Pods above the range ("condemned") get their claims'
//! references for `whenScaled`, then are deleted highest first, an ordered set waiting for each
//! to be gone and for the others to be available first. Last, a rolling update deletes the
//! highest pod at or above the partition that is not at the update revision, or waits for the
//! highest one not yet available.

use std::future::Future;

use chrono::{DateTime, Utc};
use serde_json::{json, Value};

use super::identity;
use super::pods;
use super::retention::{self, Owner};
use super::status::SetStatus;
use super::{claims_info, Set, StatefulSets, Strategy};
use crate::client::{DeleteOptions, PatchKind};
use crate::controllers::claim::Candidate;
use crate::controllers::history::Revision;
use crate::controllers::pod_control::{self, status_text};
use crate::controllers::worker::ReconcileError;

/// A place in the set's range: its pod, or the ordinal of a pod still to make.
enum Slot<'a> {
    Pod(&'a Candidate, i64),
    Missing(i64),
}

/// What a pass knows besides the pods.
struct Pass<'a> {
    set: &'a Set,
    current: &'a Revision,
    update: &'a Revision,
    current_template: Value,
    update_template: Value,
    monotonic: bool,
    now: DateTime<Utc>,
}

impl Pass<'_> {
    /// The template and revision of a new pod at `ordinal` (upstream's
    /// `newVersionedStatefulSetPod`): the current revision below the partition (or, with a
    /// rolling update and no `rollingUpdate` settings, below the current replicas), the
    /// update revision otherwise.
    fn versioned(&self, ordinal: i64) -> (&Value, &Revision) {
        let set = self.set;
        let keep_current = match set.strategy {
            Strategy::RollingUpdate {
                partition: None, ..
            } => ordinal < set.start + set.status.current_replicas,
            Strategy::RollingUpdate {
                partition: Some(partition),
                ..
            } => ordinal < set.start + partition,
            Strategy::OnDelete => false,
        };
        if keep_current {
            (&self.current_template, self.current)
        } else {
            (&self.update_template, self.update)
        }
    }

    fn unavailable(&self, pod: &Value) -> bool {
        pods::unavailable(pod, self.set.min_ready_seconds, self.now)
    }
}

fn set_owner(set: &Set) -> Owner<'_> {
    Owner {
        api_version: "apps/v1",
        kind: "StatefulSet",
        name: set.name(),
        uid: set.uid(),
    }
}

fn pod_owner(pod: &Value) -> Owner<'_> {
    Owner {
        api_version: "v1",
        kind: "Pod",
        name: crate::controllers::objects::name(pod),
        uid: crate::controllers::objects::uid(pod),
    }
}

/// Runs `f` for each of `count` items: in order, stopping at the first that asks to (or
/// fails), when `monotonic`; otherwise all of them, in slow-start batches that stop at the
/// first failing batch. Whether the pass must stop here.
async fn run_for_all<F, Fut>(count: usize, monotonic: bool, f: F) -> Result<bool, ReconcileError>
where
    F: Fn(usize) -> Fut,
    Fut: Future<Output = Result<bool, ReconcileError>>,
{
    if monotonic {
        for i in 0..count {
            if f(i).await? {
                return Ok(true);
            }
        }
        return Ok(false);
    }
    let mut next = 0;
    let (_, error) = pod_control::slow_start_batch(count, 1, || {
        let work = f(next);
        next += 1;
        async move { work.await.map(|_| ()) }
    })
    .await;
    match error {
        Some(e) => Err(e),
        None => Ok(false),
    }
}

impl StatefulSets {
    /// One pass; `status` gets the pods' counts (and one less current replica when the
    /// rolling update deletes one).
    pub(super) async fn update(
        &self,
        set: &Set,
        current: &Revision,
        update: &Revision,
        pods: &[Candidate],
        status: &mut SetStatus,
        now: DateTime<Utc>,
    ) -> Result<(), ReconcileError> {
        status.count(pods.iter().map(|p| &p.value), set.min_ready_seconds, now);
        let pass = Pass {
            set,
            current,
            update,
            current_template: current.template()?,
            update_template: update.template()?,
            monotonic: !set.parallel,
            now,
        };
        let mut replicas: Vec<Slot<'_>> = (set.start..=set.end()).map(Slot::Missing).collect();
        let mut condemned: Vec<(&Candidate, i64)> = Vec::new();
        for pod in pods {
            let Some(ordinal) = identity::ordinal_in(set, pod.name()) else {
                continue;
            };
            if set.in_range(ordinal) {
                replicas[(ordinal - set.start) as usize] = Slot::Pod(pod, ordinal);
            } else {
                condemned.push((pod, ordinal));
            }
        }
        condemned.sort_by_key(|c| std::cmp::Reverse(c.1));
        // The first pod not available, in the order pods are made: below it nothing is
        // deleted by an ordered set except that pod itself. A missing pod is unavailable and
        // is none of the condemned.
        let first_unavailable: Option<Option<&str>> = replicas
            .iter()
            .find_map(|slot| match slot {
                Slot::Missing(_) => Some(None),
                Slot::Pod(p, _) if pass.unavailable(&p.value) => Some(Some(p.object.uid.as_str())),
                Slot::Pod(..) => None,
            })
            .or_else(|| {
                condemned
                    .iter()
                    .rev()
                    .find(|(p, _)| pass.unavailable(&p.value))
                    .map(|(p, _)| Some(p.object.uid.as_str()))
            });

        let pass = &pass;
        let stop = run_for_all(replicas.len(), pass.monotonic, |i| {
            self.process_replica(pass, &replicas[i])
        })
        .await?;
        if stop {
            return Ok(());
        }
        let condemned = &condemned;
        let stop = run_for_all(condemned.len(), pass.monotonic, |i| async move {
            let (pod, ordinal) = condemned[i];
            if !self.claims_follow_policy(set, &pod.value, ordinal) {
                self.apply_retention(set, &pod.value, ordinal).await?;
            }
            Ok(false)
        })
        .await?;
        if stop {
            return Ok(());
        }
        let stop = run_for_all(condemned.len(), pass.monotonic, |i| {
            let (pod, _) = condemned[i];
            let first = first_unavailable.flatten();
            async move {
                let value = &pod.value;
                if pods::terminating(value) {
                    return Ok(pass.monotonic);
                }
                let is_first = first == Some(pod.object.uid.as_str());
                if pass.monotonic && !is_first && pass.unavailable(value) {
                    return Ok(true);
                }
                self.delete_pod(set, pod).await?;
                Ok(true)
            }
        })
        .await?;
        if stop {
            return Ok(());
        }

        let Strategy::RollingUpdate {
            partition,
            max_unavailable,
        } = set.strategy
        else {
            return Ok(());
        };
        let update_min = partition.unwrap_or(0).max(0) as usize;
        if let Some(max_unavailable) = max_unavailable {
            return self
                .delete_up_to(pass, &replicas, update_min, max_unavailable, status)
                .await;
        }
        for slot in replicas.iter().skip(update_min).rev() {
            let Slot::Pod(pod, _) = slot else {
                // Made in this pass: not available yet.
                return Ok(());
            };
            let value = &pod.value;
            if pods::revision(value) != update.name && !pods::terminating(value) {
                self.delete_pod(set, pod).await?;
                status.current_replicas -= 1;
                return Ok(());
            }
            if pass.unavailable(value) {
                return Ok(());
            }
        }
        Ok(())
    }

    /// A rolling update with `maxUnavailable` (upstream's
    /// `updateStatefulSetAfterInvariantEstablished`): while fewer than `max_unavailable` of the
    /// set's pods are unavailable (a pod made in this pass is), the highest pods at or above the
    /// partition that are not at the update revision are deleted, as many as keep it so.
    async fn delete_up_to(
        &self,
        pass: &Pass<'_>,
        replicas: &[Slot<'_>],
        update_min: usize,
        max_unavailable: i64,
        status: &mut SetStatus,
    ) -> Result<(), ReconcileError> {
        let unavailable = replicas
            .iter()
            .filter(|slot| match slot {
                Slot::Missing(_) => true,
                Slot::Pod(pod, _) => pass.unavailable(&pod.value),
            })
            .count() as i64;
        let mut budget = max_unavailable - unavailable;
        for slot in replicas.iter().skip(update_min).rev() {
            if budget <= 0 {
                break;
            }
            let Slot::Pod(pod, _) = slot else {
                continue;
            };
            if pods::revision(&pod.value) != pass.update.name && !pods::terminating(&pod.value) {
                self.delete_pod(pass.set, pod).await?;
                status.current_replicas -= 1;
                budget -= 1;
            }
        }
        Ok(())
    }

    /// Upstream's `processReplica`: whether the pass must stop at this slot.
    async fn process_replica(
        &self,
        pass: &Pass<'_>,
        slot: &Slot<'_>,
    ) -> Result<bool, ReconcileError> {
        let set = pass.set;
        let (pod, ordinal) = match slot {
            Slot::Missing(ordinal) => {
                if self.claim_is_stale(set, *ordinal) {
                    return Ok(true);
                }
                self.create_pod(pass, *ordinal).await?;
                return Ok(pass.monotonic);
            }
            Slot::Pod(pod, ordinal) => (*pod, *ordinal),
        };
        let value = &pod.value;
        if pods::finished(value) {
            if !pods::terminating(value) {
                self.delete_pod(set, pod).await?;
            }
            // The new pod is made once this one is gone.
            return Ok(true);
        }
        if pods::pending(value) {
            self.create_claims(set, ordinal, pod.name()).await?;
        }
        if pass.monotonic && (pods::terminating(value) || pass.unavailable(value)) {
            return Ok(true);
        }
        let retention_ok = self.claims_follow_policy(set, value, ordinal);
        let storage_ok = identity::storage_matches(set, value, ordinal);
        if let Some(patch) = identity::identity_patch(value, ordinal) {
            let patched = self
                .client
                .patch(
                    pod_control::pods(),
                    set.namespace(),
                    pod.name(),
                    None,
                    PatchKind::Merge,
                    &patch,
                )
                .await;
            self.pod_event(
                set,
                "update",
                pod.name(),
                patched.as_ref().err().map(status_text),
            );
            patched?;
        }
        if !storage_ok {
            self.create_claims(set, ordinal, pod.name()).await?;
        }
        if !retention_ok {
            self.apply_retention(set, value, ordinal).await?;
        }
        Ok(false)
    }

    /// Creates the claims and then the pod at `ordinal`, then sets the claims' references.
    async fn create_pod(&self, pass: &Pass<'_>, ordinal: i64) -> Result<(), ReconcileError> {
        let set = pass.set;
        let (template, revision) = pass.versioned(ordinal);
        let pod = identity::new_pod(set, template, ordinal, &revision.name);
        let name = identity::pod_name(set, ordinal);
        if let Err(e) = self.create_claims(set, ordinal, &name).await {
            self.pod_event(set, "create", &name, Some(e.to_string()));
            return Err(e);
        }
        let created = match self
            .client
            .create(pod_control::pods(), set.namespace(), &pod)
            .await
        {
            Ok(created) => created,
            Err(e) if e.is_already_exists() => return Err(e.into()),
            Err(e) => {
                self.pod_event(set, "create", &name, Some(status_text(&e)));
                return Err(e.into());
            }
        };
        if let Err(e) = self.apply_retention(set, &created, ordinal).await {
            self.pod_event(set, "update", &name, Some(e.to_string()));
            return Err(e);
        }
        self.pod_event(set, "create", &name, None);
        Ok(())
    }

    /// Deletes one pod of the set (only that object); gone already is done.
    async fn delete_pod(&self, set: &Set, pod: &Candidate) -> Result<(), ReconcileError> {
        let options = DeleteOptions {
            uid: Some(pod.object.uid.clone()),
            ..DeleteOptions::default()
        };
        match self
            .client
            .delete(pod_control::pods(), set.namespace(), pod.name(), &options)
            .await
        {
            Ok(_) => {
                self.pod_event(set, "delete", pod.name(), None);
                Ok(())
            }
            Err(e) if e.is_not_found() || e.is_conflict() => Ok(()),
            Err(e) => {
                self.pod_event(set, "delete", pod.name(), Some(status_text(&e)));
                Err(e.into())
            }
        }
    }

    /// Creates the claims of the pod at `ordinal` that do not exist; one being deleted is an
    /// error (the pod must not start on it). Every claim is tried; the first error is returned.
    async fn create_claims(
        &self,
        set: &Set,
        ordinal: i64,
        pod_name: &str,
    ) -> Result<(), ReconcileError> {
        let mut first_error = None;
        for (_, claim) in identity::claims(set, ordinal) {
            let name = crate::controllers::objects::name(&claim).to_string();
            let error = match self.client.get(claims_info(), set.namespace(), &name) {
                Some(existing) if existing.is_deleting() => Some(ReconcileError::Invalid(format!(
                    "pvc {name} is being deleted"
                ))),
                Some(_) => None,
                None => match self
                    .client
                    .create(claims_info(), set.namespace(), &claim)
                    .await
                {
                    Ok(_) => {
                        self.recorder.normal(
                            set.involved(),
                            "SuccessfulCreate",
                            &format!(
                                "create Claim {name} Pod {pod_name} in StatefulSet {} success",
                                set.name()
                            ),
                        );
                        None
                    }
                    Err(e) => {
                        if !e.is_already_exists() {
                            self.recorder.warning(
                                set.involved(),
                                "FailedCreate",
                                &format!(
                                    "create Claim {name} for Pod {pod_name} in StatefulSet {} failed error: {}",
                                    set.name(),
                                    status_text(&e)
                                ),
                            );
                        }
                        Some(e.into())
                    }
                },
            };
            if let Some(e) = error {
                first_error.get_or_insert(e);
            }
        }
        first_error.map_or(Ok(()), Err)
    }

    /// Whether a claim of the pod at `ordinal` is still owned by an earlier pod of that name
    /// that the retention policy has the collector delete: the new pod waits.
    fn claim_is_stale(&self, set: &Set, ordinal: i64) -> bool {
        let pod_name = identity::pod_name(set, ordinal);
        identity::claims(set, ordinal).iter().any(|(_, claim)| {
            self.client
                .get(
                    claims_info(),
                    set.namespace(),
                    crate::controllers::objects::name(claim),
                )
                .is_some_and(|stored| {
                    retention::is_stale_for_new_pod(&stored.value(), set.retention, &pod_name)
                })
        })
    }

    /// Whether every existing claim of the pod follows the retention policy
    /// (`ClaimsMatchRetentionPolicy`).
    fn claims_follow_policy(&self, set: &Set, pod: &Value, ordinal: i64) -> bool {
        identity::claims(set, ordinal).iter().all(|(_, claim)| {
            let name = crate::controllers::objects::name(claim);
            self.client
                .get(claims_info(), set.namespace(), name)
                .is_none_or(|stored| {
                    retention::up_to_date(
                        &stored.value(),
                        set.retention,
                        &set_owner(set),
                        &pod_owner(pod),
                        !set.in_range(ordinal),
                    )
                })
        })
    }

    /// Sets the references of the pod's claims as the retention policy wants them
    /// (`UpdatePodClaimForRetentionPolicy`); a missing claim is left for a later pass.
    async fn apply_retention(
        &self,
        set: &Set,
        pod: &Value,
        ordinal: i64,
    ) -> Result<(), ReconcileError> {
        let (set_ref, pod_ref) = (set_owner(set), pod_owner(pod));
        let scaled_down = !set.in_range(ordinal);
        for (_, claim) in identity::claims(set, ordinal) {
            let name = crate::controllers::objects::name(&claim).to_string();
            let Some(stored) = self.client.get(claims_info(), set.namespace(), &name) else {
                continue;
            };
            let value = stored.value();
            if retention::conflicting_controller(&value, set.retention, &set_ref, &pod_ref) {
                self.recorder.warning(
                    set.involved(),
                    "ConflictingController",
                    &format!(
                        "PersistentVolumeClaim {name} has a conflicting OwnerReference that acts as a managing controller, the retention policy is ignored for this claim"
                    ),
                );
            }
            if retention::up_to_date(&value, set.retention, &set_ref, &pod_ref, scaled_down) {
                continue;
            }
            let references = retention::updated_references(
                &value,
                set.retention,
                (&set_ref, &set.value),
                (&pod_ref, pod),
                scaled_down,
            );
            let patch = json!({"metadata": {
                "ownerReferences": references,
                "resourceVersion": stored.resource_version.to_string(),
            }});
            self.client
                .patch(
                    claims_info(),
                    set.namespace(),
                    &name,
                    None,
                    PatchKind::Merge,
                    &patch,
                )
                .await?;
        }
        Ok(())
    }

    /// Upstream's `recordPodEvent`: `Successful<Verb>` or `Failed<Verb>` on the set.
    fn pod_event(&self, set: &Set, verb: &str, pod_name: &str, error: Option<String>) {
        let title = |v: &str| {
            let mut c = v.chars();
            c.next()
                .map(|f| f.to_uppercase().collect::<String>() + c.as_str())
                .unwrap_or_default()
        };
        match error {
            None => self.recorder.normal(
                set.involved(),
                &format!("Successful{}", title(verb)),
                &format!(
                    "{verb} Pod {pod_name} in StatefulSet {} successful",
                    set.name()
                ),
            ),
            Some(error) => self.recorder.warning(
                set.involved(),
                &format!("Failed{}", title(verb)),
                &format!(
                    "{verb} Pod {pod_name} in StatefulSet {} failed error: {error}",
                    set.name()
                ),
            ),
        }
    }
}
