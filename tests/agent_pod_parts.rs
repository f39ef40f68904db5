//! The node agent's pod parts against a real container: `Runtime::exec` (runc or crun under
//! conmon), a pod's volumes seen from inside a running container (a configMap update
//! arriving, a subPath that does not follow it, read-only API data, a tmpfs secret), and an
//! exec liveness probe failing in a real container.
//!
//! Needs root, runc (or crun), conmon and a static busybox (tests/run-all.sh installs
//! them); fails loudly without them unless `LITEK8S_SKIP_CONTAINERS=1`. Containers use the
//! host's network (no CNI here: tests/agent_runtime.rs covers sandboxes). Every test has its
//! own directories and runtime state root, and a guard that deletes its containers and
//! unmounts everything below its directory even when it fails.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use litek8s::agent::pods::env::{EnvVar, NodeAllocatable};
use litek8s::agent::pods::probes::{ProbeKind, ProbeResult, ProbeTarget, Prober};
use litek8s::agent::pods::volumes::{PodVolumes, StaticObjects, VolumeSettings};
use litek8s::agent::runtime::{
    detect, ContainerConfig, ContainerState, NamespaceMode, PodRef, PodSandbox, Runtime,
    RuntimeError, RuntimeSettings,
};
use serde_json::json;

const SKIP_ENV: &str = "LITEK8S_SKIP_CONTAINERS";

struct Lab {
    tmp: tempfile::TempDir,
    runtime: Arc<Runtime>,
}

fn missing_tools() -> Vec<String> {
    let mut missing = Vec::new();
    if !nix::unistd::geteuid().is_root() {
        missing.push("root".to_string());
    }
    if detect::find_on_path("runc").is_none() && detect::find_on_path("crun").is_none() {
        missing.push("runc or crun".into());
    }
    if detect::find_on_path("conmon").is_none() {
        missing.push("conmon".into());
    }
    let static_busybox = Command::new("ldd")
        .arg("/bin/busybox")
        .output()
        .map(|o| {
            !o.status.success() || String::from_utf8_lossy(&o.stdout).contains("not a dynamic")
        })
        .unwrap_or(false);
    if !Path::new("/bin/busybox").exists() || !static_busybox {
        missing.push("busybox-static".into());
    }
    missing
}

impl Lab {
    fn new() -> Option<Lab> {
        let missing = missing_tools();
        if !missing.is_empty() {
            if std::env::var(SKIP_ENV).as_deref() == Ok("1") {
                eprintln!("skipping: missing {}", missing.join(", "));
                return None;
            }
            panic!(
                "these tests need {} (install runc conmon busybox-static, or set {SKIP_ENV}=1)",
                missing.join(", ")
            );
        }
        let tmp = tempfile::Builder::new().prefix("lk8pp").tempdir().unwrap();
        busybox_rootfs(&tmp.path().join("rootfs"));
        let info = detect::detect(None).expect("an OCI runtime and conmon");
        let mut settings = RuntimeSettings::new(&tmp.path().join("node"), &tmp.path().join("logs"));
        settings.state_dir = tmp.path().join("state");
        let runtime = Arc::new(Runtime::new(info, settings).expect("runtime"));
        Some(Lab { tmp, runtime })
    }

    fn pods_dir(&self) -> PathBuf {
        self.tmp.path().join("node/pods")
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
            self.tmp.path().join("rootfs"),
            vec!["sh".into(), "-c".into(), script.into()],
        );
        c.env = vec!["PATH=/bin".into(), "GREETING=hello".into()];
        c
    }

    /// Host namespaces, a private /dev/shm: no CNI needed.
    fn sandbox() -> PodSandbox {
        PodSandbox {
            hostname: "parts".into(),
            network: NamespaceMode::Host,
            ipc: NamespaceMode::Host,
            uts: NamespaceMode::Host,
            host_pid: false,
            shm: None,
            hosts: None,
            hostname_file: None,
            resolv_conf: None,
        }
    }

    async fn running(&self, cfg: &ContainerConfig) -> String {
        let id = self.runtime.run(cfg, &Lab::sandbox()).await.expect("run");
        let deadline = Instant::now() + Duration::from_secs(10);
        while self.runtime.status(&id).unwrap().state != ContainerState::Running {
            assert!(Instant::now() < deadline, "container never ran");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        id
    }

    async fn sh(&self, id: &str, script: &str) -> (i32, String, String) {
        let out = self
            .runtime
            .exec(
                id,
                &["sh".into(), "-c".into(), script.into()],
                Duration::from_secs(10),
            )
            .await
            .expect("exec");
        (out.exit_code, out.stdout, out.stderr)
    }
}

