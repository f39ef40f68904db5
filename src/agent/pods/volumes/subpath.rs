//! subPath and subPathExpr: one file or directory of a volume mounted into a container,
//! prepared as kubelet prepares it so that nothing outside the volume can be reached.
//!
//! 1. The path must be relative and have no `..` component; `subPathExpr` is first expanded
//!    with the container's environment (a variable missing or empty fails it:
//!    `missing value for A, B`).
//! 2. A path that does not exist is created as directories, with the volume root's mode.
//! 3. It is resolved (symlinks included) and must stay inside the volume (`subpath "…" not
//!    within volume path "…"`).
//! 4. The resolved path is opened one component at a time without following symlinks, and
//!    what was opened is bind-mounted at `<pod>/volume-subpaths/<volume>/<container>/<n>`
//!    (`n` the mount's index in the container's `volumeMounts`); the runtime mounts that.
//!    A symlink swapped in between the check and the mount is caught by the open, and the
//!    bind pins the inode. A bind already there is kept if it still shows the same inode,
//!    and replaced otherwise (a restarted container sees the current file).
//!
//! Because the bind pins an inode, a subPath of a configMap, secret, downwardAPI or projected
//! volume does not follow updates while the container runs, exactly as upstream.

use std::cell::RefCell;
use std::collections::BTreeSet;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Component, Path, PathBuf};

use super::{mounts, VolumeError};
use crate::agent::pods::env::{self, EnvVar};

/// kubelet's checks of a `subPath` before anything touches the disk.
pub fn check(sub_path: &str) -> Result<(), VolumeError> {
    if Path::new(sub_path).is_absolute() {
        return Err(VolumeError::SubPath(format!(
            "error SubPath `{sub_path}` must not be an absolute path"
        )));
    }
    if Path::new(sub_path)
        .components()
        .any(|c| c == Component::ParentDir)
    {
        return Err(VolumeError::SubPath(format!(
            "unable to provision SubPath `{sub_path}`: must not contain '..'"
        )));
    }
    Ok(())
}

/// `subPathExpr` expanded with the container's environment (kubelet's
/// `ExpandContainerVolumeMounts`).
pub fn expand_expr(expr: &str, env_vars: &[EnvVar]) -> Result<String, VolumeError> {
    let missing = RefCell::new(BTreeSet::new());
    let expanded = env::expand(expr, |key| {
        match env_vars.iter().rev().find(|v| v.name == key) {
            Some(v) if !v.value.is_empty() => Some(v.value.clone()),
            _ => {
                missing.borrow_mut().insert(key.to_string());
                Some(String::new())
            }
        }
    });
    let missing = missing.into_inner();
    if missing.is_empty() {
        Ok(expanded)
    } else {
        Err(VolumeError::SubPath(format!(
            "missing value for {}",
            missing.into_iter().collect::<Vec<_>>().join(", ")
        )))
    }
}

/// Prepares `sub_path` of the volume at `volume_root` and binds it at `target`; returns
/// `target`. `mount` and `container` name the volumeMount in messages.
pub fn prepare(
    volume_root: &Path,
    sub_path: &str,
    target: &Path,
    mount: &str,
    container: &str,
) -> Result<PathBuf, VolumeError> {
    check(sub_path)?;
    let base = volume_root
        .canonicalize()
        .map_err(|e| VolumeError::io(format!("resolve {}", volume_root.display()), e))?;
    let full = base.join(sub_path);
    if std::fs::metadata(&full).is_err() {
        if let Err(e) = make_dirs(&base, sub_path) {
            tracing::warn!(container, mount, "creating subPath {sub_path}: {e}");
            return Err(VolumeError::SubPath(format!(
                "failed to create subPath directory for volumeMount {mount:?} of container {container:?}"
            )));
        }
    }
    let resolved = full
        .canonicalize()
        .map_err(|e| VolumeError::io(format!("resolve {}", full.display()), e))?;
    let relative = resolved.strip_prefix(&base).map_err(|_| {
        VolumeError::SubPath(format!(
            "subpath {:?} not within volume path {:?}",
            resolved.display().to_string(),
            base.display().to_string()
        ))
    })?;
    let opened = open_beneath(&base, relative)?;
    let meta = opened
        .metadata()
        .map_err(|e| VolumeError::io(format!("stat {}", resolved.display()), e))?;

    if mounts::is_mount_point(target)? {
        let same =
            std::fs::metadata(target).is_ok_and(|t| t.dev() == meta.dev() && t.ino() == meta.ino());
        if same {
            return Ok(target.to_path_buf());
        }
        mounts::unmount(target)?;
    }
    make_target(target, meta.is_dir())?;
    let fd = std::os::fd::AsRawFd::as_raw_fd(&opened);
    mounts::bind(Path::new(&format!("/proc/self/fd/{fd}")), target)?;
    Ok(target.to_path_buf())
}

