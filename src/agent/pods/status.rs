//! A pod's status as kubelet generates it, from what the runtime reports of its containers
//! and what the worker knows (why a container waits, the sandbox's IPs, the probes):
//!
//! - container statuses: per container the latest instance decides `state` (running,
//!   terminated with its exit code, reason and termination message, or waiting with the
//!   reason the last sync left: `ContainerCreating`, `PodInitializing`, `ErrImagePull`,
//!   `ImagePullBackOff`, `CrashLoopBackOff`, `CreateContainerConfigError`,
//!   `RunContainerError`, …); the instance before it is `lastState`. A container that
//!   exited and will run again shows `waiting` with its exit in `lastState`, as kubelet
//!   shows it. `containerID` is `<runtime>://<id>`, `imageID` `repo@sha256:…`.
//! - the phase (kubelet's `getPhase`): init containers pending → Pending; a failed init
//!   container with `restartPolicy: Never` → Failed; then from the app containers: any
//!   waiting → Pending, any running → Running, all stopped → Running (Always), Succeeded
//!   (all exited 0) or Failed. A pod the worker stopped for good is never left Pending or
//!   Running: it is Succeeded when every container exited 0, else Failed.
//! - conditions in kubelet's order: PodReadyToStartContainers, Initialized, Ready,
//!   ContainersReady, PodScheduled, after the conditions kubelet does not own (kept from
//!   the API's copy). `lastTransitionTime` moves only when a condition's status does.
//! - hostIP(s), podIP(s) (kept from the API's copy once the sandbox is gone), startTime.
//!
//! [`needs_write`] says whether the API's copy differs from a new status in any field this
//! module writes.

use std::collections::HashMap;
use std::net::IpAddr;
use std::time::SystemTime;

use serde_json::{json, Map, Value};

use super::containers::annotations;
use super::plug::ProbeResults;
use super::pod::{ContainerSpec, Pod, RestartPolicy};
use crate::agent::runtime::{ContainerState, ContainerStatus};
use crate::api::meta::format_time;

/// Why a container waits instead of running, as the last sync found (kubelet's reason
/// cache): shown as its `waiting` state.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Waiting {
    pub reason: String,
    pub message: String,
}

impl Waiting {
    pub fn new(reason: &str, message: impl Into<String>) -> Waiting {
        Waiting {
            reason: reason.to_string(),
            message: message.into(),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    Pending,
    Running,
    Succeeded,
    Failed,
}

impl Phase {
    pub fn as_str(self) -> &'static str {
        match self {
            Phase::Pending => "Pending",
            Phase::Running => "Running",
            Phase::Succeeded => "Succeeded",
            Phase::Failed => "Failed",
        }
    }

    pub fn is_terminal(self) -> bool {
        matches!(self, Phase::Succeeded | Phase::Failed)
    }
}

/// Everything a status is made from.
pub struct Inputs<'a> {
    pub pod: &'a Pod,
    /// The status the API has (for transition times, and what kubelet does not own).
    pub previous: &'a Value,
    /// The pod's container instances, by name and then restart count, oldest first.
    pub instances: &'a [ContainerStatus],
    /// By container name.
    pub waiting: &'a HashMap<String, Waiting>,
    /// Termination messages by container id (exited instances).
    pub messages: &'a HashMap<String, String>,
    pub probes: &'a dyn Fn(&str) -> ProbeResults,
    /// `runc` or `crun`, for container IDs.
    pub runtime: &'a str,
    pub pod_ips: &'a [IpAddr],
    pub host_ip: IpAddr,
    /// The sandbox exists with its network: containers can start.
    pub sandbox_ready: bool,
    /// The worker has stopped the pod for good.
    pub terminal: bool,
    pub start_time: Option<&'a str>,
    pub now: &'a str,
}

fn time(t: SystemTime) -> String {
    format_time(chrono::DateTime::<chrono::Utc>::from(t))
}

