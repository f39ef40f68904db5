//! The few mount operations volumes need: tmpfs for memory-backed volumes, bind mounts
//! for subPaths, unmounting, and the kernel's mount table (`/proc/self/mountinfo`) to tell
//! what is mounted where.

use std::path::{Path, PathBuf};

use nix::mount::{MntFlags, MsFlags};

use super::VolumeError;

/// Mount points at or below `dir`, deepest first (the order to unmount them in). A `dir`
/// that does not exist has none; a mount table that cannot be read is an error (callers
/// delete directories only when they know nothing is mounted in them).
pub fn mount_points_under(dir: &Path) -> Result<Vec<PathBuf>, VolumeError> {
    let dir = match dir.canonicalize() {
        Ok(d) => d,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(VolumeError::io(format!("resolve {}", dir.display()), e)),
    };
    let table = std::fs::read_to_string(MOUNTINFO)
        .map_err(|e| VolumeError::io(format!("read {MOUNTINFO}"), e))?;
    let mut out: Vec<PathBuf> = table
        .lines()
        .filter_map(|l| l.split(' ').nth(4))
        .map(|p| PathBuf::from(unescape(p)))
        .filter(|p| p.starts_with(&dir))
        .collect();
    out.sort_by_key(|p| std::cmp::Reverse(p.components().count()));
    out.dedup();
    Ok(out)
}

const MOUNTINFO: &str = "/proc/self/mountinfo";

/// Whether something is mounted exactly at `path`.
pub fn is_mount_point(path: &Path) -> Result<bool, VolumeError> {
    let Ok(canonical) = path.canonicalize() else {
        return Ok(false);
    };
    Ok(mount_points_under(&canonical)?.contains(&canonical))
}

/// mountinfo writes space, tab, newline and backslash as `\ooo`.
fn unescape(field: &str) -> String {
    let b = field.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let octal = b
            .get(i + 1..i + 4)
            .filter(|d| d.iter().all(|c| (b'0'..=b'7').contains(c)))
            .and_then(|d| {
                let n = d.iter().fold(0u32, |n, c| n * 8 + u32::from(c - b'0'));
                u8::try_from(n).ok()
            });
        if let (b'\\', Some(n)) = (b[i], octal) {
            out.push(n);
            i += 4;
            continue;
        }
        out.push(b[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Mounts a tmpfs at `path` (an existing directory), at most `size` bytes when given.
pub fn mount_tmpfs(path: &Path, size: Option<u64>) -> Result<(), VolumeError> {
    let options = size.map(|s| format!("size={s}"));
    nix::mount::mount(
        Some("tmpfs"),
        path,
        Some("tmpfs"),
        MsFlags::empty(),
        options.as_deref(),
    )
    .map_err(|e| VolumeError::mount(format!("mount tmpfs at {}", path.display()), e))
}

/// Binds `source` (a path, `/proc/self/fd/N` too) onto `target`.
pub fn bind(source: &Path, target: &Path) -> Result<(), VolumeError> {
    nix::mount::mount(
        Some(source),
        target,
        None::<&str>,
        MsFlags::MS_BIND,
        None::<&str>,
    )
    .map_err(|e| {
        VolumeError::mount(
            format!("bind {} to {}", source.display(), target.display()),
            e,
        )
    })
}

/// Unmounts `path`; a busy mount is detached (it goes when its last user does). Not being
/// a mount point is success.
pub fn unmount(path: &Path) -> Result<(), VolumeError> {
    match nix::mount::umount2(path, MntFlags::empty()) {
        Ok(()) | Err(nix::errno::Errno::EINVAL) | Err(nix::errno::Errno::ENOENT) => Ok(()),
        Err(nix::errno::Errno::EBUSY) => nix::mount::umount2(path, MntFlags::MNT_DETACH)
            .map_err(|e| VolumeError::mount(format!("unmount {}", path.display()), e)),
        Err(e) => Err(VolumeError::mount(format!("unmount {}", path.display()), e)),
    }
}

/// Unmounts everything at or below `dir`, deepest first; what is still mounted afterwards
/// is the error.
pub fn unmount_all_under(dir: &Path) -> Result<(), VolumeError> {
    for point in mount_points_under(dir)? {
        if let Err(e) = unmount(&point) {
            tracing::warn!("{e}");
        }
    }
    let left = mount_points_under(dir)?;
    if left.is_empty() {
        Ok(())
    } else {
        Err(VolumeError::StillMounted(left))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mountinfo_escapes() {
        assert_eq!(unescape("/a\\040b"), "/a b");
        assert_eq!(unescape("/a\\134b\\011"), "/a\\b\t");
        assert_eq!(unescape("/plain"), "/plain");
        assert_eq!(unescape("/trailing\\"), "/trailing\\");
    }

    #[test]
    fn the_root_is_a_mount_point() {
        assert!(is_mount_point(Path::new("/")).unwrap());
        assert!(mount_points_under(Path::new("/proc"))
            .unwrap()
            .contains(&PathBuf::from("/proc")));
        assert!(mount_points_under(Path::new("/no/such/dir"))
            .unwrap()
            .is_empty());
    }

    #[test]
    fn tmpfs_mounts_and_unmounts() {
        if !nix::unistd::geteuid().is_root() {
            eprintln!("skipping: needs root");
            return;
        }
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("m");
        std::fs::create_dir(&dir).unwrap();
        mount_tmpfs(&dir, Some(1 << 20)).unwrap();
        assert!(is_mount_point(&dir).unwrap());
        let big = vec![0u8; 2 << 20];
        assert!(
            std::fs::write(dir.join("big"), &big).is_err(),
            "size limit holds"
        );
        unmount_all_under(tmp.path()).unwrap();
        assert!(!is_mount_point(&dir).unwrap());
        unmount(&dir).unwrap();
    }
}
