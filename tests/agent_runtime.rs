//! The node agent's container runtime and pod sandboxes against the real tools: runc (or
//! crun) under conmon, the Debian CNI plugins (bridge, host-local, loopback, portmap), and
//! a root filesystem made of busybox-static.
//!
//! Needs root and those packages (tests/run-all.sh installs them); fails loudly without
//! them unless `LITEK8S_SKIP_CONTAINERS=1`. Every test has its own directories, runtime
//! state root, bridge and /24, and a guard that kills its containers, unmounts its
//! namespaces and deletes its bridge even when the test fails. Nothing else of the host's
//! network is touched (`net.ipv4.ip_forward`, which the bridge plugin turns on for a
//! gateway, is put back when the last test ends).

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{IpAddr, TcpStream};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

use litek8s::agent::runtime::logs::{read_lines, Stream};
use litek8s::agent::runtime::{
    detect, ContainerConfig, ContainerState, PodRef, ResourceSpec, Runtime, RuntimeSettings,
};
use litek8s::agent::sandbox::{Sandbox, SandboxSettings, SandboxSpec, Sandboxes};

const SKIP_ENV: &str = "LITEK8S_SKIP_CONTAINERS";

// ---------------------------------------------------------------------------------------
// The lab: directories, runtime and sandboxes of one test, and the guard that cleans up.

/// Everything a test's runtime and sandboxes are made from (also rebuilt from the
/// environment by the child process of the adoption test).
#[derive(Clone, Debug)]
struct LabDirs {
    root: PathBuf,
    bridge: String,
    cidr: String,
}

impl LabDirs {
    fn node_dir(&self) -> PathBuf {
        self.root.join("node")
    }
    fn state_dir(&self) -> PathBuf {
        self.root.join("state")
    }
    fn rootfs(&self) -> PathBuf {
        self.root.join("rootfs")
    }
    fn ipam_dir(&self) -> PathBuf {
        self.root.join("ipam")
    }

    fn runtime(&self) -> Runtime {
        let info = detect::detect(None).expect("an OCI runtime and conmon");
        let mut settings = RuntimeSettings::new(&self.node_dir(), &self.root.join("logs"));
        settings.state_dir = self.state_dir();
        Runtime::new(info, settings).expect("runtime")
    }

    fn sandboxes(&self) -> Sandboxes {
        let mut settings = SandboxSettings::new(&self.node_dir());
        settings.cni.conf_dir = self.root.join("net.d");
        settings.cni.bridge = self.bridge.clone();
        settings.cni.network_name = format!("net-{}", self.bridge);
        settings.cni.ipam_data_dir = self.ipam_dir();
        Sandboxes::new(settings, Some(self.cidr.clone()))
    }

    /// Addresses host-local holds (files named by IP in its data directory).
    fn allocated_ips(&self) -> Vec<String> {
        let mut out = Vec::new();
        let Ok(nets) = std::fs::read_dir(self.ipam_dir()) else {
            return out;
        };
        for net in nets.flatten() {
            for f in std::fs::read_dir(net.path())
                .into_iter()
                .flatten()
                .flatten()
            {
                let name = f.file_name().to_string_lossy().into_owned();
                if name.parse::<IpAddr>().is_ok() {
                    out.push(name);
                }
            }
        }
        out
    }
}

struct Lab {
    dirs: LabDirs,
    runtime: Runtime,
    sandboxes: Sandboxes,
    _tmp: tempfile::TempDir,
}

static LABS_ALIVE: AtomicUsize = AtomicUsize::new(0);
static IP_FORWARD: OnceLock<Option<String>> = OnceLock::new();
static LAB_LOCK: Mutex<()> = Mutex::new(());
static NEXT: AtomicUsize = AtomicUsize::new(0);

fn missing_tools() -> Vec<String> {
    let mut missing = Vec::new();
    if !nix::unistd::geteuid().is_root() {
        missing.push("root".to_string());
    }
    if detect::find_on_path("runc").is_none() && detect::find_on_path("crun").is_none() {
        missing.push("runc or crun".into());
    }
    for tool in ["conmon", "ip"] {
        if detect::find_on_path(tool).is_none() {
            missing.push(tool.into());
        }
    }
    if !Path::new("/usr/lib/cni/bridge").exists() {
        missing.push("containernetworking-plugins".into());
    }
    if !is_static_elf(Path::new("/bin/busybox")) {
        missing.push("busybox-static (a /bin/busybox that needs no shared libraries)".into());
    }
    missing
}

