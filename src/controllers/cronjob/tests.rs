//! In-process reconciles of the CronJob controller against a real store and the API pipeline,
//! its clock moved by hand; the test plays the Job controller by writing Jobs' status.

use chrono::{DateTime, Utc};
use serde_json::{json, Value};

use super::*;
use crate::client::PatchKind;
use crate::controllers::job::tests::Env;

struct CronEnv {
    env: Env,
    cronjobs: CronJobs,
}

impl CronEnv {
    async fn new() -> CronEnv {
        let env = Env::new().await;
        let (mut cronjobs, _) = env.start::<CronJobs>();
        cronjobs.clock = env.clock();
        CronEnv { env, cronjobs }
    }

    async fn create(&self, name: &str, spec: Value) -> DateTime<Utc> {
        let mut spec = spec;
        spec["jobTemplate"] = json!({"metadata": {"labels": {"from": name}},
            "spec": {"template": {"spec": {"restartPolicy": "Never",
                "containers": [{"name": "c", "image": "busybox"}]}}}});
        let created = self
            .env
            .admin
            .create(
                cronjobs_info(),
                "ns",
                &json!({"metadata": {"name": name}, "spec": spec}),
            )
            .await
            .expect("cronjob created");
        let at = parse_time(created["metadata"]["creationTimestamp"].as_str().unwrap()).unwrap();
        *self.env.now.lock() = at;
        at
    }

    /// Moves the clock to `seconds` past the first minute boundary after the creation.
    fn to_minute(&self, created: DateTime<Utc>, minutes: i64, seconds: i64) {
        let boundary = (created.timestamp().div_euclid(60) + minutes) * 60 + seconds;
        *self.env.now.lock() = DateTime::from_timestamp(boundary, 0).unwrap();
    }

    async fn sync(&self, name: &str) -> Outcome {
        self.cronjobs
            .reconcile(&ObjectName::new("ns", name))
            .await
            .unwrap_or_else(|e| panic!("sync {name}: {e}"))
    }

    fn cronjob(&self, name: &str) -> Value {
        self.env.get(cronjobs_info(), name).expect("cronjob exists")
    }

    fn jobs(&self) -> Vec<Value> {
        let mut jobs = self.env.list(jobs_info());
        jobs.sort_by(|a, b| {
            a["metadata"]["name"]
                .as_str()
                .cmp(&b["metadata"]["name"].as_str())
        });
        jobs
    }

    /// Plays the Job controller: the Job ends as `kind` (Complete or Failed).
    async fn finish(&self, job: &str, kind: &str) {
        let at = self.env.at();
        let mut status = json!({"status": {"startTime": at, "conditions": [
            {"type": kind, "status": "True", "lastTransitionTime": at}]}});
        if kind == "Complete" {
            status["status"]["completionTime"] = json!(at);
        }
        self.env
            .admin
            .patch(
                jobs_info(),
                "ns",
                job,
                Some("status"),
                PatchKind::Merge,
                &status,
            )
            .await
            .expect("job status written");
    }
}

fn names(jobs: &[Value]) -> Vec<String> {
    jobs.iter()
        .map(|j| j["metadata"]["name"].as_str().unwrap().to_string())
        .collect()
}

#[tokio::test]
async fn a_due_time_makes_one_job_named_after_it_and_requeues_for_the_next() {
    let t = CronEnv::new().await;
    let created = t.create("tick", json!({"schedule": "*/1 * * * *"})).await;
    // Before the first time: nothing, and a look at the next minute.
    match t.sync("tick").await {
        Outcome::RequeueAfter(d) => assert!(d <= std::time::Duration::from_millis(60_100), "{d:?}"),
        other => panic!("{other:?}"),
    }
    assert!(t.jobs().is_empty());
    t.to_minute(created, 1, 2);
    let due = *t.env.now.lock() - chrono::Duration::seconds(2);
    let outcome = t.sync("tick").await;
    assert_eq!(
        outcome,
        Outcome::RequeueAfter(std::time::Duration::from_millis(58_100))
    );
    let jobs = t.jobs();
    let expected = format!("tick-{}", due.timestamp() / 60);
    assert_eq!(names(&jobs), std::slice::from_ref(&expected));
    let job = &jobs[0];
    assert_eq!(job["metadata"]["labels"]["from"], "tick");
    assert_eq!(job["metadata"]["ownerReferences"][0]["kind"], "CronJob");
    assert_eq!(job["metadata"]["ownerReferences"][0]["controller"], true);
    assert_eq!(
        job["metadata"]["annotations"][SCHEDULED_TIMESTAMP],
        format_time(due)
    );
    let cj = t.cronjob("tick");
    assert_eq!(cj["status"]["active"][0]["name"], expected.as_str());
    assert_eq!(cj["status"]["active"][0]["kind"], "Job");
    assert_eq!(cj["status"]["lastScheduleTime"], format_time(due));
    t.env.event("SuccessfulCreate").await;
    // The same time is not started twice.
    t.sync("tick").await;
    assert_eq!(t.jobs().len(), 1);
    // Finished: out of the active list, then its completion is the last success.
    t.finish(&expected, "Complete").await;
    t.sync("tick").await;
    assert!(t.cronjob("tick")["status"].get("active").is_none());
    t.env.event("SawCompletedJob").await;
    t.sync("tick").await;
    assert!(t.cronjob("tick")["status"]["lastSuccessfulTime"].is_string());
}

