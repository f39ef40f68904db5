//! The steps every Deployment reconcile shares (upstream's `sync.go`): finding or creating the
//! new ReplicaSet and keeping revisions in step, resizing ReplicaSets in proportion,
//! deleting old ReplicaSets beyond the history limit, and writing the status; plus the writes
//! themselves.

use chrono::Utc;
use serde_json::{json, Value};

use super::replica_sets::{self, Rs, REVISION};
use super::status::{self, Condition, DeploymentStatus, PROGRESSING};
use super::{replicasets, Deployment, Deployments};
use crate::client::{DeleteOptions, PatchKind};
use crate::controllers::objects;
use crate::controllers::pod_control::{is_namespace_terminating, status_text};
use crate::controllers::template::{self, POD_TEMPLATE_HASH};
use crate::controllers::worker::{Outcome, ReconcileError};

impl Deployments {
    /// Resizes without rolling out (paused, or `spec.replicas` changed), then writes the
    /// status (upstream's `sync`). A paused Deployment also drops old ReplicaSets beyond its
    /// history limit.
    pub(super) async fn sync(
        &self,
        d: &mut Deployment,
        list: &mut Vec<Rs>,
    ) -> Result<Outcome, ReconcileError> {
        let new = self.new_replica_set(d, list, false).await?;
        self.scale(d, list, new).await?;
        if d.spec.paused {
            self.cleanup(d, list, new).await?;
        }
        self.sync_deployment_status(d, list, new).await?;
        Ok(Outcome::Done)
    }

