//! What a pod worker tells the runtime about one container ([`ContainerConfig`]), what the
//! pod's sandbox gives every container ([`PodSandbox`]), and the OCI `config.json` built
//! from both ([`build`]), with containerd's defaults where Kubernetes leaves things open.

use std::collections::BTreeMap;
use std::path::{Component, Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::oci::{self, Spec};
use super::RuntimeError;

/// The pod a container belongs to.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct PodRef {
    pub uid: String,
    pub namespace: String,
    pub name: String,
}

/// One container, as the pod worker resolved it from the pod spec and the image: every
/// field is final (image defaults merged, names looked up), the runtime only translates.
#[derive(Debug, Clone, PartialEq)]
pub struct ContainerConfig {
    pub pod: PodRef,
    /// The container's name in the pod spec.
    pub name: String,
    /// Which run of this container this is (0 for the first); names its log file.
    pub restart_count: u32,
    /// The prepared root filesystem (from the image store), an absolute path.
    pub rootfs: PathBuf,
    /// The command and its arguments (entrypoint + cmd, or command + args); never empty.
    pub args: Vec<String>,
    /// `KEY=value` entries; later entries replace earlier ones with the same key. `PATH` is
    /// added when missing, `HOSTNAME` is set to the pod's hostname unless given.
    pub env: Vec<String>,
    /// `/` when `None`.
    pub working_dir: Option<String>,
    pub user: UserSpec,
    /// All capabilities, the host's devices, `/sys` read-write, nothing masked.
    pub privileged: bool,
    pub capabilities: CapabilityChanges,
    pub read_only_rootfs: bool,
    /// `allowPrivilegeEscalation: false`.
    pub no_new_privileges: bool,
    /// Volumes, already prepared on the host.
    pub mounts: Vec<VolumeMount>,
    /// Where the container may write its termination message (`/dev/termination-log` by
    /// default); the runtime bind-mounts a file of the container's directory there.
    pub termination_message_path: Option<String>,
    /// Applied only where cgroups are writable (see `detect`).
    pub resources: ResourceSpec,
    pub oom_score_adj: Option<i32>,
    /// Empty: the container inherits conmon's limits (the agent's).
    pub rlimits: Vec<oci::Rlimit>,
    pub sysctls: BTreeMap<String, String>,
    /// Stored with the container and reported back by `list` (image, spec hash, …).
    pub annotations: BTreeMap<String, String>,
    /// stdin open for attach (conmon keeps a pipe to it); closed after the first attached
    /// client when `stdin_once`.
    pub stdin: bool,
    pub stdin_once: bool,
    /// A terminal for the container's process (conmon holds its master).
    pub tty: bool,
}

impl ContainerConfig {
    /// A container running `args` as root with every other field at its default.
    pub fn new(pod: PodRef, name: &str, rootfs: PathBuf, args: Vec<String>) -> Self {
        ContainerConfig {
            pod,
            name: name.to_string(),
            restart_count: 0,
            rootfs,
            args,
            env: Vec::new(),
            working_dir: None,
            user: UserSpec::default(),
            privileged: false,
            capabilities: CapabilityChanges::default(),
            read_only_rootfs: false,
            no_new_privileges: false,
            mounts: Vec::new(),
            termination_message_path: Some("/dev/termination-log".to_string()),
            resources: ResourceSpec::default(),
            oom_score_adj: None,
            rlimits: Vec::new(),
            sysctls: BTreeMap::new(),
            annotations: BTreeMap::new(),
            stdin: false,
            stdin_once: false,
            tty: false,
        }
    }
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct UserSpec {
    pub uid: u32,
    pub gid: u32,
    /// Supplementary groups (`supplementalGroups`, `fsGroup`, the image's groups).
    pub additional_gids: Vec<u32>,
}

/// `securityContext.capabilities`: names as Kubernetes writes them (`NET_ADMIN`) or with the
/// `CAP_` prefix; `ALL` means every capability.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CapabilityChanges {
    pub add: Vec<String>,
    pub drop: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VolumeMount {
    pub host_path: PathBuf,
    pub container_path: String,
    pub read_only: bool,
    pub propagation: Propagation,
}

/// `mountPropagation`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Propagation {
    #[default]
    None,
    HostToContainer,
    Bidirectional,
}

