//! TTL after finished (kube-controller-manager's `ttl-after-finished-controller`): a Job with
//! `spec.ttlSecondsAfterFinished` is deleted that many seconds after its `Complete` or
//! `Failed` condition turned true. The Job is queued for its expiry time (`add_after`, no
//! polling); at that time it is read again from the store, since its TTL may have been changed
//! or removed, and deleted only if it is still the same Job (uid precondition).
//! The deletion propagates in the foreground, as upstream's: the garbage collector deletes
//! the Job's pods first, and the Job goes once they are gone.

use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use serde_json::Value;

use super::informer::{Change, Informers, InformersBuilder, ObjectName};
use super::job::{jobs_info, Clock};
use super::objects::{is_deleting, parse_time};
use super::queue::WorkQueue;
use super::worker::{Controller, Outcome, ReconcileError};
use super::Shared;
use crate::client::{Client, DeleteOptions};

pub struct TtlAfterFinished {
    client: Client,
    clock: Clock,
}

/// When the Job finished (its `Complete` or `Failed` condition's transition), if it did.
fn finished_at(job: &Value) -> Option<Result<DateTime<Utc>, String>> {
    let condition = job
        .pointer("/status/conditions")
        .and_then(Value::as_array)?
        .iter()
        .find(|c| {
            c["status"] == "True" && matches!(c["type"].as_str(), Some("Complete" | "Failed"))
        })?;
    Some(
        condition
            .get("lastTransitionTime")
            .and_then(Value::as_str)
            .and_then(parse_time)
            .ok_or_else(|| "its finish condition has no lastTransitionTime".to_string()),
    )
}

fn ttl_seconds(job: &Value) -> Option<i64> {
    job.pointer("/spec/ttlSecondsAfterFinished")
        .and_then(Value::as_i64)
}

/// How long until the Job expires (zero: now); `None` when it has no TTL, is not finished or
/// is already being deleted.
fn time_left(job: &Value, now: DateTime<Utc>) -> Option<Result<Duration, String>> {
    let ttl = ttl_seconds(job)?;
    if is_deleting(job) {
        return None;
    }
    let finished = finished_at(job)?;
    Some(finished.map(|at| {
        (at + chrono::Duration::seconds(ttl) - now)
            .to_std()
            .unwrap_or_default()
    }))
}

impl Controller for TtlAfterFinished {
    /// The Job.
    type Key = ObjectName;
    const NAME: &'static str = "ttl-after-finished-controller";
    /// kube-controller-manager's `--concurrent-ttl-after-finished-syncs`.
    const WORKERS: usize = 5;

    fn register(builder: &mut InformersBuilder, queue: &WorkQueue<ObjectName>) {
        let q = queue.clone();
        builder.on_change(
            &jobs_info().store_key(),
            Arc::new(move |change: Change<'_>| {
                if matches!(change, Change::Deleted(_) | Change::Resync(_)) {
                    return;
                }
                let job = change.object();
                // Most Jobs have no TTL: skip them without parsing.
                let has_ttl = job
                    .json
                    .windows(b"ttlSecondsAfterFinished".len())
                    .any(|w| w == b"ttlSecondsAfterFinished");
                if has_ttl && time_left(&job.value(), Utc::now()).is_some() {
                    q.add(ObjectName::of(job));
                }
            }),
        );
    }

    fn new(shared: &Shared, _informers: &Arc<Informers>, _queue: WorkQueue<ObjectName>) -> Self {
        TtlAfterFinished {
            client: shared.controller_manager.clone(),
            clock: Arc::new(Utc::now),
        }
    }

    async fn reconcile(&self, key: &ObjectName) -> Result<Outcome, ReconcileError> {
        let Some(stored) = self.client.get(jobs_info(), &key.namespace, &key.name) else {
            return Ok(Outcome::Done);
        };
        let job = stored.value();
        let left = match time_left(&job, (self.clock)()) {
            None => return Ok(Outcome::Done),
            Some(Err(e)) => return Err(ReconcileError::Invalid(format!("job {key}: {e}"))),
            Some(Ok(left)) => left,
        };
        if !left.is_zero() {
            return Ok(Outcome::RequeueAfter(left));
        }
        let options = DeleteOptions {
            propagation: Some("Foreground"),
            uid: Some(stored.uid.clone()),
            ..Default::default()
        };
        match self
            .client
            .delete(jobs_info(), &key.namespace, &key.name, &options)
            .await
        {
            Ok(_) => {
                tracing::info!(component = "controllers", job = %key, "deleted the finished Job after its TTL");
                Ok(Outcome::Done)
            }
            // Gone, or replaced by another Job of that name.
            Err(e) if e.is_not_found() || e.is_conflict() => Ok(Outcome::Done),
            Err(e) => Err(e.into()),
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::client::PatchKind;
    use crate::controllers::job::tests::Env;

    #[tokio::test]
    async fn a_finished_job_goes_after_its_ttl_and_a_changed_ttl_counts() {
        let env = Env::new().await;
        let (mut ttl, _) = env.start::<TtlAfterFinished>();
        ttl.clock = env.clock();
        let job = json!({"metadata": {"name": "done"}, "spec": {"ttlSecondsAfterFinished": 30,
            "template": {"spec": {"restartPolicy": "Never",
                "containers": [{"name": "c", "image": "busybox"}]}}}});
        env.admin.create(jobs_info(), "ns", &job).await.unwrap();
        let key = ObjectName::new("ns", "done");
        // Not finished: nothing to do.
        assert_eq!(ttl.reconcile(&key).await.unwrap(), Outcome::Done);
        let status = json!({"status": {"conditions": [
            {"type": "Complete", "status": "True", "lastTransitionTime": env.at()}]}});
        env.admin
            .patch(
                jobs_info(),
                "ns",
                "done",
                Some("status"),
                PatchKind::Merge,
                &status,
            )
            .await
            .unwrap();
        env.advance(10);
        assert_eq!(
            ttl.reconcile(&key).await.unwrap(),
            Outcome::RequeueAfter(Duration::from_secs(20))
        );
        // The TTL raised meanwhile: read again, not deleted.
        env.admin
            .patch(
                jobs_info(),
                "ns",
                "done",
                None,
                PatchKind::Merge,
                &json!({"spec": {"ttlSecondsAfterFinished": 60}}),
            )
            .await
            .unwrap();
        env.advance(25);
        assert_eq!(
            ttl.reconcile(&key).await.unwrap(),
            Outcome::RequeueAfter(Duration::from_secs(25))
        );
        env.advance(25);
        assert_eq!(ttl.reconcile(&key).await.unwrap(), Outcome::Done);
        // Deleted in the foreground: held for the garbage collector (not running here).
        let deleting = env.get(jobs_info(), "done").expect("held by its finalizer");
        assert!(deleting["metadata"]["deletionTimestamp"].is_string());
        assert_eq!(
            deleting["metadata"]["finalizers"],
            json!(["foregroundDeletion"])
        );
        // Nothing more to do for a Job being deleted.
        assert_eq!(ttl.reconcile(&key).await.unwrap(), Outcome::Done);
    }
}
