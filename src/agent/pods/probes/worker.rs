//! The probes of one running container: one task, startup first, then liveness and
//! readiness side by side, each on its own timer, results thresholded as kubelet's prober
//! workers threshold them (see the module above for the rules). A container without probes
//! gets no task: it is started and ready from the start.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use parking_lot::Mutex;
use serde_json::Value;
use tokio::sync::{mpsc, watch};
use tokio::time::{Instant, MissedTickBehavior};

use super::spec::{Handler, ProbeSpec};
use super::{exec, grpc, http, tcp};
use super::{ExecRunner, Outcome, ProbeEvent, ProbeKind, ProbeResult, ProbeTarget, ProbeUpdate};

/// Starts the probes of containers.
pub struct Prober<E> {
    exec: Arc<E>,
    updates: mpsc::Sender<ProbeUpdate>,
}

impl<E> Clone for Prober<E> {
    fn clone(&self) -> Self {
        Prober {
            exec: self.exec.clone(),
            updates: self.updates.clone(),
        }
    }
}

/// The current results of a container's probes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Results {
    startup: ProbeResult,
    liveness: ProbeResult,
    readiness: ProbeResult,
    started: bool,
    has_readiness: bool,
}

impl Results {
    fn slot(&mut self, kind: ProbeKind) -> &mut ProbeResult {
        match kind {
            ProbeKind::Startup => &mut self.startup,
            ProbeKind::Liveness => &mut self.liveness,
            ProbeKind::Readiness => &mut self.readiness,
        }
    }
}

/// The probes of one container run; dropping it stops them.
pub struct ContainerProbes {
    results: Arc<Mutex<Results>>,
    terminating: watch::Sender<bool>,
    /// `None` for a container without probes: a task with nothing to do would keep its
    /// memory (the size of every kind of probe's state) until the container stops.
    task: Option<tokio::task::JoinHandle<()>>,
}

impl ContainerProbes {
    /// The startup probe succeeded (or there is none): the container counts as started.
    pub fn started(&self) -> bool {
        self.results.lock().started
    }

    /// The container is ready: started, and its readiness probe (if any) succeeds.
    pub fn ready(&self) -> bool {
        let r = self.results.lock();
        r.started && (!r.has_readiness || r.readiness == ProbeResult::Success)
    }

    /// The current result of one probe (its initial value when the container has none).
    pub fn result(&self, kind: ProbeKind) -> ProbeResult {
        *self.results.lock().slot(kind)
    }

    /// The pod is being deleted: liveness and startup stop (and count as success, so the
    /// container is not restarted while it terminates); readiness goes on.
    pub fn pod_terminating(&self) {
        let _ = self.terminating.send(true);
    }

    /// Whether the probes still run (they end after a liveness or startup failure, until
    /// the container is replaced, or when the update channel is closed).
    pub fn running(&self) -> bool {
        self.task.as_ref().is_some_and(|task| !task.is_finished())
    }
}

impl Drop for ContainerProbes {
    fn drop(&mut self) {
        if let Some(task) = &self.task {
            task.abort();
        }
    }
}

impl<E: ExecRunner> Prober<E> {
    /// Probes send on `updates` (bounded: a slow reader slows the probes, nothing is lost).
    pub fn new(exec: Arc<E>, updates: mpsc::Sender<ProbeUpdate>) -> Prober<E> {
        Prober { exec, updates }
    }

    /// Starts the probes of `container` (its spec) for the run `target` names, which
    /// started at `started_at` (initial delays count from then: a container adopted after an
    /// agent restart is not delayed again).
    pub fn start(
        &self,
        target: ProbeTarget,
        container: &Value,
        started_at: SystemTime,
    ) -> ContainerProbes {
        let specs = Specs {
            startup: ProbeSpec::of(container, ProbeKind::Startup),
            liveness: ProbeSpec::of(container, ProbeKind::Liveness),
            readiness: ProbeSpec::of(container, ProbeKind::Readiness),
        };
        let results = Arc::new(Mutex::new(Results {
            startup: ProbeResult::Unknown,
            liveness: ProbeResult::Success,
            readiness: ProbeResult::Failure,
            started: specs.startup.is_none(),
            has_readiness: specs.readiness.is_some(),
        }));
        let (terminating, watch_terminating) = watch::channel(false);
        let run = Run {
            exec: self.exec.clone(),
            updates: self.updates.clone(),
            target,
            results: results.clone(),
            started: clock_instant(started_at),
        };
        let any = specs.startup.is_some() || specs.liveness.is_some() || specs.readiness.is_some();
        let task = any.then(|| tokio::spawn(run.all(specs, watch_terminating)));
        ContainerProbes {
            results,
            terminating,
            task,
        }
    }
}