/// Requests and limits, already in the units the kernel takes.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ResourceSpec {
    /// `requests.cpu` in millicores → cpu shares (kubelet's conversion).
    pub cpu_request_millis: Option<u64>,
    /// `limits.cpu` in millicores → CFS quota over a 100 ms period.
    pub cpu_limit_millis: Option<u64>,
    pub memory_limit_bytes: Option<u64>,
    pub pids_limit: Option<i64>,
}

/// A namespace of the pod: the host's, or one the sandbox bind-mounted to a file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum NamespaceMode {
    Host,
    Join(PathBuf),
}

/// What every container of a pod shares, as the sandbox made it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PodSandbox {
    pub hostname: String,
    pub network: NamespaceMode,
    pub ipc: NamespaceMode,
    /// The pod's hostname is set in it by the sandbox; `Host` for hostNetwork pods.
    pub uts: NamespaceMode,
    /// `hostPID`; otherwise each container has its own PID namespace.
    pub host_pid: bool,
    /// Bind-mounted at `/dev/shm`: the pod's tmpfs, or the host's `/dev/shm` for hostIPC.
    /// `None`: a private tmpfs per container.
    pub shm: Option<PathBuf>,
    pub hosts: Option<PathBuf>,
    pub hostname_file: Option<PathBuf>,
    pub resolv_conf: Option<PathBuf>,
}

/// What [`build`] needs besides the two descriptions.
#[derive(Debug, Clone)]
pub struct BuildContext<'a> {
    pub sandbox: &'a PodSandbox,
    /// Write `linux.resources` and a cgroups path (cgroups are writable).
    pub limits: bool,
    /// `/litek8s/<container id>`; used only with `limits`.
    pub cgroups_path: String,
    /// The file bind-mounted at `termination_message_path`.
    pub termination_log: Option<&'a Path>,
    /// What "all capabilities" means here: those the agent holds.
    pub all_capabilities: &'a [String],
    /// The host's devices, given to privileged containers.
    pub host_devices: &'a [oci::Device],
}

/// kubelet's conversion of a cpu request to cgroup shares (1000m = 1024 shares, at least 2).
pub fn milli_cpu_to_shares(millis: u64) -> u64 {
    const MIN: u64 = 2;
    const MAX: u64 = 262_144;
    (millis.saturating_mul(1024) / 1000).clamp(MIN, MAX)
}

/// CFS period kubelet uses (100 ms).
pub const CPU_PERIOD_US: u64 = 100_000;

/// kubelet's conversion of a cpu limit to a CFS quota over [`CPU_PERIOD_US`] (at least 1 ms).
pub fn milli_cpu_to_quota(millis: u64) -> i64 {
    let quota = millis.saturating_mul(CPU_PERIOD_US) / 1000;
    quota.clamp(1000, i64::MAX as u64) as i64
}