/// Creates the missing directories of `sub_path` under `base` with `base`'s mode; existing
/// components may be symlinks only to directories inside `base`.
fn make_dirs(base: &Path, sub_path: &str) -> Result<(), VolumeError> {
    let mode = std::fs::metadata(base)
        .map_err(|e| VolumeError::io(format!("stat {}", base.display()), e))?
        .permissions()
        .mode()
        & 0o7777;
    let mut current = base.to_path_buf();
    for component in Path::new(sub_path).components() {
        let Component::Normal(name) = component else {
            continue;
        };
        let next = current.join(name);
        match std::fs::symlink_metadata(&next) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                std::fs::create_dir(&next)
                    .and_then(|()| {
                        std::fs::set_permissions(&next, std::fs::Permissions::from_mode(mode))
                    })
                    .map_err(|e| VolumeError::io(format!("mkdir {}", next.display()), e))?;
                current = next;
            }
            Err(e) => return Err(VolumeError::io(format!("stat {}", next.display()), e)),
            Ok(m) if m.is_dir() => current = next,
            Ok(m) if m.file_type().is_symlink() => {
                let real = next
                    .canonicalize()
                    .map_err(|e| VolumeError::io(format!("resolve {}", next.display()), e))?;
                if !real.starts_with(base) || !real.is_dir() {
                    return Err(VolumeError::SubPath(format!(
                        "{} leads outside the volume or to a file",
                        next.display()
                    )));
                }
                current = real;
            }
            Ok(_) => {
                return Err(VolumeError::SubPath(format!(
                    "{} is not a directory",
                    next.display()
                )))
            }
        }
    }
    Ok(())
}

/// Opens `relative` (no symlinks in it) beneath `base`, one component at a time, never
/// following a symlink: a component that is one (swapped in since the path was resolved)
/// fails the open.
fn open_beneath(base: &Path, relative: &Path) -> Result<std::fs::File, VolumeError> {
    let open = |path: &Path| {
        std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_PATH | libc::O_NOFOLLOW | libc::O_CLOEXEC)
            .open(path)
            .map_err(|e| VolumeError::io(format!("open {}", path.display()), e))
    };
    let mut current = open(base)?;
    let mut shown = base.to_path_buf();
    for component in relative.components() {
        let Component::Normal(name) = component else {
            return Err(VolumeError::SubPath(format!(
                "unexpected component in {}",
                relative.display()
            )));
        };
        shown.push(name);
        let fd = std::os::fd::AsRawFd::as_raw_fd(&current);
        let next = open(&Path::new(&format!("/proc/self/fd/{fd}")).join(name))?;
        let is_link = next
            .metadata()
            .map_err(|e| VolumeError::io(format!("stat {}", shown.display()), e))?
            .file_type()
            .is_symlink();
        if is_link {
            return Err(VolumeError::SubPath(format!(
                "{} changed into a symlink while being mounted",
                shown.display()
            )));
        }
        current = next;
    }
    Ok(current)
}

