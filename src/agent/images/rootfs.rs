//! A container's root filesystem from its image's unpacked layers, in a directory the
//! caller owns (the container's directory under `pods/<uid>/`):
//!
//! ```text
//! <dir>/rootfs   the root: an overlay mount, or a copy
//! <dir>/upper    the overlay's writable layer (the container's changes)
//! <dir>/work     overlayfs' work directory
//! ```
//!
//! Overlayfs is used when it works here: the lower directories are the image's layers (top
//! first), shared by every container of the image. Whether it works is found out once, by
//! mounting a small overlay in `content/tmp/` (inside a container, or with the node
//! directory on an overlay itself, it may not), and remembered; the answer is logged once.
//! Otherwise, or when a mount is refused anyway, or when the layers are too many for one
//! mount's options (a page), the layers are copied into `<dir>/rootfs` bottom first, the
//! whiteouts and opaque directories of [`super::unpack`]'s form applied on the way; a copy
//! is built under `rootfs.tmp` and renamed, so a `rootfs` directory is always complete.
//!
//! Preparing again (an agent restart) finds the mount, or the finished copy, and keeps it; an
//! overlay whose mount went away (a reboot) is mounted again over the same upper directory.
//! [`release`] unmounts and removes all three.

use std::collections::HashMap;
use std::fs;
use std::io;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use nix::mount::{self, MntFlags, MsFlags};
use nix::sys::stat::{self, Mode, SFlag};
use nix::unistd::{Gid, Uid};

use super::files;
use super::records::ImageRecord;
use super::store::{ContentStore, StoreError};
use super::unpack::OPAQUE_XATTR;

/// How root filesystems are made.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RootfsMode {
    /// Overlayfs when the probe mount works, else copies.
    Auto,
    /// Overlayfs or an error.
    Overlay,
    /// Always copies.
    Copy,
}

/// What a prepared root filesystem is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RootfsKind {
    Overlay,
    Copy,
}

/// A prepared root filesystem.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rootfs {
    /// `<dir>/rootfs`: the `root.path` of the container's bundle.
    pub path: PathBuf,
    pub kind: RootfsKind,
}

#[derive(Debug, thiserror::Error)]
pub enum RootfsError {
    #[error("{path}: {source}")]
    Io { path: PathBuf, source: io::Error },
    #[error("mounting the overlay at {target}: {source}")]
    Mount { target: PathBuf, source: nix::Error },
    #[error("unmounting {target}: {source}")]
    Unmount { target: PathBuf, source: nix::Error },
    #[error("overlayfs does not work here ({0}) and copies are not allowed")]
    NoOverlay(String),
    #[error(transparent)]
    Layer(#[from] StoreError),
}

fn io_at(path: &Path) -> impl FnOnce(io::Error) -> RootfsError + '_ {
    move |source| RootfsError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// The longest mount option string the kernel takes (one page, with its NUL).
const MAX_MOUNT_OPTIONS: usize = 4095;

/// Makes root filesystems; remembers whether overlayfs works.
#[derive(Debug)]
pub struct RootfsBuilder {
    /// Where the probe mount goes (`content/tmp`).
    scratch: PathBuf,
    mode: RootfsMode,
    /// `Ok` when overlayfs works here, else why not.
    overlay: OnceLock<Result<(), String>>,
}

impl RootfsBuilder {
    pub fn new(scratch: &Path, mode: RootfsMode) -> RootfsBuilder {
        RootfsBuilder {
            scratch: scratch.to_path_buf(),
            mode,
            overlay: OnceLock::new(),
        }
    }

    /// Whether overlay mounts work here (probed once, blocking).
    pub fn overlay_works(&self) -> Result<(), String> {
        self.overlay
            .get_or_init(|| {
                let result = probe_overlay(&self.scratch);
                match &result {
                    Ok(()) => tracing::info!("container root filesystems: overlayfs"),
                    Err(why) => tracing::warn!(
                        "container root filesystems: copies, overlayfs does not work here ({why})"
                    ),
                }
                result
            })
            .clone()
    }