/// Builds the runtime config. Fails only on descriptions no runtime could run (empty
/// command, relative paths, unknown capability names).
pub fn build(cfg: &ContainerConfig, ctx: &BuildContext) -> Result<Spec, RuntimeError> {
    let invalid = |m: String| Err(RuntimeError::InvalidConfig(m));
    if cfg.args.is_empty() || cfg.args[0].is_empty() {
        return invalid(format!("container {:?} has no command", cfg.name));
    }
    if !cfg.rootfs.is_absolute() {
        return invalid(format!("rootfs {} is not absolute", cfg.rootfs.display()));
    }
    let sandbox = ctx.sandbox;

    let caps = capabilities(cfg, ctx.all_capabilities)?;
    let process = oci::Process {
        terminal: cfg.tty,
        user: oci::User {
            uid: cfg.user.uid,
            gid: cfg.user.gid,
            additional_gids: cfg.user.additional_gids.clone(),
        },
        args: cfg.args.clone(),
        env: environment(&cfg.env, &sandbox.hostname)?,
        cwd: match &cfg.working_dir {
            Some(d) if !d.is_empty() => {
                check_container_path(d)?;
                d.clone()
            }
            _ => "/".to_string(),
        },
        capabilities: oci::Capabilities {
            bounding: caps.clone(),
            effective: caps.clone(),
            permitted: caps,
        },
        rlimits: cfg.rlimits.clone(),
        no_new_privileges: cfg.no_new_privileges && !cfg.privileged,
        oom_score_adj: cfg.oom_score_adj,
    };

    let mut linux = oci::Linux {
        namespaces: namespaces(sandbox),
        devices: Vec::new(),
        cgroups_path: None,
        resources: None,
        sysctl: cfg.sysctls.clone(),
        masked_paths: Vec::new(),
        readonly_paths: Vec::new(),
    };
    if cfg.privileged {
        linux.devices = ctx.host_devices.to_vec();
    } else {
        linux.masked_paths = oci::MASKED_PATHS.iter().map(|p| p.to_string()).collect();
        linux.readonly_paths = oci::READONLY_PATHS.iter().map(|p| p.to_string()).collect();
    }
    if ctx.limits {
        linux.cgroups_path = Some(ctx.cgroups_path.clone());
        linux.resources = Some(resources(cfg));
    }

    let mut annotations = BTreeMap::new();
    annotations.insert("io.kubernetes.pod.uid".into(), cfg.pod.uid.clone());
    annotations.insert(
        "io.kubernetes.pod.namespace".into(),
        cfg.pod.namespace.clone(),
    );
    annotations.insert("io.kubernetes.pod.name".into(), cfg.pod.name.clone());
    annotations.insert("io.kubernetes.container.name".into(), cfg.name.clone());

    Ok(Spec {
        oci_version: oci::OCI_VERSION.to_string(),
        process,
        root: oci::Root {
            path: cfg.rootfs.display().to_string(),
            readonly: cfg.read_only_rootfs,
        },
        // The sandbox set the hostname in the pod's UTS namespace; joining it is enough.
        hostname: None,
        mounts: mounts(cfg, ctx)?,
        linux,
        annotations,
    })
}

fn resources(cfg: &ContainerConfig) -> oci::Resources {
    let r = &cfg.resources;
    let devices = vec![oci::DeviceRule {
        allow: cfg.privileged,
        kind: None,
        access: "rwm".to_string(),
    }];
    oci::Resources {
        devices,
        memory: r.memory_limit_bytes.map(|b| oci::Memory {
            limit: b.min(i64::MAX as u64) as i64,
        }),
        cpu: Some(oci::Cpu {
            shares: Some(milli_cpu_to_shares(r.cpu_request_millis.unwrap_or(0))),
            quota: r.cpu_limit_millis.map(milli_cpu_to_quota),
            period: r.cpu_limit_millis.map(|_| CPU_PERIOD_US),
        }),
        pids: r.pids_limit.map(|limit| oci::Pids { limit }),
    }
}

fn namespaces(sandbox: &PodSandbox) -> Vec<oci::Namespace> {
    let ns = |kind: &str, path: Option<&Path>| oci::Namespace {
        kind: kind.to_string(),
        path: path.map(|p| p.display().to_string()),
    };
    let mut list = vec![ns("mount", None)];
    if !sandbox.host_pid {
        list.push(ns("pid", None));
    }
    for (kind, mode) in [
        ("network", &sandbox.network),
        ("ipc", &sandbox.ipc),
        ("uts", &sandbox.uts),
    ] {
        if let NamespaceMode::Join(path) = mode {
            list.push(ns(kind, Some(path)));
        }
    }
    list
}

