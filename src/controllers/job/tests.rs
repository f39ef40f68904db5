//! In-process reconciles of the Job controller against a real store, objects.wal and the API
//! pipeline; the test plays the kubelet by writing pod status, and moves the controller's
//! clock by hand. Syncs are called directly, one after another, with the informers never
//! following the store: the controller must still never create a pod twice.

use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use parking_lot::Mutex;
use serde_json::{json, Value};

use super::*;
use crate::api::meta::format_time;
use crate::client::PatchKind;
use crate::controllers::informer::InformersBuilder;
use crate::controllers::test_env;

/// The shared test world (`controllers::test_env`: a store with namespace `ns`, the API
/// pipeline, clients) and a clock the test moves.
pub(crate) struct Env {
    world: test_env::Env,
    pub admin: Client,
    pub now: Arc<Mutex<DateTime<Utc>>>,
}

impl Env {
    pub async fn new() -> Env {
        let world = test_env::Env::new("ns").await;
        Env {
            admin: world.admin.clone(),
            world,
            // Whole seconds, as the API writes times.
            now: Arc::new(Mutex::new(
                DateTime::from_timestamp(Utc::now().timestamp(), 0).expect("a valid time"),
            )),
        }
    }

    pub fn clock(&self) -> Clock {
        let now = self.now.clone();
        Arc::new(move || *now.lock())
    }

    pub fn advance(&self, seconds: i64) {
        *self.now.lock() += chrono::Duration::seconds(seconds);
    }

    pub fn at(&self) -> String {
        format_time(*self.now.lock())
    }

    /// Controller `C` over this store, its queue, and the informers (synced once, not
    /// following the store afterwards).
    pub fn start<C: Controller>(&self) -> (C, WorkQueue<C::Key>) {
        let queue = WorkQueue::new();
        let mut builder = InformersBuilder::new();
        C::register(&mut builder, &queue);
        let informers = Arc::new(builder.start(self.admin.store().clone()));
        (C::new(&self.world.shared, &informers, queue.clone()), queue)
    }

    pub fn get(&self, info: &ResourceInfo, name: &str) -> Option<Value> {
        self.admin.get(info, "ns", name).map(|o| o.value())
    }

    /// Objects of `info` in `ns`.
    pub fn list(&self, info: &ResourceInfo) -> Vec<Value> {
        self.admin
            .store()
            .snapshot()
            .range(&info.store_key(), Some("ns"), None)
            .map(|o| o.value())
            .collect()
    }

