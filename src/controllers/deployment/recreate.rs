//! One step of a Recreate rollout (upstream's `recreate.go`): every old ReplicaSet to zero;
//! while any of their pods still runs (being deleted included), nothing more; then the new
//! ReplicaSet, created only now, to full size.

use serde_json::Value;

use super::replica_sets::{self, Rs};
use super::status;
use super::{Deployment, Deployments};
use crate::controllers::claim;
use crate::controllers::worker::{Outcome, ReconcileError};
use crate::kube::store::StoreSnapshot;

impl Deployments {
    pub(super) async fn rollout_recreate(
        &self,
        d: &mut Deployment,
        list: &mut Vec<Rs>,
        snapshot: &StoreSnapshot,
    ) -> Result<Outcome, ReconcileError> {
        // Not created yet, so nothing scales up before the old pods are gone.
        let mut new = self.new_replica_set(d, list, false).await?;
        let mut scaled_down = false;
        for i in 0..list.len() {
            if Some(i) != new && replica_sets::is_active(&list[i]) {
                scaled_down |= self.scale_replica_set(d, list, i, 0).await?;
            }
        }
        if scaled_down {
            return self.sync_rollout_status(d, list, new).await;
        }
        if old_pods_running(d, list, new, snapshot) {
            return self.sync_rollout_status(d, list, new).await;
        }
        if new.is_none() {
            new = self.new_replica_set(d, list, true).await?;
        }
        if let Some(n) = new {
            self.scale_replica_set(d, list, n, d.spec.replicas).await?;
        }
        if status::complete(d, &d.status) {
            self.cleanup(d, list, new).await?;
        }
        self.sync_rollout_status(d, list, new).await
    }
}

/// Whether an old ReplicaSet still counts pods, or any pod of one (selected by the
/// Deployment, controlled by an old ReplicaSet) is not Succeeded or Failed
/// (`oldPodsRunning`).
fn old_pods_running(
    d: &Deployment,
    list: &[Rs],
    new: Option<usize>,
    snapshot: &StoreSnapshot,
) -> bool {
    let old: Vec<&Rs> = (0..list.len())
        .filter(|&i| Some(i) != new)
        .map(|i| &list[i])
        .collect();
    if old.iter().map(|rs| rs.status_replicas).sum::<i64>() > 0 {
        return true;
    }
    let old_uids: Vec<&str> = old.iter().map(|rs| rs.uid.as_str()).collect();
    claim::candidates(snapshot, "pods", d.namespace(), Some(&d.spec.selector), &[])
        .into_iter()
        .filter(|pod| claim::controller_of(pod).is_some_and(|r| old_uids.contains(&r.uid.as_str())))
        .any(|pod| {
            let value = pod.value();
            !matches!(
                value.pointer("/status/phase").and_then(Value::as_str),
                Some("Succeeded" | "Failed")
            )
        })
}
