//! kubelet's atomic writer: the files of a configMap, secret, downwardAPI or projected volume
//! replaced all at once, so that a running container reading them sees either the old set or
//! the new one, never a mix.
//!
//! ```text
//! <volume>/
//!     ..2026_12_05_18_43_35.2951413107/   the current data (a new directory per change)
//!         key  sub/dir/file
//!     ..data -> ..2026_12_05_18_43_35.2951413107
//!     key -> ..data/key                   one symlink per top-level name of the payload
//!     sub -> ..data/sub
//! ```
//!
//! A change writes a new timestamped directory, points a new symlink `..data_tmp` at it and
//! renames that over `..data` (rename(2) replaces atomically), then adds symlinks for new
//! top-level names, removes those of names gone from the payload, and removes the old
//! directory. A container that has a file open keeps reading the old contents. Names
//! starting with `..` are the writer's: payload paths may not start with `..`, contain a `..`
//! component or be absolute. A payload equal to what is on disk (contents and modes) writes
//! nothing.
//!
//! A subPath mount of one of these files is bound to the file inside the timestamped
//! directory it resolved to when the container started, so it keeps the old contents: kubelet
//! documents the same.

use std::collections::{BTreeMap, BTreeSet};
use std::os::unix::fs::PermissionsExt;
use std::path::{Component, Path, PathBuf};

use super::VolumeError;

/// One file of a volume.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileProjection {
    pub data: Vec<u8>,
    /// Permission bits (`defaultMode` or the item's `mode`), at most 0777.
    pub mode: u32,
}

/// Relative path → file.
pub type Payload = BTreeMap<String, FileProjection>;

/// The symlink to the current data directory.
pub const DATA_DIR: &str = "..data";
const DATA_TMP: &str = "..data_tmp";

/// kubelet's limits on payload paths.
const MAX_PATH: usize = 4096;
const MAX_NAME: usize = 255;

/// Makes `dir` (which must exist) hold exactly `payload`. Returns whether anything changed.
pub fn write(dir: &Path, payload: &Payload) -> Result<bool, VolumeError> {
    let mut clean = Payload::new();
    for (path, file) in payload {
        clean.insert(clean_path(path)?, file.clone());
    }
    let old = current_data_dir(dir);
    let wanted_top: BTreeSet<String> = clean.keys().map(|p| top_level(p)).collect();
    if let Some(old) = &old {
        if same_payload(&dir.join(old), &clean)
            && wanted_top
                .iter()
                .all(|n| is_link_into_data(&dir.join(n), n))
        {
            return Ok(false);
        }
    }
    let old_top: BTreeSet<String> = old
        .as_ref()
        .map(|o| list_files(&dir.join(o)))
        .unwrap_or_default()
        .keys()
        .map(|p| top_level(p))
        .collect();

    let new = new_data_dir(dir)?;
    if let Err(e) = write_files(&dir.join(&new), &clean) {
        let _ = std::fs::remove_dir_all(dir.join(&new));
        return Err(e);
    }
    let tmp = dir.join(DATA_TMP);
    remove_any(&tmp)?;
    std::os::unix::fs::symlink(&new, &tmp)
        .map_err(|e| VolumeError::io(format!("symlink {}", tmp.display()), e))?;
    std::fs::rename(&tmp, dir.join(DATA_DIR))
        .map_err(|e| VolumeError::io(format!("rename {} to {DATA_DIR}", tmp.display()), e))?;

    for name in &wanted_top {
        let link = dir.join(name);
        if !is_link_into_data(&link, name) {
            remove_any(&link)?;
            std::os::unix::fs::symlink(Path::new(DATA_DIR).join(name), &link)
                .map_err(|e| VolumeError::io(format!("symlink {}", link.display()), e))?;
        }
    }
    for gone in old_top.difference(&wanted_top) {
        remove_any(&dir.join(gone))?;
    }
    // The previous data directory, and any left by a write that was interrupted.
    for entry in std::fs::read_dir(dir)
        .map_err(|e| VolumeError::io(format!("read {}", dir.display()), e))?
        .flatten()
    {
        let name = entry.file_name().to_string_lossy().into_owned();
        if name.starts_with("..")
            && name != DATA_DIR
            && name != new
            && entry.file_type().is_ok_and(|t| t.is_dir())
        {
            let _ = std::fs::remove_dir_all(entry.path());
        }
    }
    Ok(true)
}