impl Drop for Lab {
    fn drop(&mut self) {
        let info = self.runtime.info().clone();
        let root = self.tmp.path().join("state").join(info.kind.binary());
        for entry in std::fs::read_dir(&root).into_iter().flatten().flatten() {
            let _ = Command::new(&info.path)
                .args(info.global_args(&root))
                .args(["delete", "--force"])
                .arg(entry.file_name())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status();
        }
        // Volumes and subPath binds, deepest first.
        let table = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
        let mut points: Vec<PathBuf> = table
            .lines()
            .filter_map(|l| l.split(' ').nth(4))
            .map(PathBuf::from)
            .filter(|p| p.starts_with(self.tmp.path()))
            .collect();
        points.sort_by_key(|p| std::cmp::Reverse(p.components().count()));
        for p in points {
            let _ = nix::mount::umount2(&p, nix::mount::MntFlags::MNT_DETACH);
        }
    }
}

fn busybox_rootfs(root: &Path) {
    for d in ["bin", "etc", "proc", "sys", "dev", "tmp", "root"] {
        std::fs::create_dir_all(root.join(d)).unwrap();
    }
    std::fs::copy("/bin/busybox", root.join("bin/busybox")).unwrap();
    let out = Command::new("/bin/busybox").arg("--list").output().unwrap();
    for applet in String::from_utf8_lossy(&out.stdout).lines() {
        if applet != "busybox" {
            std::os::unix::fs::symlink("busybox", root.join("bin").join(applet)).unwrap();
        }
    }
    std::fs::write(root.join("etc/passwd"), "root:x:0:0:root:/root:/bin/sh\n").unwrap();
}

#[tokio::test]
async fn exec_runs_commands_in_a_running_container() {
    let Some(lab) = Lab::new() else { return };
    let pod = lab.pod("exec");
    let id = lab
        .running(&lab.container(&pod, "main", "echo made > /tmp/x; exec sleep 1000"))
        .await;
    // The command sees the container's files and environment.
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let (code, out, _) = lab.sh(&id, "cat /tmp/x && echo $GREETING").await;
        if code == 0 {
            assert_eq!(out, "made\nhello\n");
            break;
        }
        assert!(Instant::now() < deadline);
    }
    let (code, out, err) = lab.sh(&id, "echo out; echo err >&2; exit 3").await;
    assert_eq!((code, out.as_str(), err.as_str()), (3, "out\n", "err\n"));
    let (code, _, _) = lab.sh(&id, "kill -9 $$").await;
    assert_eq!(code, 137);

    // A command the image does not have: the runtime's refusal, not an exit code.
    let e = lab
        .runtime
        .exec(&id, &["nosuchcommand".into()], Duration::from_secs(5))
        .await
        .unwrap_err();
    assert!(
        matches!(&e, RuntimeError::Command { message, .. } if message.contains("nosuchcommand")),
        "{e}"
    );

    // At the timeout the command is killed, in the container too.
    let started = Instant::now();
    let e = lab
        .runtime
        .exec(
            &id,
            &["sleep".into(), "77".into()],
            Duration::from_millis(500),
        )
        .await
        .unwrap_err();
    assert!(matches!(e, RuntimeError::Timeout { .. }), "{e}");
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );
    let (_, ps, _) = lab.sh(&id, "ps").await;
    assert!(!ps.contains("sleep 77"), "{ps}");
    // No exec files are left in the container's directory.
    let dir = lab.runtime.layout().container_dir(&pod.uid, &id);
    let leftovers: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with("exec-"))
        .collect();
    assert!(leftovers.is_empty(), "{leftovers:?}");

    // Not in a container that stopped, nor in one that does not exist.
    lab.runtime.stop(&id, Duration::from_secs(1)).await.unwrap();
    assert!(lab
        .runtime
        .exec(&id, &["true".into()], Duration::from_secs(5))
        .await
        .is_err());
    lab.runtime.remove(&id).await.unwrap();
    assert!(matches!(
        lab.runtime
            .exec(&id, &["true".into()], Duration::from_secs(5))
            .await,
        Err(RuntimeError::NotFound(_))
    ));
}

