//! Which OCI runtime runs this node's containers (runc or crun) and why, its version, and
//! whether the agent may apply resource limits through cgroups.
//!
//! The choice is a pure function of what the machine looks like ([`HostFacts`]), so every
//! rule is tested without the machine:
//! - writable cgroups v1 or hybrid (v1 controllers plus a v2 tree at
//!   `/sys/fs/cgroup/unified`): runc. crun refuses a host's hybrid cgroups ("cgroups in hybrid
//!   mode not supported") even with `--cgroup-manager=disabled`.
//! - cgroups read-only (a booted systemd-nspawn container on a hybrid host mounts the v1
//!   controllers read-only), or cgroup v2 inside a container (systemd-nspawn, docker, …),
//!   where the agent is not delegated a cgroup tree: crun with `--cgroup-manager=disabled`,
//!   which runs containers without creating cgroups; runc fails there. Resource limits are
//!   then not applied, said once in the log and by the node's condition message.
//! - a writable cgroup v2 host: runc when installed, else crun.
//! - `--runtime runc|crun` forces the choice (a warning names the rule it breaks).
//!
//! Separately, whether the kernel lets this process use session keyrings: systemd-nspawn's
//! seccomp filter refuses the keyring calls, and a runtime that creates a keyring for each
//! container then fails ("create keyring: Operation not permitted"). Without keyrings,
//! containers are created with `--no-new-keyring` (they share the agent's session keyring,
//! which the agent never uses).

use std::path::{Path, PathBuf};
use std::process::Command;

use super::RuntimeError;

/// An OCI runtime the agent knows how to drive.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RuntimeKind {
    Runc,
    Crun,
}

impl RuntimeKind {
    pub fn binary(self) -> &'static str {
        match self {
            RuntimeKind::Runc => "runc",
            RuntimeKind::Crun => "crun",
        }
    }
}

impl std::fmt::Display for RuntimeKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.binary())
    }
}

impl std::str::FromStr for RuntimeKind {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "runc" => Ok(RuntimeKind::Runc),
            "crun" => Ok(RuntimeKind::Crun),
            other => Err(format!("unknown runtime {other:?} (runc or crun)")),
        }
    }
}

/// How cgroups are mounted at `/sys/fs/cgroup`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CgroupMode {
    /// One v1 hierarchy per controller.
    V1,
    /// v1 controllers plus an empty v2 tree at `/sys/fs/cgroup/unified` (systemd's hybrid).
    Hybrid,
    /// The unified v2 hierarchy.
    V2,
}

/// What the choice depends on, gathered by [`HostFacts::gather`].
#[derive(Debug, Clone, Default)]
pub struct HostFacts {
    /// `None` when no cgroup filesystem is mounted at `/sys/fs/cgroup`.
    pub cgroup_mode: Option<CgroupMode>,
    /// A cgroup could be created where containers' cgroups go (every v1 controller the
    /// agent limits, or the v2 tree).
    pub cgroups_writable: bool,
    /// The kind of container the agent runs in (`systemd-nspawn`, `docker`, …), if any.
    pub container: Option<String>,
    pub runc: Option<PathBuf>,
    pub crun: Option<PathBuf>,
    /// The keyring system calls work (false under systemd-nspawn's seccomp filter).
    pub keyrings: bool,
}

/// The runtime chosen and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Choice {
    pub kind: RuntimeKind,
    pub path: PathBuf,
    /// Resource limits go into containers' configs and the runtime creates cgroups;
    /// otherwise crun runs with `--cgroup-manager=disabled` and nothing is limited.
    pub limits: bool,
    /// One sentence for the log: the rule that chose.
    pub reason: String,
    /// Set when `--runtime` overrode a rule that says the forced runtime will not work.
    pub warning: Option<String>,
}

/// The runtime in use, for the node's `nodeInfo` and for running containers.
#[derive(Debug, Clone)]
pub struct RuntimeInfo {
    pub kind: RuntimeKind,
    pub path: PathBuf,
    /// As the runtime prints it (`1.1.5+ds1`).
    pub version: String,
    pub limits: bool,
    pub reason: String,
    pub cgroup_mode: Option<CgroupMode>,
    pub conmon: PathBuf,
    pub conmon_version: String,
    /// Containers get their own session keyring (`false`: created with `--no-new-keyring`).
    pub new_keyring: bool,
}