/// The `terminated` state of an instance that ended.
fn terminated(s: &ContainerStatus, runtime: &str, messages: &HashMap<String, String>) -> Value {
    let mut t = Map::new();
    let (code, reason) = match s.state {
        ContainerState::Unknown => (137, "ContainerStatusUnknown".to_string()),
        _ => (
            s.exit_code.unwrap_or(0),
            s.reason.clone().unwrap_or_else(|| "Error".into()),
        ),
    };
    t.insert("exitCode".into(), json!(code));
    t.insert("reason".into(), json!(reason));
    if let Some(m) = messages.get(&s.id).or(s.message.as_ref()) {
        t.insert("message".into(), json!(m));
    }
    if let Some(at) = s.started_at {
        t.insert("startedAt".into(), json!(time(at)));
    }
    if let Some(at) = s.finished_at {
        t.insert("finishedAt".into(), json!(time(at)));
    }
    t.insert("containerID".into(), json!(format!("{runtime}://{}", s.id)));
    json!({ "terminated": t })
}

fn ended(s: &ContainerStatus) -> bool {
    matches!(s.state, ContainerState::Exited | ContainerState::Unknown)
}

/// A container will run again after its latest instance ended (the worker's rule too).
pub fn will_restart(pod: &Pod, s: &ContainerStatus) -> bool {
    if !ended(s) {
        return false;
    }
    let code = match s.state {
        ContainerState::Unknown => 137,
        _ => s.exit_code.unwrap_or(0),
    };
    if pod.is_init_container(&s.name) {
        // An init container runs until it succeeds, unless the pod never restarts anything.
        return code != 0 && pod.spec.restart != RestartPolicy::Never;
    }
    pod.spec.restart.restarts(code)
}

/// One container's status.
fn container_status(inputs: &Inputs<'_>, spec: &ContainerSpec, default_reason: &str) -> Value {
    let runs: Vec<&ContainerStatus> = inputs
        .instances
        .iter()
        .filter(|s| s.name == spec.name)
        .collect();
    let latest = runs.last().copied();
    let previous = runs.len().checked_sub(2).map(|i| runs[i]);
    let waiting = inputs.waiting.get(&spec.name);
    let waiting_state = |w: Option<&Waiting>, default: &str| match w {
        Some(w) if !w.message.is_empty() => {
            json!({"waiting": {"reason": w.reason, "message": w.message}})
        }
        Some(w) => json!({"waiting": {"reason": w.reason}}),
        None => json!({"waiting": {"reason": default}}),
    };
    let last_of = |p: Option<&ContainerStatus>| match p {
        Some(p) if ended(p) => terminated(p, inputs.runtime, inputs.messages),
        _ => json!({}),
    };
    let Some(latest) = latest else {
        return json!({
            "name": spec.name,
            "state": waiting_state(waiting, default_reason),
            "lastState": {},
            "ready": false,
            "restartCount": 0,
            "image": spec.image,
            "imageID": "",
            "started": false,
        });
    };
    let probes = (inputs.probes)(&latest.id);
    let (state, last_state, ready, started) = match latest.state {
        ContainerState::Running => {
            let started = spec.startup_probe.is_none() || probes.started == Some(true);
            let ready = started && (spec.readiness_probe.is_none() || probes.ready == Some(true));
            let at = latest.started_at.map(time).unwrap_or_default();
            (
                json!({"running": {"startedAt": at}}),
                last_of(previous),
                ready,
                started,
            )
        }
        ContainerState::Created => (
            waiting_state(waiting, "ContainerCreating"),
            last_of(previous),
            false,
            false,
        ),
        ContainerState::Exited | ContainerState::Unknown => match waiting {
            // It will run again (or failed to): kubelet shows why it waits.
            Some(w) if !inputs.terminal => (
                waiting_state(Some(w), ""),
                terminated(latest, inputs.runtime, inputs.messages),
                false,
                false,
            ),
            _ => (
                terminated(latest, inputs.runtime, inputs.messages),
                last_of(previous),
                false,
                false,
            ),
        },
    };
    let ann = &latest.annotations;
    json!({
        "name": spec.name,
        "state": state,
        "lastState": last_state,
        "ready": ready,
        "restartCount": latest.restart_count,
        "image": ann.get(annotations::IMAGE).cloned().unwrap_or_else(|| spec.image.clone()),
        "imageID": ann.get(annotations::IMAGE_ID).cloned().unwrap_or_default(),
        "containerID": format!("{}://{}", inputs.runtime, latest.id),
        "started": started,
    })
}