    /// The root filesystem of a container of `image` in `dir` (blocking: run it off the
    /// async runtime). The image's layers are unpacked first if they are not.
    pub fn prepare(
        &self,
        store: &ContentStore,
        image: &ImageRecord,
        dir: &Path,
    ) -> Result<Rootfs, RootfsError> {
        for layer in &image.layers {
            store.ensure_layer(layer)?;
        }
        let lowers: Vec<PathBuf> = image
            .layers
            .iter()
            .map(|l| store.layer_path(&l.diff_id))
            .collect();
        fs::create_dir_all(dir).map_err(io_at(dir))?;
        let rootfs = dir.join("rootfs");
        let upper = dir.join("upper");
        if is_mountpoint(&rootfs) {
            return Ok(Rootfs {
                path: rootfs,
                kind: RootfsKind::Overlay,
            });
        }
        if rootfs.is_dir() && !upper.exists() {
            return Ok(Rootfs {
                path: rootfs,
                kind: RootfsKind::Copy,
            });
        }
        let overlay = match self.mode {
            RootfsMode::Copy => Err("copies asked for".to_string()),
            RootfsMode::Overlay | RootfsMode::Auto => self.overlay_works(),
        };
        match overlay {
            Ok(()) => match mount_overlay(&lowers, dir) {
                Ok(()) => {
                    return Ok(Rootfs {
                        path: rootfs,
                        kind: RootfsKind::Overlay,
                    })
                }
                Err(e) if self.mode == RootfsMode::Overlay => return Err(e),
                Err(e) => tracing::warn!("{}: {e}; copying the layers instead", dir.display()),
            },
            Err(why) if self.mode == RootfsMode::Overlay => {
                return Err(RootfsError::NoOverlay(why))
            }
            Err(_) => {}
        }
        // An overlay that could not be mounted leaves its directories: a copy has none, so
        // a later prepare does not take the copy for an unmounted overlay.
        for name in ["upper", "work", "empty"] {
            let path = dir.join(name);
            files::remove(&path).map_err(io_at(&path))?;
        }
        copy_layers(&lowers, dir)?;
        Ok(Rootfs {
            path: rootfs,
            kind: RootfsKind::Copy,
        })
    }
}

/// Unmounts and removes the root filesystem in `dir` (`rootfs`, `upper`, `work`); what is
/// not there is skipped.
pub fn release(dir: &Path) -> Result<(), RootfsError> {
    let rootfs = dir.join("rootfs");
    if is_mountpoint(&rootfs) {
        unmount(&rootfs)?;
    }
    for name in ["rootfs", "rootfs.tmp", "upper", "work", "empty"] {
        let path = dir.join(name);
        files::remove(&path).map_err(io_at(&path))?;
    }
    Ok(())
}

fn unmount(target: &Path) -> Result<(), RootfsError> {
    match mount::umount2(target, MntFlags::empty()) {
        Ok(()) => Ok(()),
        // Still in use (a process with its cwd there): detach now, freed when unused.
        Err(nix::Error::EBUSY) => {
            mount::umount2(target, MntFlags::MNT_DETACH).map_err(|source| RootfsError::Unmount {
                target: target.to_path_buf(),
                source,
            })
        }
        Err(source) => Err(RootfsError::Unmount {
            target: target.to_path_buf(),
            source,
        }),
    }
}

/// Whether `path` is a mount point: a directory on another device than its parent.
pub fn is_mountpoint(path: &Path) -> bool {
    let (Ok(meta), Some(parent)) = (fs::symlink_metadata(path), path.parent()) else {
        return false;
    };
    match fs::metadata(parent) {
        Ok(parent) => meta.is_dir() && meta.dev() != parent.dev(),
        Err(_) => false,
    }
}

fn mount_overlay(lowers: &[PathBuf], dir: &Path) -> Result<(), RootfsError> {
    let rootfs = dir.join("rootfs");
    let upper = dir.join("upper");
    let work = dir.join("work");
    for d in [&rootfs, &upper, &work] {
        fs::create_dir_all(d).map_err(io_at(d))?;
    }
    // An image without layers still needs one lower directory.
    let empty = dir.join("empty");
    let lowers: Vec<&Path> = if lowers.is_empty() {
        fs::create_dir_all(&empty).map_err(io_at(&empty))?;
        vec![empty.as_path()]
    } else {
        lowers.iter().rev().map(PathBuf::as_path).collect()
    };
    let mut all: Vec<&Path> = lowers.clone();
    all.extend([upper.as_path(), work.as_path()]);
    if let Some(bad) = all
        .iter()
        .find(|p| p.to_string_lossy().contains([',', ':', '\\']))
    {
        return Err(RootfsError::Io {
            path: bad.to_path_buf(),
            source: io::Error::new(
                io::ErrorKind::InvalidInput,
                "a path with ',', ':' or '\\' cannot be an overlay mount option",
            ),
        });
    }
    let lowerdir: Vec<String> = lowers.iter().map(|p| p.display().to_string()).collect();
    let options = format!(
        "lowerdir={},upperdir={},workdir={}",
        lowerdir.join(":"),
        upper.display(),
        work.display()
    );
    if options.len() > MAX_MOUNT_OPTIONS {
        return Err(RootfsError::Io {
            path: rootfs,
            source: io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "{} layers make the mount options {} bytes, over a page",
                    lowers.len(),
                    options.len()
                ),
            ),
        });
    }
    mount::mount(
        Some("overlay"),
        &rootfs,
        Some("overlay"),
        MsFlags::empty(),
        Some(options.as_str()),
    )
    .map_err(|source| RootfsError::Mount {
        target: rootfs,
        source,
    })
}