/// `at` on the timers' clock (tokio's, which tests pause): now minus the time since `at`.
fn clock_instant(at: SystemTime) -> Instant {
    let ago = SystemTime::now().duration_since(at).unwrap_or_default();
    let now = Instant::now();
    now.checked_sub(ago).unwrap_or(now)
}

struct Specs {
    startup: Option<ProbeSpec>,
    liveness: Option<ProbeSpec>,
    readiness: Option<ProbeSpec>,
}

/// How a probe's loop ended.
#[derive(Debug, PartialEq, Eq)]
enum End {
    /// The startup probe succeeded.
    Started,
    /// A liveness or startup failure: held until the container is replaced.
    Failed,
    /// The pod is terminating.
    Terminating,
    /// Nobody reads the updates any more.
    Closed,
}

/// kubelet's run counting: a result is taken after `threshold` equal runs in a row.
#[derive(Debug)]
struct Threshold {
    last: Option<bool>,
    run: u32,
    success: u32,
    failure: u32,
}

impl Threshold {
    fn new(spec: &ProbeSpec) -> Threshold {
        Threshold {
            last: None,
            run: 0,
            success: spec.success_threshold.max(1),
            failure: spec.failure_threshold.max(1),
        }
    }

    /// Records one run; the result to set when a threshold is reached.
    fn record(&mut self, success: bool) -> Option<ProbeResult> {
        if self.last == Some(success) {
            self.run = self.run.saturating_add(1);
        } else {
            self.last = Some(success);
            self.run = 1;
        }
        match success {
            true if self.run >= self.success => Some(ProbeResult::Success),
            false if self.run >= self.failure => Some(ProbeResult::Failure),
            _ => None,
        }
    }
}

struct Run<E> {
    exec: Arc<E>,
    updates: mpsc::Sender<ProbeUpdate>,
    target: ProbeTarget,
    results: Arc<Mutex<Results>>,
    /// When the container started, on the clock the timers use.
    started: Instant,
}

impl<E: ExecRunner> Run<E> {
    async fn all(self, specs: Specs, terminating: watch::Receiver<bool>) {
        if let Some(spec) = &specs.startup {
            match self
                .probe(ProbeKind::Startup, spec, terminating.clone())
                .await
            {
                End::Started => {}
                End::Terminating => {
                    self.results.lock().started = true;
                    if let Some(spec) = &specs.readiness {
                        self.probe(ProbeKind::Readiness, spec, terminating).await;
                    }
                    return;
                }
                End::Failed | End::Closed => return,
            }
        }
        let liveness = async {
            if let Some(spec) = &specs.liveness {
                self.probe(ProbeKind::Liveness, spec, terminating.clone())
                    .await;
            }
        };
        let readiness = async {
            if let Some(spec) = &specs.readiness {
                self.probe(ProbeKind::Readiness, spec, terminating.clone())
                    .await;
            }
        };
        tokio::join!(liveness, readiness);
    }