fn state_is(status: &Value, state: &str) -> bool {
    status["state"].get(state).is_some()
}

fn exit_code(state: &Value) -> Option<i64> {
    state["terminated"]["exitCode"].as_i64()
}

/// kubelet's `getPhase` over the API statuses.
fn phase(pod: &Pod, init: &[Value], app: &[Value], terminal: bool) -> Phase {
    let mut pending_init = 0;
    let mut failed_init = 0;
    for s in init {
        if state_is(s, "running") {
            pending_init += 1;
        } else if let Some(code) = exit_code(&s["state"]) {
            if code != 0 {
                failed_init += 1;
            }
        } else if let Some(code) = exit_code(&s["lastState"]) {
            if code != 0 {
                failed_init += 1;
            }
        } else {
            pending_init += 1;
        }
    }
    let (mut running, mut waiting, mut stopped, mut succeeded) = (0, 0, 0, 0);
    for s in app {
        if state_is(s, "running") {
            running += 1;
        } else if let Some(code) = exit_code(&s["state"]) {
            stopped += 1;
            if code == 0 {
                succeeded += 1;
            }
        } else if exit_code(&s["lastState"]).is_some() {
            stopped += 1;
        } else {
            waiting += 1;
        }
    }
    if failed_init > 0 && pod.spec.restart == RestartPolicy::Never {
        return Phase::Failed;
    }
    let any_app_started = app
        .iter()
        .any(|s| state_is(s, "running") || state_is(s, "terminated"));
    if (pending_init > 0 && !any_app_started) || waiting > 0 {
        return Phase::Pending;
    }
    if running > 0 {
        return Phase::Running;
    }
    if stopped > 0 {
        if terminal {
            return if stopped == succeeded {
                Phase::Succeeded
            } else {
                Phase::Failed
            };
        }
        return match pod.spec.restart {
            RestartPolicy::Always => Phase::Running,
            _ if stopped == succeeded => Phase::Succeeded,
            RestartPolicy::Never => Phase::Failed,
            RestartPolicy::OnFailure => Phase::Running,
        };
    }
    Phase::Pending
}

/// `(type, status, reason, message)`.
type Condition = (&'static str, bool, Option<&'static str>, Option<String>);

fn go_list(names: &[&str]) -> String {
    format!("[{}]", names.join(" "))
}

fn initialized(pod: &Pod, init: &[Value], app: &[Value], phase: Phase) -> Condition {
    if pod.spec.init_containers.is_empty() {
        return ("Initialized", true, None, None);
    }
    if phase == Phase::Succeeded {
        return ("Initialized", true, Some("PodCompleted"), None);
    }
    if app
        .iter()
        .any(|s| state_is(s, "running") || state_is(s, "terminated"))
    {
        return ("Initialized", true, None, None);
    }
    let incomplete: Vec<&str> = pod
        .spec
        .init_containers
        .iter()
        .zip(init)
        .filter(|(_, s)| exit_code(&s["state"]) != Some(0))
        .map(|(c, _)| c.name.as_str())
        .collect();
    if incomplete.is_empty() {
        return ("Initialized", true, None, None);
    }
    (
        "Initialized",
        false,
        Some("ContainersNotInitialized"),
        Some(format!(
            "containers with incomplete status: {}",
            go_list(&incomplete)
        )),
    )
}

fn containers_ready(pod: &Pod, app: &[Value], phase: Phase, kind: &'static str) -> Condition {
    match phase {
        Phase::Succeeded => return (kind, false, Some("PodCompleted"), None),
        Phase::Failed => return (kind, false, Some("PodFailed"), None),
        _ => {}
    }
    let unready: Vec<&str> = pod
        .spec
        .containers
        .iter()
        .zip(app)
        .filter(|(_, s)| s["ready"] != true)
        .map(|(c, _)| c.name.as_str())
        .collect();
    if unready.is_empty() {
        return (kind, true, None, None);
    }
    (
        kind,
        false,
        Some("ContainersNotReady"),
        Some(format!(
            "containers with unready status: {}",
            go_list(&unready)
        )),
    )
}