impl RuntimeInfo {
    /// `nodeInfo.containerRuntimeVersion`: `runc://1.1.5+ds1`, as kubelet shows
    /// `containerd://1.7.2`.
    pub fn node_runtime_version(&self) -> String {
        format!("{}://{}", self.kind, self.version)
    }

    /// Global arguments every invocation of the runtime gets (before the command).
    pub fn global_args(&self, root: &Path) -> Vec<String> {
        let mut args = vec![format!("--root={}", root.display())];
        if self.kind == RuntimeKind::Crun && !self.limits {
            args.push("--cgroup-manager=disabled".to_string());
        }
        args
    }

    /// The sentence for the node's condition message when limits are off.
    pub fn limits_message(&self) -> Option<String> {
        (!self.limits).then(|| {
            "cgroups are not writable here: containers run without resource limits".to_string()
        })
    }
}

/// Where containers' cgroups go, under each hierarchy (`/sys/fs/cgroup/<controller>/litek8s`
/// on v1, `/sys/fs/cgroup/litek8s` on v2).
pub const CGROUP_PARENT: &str = "litek8s";
const CGROUP_ROOT: &str = "/sys/fs/cgroup";
/// The v1 controllers the agent writes limits to.
const V1_CONTROLLERS: [&str; 3] = ["cpu", "memory", "pids"];

impl HostFacts {
    /// Looks at this machine. Creates the cgroup parent directories when it can (that is the
    /// writability probe, and they are needed anyway).
    pub fn gather() -> HostFacts {
        let cgroup_mode = cgroup_mode(Path::new(CGROUP_ROOT));
        let cgroups_writable = match cgroup_mode {
            None => false,
            Some(CgroupMode::V2) => probe_writable(&Path::new(CGROUP_ROOT).join(CGROUP_PARENT)),
            Some(CgroupMode::V1 | CgroupMode::Hybrid) => {
                let mounted: Vec<PathBuf> = V1_CONTROLLERS
                    .iter()
                    .map(|c| Path::new(CGROUP_ROOT).join(c))
                    .filter(|p| p.is_dir())
                    .collect();
                !mounted.is_empty()
                    && mounted
                        .iter()
                        .all(|p| probe_writable(&p.join(CGROUP_PARENT)))
            }
        };
        HostFacts {
            cgroup_mode,
            cgroups_writable,
            container: container_kind(),
            runc: find_on_path("runc"),
            crun: find_on_path("crun"),
            keyrings: keyrings_work(),
        }
    }
}

/// Asks for the id of this process's session keyring without creating one: harmless, and
/// refused (EPERM or ENOSYS) exactly where a runtime's keyring creation would be.
fn keyrings_work() -> bool {
    const KEYCTL_GET_KEYRING_ID: libc::c_long = 0;
    const KEY_SPEC_SESSION_KEYRING: libc::c_long = -3;
    // SAFETY: keyctl(KEYCTL_GET_KEYRING_ID, id, create = 0) reads an id and changes nothing.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_keyctl,
            KEYCTL_GET_KEYRING_ID,
            KEY_SPEC_SESSION_KEYRING,
            0 as libc::c_long,
        )
    };
    if rc >= 0 {
        return true;
    }
    !matches!(
        std::io::Error::last_os_error().raw_os_error(),
        Some(libc::EPERM | libc::ENOSYS | libc::EACCES)
    )
}

fn cgroup_mode(root: &Path) -> Option<CgroupMode> {
    use nix::sys::statfs::{statfs, CGROUP2_SUPER_MAGIC, TMPFS_MAGIC};
    let fs = statfs(root).ok()?;
    if fs.filesystem_type() == CGROUP2_SUPER_MAGIC {
        return Some(CgroupMode::V2);
    }
    if fs.filesystem_type() != TMPFS_MAGIC {
        return None;
    }
    match statfs(&root.join("unified")) {
        Ok(u) if u.filesystem_type() == CGROUP2_SUPER_MAGIC => Some(CgroupMode::Hybrid),
        _ => Some(CgroupMode::V1),
    }
}