/// Mounts a small overlay with a whiteout in `scratch`, checks it reads as one, unmounts.
fn probe_overlay(scratch: &Path) -> Result<(), String> {
    let dir = scratch.join(format!("overlay-probe-{}", std::process::id()));
    let result = (|| -> Result<(), String> {
        let lower = dir.join("lower");
        fs::create_dir_all(&lower).map_err(|e| e.to_string())?;
        fs::write(lower.join("kept"), b"x").map_err(|e| e.to_string())?;
        fs::write(lower.join("hidden"), b"x").map_err(|e| e.to_string())?;
        let top = dir.join("top");
        fs::create_dir_all(&top).map_err(|e| e.to_string())?;
        stat::mknod(
            &top.join("hidden"),
            SFlag::S_IFCHR,
            Mode::empty(),
            stat::makedev(0, 0),
        )
        .map_err(|e| format!("whiteout device: {e}"))?;
        mount_overlay(&[lower, top], &dir).map_err(|e| e.to_string())?;
        let rootfs = dir.join("rootfs");
        let seen = (rootfs.join("kept").exists(), rootfs.join("hidden").exists());
        unmount(&rootfs).map_err(|e| e.to_string())?;
        match seen {
            (true, false) => Ok(()),
            _ => Err("the probe mount did not apply its whiteout".to_string()),
        }
    })();
    if is_mountpoint(&dir.join("rootfs")) {
        let _ = mount::umount2(&dir.join("rootfs"), MntFlags::MNT_DETACH);
    }
    let _ = files::remove(&dir);
    result
}

/// Copies `lowers` (bottom first) into `<dir>/rootfs`, through `rootfs.tmp`.
fn copy_layers(lowers: &[PathBuf], dir: &Path) -> Result<(), RootfsError> {
    let tmp = dir.join("rootfs.tmp");
    files::remove(&tmp).map_err(io_at(&tmp))?;
    fs::create_dir(&tmp).map_err(io_at(&tmp))?;
    fs::set_permissions(&tmp, fs::Permissions::from_mode(0o755)).map_err(io_at(&tmp))?;
    for layer in lowers {
        let mut links = HashMap::new();
        merge(layer, &tmp, &mut links)?;
    }
    let rootfs = dir.join("rootfs");
    files::remove(&rootfs).map_err(io_at(&rootfs))?;
    fs::rename(&tmp, &rootfs).map_err(io_at(&rootfs))
}