/// Conditions kubelet sets (others in the API's copy are kept as they are).
const KUBELET_CONDITIONS: [&str; 5] = [
    "PodReadyToStartContainers",
    "Initialized",
    "Ready",
    "ContainersReady",
    "PodScheduled",
];

fn conditions(list: Vec<Condition>, previous: &Value, now: &str) -> Vec<Value> {
    let old = previous["conditions"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let mut out: Vec<Value> = old
        .iter()
        .filter(|c| {
            !c["type"]
                .as_str()
                .is_some_and(|t| KUBELET_CONDITIONS.contains(&t))
        })
        .cloned()
        .collect();
    for (kind, status, reason, message) in list {
        let status = if status { "True" } else { "False" };
        let before = old.iter().find(|c| c["type"] == kind);
        let transition = before
            .filter(|c| c["status"] == status)
            .and_then(|c| c["lastTransitionTime"].as_str())
            .unwrap_or(now);
        let mut c = Map::new();
        c.insert("type".into(), json!(kind));
        c.insert("status".into(), json!(status));
        c.insert("lastProbeTime".into(), Value::Null);
        c.insert("lastTransitionTime".into(), json!(transition));
        if let Some(r) = reason {
            c.insert("reason".into(), json!(r));
        }
        if let Some(m) = message {
            c.insert("message".into(), json!(m));
        }
        out.push(Value::Object(c));
    }
    out
}

/// The pod's phase and status.
pub fn compute(inputs: &Inputs<'_>) -> (Phase, Value) {
    let pod = inputs.pod;
    let previous = inputs.previous;
    let has_init = !pod.spec.init_containers.is_empty();
    let default_reason = if has_init {
        "PodInitializing"
    } else {
        "ContainerCreating"
    };
    let init: Vec<Value> = pod
        .spec
        .init_containers
        .iter()
        .map(|c| container_status(inputs, c, default_reason))
        .collect();
    let app: Vec<Value> = pod
        .spec
        .containers
        .iter()
        .map(|c| container_status(inputs, c, default_reason))
        .collect();
    let mut phase = phase(pod, &init, &app, inputs.terminal);
    if inputs.terminal && !phase.is_terminal() {
        phase = Phase::Failed;
    }
    let list = vec![
        (
            "PodReadyToStartContainers",
            inputs.sandbox_ready,
            None,
            None,
        ),
        initialized(pod, &init, &app, phase),
        containers_ready(pod, &app, phase, "Ready"),
        containers_ready(pod, &app, phase, "ContainersReady"),
        ("PodScheduled", true, None, None),
    ];
    let mut status = Map::new();
    status.insert("phase".into(), json!(phase.as_str()));
    status.insert(
        "conditions".into(),
        Value::Array(conditions(list, previous, inputs.now)),
    );
    status.insert("hostIP".into(), json!(inputs.host_ip.to_string()));
    status.insert(
        "hostIPs".into(),
        json!([{"ip": inputs.host_ip.to_string()}]),
    );
    if let Some(first) = inputs.pod_ips.first() {
        status.insert("podIP".into(), json!(first.to_string()));
        let ips: Vec<Value> = inputs
            .pod_ips
            .iter()
            .map(|ip| json!({"ip": ip.to_string()}))
            .collect();
        status.insert("podIPs".into(), Value::Array(ips));
    } else if pod.spec.host_network {
        status.insert("podIP".into(), json!(inputs.host_ip.to_string()));
        status.insert("podIPs".into(), json!([{"ip": inputs.host_ip.to_string()}]));
    } else if let Some(ip) = previous.get("podIP").filter(|v| v.is_string()) {
        status.insert("podIP".into(), ip.clone());
        status.insert(
            "podIPs".into(),
            previous.get("podIPs").cloned().unwrap_or(Value::Null),
        );
    }
    if let Some(t) = inputs
        .start_time
        .map(str::to_string)
        .or_else(|| previous["startTime"].as_str().map(str::to_string))
    {
        status.insert("startTime".into(), json!(t));
    }
    if has_init {
        status.insert("initContainerStatuses".into(), Value::Array(init));
    }
    status.insert("containerStatuses".into(), Value::Array(app));
    (phase, Value::Object(status))
}

/// Whether `current` (the API's copy) differs from `new` in a field `new` sets.
pub fn needs_write(new: &Value, current: &Value) -> bool {
    match new.as_object() {
        Some(fields) => fields.iter().any(|(k, v)| current.get(k) != Some(v)),
        None => true,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;
    use std::sync::Arc;
    use std::time::Duration;

    use crate::agent::runtime::PodRef;

    fn pod(spec: Value, status: Value) -> Pod {
        Pod::parse(Arc::new(json!({
            "metadata": {"uid": "u", "namespace": "default", "name": "p"},
            "spec": spec,
            "status": status,
        })))
        .unwrap()
    }

    fn instance(
        name: &str,
        restart: u32,
        state: ContainerState,
        code: Option<i32>,
    ) -> ContainerStatus {
        let t = SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000);
        ContainerStatus {
            id: format!("{name}{restart}"),
            pod: PodRef {
                uid: "u".into(),
                namespace: "default".into(),
                name: "p".into(),
            },
            name: name.into(),
            restart_count: restart,
            state,
            created_at: t,
            started_at: Some(t),
            finished_at: code.map(|_| t + Duration::from_secs(5)),
            exit_code: code,
            reason: code.map(|c| {
                if c == 0 {
                    "Completed".into()
                } else {
                    "Error".into()
                }
            }),
            message: None,
            pid: None,
            log_path: "/l".into(),
            annotations: BTreeMap::from([
                (
                    annotations::IMAGE.to_string(),
                    "docker.io/library/busybox:1".to_string(),
                ),
                (
                    annotations::IMAGE_ID.to_string(),
                    "docker.io/library/busybox@sha256:ab".to_string(),
                ),
            ]),
        }
    }

    struct Case {
        pod: Pod,
        instances: Vec<ContainerStatus>,
        waiting: HashMap<String, Waiting>,
        terminal: bool,
    }

    impl Case {
        fn new(pod: Pod) -> Case {
            Case {
                pod,
                instances: vec![],
                waiting: HashMap::new(),
                terminal: false,
            }
        }
        fn run(&self) -> (Phase, Value) {
            let messages = HashMap::from([("app0".to_string(), "bye".to_string())]);
            let probes = |_: &str| ProbeResults::default();
            compute(&Inputs {
                pod: &self.pod,
                previous: &self.pod.raw["status"],
                instances: &self.instances,
                waiting: &self.waiting,
                messages: &messages,
                probes: &probes,
                runtime: "runc",
                pod_ips: &["10.42.0.5".parse().unwrap()],
                host_ip: "192.0.2.1".parse().unwrap(),
                sandbox_ready: true,
                terminal: self.terminal,
                start_time: Some("2026-01-01T00:00:00Z"),
                now: "2026-01-01T00:00:09Z",
            })
        }
    }

    fn cond<'a>(status: &'a Value, kind: &str) -> &'a Value {
        status["conditions"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["type"] == kind)
            .unwrap()
    }

    fn app() -> Value {
        json!({"containers": [{"name": "app", "image": "busybox:1"}]})
    }

    #[test]
    fn a_new_pod_is_pending_with_containers_creating() {
        let (phase, s) = Case::new(pod(app(), json!({}))).run();
        assert_eq!(phase, Phase::Pending);
        let c = &s["containerStatuses"][0];
        assert_eq!(c["state"]["waiting"]["reason"], "ContainerCreating");
        assert_eq!(c["image"], "busybox:1");
        assert_eq!(cond(&s, "Ready")["status"], "False");
        assert_eq!(
            cond(&s, "Ready")["message"],
            "containers with unready status: [app]"
        );
        assert_eq!(cond(&s, "PodReadyToStartContainers")["status"], "True");
        assert_eq!(s["podIP"], "10.42.0.5");
        assert_eq!(s["hostIPs"][0]["ip"], "192.0.2.1");
    }

    #[test]
    fn a_running_container_is_ready_and_keeps_its_last_state() {
        let mut case = Case::new(pod(app(), json!({})));
        case.instances = vec![
            instance("app", 0, ContainerState::Exited, Some(1)),
            instance("app", 1, ContainerState::Running, None),
        ];
        let (phase, s) = case.run();
        assert_eq!(phase, Phase::Running);
        let c = &s["containerStatuses"][0];
        assert!(c["state"]["running"]["startedAt"].is_string());
        assert_eq!(c["lastState"]["terminated"]["exitCode"], 1);
        assert_eq!(c["lastState"]["terminated"]["message"], "bye");
        assert_eq!(c["restartCount"], 1);
        assert_eq!(c["ready"], true);
        assert_eq!(c["started"], true);
        assert_eq!(c["containerID"], "runc://app1");
        assert_eq!(c["imageID"], "docker.io/library/busybox@sha256:ab");
        assert_eq!(c["image"], "docker.io/library/busybox:1");
        assert_eq!(cond(&s, "Ready")["status"], "True");
        assert_eq!(cond(&s, "ContainersReady")["status"], "True");
    }

    #[test]
    fn a_crashing_container_waits_in_back_off_with_its_exit_in_last_state() {
        let mut case = Case::new(pod(app(), json!({})));
        case.instances = vec![instance("app", 3, ContainerState::Exited, Some(2))];
        case.waiting.insert(
            "app".into(),
            Waiting::new(
                "CrashLoopBackOff",
                "back-off 40s restarting failed container=app pod=p_default(u)",
            ),
        );
        let (phase, s) = case.run();
        // Always: an exited container is restarting, the pod is Running.
        assert_eq!(phase, Phase::Running);
        let c = &s["containerStatuses"][0];
        assert_eq!(c["state"]["waiting"]["reason"], "CrashLoopBackOff");
        assert_eq!(c["lastState"]["terminated"]["exitCode"], 2);
        assert_eq!(c["restartCount"], 3);
    }

    #[test]
    fn never_and_on_failure_end_the_pod() {
        let spec = |policy: &str| json!({"restartPolicy": policy, "containers": [{"name": "app", "image": "b"}]});
        for (policy, code, want) in [
            ("Never", 0, Phase::Succeeded),
            ("Never", 1, Phase::Failed),
            ("OnFailure", 0, Phase::Succeeded),
            ("OnFailure", 1, Phase::Running),
            ("Always", 0, Phase::Running),
        ] {
            let mut case = Case::new(pod(spec(policy), json!({})));
            case.instances = vec![instance("app", 0, ContainerState::Exited, Some(code))];
            assert_eq!(case.run().0, want, "{policy} exit {code}");
        }
        // Stopped for good (deleted): Failed unless every container exited 0.
        let mut case = Case::new(pod(spec("Always"), json!({})));
        case.instances = vec![instance("app", 0, ContainerState::Exited, Some(137))];
        case.terminal = true;
        let (phase, s) = case.run();
        assert_eq!(phase, Phase::Failed);
        assert_eq!(
            s["containerStatuses"][0]["state"]["terminated"]["exitCode"],
            137
        );
        assert_eq!(cond(&s, "Ready")["reason"], "PodFailed");
        // Never started and stopped for good: Failed too.
        let mut case = Case::new(pod(spec("Always"), json!({})));
        case.terminal = true;
        assert_eq!(case.run().0, Phase::Failed);
    }

    #[test]
    fn init_containers_gate_the_pod() {
        let spec = json!({"initContainers": [{"name": "i1", "image": "b"}, {"name": "i2", "image": "b"}],
                          "containers": [{"name": "app", "image": "b"}]});
        let mut case = Case::new(pod(spec.clone(), json!({})));
        case.instances = vec![instance("i1", 0, ContainerState::Running, None)];
        let (phase, s) = case.run();
        assert_eq!(phase, Phase::Pending);
        assert_eq!(
            s["containerStatuses"][0]["state"]["waiting"]["reason"],
            "PodInitializing"
        );
        assert_eq!(
            s["initContainerStatuses"][1]["state"]["waiting"]["reason"],
            "PodInitializing"
        );
        let init = cond(&s, "Initialized");
        assert_eq!(init["status"], "False");
        assert_eq!(init["reason"], "ContainersNotInitialized");
        assert_eq!(
            init["message"],
            "containers with incomplete status: [i1 i2]"
        );

        case.instances = vec![
            instance("i1", 0, ContainerState::Exited, Some(0)),
            instance("i2", 0, ContainerState::Exited, Some(0)),
            instance("app", 0, ContainerState::Running, None),
        ];
        let (phase, s) = case.run();
        assert_eq!(phase, Phase::Running);
        assert_eq!(cond(&s, "Initialized")["status"], "True");

        // A failing init container of a Never pod fails the pod.
        let mut never = spec.clone();
        never["restartPolicy"] = json!("Never");
        let mut case = Case::new(pod(never, json!({})));
        case.instances = vec![instance("i1", 0, ContainerState::Exited, Some(1))];
        assert_eq!(case.run().0, Phase::Failed);
    }

    #[test]
    fn transition_times_move_only_with_the_status_and_foreign_conditions_stay() {
        let previous = json!({"conditions": [
            {"type": "PodScheduled", "status": "True", "lastTransitionTime": "2025-01-01T00:00:00Z"},
            {"type": "Ready", "status": "True", "lastTransitionTime": "2025-01-01T00:00:00Z"},
            {"type": "DisruptionTarget", "status": "True", "reason": "EvictionByEvictionAPI"}
        ], "podIP": "10.0.0.1", "podIPs": [{"ip": "10.0.0.1"}]});
        let (_, s) = Case::new(pod(app(), previous)).run();
        assert_eq!(
            cond(&s, "PodScheduled")["lastTransitionTime"],
            "2025-01-01T00:00:00Z"
        );
        assert_eq!(
            cond(&s, "Ready")["lastTransitionTime"],
            "2026-01-01T00:00:09Z"
        );
        assert_eq!(
            cond(&s, "DisruptionTarget")["reason"],
            "EvictionByEvictionAPI"
        );
        let types: Vec<&str> = s["conditions"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c["type"].as_str().unwrap())
            .collect();
        assert_eq!(
            types,
            [
                "DisruptionTarget",
                "PodReadyToStartContainers",
                "Initialized",
                "Ready",
                "ContainersReady",
                "PodScheduled"
            ]
        );
    }

    #[test]
    fn a_start_error_and_a_lost_container() {
        let mut case = Case::new(pod(app(), json!({})));
        let mut failed = instance("app", 0, ContainerState::Exited, Some(128));
        failed.reason = Some("StartError".into());
        failed.message = Some("exec: \"nosuch\": executable file not found in $PATH".into());
        failed.started_at = None;
        case.instances = vec![failed];
        case.waiting.insert(
            "app".into(),
            Waiting::new("RunContainerError", "runc create failed: …"),
        );
        let (_, s) = case.run();
        let c = &s["containerStatuses"][0];
        assert_eq!(c["state"]["waiting"]["reason"], "RunContainerError");
        assert_eq!(c["lastState"]["terminated"]["reason"], "StartError");
        assert_eq!(c["lastState"]["terminated"]["exitCode"], 128);
        assert!(c["lastState"]["terminated"].get("startedAt").is_none());

        let mut case = Case::new(pod(app(), json!({})));
        case.instances = vec![instance("app", 0, ContainerState::Unknown, None)];
        case.terminal = true;
        let (_, s) = case.run();
        let t = &s["containerStatuses"][0]["state"]["terminated"];
        assert_eq!(
            (t["exitCode"].as_i64(), t["reason"].as_str()),
            (Some(137), Some("ContainerStatusUnknown"))
        );
    }

    #[test]
    fn writes_only_what_changed() {
        let new = json!({"phase": "Running", "podIP": "10.0.0.1"});
        assert!(!needs_write(
            &new,
            &json!({"phase": "Running", "podIP": "10.0.0.1", "qosClass": "BestEffort"})
        ));
        assert!(needs_write(
            &new,
            &json!({"phase": "Pending", "podIP": "10.0.0.1"})
        ));
        assert!(needs_write(&new, &json!({})));
    }
}