/// An ELF file without a program interpreter (PT_INTERP): it runs in an empty root
/// filesystem.
fn is_static_elf(path: &Path) -> bool {
    let Ok(elf) = std::fs::read(path) else {
        return false;
    };
    let u16_at = |o: usize| {
        elf.get(o..o + 2)
            .map(|b| u16::from_le_bytes([b[0], b[1]]) as usize)
    };
    let u64_at = |o: usize| {
        elf.get(o..o + 8)
            .map(|b| u64::from_le_bytes(b.try_into().unwrap()) as usize)
    };
    if !elf.starts_with(b"\x7fELF\x02\x01") {
        return false; // only little-endian 64-bit ELF is expected here
    }
    let (Some(phoff), Some(phentsize), Some(phnum)) = (u64_at(0x20), u16_at(0x36), u16_at(0x38))
    else {
        return false;
    };
    (0..phnum).all(|i| {
        let at = phoff + i * phentsize;
        elf.get(at..at + 4) != Some(&3u32.to_le_bytes()[..])
    })
}

impl Lab {
    /// A fresh lab, or `None` (skipped) when the tools are missing and `LITEK8S_SKIP_CONTAINERS=1`.
    fn new() -> Option<Lab> {
        let missing = missing_tools();
        if !missing.is_empty() {
            if std::env::var(SKIP_ENV).as_deref() == Ok("1") {
                eprintln!("skipping: missing {}", missing.join(", "));
                return None;
            }
            panic!(
                "container tests need {} (install runc conmon containernetworking-plugins busybox-static iproute2, or set {SKIP_ENV}=1)",
                missing.join(", ")
            );
        }
        {
            let _g = LAB_LOCK.lock().unwrap_or_else(|e| e.into_inner());
            IP_FORWARD
                .get_or_init(|| std::fs::read_to_string("/proc/sys/net/ipv4/ip_forward").ok());
            LABS_ALIVE.fetch_add(1, Ordering::SeqCst);
        }
        let tmp = tempfile::Builder::new()
            .prefix("lk8rt")
            .tempdir()
            .expect("tempdir");
        let n = NEXT.fetch_add(1, Ordering::SeqCst);
        let pid = std::process::id();
        let dirs = LabDirs {
            root: tmp.path().to_path_buf(),
            // At most 15 characters (IFNAMSIZ - 1).
            bridge: format!("lk8t{}x{}", pid % 100_000, n),
            cidr: format!("10.{}.{}.0/24", 200 + (n % 50), pid % 250),
        };
        busybox_rootfs(&dirs.rootfs());
        Some(Lab {
            runtime: dirs.runtime(),
            sandboxes: dirs.sandboxes(),
            dirs,
            _tmp: tmp,
        })
    }

    fn pod(&self, name: &str) -> PodRef {
        PodRef {
            uid: uuid::Uuid::new_v4().to_string(),
            namespace: "default".into(),
            name: name.into(),
        }
    }

    fn container(&self, pod: &PodRef, name: &str, script: &str) -> ContainerConfig {
        let mut c = ContainerConfig::new(
            pod.clone(),
            name,
            self.dirs.rootfs(),
            vec!["sh".into(), "-c".into(), script.into()],
        );
        c.env = vec!["PATH=/bin".into()];
        c
    }

    async fn sandbox(&self, pod: &PodRef) -> Sandbox {
        self.sandboxes
            .create(&SandboxSpec::new(pod.clone()))
            .await
            .expect("sandbox")
    }

    /// Runs a container to its end and returns its CRI log lines' text (stdout and stderr).
    async fn run_to_end(&self, cfg: &ContainerConfig, sandbox: &Sandbox) -> (i32, Vec<String>) {
        let id = self
            .runtime
            .run(cfg, &sandbox.pod_sandbox())
            .await
            .expect("run");
        let s = self
            .runtime
            .wait_exit(&id, Duration::from_secs(30))
            .await
            .expect("exit");
        let lines = read_lines(&s.log_path, 1 << 20)
            .expect("log")
            .into_iter()
            .map(|l| l.text)
            .collect();
        (s.exit_code.expect("exit code"), lines)
    }
}