#[tokio::test]
async fn concurrency_policies() {
    let t = CronEnv::new().await;
    let created = t
        .create(
            "forbid",
            json!({"schedule": "* * * * *", "concurrencyPolicy": "Forbid"}),
        )
        .await;
    t.create(
        "replace",
        json!({"schedule": "* * * * *", "concurrencyPolicy": "Replace"}),
    )
    .await;
    t.create("allow", json!({"schedule": "* * * * *"})).await;
    for minute in 1..=2 {
        t.to_minute(created, minute, 1);
        for name in ["forbid", "replace", "allow"] {
            t.sync(name).await;
        }
    }
    let of = |prefix: &str| -> Vec<String> {
        names(&t.jobs())
            .into_iter()
            .filter(|n| n.starts_with(&format!("{prefix}-")))
            .collect()
    };
    assert_eq!(of("forbid").len(), 1, "the first still runs");
    assert_eq!(of("allow").len(), 2);
    assert_eq!(of("replace").len(), 1, "the first was replaced");
    assert_ne!(
        of("replace")[0],
        format!("replace-{}", created.timestamp() / 60 + 1),
        "the remaining one is the second"
    );
    assert_eq!(
        t.cronjob("replace")["status"]["active"]
            .as_array()
            .unwrap()
            .len(),
        1
    );
    t.env.event("JobAlreadyActive").await;
    t.env.event("SuccessfulDelete").await;
}

#[tokio::test]
async fn finished_jobs_beyond_the_history_limits_are_deleted_oldest_first() {
    let t = CronEnv::new().await;
    let created = t
        .create(
            "hist",
            json!({"schedule": "* * * * *", "successfulJobsHistoryLimit": 1,
                   "failedJobsHistoryLimit": 1}),
        )
        .await;
    for minute in 1..=4 {
        t.to_minute(created, minute, 1);
        t.sync("hist").await;
        let newest = names(&t.jobs()).pop().unwrap();
        t.finish(&newest, if minute <= 2 { "Complete" } else { "Failed" })
            .await;
    }
    t.to_minute(created, 4, 30);
    t.sync("hist").await;
    let left = names(&t.jobs());
    let minute = |n: i64| format!("hist-{}", created.timestamp() / 60 + n);
    assert_eq!(
        left,
        [minute(2), minute(4)],
        "newest success and newest failure"
    );
}

#[tokio::test]
async fn suspended_deadlines_and_many_missed_times() {
    let t = CronEnv::new().await;
    let created = t
        .create("sleepy", json!({"schedule": "* * * * *", "suspend": true}))
        .await;
    t.to_minute(created, 3, 0);
    assert_eq!(t.sync("sleepy").await, Outcome::Done);
    assert!(t.jobs().is_empty());

    // Three hours late: more than 100 missed, the most recent one starts.
    t.create("late", json!({"schedule": "* * * * *"})).await;
    t.to_minute(created, 180, 10);
    t.sync("late").await;
    let expected = format!("late-{}", created.timestamp() / 60 + 180);
    assert_eq!(names(&t.jobs()), [expected]);
    let warning = t.env.event("TooManyMissedTimes").await;
    assert_eq!(warning["type"], "Warning");

    // A starting deadline skips what is older than it.
    let created = t
        .create(
            "strict",
            json!({"schedule": "*/5 * * * *", "startingDeadlineSeconds": 30}),
        )
        .await;
    let first = (created.timestamp().div_euclid(300) + 1) * 300;
    *t.env.now.lock() = DateTime::from_timestamp(first + 45, 0).unwrap();
    t.sync("strict").await;
    assert!(
        !names(&t.jobs()).iter().any(|n| n.starts_with("strict-")),
        "45 s late with a 30 s deadline"
    );
    *t.env.now.lock() = DateTime::from_timestamp(first + 300 + 20, 0).unwrap();
    t.sync("strict").await;
    assert!(names(&t.jobs()).contains(&format!("strict-{}", (first + 300) / 60)));
}

#[tokio::test]
async fn the_scheduled_timestamp_is_written_in_the_time_zone() {
    let t = CronEnv::new().await;
    let created = t
        .create(
            "zoned",
            json!({"schedule": "* * * * *", "timeZone": "Asia/Kolkata"}),
        )
        .await;
    t.to_minute(created, 1, 0);
    t.sync("zoned").await;
    let jobs = t.jobs();
    let stamp = jobs[0]["metadata"]["annotations"][SCHEDULED_TIMESTAMP]
        .as_str()
        .unwrap();
    assert!(stamp.ends_with(":00+05:30"), "{stamp}");
}

#[test]
fn job_names_count_minutes() {
    let at = DateTime::from_timestamp(1_700_000_040, 0).unwrap();
    assert_eq!(job_name("cj", at), "cj-28333334");
}
