//! hostPath: a path of the node given to the pod as it is, after kubelet's type check.
//!
//! | `type` | check |
//! |---|---|
//! | `""` (unset) | none; a path that does not exist is created as a directory (0755), as the CRI runtimes do when they bind it |
//! | `DirectoryOrCreate` | created (0755, with parents) when missing, then must be a directory |
//! | `Directory` | must exist and be a directory |
//! | `FileOrCreate` | created empty (0644, parent must exist) when missing, then must be a file |
//! | `File` | must exist and be a regular file |
//! | `Socket`, `CharDevice`, `BlockDevice` | must exist and be one |
//!
//! Symlinks are followed, as kubelet's `stat` does. Failures read as kubelet's:
//! `"/p" does not exist`, `hostPath type check failed: /p is not a directory`.

use std::fs::FileType;
use std::os::unix::fs::{DirBuilderExt, FileTypeExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use serde::Deserialize;

use super::VolumeError;

/// `hostPath`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
pub struct HostPathSource {
    #[serde(default)]
    pub path: String,
    #[serde(rename = "type", default)]
    pub kind: Option<String>,
}

/// Checks (and for the `…OrCreate` types and the unset type, makes) the path; returns it.
pub fn set_up(name: &str, source: &HostPathSource) -> Result<PathBuf, VolumeError> {
    let path = Path::new(&source.path);
    if !path.is_absolute() {
        return Err(VolumeError::BadSpec {
            name: name.to_string(),
            message: format!("hostPath {:?} is not an absolute path", source.path),
        });
    }
    let p = source.path.as_str();
    let kind = source.kind.as_deref().unwrap_or("");
    let exists = std::fs::metadata(path).is_ok();
    match kind {
        "" => {
            if !exists {
                make_dir(path)?;
            }
            Ok(())
        }
        "DirectoryOrCreate" => {
            if !exists {
                make_dir(path)?;
            }
            expect(p, FileType::is_dir, "a directory")
        }
        "Directory" => expect(p, FileType::is_dir, "a directory"),
        "FileOrCreate" => {
            if !exists {
                make_file(path)?;
            }
            expect(p, FileType::is_file, "a file")
        }
        "File" => expect(p, FileType::is_file, "a file"),
        "Socket" => expect(p, FileType::is_socket, "a socket file"),
        "CharDevice" => expect(p, FileType::is_char_device, "a character device"),
        "BlockDevice" => expect(p, FileType::is_block_device, "a block device"),
        other => Err(VolumeError::HostPathInvalidType(other.to_string())),
    }?;
    Ok(path.to_path_buf())
}

fn expect(path: &str, is: fn(&FileType) -> bool, what: &'static str) -> Result<(), VolumeError> {
    match std::fs::metadata(path) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            Err(VolumeError::HostPathMissing(path.to_string()))
        }
        Err(e) => Err(VolumeError::io(format!("stat {path}"), e)),
        Ok(m) if is(&m.file_type()) => Ok(()),
        Ok(_) => Err(VolumeError::HostPathType {
            path: path.to_string(),
            what,
        }),
    }
}

fn make_dir(path: &Path) -> Result<(), VolumeError> {
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o755)
        .create(path)
        .map_err(|e| VolumeError::io(format!("mkdir {}", path.display()), e))
}

fn make_file(path: &Path) -> Result<(), VolumeError> {
    match std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(false)
        .mode(0o644)
        .open(path)
    {
        Ok(_) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(()),
        Err(e) => Err(VolumeError::io(format!("open {}", path.display()), e)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(path: &Path, kind: &str) -> Result<PathBuf, VolumeError> {
        set_up(
            "v",
            &HostPathSource {
                path: path.display().to_string(),
                kind: (!kind.is_empty()).then(|| kind.to_string()),
            },
        )
    }

    #[test]
    fn type_checks_and_messages() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("dir");
        let file = tmp.path().join("file");
        let missing = tmp.path().join("missing");
        std::fs::create_dir(&dir).unwrap();
        std::fs::write(&file, "x").unwrap();
        let sock_path = tmp.path().join("sock");
        let _sock = std::os::unix::net::UnixListener::bind(&sock_path).unwrap();
        let link = tmp.path().join("link-to-dir");
        std::os::unix::fs::symlink(&dir, &link).unwrap();

        assert_eq!(check(&dir, "Directory").unwrap(), dir);
        assert!(check(&link, "Directory").is_ok(), "symlinks are followed");
        assert!(check(&file, "File").is_ok());
        assert!(check(&sock_path, "Socket").is_ok());
        assert!(check(Path::new("/dev/null"), "CharDevice").is_ok());
        let msg = |p: &Path, k: &str| check(p, k).unwrap_err().to_string();
        let f = file.display();
        let d = dir.display();
        assert_eq!(
            msg(&file, "Directory"),
            format!("hostPath type check failed: {f} is not a directory")
        );
        assert_eq!(
            msg(&dir, "File"),
            format!("hostPath type check failed: {d} is not a file")
        );
        assert_eq!(
            msg(&dir, "Socket"),
            format!("hostPath type check failed: {d} is not a socket file")
        );
        assert_eq!(
            msg(&file, "CharDevice"),
            format!("hostPath type check failed: {f} is not a character device")
        );
        assert_eq!(
            msg(Path::new("/dev/null"), "BlockDevice"),
            "hostPath type check failed: /dev/null is not a block device"
        );
        assert_eq!(
            msg(&missing, "Directory"),
            format!("{:?} does not exist", missing.display().to_string())
        );
        assert_eq!(
            msg(&missing, "File"),
            format!("{:?} does not exist", missing.display().to_string())
        );
        assert_eq!(msg(&dir, "Fancy"), "Fancy is an invalid volume type");
        assert!(msg(Path::new("relative"), "").contains("not an absolute path"));
        assert!(!missing.exists(), "checks create nothing");
    }

    #[test]
    fn the_create_types_and_the_unset_type_create() {
        use std::os::unix::fs::PermissionsExt;
        let tmp = tempfile::tempdir().unwrap();
        let deep = tmp.path().join("a/b/c");
        check(&deep, "DirectoryOrCreate").unwrap();
        assert!(deep.is_dir());
        assert_eq!(
            std::fs::metadata(&deep).unwrap().permissions().mode() & 0o777,
            0o755
        );
        let f = tmp.path().join("a/new-file");
        check(&f, "FileOrCreate").unwrap();
        assert!(f.is_file());
        std::fs::write(&f, "kept").unwrap();
        check(&f, "FileOrCreate").unwrap();
        assert_eq!(std::fs::read_to_string(&f).unwrap(), "kept");
        // FileOrCreate does not make parents.
        let orphan = tmp.path().join("no/parent/file");
        assert!(check(&orphan, "FileOrCreate")
            .unwrap_err()
            .to_string()
            .contains("No such file"));
        // An existing file where a directory is asked for stays and fails.
        assert!(check(&f, "DirectoryOrCreate").is_err());
        let unset = tmp.path().join("unset/dir");
        check(&unset, "").unwrap();
        assert!(unset.is_dir());
        // The unset type checks nothing about what exists.
        check(&f, "").unwrap();
    }
}