/// Merges the layer directory `src` into `dst` (a real directory) as overlayfs would show
/// it: whiteouts remove, an opaque directory first empties what lower layers put there.
/// Nothing in `dst` is ever followed: a symlink or file where a directory comes is replaced.
fn merge(
    src: &Path,
    dst: &Path,
    links: &mut HashMap<(u64, u64), PathBuf>,
) -> Result<(), RootfsError> {
    if files::get_xattr(src, OPAQUE_XATTR)
        .map_err(io_at(src))?
        .as_deref()
        == Some(b"y")
    {
        for entry in fs::read_dir(dst).map_err(io_at(dst))? {
            let path = entry.map_err(io_at(dst))?.path();
            files::remove(&path).map_err(io_at(&path))?;
        }
    }
    for entry in fs::read_dir(src).map_err(io_at(src))? {
        let entry = entry.map_err(io_at(src))?;
        let from = entry.path();
        let to = dst.join(entry.file_name());
        let meta = fs::symlink_metadata(&from).map_err(io_at(&from))?;
        let kind = meta.file_type();
        use std::os::unix::fs::FileTypeExt;
        if kind.is_char_device() && meta.rdev() == 0 {
            files::remove(&to).map_err(io_at(&to))?;
            continue;
        }
        if kind.is_dir() {
            match fs::symlink_metadata(&to) {
                Ok(m) if m.is_dir() => {}
                Ok(_) => {
                    files::remove(&to).map_err(io_at(&to))?;
                    fs::create_dir(&to).map_err(io_at(&to))?;
                }
                Err(_) => fs::create_dir(&to).map_err(io_at(&to))?,
            }
            merge(&from, &to, links)?;
            copy_metadata(&from, &to, &meta)?;
            continue;
        }
        files::remove(&to).map_err(io_at(&to))?;
        if meta.nlink() > 1 {
            if let Some(first) = links.get(&(meta.dev(), meta.ino())) {
                fs::hard_link(first, &to).map_err(io_at(&to))?;
                continue;
            }
            links.insert((meta.dev(), meta.ino()), to.clone());
        }
        if kind.is_file() {
            fs::copy(&from, &to).map_err(io_at(&to))?;
        } else if kind.is_symlink() {
            let target = fs::read_link(&from).map_err(io_at(&from))?;
            std::os::unix::fs::symlink(&target, &to).map_err(io_at(&to))?;
        } else {
            let flag = if kind.is_char_device() {
                SFlag::S_IFCHR
            } else if kind.is_block_device() {
                SFlag::S_IFBLK
            } else if kind.is_fifo() {
                SFlag::S_IFIFO
            } else {
                // A socket: nothing an image can meaningfully carry.
                continue;
            };
            stat::mknod(&to, flag, Mode::from_bits_truncate(0o600), meta.rdev())
                .map_err(|e| io_at(&to)(e.into()))?;
        }
        copy_metadata(&from, &to, &meta)?;
    }
    Ok(())
}

/// Owner, mode (not for symlinks), xattrs (overlay's own left out) and mtime of `from` onto
/// `to`.
fn copy_metadata(from: &Path, to: &Path, meta: &fs::Metadata) -> Result<(), RootfsError> {
    let symlink = meta.file_type().is_symlink();
    let (uid, gid) = (
        Some(Uid::from_raw(meta.uid())),
        Some(Gid::from_raw(meta.gid())),
    );
    let owned = if symlink {
        nix::unistd::fchownat(None, to, uid, gid, nix::fcntl::AtFlags::AT_SYMLINK_NOFOLLOW)
    } else {
        nix::unistd::chown(to, uid, gid)
    };
    owned.map_err(|e| io_at(to)(e.into()))?;
    if !symlink {
        fs::set_permissions(to, fs::Permissions::from_mode(meta.mode() & 0o7777))
            .map_err(io_at(to))?;
    }
    for name in files::list_xattrs(from).unwrap_or_default() {
        if name.starts_with("trusted.overlay.") {
            continue;
        }
        if let Ok(Some(value)) = files::get_xattr(from, &name) {
            let _ = files::set_xattr(to, &name, &value);
        }
    }
    let _ = files::set_times(to, meta.mtime().max(0) as u64);
    Ok(())
}