impl Drop for Lab {
    fn drop(&mut self) {
        // Containers: the runtime's delete --force kills them; their conmon then exits.
        let info = self.runtime.info().clone();
        let root = self.dirs.state_dir().join(info.kind.to_string());
        for entry in std::fs::read_dir(&root).into_iter().flatten().flatten() {
            let _ = Command::new(&info.path)
                .args(info.global_args(&root))
                .args(["delete", "--force"])
                .arg(entry.file_name())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status();
        }
        // Namespaces and /dev/shm of every pod.
        for pod in std::fs::read_dir(self.dirs.node_dir().join("pods"))
            .into_iter()
            .flatten()
            .flatten()
        {
            for name in ["netns", "utsns", "ipcns", "shm"] {
                let _ =
                    nix::mount::umount2(&pod.path().join(name), nix::mount::MntFlags::MNT_DETACH);
            }
        }
        let _ = Command::new("ip")
            .args(["link", "del", &self.dirs.bridge])
            .stderr(Stdio::null())
            .status();
        let _g = LAB_LOCK.lock().unwrap_or_else(|e| e.into_inner());
        if LABS_ALIVE.fetch_sub(1, Ordering::SeqCst) == 1 {
            if let Some(Some(v)) = IP_FORWARD.get() {
                let _ = std::fs::write("/proc/sys/net/ipv4/ip_forward", v);
            }
        }
    }
}

/// A root filesystem of busybox-static: the binary, a link per applet, a passwd file and a
/// page for httpd.
fn busybox_rootfs(root: &Path) {
    for d in ["bin", "etc", "proc", "sys", "dev", "tmp", "root", "www"] {
        std::fs::create_dir_all(root.join(d)).unwrap();
    }
    std::fs::copy("/bin/busybox", root.join("bin/busybox")).unwrap();
    let out = Command::new("/bin/busybox").arg("--list").output().unwrap();
    for applet in String::from_utf8_lossy(&out.stdout).lines() {
        if applet != "busybox" {
            std::os::unix::fs::symlink("busybox", root.join("bin").join(applet)).unwrap();
        }
    }
    std::fs::write(
        root.join("etc/passwd"),
        "root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/:/bin/sh\n",
    )
    .unwrap();
    std::fs::write(root.join("etc/group"), "root:x:0:\nnogroup:x:65534:\n").unwrap();
    std::fs::write(root.join("www/index.html"), "hello from httpd\n").unwrap();
}

fn ns_inode(path: &Path) -> u64 {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata(path).unwrap().ino()
}

/// An HTTP GET over a plain TCP connection; the response, or why not.
fn http_get(addr: &str) -> Result<String, String> {
    let mut s = TcpStream::connect_timeout(
        &addr.parse().map_err(|e| format!("{e}"))?,
        Duration::from_secs(2),
    )
    .map_err(|e| e.to_string())?;
    s.set_read_timeout(Some(Duration::from_secs(3))).unwrap();
    s.write_all(b"GET / HTTP/1.0\r\n\r\n")
        .map_err(|e| e.to_string())?;
    let mut out = String::new();
    s.read_to_string(&mut out).map_err(|e| e.to_string())?;
    Ok(out)
}

// ---------------------------------------------------------------------------------------

#[tokio::test]
async fn exit_code_logs_and_termination_message() {
    let Some(lab) = Lab::new() else { return };
    let pod = lab.pod("exits");
    let sandbox = lab.sandbox(&pod).await;
    let cfg = lab.container(
        &pod,
        "main",
        "echo to-stdout; echo to-stderr >&2; printf partial; echo 'gone wrong' > /dev/termination-log; exit 3",
    );
    let id = lab.runtime.run(&cfg, &sandbox.pod_sandbox()).await.unwrap();
    let s = lab
        .runtime
        .wait_exit(&id, Duration::from_secs(30))
        .await
        .unwrap();
    assert_eq!(s.state, ContainerState::Exited);
    assert_eq!(s.exit_code, Some(3));
    assert_eq!(s.reason.as_deref(), Some("Error"));
    let (started, finished) = (s.started_at.unwrap(), s.finished_at.unwrap());
    assert!(
        started <= finished,
        "started {started:?} after finished {finished:?}"
    );
    assert!(s
        .log_path
        .ends_with(format!("default_exits_{}/main/0.log", pod.uid)));
    let lines = read_lines(&s.log_path, 1 << 20).unwrap();
    // Each stream in order (their interleaving depends on when conmon reads each pipe).
    let of = |stream: Stream| -> Vec<(bool, String)> {
        lines
            .iter()
            .filter(|l| l.stream == stream)
            .map(|l| (l.partial, l.text.clone()))
            .collect()
    };
    assert_eq!(
        of(Stream::Stdout),
        [(false, "to-stdout".into()), (true, "partial".into())]
    );
    assert_eq!(of(Stream::Stderr), [(false, "to-stderr".into())]);
    assert!(
        lines
            .iter()
            .all(|l| l.time.len() >= 30 && l.time.contains('T')),
        "{lines:?}"
    );
    assert_eq!(
        lab.runtime.termination_message(&id).unwrap().as_deref(),
        Some("gone wrong\n")
    );
    // The record says the same after the runtime forgets and reads it back.
    let again = lab.dirs.runtime();
    assert_eq!(again.adopt().await.unwrap().adopted, 1);
    let back = again.status(&id).unwrap();
    assert_eq!(
        (back.state, back.exit_code),
        (ContainerState::Exited, Some(3))
    );

    lab.runtime.remove(&id).await.unwrap();
    assert!(lab.runtime.list().is_empty());
    assert!(s.log_path.exists(), "the log outlives the container");
    lab.sandboxes.teardown(&pod).await.unwrap();
}

