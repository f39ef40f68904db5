//! The CronJob controller: kube-controller-manager's `cronjob-controller` (its v2,
//! `pkg/controller/cronjob`), which makes Jobs from a CronJob's `jobTemplate` on its
//! schedule.
//!
//! - [`schedule`]: cron schedules read and stepped as robfig/cron does (the same code checks
//!   them in the API); [`timing`]: which scheduled time is due now and when to look next.
//! - A sync looks at the Jobs the CronJob controls: finished ones leave `status.active`
//!   (`SawCompletedJob`), the latest completion becomes `status.lastSuccessfulTime`, finished
//!   Jobs beyond `successfulJobsHistoryLimit`/`failedJobsHistoryLimit` are deleted oldest
//!   first, active references to Jobs that are gone are dropped (`MissingJob`).
//! - Unless suspended (or being deleted, or its `timeZone` unknown), the most recent
//!   scheduled time that has come and is not yet started gets a Job named
//!   `<cronjob>-<scheduled time in minutes since the epoch>` (so a time is never started
//!   twice, whichever server leads), annotated with
//!   `batch.kubernetes.io/cronjob-scheduled-timestamp`, unless it is later than
//!   `startingDeadlineSeconds` (`MissSchedule`), or `concurrencyPolicy: Forbid` and a Job is
//!   still active (`JobAlreadyActive`); `Replace` deletes the active Jobs first.
//! - Then the CronJob is queued again for its next scheduled time (`add_after`): there is no
//!   polling. A spec change queues it at once; a schedule change at its new next time.

pub(crate) mod schedule;
#[cfg(test)]
mod tests;
pub(crate) mod timing;

use std::collections::HashSet;
use std::sync::Arc;

use chrono::{DateTime, Utc};
use serde::Deserialize;
use serde_json::{json, Value};

use self::schedule::{load_location, Schedule};
use self::timing::{History, Missed};
use super::events::{EventRecorder, Involved};
use super::informer::{Change, Informers, InformersBuilder, ObjectName};
use super::job::Clock;
use super::objects::{controller_ref, is_deleting, new_controller_ref, parse_time};
use super::queue::WorkQueue;
use super::worker::{Controller, Outcome, ReconcileError};
use super::Shared;
use crate::api::meta::format_time;
use crate::client::{Client, ClientError, DeleteOptions};
use crate::kube::object::StoredObject;
use crate::kube::resources::{self, ResourceInfo};

/// The annotation with the time a Job was scheduled for, in the CronJob's zone.
pub const SCHEDULED_TIMESTAMP: &str = "batch.kubernetes.io/cronjob-scheduled-timestamp";

fn cronjobs_info() -> &'static ResourceInfo {
    resources::find("batch", "v1", "cronjobs")
        .unwrap_or_else(|| panic!("built-in kind cronjobs.batch is not registered"))
}

fn jobs_info() -> &'static ResourceInfo {
    super::job::jobs_info()
}

pub struct CronJobs {
    client: Client,
    recorder: EventRecorder,
    clock: Clock,
}

/// The controller reference of a Job, read without building the value.
#[derive(Default, Deserialize)]
struct OwnerPeek {
    #[serde(default)]
    metadata: OwnerMeta,
}

#[derive(Default, Deserialize)]
struct OwnerMeta {
    #[serde(default, rename = "ownerReferences")]
    owner_references: Vec<Owner>,
}

#[derive(Default, Deserialize, PartialEq, Eq)]
struct Owner {
    #[serde(default)]
    kind: String,
    #[serde(default)]
    name: String,
    #[serde(default)]
    controller: Option<bool>,
}

/// The name of the CronJob controlling a Job, if one does.
fn cronjob_owner(job: &StoredObject) -> Option<String> {
    let peek: OwnerPeek = serde_json::from_slice(&job.json).unwrap_or_default();
    peek.metadata
        .owner_references
        .into_iter()
        .find(|o| o.controller == Some(true))
        .filter(|o| o.kind == "CronJob")
        .map(|o| o.name)
}