#[tokio::test]
async fn a_running_container_sees_volume_updates_but_not_through_a_subpath() {
    let Some(lab) = Lab::new() else { return };
    let pod_ref = lab.pod("vols");
    let pod = json!({
        "metadata": {"name": "vols", "namespace": "default", "uid": pod_ref.uid, "labels": {"app": "vols"}},
        "spec": {
            "containers": [{"name": "main"}],
            "volumes": [
                {"name": "config", "configMap": {"name": "app"}},
                {"name": "creds", "secret": {"secretName": "creds"}},
                {"name": "scratch", "emptyDir": {}},
                {"name": "info", "downwardAPI": {"items": [{"path": "labels", "fieldRef": {"fieldPath": "metadata.labels"}}]}}
            ]
        }
    });
    let mut objects = StaticObjects::default();
    objects.add_config_map(json!({"metadata": {"namespace": "default", "name": "app"}, "data": {"app.conf": "version=1"}}));
    objects.add_secret(json!({"metadata": {"namespace": "default", "name": "creds"}, "data": {"token": "czNjcjN0"}}));
    let settings = VolumeSettings {
        pods_dir: lab.pods_dir(),
        allocatable: NodeAllocatable {
            cpu_millis: 1000,
            memory_bytes: 1 << 30,
            ephemeral_storage_bytes: 1 << 30,
        },
    };
    let mut volumes = PodVolumes::new(&settings, &pod).unwrap();
    let report = volumes.sync(&pod, &objects).await;
    assert!(report.ready(), "{:?}", report.failures);
    let container = json!({"name": "main", "volumeMounts": [
        {"name": "config", "mountPath": "/etc/app"},
        {"name": "config", "mountPath": "/etc/pinned.conf", "subPath": "app.conf"},
        {"name": "creds", "mountPath": "/var/run/creds"},
        {"name": "scratch", "mountPath": "/scratch"},
        {"name": "scratch", "mountPath": "/logs", "subPathExpr": "logs/$(POD)"},
        {"name": "info", "mountPath": "/etc/podinfo"}
    ]});
    let env = vec![EnvVar {
        name: "POD".into(),
        value: "vols".into(),
    }];
    let mut cfg = lab.container(&pod_ref, "main", "exec sleep 1000");
    cfg.mounts = volumes.container_mounts(&container, &env).unwrap();
    let id = lab.running(&cfg).await;

    let (code, out, err) = lab
        .sh(
            &id,
            "cat /etc/app/app.conf /etc/pinned.conf /var/run/creds/token /etc/podinfo/labels",
        )
        .await;
    assert_eq!(code, 0, "{err}");
    assert_eq!(out, "version=1version=1s3cr3tapp=\"vols\"");
    // API data is read-only; emptyDir is not; the secret is on a tmpfs.
    let (code, _, _) = lab.sh(&id, "echo x > /etc/app/new").await;
    assert_ne!(code, 0, "configMap volumes are read-only");
    let (code, _, err) = lab
        .sh(&id, "echo x > /scratch/new && echo y > /logs/l")
        .await;
    assert_eq!(code, 0, "{err}");
    assert!(volumes
        .volume("scratch")
        .unwrap()
        .path
        .join("logs/vols/l")
        .exists());
    let (_, mounts, _) = lab.sh(&id, "grep /var/run/creds /proc/mounts").await;
    assert!(mounts.contains("tmpfs"), "{mounts}");

    // The ConfigMap changes: the next sync swaps the files under the running container.
    objects.add_config_map(json!({"metadata": {"namespace": "default", "name": "app"}, "data": {"app.conf": "version=2"}}));
    let report = volumes.sync(&pod, &objects).await;
    assert_eq!(report.written, ["config"]);
    let (_, out, _) = lab
        .sh(&id, "cat /etc/app/app.conf; echo; cat /etc/pinned.conf")
        .await;
    assert_eq!(
        out, "version=2\nversion=1",
        "the subPath keeps the old file, as upstream"
    );
    let (_, listing, _) = lab.sh(&id, "ls -a /etc/app").await;
    assert!(
        listing.contains("..data") && listing.contains("app.conf"),
        "{listing}"
    );

    // A restarted container gets the subPath's current file.
    lab.runtime.stop(&id, Duration::from_secs(1)).await.unwrap();
    cfg.mounts = volumes.container_mounts(&container, &env).unwrap();
    cfg.restart_count = 1;
    let id2 = lab.running(&cfg).await;
    let (_, out, _) = lab.sh(&id2, "cat /etc/pinned.conf").await;
    assert_eq!(out, "version=2");

    lab.runtime
        .stop(&id2, Duration::from_secs(1))
        .await
        .unwrap();
    lab.runtime.remove(&id).await.unwrap();
    lab.runtime.remove(&id2).await.unwrap();
    volumes.teardown().unwrap();
    let table = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    assert!(
        !table.contains(&pod_ref.uid),
        "mounts of the pod are left: {table}"
    );
    assert!(!lab.pods_dir().join(&pod_ref.uid).join("volumes").exists());
}