#[tokio::test]
async fn sigterm_stops_a_container_that_handles_it() {
    let Some(lab) = Lab::new() else { return };
    let pod = lab.pod("term");
    let sandbox = lab.sandbox(&pod).await;
    // A process with PID 1 in its namespace gets SIGTERM only if it handles it (the kernel
    // drops signals PID 1 leaves at their default), so the shell traps it.
    let cfg = lab.container(&pod, "sleeper", "trap 'exit 143' TERM; sleep 1000 & wait");
    let id = lab.runtime.run(&cfg, &sandbox.pod_sandbox()).await.unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(
        lab.runtime.status(&id).unwrap().state,
        ContainerState::Running
    );
    let t = Instant::now();
    let s = lab
        .runtime
        .stop(&id, Duration::from_secs(20))
        .await
        .unwrap();
    assert_eq!(s.exit_code, Some(143), "{s:?}");
    assert!(
        t.elapsed() < Duration::from_secs(5),
        "took {:?}",
        t.elapsed()
    );
    lab.runtime.remove(&id).await.unwrap();
    lab.sandboxes.teardown(&pod).await.unwrap();
}

#[tokio::test]
async fn sigterm_ignored_means_sigkill_after_the_grace_period() {
    let Some(lab) = Lab::new() else { return };
    let pod = lab.pod("stubborn");
    let sandbox = lab.sandbox(&pod).await;
    let cfg = lab.container(&pod, "ignores", "trap '' TERM; sleep 1000");
    let id = lab.runtime.run(&cfg, &sandbox.pod_sandbox()).await.unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    let t = Instant::now();
    let s = lab.runtime.stop(&id, Duration::from_secs(2)).await.unwrap();
    let took = t.elapsed();
    assert_eq!(s.exit_code, Some(137), "{s:?}");
    assert_eq!(s.reason.as_deref(), Some("Error"));
    assert!(
        took >= Duration::from_secs(2) && took < Duration::from_secs(6),
        "took {took:?}"
    );
    // Stopping again is a no-op that reports the same.
    let again = lab.runtime.stop(&id, Duration::from_secs(2)).await.unwrap();
    assert_eq!(again.exit_code, Some(137));
    lab.runtime.remove(&id).await.unwrap();
    lab.sandboxes.teardown(&pod).await.unwrap();
}

#[tokio::test]
async fn a_missing_command_is_a_start_error_with_the_runtimes_message() {
    let Some(lab) = Lab::new() else { return };
    let pod = lab.pod("nocmd");
    let sandbox = lab.sandbox(&pod).await;
    let mut cfg = lab.container(&pod, "bad", "");
    cfg.args = vec!["no-such-command".into()];
    let err = lab
        .runtime
        .run(&cfg, &sandbox.pod_sandbox())
        .await
        .unwrap_err();
    assert_eq!(err.reason(), "RunContainerError");
    let text = err.to_string();
    assert!(
        text.contains("no-such-command") && text.contains("not found"),
        "{text}"
    );
    assert!(
        !text.contains("time="),
        "the runtime's log framing is removed: {text}"
    );

    let list = lab.runtime.list();
    assert_eq!(list.len(), 1);
    let s = &list[0];
    assert_eq!(s.state, ContainerState::Exited);
    assert_eq!(s.exit_code, Some(128));
    assert_eq!(s.reason.as_deref(), Some("StartError"));
    assert!(s.message.as_deref().unwrap().contains("no-such-command"));
    // Nothing of it is left in the runtime.
    let info = lab.runtime.info();
    let root = lab.dirs.state_dir().join(info.kind.to_string());
    let out = Command::new(&info.path)
        .args(info.global_args(&root))
        .args(["list", "-q"])
        .output()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "");
    lab.runtime.remove(&s.id).await.unwrap();
    lab.sandboxes.teardown(&pod).await.unwrap();
}