/// The schedule with the CronJob's `timeZone` as a `TZ=` prefix (upstream's
/// `formatSchedule`); a schedule that has its own prefix is used as it is (with a warning).
fn schedule_text(cronjob: &Value) -> (String, bool) {
    let schedule = cronjob
        .pointer("/spec/schedule")
        .and_then(Value::as_str)
        .unwrap_or("");
    if schedule.contains("TZ") {
        return (schedule.to_string(), true);
    }
    match cronjob.pointer("/spec/timeZone").and_then(Value::as_str) {
        Some(zone) if load_location(zone).is_ok() => (format!("TZ={zone} {schedule}"), false),
        _ => (schedule.to_string(), false),
    }
}

fn history(cronjob: &Value) -> History {
    let time = |p: &str| {
        cronjob
            .pointer(p)
            .and_then(Value::as_str)
            .and_then(parse_time)
    };
    History {
        created: time("/metadata/creationTimestamp").unwrap_or_else(Utc::now),
        last_schedule: time("/status/lastScheduleTime"),
        starting_deadline_seconds: cronjob
            .pointer("/spec/startingDeadlineSeconds")
            .and_then(Value::as_i64),
    }
}

impl Controller for CronJobs {
    /// The CronJob.
    type Key = ObjectName;
    const NAME: &'static str = "cronjob-controller";
    /// kube-controller-manager's `--concurrent-cron-job-syncs`.
    const WORKERS: usize = 5;

    fn register(builder: &mut InformersBuilder, queue: &WorkQueue<ObjectName>) {
        let q = queue.clone();
        builder.on_change(
            &cronjobs_info().store_key(),
            Arc::new(move |change: Change<'_>| {
                let key = ObjectName::of(change.object());
                match change {
                    Change::Added(_) | Change::Deleted(_) => q.add(key),
                    Change::Modified { old, new } => {
                        let (old, new) = (old.value(), new.value());
                        if schedule_text(&old) == schedule_text(&new) {
                            return q.add(key);
                        }
                        // A new schedule: look at its next time (an unparsable one at once,
                        // where the sync reports it).
                        match Schedule::parse(&schedule_text(&new).0) {
                            Ok(schedule) => {
                                let delay =
                                    timing::next_delay(&history(&new), Utc::now(), &schedule);
                                q.add_after(key, delay.unwrap_or_default());
                            }
                            Err(_) => q.add(key),
                        }
                    }
                    Change::Resync(_) => {}
                }
            }),
        );
        let q = queue.clone();
        builder.on_change(
            &jobs_info().store_key(),
            Arc::new(move |change: Change<'_>| {
                if matches!(change, Change::Resync(_)) {
                    return;
                }
                let namespace = change.object().key.namespace.clone();
                if let Some(old) = change.old() {
                    if old.resource_version == change.object().resource_version {
                        return;
                    }
                    if let Some(owner) = cronjob_owner(old) {
                        q.add(ObjectName::new(namespace.clone(), owner));
                    }
                }
                if let Some(owner) = cronjob_owner(change.object()) {
                    q.add(ObjectName::new(namespace, owner));
                }
            }),
        );
    }

    fn new(shared: &Shared, _informers: &Arc<Informers>, _queue: WorkQueue<ObjectName>) -> Self {
        CronJobs {
            client: shared.controller_manager.clone(),
            recorder: EventRecorder::start(
                shared.controller_manager.clone(),
                "cronjob-controller",
                &shared.server_name,
                shared.stop.clone(),
            ),
            clock: Arc::new(Utc::now),
        }
    }

    async fn reconcile(&self, key: &ObjectName) -> Result<Outcome, ReconcileError> {
        let Some(stored) = self.client.get(cronjobs_info(), &key.namespace, &key.name) else {
            return Ok(Outcome::Done);
        };
        let mut cronjob = stored.value();
        let jobs = self.jobs_of(&cronjob);
        let mut update = self.clean_up_finished_jobs(&mut cronjob, &jobs).await;
        let (requeue, changed, result) = self.sync_cronjob(&mut cronjob, &jobs).await;
        update |= changed;
        if update {
            self.client
                .update_status(cronjobs_info(), &key.namespace, &key.name, &cronjob)
                .await?;
        }
        match requeue {
            Some(delay) => Ok(Outcome::RequeueAfter(delay)),
            None => result.map(|()| Outcome::Done),
        }
    }
}

