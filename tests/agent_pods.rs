//! Pods on a real node: a `litek8s apiserver` and a `litek8s agent` process per test, the
//! agent running containers with the real runc (or crun), conmon and CNI plugins, its
//! busybox test image imported from `<node-dir>/images/` (or pulled from a `docker-registry`
//! the test starts). What a user would do (`kubectl run`, a Deployment, deleting a pod,
//! restarting the agent) and what they would see (phases, reasons, restart counts, exit
//! codes) through the API, volumes, environment and probes included.
//!
//! Needs root and the packages tests/run-all.sh installs (runc, conmon,
//! containernetworking-plugins, busybox-static, iproute2, docker-registry); fails without
//! them unless `LITEK8S_SKIP_CONTAINERS=1`. Each test has its own server, node directory,
//! bridge and pod CIDR, and a guard that kills its containers and conmon, unmounts what its
//! node directory holds and deletes its bridge even when the test fails.

mod agent_support;
mod support;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

use agent_support::Agent;
use serde_json::{json, Value};
use support::images::{busybox_image, Registry};
use support::{Api, Server};
use tokio::sync::mpsc;

const SKIP_ENV: &str = "LITEK8S_SKIP_CONTAINERS";
/// The test image's name, as pods write it (a registry host with a `.` is never Docker Hub;
/// a tag other than `latest` means IfNotPresent: the imported image is used).
const IMAGE: &str = "litek8s.test/busybox:1";
/// Hang guards, not performance assertions.
const RUNNING_GUARD: Duration = Duration::from_secs(60);

static NEXT: AtomicUsize = AtomicUsize::new(0);
static ALIVE: AtomicUsize = AtomicUsize::new(0);
static IP_FORWARD: OnceLock<Option<String>> = OnceLock::new();
static LOCK: Mutex<()> = Mutex::new(());

/// Whether the test is to be skipped (tools missing and `LITEK8S_SKIP_CONTAINERS=1`).
fn skipped() -> bool {
    !missing_tools().is_empty() && std::env::var(SKIP_ENV).as_deref() == Ok("1")
}

fn missing_tools() -> Vec<String> {
    let mut missing = Vec::new();
    if !nix::unistd::geteuid().is_root() {
        missing.push("root".to_string());
    }
    let on_path = |tool: &str| {
        std::env::var_os("PATH")
            .is_some_and(|paths| std::env::split_paths(&paths).any(|dir| dir.join(tool).is_file()))
    };
    if !on_path("runc") && !on_path("crun") {
        missing.push("runc or crun".into());
    }
    for tool in ["conmon", "ip", "docker-registry"] {
        if !on_path(tool) {
            missing.push(tool.into());
        }
    }
    if !Path::new("/usr/lib/cni/bridge").exists() {
        missing.push("containernetworking-plugins".into());
    }
    if !Path::new("/bin/busybox").exists() {
        missing.push("busybox-static".into());
    }
    missing
}

/// A server and an agent with the test image, and everything to clean up after them.
struct Node {
    server: Server,
    agent: Agent,
    api: Api,
    name: String,
    bridge: String,
    cidr: String,
}

impl Node {
    /// A server and a Ready agent (extra agent flags in `agent_args`); `None` when skipped.
    fn start(agent_args: &[&str]) -> Option<Node> {
        let missing = missing_tools();
        if !agent_support::tools_present_or_skip(&missing, "pod tests need") {
            return None;
        }
        {
            let _g = LOCK.lock().unwrap_or_else(|e| e.into_inner());
            IP_FORWARD
                .get_or_init(|| std::fs::read_to_string("/proc/sys/net/ipv4/ip_forward").ok());
            ALIVE.fetch_add(1, Ordering::SeqCst);
        }
        let n = NEXT.fetch_add(1, Ordering::SeqCst);
        let pid = std::process::id();
        // At most 15 characters (IFNAMSIZ - 1); the /24 is this node's podCIDR.
        let bridge = format!("lk8p{}x{}", pid % 100_000, n);
        let cidr = format!("10.{}.{}.0/24", 150 + (n % 40), pid % 250);
        let server = Server::start(&["--cluster-cidr", &cidr]);
        let token = std::fs::read_to_string(server.data_dir.join("join-token"))
            .expect("join-token")
            .trim()
            .to_string();
        let name = format!("pods-{n}");
        let mut args = vec!["--cni-bridge", &bridge];
        args.extend_from_slice(agent_args);
        let agent = Agent::new(&name, &server.url(), Some(&token), &args);
        agent_support::place_test_image(&agent.node_dir, IMAGE);
        let api = server.api();
        let node = Node {
            server,
            agent,
            api,
            name,
            bridge,
            cidr,
        };
        let mut node = node;
        node.agent.start();
        Some(node)
    }