#[tokio::test]
async fn containers_of_a_pod_share_its_network_uts_and_ipc() {
    let Some(lab) = Lab::new() else { return };
    let pod = lab.pod("shared");
    let sandbox = lab.sandbox(&pod).await;
    let ps = sandbox.pod_sandbox();
    let server = lab.container(&pod, "server", "exec httpd -f -p 127.0.0.1:8080 -h /www");
    let server_id = lab.runtime.run(&server, &ps).await.unwrap();
    // busybox wget's own timeout (-T) crashes; `timeout` bounds it instead.
    let client = lab.container(
        &pod,
        "client",
        "for i in $(seq 1 50); do timeout 3 wget -q -O - http://127.0.0.1:8080/ && break; sleep 0.2; done
         hostname; cat /etc/hosts; for ns in net uts ipc; do readlink /proc/self/ns/$ns; done",
    );
    let (code, lines) = lab.run_to_end(&client, &sandbox).await;
    assert_eq!(code, 0, "{lines:?}");
    assert_eq!(lines[0], "hello from httpd", "{lines:?}");
    assert_eq!(lines[1], "shared", "the pod's hostname: {lines:?}");
    let ip = sandbox.ip().expect("pod IP");
    assert!(
        lines.contains(&format!("{ip}\tshared")),
        "/etc/hosts names the pod: {lines:?}"
    );
    assert_eq!(lines[2], "# Kubernetes-managed hosts file.");
    for (i, name) in ["netns", "utsns", "ipcns"].iter().enumerate() {
        let link = &lines[lines.len() - 3 + i];
        let ino = ns_inode(&sandbox.dir.join(name));
        assert!(
            link.ends_with(&format!(":[{ino}]")),
            "{name}: {link} vs inode {ino}"
        );
    }
    let s = lab
        .runtime
        .stop(&server_id, Duration::from_secs(1))
        .await
        .unwrap();
    assert_eq!(s.exit_code, Some(137), "httpd as PID 1 ignores SIGTERM");
    for s in lab.runtime.list() {
        lab.runtime.remove(&s.id).await.unwrap();
    }
    lab.sandboxes.teardown(&pod).await.unwrap();
}

#[tokio::test]
async fn the_pod_ip_is_reachable_from_the_host() {
    let Some(lab) = Lab::new() else { return };
    let pod = lab.pod("web");
    let sandbox = lab.sandbox(&pod).await;
    let ip = sandbox.ip().expect("pod IP");
    let net = lab.dirs.cidr.trim_end_matches(".0/24");
    assert!(ip.to_string().starts_with(net), "{ip} in {}", lab.dirs.cidr);
    let server = lab.container(&pod, "server", "exec httpd -f -p 8080 -h /www");
    let id = lab
        .runtime
        .run(&server, &sandbox.pod_sandbox())
        .await
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(15);
    let response = loop {
        match http_get(&format!("{ip}:8080")) {
            Ok(r) => break r,
            Err(e) if Instant::now() > deadline => panic!("{ip}:8080 unreachable: {e}"),
            Err(_) => std::thread::sleep(Duration::from_millis(100)),
        }
    };
    assert!(response.contains("hello from httpd"), "{response}");
    lab.runtime.stop(&id, Duration::from_secs(1)).await.unwrap();
    lab.runtime.remove(&id).await.unwrap();
    lab.sandboxes.teardown(&pod).await.unwrap();
}