    /// Finds the new ReplicaSet in `list` and brings its annotations and the Deployment's
    /// revision up to date, or, with `create`, creates it (upstream's `getNewReplicaSet`).
    /// Its index in `list`.
    pub(super) async fn new_replica_set(
        &self,
        d: &mut Deployment,
        list: &mut Vec<Rs>,
        create: bool,
    ) -> Result<Option<usize>, ReconcileError> {
        let existing = replica_sets::find_new(&d.spec.template, list);
        let max_old = replica_sets::max_revision(
            list.iter()
                .enumerate()
                .filter(|(i, _)| Some(*i) != existing)
                .map(|(_, rs)| rs),
        );
        let new_revision = max_old + 1;
        let now = Utc::now();
        if let Some(i) = existing {
            let mut copy = list[i].value.clone();
            let annotations_updated =
                replica_sets::set_new_rs_annotations(d, &mut copy, new_revision, true);
            let rs_min_ready = copy
                .pointer("/spec/minReadySeconds")
                .and_then(Value::as_i64)
                .unwrap_or(0);
            if annotations_updated || rs_min_ready != d.spec.min_ready_seconds {
                copy["spec"]["minReadySeconds"] = json!(d.spec.min_ready_seconds);
                let updated = self
                    .client
                    .update(replicasets(), d.namespace(), &list[i].name, &copy)
                    .await?;
                list[i] = Rs::of(updated);
                return Ok(Some(i));
            }
            // The revision the ReplicaSet has, which may be older than `new_revision` if the
            // update above failed once.
            let revision = list[i].annotation(REVISION).unwrap_or("").to_string();
            self.write_revision(d, &revision).await?;
            if d.has_progress_deadline() && d.status.condition(PROGRESSING).is_none() {
                let mut status = d.status.clone();
                status.set_condition(Condition::new(
                    PROGRESSING,
                    "True",
                    status::FOUND_NEW_RS,
                    format!("Found new replica set {:?}", list[i].name),
                    now,
                ));
                self.write_status(d, status).await?;
            }
            return Ok(Some(i));
        }
        if !create {
            return Ok(None);
        }

        let collision_count = d.status.collision_count.map(|c| c as u32);
        let hash = template::compute_hash(&d.spec.template, collision_count);
        let mut rs_template = d.spec.template.clone();
        rs_template["metadata"]["labels"][POD_TEMPLATE_HASH] = json!(hash);
        let mut selector = d
            .value
            .pointer("/spec/selector")
            .cloned()
            .unwrap_or_else(|| json!({}));
        selector["matchLabels"][POD_TEMPLATE_HASH] = json!(hash);
        let name = format!("{}-{hash}", d.name());
        let mut new_rs = json!({
            "apiVersion": "apps/v1",
            "kind": "ReplicaSet",
            "metadata": {
                "name": name,
                "namespace": d.namespace(),
                "ownerReferences": [objects::new_controller_ref(&d.value, "apps/v1", "Deployment")],
                "labels": rs_template["metadata"]["labels"].clone(),
            },
            "spec": {
                "replicas": 0,
                "minReadySeconds": d.spec.min_ready_seconds,
                "selector": selector,
                "template": rs_template,
            },
        });
        let replicas = {
            let placeholder = Rs::of(new_rs.clone());
            let mut all: Vec<&Rs> = list.iter().collect();
            all.push(&placeholder);
            replica_sets::new_rs_new_replicas(d, &all, &placeholder)
        };
        new_rs["spec"]["replicas"] = json!(replicas);
        replica_sets::set_new_rs_annotations(d, &mut new_rs, new_revision, false);

        let mut already_exists = false;
        let created = match self
            .client
            .create(replicasets(), d.namespace(), &new_rs)
            .await
        {
            Ok(created) => Rs::of(created),
            Err(e) if e.is_already_exists() => {
                // A slow cache upstream; here a ReplicaSet of this name that is not ours,
                // or ours from an earlier reconcile whose answer was lost.
                let existing = self
                    .client
                    .get(replicasets(), d.namespace(), &name)
                    .map(|stored| Rs::of(stored.value()));
                match existing {
                    Some(rs)
                        if objects::controller_ref(&rs.value)
                            .is_some_and(|c| c.uid == d.stored.uid)
                            && template::equal_ignoring_hash(&d.spec.template, rs.template()) =>
                    {
                        already_exists = true;
                        rs
                    }
                    _ => {
                        // A hash collision: the next name comes from the next count.
                        let mut status = d.status.clone();
                        let before = status.collision_count.unwrap_or(0);
                        status.collision_count = Some(before + 1);
                        if self.write_status(d, status).await.is_ok() {
                            tracing::info!(
                                component = "controllers",
                                deployment = %d.stored.key,
                                old = before,
                                new = before + 1,
                                "hash collision: bumping collisionCount"
                            );
                        }
                        return Err(e.into());
                    }
                }
            }
            Err(e) if is_namespace_terminating(&e) => return Err(e.into()),
            Err(e) => {
                let message = format!(
                    "Failed to create new replica set {name:?}: {}",
                    status_text(&e)
                );
                if d.has_progress_deadline() {
                    let mut status = d.status.clone();
                    status.set_condition(Condition::new(
                        PROGRESSING,
                        "False",
                        status::FAILED_RS_CREATE,
                        message.clone(),
                        now,
                    ));
                    // The create's failure is the one to report.
                    let _ = self.write_status(d, status).await;
                }
                self.recorder
                    .warning(d.involved(), status::FAILED_RS_CREATE, &message);
                return Err(e.into());
            }
        };
        if !already_exists && replicas > 0 {
            self.recorder.normal(
                d.involved(),
                "ScalingReplicaSet",
                &format!(
                    "Scaled up replica set {} from 0 to {replicas}",
                    created.name
                ),
            );
        }
        let created_name = created.name.clone();
        list.push(created);
        self.write_revision(d, &new_revision.to_string()).await?;
        if !already_exists && d.has_progress_deadline() {
            let mut status = d.status.clone();
            status.set_condition(Condition::new(
                PROGRESSING,
                "True",
                status::NEW_REPLICA_SET,
                format!("Created new replica set {created_name:?}"),
                now,
            ));
            self.write_status(d, status).await?;
        }
        Ok(Some(list.len() - 1))
    }