/// The bind target: a directory for a directory, an empty file for anything else.
fn make_target(target: &Path, dir: bool) -> Result<(), VolumeError> {
    if let Some(parent) = target.parent() {
        std::fs::create_dir_all(parent)
            .map_err(|e| VolumeError::io(format!("create {}", parent.display()), e))?;
    }
    let io = |e| VolumeError::io(format!("create {}", target.display()), e);
    match std::fs::symlink_metadata(target) {
        Ok(m) if m.is_dir() == dir => return Ok(()),
        Ok(m) if m.is_dir() => std::fs::remove_dir(target).map_err(io)?,
        Ok(_) => std::fs::remove_file(target).map_err(io)?,
        Err(_) => {}
    }
    if dir {
        std::fs::create_dir(target).map_err(io)
    } else {
        std::fs::write(target, b"").map_err(io)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn root() -> bool {
        let ok = nix::unistd::geteuid().is_root();
        if !ok {
            eprintln!("skipping: needs root");
        }
        ok
    }

    #[test]
    fn paths_are_checked_and_exprs_expanded() {
        assert!(check("a/b").is_ok());
        assert_eq!(
            check("/etc").unwrap_err().to_string(),
            "error SubPath `/etc` must not be an absolute path"
        );
        assert_eq!(
            check("a/../../b").unwrap_err().to_string(),
            "unable to provision SubPath `a/../../b`: must not contain '..'"
        );
        let env = vec![
            EnvVar {
                name: "POD".into(),
                value: "web-0".into(),
            },
            EnvVar {
                name: "EMPTY".into(),
                value: String::new(),
            },
        ];
        assert_eq!(expand_expr("logs/$(POD)", &env).unwrap(), "logs/web-0");
        assert_eq!(expand_expr("$$(POD)", &env).unwrap(), "$(POD)");
        assert_eq!(
            expand_expr("$(NOPE)/$(EMPTY)/$(POD)", &env)
                .unwrap_err()
                .to_string(),
            "missing value for EMPTY, NOPE"
        );
    }

    #[test]
    fn binds_stay_inside_the_volume_and_are_reused() {
        if !root() {
            return;
        }
        let tmp = tempfile::tempdir().unwrap();
        let vol = tmp.path().join("vol");
        let outside = tmp.path().join("outside");
        std::fs::create_dir_all(vol.join("data")).unwrap();
        std::fs::create_dir_all(&outside).unwrap();
        std::fs::write(vol.join("data/file"), "inside").unwrap();
        std::fs::write(outside.join("secret"), "outside").unwrap();
        std::os::unix::fs::symlink(&outside, vol.join("escape")).unwrap();
        std::os::unix::fs::symlink("data", vol.join("inner-link")).unwrap();
        let targets = tmp.path().join("subpaths");
        let t = |n: u32| targets.join(n.to_string());
        let guard = Unmount(targets.clone());

        // A file, through a symlink that stays inside.
        let got = prepare(&vol, "inner-link/file", &t(0), "m", "c").unwrap();
        assert_eq!(std::fs::read_to_string(&got).unwrap(), "inside");
        assert!(mounts::is_mount_point(&t(0)).unwrap());
        // Again: the same bind is kept.
        prepare(&vol, "inner-link/file", &t(0), "m", "c").unwrap();
        assert_eq!(mounts::mount_points_under(&targets).unwrap().len(), 1);
        // The file replaced by another (as the atomic writer does): a new bind.
        std::fs::write(vol.join("data/file.new"), "updated").unwrap();
        std::fs::rename(vol.join("data/file.new"), vol.join("data/file")).unwrap();
        assert_eq!(
            std::fs::read_to_string(t(0)).unwrap(),
            "inside",
            "the bind pins the old file"
        );
        prepare(&vol, "data/file", &t(0), "m", "c").unwrap();
        assert_eq!(std::fs::read_to_string(t(0)).unwrap(), "updated");
        assert_eq!(mounts::mount_points_under(&targets).unwrap().len(), 1);

        // A missing path is created as directories with the volume's mode.
        std::fs::set_permissions(&vol, std::fs::Permissions::from_mode(0o770)).unwrap();
        prepare(&vol, "new/dir", &t(1), "m", "c").unwrap();
        assert!(vol.join("new/dir").is_dir());
        assert_eq!(
            std::fs::metadata(vol.join("new/dir"))
                .unwrap()
                .permissions()
                .mode()
                & 0o777,
            0o770
        );
        assert!(std::fs::metadata(t(1)).unwrap().is_dir());

        // Escapes through symlinks are refused, and nothing is created outside.
        let e = prepare(&vol, "escape/secret", &t(2), "m", "c").unwrap_err();
        assert!(e.to_string().contains("not within volume path"), "{e}");
        let e = prepare(&vol, "escape/newdir", &t(3), "logs", "app").unwrap_err();
        assert_eq!(
            e.to_string(),
            "failed to create subPath directory for volumeMount \"logs\" of container \"app\""
        );
        assert!(!outside.join("newdir").exists());
        assert!(!t(2).exists() && !t(3).exists());
        drop(guard);
        assert!(mounts::mount_points_under(&targets).unwrap().is_empty());
    }

    #[test]
    fn opening_refuses_symlinks() {
        let tmp = tempfile::tempdir().unwrap();
        std::fs::create_dir(tmp.path().join("d")).unwrap();
        std::os::unix::fs::symlink("/etc", tmp.path().join("l")).unwrap();
        assert!(open_beneath(tmp.path(), Path::new("d")).is_ok());
        assert!(open_beneath(tmp.path(), Path::new("l")).is_err());
        assert!(open_beneath(tmp.path(), Path::new("")).is_ok());
    }

    struct Unmount(PathBuf);
    impl Drop for Unmount {
        fn drop(&mut self) {
            let _ = mounts::unmount_all_under(&self.0);
        }
    }
}