#[tokio::test]
async fn resource_limits_reach_the_cgroup_when_cgroups_are_writable() {
    let Some(lab) = Lab::new() else { return };
    let pod = lab.pod("limited");
    let sandbox = lab.sandbox(&pod).await;
    let mut cfg = lab.container(&pod, "main", "trap 'exit 0' TERM; sleep 1000 & wait");
    cfg.resources = ResourceSpec {
        cpu_request_millis: Some(250),
        cpu_limit_millis: Some(500),
        memory_limit_bytes: Some(64 << 20),
        pids_limit: Some(64),
    };
    let id = lab.runtime.run(&cfg, &sandbox.pod_sandbox()).await.unwrap();
    let config: serde_json::Value = serde_json::from_slice(
        &std::fs::read(
            lab.runtime
                .layout()
                .container_dir(&pod.uid, &id)
                .join("config.json"),
        )
        .unwrap(),
    )
    .unwrap();
    let resources = &config["linux"]["resources"];
    if lab.runtime.info().limits {
        assert_eq!(resources["memory"]["limit"], 64 << 20);
        assert_eq!(resources["cpu"]["shares"], 256);
        assert_eq!(resources["cpu"]["quota"], 50_000);
        assert_eq!(resources["pids"]["limit"], 64);
        // And the kernel has them.
        let (memory, pids) = match lab.runtime.info().cgroup_mode {
            Some(detect::CgroupMode::V2) => {
                let d = PathBuf::from("/sys/fs/cgroup/litek8s").join(&id);
                (d.join("memory.max"), d.join("pids.max"))
            }
            _ => (
                PathBuf::from("/sys/fs/cgroup/memory/litek8s")
                    .join(&id)
                    .join("memory.limit_in_bytes"),
                PathBuf::from("/sys/fs/cgroup/pids/litek8s")
                    .join(&id)
                    .join("pids.max"),
            ),
        };
        assert_eq!(
            std::fs::read_to_string(&memory).unwrap().trim(),
            (64u64 << 20).to_string()
        );
        assert_eq!(std::fs::read_to_string(&pids).unwrap().trim(), "64");
    } else {
        assert!(
            resources.is_null(),
            "no limits where cgroups are not writable: {resources}"
        );
    }
    let s = lab
        .runtime
        .stop(&id, Duration::from_secs(10))
        .await
        .unwrap();
    assert_eq!(s.exit_code, Some(0));
    lab.runtime.remove(&id).await.unwrap();
    if lab.runtime.info().limits {
        let gone = !PathBuf::from("/sys/fs/cgroup/memory/litek8s")
            .join(&id)
            .exists()
            && !PathBuf::from("/sys/fs/cgroup/litek8s").join(&id).exists();
        assert!(gone, "the container's cgroup is removed with it");
    }
    lab.sandboxes.teardown(&pod).await.unwrap();
}

#[tokio::test]
async fn teardown_releases_the_address_and_namespaces_and_can_repeat() {
    let Some(lab) = Lab::new() else { return };
    let pod = lab.pod("released");
    let sandbox = lab.sandbox(&pod).await;
    let ip = sandbox.ip().expect("pod IP").to_string();
    assert_eq!(lab.dirs.allocated_ips(), [ip]);
    let netns = sandbox.netns().unwrap();
    // Creating again returns the same sandbox.
    let same = lab
        .sandboxes
        .create(&SandboxSpec::new(pod.clone()))
        .await
        .unwrap();
    assert_eq!(same.ips, sandbox.ips);
    assert_eq!(lab.dirs.allocated_ips().len(), 1);

    let (code, _) = lab
        .run_to_end(&lab.container(&pod, "once", "true"), &sandbox)
        .await;
    assert_eq!(code, 0);
    for s in lab.runtime.list() {
        lab.runtime.remove(&s.id).await.unwrap();
    }
    lab.sandboxes.teardown(&pod).await.unwrap();
    assert!(
        lab.dirs.allocated_ips().is_empty(),
        "leaked {:?}",
        lab.dirs.allocated_ips()
    );
    assert!(!netns.exists());
    for name in ["utsns", "ipcns", "shm", "etc-hosts", "sandbox.json"] {
        assert!(!sandbox.dir.join(name).exists(), "{name} left");
    }
    let ports = Command::new("ip")
        .args(["-o", "link", "show", "master", &lab.dirs.bridge])
        .output()
        .unwrap();
    assert_eq!(
        String::from_utf8_lossy(&ports.stdout).trim(),
        "",
        "veth left on the bridge"
    );
    assert!(lab.sandboxes.load(&pod.uid).unwrap().is_none());
    // Again: nothing to do, no error.
    lab.sandboxes.teardown(&pod).await.unwrap();
    // A second pod gets an address again.
    let other = lab.pod("next");
    let next = lab.sandbox(&other).await;
    assert!(next.ip().is_some());
    lab.sandboxes.teardown(&other).await.unwrap();
    assert!(lab.dirs.allocated_ips().is_empty());
}

#[tokio::test]
async fn a_failed_add_is_undone_with_del() {
    let Some(lab) = Lab::new() else { return };
    // A user's chain (it takes precedence over the generated one) whose second plugin
    // fails after the bridge and host-local gave the pod an address.
    let conf_dir = lab.dirs.root.join("net.d");
    std::fs::create_dir_all(&conf_dir).unwrap();
    let conf = serde_json::json!({
        "cniVersion": "1.0.0",
        "name": format!("broken-{}", lab.dirs.bridge),
        "plugins": [
            {"type": "bridge", "bridge": lab.dirs.bridge, "isGateway": true, "ipMasq": false,
             "ipam": {"type": "host-local", "ranges": [[{"subnet": lab.dirs.cidr}]],
                      "dataDir": lab.dirs.ipam_dir()}},
            {"type": "tuning", "sysctl": {"net.ipv4.conf.eth0.no_such_setting": "1"}}
        ]
    });
    std::fs::write(conf_dir.join("10-broken.conflist"), conf.to_string()).unwrap();
    let pod = lab.pod("broken");
    let err = lab
        .sandboxes
        .create(&SandboxSpec::new(pod.clone()))
        .await
        .unwrap_err();
    let text = err.to_string();
    assert!(text.contains("tuning"), "{text}");
    assert!(
        lab.dirs.allocated_ips().is_empty(),
        "leaked {:?}",
        lab.dirs.allocated_ips()
    );
    let dir = lab.sandboxes.pod_dir(&pod.uid);
    assert!(!dir.join("netns").exists() && !dir.join("sandbox.json").exists());
}