/// Creates `parent` if needed, then a child of it, which it removes again.
fn probe_writable(parent: &Path) -> bool {
    if std::fs::create_dir_all(parent).is_err() {
        return false;
    }
    let probe = parent.join(format!("probe-{}", std::process::id()));
    match std::fs::create_dir(&probe) {
        Ok(()) => {
            let _ = std::fs::remove_dir(&probe);
            true
        }
        Err(e) => e.kind() == std::io::ErrorKind::AlreadyExists,
    }
}

/// systemd's `/run/systemd/container`, docker's `/.dockerenv`, or `container=` in PID 1's
/// environment (podman, lxc).
fn container_kind() -> Option<String> {
    if let Ok(s) = std::fs::read_to_string("/run/systemd/container") {
        let s = s.trim();
        if !s.is_empty() {
            return Some(s.to_string());
        }
    }
    if Path::new("/.dockerenv").exists() {
        return Some("docker".to_string());
    }
    let environ = std::fs::read("/proc/1/environ").ok()?;
    environ
        .split(|b| *b == 0)
        .find_map(|kv| kv.strip_prefix(b"container="))
        .map(|v| String::from_utf8_lossy(v).into_owned())
        .filter(|v| !v.is_empty())
}

/// The first executable `name` in `$PATH` (or the usual system directories when `$PATH` is
/// unset).
pub fn find_on_path(name: &str) -> Option<PathBuf> {
    use std::os::unix::fs::PermissionsExt;
    let path = std::env::var_os("PATH")
        .unwrap_or_else(|| "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin".into());
    std::env::split_paths(&path)
        .map(|dir| dir.join(name))
        .find(|p| {
            std::fs::metadata(p)
                .map(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
                .unwrap_or(false)
        })
}

/// Applies the rules in the module doc.
pub fn choose(facts: &HostFacts, forced: Option<RuntimeKind>) -> Result<Choice, RuntimeError> {
    let v2_in_container = facts.cgroup_mode == Some(CgroupMode::V2) && facts.container.is_some();
    let limits = facts.cgroup_mode.is_some() && facts.cgroups_writable && !v2_in_container;
    let path_of = |kind: RuntimeKind| match kind {
        RuntimeKind::Runc => facts.runc.clone(),
        RuntimeKind::Crun => facts.crun.clone(),
    };
    let no_limits_why = || match (&facts.container, facts.cgroup_mode) {
        (_, None) => "no cgroup filesystem is mounted".to_string(),
        (Some(c), Some(CgroupMode::V2)) if facts.cgroups_writable => {
            format!("inside a container ({c}) with cgroup v2, where no cgroup tree is delegated to the agent")
        }
        (Some(c), Some(CgroupMode::Hybrid | CgroupMode::V1)) => {
            format!("inside a container ({c}) whose v1 cgroups are read-only")
        }
        _ => "cgroups are read-only".to_string(),
    };

    if let Some(kind) = forced {
        let path = path_of(kind).ok_or_else(|| {
            RuntimeError::NoRuntime(format!("--runtime {kind}: {kind} not found on PATH"))
        })?;
        let warning = match kind {
            RuntimeKind::Crun if facts.cgroup_mode == Some(CgroupMode::Hybrid) && limits => {
                Some("crun refuses hybrid cgroups; containers will likely fail".to_string())
            }
            RuntimeKind::Runc if !limits => Some(format!(
                "{}: runc cannot run without cgroups; containers will likely fail",
                no_limits_why()
            )),
            _ => None,
        };
        return Ok(Choice {
            kind,
            path,
            limits,
            reason: format!("forced by --runtime {kind}"),
            warning,
        });
    }

    let pick = |kind: RuntimeKind, reason: String| {
        path_of(kind).map(|path| Choice {
            kind,
            path,
            limits,
            reason,
            warning: None,
        })
    };
    match facts.cgroup_mode {
        Some(CgroupMode::Hybrid) if limits => pick(
            RuntimeKind::Runc,
            "cgroups are hybrid (v1 + v2), which crun refuses".to_string(),
        )
        .ok_or_else(|| {
            RuntimeError::NoRuntime(
                "cgroups are hybrid (v1 + v2): runc is needed (crun refuses them) and is not installed"
                    .to_string(),
            )
        }),
        _ if !limits => pick(
            RuntimeKind::Crun,
            format!(
                "{}: crun with --cgroup-manager=disabled runs containers without cgroups",
                no_limits_why()
            ),
        )
        .ok_or_else(|| {
            RuntimeError::NoRuntime(format!(
                "{}: crun is needed (runc cannot run without cgroups) and is not installed",
                no_limits_why()
            ))
        }),
        Some(CgroupMode::V1) => pick(RuntimeKind::Runc, "cgroups v1".to_string())
            .or_else(|| pick(RuntimeKind::Crun, "cgroups v1, runc not installed".to_string()))
            .ok_or_else(|| RuntimeError::NoRuntime("neither runc nor crun is installed".into())),
        _ => pick(RuntimeKind::Runc, "cgroup v2 host".to_string())
            .or_else(|| pick(RuntimeKind::Crun, "cgroup v2 host, runc not installed".to_string()))
            .ok_or_else(|| RuntimeError::NoRuntime("neither runc nor crun is installed".into())),
    }
}

/// The version a runtime or conmon prints on its first line (`runc version 1.1.5+ds1`).
pub fn version_of(binary: &Path) -> Result<String, RuntimeError> {
    let out = Command::new(binary)
        .arg("--version")
        .output()
        .map_err(|e| RuntimeError::io(format!("{} --version", binary.display()), e))?;
    let text = String::from_utf8_lossy(&out.stdout);
    parse_version(&text).ok_or_else(|| RuntimeError::Command {
        command: format!("{} --version", binary.display()),
        message: format!("unexpected output {:?}", text.trim()),
    })
}

fn parse_version(text: &str) -> Option<String> {
    let first = text.lines().next()?;
    let (_, version) = first.split_once(" version ")?;
    let version = version.trim();
    (!version.is_empty()).then(|| version.to_string())
}

/// Gathers the facts, chooses, checks conmon, and logs the choice once (and, once, that
/// containers run without limits when they do). Blocking (runs `--version`); called at start.
pub fn detect(forced: Option<RuntimeKind>) -> Result<RuntimeInfo, RuntimeError> {
    let facts = HostFacts::gather();
    let choice = choose(&facts, forced)?;
    let conmon = find_on_path("conmon").ok_or(RuntimeError::NoConmon)?;
    let info = RuntimeInfo {
        kind: choice.kind,
        version: version_of(&choice.path)?,
        path: choice.path,
        limits: choice.limits,
        reason: choice.reason,
        cgroup_mode: facts.cgroup_mode,
        conmon_version: version_of(&conmon)?,
        conmon,
        new_keyring: facts.keyrings,
    };
    tracing::info!(
        runtime = %info.kind,
        path = %info.path.display(),
        version = %info.version,
        conmon = %info.conmon_version,
        limits = info.limits,
        "container runtime: {} ({})",
        info.kind,
        info.reason
    );
    if let Some(w) = choice.warning {
        tracing::warn!("--runtime {}: {w}", info.kind);
    }
    if let Some(m) = info.limits_message() {
        tracing::warn!("{m}");
    }
    if !info.new_keyring {
        tracing::info!(
            "keyring system calls are refused here: containers share the agent's session keyring (--no-new-keyring)"
        );
    }
    Ok(info)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn facts(mode: Option<CgroupMode>, writable: bool, container: Option<&str>) -> HostFacts {
        HostFacts {
            cgroup_mode: mode,
            cgroups_writable: writable,
            container: container.map(str::to_string),
            runc: Some("/usr/sbin/runc".into()),
            crun: Some("/usr/bin/crun".into()),
            keyrings: true,
        }
    }

    #[test]
    fn rules() {
        use CgroupMode::*;
        use RuntimeKind::*;
        // (mode, writable, container) → (kind, limits)
        let table = [
            (Some(Hybrid), true, None, Runc, true),
            (Some(Hybrid), true, Some("docker"), Runc, true),
            (Some(V1), true, None, Runc, true),
            (Some(V2), true, None, Runc, true),
            (Some(V2), false, None, Crun, false),
            (Some(V2), true, Some("systemd-nspawn"), Crun, false),
            (Some(V2), false, Some("systemd-nspawn"), Crun, false),
            (Some(V1), false, None, Crun, false),
            (Some(Hybrid), false, Some("systemd-nspawn"), Crun, false),
            (None, false, None, Crun, false),
        ];
        for (mode, writable, container, kind, limits) in table {
            let c = choose(&facts(mode, writable, container), None).unwrap();
            assert_eq!(
                (c.kind, c.limits),
                (kind, limits),
                "{mode:?} writable={writable} {container:?}: {}",
                c.reason
            );
            assert!(c.warning.is_none());
        }
    }

    #[test]
    fn reasons_name_the_rule() {
        let c = choose(&facts(Some(CgroupMode::Hybrid), true, None), None).unwrap();
        assert!(c.reason.contains("hybrid"), "{}", c.reason);
        let c = choose(
            &facts(Some(CgroupMode::V2), true, Some("systemd-nspawn")),
            None,
        )
        .unwrap();
        assert!(c.reason.contains("systemd-nspawn"), "{}", c.reason);
        assert!(
            c.reason.contains("--cgroup-manager=disabled"),
            "{}",
            c.reason
        );
        let c = choose(&facts(Some(CgroupMode::V2), false, None), None).unwrap();
        assert!(c.reason.contains("read-only"), "{}", c.reason);
        let c = choose(
            &facts(Some(CgroupMode::Hybrid), false, Some("systemd-nspawn")),
            None,
        )
        .unwrap();
        assert!(
            c.reason.contains("systemd-nspawn") && c.reason.contains("read-only"),
            "{}",
            c.reason
        );
    }

    #[test]
    fn missing_runtimes_are_errors_that_say_what_to_install() {
        let mut f = facts(Some(CgroupMode::Hybrid), true, None);
        f.runc = None;
        let e = choose(&f, None).unwrap_err().to_string();
        assert!(e.contains("runc is needed"), "{e}");
        let mut f = facts(Some(CgroupMode::V2), false, None);
        f.crun = None;
        let e = choose(&f, None).unwrap_err().to_string();
        assert!(e.contains("crun is needed"), "{e}");
        let mut f = facts(Some(CgroupMode::V2), true, None);
        f.runc = None;
        assert_eq!(choose(&f, None).unwrap().kind, RuntimeKind::Crun);
        f.crun = None;
        assert!(choose(&f, None).is_err());
    }

    #[test]
    fn forced_runtime_wins_with_a_warning() {
        let f = facts(Some(CgroupMode::Hybrid), true, None);
        let c = choose(&f, Some(RuntimeKind::Crun)).unwrap();
        assert_eq!(c.kind, RuntimeKind::Crun);
        assert!(c.warning.unwrap().contains("hybrid"));
        let f = facts(Some(CgroupMode::V2), false, None);
        let c = choose(&f, Some(RuntimeKind::Runc)).unwrap();
        assert_eq!((c.kind, c.limits), (RuntimeKind::Runc, false));
        assert!(c.warning.is_some());
        let mut f = facts(Some(CgroupMode::V2), true, None);
        f.runc = None;
        assert!(choose(&f, Some(RuntimeKind::Runc)).is_err());
    }

    #[test]
    fn global_args_disable_cgroups_only_for_crun_without_limits() {
        let mut info = RuntimeInfo {
            kind: RuntimeKind::Crun,
            path: "/usr/bin/crun".into(),
            version: "1.8.1".into(),
            limits: false,
            reason: String::new(),
            cgroup_mode: Some(CgroupMode::V2),
            conmon: "/usr/bin/conmon".into(),
            conmon_version: "2.1.6".into(),
            new_keyring: true,
        };
        let root = Path::new("/run/x");
        assert_eq!(
            info.global_args(root),
            ["--root=/run/x", "--cgroup-manager=disabled"]
        );
        assert_eq!(info.node_runtime_version(), "crun://1.8.1");
        info.limits = true;
        assert_eq!(info.global_args(root), ["--root=/run/x"]);
        info.kind = RuntimeKind::Runc;
        assert_eq!(info.global_args(root), ["--root=/run/x"]);
    }

    #[test]
    fn versions_parse() {
        assert_eq!(
            parse_version("runc version 1.1.5+ds1\ncommit: x\n").as_deref(),
            Some("1.1.5+ds1")
        );
        assert_eq!(
            parse_version("crun version 1.8.1\ncommit: f8a\n").as_deref(),
            Some("1.8.1")
        );
        assert_eq!(
            parse_version("conmon version 2.1.6\ncommit: unknown\n").as_deref(),
            Some("2.1.6")
        );
        assert_eq!(parse_version("garbage"), None);
    }
}