/// A payload path made canonical (`a//b/./c` → `a/b/c`), or why it cannot be one
/// (kubelet's `validatePath` messages).
pub fn clean_path(path: &str) -> Result<String, VolumeError> {
    let bad = |m: String| Err(VolumeError::InvalidPath(m));
    if path.is_empty() {
        return bad(format!("must not be empty: {path:?}"));
    }
    if path.starts_with('/') {
        return bad(format!("must be relative path: {path}"));
    }
    if path.len() > MAX_PATH {
        return bad(format!(
            "must be less than or equal to {MAX_PATH} characters"
        ));
    }
    let items: Vec<&str> = path.split('/').collect();
    for item in &items {
        if *item == ".." {
            return bad(format!("must not contain '..': {path}"));
        }
        if item.len() > MAX_NAME {
            return bad(format!(
                "filenames must be less than or equal to {MAX_NAME} characters"
            ));
        }
    }
    if items[0].starts_with("..") && items[0].len() > 2 {
        return bad(format!("must not start with '..': {path}"));
    }
    let parts: Vec<&str> = items
        .into_iter()
        .filter(|i| !i.is_empty() && *i != ".")
        .collect();
    if parts.is_empty() {
        return bad(format!("must not be empty: {path:?}"));
    }
    Ok(parts.join("/"))
}

fn top_level(path: &str) -> String {
    path.split('/').next().unwrap_or(path).to_string()
}

/// The name `..data` points at, when it points at a directory of ours.
fn current_data_dir(dir: &Path) -> Option<String> {
    let target = std::fs::read_link(dir.join(DATA_DIR)).ok()?;
    let mut components = target.components();
    let name = match (components.next(), components.next()) {
        (Some(Component::Normal(n)), None) => n.to_string_lossy().into_owned(),
        _ => return None,
    };
    (name.starts_with("..") && dir.join(&name).is_dir()).then_some(name)
}

fn is_link_into_data(link: &Path, name: &str) -> bool {
    std::fs::read_link(link).is_ok_and(|t| t == Path::new(DATA_DIR).join(name))
}

/// `..<UTC time>.<random>`, created empty with mode 0755.
fn new_data_dir(dir: &Path) -> Result<String, VolumeError> {
    let stamp = chrono::Utc::now().format("%Y_%m_%d_%H_%M_%S");
    for _ in 0..16 {
        let name = format!("..{stamp}.{}", rand::random::<u32>());
        let path = dir.join(&name);
        match std::fs::create_dir(&path) {
            Ok(()) => {
                std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755))
                    .map_err(|e| VolumeError::io(format!("chmod {}", path.display()), e))?;
                return Ok(name);
            }
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(VolumeError::io(format!("create {}", path.display()), e)),
        }
    }
    Err(VolumeError::io(
        format!("create a data directory in {}", dir.display()),
        std::io::Error::from(std::io::ErrorKind::AlreadyExists),
    ))
}

fn write_files(root: &Path, payload: &Payload) -> Result<(), VolumeError> {
    for (path, file) in payload {
        let full = root.join(path);
        if let Some(parent) = full.parent() {
            std::fs::create_dir_all(parent)
                .map_err(|e| VolumeError::io(format!("create {}", parent.display()), e))?;
        }
        std::fs::write(&full, &file.data)
            .and_then(|()| {
                std::fs::set_permissions(&full, std::fs::Permissions::from_mode(file.mode & 0o777))
            })
            .map_err(|e| VolumeError::io(format!("write {}", full.display()), e))?;
    }
    Ok(())
}

