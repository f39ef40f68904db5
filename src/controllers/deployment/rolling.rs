//! One step of a RollingUpdate (upstream's `rolling.go`): grow the new ReplicaSet while every
//! ReplicaSet together stays within `replicas + maxSurge`; otherwise shrink old ones, first
//! by their pods that are not available (deleting those costs no availability), then while
//! more than `replicas - maxUnavailable` pods are available; once the rollout is complete,
//! drop old ReplicaSets beyond the history limit.

use super::replica_sets::{self, Rs};
use super::status;
use super::{Deployment, Deployments};
use crate::controllers::worker::{Outcome, ReconcileError};

impl Deployments {
    pub(super) async fn rollout_rolling(
        &self,
        d: &mut Deployment,
        list: &mut Vec<Rs>,
    ) -> Result<Outcome, ReconcileError> {
        let Some(new) = self.new_replica_set(d, list, true).await? else {
            return Ok(Outcome::Done);
        };
        if self.reconcile_new(d, list, new).await? {
            return self.sync_rollout_status(d, list, Some(new)).await;
        }
        if self.reconcile_old(d, list, new).await? {
            return self.sync_rollout_status(d, list, Some(new)).await;
        }
        if status::complete(d, &d.status) {
            self.cleanup(d, list, Some(new)).await?;
        }
        self.sync_rollout_status(d, list, Some(new)).await
    }

    /// Grows (or, above `spec.replicas`, shrinks) the new ReplicaSet; whether it changed.
    async fn reconcile_new(
        &self,
        d: &Deployment,
        list: &mut [Rs],
        new: usize,
    ) -> Result<bool, ReconcileError> {
        let size = list[new].replicas;
        if size == d.spec.replicas {
            return Ok(false);
        }
        if size > d.spec.replicas {
            return self.scale_replica_set(d, list, new, d.spec.replicas).await;
        }
        let all: Vec<&Rs> = list.iter().collect();
        let target = replica_sets::new_rs_new_replicas(d, &all, &list[new]);
        self.scale_replica_set(d, list, new, target).await
    }

    /// Shrinks old ReplicaSets as far as availability allows (`reconcileOldReplicaSets`);
    /// whether any shrank.
    async fn reconcile_old(
        &self,
        d: &Deployment,
        list: &mut [Rs],
        new: usize,
    ) -> Result<bool, ReconcileError> {
        let mut old: Vec<usize> = (0..list.len())
            .filter(|&i| i != new && replica_sets::is_active(&list[i]))
            .collect();
        if old.iter().map(|&i| list[i].replicas).sum::<i64>() == 0 {
            return Ok(false);
        }
        let all_pods: i64 = list.iter().map(|rs| rs.replicas).sum();
        let min_available = d.spec.replicas - d.max_unavailable();
        let new_unavailable = list[new].replicas - list[new].available_within_size();
        // Pods that may go: beyond the minimum, and not counting new pods that are not
        // available yet (deleting old ones for those would lower availability further).
        let max_scaled_down = all_pods - min_available - new_unavailable;
        if max_scaled_down <= 0 {
            return Ok(false);
        }
        old.sort_by(|&a, &b| replica_sets::by_creation(&list[a], &list[b]));
        let cleaned = self
            .cleanup_unhealthy(d, list, &old, max_scaled_down)
            .await?;
        let scaled = self.scale_down_old(d, list, &old).await?;
        Ok(cleaned + scaled > 0)
    }

    /// Shrinks old ReplicaSets by their pods that are not available, oldest first, up to
    /// `max` in all (`cleanupUnhealthyReplicas`); how many.
    async fn cleanup_unhealthy(
        &self,
        d: &Deployment,
        list: &mut [Rs],
        old: &[usize],
        max: i64,
    ) -> Result<i64, ReconcileError> {
        let mut total = 0;
        for &i in old {
            if total >= max {
                break;
            }
            let rs = &list[i];
            let unhealthy = rs.replicas - rs.available_within_size();
            if rs.replicas == 0 || unhealthy == 0 {
                continue;
            }
            let count = (max - total).min(unhealthy);
            self.scale_replica_set(d, list, i, list[i].replicas - count)
                .await?;
            total += count;
        }
        Ok(total)
    }

    /// Shrinks old ReplicaSets, oldest first, while more than `replicas - maxUnavailable`
    /// pods are available (`scaleDownOldReplicaSetsForRollingUpdate`); how many.
    async fn scale_down_old(
        &self,
        d: &Deployment,
        list: &mut [Rs],
        old: &[usize],
    ) -> Result<i64, ReconcileError> {
        let min_available = d.spec.replicas - d.max_unavailable();
        let available: i64 = list.iter().map(Rs::available_within_size).sum();
        if available <= min_available {
            return Ok(0);
        }
        let wanted = available - min_available;
        let mut total = 0;
        for &i in old {
            if total >= wanted {
                break;
            }
            if list[i].replicas == 0 {
                continue;
            }
            let count = list[i].replicas.min(wanted - total);
            self.scale_replica_set(d, list, i, list[i].replicas - count)
                .await?;
            total += count;
        }
        Ok(total)
    }
}