    /// Resizes the ReplicaSets to `spec.replicas` (upstream's `scale`): the one active
    /// ReplicaSet (or the newest, when none is) takes all; a saturated new one leaves the old
    /// ones nothing; otherwise, rolling, what is added or removed is shared in proportion to
    /// their sizes, leftovers to the largest.
    pub(super) async fn scale(
        &self,
        d: &Deployment,
        list: &mut [Rs],
        new: Option<usize>,
    ) -> Result<(), ReconcileError> {
        if let Some(i) = active_or_latest(list, new) {
            if list[i].replicas != d.spec.replicas {
                self.scale_replica_set(d, list, i, d.spec.replicas).await?;
            }
            return Ok(());
        }
        if let Some(n) = new.filter(|&n| replica_sets::is_saturated(d, &list[n])) {
            for i in 0..list.len() {
                if i != n && replica_sets::is_active(&list[i]) {
                    self.scale_replica_set(d, list, i, 0).await?;
                }
            }
            return Ok(());
        }
        if !d.is_rolling() {
            return Ok(());
        }
        let mut active: Vec<usize> = (0..list.len())
            .filter(|&i| replica_sets::is_active(&list[i]))
            .collect();
        let current: i64 = active.iter().map(|&i| list[i].replicas).sum();
        let allowed = if d.spec.replicas > 0 {
            d.spec.replicas + d.max_surge()
        } else {
            0
        };
        let to_add = allowed - current;
        if to_add > 0 {
            active.sort_by(|&a, &b| replica_sets::by_size_newer(&list[a], &list[b]));
        } else if to_add < 0 {
            active.sort_by(|&a, &b| replica_sets::by_size_older(&list[a], &list[b]));
        }
        let mut added = 0;
        let mut sizes: Vec<i64> = Vec::with_capacity(active.len());
        for &i in &active {
            let rs = &list[i];
            if to_add != 0 {
                let share = replica_sets::proportion(rs, d, to_add, added);
                sizes.push(rs.replicas + share);
                added += share;
            } else {
                sizes.push(rs.replicas);
            }
        }
        if let Some(first) = sizes.first_mut() {
            if to_add != 0 {
                *first = (*first + to_add - added).max(0);
            }
        }
        for (&i, size) in active.iter().zip(sizes) {
            self.scale_replica_set(d, list, i, size).await?;
        }
        Ok(())
    }

    /// Sets `list[i]` to `size` and its `desired-replicas`/`max-replicas` to the Deployment's
    /// (`scaleReplicaSet`), with a `ScalingReplicaSet` event when the size changed. Whether
    /// it did.
    pub(super) async fn scale_replica_set(
        &self,
        d: &Deployment,
        list: &mut [Rs],
        i: usize,
        size: i64,
    ) -> Result<bool, ReconcileError> {
        let rs = &list[i];
        let (desired, max) = (d.spec.replicas, d.spec.replicas + d.max_surge());
        let resize = rs.replicas != size;
        if !resize && !replica_sets::replicas_annotations_need_update(rs, desired, max) {
            return Ok(false);
        }
        let patch = json!({
            "metadata": {
                "resourceVersion": rs.resource_version(),
                "annotations": {
                    replica_sets::DESIRED_REPLICAS: desired.to_string(),
                    replica_sets::MAX_REPLICAS: max.to_string(),
                },
            },
            "spec": {"replicas": size},
        });
        let updated = self
            .client
            .patch(
                replicasets(),
                d.namespace(),
                &rs.name,
                None,
                PatchKind::Merge,
                &patch,
            )
            .await?;
        let before = rs.replicas;
        list[i] = Rs::of(updated);
        if resize {
            let direction = if before < size { "up" } else { "down" };
            self.recorder.normal(
                d.involved(),
                "ScalingReplicaSet",
                &format!(
                    "Scaled {direction} replica set {} from {before} to {size}",
                    list[i].name
                ),
            );
        }
        Ok(resize)
    }

    /// Deletes the oldest empty old ReplicaSets beyond `revisionHistoryLimit`
    /// (`cleanupDeployment`).
    pub(super) async fn cleanup(
        &self,
        d: &Deployment,
        list: &[Rs],
        new: Option<usize>,
    ) -> Result<(), ReconcileError> {
        let Some(limit) = d
            .spec
            .revision_history_limit
            .filter(|l| *l != i64::from(i32::MAX))
        else {
            return Ok(());
        };
        let mut cleanable: Vec<&Rs> = list
            .iter()
            .enumerate()
            .filter(|(i, rs)| Some(*i) != new && !rs.deleting)
            .map(|(_, rs)| rs)
            .collect();
        let surplus = cleanable.len() as i64 - limit;
        if surplus <= 0 {
            return Ok(());
        }
        cleanable.sort_by(|a, b| replica_sets::by_revision(a, b));
        for rs in cleanable.into_iter().take(surplus as usize) {
            if rs.status_replicas != 0 || rs.replicas != 0 || rs.generation > rs.observed_generation
            {
                continue;
            }
            let options = DeleteOptions {
                uid: Some(rs.uid.clone()),
                ..DeleteOptions::default()
            };
            match self
                .client
                .delete(replicasets(), d.namespace(), &rs.name, &options)
                .await
            {
                Ok(_) => {}
                Err(e) if e.is_not_found() || e.is_conflict() => {}
                Err(e) => return Err(e.into()),
            }
        }
        Ok(())
    }