    /// Waits for an Event with `reason` (events are written in the background).
    pub async fn event(&self, reason: &str) -> Value {
        let events = resources::find("", "v1", "events").expect("events");
        for _ in 0..300 {
            if let Some(e) = self
                .list(events)
                .into_iter()
                .find(|e| e["reason"] == reason)
            {
                return e;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        panic!("no {reason} event");
    }
}

struct JobEnv {
    env: Env,
    jobs: Jobs,
}

impl JobEnv {
    async fn new() -> JobEnv {
        let env = Env::new().await;
        let (mut jobs, _) = env.start::<Jobs>();
        jobs.clock = env.clock();
        JobEnv { env, jobs }
    }

    async fn create(&self, name: &str, spec: Value) -> Value {
        let mut spec = spec;
        spec["template"] = json!({"spec": {"restartPolicy": "Never",
            "containers": [{"name": "main", "image": "busybox"}]}});
        self.env
            .admin
            .create(
                jobs_info(),
                "ns",
                &json!({"metadata": {"name": name}, "spec": spec}),
            )
            .await
            .expect("job created")
    }

    async fn sync(&self, name: &str) {
        self.jobs
            .reconcile(&JobKey::Job(ObjectName::new("ns", name)))
            .await
            .unwrap_or_else(|e| panic!("sync {name}: {e}"));
    }

    fn job(&self, name: &str) -> Value {
        self.env.get(jobs_info(), name).expect("job exists")
    }

    fn pods(&self) -> Vec<Value> {
        self.env.list(pods_info())
    }

    fn active_pods(&self) -> Vec<Value> {
        self.pods().into_iter().filter(pods::is_active).collect()
    }

    /// Plays the kubelet: the pod ends with `code` (0: Succeeded).
    async fn finish(&self, pod: &str, code: i64) {
        let at = self.env.at();
        let phase = if code == 0 { "Succeeded" } else { "Failed" };
        let status = json!({"status": {"phase": phase, "conditions": [
                {"type": "Ready", "status": "False", "lastTransitionTime": at}],
            "containerStatuses": [{"name": "main", "ready": false, "restartCount": 0,
                "image": "busybox", "imageID": "", "state": {"terminated": {
                    "exitCode": code, "startedAt": at, "finishedAt": at}}}]}});
        self.env
            .admin
            .patch(
                pods_info(),
                "ns",
                pod,
                Some("status"),
                PatchKind::Merge,
                &status,
            )
            .await
            .expect("pod status written");
    }

    async fn finish_all(&self, code: i64) {
        for pod in self.active_pods() {
            self.finish(pods::name(&pod), code).await;
        }
    }
}

fn condition<'a>(job: &'a Value, kind: &str) -> Option<&'a Value> {
    job["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == kind)
}

fn condition_reason(job: &Value, kind: &str) -> Option<String> {
    condition(job, kind).map(|c| {
        format!(
            "{} {}",
            c["status"].as_str().unwrap_or(""),
            c["reason"].as_str().unwrap_or("")
        )
    })
}

#[tokio::test]
async fn completions_and_parallelism_to_completion_without_duplicates() {
    let t = JobEnv::new().await;
    t.create("work", json!({"completions": 5, "parallelism": 2}))
        .await;
    t.sync("work").await;
    // Syncing again before any informer saw the pods creates nothing more.
    t.sync("work").await;
    let pods = t.active_pods();
    assert_eq!(pods.len(), 2);
    let pod = &pods[0];
    assert!(pods::name(pod).starts_with("work-"));
    assert_eq!(
        pod["metadata"]["finalizers"],
        json!([pods::TRACKING_FINALIZER])
    );
    let job = t.job("work");
    let uid = job["metadata"]["uid"].as_str().unwrap();
    assert_eq!(pod["metadata"]["labels"][CONTROLLER_UID], uid);
    assert_eq!(pod["metadata"]["labels"]["controller-uid"], uid);
    assert_eq!(pod["metadata"]["labels"][JOB_NAME], "work");
    assert_eq!(pod["metadata"]["labels"]["job-name"], "work");
    assert_eq!(pod["metadata"]["ownerReferences"][0]["kind"], "Job");
    assert_eq!(job["status"]["active"], 2);
    assert_eq!(job["status"]["ready"], 0);
    assert!(job["status"]["startTime"].is_string());
    t.env.event("SuccessfulCreate").await;

    let mut rounds = 0;
    while condition(&t.job("work"), "Complete").is_none() {
        rounds += 1;
        assert!(rounds < 10, "not complete: {}", t.job("work")["status"]);
        t.finish_all(0).await;
        t.sync("work").await;
        assert!(t.active_pods().len() <= 2, "never above parallelism");
    }
    let job = t.job("work");
    assert_eq!(job["status"]["succeeded"], 5);
    assert!(job["status"].get("active").is_none());
    assert_eq!(job["status"]["uncountedTerminatedPods"], json!({}));
    assert_eq!(
        condition_reason(&job, "SuccessCriteriaMet").as_deref(),
        Some("True CompletionsReached")
    );
    assert_eq!(
        condition_reason(&job, "Complete").as_deref(),
        Some("True CompletionsReached")
    );
    assert_eq!(
        condition(&job, "Complete").unwrap()["message"],
        "Reached expected number of succeeded pods"
    );
    assert!(job["status"]["completionTime"].is_string());
    // Exactly five pods ran, all counted: no finalizer is left.
    let pods = t.pods();
    assert_eq!(pods.len(), 5);
    assert!(pods.iter().all(|p| !pods::has_tracking_finalizer(p)));
    t.env.event("Completed").await;
}

#[tokio::test]
async fn failures_back_off_then_exceed_the_backoff_limit() {
    let t = JobEnv::new().await;
    t.create("flaky", json!({"backoffLimit": 1})).await;
    t.sync("flaky").await;
    t.finish_all(1).await;
    t.sync("flaky").await;
    let job = t.job("flaky");
    assert_eq!(job["status"]["failed"], 1);
    assert!(t.active_pods().is_empty(), "the replacement waits 10 s");
    t.env.advance(5);
    t.sync("flaky").await;
    assert!(t.active_pods().is_empty(), "still waiting");
    t.env.advance(6);
    t.sync("flaky").await;
    assert_eq!(t.active_pods().len(), 1, "replaced after the backoff");
    t.finish_all(1).await;
    t.sync("flaky").await;
    let job = t.job("flaky");
    assert_eq!(job["status"]["failed"], 2);
    assert_eq!(
        condition_reason(&job, "FailureTarget").as_deref(),
        Some("True BackoffLimitExceeded")
    );
    assert_eq!(
        condition_reason(&job, "Failed").as_deref(),
        Some("True BackoffLimitExceeded")
    );
    assert_eq!(
        condition(&job, "Failed").unwrap()["message"],
        "Job has reached the specified backoff limit"
    );
    assert!(job["status"].get("completionTime").is_none());
    let warning = t.env.event("BackoffLimitExceeded").await;
    assert_eq!(warning["type"], "Warning");
}

#[tokio::test]
async fn a_pod_deleted_before_it_was_counted_is_still_counted() {
    let t = JobEnv::new().await;
    t.create("counted", json!({"backoffLimit": 3})).await;
    t.sync("counted").await;
    let pod = t.active_pods().remove(0);
    let name = pods::name(&pod).to_string();
    // Someone deletes the running pod; the finalizer keeps it until the Job counts it.
    t.env
        .admin
        .delete(pods_info(), "ns", &name, &Default::default())
        .await
        .expect("delete accepted");
    assert!(
        t.env.get(pods_info(), &name).is_some(),
        "held by the finalizer"
    );
    t.sync("counted").await;
    assert!(
        t.env.get(pods_info(), &name).is_none(),
        "released once counted"
    );
    let job = t.job("counted");
    assert_eq!(job["status"]["failed"], 1);
    assert_eq!(job["status"]["uncountedTerminatedPods"], json!({}));
}

#[tokio::test]
async fn indexed_jobs_track_completed_indexes() {
    let t = JobEnv::new().await;
    t.create(
        "idx",
        json!({"completions": 4, "parallelism": 3, "completionMode": "Indexed"}),
    )
    .await;
    t.sync("idx").await;
    t.sync("idx").await;
    let mut by_index: Vec<(i64, Value)> = t
        .active_pods()
        .into_iter()
        .map(|p| (indexes::completion_index(&p).expect("an index"), p))
        .collect();
    by_index.sort_by_key(|(i, _)| *i);
    assert_eq!(
        by_index.iter().map(|(i, _)| *i).collect::<Vec<_>>(),
        [0, 1, 2]
    );
    let (_, first) = &by_index[0];
    assert_eq!(first["spec"]["hostname"], "idx-0");
    assert!(pods::name(first).starts_with("idx-0-"));
    assert_eq!(first["metadata"]["labels"][indexes::COMPLETION_INDEX], "0");
    t.finish(pods::name(&by_index[0].1), 0).await;
    t.finish(pods::name(&by_index[2].1), 0).await;
    // A failure after the last success backs off (one at the same instant would not).
    t.env.advance(1);
    t.finish(pods::name(&by_index[1].1), 1).await;
    t.sync("idx").await;
    let job = t.job("idx");
    assert_eq!(job["status"]["completedIndexes"], "0,2");
    assert_eq!(job["status"]["succeeded"], 2);
    assert_eq!(job["status"]["failed"], 1);
    // A failure holds back every new pod for the backoff, not only its index's.
    assert!(t.active_pods().is_empty());
    t.env.advance(11);
    t.sync("idx").await;
    let mut started: Vec<i64> = t
        .active_pods()
        .iter()
        .filter_map(indexes::completion_index)
        .collect();
    started.sort();
    assert_eq!(started, [1, 3]);
    t.finish_all(0).await;
    t.sync("idx").await;
    let job = t.job("idx");
    assert_eq!(job["status"]["completedIndexes"], "0-3");
    assert_eq!(job["status"]["succeeded"], 4);
    assert!(condition(&job, "Complete").is_some());
}

#[tokio::test]
async fn suspend_and_resume() {
    let t = JobEnv::new().await;
    t.create(
        "paused",
        json!({"suspend": true, "parallelism": 2, "completions": 4}),
    )
    .await;
    t.sync("paused").await;
    let job = t.job("paused");
    assert!(t.pods().is_empty());
    assert_eq!(
        condition_reason(&job, "Suspended").as_deref(),
        Some("True JobSuspended")
    );
    assert!(job["status"].get("startTime").is_none());
    t.env.event("Suspended").await;

    let resume = json!({"spec": {"suspend": false}});
    t.env
        .admin
        .patch(jobs_info(), "ns", "paused", None, PatchKind::Merge, &resume)
        .await
        .unwrap();
    t.sync("paused").await;
    let job = t.job("paused");
    assert_eq!(t.active_pods().len(), 2);
    assert_eq!(
        condition_reason(&job, "Suspended").as_deref(),
        Some("False JobResumed")
    );
    assert!(job["status"]["startTime"].is_string());
    t.env.event("Resumed").await;

    let suspend = json!({"spec": {"suspend": true}});
    t.env
        .admin
        .patch(
            jobs_info(),
            "ns",
            "paused",
            None,
            PatchKind::Merge,
            &suspend,
        )
        .await
        .unwrap();
    t.sync("paused").await;
    // Deleted without being counted as failures (their finalizer went first).
    assert!(t.active_pods().is_empty());
    let job = t.job("paused");
    assert!(job["status"].get("failed").is_none(), "{}", job["status"]);
    assert_eq!(
        condition_reason(&job, "Suspended").as_deref(),
        Some("True JobSuspended")
    );
}

#[tokio::test]
async fn the_active_deadline_fails_the_job_and_deletes_its_pods() {
    let t = JobEnv::new().await;
    t.create(
        "slow",
        json!({"activeDeadlineSeconds": 5, "parallelism": 2, "completions": 2}),
    )
    .await;
    t.sync("slow").await;
    assert_eq!(t.active_pods().len(), 2);
    t.env.advance(6);
    t.sync("slow").await;
    let job = t.job("slow");
    assert_eq!(
        condition_reason(&job, "FailureTarget").as_deref(),
        Some("True DeadlineExceeded")
    );
    // The pods were unbound: deleted at once, counted as failed.
    t.sync("slow").await;
    let job = t.job("slow");
    assert!(t.pods().is_empty());
    assert_eq!(
        condition_reason(&job, "Failed").as_deref(),
        Some("True DeadlineExceeded")
    );
    assert_eq!(job["status"]["failed"], 2);
    assert_eq!(
        condition(&job, "Failed").unwrap()["message"],
        "Job was active longer than specified deadline"
    );
    t.env.event("DeadlineExceeded").await;
}

#[tokio::test]
async fn pod_failure_policy_fails_ignores_and_counts() {
    let t = JobEnv::new().await;
    let policy = json!({"rules": [
        {"action": "FailJob", "onExitCodes": {"containerName": "main", "operator": "In", "values": [42]}},
        {"action": "Ignore", "onExitCodes": {"operator": "In", "values": [1]}}]});
    t.create(
        "pfp",
        json!({"backoffLimit": 0, "podFailurePolicy": policy}),
    )
    .await;
    t.sync("pfp").await;
    t.finish_all(1).await;
    t.sync("pfp").await;
    let job = t.job("pfp");
    assert!(
        job["status"].get("failed").is_none(),
        "ignored: {}",
        job["status"]
    );
    assert!(condition(&job, "Failed").is_none());
    // Not counted, but replaced after the usual delay.
    assert!(t.active_pods().is_empty());
    t.env.advance(11);
    t.sync("pfp").await;
    assert_eq!(t.active_pods().len(), 1);
    t.finish_all(42).await;
    t.sync("pfp").await;
    t.sync("pfp").await;
    let job = t.job("pfp");
    assert_eq!(
        condition_reason(&job, "Failed").as_deref(),
        Some("True PodFailurePolicy")
    );
    let message = condition(&job, "Failed").unwrap()["message"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(
        message.starts_with("Container main for pod ns/pfp-")
            && message.ends_with("failed with exit code 42 matching FailJob rule at index 0"),
        "{message}"
    );
}

#[tokio::test]
async fn fail_index_with_a_backoff_limit_per_index() {
    let t = JobEnv::new().await;
    let policy = json!({"rules": [
        {"action": "FailIndex", "onExitCodes": {"operator": "In", "values": [3]}}]});
    t.create(
        "perindex",
        json!({"completions": 3, "parallelism": 3, "completionMode": "Indexed",
               "backoffLimitPerIndex": 1, "podFailurePolicy": policy}),
    )
    .await;
    t.sync("perindex").await;
    let pods = t.active_pods();
    let of = |ix: i64| {
        pods.iter()
            .find(|p| indexes::completion_index(p) == Some(ix))
            .map(|p| pods::name(p).to_string())
            .unwrap()
    };
    assert_eq!(
        pods[0]["metadata"]["annotations"][pods::INDEX_FAILURE_COUNT],
        "0"
    );
    t.finish(&of(0), 3).await;
    t.finish(&of(1), 1).await;
    t.finish(&of(2), 0).await;
    t.sync("perindex").await;
    let job = t.job("perindex");
    assert_eq!(job["status"]["failedIndexes"], "0");
    assert_eq!(job["status"]["completedIndexes"], "2");
    // Index 1 gets a second pod after its own backoff, carrying its failure count.
    t.env.advance(11);
    t.sync("perindex").await;
    let retry = t.active_pods();
    assert_eq!(retry.len(), 1);
    assert_eq!(indexes::completion_index(&retry[0]), Some(1));
    assert_eq!(
        retry[0]["metadata"]["annotations"][pods::INDEX_FAILURE_COUNT],
        "1"
    );
    t.finish(pods::name(&retry[0]), 1).await;
    t.sync("perindex").await;
    t.sync("perindex").await;
    let job = t.job("perindex");
    assert_eq!(job["status"]["failedIndexes"], "0,1");
    assert_eq!(
        condition_reason(&job, "Failed").as_deref(),
        Some("True FailedIndexes")
    );
}

#[tokio::test]
async fn orphans_with_the_finalizer_are_released_and_matching_ones_adopted() {
    let t = JobEnv::new().await;
    let orphan = json!({"metadata": {"name": "stray", "labels": {"team": "x"},
            "finalizers": [pods::TRACKING_FINALIZER]},
        "spec": {"containers": [{"name": "c", "image": "busybox"}]}});
    t.env
        .admin
        .create(pods_info(), "ns", &orphan)
        .await
        .unwrap();
    t.jobs
        .reconcile(&JobKey::OrphanPod(ObjectName::new("ns", "stray")))
        .await
        .unwrap();
    let stray = t.env.get(pods_info(), "stray").unwrap();
    assert!(!pods::has_tracking_finalizer(&stray));

    // A Job with a manual selector adopts a matching orphan and counts it.
    let job = json!({"metadata": {"name": "adopter"}, "spec": {"manualSelector": true,
        "selector": {"matchLabels": {"team": "x"}}, "completions": 1,
        "template": {"metadata": {"labels": {"team": "x"}}, "spec": {"restartPolicy": "Never",
            "containers": [{"name": "main", "image": "busybox"}]}}}});
    t.env.admin.create(jobs_info(), "ns", &job).await.unwrap();
    t.sync("adopter").await;
    let stray = t.env.get(pods_info(), "stray").unwrap();
    assert_eq!(stray["metadata"]["ownerReferences"][0]["name"], "adopter");
    assert!(pods::has_tracking_finalizer(&stray));
    assert_eq!(
        t.pods().len(),
        1,
        "the adopted pod fills the Job's one slot"
    );
    t.finish("stray", 0).await;
    t.sync("adopter").await;
    assert!(condition(&t.job("adopter"), "Complete").is_some());
}