    /// One probe's loop.
    async fn probe(
        &self,
        kind: ProbeKind,
        spec: &ProbeSpec,
        mut terminating: watch::Receiver<bool>,
    ) -> End {
        let stops_on_termination = kind != ProbeKind::Readiness;
        let first = (self.started + spec.initial_delay).max(Instant::now());
        let mut ticks = tokio::time::interval_at(first, spec.period.max(Duration::from_millis(1)));
        ticks.set_missed_tick_behavior(MissedTickBehavior::Delay);
        let mut threshold = Threshold::new(spec);
        loop {
            if stops_on_termination {
                tokio::select! {
                    _ = ticks.tick() => {}
                    _ = terminating.wait_for(|t| *t) => {
                        *self.results.lock().slot(kind) = ProbeResult::Success;
                        return End::Terminating;
                    }
                }
            } else {
                ticks.tick().await;
            }
            let outcome = self.run_once(&spec.handler, spec.timeout).await;
            let (verdict, event) = match outcome {
                Outcome::Success(_) => (Some(true), None),
                Outcome::Warning(text) => (
                    Some(true),
                    Some(ProbeEvent {
                        reason: "ProbeWarning",
                        message: format!("{} probe warning: {text}", kind.title()),
                    }),
                ),
                Outcome::Failure(text) => (
                    Some(false),
                    Some(ProbeEvent {
                        reason: "Unhealthy",
                        message: format!("{} probe failed: {text}", kind.title()),
                    }),
                ),
                Outcome::Error(text) => (
                    None,
                    Some(ProbeEvent {
                        reason: "Unhealthy",
                        message: format!("{} probe errored: {text}", kind.title()),
                    }),
                ),
            };
            let taken = verdict.and_then(|v| threshold.record(v));
            let (result, changed) = {
                let mut results = self.results.lock();
                let slot = results.slot(kind);
                let changed = taken.is_some_and(|t| t != *slot);
                if let Some(t) = taken {
                    *slot = t;
                }
                let result = *slot;
                if kind == ProbeKind::Startup && result == ProbeResult::Success {
                    results.started = true;
                }
                (result, changed)
            };
            if changed {
                tracing::debug!(pod = %self.target.pod_uid, container = %self.target.container, "{} probe: {:?}", kind.title(), result);
            }
            if changed || event.is_some() {
                let update = ProbeUpdate {
                    pod_uid: self.target.pod_uid.clone(),
                    container: self.target.container.clone(),
                    container_id: self.target.container_id.clone(),
                    kind,
                    result,
                    changed,
                    event,
                };
                if self.updates.send(update).await.is_err() {
                    return End::Closed;
                }
            }
            match (kind, taken) {
                (ProbeKind::Startup, Some(ProbeResult::Success)) => return End::Started,
                (ProbeKind::Startup | ProbeKind::Liveness, Some(ProbeResult::Failure)) => {
                    return End::Failed
                }
                _ => {}
            }
        }
    }

