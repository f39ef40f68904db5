//! The status written after a rollout step, with the progress estimate of
//! `progressDeadlineSeconds` (upstream's `syncRolloutStatus`): `Progressing` is
//! `NewReplicaSetAvailable` once the rollout completed, `ReplicaSetUpdated` (its update time
//! renewed) whenever pods moved forward, and `ProgressDeadlineExceeded` (status False) once no
//! pod moved for the deadline; ReplicaSets' `ReplicaFailure` conditions are carried over.
//! A Deployment that stopped moving is looked at again when its deadline passes.

use std::time::Duration;

use chrono::Utc;

use super::replica_sets::Rs;
use super::status::{self, Condition, DeploymentStatus, PROGRESSING, REPLICA_FAILURE};
use super::{Deployment, Deployments};
use crate::controllers::worker::{Outcome, ReconcileError};

impl Deployments {
    pub(super) async fn sync_rollout_status(
        &self,
        d: &mut Deployment,
        list: &[Rs],
        new: Option<usize>,
    ) -> Result<Outcome, ReconcileError> {
        let now = Utc::now();
        let new_rs = new.map(|n| &list[n]);
        let all: Vec<&Rs> = list.iter().collect();
        let mut next = status::calculate(&all, new_rs, d, now);
        if !d.has_progress_deadline() {
            next.remove_condition(PROGRESSING);
        }
        let current = d.status.condition(PROGRESSING).cloned();
        let finished = next.replicas == next.updated_replicas
            && current
                .as_ref()
                .is_some_and(|c| c.reason == status::NEW_RS_AVAILABLE);
        if d.has_progress_deadline() && !finished {
            let subject = match new_rs {
                Some(rs) => format!("ReplicaSet {:?}", rs.name),
                None => format!("Deployment {:?}", d.name()),
            };
            if status::complete(d, &next) {
                next.set_condition(Condition::new(
                    PROGRESSING,
                    "True",
                    status::NEW_RS_AVAILABLE,
                    format!("{subject} has successfully progressed."),
                    now,
                ));
            } else if status::progressing(d, &next) {
                // The update time moves with every sign of progress, even under the same
                // reason, which `set_condition` alone would not do.
                let mut condition = Condition::new(
                    PROGRESSING,
                    "True",
                    status::REPLICA_SET_UPDATED,
                    format!("{subject} is progressing."),
                    now,
                );
                if let Some(current) = &current {
                    if current.status == "True" {
                        condition.last_transition_time = current.last_transition_time.clone();
                    }
                    next.remove_condition(PROGRESSING);
                }
                next.set_condition(condition);
            } else if status::timed_out(d, &next, now) {
                next.set_condition(Condition::new(
                    PROGRESSING,
                    "False",
                    status::TIMED_OUT,
                    format!("{subject} has timed out progressing."),
                    now,
                ));
            }
        }
        match replica_failure(list, new) {
            Some(failure) => next.set_condition(failure),
            None => next.remove_condition(REPLICA_FAILURE),
        }
        if next == d.status {
            return Ok(self.requeue_stuck(d, &next));
        }
        self.write_status(d, next).await?;
        Ok(Outcome::Done)
    }

    /// When to look again at a rollout that shows no progress, to time it out
    /// (`requeueStuckDeployment`).
    fn requeue_stuck(&self, d: &Deployment, next: &DeploymentStatus) -> Outcome {
        let Some(current) = d.status.condition(PROGRESSING) else {
            return Outcome::Done;
        };
        if !d.has_progress_deadline()
            || status::complete(d, next)
            || current.reason == status::TIMED_OUT
        {
            return Outcome::Done;
        }
        let Some(deadline) = status::deadline(d, current) else {
            return Outcome::Done;
        };
        let after = (deadline - Utc::now()).to_std().unwrap_or_default();
        if after < Duration::from_secs(1) {
            Outcome::RequeueAfter(Duration::from_millis(250))
        } else {
            // A second more, so the deadline has surely passed.
            Outcome::RequeueAfter(after + Duration::from_secs(1))
        }
    }
}

/// The `ReplicaFailure` condition of the new ReplicaSet, else of any other
/// (`getReplicaFailures`).
fn replica_failure(list: &[Rs], new: Option<usize>) -> Option<Condition> {
    let failure_of = |rs: &Rs| {
        rs.value
            .pointer("/status/conditions")
            .and_then(serde_json::Value::as_array)
            .into_iter()
            .flatten()
            .find(|c| c.get("type").and_then(serde_json::Value::as_str) == Some(REPLICA_FAILURE))
            .map(status::from_replica_set_condition)
    };
    new.and_then(|n| failure_of(&list[n]))
        .or_else(|| list.iter().find_map(failure_of))
}