/// `Complete` or `Failed`, whichever is true.
fn finished_as(job: &Value) -> Option<&'static str> {
    job.pointer("/status/conditions")
        .and_then(Value::as_array)?
        .iter()
        .filter(|c| c["status"] == "True")
        .find_map(|c| match c["type"].as_str() {
            Some("Complete") => Some("Complete"),
            Some("Failed") => Some("Failed"),
            _ => None,
        })
}

fn active_refs(cronjob: &Value) -> Vec<Value> {
    cronjob
        .pointer("/status/active")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default()
}

fn set_active(cronjob: &mut Value, active: Vec<Value>) {
    if !cronjob.get("status").is_some_and(Value::is_object) {
        cronjob["status"] = json!({});
    }
    if let Some(status) = cronjob["status"].as_object_mut() {
        if active.is_empty() {
            status.remove("active");
        } else {
            status.insert("active".into(), Value::Array(active));
        }
    }
}

fn in_active(cronjob: &Value, uid: &str) -> bool {
    active_refs(cronjob).iter().any(|r| r["uid"] == uid)
}

fn remove_from_active(cronjob: &mut Value, uid: &str) {
    let kept = active_refs(cronjob)
        .into_iter()
        .filter(|r| r["uid"] != uid)
        .collect();
    set_active(cronjob, kept);
}

fn text<'a>(value: &'a Value, pointer: &str) -> &'a str {
    value.pointer(pointer).and_then(Value::as_str).unwrap_or("")
}

impl CronJobs {
    fn involved(&self, cronjob: &Value) -> Involved {
        Involved {
            api_version: "batch/v1".into(),
            kind: "CronJob".into(),
            namespace: text(cronjob, "/metadata/namespace").to_string(),
            name: text(cronjob, "/metadata/name").to_string(),
            uid: text(cronjob, "/metadata/uid").to_string(),
            resource_version: text(cronjob, "/metadata/resourceVersion").to_string(),
        }
    }

    /// The Jobs the CronJob controls, read from the store (so a Job just created is seen).
    fn jobs_of(&self, cronjob: &Value) -> Vec<Value> {
        let namespace = text(cronjob, "/metadata/namespace");
        let name = text(cronjob, "/metadata/name");
        let snapshot = self.client.store().snapshot();
        snapshot
            .range(&jobs_info().store_key(), Some(namespace), None)
            .filter(|j| cronjob_owner(j).as_deref() == Some(name))
            .map(|j| j.value())
            .collect()
    }

    /// Deletes finished Jobs beyond the history limits, oldest first; whether the status
    /// changed.
    async fn clean_up_finished_jobs(&self, cronjob: &mut Value, jobs: &[Value]) -> bool {
        let limit = |key: &str| {
            cronjob
                .pointer(&format!("/spec/{key}"))
                .and_then(Value::as_i64)
        };
        let (keep_ok, keep_failed) = (
            limit("successfulJobsHistoryLimit"),
            limit("failedJobsHistoryLimit"),
        );
        let mut update = false;
        for (kind, keep) in [("Complete", keep_ok), ("Failed", keep_failed)] {
            let Some(keep) = keep else {
                continue;
            };
            let mut finished: Vec<&Value> = jobs
                .iter()
                .filter(|j| finished_as(j) == Some(kind))
                .collect();
            let excess = finished.len() as i64 - keep.max(0);
            if excess <= 0 {
                continue;
            }
            finished.sort_by(|a, b| oldest_first(a, b));
            for job in finished.into_iter().take(excess as usize) {
                if self.delete_job(cronjob, job).await.is_ok() {
                    update = true;
                }
            }
        }
        update
    }