#[tokio::test]
async fn host_network_pods_use_the_hosts_namespaces() {
    let Some(lab) = Lab::new() else { return };
    let pod = lab.pod("hostnet");
    let mut spec = SandboxSpec::new(pod.clone());
    spec.host_network = true;
    let sandbox = lab.sandboxes.create(&spec).await.unwrap();
    assert!(sandbox.ip().is_none() && sandbox.netns().is_none());
    let hosts = std::fs::read_to_string(sandbox.dir.join("etc-hosts")).unwrap();
    assert!(
        hosts.starts_with("# Kubernetes-managed hosts file (host network).\n"),
        "{hosts}"
    );
    let cfg = lab.container(&pod, "main", "readlink /proc/self/ns/net");
    let (code, lines) = lab.run_to_end(&cfg, &sandbox).await;
    assert_eq!(code, 0);
    let ours = std::fs::read_link("/proc/self/ns/net").unwrap();
    assert_eq!(lines, [ours.display().to_string()]);
    assert!(
        lab.dirs.allocated_ips().is_empty(),
        "no address for a hostNetwork pod"
    );
    for s in lab.runtime.list() {
        lab.runtime.remove(&s.id).await.unwrap();
    }
    lab.sandboxes.teardown(&pod).await.unwrap();
}

#[tokio::test]
async fn the_relist_reports_a_start_and_a_death() {
    use litek8s::agent::runtime::pleg::{self, EventKind};
    let Some(lab) = Lab::new() else { return };
    let runtime = std::sync::Arc::new(lab.dirs.runtime());
    let (tx, mut rx) = tokio::sync::mpsc::channel(16);
    let stop = tokio_util::sync::CancellationToken::new();
    let relist = tokio::spawn(pleg::run(
        runtime.clone(),
        Duration::from_millis(100),
        tx,
        stop.clone(),
    ));
    let pod = lab.pod("pleg");
    let sandbox = lab.sandbox(&pod).await;
    let cfg = lab.container(&pod, "brief", "sleep 1");
    let id = runtime.run(&cfg, &sandbox.pod_sandbox()).await.unwrap();
    let mut seen = Vec::new();
    while seen.last() != Some(&EventKind::Died) {
        let e = tokio::time::timeout(Duration::from_secs(10), rx.recv())
            .await
            .expect("an event within 10 s")
            .unwrap();
        assert_eq!(
            (e.pod_uid.as_str(), e.container_id.as_str()),
            (pod.uid.as_str(), id.as_str())
        );
        seen.push(e.kind);
    }
    // A relist may also catch it created (`Changed`) before it starts.
    seen.retain(|k| *k != EventKind::Changed);
    assert_eq!(seen, [EventKind::Started, EventKind::Died]);
    runtime.remove(&id).await.unwrap();
    let e = tokio::time::timeout(Duration::from_secs(10), rx.recv())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(e.kind, EventKind::Removed);
    stop.cancel();
    relist.await.unwrap();
    lab.sandboxes.teardown(&pod).await.unwrap();
}

// ---------------------------------------------------------------------------------------
// Adoption after the agent is SIGKILLed: a child process (this test binary, running the
// ignored test below) plays the agent.

const ADOPT_ENV: &str = "LITEK8S_TEST_ADOPT";