/// Capabilities for the container, containerd's way: privileged gets all; otherwise the
/// default set, then `add: ALL` / `drop: ALL`, then the named adds, then the named drops.
fn capabilities(cfg: &ContainerConfig, all: &[String]) -> Result<Vec<String>, RuntimeError> {
    if cfg.privileged {
        return Ok(all.to_vec());
    }
    let normalize = |name: &str| -> Result<Option<String>, RuntimeError> {
        let upper = name.trim().to_ascii_uppercase();
        if upper == "ALL" {
            return Ok(None);
        }
        let full = if upper.starts_with("CAP_") {
            upper
        } else {
            format!("CAP_{upper}")
        };
        if oci::ALL_CAPABILITIES.contains(&full.as_str()) {
            Ok(Some(full))
        } else {
            Err(RuntimeError::InvalidConfig(format!(
                "unknown capability {name:?}"
            )))
        }
    };
    let is_all = |list: &[String]| list.iter().any(|c| c.trim().eq_ignore_ascii_case("ALL"));
    let mut caps: Vec<String> = oci::DEFAULT_CAPABILITIES
        .iter()
        .map(|c| c.to_string())
        .collect();
    if is_all(&cfg.capabilities.add) {
        caps = all.to_vec();
    }
    if is_all(&cfg.capabilities.drop) {
        caps.clear();
    }
    for name in &cfg.capabilities.add {
        if let Some(c) = normalize(name)? {
            if !caps.contains(&c) {
                caps.push(c);
            }
        }
    }
    for name in &cfg.capabilities.drop {
        if let Some(c) = normalize(name)? {
            caps.retain(|x| *x != c);
        }
    }
    Ok(caps)
}

/// `HOSTNAME` first, then the container's entries (a repeated key replaces the earlier value
/// in place), then `PATH` when nobody set one.
fn environment(env: &[String], hostname: &str) -> Result<Vec<String>, RuntimeError> {
    let mut out: Vec<String> = vec![format!("HOSTNAME={hostname}")];
    for entry in env {
        let Some((key, _)) = entry.split_once('=') else {
            return Err(RuntimeError::InvalidConfig(format!(
                "environment entry {entry:?} has no '='"
            )));
        };
        if key.is_empty() {
            return Err(RuntimeError::InvalidConfig(format!(
                "environment entry {entry:?} has an empty name"
            )));
        }
        let prefix = format!("{key}=");
        match out.iter_mut().find(|e| e.starts_with(&prefix)) {
            Some(existing) => *existing = entry.clone(),
            None => out.push(entry.clone()),
        }
    }
    if !out.iter().any(|e| e.starts_with("PATH=")) {
        out.push(oci::DEFAULT_PATH.to_string());
    }
    Ok(out)
}

fn check_container_path(path: &str) -> Result<(), RuntimeError> {
    let p = Path::new(path);
    if !p.is_absolute() || p.components().any(|c| c == Component::ParentDir) {
        return Err(RuntimeError::InvalidConfig(format!(
            "container path {path:?} must be absolute without '..'"
        )));
    }
    Ok(())
}

fn bind(source: &Path, destination: &str, read_only: bool, propagation: &str) -> oci::Mount {
    oci::Mount {
        destination: destination.to_string(),
        kind: "bind".to_string(),
        source: source.display().to_string(),
        options: vec![
            "rbind".to_string(),
            propagation.to_string(),
            if read_only { "ro" } else { "rw" }.to_string(),
        ],
    }
}

/// The defaults, then `/dev/shm` and the pod's files, then the termination log, then the
/// volumes (parents before children). A volume replaces any earlier mount at its path.
fn mounts(cfg: &ContainerConfig, ctx: &BuildContext) -> Result<Vec<oci::Mount>, RuntimeError> {
    let sandbox = ctx.sandbox;
    let mut list = oci::default_mounts(cfg.privileged, ctx.limits);
    list.push(match &sandbox.shm {
        Some(path) => bind(path, "/dev/shm", false, "rprivate"),
        None => oci::private_shm(),
    });
    let ro = cfg.read_only_rootfs;
    for (file, destination) in [
        (&sandbox.hosts, "/etc/hosts"),
        (&sandbox.hostname_file, "/etc/hostname"),
        (&sandbox.resolv_conf, "/etc/resolv.conf"),
    ] {
        if let Some(file) = file {
            list.push(bind(file, destination, ro, "rprivate"));
        }
    }
    if let (Some(path), Some(file)) = (&cfg.termination_message_path, ctx.termination_log) {
        if !path.is_empty() {
            check_container_path(path)?;
            list.push(bind(file, path, false, "rprivate"));
        }
    }

    let mut volumes: Vec<&VolumeMount> = cfg.mounts.iter().collect();
    for v in &volumes {
        check_container_path(&v.container_path)?;
        if !v.host_path.is_absolute() {
            return Err(RuntimeError::InvalidConfig(format!(
                "volume source {} is not absolute",
                v.host_path.display()
            )));
        }
        if v.propagation == Propagation::Bidirectional && !cfg.privileged {
            return Err(RuntimeError::InvalidConfig(format!(
                "mountPropagation Bidirectional at {} needs a privileged container",
                v.container_path
            )));
        }
    }
    volumes.sort_by_key(|v| Path::new(&v.container_path).components().count());
    list.retain(|m| !volumes.iter().any(|v| v.container_path == m.destination));
    for v in volumes {
        let propagation = match v.propagation {
            Propagation::None => "rprivate",
            Propagation::HostToContainer => "rslave",
            Propagation::Bidirectional => "rshared",
        };
        list.push(bind(
            &v.host_path,
            &v.container_path,
            v.read_only,
            propagation,
        ));
    }
    Ok(list)
}