    async fn run_once(&self, handler: &Handler, timeout: Duration) -> Outcome {
        let host = |given: &Option<String>| {
            given
                .clone()
                .or_else(|| self.target.pod_ip.map(|ip| ip.to_string()))
        };
        match handler {
            Handler::Exec { command } => {
                exec::run(&*self.exec, &self.target.container_id, command, timeout).await
            }
            Handler::HttpGet {
                scheme,
                host: given,
                port,
                path,
                headers,
            } => match host(given) {
                Some(h) => {
                    http::run(
                        &http::HttpProbe {
                            scheme: *scheme,
                            host: &h,
                            port: *port,
                            path,
                            headers,
                        },
                        timeout,
                    )
                    .await
                }
                None => Outcome::Error("the pod has no IP to probe".into()),
            },
            Handler::TcpSocket { host: given, port } => match host(given) {
                Some(h) => tcp::run(&h, *port, timeout).await,
                None => Outcome::Error("the pod has no IP to probe".into()),
            },
            Handler::Grpc { port, service } => match host(&None) {
                Some(h) => grpc::run(&h, *port, service, timeout).await,
                None => Outcome::Error("the pod has no IP to probe".into()),
            },
            Handler::Invalid(why) => Outcome::Error(why.clone()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::agent::runtime::{ExecOutput, RuntimeError};
    use serde_json::json;
    use std::collections::VecDeque;

    /// Exit codes handed out in order (then `default`); -1 is an exec the runtime refuses.
    /// Records when each run happened.
    struct Script {
        codes: Mutex<VecDeque<i32>>,
        default: i32,
        calls: Mutex<Vec<(String, Instant)>>,
        origin: Instant,
    }

    impl Script {
        fn new(codes: &[i32], default: i32) -> Arc<Script> {
            Arc::new(Script {
                codes: Mutex::new(codes.iter().copied().collect()),
                default,
                calls: Mutex::new(Vec::new()),
                origin: Instant::now(),
            })
        }

        /// Seconds since the script was made, of each run of `command`.
        fn at(&self, command: &str) -> Vec<u64> {
            self.calls
                .lock()
                .iter()
                .filter(|(c, _)| c == command)
                .map(|(_, t)| (*t - self.origin).as_secs())
                .collect()
        }
    }

    impl ExecRunner for Script {
        async fn exec(
            &self,
            _: &str,
            argv: &[String],
            _: Duration,
        ) -> Result<ExecOutput, RuntimeError> {
            self.calls.lock().push((argv[0].clone(), Instant::now()));
            // Only the scripted command takes from the script.
            let code = if argv[0] == "check" {
                self.codes.lock().pop_front().unwrap_or(self.default)
            } else {
                0
            };
            if code == -1 {
                return Err(RuntimeError::NotFound("c1".into()));
            }
            Ok(ExecOutput {
                exit_code: code,
                stdout: format!("exit {code}"),
                stderr: String::new(),
            })
        }
    }

    fn target() -> ProbeTarget {
        ProbeTarget {
            pod_uid: "u1".into(),
            pod_ip: None,
            container: "app".into(),
            container_id: "c1".into(),
        }
    }

    fn exec_probe(command: &str, period: u64, success: u32, failure: u32, delay: u64) -> Value {
        json!({"exec": {"command": [command]}, "periodSeconds": period,
               "successThreshold": success, "failureThreshold": failure, "initialDelaySeconds": delay})
    }

    fn summary(u: &ProbeUpdate) -> (ProbeKind, ProbeResult, bool) {
        (u.kind, u.result, u.changed)
    }

    #[test]
    fn thresholds_count_runs_in_a_row() {
        let spec = ProbeSpec {
            handler: Handler::Invalid(String::new()),
            initial_delay: Duration::ZERO,
            period: Duration::from_secs(1),
            timeout: Duration::from_secs(1),
            success_threshold: 2,
            failure_threshold: 3,
        };
        let mut t = Threshold::new(&spec);
        let runs = [
            true, false, true, true, true, false, false, true, false, false, false, false,
        ];
        let got: Vec<Option<ProbeResult>> = runs.iter().map(|r| t.record(*r)).collect();
        use ProbeResult::*;
        assert_eq!(
            got,
            [
                None,
                None,
                None,
                Some(Success),
                Some(Success),
                None,
                None,
                None,
                None,
                None,
                Some(Failure),
                Some(Failure)
            ]
        );
    }

    /// Most containers have no probe: they count as started and ready at once, and no task
    /// is kept for them.
    #[tokio::test(start_paused = true)]
    async fn a_container_without_probes_is_ready_without_a_task() {
        let script = Script::new(&[], 0);
        let (tx, mut rx) = mpsc::channel(16);
        let prober = Prober::new(script.clone(), tx);
        let probes = prober.start(target(), &json!({"name": "app"}), SystemTime::now());
        assert!(probes.task.is_none());
        assert!(!probes.running());
        assert!(probes.started() && probes.ready());
        assert_eq!(probes.result(ProbeKind::Liveness), ProbeResult::Success);
        drop(prober);
        drop(probes);
        assert!(rx.recv().await.is_none(), "no update without a probe");
    }

    #[tokio::test(start_paused = true)]
    async fn readiness_starts_false_and_follows_its_thresholds() {
        // Runs at 0,10,20,…: fail, ok, ok (ready at 20), fail, fail, fail (not ready at 50).
        let script = Script::new(&[1, 0, 0, 1, 1, 1], 0);
        let (tx, mut rx) = mpsc::channel(16);
        let prober = Prober::new(script.clone(), tx);
        let c = json!({"name": "app", "readinessProbe": exec_probe("check", 10, 2, 3, 0)});
        let probes = prober.start(target(), &c, SystemTime::now());
        assert!(probes.started() && !probes.ready());
        assert_eq!(probes.result(ProbeKind::Liveness), ProbeResult::Success);

        let u = rx.recv().await.unwrap();
        assert_eq!(
            summary(&u),
            (ProbeKind::Readiness, ProbeResult::Failure, false)
        );
        assert_eq!(
            u.event.as_ref().unwrap().message,
            "Readiness probe failed: exit 1"
        );
        assert_eq!(u.event.as_ref().unwrap().reason, "Unhealthy");
        let u = rx.recv().await.unwrap();
        assert_eq!(
            summary(&u),
            (ProbeKind::Readiness, ProbeResult::Success, true)
        );
        assert!(u.event.is_none() && probes.ready());
        assert_eq!(u.container_id, "c1");
        for _ in 0..2 {
            let u = rx.recv().await.unwrap();
            assert_eq!(
                summary(&u),
                (ProbeKind::Readiness, ProbeResult::Success, false)
            );
        }
        let u = rx.recv().await.unwrap();
        assert_eq!(
            summary(&u),
            (ProbeKind::Readiness, ProbeResult::Failure, true)
        );
        assert!(!probes.ready());
        assert_eq!(script.at("check"), [0, 10, 20, 30, 40, 50]);
    }

    #[tokio::test(start_paused = true)]
    async fn liveness_failure_is_reported_once_and_holds_the_probe() {
        let script = Script::new(&[0, 1, 1, 1], 1);
        let (tx, mut rx) = mpsc::channel(16);
        let prober = Prober::new(script.clone(), tx);
        let c = json!({"name": "app", "livenessProbe": exec_probe("check", 5, 1, 3, 0)});
        let probes = prober.start(target(), &c, SystemTime::now());
        let mut updates = Vec::new();
        while let Some(u) = rx.recv().await {
            let done = u.changed;
            updates.push(summary(&u));
            if done {
                break;
            }
        }
        use ProbeResult::*;
        assert_eq!(
            updates,
            [
                (ProbeKind::Liveness, Success, false),
                (ProbeKind::Liveness, Success, false),
                (ProbeKind::Liveness, Failure, true)
            ]
        );
        tokio::time::sleep(Duration::from_secs(60)).await;
        assert_eq!(script.at("check"), [0, 5, 10, 15], "held after the failure");
        assert!(!probes.running());
    }

    #[tokio::test(start_paused = true)]
    async fn startup_gates_the_others_and_delays_count_from_the_start() {
        // Startup: fails at 5 and 7, succeeds at 9. Liveness (delay 10) first runs at 10,
        // readiness (no delay) right after startup succeeded.
        let script = Script::new(&[1, 1, 0], 0);
        let (tx, mut rx) = mpsc::channel(16);
        let prober = Prober::new(script.clone(), tx);
        let c = json!({
            "name": "app",
            "startupProbe": exec_probe("check", 2, 1, 5, 5),
            "livenessProbe": exec_probe("live", 10, 1, 3, 10),
            "readinessProbe": exec_probe("ready", 10, 1, 3, 0)
        });
        let probes = prober.start(target(), &c, SystemTime::now());
        assert!(!probes.started() && !probes.ready());
        assert_eq!(probes.result(ProbeKind::Startup), ProbeResult::Unknown);
        let mut seen = Vec::new();
        while seen.len() < 4 {
            seen.push(summary(&rx.recv().await.unwrap()));
        }
        use ProbeResult::*;
        assert_eq!(
            seen,
            [
                (ProbeKind::Startup, Unknown, false),
                (ProbeKind::Startup, Unknown, false),
                (ProbeKind::Startup, Success, true),
                (ProbeKind::Readiness, Success, true),
            ]
        );
        assert!(probes.started() && probes.ready());
        tokio::time::sleep(Duration::from_secs(25)).await;
        assert_eq!(script.at("check"), [5, 7, 9], "startup stops once started");
        assert_eq!(script.at("ready"), [9, 19, 29]);
        assert_eq!(script.at("live"), [10, 20, 30]);
    }

    #[tokio::test(start_paused = true)]
    async fn a_failed_startup_stops_everything() {
        let script = Script::new(&[], 1);
        let (tx, mut rx) = mpsc::channel(16);
        let prober = Prober::new(script.clone(), tx);
        let c = json!({
            "name": "app",
            "startupProbe": exec_probe("check", 1, 1, 2, 0),
            "livenessProbe": exec_probe("live", 1, 1, 1, 0)
        });
        let probes = prober.start(target(), &c, SystemTime::now());
        let _ = rx.recv().await.unwrap();
        let u = rx.recv().await.unwrap();
        assert_eq!(
            summary(&u),
            (ProbeKind::Startup, ProbeResult::Failure, true)
        );
        tokio::time::sleep(Duration::from_secs(30)).await;
        assert!(script.at("live").is_empty());
        assert!(!probes.started());
    }

    #[tokio::test(start_paused = true)]
    async fn an_adopted_container_is_not_delayed_again() {
        let script = Script::new(&[], 0);
        let (tx, _rx) = mpsc::channel(16);
        let prober = Prober::new(script.clone(), tx);
        let c = json!({"name": "app", "livenessProbe": exec_probe("check", 10, 1, 3, 30)});
        let long_ago = SystemTime::now() - Duration::from_secs(100);
        let _probes = prober.start(target(), &c, long_ago);
        let recent = prober.start(
            ProbeTarget {
                container_id: "c2".into(),
                ..target()
            },
            &json!({"name": "app", "livenessProbe": exec_probe("later", 10, 1, 3, 30)}),
            SystemTime::now() - Duration::from_secs(20),
        );
        tokio::time::sleep(Duration::from_secs(25)).await;
        assert_eq!(script.at("check"), [0, 10, 20]);
        assert_eq!(script.at("later"), [10, 20]);
        drop(recent);
        tokio::time::sleep(Duration::from_secs(30)).await;
        assert_eq!(
            script.at("later"),
            [10, 20],
            "dropping the handle stops its probes"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn errors_change_nothing_and_termination_stops_liveness_only() {
        // Liveness errors (the runtime refuses the exec) forever: reported, never a restart.
        let script = Script::new(&[-1, -1, -1, -1, -1], -1);
        let (tx, mut rx) = mpsc::channel(64);
        let prober = Prober::new(script.clone(), tx);
        let c = json!({
            "name": "app",
            "livenessProbe": exec_probe("check", 1, 1, 1, 0),
            "readinessProbe": exec_probe("ready", 1, 1, 1, 0)
        });
        let probes = prober.start(target(), &c, SystemTime::now());
        let mut liveness = Vec::new();
        while liveness.len() < 4 {
            let u = rx.recv().await.unwrap();
            if u.kind == ProbeKind::Liveness {
                liveness.push(u);
            }
        }
        assert!(liveness
            .iter()
            .all(|u| !u.changed && u.result == ProbeResult::Success));
        assert_eq!(
            liveness[0].event.as_ref().unwrap().message,
            "Liveness probe errored: container c1 not found"
        );
        let before = script.at("check").len();
        probes.pod_terminating();
        tokio::time::sleep(Duration::from_secs(10)).await;
        assert!(script.at("check").len() <= before + 1, "liveness stopped");
        let ready_runs = script.at("ready").len();
        tokio::time::sleep(Duration::from_secs(5)).await;
        assert!(
            script.at("ready").len() >= ready_runs + 4,
            "readiness goes on"
        );
        assert!(probes.ready());
        assert_eq!(probes.result(ProbeKind::Liveness), ProbeResult::Success);
    }

    #[tokio::test]
    async fn network_probes_use_the_pod_ip() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let (tx, mut rx) = mpsc::channel(16);
        let prober = Prober::new(Script::new(&[], 0), tx);
        let c = json!({"name": "app", "readinessProbe": {"tcpSocket": {"port": port}, "periodSeconds": 1}});
        let probes = prober.start(
            ProbeTarget {
                pod_ip: Some("127.0.0.1".parse().unwrap()),
                ..target()
            },
            &c,
            SystemTime::now(),
        );
        let u = rx.recv().await.unwrap();
        assert_eq!(
            summary(&u),
            (ProbeKind::Readiness, ProbeResult::Success, true)
        );
        assert!(probes.ready());
        drop(listener);
        let u = tokio::time::timeout(Duration::from_secs(5), rx.recv())
            .await
            .unwrap()
            .unwrap();
        assert_eq!(
            summary(&u),
            (ProbeKind::Readiness, ProbeResult::Success, false)
        );
        assert!(u.event.unwrap().message.contains("connection refused"));
        // Without a pod IP there is nothing to probe: errors.
        let no_ip = prober.start(target(), &c, SystemTime::now());
        let u = rx.recv().await.unwrap();
        assert_eq!(
            u.event.unwrap().message,
            "Readiness probe errored: the pod has no IP to probe"
        );
        assert!(!no_ip.ready());
    }
}
