//! A pod's namespaces without a pause process: new network, IPC and UTS namespaces are
//! created by a short-lived thread (`unshare` affects only the calling thread for these
//! kinds) and each is kept alive by bind-mounting `/proc/thread-self/ns/<kind>` onto a file
//! in the pod directory, which containers then join by path. Removing the bind mount (and
//! the last process in it) frees the namespace.
//!
//! Also the pod's `/dev/shm`: a tmpfs every container of the pod bind-mounts, so that
//! processes sharing the IPC namespace also share POSIX shared memory.

use std::path::{Path, PathBuf};

use nix::errno::Errno;
use nix::mount::{MntFlags, MsFlags};
use nix::sched::CloneFlags;

use super::SandboxError;

/// A kind of namespace the sandbox creates.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Net,
    Ipc,
    Uts,
}

impl Kind {
    fn flag(self) -> CloneFlags {
        match self {
            Kind::Net => CloneFlags::CLONE_NEWNET,
            Kind::Ipc => CloneFlags::CLONE_NEWIPC,
            Kind::Uts => CloneFlags::CLONE_NEWUTS,
        }
    }

    fn proc_name(self) -> &'static str {
        match self {
            Kind::Net => "net",
            Kind::Ipc => "ipc",
            Kind::Uts => "uts",
        }
    }
}

/// Size of a pod's `/dev/shm` (containerd's default).
const SHM_OPTIONS: &str = "mode=1777,size=65536k";

fn ns_error(what: String) -> impl FnOnce(Errno) -> SandboxError {
    move |errno| SandboxError::Namespace { what, errno }
}

/// Creates one namespace of each requested kind and bind-mounts it at its path. The UTS
/// namespace gets `hostname`. Runs on a thread of its own, which ends afterwards (its
/// namespaces must not be reused by other work). Blocking.
pub fn create(requests: &[(Kind, PathBuf)], hostname: &str) -> Result<(), SandboxError> {
    if requests.is_empty() {
        return Ok(());
    }
    let requests = requests.to_vec();
    let hostname = hostname.to_string();
    let worker = std::thread::Builder::new()
        .name("litek8s-netns".into())
        .spawn(move || -> Result<(), SandboxError> {
            let flags = requests
                .iter()
                .fold(CloneFlags::empty(), |f, (k, _)| f | k.flag());
            nix::sched::unshare(flags).map_err(ns_error("unshare".into()))?;
            if requests.iter().any(|(k, _)| *k == Kind::Uts) {
                nix::unistd::sethostname(&hostname)
                    .map_err(ns_error(format!("set hostname {hostname:?}")))?;
            }
            for (kind, path) in &requests {
                bind(*kind, path)?;
            }
            Ok(())
        })
        .map_err(|e| SandboxError::io("start the namespace thread", e))?;
    worker.join().unwrap_or_else(|_| {
        Err(SandboxError::Invalid(
            "the namespace thread panicked".into(),
        ))
    })
}

fn bind(kind: Kind, path: &Path) -> Result<(), SandboxError> {
    std::fs::File::create(path)
        .map_err(|e| SandboxError::io(format!("create {}", path.display()), e))?;
    let source = format!("/proc/thread-self/ns/{}", kind.proc_name());
    nix::mount::mount(
        Some(source.as_str()),
        path,
        None::<&str>,
        MsFlags::MS_BIND,
        None::<&str>,
    )
    .map_err(ns_error(format!("bind {source} to {}", path.display())))
}

/// The file holds a mounted namespace (not just the empty file left before the mount).
pub fn is_mounted_namespace(path: &Path) -> bool {
    nix::sys::statfs::statfs(path)
        .map(|s| s.filesystem_type() == nix::sys::statfs::NSFS_MAGIC)
        .unwrap_or(false)
}

/// Unmounts whatever is mounted at `path` (lazily, so a process still in it does not make
/// this fail) and removes the file or directory. Absent or not mounted is fine.
pub fn remove(path: &Path) -> Result<(), SandboxError> {
    loop {
        match nix::mount::umount2(path, MntFlags::MNT_DETACH) {
            Ok(()) => continue, // stacked mounts: unmount until none is left
            Err(Errno::EINVAL) | Err(Errno::ENOENT) => break,
            Err(errno) => {
                return Err(SandboxError::Namespace {
                    what: format!("unmount {}", path.display()),
                    errno,
                })
            }
        }
    }
    let removed = if path.is_dir() {
        std::fs::remove_dir(path)
    } else {
        std::fs::remove_file(path)
    };
    match removed {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(SandboxError::io(format!("remove {}", path.display()), e)),
    }
}

/// Mounts the pod's `/dev/shm` tmpfs at `path`.
pub fn mount_shm(path: &Path) -> Result<(), SandboxError> {
    std::fs::create_dir_all(path)
        .map_err(|e| SandboxError::io(format!("create {}", path.display()), e))?;
    nix::mount::mount(
        Some("shm"),
        path,
        Some("tmpfs"),
        MsFlags::MS_NOSUID | MsFlags::MS_NODEV | MsFlags::MS_NOEXEC,
        Some(SHM_OPTIONS),
    )
    .map_err(ns_error(format!("mount tmpfs at {}", path.display())))
}