/// The capabilities this process holds (its bounding set), by name: "all" for containers.
pub fn held_capabilities() -> Vec<String> {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let mask = status
        .lines()
        .find_map(|l| l.strip_prefix("CapBnd:"))
        .and_then(|hex| u64::from_str_radix(hex.trim(), 16).ok())
        .unwrap_or(0);
    oci::ALL_CAPABILITIES
        .iter()
        .enumerate()
        .filter(|(bit, _)| mask & (1u64 << bit) != 0)
        .map(|(_, name)| name.to_string())
        .collect()
}

/// The host's device nodes under `/dev` (not `pts`, `shm`, `mqueue`), for privileged
/// containers.
pub fn host_devices() -> Vec<oci::Device> {
    use std::os::unix::fs::{FileTypeExt, MetadataExt};
    let mut out = Vec::new();
    let mut dirs = vec![(PathBuf::from("/dev"), 0)];
    while let Some((dir, depth)) = dirs.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for entry in entries.flatten() {
            let path = entry.path();
            let Ok(meta) = std::fs::symlink_metadata(&path) else {
                continue;
            };
            let ft = meta.file_type();
            if ft.is_dir() {
                let skip = ["pts", "shm", "mqueue"]
                    .iter()
                    .any(|s| depth == 0 && entry.file_name() == *s);
                if !skip && depth < 3 {
                    dirs.push((path, depth + 1));
                }
                continue;
            }
            let kind = if ft.is_char_device() {
                "c"
            } else if ft.is_block_device() {
                "b"
            } else {
                continue;
            };
            let rdev = meta.rdev();
            out.push(oci::Device {
                path: path.display().to_string(),
                kind: kind.to_string(),
                major: nix::sys::stat::major(rdev) as i64,
                minor: nix::sys::stat::minor(rdev) as i64,
                file_mode: meta.mode() & 0o7777,
                uid: meta.uid(),
                gid: meta.gid(),
            });
        }
    }
    out.sort_by(|a, b| a.path.cmp(&b.path));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sandbox() -> PodSandbox {
        PodSandbox {
            hostname: "web-0".into(),
            network: NamespaceMode::Join("/n/pods/u1/netns".into()),
            ipc: NamespaceMode::Join("/n/pods/u1/ipcns".into()),
            uts: NamespaceMode::Join("/n/pods/u1/utsns".into()),
            host_pid: false,
            shm: Some("/n/pods/u1/shm".into()),
            hosts: Some("/n/pods/u1/etc-hosts".into()),
            hostname_file: Some("/n/pods/u1/hostname".into()),
            resolv_conf: Some("/n/pods/u1/resolv.conf".into()),
        }
    }

    fn config() -> ContainerConfig {
        ContainerConfig::new(
            PodRef {
                uid: "u1".into(),
                namespace: "default".into(),
                name: "web-0".into(),
            },
            "app",
            "/n/rootfs".into(),
            vec!["sh".into(), "-c".into(), "exit 3".into()],
        )
    }

    fn all_caps() -> Vec<String> {
        oci::ALL_CAPABILITIES
            .iter()
            .map(|c| c.to_string())
            .collect()
    }

    fn build_with(cfg: &ContainerConfig, limits: bool) -> Result<Spec, RuntimeError> {
        let sb = sandbox();
        let all = all_caps();
        let devices = [oci::Device {
            path: "/dev/fuse".into(),
            kind: "c".into(),
            major: 10,
            minor: 229,
            file_mode: 0o666,
            uid: 0,
            gid: 0,
        }];
        build(
            cfg,
            &BuildContext {
                sandbox: &sb,
                limits,
                cgroups_path: "/litek8s/abc".into(),
                termination_log: Some(Path::new("/n/pods/u1/containers/abc/termination-log")),
                all_capabilities: &all,
                host_devices: &devices,
            },
        )
    }

    #[test]
    fn defaults_are_containerds() {
        let spec = build_with(&config(), false).unwrap();
        assert_eq!(
            spec.process.capabilities.bounding,
            oci::DEFAULT_CAPABILITIES
        );
        assert_eq!(
            spec.process.capabilities.effective,
            oci::DEFAULT_CAPABILITIES
        );
        assert_eq!(spec.process.cwd, "/");
        assert_eq!(
            spec.process.env,
            ["HOSTNAME=web-0", oci::DEFAULT_PATH],
            "hostname and a PATH"
        );
        assert!(!spec.process.no_new_privileges);
        assert_eq!(spec.linux.masked_paths.len(), oci::MASKED_PATHS.len());
        assert!(spec.linux.readonly_paths.contains(&"/proc/sys".to_string()));
        assert!(spec.linux.resources.is_none() && spec.linux.cgroups_path.is_none());
        assert!(spec.hostname.is_none());
        let kinds: Vec<(&str, Option<&str>)> = spec
            .linux
            .namespaces
            .iter()
            .map(|n| (n.kind.as_str(), n.path.as_deref()))
            .collect();
        assert_eq!(
            kinds,
            [
                ("mount", None),
                ("pid", None),
                ("network", Some("/n/pods/u1/netns")),
                ("ipc", Some("/n/pods/u1/ipcns")),
                ("uts", Some("/n/pods/u1/utsns")),
            ]
        );
        let dests: Vec<&str> = spec.mounts.iter().map(|m| m.destination.as_str()).collect();
        assert_eq!(
            dests,
            [
                "/proc",
                "/dev",
                "/dev/pts",
                "/dev/mqueue",
                "/sys",
                "/run",
                "/dev/shm",
                "/etc/hosts",
                "/etc/hostname",
                "/etc/resolv.conf",
                "/dev/termination-log"
            ]
        );
        let shm = &spec.mounts[6];
        assert_eq!(
            (shm.kind.as_str(), shm.source.as_str()),
            ("bind", "/n/pods/u1/shm")
        );
        let sys = spec
            .mounts
            .iter()
            .find(|m| m.destination == "/sys")
            .unwrap();
        assert!(sys.options.contains(&"ro".to_string()));
        // It serializes with the runtime spec's names.
        let json = serde_json::to_value(&spec).unwrap();
        assert_eq!(json["ociVersion"], "1.0.2");
        assert_eq!(json["process"]["noNewPrivileges"], false);
        assert_eq!(json["linux"]["maskedPaths"][0], "/proc/acpi");
        assert_eq!(json["mounts"][0]["type"], "proc");
        assert!(json["linux"].get("resources").is_none());
    }

    #[test]
    fn resources_only_with_limits() {
        let mut cfg = config();
        cfg.resources = ResourceSpec {
            cpu_request_millis: Some(250),
            cpu_limit_millis: Some(500),
            memory_limit_bytes: Some(64 << 20),
            pids_limit: Some(100),
        };
        let spec = build_with(&cfg, true).unwrap();
        assert_eq!(spec.linux.cgroups_path.as_deref(), Some("/litek8s/abc"));
        let r = spec.linux.resources.unwrap();
        let cpu = r.cpu.unwrap();
        assert_eq!(
            (cpu.shares, cpu.quota, cpu.period),
            (Some(256), Some(50_000), Some(100_000))
        );
        assert_eq!(r.memory.unwrap().limit, 64 << 20);
        assert_eq!(r.pids.unwrap().limit, 100);
        assert_eq!(
            r.devices,
            [oci::DeviceRule {
                allow: false,
                kind: None,
                access: "rwm".into()
            }]
        );
        assert!(spec
            .mounts
            .iter()
            .any(|m| m.destination == "/sys/fs/cgroup"));
        let spec = build_with(&cfg, false).unwrap();
        assert!(spec.linux.resources.is_none());
        assert!(!spec
            .mounts
            .iter()
            .any(|m| m.destination == "/sys/fs/cgroup"));
    }

    #[test]
    fn cpu_conversions_match_kubelet() {
        assert_eq!(milli_cpu_to_shares(0), 2);
        assert_eq!(milli_cpu_to_shares(1), 2);
        assert_eq!(milli_cpu_to_shares(1000), 1024);
        assert_eq!(milli_cpu_to_shares(10_000_000), 262_144);
        assert_eq!(milli_cpu_to_quota(1), 1000);
        assert_eq!(milli_cpu_to_quota(1500), 150_000);
    }

    #[test]
    fn capabilities_add_and_drop() {
        let mut cfg = config();
        cfg.capabilities = CapabilityChanges {
            add: vec!["NET_ADMIN".into(), "cap_sys_time".into()],
            drop: vec!["NET_RAW".into(), "CAP_KILL".into()],
        };
        let caps = build_with(&cfg, false)
            .unwrap()
            .process
            .capabilities
            .bounding;
        assert!(caps.contains(&"CAP_NET_ADMIN".into()));
        assert!(caps.contains(&"CAP_SYS_TIME".into()));
        assert!(!caps.contains(&"CAP_NET_RAW".into()));
        assert!(!caps.contains(&"CAP_KILL".into()));
        assert_eq!(caps.len(), 14);

        cfg.capabilities = CapabilityChanges {
            add: vec!["NET_BIND_SERVICE".into()],
            drop: vec!["ALL".into()],
        };
        let caps = build_with(&cfg, false)
            .unwrap()
            .process
            .capabilities
            .bounding;
        assert_eq!(caps, ["CAP_NET_BIND_SERVICE"]);

        cfg.capabilities = CapabilityChanges {
            add: vec!["ALL".into()],
            drop: vec!["CHOWN".into()],
        };
        let caps = build_with(&cfg, false)
            .unwrap()
            .process
            .capabilities
            .bounding;
        assert_eq!(caps.len(), oci::ALL_CAPABILITIES.len() - 1);

        cfg.capabilities.add = vec!["NOT_A_CAP".into()];
        let err = build_with(&cfg, false).unwrap_err();
        assert!(err.to_string().contains("NOT_A_CAP"));
        assert_eq!(err.reason(), "CreateContainerConfigError");
    }

    #[test]
    fn privileged_gets_everything() {
        let mut cfg = config();
        cfg.privileged = true;
        cfg.no_new_privileges = true;
        cfg.capabilities.drop = vec!["ALL".into()];
        let spec = build_with(&cfg, true).unwrap();
        assert_eq!(
            spec.process.capabilities.bounding.len(),
            oci::ALL_CAPABILITIES.len()
        );
        assert!(!spec.process.no_new_privileges);
        assert!(spec.linux.masked_paths.is_empty() && spec.linux.readonly_paths.is_empty());
        assert_eq!(spec.linux.devices.len(), 1);
        assert!(spec.linux.resources.unwrap().devices[0].allow);
        let sys = spec
            .mounts
            .iter()
            .find(|m| m.destination == "/sys")
            .unwrap();
        assert!(sys.options.contains(&"rw".to_string()));
    }

    #[test]
    fn user_env_cwd_and_security() {
        let mut cfg = config();
        cfg.user = UserSpec {
            uid: 1000,
            gid: 2000,
            additional_gids: vec![3000, 4000],
        };
        cfg.env = vec![
            "A=1".into(),
            "PATH=/bin".into(),
            "A=2".into(),
            "HOSTNAME=custom".into(),
        ];
        cfg.working_dir = Some("/work".into());
        cfg.read_only_rootfs = true;
        cfg.no_new_privileges = true;
        cfg.oom_score_adj = Some(-997);
        cfg.rlimits = vec![oci::Rlimit {
            kind: "RLIMIT_NOFILE".into(),
            hard: 4096,
            soft: 1024,
        }];
        let spec = build_with(&cfg, false).unwrap();
        let p = &spec.process;
        assert_eq!((p.user.uid, p.user.gid), (1000, 2000));
        assert_eq!(p.user.additional_gids, [3000, 4000]);
        assert_eq!(p.env, ["HOSTNAME=custom", "A=2", "PATH=/bin"]);
        assert_eq!(p.cwd, "/work");
        assert!(p.no_new_privileges);
        assert_eq!(p.oom_score_adj, Some(-997));
        assert_eq!(p.rlimits.len(), 1);
        assert!(spec.root.readonly);
        let hosts = spec
            .mounts
            .iter()
            .find(|m| m.destination == "/etc/hosts")
            .unwrap();
        assert!(hosts.options.contains(&"ro".to_string()));
        let json = serde_json::to_value(&spec).unwrap();
        assert_eq!(json["process"]["user"]["additionalGids"][1], 4000);
        assert_eq!(json["process"]["rlimits"][0]["type"], "RLIMIT_NOFILE");
        assert_eq!(json["process"]["oomScoreAdj"], -997);
    }

    #[test]
    fn volumes_mount_after_defaults_parents_first() {
        let mut cfg = config();
        let vol = |host: &str, path: &str, ro: bool| VolumeMount {
            host_path: host.into(),
            container_path: path.into(),
            read_only: ro,
            propagation: Propagation::None,
        };
        cfg.mounts = vec![
            vol("/n/v/b", "/data/sub", false),
            vol("/n/v/a", "/data", true),
            vol("/n/v/hosts", "/etc/hosts", true),
        ];
        cfg.mounts[0].propagation = Propagation::HostToContainer;
        let spec = build_with(&cfg, false).unwrap();
        let tail: Vec<(&str, &str, &[String])> = spec.mounts[spec.mounts.len() - 3..]
            .iter()
            .map(|m| {
                (
                    m.destination.as_str(),
                    m.source.as_str(),
                    m.options.as_slice(),
                )
            })
            .collect();
        assert_eq!(tail[0].0, "/data");
        assert_eq!(tail[0].2, ["rbind", "rprivate", "ro"]);
        assert_eq!(tail[1].0, "/data/sub");
        assert_eq!(tail[1].2, ["rbind", "rslave", "rw"]);
        assert_eq!(tail[2].0, "/etc/hosts");
        assert_eq!(tail[2].1, "/n/v/hosts");
        assert_eq!(
            spec.mounts
                .iter()
                .filter(|m| m.destination == "/etc/hosts")
                .count(),
            1,
            "the volume replaces the pod's hosts file"
        );
    }

    #[test]
    fn host_namespaces_are_not_listed() {
        let mut sb = sandbox();
        sb.network = NamespaceMode::Host;
        sb.uts = NamespaceMode::Host;
        sb.ipc = NamespaceMode::Host;
        sb.host_pid = true;
        assert_eq!(namespaces(&sb).len(), 1);
    }

    #[test]
    fn bad_descriptions_are_refused() {
        let mut cfg = config();
        cfg.args.clear();
        assert!(build_with(&cfg, false).is_err());
        let mut cfg = config();
        cfg.env = vec!["NOEQUALS".into()];
        assert!(build_with(&cfg, false).is_err());
        let mut cfg = config();
        cfg.working_dir = Some("relative".into());
        assert!(build_with(&cfg, false).is_err());
        let mut cfg = config();
        cfg.mounts = vec![VolumeMount {
            host_path: "/x".into(),
            container_path: "/a/../etc".into(),
            read_only: false,
            propagation: Propagation::None,
        }];
        assert!(build_with(&cfg, false).is_err());
        cfg.mounts[0].container_path = "/shared".into();
        cfg.mounts[0].propagation = Propagation::Bidirectional;
        assert!(build_with(&cfg, false).is_err());
        cfg.privileged = true;
        assert!(build_with(&cfg, false).is_ok());
        let mut cfg = config();
        cfg.rootfs = "rootfs".into();
        assert!(build_with(&cfg, false).is_err());
    }
}