    /// Deletes a Job (its pods by background propagation) and its active reference.
    async fn delete_job(&self, cronjob: &mut Value, job: &Value) -> Result<(), ClientError> {
        let name = text(job, "/metadata/name");
        let options = DeleteOptions {
            propagation: Some("Background"),
            ..Default::default()
        };
        let namespace = text(job, "/metadata/namespace");
        match self
            .client
            .delete(jobs_info(), namespace, name, &options)
            .await
        {
            Ok(_) => {}
            Err(e) => {
                self.recorder.warning(
                    self.involved(cronjob),
                    "FailedDelete",
                    &format!("Deleted job: {e}"),
                );
                return Err(e);
            }
        }
        remove_from_active(cronjob, text(job, "/metadata/uid"));
        self.recorder.normal(
            self.involved(cronjob),
            "SuccessfulDelete",
            &format!("Deleted job {name}"),
        );
        Ok(())
    }

    /// Upstream's `syncCronJob`: (when to look again, whether the status changed, error).
    async fn sync_cronjob(
        &self,
        cronjob: &mut Value,
        jobs: &[Value],
    ) -> (
        Option<std::time::Duration>,
        bool,
        Result<(), ReconcileError>,
    ) {
        let now = (self.clock)();
        let mut update = false;
        let mut children = HashSet::new();
        for job in jobs {
            let uid = text(job, "/metadata/uid").to_string();
            let found = in_active(cronjob, &uid);
            let finished = finished_as(job);
            let name = text(job, "/metadata/name");
            if !found && finished.is_none() {
                self.recorder.warning(
                    self.involved(cronjob),
                    "UnexpectedJob",
                    &format!("Saw a job that the controller did not create or forgot: {name}"),
                );
            } else if let (true, Some(status)) = (found, finished) {
                remove_from_active(cronjob, &uid);
                self.recorder.normal(
                    self.involved(cronjob),
                    "SawCompletedJob",
                    &format!("Saw completed job: {name}, status: {status}"),
                );
                update = true;
            } else if finished == Some("Complete") {
                if let Some(done) = job
                    .pointer("/status/completionTime")
                    .and_then(Value::as_str)
                {
                    let later = cronjob
                        .pointer("/status/lastSuccessfulTime")
                        .and_then(Value::as_str)
                        .and_then(parse_time)
                        .is_none_or(|last| parse_time(done).is_some_and(|d| d > last));
                    if later {
                        set_status(cronjob, "lastSuccessfulTime", json!(done));
                        update = true;
                    }
                }
            }
            children.insert(uid);
        }
        // Active references to Jobs that are gone (read from the store, not the list above,
        // in case the Job was created since).
        for reference in active_refs(cronjob) {
            let uid = reference["uid"].as_str().unwrap_or("");
            if children.contains(uid) {
                continue;
            }
            let name = reference["name"].as_str().unwrap_or("");
            let namespace = reference["namespace"].as_str().unwrap_or("");
            if self.client.get(jobs_info(), namespace, name).is_none() {
                self.recorder.normal(
                    self.involved(cronjob),
                    "MissingJob",
                    &format!("Active job went missing: {name}"),
                );
                remove_from_active(cronjob, uid);
                update = true;
            }
        }
        if is_deleting(cronjob) {
            return (None, update, Ok(()));
        }
        if let Some(zone) = cronjob.pointer("/spec/timeZone").and_then(Value::as_str) {
            if let Err(e) = load_location(zone) {
                self.recorder.warning(
                    self.involved(cronjob),
                    "UnknownTimeZone",
                    &format!("invalid timeZone: {zone:?}: {e}"),
                );
                return (None, update, Ok(()));
            }
        }
        if cronjob.pointer("/spec/suspend").and_then(Value::as_bool) == Some(true) {
            return (None, update, Ok(()));
        }
        let (text_with_zone, own_prefix) = schedule_text(cronjob);
        if own_prefix {
            self.recorder.warning(
                self.involved(cronjob),
                "UnsupportedSchedule",
                &format!("CRON_TZ or TZ used in schedule {text_with_zone:?} is not officially supported, see https://kubernetes.io/docs/concepts/workloads/controllers/cron-jobs/ for more details"),
            );
        }
        let spec_schedule = text(cronjob, "/spec/schedule").to_string();
        let schedule = match Schedule::parse(&text_with_zone) {
            Ok(s) => s,
            Err(e) => {
                self.recorder.warning(
                    self.involved(cronjob),
                    "UnparseableSchedule",
                    &format!("unparseable schedule: {spec_schedule:?} : {e}"),
                );
                return (None, update, Ok(()));
            }
        };
        let history = history(cronjob);
        let next_look =
            |cronjob: &Value| timing::next_delay(&self::history(cronjob), now, &schedule);
        let scheduled = match timing::most_recent(&history, now, &schedule, true) {
            Err(e) => {
                self.recorder.warning(
                    self.involved(cronjob),
                    "InvalidSchedule",
                    &format!("invalid schedule: {spec_schedule} : {e}"),
                );
                return (None, update, Ok(()));
            }
            Ok(due) => {
                if due.missed == Missed::Many && due.most_recent.is_some() {
                    self.recorder.warning(
                        self.involved(cronjob),
                        "TooManyMissedTimes",
                        "too many missed start times. Set or decrease .spec.startingDeadlineSeconds or check clock skew",
                    );
                }
                due.most_recent
            }
        };
        let Some(scheduled) = scheduled else {
            return (next_look(cronjob), update, Ok(()));
        };
        if let Some(deadline) = history.starting_deadline_seconds {
            if scheduled + chrono::Duration::seconds(deadline) < now {
                self.recorder.warning(
                    self.involved(cronjob),
                    "MissSchedule",
                    &format!(
                        "Missed scheduled time to start a job: {}",
                        scheduled.format("%a, %d %b %Y %H:%M:%S %z")
                    ),
                );
                return (next_look(cronjob), update, Ok(()));
            }
        }
        let job_name = job_name(text(cronjob, "/metadata/name"), scheduled);
        let active = active_refs(cronjob);
        if active.iter().any(|r| r["name"] == job_name.as_str())
            || history.last_schedule == Some(scheduled)
        {
            return (next_look(cronjob), update, Ok(()));
        }
        let policy = text(cronjob, "/spec/concurrencyPolicy");
        if policy == "Forbid" && !active.is_empty() {
            self.recorder.normal(
                self.involved(cronjob),
                "JobAlreadyActive",
                "Not starting job because prior execution is running and concurrency policy is Forbid",
            );
            return (next_look(cronjob), update, Ok(()));
        }
        if policy == "Replace" {
            for reference in &active {
                let namespace = reference["namespace"].as_str().unwrap_or("");
                let name = reference["name"].as_str().unwrap_or("");
                let Some(job) = self.client.get(jobs_info(), namespace, name) else {
                    self.recorder.warning(
                        self.involved(cronjob),
                        "FailedGet",
                        &format!("Get job: jobs.batch {name:?} not found"),
                    );
                    return (
                        None,
                        update,
                        Err(ReconcileError::Invalid(format!(
                            "active job {name} not found"
                        ))),
                    );
                };
                if self.delete_job(cronjob, &job.value()).await.is_err() {
                    return (
                        None,
                        update,
                        Err(ReconcileError::Invalid(format!(
                            "could not replace job {namespace}/{name}"
                        ))),
                    );
                }
                update = true;
            }
        }
        let request = job_from_template(cronjob, &job_name, scheduled);
        let namespace = text(cronjob, "/metadata/namespace").to_string();
        let created = match self.client.create(jobs_info(), &namespace, &request).await {
            Ok(job) => {
                self.recorder.normal(
                    self.involved(cronjob),
                    "SuccessfulCreate",
                    &format!("Created job {job_name}"),
                );
                job
            }
            Err(e) if e.is_already_exists() => {
                // Made before but not recorded (a crash or a lost leadership in between):
                // record it now, if it is this CronJob's.
                let Some(existing) = self.client.get(jobs_info(), &namespace, &job_name) else {
                    return (None, update, Err(e.into()));
                };
                let existing = existing.value();
                let ours = controller_ref(&existing)
                    .is_some_and(|r| r.uid == text(cronjob, "/metadata/uid"));
                if !ours || in_active(cronjob, text(&existing, "/metadata/uid")) {
                    return (None, update, Ok(()));
                }
                existing
            }
            Err(e) if e.code() == 403 => return (None, update, Err(e.into())),
            Err(e) => {
                self.recorder.warning(
                    self.involved(cronjob),
                    "FailedCreate",
                    &format!("Error creating job: {e}"),
                );
                return (None, update, Err(e.into()));
            }
        };
        let mut active = active_refs(cronjob);
        active.push(json!({
            "kind": "Job",
            "namespace": namespace,
            "name": text(&created, "/metadata/name"),
            "uid": text(&created, "/metadata/uid"),
            "apiVersion": "batch/v1",
            "resourceVersion": text(&created, "/metadata/resourceVersion"),
        }));
        set_active(cronjob, active);
        set_status(cronjob, "lastScheduleTime", json!(format_time(scheduled)));
        (next_look(cronjob), true, Ok(()))
    }
}