#[tokio::test]
async fn an_exec_liveness_probe_fails_in_a_real_container() {
    let Some(lab) = Lab::new() else { return };
    let pod = lab.pod("probed");
    let id = lab
        .running(&lab.container(
            &pod,
            "main",
            "touch /tmp/healthy; sleep 2; rm /tmp/healthy; exec sleep 1000",
        ))
        .await;
    let (tx, mut rx) = tokio::sync::mpsc::channel(16);
    let prober = Prober::new(lab.runtime.clone(), tx);
    let spec = json!({
        "name": "main",
        "livenessProbe": {"exec": {"command": ["cat", "/tmp/healthy"]}, "periodSeconds": 1, "failureThreshold": 2},
        "readinessProbe": {"exec": {"command": ["sh", "-c", "test -d /tmp"]}, "periodSeconds": 1}
    });
    let probes = prober.start(
        ProbeTarget {
            pod_uid: pod.uid.clone(),
            pod_ip: None,
            container: "main".into(),
            container_id: id.clone(),
        },
        &spec,
        SystemTime::now(),
    );
    let started = Instant::now();
    let mut events = Vec::new();
    let failure = loop {
        let u = tokio::time::timeout(Duration::from_secs(15), rx.recv())
            .await
            .expect("a liveness failure within 15 s")
            .unwrap();
        if let Some(e) = &u.event {
            events.push(e.message.clone());
        }
        if u.kind == ProbeKind::Liveness && u.changed {
            break u;
        }
    };
    assert_eq!(failure.result, ProbeResult::Failure);
    assert_eq!(failure.container_id, id);
    assert!(started.elapsed() >= Duration::from_secs(2));
    assert!(probes.ready(), "readiness is its own probe");
    assert!(
        events
            .iter()
            .any(|m| m.starts_with("Liveness probe failed: cat: can't open '/tmp/healthy'")),
        "{events:?}"
    );
    drop(probes);
    lab.runtime.stop(&id, Duration::from_secs(1)).await.unwrap();
    lab.runtime.remove(&id).await.unwrap();
}
