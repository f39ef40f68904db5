//! Helpers of the node agent tests: a `litek8s-agent` child process (the agent's own
//! executable, which the packages' unit runs; `litek8s agent` is the same code) in a temporary
//! node directory (its log kept per start), the Node and its Lease as a server sees them, and
//! kubeconfigs and kubectl runs with a node's client certificate.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Output, Stdio};
use std::time::{Duration, Instant};

use super::support::images::{busybox_image, oci_archive};
use super::support::{agent_bin, terminate_child, Api};

/// The kubectl versions the tests drive (the oldest and newest supported).
pub const KUBECTLS: [&str; 2] = [
    "/usr/lib/google-cloud-sdk/bin/kubectl.1.27",
    "/usr/lib/google-cloud-sdk/bin/kubectl.1.33",
];

/// How long an agent may take to register a Ready Node (a hang guard).
pub const READY_GUARD: Duration = Duration::from_secs(60);

/// One `litek8s-agent` process.
pub struct Agent {
    _tmp: Option<tempfile::TempDir>,
    pub root: PathBuf,
    pub node_dir: PathBuf,
    pub name: String,
    pub server: String,
    pub token: Option<String>,
    pub extra: Vec<String>,
    child: Option<Child>,
    starts: u32,
}

impl Agent {
    /// An agent (not started) for node `name` joining `server` (`https://HOST:PORT`) with
    /// `token`, in a new temporary directory.
    pub fn new(name: &str, server: &str, token: Option<&str>, extra: &[&str]) -> Agent {
        let tmp = tempfile::Builder::new()
            .prefix("litek8s-agent-")
            .tempdir()
            .expect("tempdir");
        let root = tmp.path().to_path_buf();
        Agent {
            _tmp: Some(tmp),
            node_dir: root.join("node"),
            root,
            name: name.to_string(),
            server: server.to_string(),
            token: token.map(str::to_string),
            extra: extra.iter().map(|s| s.to_string()).collect(),
            child: None,
            starts: 0,
        }
    }

    pub fn command(&self) -> Command {
        let mut cmd = Command::new(agent_bin());
        // The allocator as litek8s-agent.service runs it, unless the caller set its own
        // (an experiment: bench/AGENT.md, notes).
        if std::env::var_os("GLIBC_TUNABLES").is_none() {
            cmd.env("GLIBC_TUNABLES", unit_glibc_tunables());
        }
        cmd.arg("--server")
            .arg(&self.server)
            .arg("--node-dir")
            .arg(&self.node_dir)
            .arg("--node-name")
            .arg(&self.name)
            // A test machine's disk may be fuller than kubelet's defaults allow (10% free):
            // the node would report DiskPressure and be tainted for it.
            .arg("--eviction-hard")
            .arg("nodefs.available<1%,imagefs.available<1%")
            // The tests' agents share the machine's network namespace: their Service rules,
            // policy rules and pod routes would fight. tests/agent_proxy.rs and
            // tests/agent_netpol.rs test them in namespaces.
            .arg("--disable-proxy")
            .arg("--disable-network-policy");
        // The tests' agents would all want kubelet's port 10250: it is off unless a test
        // asks for a port of its own.
        if !self.extra.iter().any(|a| a == "--kubelet-port") {
            cmd.arg("--kubelet-port").arg("0");
        }
        cmd.args(&self.extra)
            .env_remove("LITEK8S_TOKEN")
            .env_remove("NOTIFY_SOCKET")
            .env(
                "LITEK8S_LOG",
                std::env::var("LITEK8S_LOG").unwrap_or_else(|_| "info".into()),
            )
            .stdin(Stdio::null());
        if let Some(token) = &self.token {
            cmd.env("LITEK8S_TOKEN", token);
        }
        cmd
    }

    fn log_path(&self, n: u32) -> PathBuf {
        self.root.join(format!("agent-{n}.log"))
    }

    /// Everything every start logged.
    pub fn logs(&self) -> String {
        (1..=self.starts)
            .map(|n| std::fs::read_to_string(self.log_path(n)).unwrap_or_default())
            .collect::<Vec<_>>()
            .join("\n")
    }

    /// The log of the current (last) start.
    pub fn last_log(&self) -> String {
        std::fs::read_to_string(self.log_path(self.starts)).unwrap_or_default()
    }

    pub fn spawn(&mut self) {
        self.spawn_with(self.command());
    }

    /// Spawns `cmd` (this agent's [`Agent::command`], changed by the caller).
    pub fn spawn_with(&mut self, mut cmd: Command) {
        assert!(self.child.is_none(), "agent already running");
        self.starts += 1;
        let log = std::fs::File::create(self.log_path(self.starts)).expect("log");
        let child = cmd
            .stdout(log.try_clone().expect("clone log"))
            .stderr(log)
            .spawn()
            .expect("spawn litek8s agent");
        self.child = Some(child);
    }

