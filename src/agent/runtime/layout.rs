//! Where the runtime keeps things on disk.
//!
//! ```text
//! <pods-dir>/<pod-uid>/containers/<id>/    one directory per container (the OCI bundle):
//!     config.json      the runtime config (spec.rs)
//!     state.json       the container record (container.rs), replaced atomically
//!     conmon.pid       conmon's pid (written by conmon)
//!     pidfile          the container's init pid (written by the runtime)
//!     exit             the exit code (written by conmon when the container exits)
//!     oom              present when the kernel OOM-killed the container (conmon)
//!     termination-log  bind-mounted at terminationMessagePath, read after exit
//!     ctl, winsz       conmon's control fifos
//! <log-dir>/<namespace>_<pod>_<pod-uid>/<container>/<restart-count>.log
//!                      CRI-format log written by conmon (kubelet's layout)
//! <state-dir>/<runc|crun>/   the runtime's own state (--root); tmpfs under /run, so a
//!                      reboot forgets containers that cannot have survived it
//! <state-dir>/conmon/  conmon's attach sockets
//! ```

use std::path::{Component, Path, PathBuf};

use super::detect::RuntimeKind;
use super::spec::PodRef;
use super::RuntimeError;

#[derive(Debug, Clone)]
pub struct Layout {
    pub pods_dir: PathBuf,
    pub log_dir: PathBuf,
    pub state_dir: PathBuf,
}

/// Refuses names that would escape the directory they are joined to (pod UIDs, names and
/// container names come from the API).
pub fn path_component(what: &str, s: &str) -> Result<(), RuntimeError> {
    let mut components = Path::new(s).components();
    match (components.next(), components.next()) {
        (Some(Component::Normal(c)), None) if c == s && !s.is_empty() => Ok(()),
        _ => Err(RuntimeError::InvalidConfig(format!(
            "{what} {s:?} cannot name a directory"
        ))),
    }
}

impl Layout {
    pub fn pod_dir(&self, pod_uid: &str) -> PathBuf {
        self.pods_dir.join(pod_uid)
    }

    pub fn containers_dir(&self, pod_uid: &str) -> PathBuf {
        self.pod_dir(pod_uid).join("containers")
    }

    pub fn container_dir(&self, pod_uid: &str, id: &str) -> PathBuf {
        self.containers_dir(pod_uid).join(id)
    }

    /// `<log-dir>/<namespace>_<pod>_<uid>`.
    pub fn pod_log_dir(&self, pod: &PodRef) -> PathBuf {
        self.log_dir
            .join(format!("{}_{}_{}", pod.namespace, pod.name, pod.uid))
    }

    /// `<log-dir>/<namespace>_<pod>_<uid>/<container>/<restart-count>.log`.
    pub fn log_path(&self, pod: &PodRef, container: &str, restart_count: u32) -> PathBuf {
        self.pod_log_dir(pod)
            .join(container)
            .join(format!("{restart_count}.log"))
    }

    pub fn runtime_root(&self, kind: RuntimeKind) -> PathBuf {
        self.state_dir.join(kind.binary())
    }

    pub fn socket_dir(&self) -> PathBuf {
        self.state_dir.join("conmon")
    }
}

/// Names of the files in a container directory.
pub mod files {
    pub const CONFIG: &str = "config.json";
    pub const STATE: &str = "state.json";
    pub const CONMON_PID: &str = "conmon.pid";
    pub const PID: &str = "pidfile";
    pub const EXIT: &str = "exit";
    pub const OOM: &str = "oom";
    pub const TERMINATION_LOG: &str = "termination-log";
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kubelet_log_layout() {
        let l = Layout {
            pods_dir: "/n/pods".into(),
            log_dir: "/var/log/pods".into(),
            state_dir: "/run/litek8s".into(),
        };
        let pod = PodRef {
            uid: "1234-5678".into(),
            namespace: "default".into(),
            name: "web".into(),
        };
        assert_eq!(
            l.log_path(&pod, "app", 2),
            Path::new("/var/log/pods/default_web_1234-5678/app/2.log")
        );
        assert_eq!(
            l.container_dir("1234-5678", "abc"),
            Path::new("/n/pods/1234-5678/containers/abc")
        );
        assert_eq!(
            l.runtime_root(RuntimeKind::Crun),
            Path::new("/run/litek8s/crun")
        );
    }

    #[test]
    fn path_components_cannot_escape() {
        assert!(path_component("uid", "1234-abcd").is_ok());
        for bad in ["", ".", "..", "a/b", "/abs", "../x"] {
            assert!(path_component("uid", bad).is_err(), "{bad:?}");
        }
    }
}