/// Every regular file under `root`, by relative path.
fn list_files(root: &Path) -> BTreeMap<String, PathBuf> {
    let mut out = BTreeMap::new();
    let mut stack = vec![(root.to_path_buf(), String::new())];
    while let Some((dir, prefix)) = stack.pop() {
        for entry in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            let rel = if prefix.is_empty() {
                name
            } else {
                format!("{prefix}/{name}")
            };
            match entry.file_type() {
                Ok(t) if t.is_dir() => stack.push((entry.path(), rel)),
                Ok(_) => {
                    out.insert(rel, entry.path());
                }
                Err(_) => {}
            }
        }
    }
    out
}

fn same_payload(root: &Path, payload: &Payload) -> bool {
    let files = list_files(root);
    files.len() == payload.len()
        && payload.iter().all(|(path, want)| {
            let Some(have) = files.get(path) else {
                return false;
            };
            let mode_ok = std::fs::symlink_metadata(have)
                .is_ok_and(|m| m.permissions().mode() & 0o777 == want.mode & 0o777);
            mode_ok && std::fs::read(have).is_ok_and(|d| d == want.data)
        })
}

/// Removes a file, symlink or directory tree at `path`, if there is one.
fn remove_any(path: &Path) -> Result<(), VolumeError> {
    let result = match std::fs::symlink_metadata(path) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => Err(e),
        Ok(m) if m.is_dir() => std::fs::remove_dir_all(path),
        Ok(_) => std::fs::remove_file(path),
    };
    result.map_err(|e| VolumeError::io(format!("remove {}", path.display()), e))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn payload(entries: &[(&str, &str, u32)]) -> Payload {
        entries
            .iter()
            .map(|(p, d, m)| {
                (
                    p.to_string(),
                    FileProjection {
                        data: d.as_bytes().to_vec(),
                        mode: *m,
                    },
                )
            })
            .collect()
    }

    fn data_dir(dir: &Path) -> String {
        std::fs::read_link(dir.join(DATA_DIR))
            .unwrap()
            .to_string_lossy()
            .into_owned()
    }

    fn entries(dir: &Path) -> Vec<String> {
        let mut v: Vec<String> = std::fs::read_dir(dir)
            .unwrap()
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect();
        v.sort();
        v
    }

    #[test]
    fn writes_the_layout_and_swaps_atomically() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path();
        let first = payload(&[
            ("a", "1", 0o644),
            ("sub/b", "2", 0o400),
            ("sub/c/d", "3", 0o600),
        ]);
        assert!(write(dir, &first).unwrap());
        let ts1 = data_dir(dir);
        assert!(ts1.starts_with("..") && ts1.len() > 20, "{ts1}");
        assert_eq!(entries(dir), [ts1.as_str(), "..data", "a", "sub"]);
        assert_eq!(
            std::fs::read_link(dir.join("a")).unwrap(),
            Path::new("..data/a")
        );
        assert_eq!(std::fs::read_to_string(dir.join("sub/c/d")).unwrap(), "3");
        let mode = |p: &str| std::fs::metadata(dir.join(p)).unwrap().permissions().mode() & 0o7777;
        assert_eq!(mode("a"), 0o644);
        assert_eq!(mode("sub/b"), 0o400);
        assert_eq!(mode(&ts1), 0o755);

        // The same payload again: nothing written.
        assert!(!write(dir, &first).unwrap());
        assert_eq!(data_dir(dir), ts1);

        // A file held open across the swap keeps the old contents.
        let mut held = std::fs::File::open(dir.join("a")).unwrap();

        // New content for one key, a key gone, a key added, a mode changed.
        let second = payload(&[
            ("a", "one", 0o644),
            ("e", "5", 0o644),
            ("sub/b", "2", 0o440),
        ]);
        assert!(write(dir, &second).unwrap());
        let ts2 = data_dir(dir);
        assert_ne!(ts1, ts2);
        assert_eq!(entries(dir), [ts2.as_str(), "..data", "a", "e", "sub"]);
        assert_eq!(std::fs::read_to_string(dir.join("a")).unwrap(), "one");
        assert!(!dir.join("sub/c").exists());
        assert_eq!(mode("sub/b"), 0o440);
        let mut old = String::new();
        std::io::Read::read_to_string(&mut held, &mut old).unwrap();
        assert_eq!(old, "1");

        // A top-level name gone from the payload loses its symlink.
        let third = payload(&[("e", "5", 0o644)]);
        assert!(write(dir, &third).unwrap());
        let ts3 = data_dir(dir);
        assert_eq!(entries(dir), [ts3.as_str(), "..data", "e"]);

        // An empty payload (an optional ConfigMap that does not exist) empties the volume.
        assert!(write(dir, &Payload::new()).unwrap());
        assert_eq!(entries(dir).len(), 2);
    }

    #[test]
    fn leftovers_of_an_interrupted_write_are_cleaned_and_foreign_files_kept() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path();
        std::fs::create_dir(dir.join("..2020_01_01_00_00_00.1")).unwrap();
        std::os::unix::fs::symlink("..nowhere", dir.join(DATA_TMP)).unwrap();
        // A user-visible name that is a plain file (not ours to keep as is).
        std::fs::write(dir.join("a"), "stale").unwrap();
        std::fs::write(dir.join("foreign"), "x").unwrap();
        assert!(write(dir, &payload(&[("a", "new", 0o644)])).unwrap());
        let ts = data_dir(dir);
        assert_eq!(entries(dir), [ts.as_str(), "..data", "a", "foreign"]);
        assert_eq!(std::fs::read_to_string(dir.join("a")).unwrap(), "new");

        // `..data` pointing somewhere odd is rewritten.
        std::fs::remove_file(dir.join(DATA_DIR)).unwrap();
        std::os::unix::fs::symlink("/etc", dir.join(DATA_DIR)).unwrap();
        assert!(write(dir, &payload(&[("a", "new", 0o644)])).unwrap());
        assert_ne!(data_dir(dir), "/etc");
    }

    #[test]
    fn payload_paths_are_checked_as_kubelet_checks_them() {
        assert_eq!(clean_path("a//b/./c").unwrap(), "a/b/c");
        assert_eq!(
            clean_path("..").unwrap_err().to_string(),
            "invalid path: must not contain '..': .."
        );
        for (bad, want) in [
            ("", "invalid path: must not be empty: \"\""),
            (
                "/etc/passwd",
                "invalid path: must be relative path: /etc/passwd",
            ),
            (
                "a/../../b",
                "invalid path: must not contain '..': a/../../b",
            ),
            ("..data", "invalid path: must not start with '..': ..data"),
            ("..x/y", "invalid path: must not start with '..': ..x/y"),
        ] {
            assert_eq!(clean_path(bad).unwrap_err().to_string(), want, "{bad}");
        }
        assert!(clean_path(&"x".repeat(256)).is_err());
        let tmp = tempfile::tempdir().unwrap();
        let e = write(tmp.path(), &payload(&[("../escape", "x", 0o644)])).unwrap_err();
        assert!(matches!(e, VolumeError::InvalidPath(_)));
        assert_eq!(entries(tmp.path()).len(), 0, "nothing written");
    }

    #[test]
    fn a_payload_that_cannot_be_written_leaves_the_old_data() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path();
        assert!(write(dir, &payload(&[("a", "1", 0o644)])).unwrap());
        let before = data_dir(dir);
        // `x` both a file and a directory.
        let e = write(dir, &payload(&[("x", "1", 0o644), ("x/y", "2", 0o644)]));
        assert!(e.is_err());
        assert_eq!(data_dir(dir), before);
        assert_eq!(std::fs::read_to_string(dir.join("a")).unwrap(), "1");
        assert_eq!(entries(dir).len(), 3, "{:?}", entries(dir));
    }
}