    /// Runs the agent expecting it to exit; returns its status and log.
    pub fn run_to_exit(&mut self, limit: Duration) -> (ExitStatus, String) {
        self.spawn();
        let deadline = Instant::now() + limit;
        loop {
            let child = self.child.as_mut().expect("spawned");
            if let Ok(Some(status)) = child.try_wait() {
                self.child = None;
                return (status, self.last_log());
            }
            if Instant::now() > deadline {
                self.kill();
                panic!(
                    "the agent did not exit within {limit:?}; log:\n{}",
                    self.logs()
                );
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Starts the agent and waits until its log says the Node is registered and Ready.
    pub fn start(&mut self) {
        self.spawn();
        self.wait_for_log("the Node is registered and Ready", READY_GUARD);
    }

    /// Waits until the current start's log contains `text`; panics (with the log) if the
    /// agent exits or `limit` passes.
    pub fn wait_for_log(&mut self, text: &str, limit: Duration) {
        let deadline = Instant::now() + limit;
        loop {
            if self.last_log().contains(text) {
                return;
            }
            if let Some(child) = self.child.as_mut() {
                if let Ok(Some(status)) = child.try_wait() {
                    self.child = None;
                    panic!("the agent exited with {status}; log:\n{}", self.logs());
                }
            }
            assert!(
                Instant::now() < deadline,
                "no {text:?} in the agent's log within {limit:?}:\n{}",
                self.logs()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// The server the agent's requests go to now, from its log.
    pub fn server_in_use(&self) -> Option<String> {
        let log = self.last_log();
        let line = log.lines().rev().find(|l| l.contains("requests go to "))?;
        let rest = line.split("requests go to ").nth(1)?;
        Some(rest.split_whitespace().next()?.to_string())
    }

    /// The running agent's pid.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(|c| c.id())
    }

    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    pub fn terminate(&mut self) -> Option<ExitStatus> {
        terminate_child(self.child.take()?)
    }

    pub fn credentials(&self) -> PathBuf {
        self.node_dir.join("credentials")
    }

    /// A kubeconfig for `server` (`https://HOST:PORT`) with this node's certificate.
    pub fn kubeconfig(&self, server: &str) -> PathBuf {
        let path = self.root.join(format!("node-{}.kubeconfig", self.starts));
        write_kubeconfig(
            &path,
            server,
            &self.credentials().join("ca.crt"),
            &self.credentials().join("node.crt"),
            &self.credentials().join("node.key"),
        );
        path
    }
}

impl Drop for Agent {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Writes a kubeconfig naming certificate and key files.
pub fn write_kubeconfig(path: &Path, server: &str, ca: &Path, cert: &Path, key: &Path) {
    let text = format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: litek8s\n  cluster:\n    server: {server}\n    certificate-authority: {}\nusers:\n- name: node\n  user:\n    client-certificate: {}\n    client-key: {}\ncontexts:\n- name: litek8s\n  context:\n    cluster: litek8s\n    user: node\ncurrent-context: litek8s\n",
        ca.display(),
        cert.display(),
        key.display()
    );
    std::fs::write(path, text).expect("write kubeconfig");
}

/// Runs kubectl with `kubeconfig` (bounded).
pub fn kubectl(binary: &str, kubeconfig: &Path, args: &[&str]) -> Output {
    super::support::kubectl::run(binary, kubeconfig, args)
}

/// The Node `name` as `api` sees it (`None` if absent).
pub async fn node(api: &Api, name: &str) -> Option<serde_json::Value> {
    let resp = api.get(&format!("/api/v1/nodes/{name}")).await.ok()?;
    (resp.status == 200).then(|| resp.json())
}

/// The node's Lease as `api` sees it.
pub async fn lease(api: &Api, name: &str) -> Option<serde_json::Value> {
    let resp = api
        .get(&format!(
            "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/{name}"
        ))
        .await
        .ok()?;
    (resp.status == 200).then(|| resp.json())
}

/// The status of condition `kind` of a Node.
pub fn condition<'a>(node: &'a serde_json::Value, kind: &str) -> Option<&'a str> {
    node["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == kind)?["status"]
        .as_str()
}

/// Waits until `check` holds for the Node (hang guard `limit`); returns the Node.
pub async fn wait_node(
    api: &Api,
    name: &str,
    limit: Duration,
    check: impl Fn(&serde_json::Value) -> bool,
) -> serde_json::Value {
    let deadline = Instant::now() + limit;
    loop {
        if let Some(node) = node(api, name).await {
            if check(&node) {
                return node;
            }
            assert!(
                Instant::now() < deadline,
                "node {name} never matched: {node:#}"
            );
        }
        assert!(Instant::now() < deadline, "node {name} never appeared");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The entries of `dir` (none when it cannot be read).
pub fn read_dir(dir: &Path) -> Vec<PathBuf> {
    std::fs::read_dir(dir)
        .map(|e| e.flatten().map(|e| e.path()).collect())
        .unwrap_or_default()
}

/// Puts the busybox test image, named `image`, where the agent imports images at its start
/// (`<node-dir>/images/`), so pods run without a registry.
pub fn place_test_image(node_dir: &Path, image: &str) {
    let images = node_dir.join("images");
    std::fs::create_dir_all(&images).expect("images dir");
    std::fs::write(
        images.join("busybox.tar"),
        oci_archive(&[(Some(image), &busybox_image())]),
    )
    .expect("write the test image");
}

/// A Pod of one container `c` running `command` from `image`, with `grace` seconds of
/// termination grace and the fields of `extra` added to its spec.
pub fn pod(
    name: &str,
    image: &str,
    command: &[&str],
    grace: u32,
    extra: serde_json::Value,
) -> serde_json::Value {
    let mut pod = serde_json::json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {
            "terminationGracePeriodSeconds": grace,
            "containers": [{"name": "c", "image": image, "command": command}],
        },
    });
    if let (Some(spec), Some(extra)) = (pod["spec"].as_object_mut(), extra.as_object()) {
        for (k, v) in extra {
            spec.insert(k.clone(), v.clone());
        }
    }
    pod
}

/// What tests running real pods need (root, a runtime, conmon, `ip`, the CNI plugins), missing.
pub fn missing_pod_tools() -> Vec<String> {
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
    for tool in ["conmon", "ip"] {
        if !on_path(tool) {
            missing.push(tool.into());
        }
    }
    if !Path::new("/usr/lib/cni/bridge").exists() {
        missing.push("containernetworking-plugins".into());
    }
    missing
}

/// Kills what the agent started and removes its mounts and bridge, even when a test fails.
pub struct PodCleanup {
    pub node_dir: PathBuf,
    pub root: PathBuf,
    pub bridge: String,
}

impl Drop for PodCleanup {
    fn drop(&mut self) {
        remove_pods_leftovers(&self.node_dir, &self.root, &self.bridge);
    }
}

/// Kills the containers and conmon processes an agent started under `node_dir`, deletes them
/// from the runtimes, unmounts everything under `root` (deepest first) and removes the pod
/// bridge: what a test or benchmark must leave behind however it ended.
pub fn remove_pods_leftovers(node_dir: &Path, root: &Path, bridge: &str) {
    for pod in read_dir(&node_dir.join("pods")) {
        for container in read_dir(&pod.join("containers")) {
            if let Some(pid) = std::fs::read_to_string(container.join("conmon.pid"))
                .ok()
                .and_then(|p| p.trim().parse::<i32>().ok())
            {
                let _ = nix::sys::signal::kill(
                    nix::unistd::Pid::from_raw(pid),
                    nix::sys::signal::Signal::SIGKILL,
                );
            }
            let id = container.file_name().unwrap_or_default().to_owned();
            for rt in ["runc", "crun"] {
                let _ = Command::new(rt)
                    .arg(format!("--root=/run/litek8s/{rt}"))
                    .args(["delete", "--force"])
                    .arg(&id)
                    .stdout(Stdio::null())
                    .stderr(Stdio::null())
                    .status();
            }
        }
    }
    let root = root.to_string_lossy().into_owned();
    let mut mounts: Vec<String> = std::fs::read_to_string("/proc/self/mountinfo")
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.split(' ').nth(4).map(str::to_string))
        .filter(|m| m.starts_with(&root))
        .collect();
    mounts.sort_by_key(|m| std::cmp::Reverse(m.len()));
    for m in mounts {
        let _ = nix::mount::umount2(m.as_str(), nix::mount::MntFlags::MNT_DETACH);
    }
    let _ = Command::new("ip")
        .args(["link", "del", bridge])
        .stderr(Stdio::null())
        .status();
}

/// With this set to `1`, a container test skips on a machine that lacks its tools instead of
/// failing.
pub const SKIP_CONTAINERS_ENV: &str = "LITEK8S_SKIP_CONTAINERS";

/// Whether a container test may go on: yes when nothing is `missing`; no (a logged skip) when
/// something is and [`SKIP_CONTAINERS_ENV`] is `1`; otherwise the test fails naming it after
/// `who_needs` ("pod tests need", "this test needs").
pub fn tools_present_or_skip(missing: &[String], who_needs: &str) -> bool {
    if missing.is_empty() {
        return true;
    }
    if std::env::var(SKIP_CONTAINERS_ENV).as_deref() == Ok("1") {
        eprintln!("skipping: missing {}", missing.join(", "));
        return false;
    }
    panic!(
        "{who_needs} {} (tests/run-all.sh installs them, or set {SKIP_CONTAINERS_ENV}=1)",
        missing.join(", ")
    );
}

/// The glibc tunables `litek8s-agent.service` runs the agent with (its
/// `Environment=GLIBC_TUNABLES=` line): the tests and the benchmark run the agent's allocator
/// as the unit does.
pub fn unit_glibc_tunables() -> &'static str {
    include_str!("../../systemd/litek8s-agent.service")
        .lines()
        .find_map(|line| line.strip_prefix("Environment=GLIBC_TUNABLES="))
        .expect("litek8s-agent.service sets GLIBC_TUNABLES")
}