    /// Writes the status the ReplicaSets add up to, without progress estimates
    /// (`syncDeploymentStatus`).
    pub(super) async fn sync_deployment_status(
        &self,
        d: &mut Deployment,
        list: &[Rs],
        new: Option<usize>,
    ) -> Result<(), ReconcileError> {
        let all: Vec<&Rs> = list.iter().collect();
        let status = status::calculate(&all, new.map(|n| &list[n]), d, Utc::now());
        if status != d.status {
            self.write_status(d, status).await?;
        }
        Ok(())
    }

    /// Records pausing and resuming in the `Progressing` condition, so a rollout is not
    /// timed out for the time it spent paused (`checkPausedConditions`).
    pub(super) async fn check_paused_conditions(
        &self,
        d: &mut Deployment,
    ) -> Result<(), ReconcileError> {
        if !d.has_progress_deadline() {
            return Ok(());
        }
        let condition = d.status.condition(PROGRESSING);
        if condition.is_some_and(|c| c.reason == status::TIMED_OUT) {
            return Ok(());
        }
        let paused_recorded = condition.is_some_and(|c| c.reason == status::PAUSED);
        let now = Utc::now();
        let change = if d.spec.paused && !paused_recorded {
            Condition::new(
                PROGRESSING,
                "Unknown",
                status::PAUSED,
                "Deployment is paused".into(),
                now,
            )
        } else if !d.spec.paused && paused_recorded {
            Condition::new(
                PROGRESSING,
                "Unknown",
                status::RESUMED,
                "Deployment is resumed".into(),
                now,
            )
        } else {
            return Ok(());
        };
        let mut status = d.status.clone();
        status.set_condition(change);
        self.write_status(d, status).await
    }

    /// Writes `status` through `/status` at the Deployment's current resourceVersion.
    pub(super) async fn write_status(
        &self,
        d: &mut Deployment,
        status: DeploymentStatus,
    ) -> Result<(), ReconcileError> {
        let mut object = d.value.clone();
        object["status"] = status.to_value();
        let written = self
            .client
            .update_status(super::deployments(), d.namespace(), d.name(), &object)
            .await?;
        d.written(written);
        Ok(())
    }

    /// Sets the Deployment's `deployment.kubernetes.io/revision` to `revision` when it
    /// differs.
    async fn write_revision(
        &self,
        d: &mut Deployment,
        revision: &str,
    ) -> Result<(), ReconcileError> {
        if replica_sets::annotation(&d.value, REVISION) == Some(revision) {
            return Ok(());
        }
        let patch = json!({"metadata": {"annotations": {REVISION: revision}}});
        let written = self
            .client
            .patch(
                super::deployments(),
                d.namespace(),
                d.name(),
                None,
                PatchKind::Merge,
                &patch,
            )
            .await?;
        d.written(written);
        Ok(())
    }
}

/// The only active ReplicaSet, or the newest one when none is active; `None` when several
/// are active (upstream's `FindActiveOrLatest`).
fn active_or_latest(list: &[Rs], new: Option<usize>) -> Option<usize> {
    if list.is_empty() {
        return None;
    }
    let mut old: Vec<usize> = (0..list.len()).filter(|&i| Some(i) != new).collect();
    old.sort_by(|&a, &b| replica_sets::by_creation(&list[b], &list[a]));
    let active: Vec<usize> = old
        .iter()
        .copied()
        .chain(new)
        .filter(|&i| replica_sets::is_active(&list[i]))
        .collect();
    match active.len() {
        0 => new.or_else(|| old.first().copied()),
        1 => Some(active[0]),
        _ => None,
    }
}