    fn pods_path(&self) -> &'static str {
        "/api/v1/namespaces/default/pods"
    }

    async fn create(&self, pod: Value) -> Value {
        let resp = self
            .api
            .post_json(self.pods_path(), &pod)
            .await
            .expect("POST");
        assert_eq!(resp.status, 201, "{}", resp.text());
        resp.json()
    }

    async fn get(&self, name: &str) -> Option<Value> {
        let resp = self
            .api
            .get(&format!("{}/{name}", self.pods_path()))
            .await
            .ok()?;
        (resp.status == 200).then(|| resp.json())
    }

    /// Waits until pod `name` satisfies `check`; panics with the pod and the agent's log.
    async fn wait_pod(&self, name: &str, limit: Duration, check: impl Fn(&Value) -> bool) -> Value {
        let deadline = Instant::now() + limit;
        let mut last = Value::Null;
        loop {
            if let Some(pod) = self.get(name).await {
                if check(&pod) {
                    return pod;
                }
                last = pod;
            }
            assert!(
                Instant::now() < deadline,
                "pod {name} never got there; last seen: {:#}\nagent log:\n{}",
                last["status"],
                self.agent.logs()
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    async fn wait_gone(&self, name: &str, limit: Duration) {
        let deadline = Instant::now() + limit;
        while self.get(name).await.is_some() {
            assert!(
                Instant::now() < deadline,
                "pod {name} still in the API; agent log:\n{}",
                self.agent.logs()
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    async fn delete(&self, name: &str, grace: Option<i64>) {
        let path = match grace {
            Some(g) => format!("{}/{name}?gracePeriodSeconds={g}", self.pods_path()),
            None => format!("{}/{name}", self.pods_path()),
        };
        let resp = self
            .api
            .request("DELETE", &path, None, bytes::Bytes::new())
            .await
            .expect("DELETE");
        assert!(resp.status == 200 || resp.status == 202, "{}", resp.text());
    }

    /// A watch of the pods of `default` from `rv`: events on a channel.
    async fn watch(&self, rv: &str) -> mpsc::UnboundedReceiver<(String, Value)> {
        let conn = self.api.connect().await.expect("connect");
        let (status, events) = conn
            .watch(&format!(
                "{}?watch=true&resourceVersion={rv}",
                self.pods_path()
            ))
            .await
            .expect("watch");
        assert_eq!(status, 200);
        events
    }

    /// The resourceVersion of the pod list now.
    async fn list_rv(&self) -> String {
        let list = self.api.get(self.pods_path()).await.expect("list").json();
        list["metadata"]["resourceVersion"]
            .as_str()
            .expect("rv")
            .to_string()
    }

    /// The pod directory on the node.
    fn pod_dir(&self, uid: &str) -> PathBuf {
        self.agent.node_dir.join("pods").join(uid)
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        self.agent.kill();
        agent_support::remove_pods_leftovers(&self.agent.node_dir, &self.agent.root, &self.bridge);
        let _g = LOCK.lock().unwrap_or_else(|e| e.into_inner());
        if ALIVE.fetch_sub(1, Ordering::SeqCst) == 1 {
            if let Some(Some(v)) = IP_FORWARD.get() {
                let _ = std::fs::write("/proc/sys/net/ipv4/ip_forward", v);
            }
        }
    }
}

/// A pod of one container running `command`.
fn pod(name: &str, command: &[&str], extra: Value) -> Value {
    agent_support::pod(name, IMAGE, command, 2, extra)
}

fn phase(pod: &Value) -> &str {
    pod["status"]["phase"].as_str().unwrap_or_default()
}

fn running(pod: &Value) -> bool {
    phase(pod) == "Running"
        && pod["status"]["containerStatuses"]
            .as_array()
            .is_some_and(|l| l.iter().all(|c| c["state"]["running"].is_object()))
}

fn container<'a>(pod: &'a Value, name: &str) -> &'a Value {
    ["containerStatuses", "initContainerStatuses"]
        .iter()
        .filter_map(|list| pod["status"][*list].as_array())
        .flatten()
        .find(|c| c["name"] == name)
        .unwrap_or(&Value::Null)
}

fn condition<'a>(pod: &'a Value, kind: &str) -> &'a str {
    pod["status"]["conditions"]
        .as_array()
        .and_then(|l| l.iter().find(|c| c["type"] == kind))
        .and_then(|c| c["status"].as_str())
        .unwrap_or_default()
}

/// The container's id (without `runc://`).
fn container_id(pod: &Value, name: &str) -> String {
    let id = container(pod, name)["containerID"]
        .as_str()
        .unwrap_or_default();
    id.split_once("://")
        .map(|(_, id)| id)
        .unwrap_or(id)
        .to_string()
}

/// The container's init process on the host, from the pid file the runtime wrote.
fn container_pid(node: &Node, pod: &Value, name: &str) -> i32 {
    let uid = pod["metadata"]["uid"].as_str().unwrap();
    let path = node
        .pod_dir(uid)
        .join("containers")
        .join(container_id(pod, name))
        .join("pidfile");
    std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
        .trim()
        .parse()
        .expect("pid")
}

fn cmdline(pid: i32) -> String {
    std::fs::read(format!("/proc/{pid}/cmdline"))
        .map(|b| String::from_utf8_lossy(&b).replace('\0', " "))
        .unwrap_or_default()
}

fn parse_time(t: &Value) -> i64 {
    chrono::DateTime::parse_from_rfc3339(t.as_str().unwrap_or_default())
        .map(|t| t.timestamp())
        .unwrap_or_else(|_| panic!("not a time: {t}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_run_gives_a_running_pod_with_a_real_process() {
    let Some(node) = Node::start(&[]) else { return };
    let started = Instant::now();
    let out = node.server.kubectl(&[
        "run",
        "b",
        &format!("--image={IMAGE}"),
        "--",
        "sleep",
        "3600",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let pod = node.wait_pod("b", RUNNING_GUARD, running).await;
    eprintln!("kubectl run -> Running: {:?}", started.elapsed());

    // A real process, in its own network namespace.
    let pid = container_pid(&node, &pod, "b");
    assert!(cmdline(pid).contains("sleep 3600"), "{}", cmdline(pid));
    let netns = |p: &str| std::fs::read_link(format!("/proc/{p}/ns/net")).unwrap();
    assert_ne!(netns(&pid.to_string()), netns("self"));

    // The status kubelet would write.
    let s = &pod["status"];
    assert_eq!(pod["spec"]["nodeName"], node.name.as_str());
    let ip = s["podIP"].as_str().expect("podIP");
    let net = node.cidr.trim_end_matches(".0/24");
    assert!(ip.starts_with(net), "{ip} in {}", node.cidr);
    assert_eq!(s["podIPs"][0]["ip"], ip);
    assert_eq!(s["hostIP"], "127.0.0.1");
    assert!(s["startTime"].is_string());
    for kind in [
        "PodScheduled",
        "PodReadyToStartContainers",
        "Initialized",
        "ContainersReady",
        "Ready",
    ] {
        assert_eq!(
            condition(&pod, kind),
            "True",
            "{kind}: {:#}",
            s["conditions"]
        );
    }
    let c = container(&pod, "b");
    assert!(
        c["containerID"].as_str().unwrap().starts_with("runc://")
            || c["containerID"].as_str().unwrap().starts_with("crun://")
    );
    assert_eq!(c["image"], "litek8s.test/busybox:1");
    assert!(c["imageID"]
        .as_str()
        .unwrap()
        .starts_with("litek8s.test/busybox@sha256:"));
    assert_eq!(
        (
            c["ready"].as_bool(),
            c["started"].as_bool(),
            c["restartCount"].as_i64()
        ),
        (Some(true), Some(true), Some(0))
    );

    // Deleted (sleep ignores SIGTERM as PID 1: the grace period of 2 s, then SIGKILL): the
    // process, the pod's directory and the API object go.
    let uid = pod["metadata"]["uid"].as_str().unwrap().to_string();
    node.delete("b", Some(2)).await;
    node.wait_gone("b", Duration::from_secs(30)).await;
    assert!(
        !Path::new(&format!("/proc/{pid}")).exists(),
        "the process outlived its pod"
    );
    let deadline = Instant::now() + Duration::from_secs(10);
    while node.pod_dir(&uid).exists() {
        assert!(
            Instant::now() < deadline,
            "{} stays",
            node.pod_dir(&uid).display()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deployment_of_three_runs_on_the_node() {
    let Some(node) = Node::start(&[]) else { return };
    let out = node.server.kubectl(&[
        "create",
        "deployment",
        "web",
        &format!("--image={IMAGE}"),
        "--replicas=3",
        "--",
        "sleep",
        "3600",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let deadline = Instant::now() + RUNNING_GUARD;
    loop {
        let list = node
            .api
            .get("/api/v1/namespaces/default/pods?labelSelector=app%3Dweb")
            .await
            .expect("list")
            .json();
        let items = list["items"].as_array().cloned().unwrap_or_default();
        let up: Vec<&Value> = items.iter().filter(|p| running(p)).collect();
        if up.len() == 3 {
            let ips: std::collections::HashSet<&str> = up
                .iter()
                .map(|p| p["status"]["podIP"].as_str().unwrap())
                .collect();
            assert_eq!(ips.len(), 3, "each pod has its own IP");
            assert!(up
                .iter()
                .all(|p| p["spec"]["nodeName"] == node.name.as_str()));
            break;
        }
        assert!(
            Instant::now() < deadline,
            "3 Running pods expected: {:#}\nagent log:\n{}",
            list["items"],
            node.agent.logs()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let deploy = node
        .api
        .get("/apis/apps/v1/namespaces/default/deployments/web")
        .await
        .expect("deployment")
        .json();
    eprintln!("deployment status: {}", deploy["status"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crashing_container_backs_off_longer_each_time() {
    let Some(node) = Node::start(&[]) else { return };
    node.create(pod("crash", &["sh", "-c", "echo bye; exit 3"], json!({})))
        .await;
    // When each restart count was first seen, and the back-off messages shown.
    let mut first_seen: HashMap<i64, Instant> = HashMap::new();
    let mut messages = Vec::new();
    let t0 = Instant::now();
    let deadline = t0 + Duration::from_secs(90);
    let last = loop {
        let p = node.get("crash").await.expect("pod");
        let c = container(&p, "c").clone();
        if let Some(n) = c["restartCount"].as_i64() {
            first_seen.entry(n).or_insert_with(Instant::now);
        }
        if c["state"]["waiting"]["reason"] == "CrashLoopBackOff" {
            let m = c["state"]["waiting"]["message"]
                .as_str()
                .unwrap_or_default()
                .to_string();
            if !messages.contains(&m) {
                messages.push(m);
            }
        }
        if c["restartCount"].as_i64() >= Some(3) {
            break p;
        }
        assert!(
            Instant::now() < deadline,
            "{:#}\n{}",
            p["status"],
            node.agent.logs()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let at = |n| first_seen[&n].duration_since(t0).as_secs_f64();
    let (gap2, gap3) = (at(2) - at(1), at(3) - at(2));
    eprintln!(
        "restarts at {:.1}s, {:.1}s, {:.1}s; back-off messages {messages:?}",
        at(1),
        at(2),
        at(3)
    );
    // kubelet's schedule: at once, then 10 s, then 20 s after the last exit.
    assert!(gap2 >= 9.0, "second restart after {gap2:.1}s");
    assert!(gap3 >= 19.0, "third restart after {gap3:.1}s");
    assert!(gap3 > gap2 * 1.5, "delays grow: {gap2:.1}s then {gap3:.1}s");
    assert!(messages.iter().any(|m| m.starts_with("back-off 10s restarting failed container=c pod=crash_default(")), "{messages:?}");
    assert!(
        messages.iter().any(|m| m.starts_with("back-off 20s")),
        "{messages:?}"
    );
    let c = container(&last, "c");
    assert_eq!(c["lastState"]["terminated"]["exitCode"], 3);
    assert_eq!(c["lastState"]["terminated"]["reason"], "Error");
    assert_eq!(
        phase(&last),
        "Running",
        "restartPolicy Always keeps the pod Running"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn init_containers_run_in_order_before_the_app() {
    let Some(node) = Node::start(&[]) else { return };
    node.create(json!({
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "init"},
        "spec": {
            "terminationGracePeriodSeconds": 2,
            "initContainers": [
                {"name": "first", "image": IMAGE, "command": ["sh", "-c", "sleep 2; echo first done > /dev/termination-log"]},
                {"name": "second", "image": IMAGE, "command": ["sh", "-c", "sleep 1"]}
            ],
            "containers": [{"name": "app", "image": IMAGE, "command": ["sleep", "3600"]}]
        }
    }))
    .await;
    // While the first runs: the pod is initializing, the others wait.
    let early = node
        .wait_pod("init", RUNNING_GUARD, |p| {
            container(p, "first")["state"]["running"].is_object()
        })
        .await;
    assert_eq!(phase(&early), "Pending");
    assert_eq!(condition(&early, "Initialized"), "False");
    assert_eq!(
        container(&early, "second")["state"]["waiting"]["reason"],
        "PodInitializing"
    );
    assert_eq!(
        container(&early, "app")["state"]["waiting"]["reason"],
        "PodInitializing"
    );

    let pod = node.wait_pod("init", RUNNING_GUARD, running).await;
    assert_eq!(condition(&pod, "Initialized"), "True");
    let first = &container(&pod, "first")["state"]["terminated"];
    let second = &container(&pod, "second")["state"]["terminated"];
    let app = &container(&pod, "app")["state"]["running"];
    assert_eq!(
        (first["exitCode"].as_i64(), first["reason"].as_str()),
        (Some(0), Some("Completed"))
    );
    assert_eq!(first["message"], "first done\n");
    assert_eq!(second["exitCode"], 0);
    assert!(parse_time(&first["finishedAt"]) <= parse_time(&second["startedAt"]));
    assert!(parse_time(&second["finishedAt"]) <= parse_time(&app["startedAt"]));

    // A failing init container of a pod that never restarts fails the pod; its app never runs.
    node.create(json!({
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "init-fails"},
        "spec": {
            "restartPolicy": "Never", "terminationGracePeriodSeconds": 2,
            "initContainers": [{"name": "first", "image": IMAGE, "command": ["sh", "-c", "exit 7"]}],
            "containers": [{"name": "app", "image": IMAGE, "command": ["sleep", "3600"]}]
        }
    }))
    .await;
    let failed = node
        .wait_pod("init-fails", RUNNING_GUARD, |p| phase(p) == "Failed")
        .await;
    assert_eq!(
        container(&failed, "first")["state"]["terminated"]["exitCode"],
        7
    );
    assert!(container(&failed, "app")["state"]["running"].is_null());
    assert_eq!(condition(&failed, "Initialized"), "False");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_graceful_delete_of_a_container_ignoring_sigterm_takes_the_grace_period() {
    let Some(node) = Node::start(&[]) else { return };
    // sleep as PID 1 has no SIGTERM handler: the kernel ignores the signal.
    node.create(pod(
        "stubborn",
        &["sleep", "3600"],
        json!({"terminationGracePeriodSeconds": 3}),
    ))
    .await;
    let pod = node.wait_pod("stubborn", RUNNING_GUARD, running).await;
    let pid = container_pid(&node, &pod, "c");
    let mut events = node.watch(&node.list_rv().await).await;
    let asked = Instant::now();
    node.delete("stubborn", None).await;
    let mut last_modified = Value::Null;
    let gone = loop {
        let (kind, object) = tokio::time::timeout(Duration::from_secs(30), events.recv())
            .await
            .expect("the pod was not deleted within 30 s")
            .expect("watch ended");
        if object["metadata"]["name"] != "stubborn" {
            continue;
        }
        match kind.as_str() {
            "MODIFIED" => last_modified = object,
            "DELETED" => break asked.elapsed(),
            _ => {}
        }
    };
    eprintln!("delete -> gone: {gone:?}");
    assert!(
        gone >= Duration::from_secs(3),
        "gone after {gone:?}, before the grace period"
    );
    assert!(gone < Duration::from_secs(15), "gone after {gone:?}");
    assert!(!Path::new(&format!("/proc/{pid}")).exists());
    // The last status the agent wrote: SIGKILLed (137), the pod Failed.
    let t = &container(&last_modified, "c")["state"]["terminated"];
    assert_eq!(t["exitCode"], 137, "{:#}", last_modified["status"]);
    assert_eq!(t["reason"], "Error");
    assert_eq!(phase(&last_modified), "Failed");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_killed_and_restarted_leaves_its_containers_alone() {
    let Some(mut node) = Node::start(&[]) else {
        return;
    };
    node.create(pod("steady", &["sleep", "3600"], json!({})))
        .await;
    node.create(pod("doomed", &["sleep", "3600"], json!({})))
        .await;
    let before = node.wait_pod("steady", RUNNING_GUARD, running).await;
    node.wait_pod("doomed", RUNNING_GUARD, running).await;
    let (id, pid) = (
        container_id(&before, "c"),
        container_pid(&node, &before, "c"),
    );

    node.agent.kill();
    // The containers outlive the agent; a pod deleted meanwhile waits for it.
    assert!(cmdline(pid).contains("sleep"));
    node.delete("doomed", Some(2)).await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert!(
        node.get("doomed").await.is_some(),
        "a bound pod waits for its node"
    );

    node.agent.start();
    node.agent.wait_for_log(
        "adopted 2 container(s) of the last run",
        Duration::from_secs(30),
    );
    node.wait_gone("doomed", Duration::from_secs(30)).await;
    // Several relists and syncs later, nothing restarted.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let after = node.get("steady").await.expect("pod");
    assert!(running(&after), "{:#}", after["status"]);
    assert_eq!(container_id(&after, "c"), id, "the same container");
    assert_eq!(container(&after, "c")["restartCount"], 0);
    assert_eq!(container_pid(&node, &after, "c"), pid);
    assert!(cmdline(pid).contains("sleep 3600"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_input_shows_on_its_pod_and_leaves_the_others_alone() {
    if skipped() {
        return;
    }
    let registry = Registry::start(None);
    registry.push("test/busybox", "2", &busybox_image()).await;
    let insecure = registry.host();
    let Some(node) = Node::start(&["--insecure-registry", &insecure]) else {
        return;
    };
    node.create(pod("bystander", &["sleep", "3600"], json!({})))
        .await;
    let bystander = node.wait_pod("bystander", RUNNING_GUARD, running).await;
    let mut events = node.watch(&node.list_rv().await).await;

    // Pulled from the registry: works.
    let mut pulled = pod("pulled", &["sleep", "3600"], json!({}));
    pulled["spec"]["containers"][0]["image"] = json!(format!("{}/test/busybox:2", registry.host()));
    node.create(pulled).await;
    // An image the registry does not have: ErrImagePull, then ImagePullBackOff, each with
    // the registry's answer.
    let mut missing = pod("missing-image", &["sleep", "3600"], json!({}));
    missing["spec"]["containers"][0]["image"] = json!(format!("{}/test/nosuch:1", registry.host()));
    node.create(missing).await;
    // A command the image does not have: RunContainerError, the runtime's StartError.
    node.create(pod("no-command", &["/nosuch"], json!({})))
        .await;
    // A volume type nobody knows: the API refuses it.
    let mut bad_volume = pod(
        "bad-volume",
        &["sleep", "3600"],
        json!({"volumes": [{"name": "v", "fancyDisk": {}}]}),
    );
    bad_volume["apiVersion"] = json!("v1");
    let resp = node
        .api
        .post_json(
            &format!("{}?fieldValidation=Strict", node.pods_path()),
            &bad_volume,
        )
        .await
        .expect("POST");
    assert_eq!(resp.status, 400, "{}", resp.text());
    assert!(resp.text().contains("fancyDisk"), "{}", resp.text());

    node.wait_pod("pulled", RUNNING_GUARD, running).await;
    // Every waiting reason and last state each pod went through, from the watch.
    let mut reasons: HashMap<String, Vec<(String, String)>> = HashMap::new();
    let mut start_error = Value::Null;
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let pull_done = reasons
            .get("missing-image")
            .is_some_and(|r| r.iter().any(|(r, _)| r == "ImagePullBackOff"));
        let run_done = reasons
            .get("no-command")
            .is_some_and(|r| r.iter().any(|(r, _)| r == "CrashLoopBackOff"));
        if pull_done && run_done && start_error.is_object() {
            break;
        }
        let left = deadline.saturating_duration_since(Instant::now());
        let Ok(Some((_, object))) = tokio::time::timeout(left, events.recv()).await else {
            panic!(
                "reasons seen: {reasons:#?}\nagent log:\n{}",
                node.agent.logs()
            );
        };
        let name = object["metadata"]["name"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        let c = container(&object, "c");
        if let Some(r) = c["state"]["waiting"]["reason"].as_str() {
            let m = c["state"]["waiting"]["message"]
                .as_str()
                .unwrap_or_default()
                .to_string();
            let seen = reasons.entry(name.clone()).or_default();
            if !seen.iter().any(|(sr, _)| sr == r) {
                seen.push((r.to_string(), m));
            }
        }
        if name == "no-command" && c["lastState"]["terminated"]["reason"] == "StartError" {
            start_error = c["lastState"]["terminated"].clone();
        }
    }
    let pull = &reasons["missing-image"];
    let err = pull
        .iter()
        .find(|(r, _)| r == "ErrImagePull")
        .expect("ErrImagePull seen");
    assert!(
        err.1.contains("test/nosuch")
            && err.1.contains("404")
            && err.1.contains("MANIFEST_UNKNOWN"),
        "{err:?}"
    );
    let backoff = pull.iter().find(|(r, _)| r == "ImagePullBackOff").unwrap();
    assert!(
        backoff.1.starts_with("Back-off pulling image \""),
        "{backoff:?}"
    );
    assert!(backoff.1.contains("MANIFEST_UNKNOWN"), "{backoff:?}");

    let run = &reasons["no-command"];
    let err = run
        .iter()
        .find(|(r, _)| r == "RunContainerError")
        .expect("RunContainerError seen");
    assert!(err.1.contains("/nosuch"), "{err:?}");
    assert_eq!(start_error["exitCode"], 128);
    assert!(
        start_error["message"]
            .as_str()
            .unwrap_or_default()
            .contains("/nosuch"),
        "{start_error}"
    );

    // Nothing of it touched the pod that was there first.
    let after = node.get("bystander").await.expect("bystander");
    assert!(running(&after));
    assert_eq!(container_id(&after, "c"), container_id(&bystander, "c"));
    assert_eq!(container(&after, "c")["restartCount"], 0);
    drop(registry);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn volumes_environment_and_probes_on_a_running_pod() {
    let Some(node) = Node::start(&[]) else { return };
    let cm = support::configmap("default", "settings", json!({"greeting": "hello"}));
    let resp = node
        .api
        .post_json("/api/v1/namespaces/default/configmaps", &cm)
        .await
        .expect("POST");
    assert_eq!(resp.status, 201, "{}", resp.text());
    // A Service of the pod's namespace: its variables reach the containers (kubelet's
    // `enableServiceLinks`), as do the API server's `KUBERNETES_SERVICE_*`.
    let service = json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "web-front"},
        "spec": {"ports": [{"name": "http", "port": 80}, {"name": "metrics", "port": 9100}]}});
    let resp = node
        .api
        .post_json("/api/v1/namespaces/default/services", &service)
        .await
        .expect("POST");
    assert_eq!(resp.status, 201, "{}", resp.text());
    let web_ip = resp.json()["spec"]["clusterIP"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    node.create(json!({
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "parts"},
        "spec": {
            "terminationGracePeriodSeconds": 2,
            "volumes": [{"name": "cfg", "configMap": {"name": "settings"}}],
            // The environment from the ConfigMap and the downward API.
            "initContainers": [{"name": "env", "image": IMAGE,
                "command": ["sh", "-c", "echo -n \"$GREETING from $POD\" > /dev/termination-log"],
                "env": [
                    {"name": "GREETING", "valueFrom": {"configMapKeyRef": {"name": "settings", "key": "greeting"}}},
                    {"name": "POD", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}
                ]},
                // What in-cluster clients read: the service account token, CA and namespace
                // of the kube-api-access volume the admission added.
                {"name": "account", "image": IMAGE,
                 "command": ["sh", "-c", "cd /var/run/secrets/kubernetes.io/serviceaccount && test -s ca.crt && echo -n \"$(cat namespace) $(cat token)\" > /dev/termination-log"]},
                // ... and the API server's address from the Service variables.
                {"name": "services", "image": IMAGE,
                 "command": ["sh", "-c", "echo -n \"$KUBERNETES_SERVICE_HOST:$KUBERNETES_SERVICE_PORT $WEB_FRONT_SERVICE_PORT_METRICS $WEB_FRONT_PORT_80_TCP_ADDR $WEB_FRONT_PORT\" > /dev/termination-log"]}],
            "containers": [
                // Ready once the mounted ConfigMap says "world".
                {"name": "app", "image": IMAGE,
                 "command": ["sh", "-c", "while true; do if grep -q world /etc/cfg/greeting; then touch /tmp/ready; else rm -f /tmp/ready; fi; sleep 0.2; done"],
                 "volumeMounts": [{"name": "cfg", "mountPath": "/etc/cfg"}],
                 "readinessProbe": {"exec": {"command": ["cat", "/tmp/ready"]}, "periodSeconds": 1}},
                // Fails its liveness probe 3 s after each start.
                {"name": "live", "image": IMAGE,
                 "command": ["sh", "-c", "sleep 3; touch /tmp/die; sleep 3600"],
                 "livenessProbe": {"exec": {"command": ["sh", "-c", "test ! -e /tmp/die"]},
                                   "periodSeconds": 1, "failureThreshold": 1}}
            ]
        }
    }))
    .await;
    let pod = node
        .wait_pod("parts", RUNNING_GUARD, |p| {
            container(p, "app")["state"]["running"].is_object()
        })
        .await;
    let env = &container(&pod, "env")["state"]["terminated"];
    assert_eq!(env["message"], "hello from parts", "{env}");
    let kubernetes = node
        .api
        .get("/api/v1/namespaces/default/services/kubernetes")
        .await
        .expect("GET the kubernetes Service");
    assert_eq!(kubernetes.status, 200, "{}", kubernetes.text());
    let api_ip = kubernetes.json()["spec"]["clusterIP"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    let services = &container(&pod, "services")["state"]["terminated"];
    assert_eq!(
        services["message"],
        format!("{api_ip}:443 9100 {web_ip} tcp://{web_ip}:80"),
        "{services}"
    );

    // The pod's token is a real one: the API server knows it as the pod's service account.
    let account = container(&pod, "account")["state"]["terminated"]["message"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    let (namespace, token) = account.split_once(' ').unwrap_or_default();
    assert_eq!(namespace, "default", "{account}");
    let review = node
        .api
        .with_token(Some(token))
        .post_json(
            "/apis/authentication.k8s.io/v1/selfsubjectreviews",
            &json!({"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"}),
        )
        .await
        .expect("POST selfsubjectreview");
    assert_eq!(review.status, 201, "{}", review.text());
    let user = &review.json()["status"]["userInfo"];
    assert_eq!(
        user["username"], "system:serviceaccount:default:default",
        "{user}"
    );
    assert_eq!(
        user["extra"]["authentication.kubernetes.io/pod-name"],
        json!(["parts"]),
        "bound to the pod: {user}"
    );
    // Not ready: the mounted file says hello, the readiness probe fails.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let pod = node.get("parts").await.expect("pod");
    assert_eq!(container(&pod, "app")["ready"], false);
    assert_eq!(condition(&pod, "Ready"), "False");

    // The ConfigMap changes: the running container sees the new file, its probe passes.
    let changed = Instant::now();
    let resp = node
        .api
        .request(
            "PATCH",
            "/api/v1/namespaces/default/configmaps/settings",
            Some("application/merge-patch+json"),
            bytes::Bytes::from(r#"{"data":{"greeting":"world"}}"#),
        )
        .await
        .expect("PATCH");
    assert_eq!(resp.status, 200, "{}", resp.text());
    let ready = node
        .wait_pod("parts", Duration::from_secs(30), |p| {
            container(p, "app")["ready"] == true
        })
        .await;
    eprintln!(
        "configMap change -> container ready: {:?}",
        changed.elapsed()
    );
    assert_eq!(
        container(&ready, "app")["restartCount"],
        0,
        "updated in place"
    );

    // The liveness probe kills "live"; it is restarted.
    let restarted = node
        .wait_pod("parts", Duration::from_secs(30), |p| {
            container(p, "live")["restartCount"].as_i64() >= Some(1)
        })
        .await;
    let last = &container(&restarted, "live")["lastState"]["terminated"];
    assert_eq!(last["exitCode"], 137, "{last}");
    assert!(
        node.agent
            .logs()
            .contains("Container live failed liveness probe, will be restarted"),
        "{}",
        node.agent.logs()
    );
    assert_eq!(container(&restarted, "app")["restartCount"], 0);
}