#[tokio::test]
async fn containers_survive_an_agent_sigkill_and_are_adopted() {
    let Some(lab) = Lab::new() else { return };
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args([
            "adoption_child",
            "--exact",
            "--ignored",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(ADOPT_ENV, &lab.dirs.root)
        .env("LITEK8S_TEST_BRIDGE", &lab.dirs.bridge)
        .env("LITEK8S_TEST_CIDR", &lab.dirs.cidr)
        .stdout(Stdio::piped())
        .process_group(0)
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            // libtest prints the test's name on the same line.
            if let Some(at) = line.find("READY ") {
                let _ = tx.send(line[at + "READY ".len()..].to_string());
            }
        }
    });
    let ready = rx.recv_timeout(Duration::from_secs(60));
    // The whole process group, as a service manager kills a unit's main process group.
    let _ = nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(-(child.id() as i32)),
        nix::sys::signal::Signal::SIGKILL,
    );
    let _ = child.wait();
    let ready = ready.expect("the child agent started its containers");
    let parts: Vec<&str> = ready.split_whitespace().collect();
    let (uid, running_id, exited_id) = (parts[0], parts[1], parts[2]);

    let runtime = lab.dirs.runtime();
    let report = runtime.adopt().await.unwrap();
    assert_eq!(report.adopted, 2, "{report:?}");
    assert!(report.skipped.is_empty(), "{report:?}");
    let running = runtime.status(running_id).unwrap();
    assert_eq!(running.state, ContainerState::Running, "{running:?}");
    assert!(running.started_at.is_some());
    let exited = runtime.status(exited_id).unwrap();
    assert_eq!(
        (exited.state, exited.exit_code),
        (ContainerState::Exited, Some(7))
    );

    // Its conmon leads its own session and process group: the agent's death signals did
    // not reach it.
    let dir = runtime.layout().container_dir(uid, running_id);
    let conmon: i32 = std::fs::read_to_string(dir.join("conmon.pid"))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    let pgid = nix::unistd::getpgid(Some(nix::unistd::Pid::from_raw(conmon))).unwrap();
    let sid = nix::unistd::getsid(Some(nix::unistd::Pid::from_raw(conmon))).unwrap();
    assert_eq!((pgid.as_raw(), sid.as_raw()), (conmon, conmon));

    // The adopted container is driven like any other; its exit code still comes from conmon.
    let s = runtime
        .stop(running_id, Duration::from_secs(10))
        .await
        .unwrap();
    assert_eq!(s.exit_code, Some(143), "{s:?}");
    let sandbox = lab
        .sandboxes
        .load(uid)
        .unwrap()
        .expect("the sandbox record survived too");
    assert!(sandbox.ip().is_some());
    for s in runtime.list() {
        runtime.remove(&s.id).await.unwrap();
    }
    let pod = sandbox.pod.clone();
    lab.sandboxes.teardown(&pod).await.unwrap();
    assert!(lab.dirs.allocated_ips().is_empty());
}

/// The "agent" of the test above: starts a pod with a long-running and a finished
/// container, says READY, waits to be killed. Does nothing unless run by that test.
#[tokio::test]
#[ignore]
async fn adoption_child() {
    let Ok(root) = std::env::var(ADOPT_ENV) else {
        return;
    };
    let dirs = LabDirs {
        root: root.into(),
        bridge: std::env::var("LITEK8S_TEST_BRIDGE").unwrap(),
        cidr: std::env::var("LITEK8S_TEST_CIDR").unwrap(),
    };
    let runtime = dirs.runtime();
    let sandboxes = dirs.sandboxes();
    let pod = PodRef {
        uid: uuid::Uuid::new_v4().to_string(),
        namespace: "default".into(),
        name: "survivor".into(),
    };
    let sandbox = sandboxes
        .create(&SandboxSpec::new(pod.clone()))
        .await
        .unwrap();
    let mk = |name: &str, script: &str| {
        let mut c = ContainerConfig::new(
            pod.clone(),
            name,
            dirs.rootfs(),
            vec!["sh".into(), "-c".into(), script.into()],
        );
        c.env = vec!["PATH=/bin".into()];
        c
    };
    let running = runtime
        .run(
            &mk("long", "trap 'exit 143' TERM; sleep 1000 & wait"),
            &sandbox.pod_sandbox(),
        )
        .await
        .unwrap();
    let exited = runtime
        .run(&mk("short", "exit 7"), &sandbox.pod_sandbox())
        .await
        .unwrap();
    runtime
        .wait_exit(&exited, Duration::from_secs(30))
        .await
        .unwrap();
    println!("READY {} {running} {exited}", pod.uid);
    std::io::stdout().flush().unwrap();
    tokio::time::sleep(Duration::from_secs(600)).await;
}

#[test]
fn the_static_binary_check_tells_static_from_dynamic() {
    assert!(
        !is_static_elf(Path::new("/bin/ls")),
        "ls needs the dynamic loader"
    );
    assert!(!is_static_elf(Path::new("/etc/hostname")));
    if Path::new("/bin/busybox").exists() && std::env::var(SKIP_ENV).as_deref() != Ok("1") {
        assert!(is_static_elf(Path::new("/bin/busybox")));
    }
}