fn set_status(cronjob: &mut Value, key: &str, value: Value) {
    if !cronjob.get("status").is_some_and(Value::is_object) {
        cronjob["status"] = json!({});
    }
    cronjob["status"][key] = value;
}

/// `<cronjob>-<minutes since the epoch>`: the same scheduled time always names the same Job.
pub fn job_name(cronjob: &str, scheduled: DateTime<Utc>) -> String {
    format!("{cronjob}-{}", scheduled.timestamp().div_euclid(60))
}

/// The Job for `scheduled`: the template's labels, annotations (plus the scheduled time in
/// the CronJob's zone) and spec, controlled by the CronJob.
fn job_from_template(cronjob: &Value, name: &str, scheduled: DateTime<Utc>) -> Value {
    let template = cronjob
        .pointer("/spec/jobTemplate")
        .cloned()
        .unwrap_or(json!({}));
    let labels = template
        .pointer("/metadata/labels")
        .cloned()
        .unwrap_or(json!({}));
    let mut annotations = template
        .pointer("/metadata/annotations")
        .cloned()
        .filter(Value::is_object)
        .unwrap_or(json!({}));
    let zone = load_location(text(cronjob, "/spec/timeZone")).unwrap_or(chrono_tz::Tz::UTC);
    annotations[SCHEDULED_TIMESTAMP] = json!(scheduled
        .with_timezone(&zone)
        .to_rfc3339_opts(chrono::SecondsFormat::Secs, true));
    json!({
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": name,
            "namespace": text(cronjob, "/metadata/namespace"),
            "labels": labels,
            "annotations": annotations,
            "ownerReferences": [new_controller_ref(cronjob, "batch/v1", "CronJob")],
        },
        "spec": template.get("spec").cloned().unwrap_or(json!({})),
    })
}

/// By start time (Jobs not started last), then by name.
fn oldest_first(a: &Value, b: &Value) -> std::cmp::Ordering {
    let start = |j: &Value| {
        j.pointer("/status/startTime")
            .and_then(Value::as_str)
            .and_then(parse_time)
    };
    match (start(a), start(b)) {
        (Some(x), Some(y)) if x != y => x.cmp(&y),
        (Some(_), None) => std::cmp::Ordering::Less,
        (None, Some(_)) => std::cmp::Ordering::Greater,
        _ => text(a, "/metadata/name").cmp(text(b, "/metadata/name")),
    }
}
