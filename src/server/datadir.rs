//! The data directory of one API server: where each file lives, creating the directory with
//! owner-only permissions, and reading a file with errors that name it.
//!
//! Layout (all owned by the server process):
//! - `objects.wal`: the write-ahead log of objects (see `kube::wal`).
//! - `ca.crt`, `ca.key`: the cluster CA (key 0600).
//! - `server.crt`, `server.key`: the serving certificate signed by the CA (key 0600).
//! - `admin-token`: the admin bearer token (0600).
//! - `kubeconfig.yaml`: the admin kubeconfig, unless `--kubeconfig` puts it elsewhere.

use std::fs::DirBuilder;
use std::io::ErrorKind;
use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
use std::path::{Path, PathBuf};

use super::error::ServerError;
use crate::storage::fsutil;
pub use crate::storage::fsutil::{PUBLIC_MODE, SECRET_MODE};

/// Paths inside one data directory.
#[derive(Debug, Clone)]
pub struct DataDir {
    root: PathBuf,
}

impl DataDir {
    /// Creates `root` (and its parents) with mode 0700 if it is missing, and checks that it is
    /// a directory this process can use.
    pub fn prepare(root: &Path) -> Result<DataDir, ServerError> {
        match DirBuilder::new().recursive(true).mode(0o700).create(root) {
            Ok(()) => {}
            Err(e) if e.kind() == ErrorKind::AlreadyExists => {}
            Err(e) => return Err(ServerError::io(root)(e)),
        }
        let meta = std::fs::metadata(root).map_err(ServerError::io(root))?;
        if !meta.is_dir() {
            return Err(ServerError::corrupt(root, "not a directory"));
        }
        // An existing directory keeps its mode unless it is readable by others: the keys and
        // tokens inside are protected by their own 0600, but the WAL holds Secrets.
        if meta.permissions().mode() & 0o077 != 0 {
            tracing::warn!(dir = %root.display(), mode = format_args!("{:o}", meta.permissions().mode() & 0o777), "data directory is accessible to other users; setting 0700");
            std::fs::set_permissions(root, std::fs::Permissions::from_mode(0o700))
                .map_err(ServerError::io(root))?;
        }
        Ok(DataDir {
            root: root.to_path_buf(),
        })
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    pub fn ca_cert(&self) -> PathBuf {
        self.root.join("ca.crt")
    }

    pub fn ca_key(&self) -> PathBuf {
        self.root.join("ca.key")
    }

    pub fn server_cert(&self) -> PathBuf {
        self.root.join("server.crt")
    }

    pub fn server_key(&self) -> PathBuf {
        self.root.join("server.key")
    }

    pub fn admin_token(&self) -> PathBuf {
        self.root.join("admin-token")
    }
}

/// Reads `path` as UTF-8 text; `Ok(None)` if it does not exist.
pub fn read_optional(path: &Path) -> Result<Option<String>, ServerError> {
    fsutil::read_text_optional(path).map_err(|e| match e.kind() {
        ErrorKind::InvalidData => ServerError::corrupt(path, "not UTF-8 text"),
        _ => ServerError::io(path)(e),
    })
}

/// Writes `contents` atomically with `mode`, naming the file on error.
pub fn write_file(path: &Path, contents: &[u8], mode: u32) -> Result<(), ServerError> {
    fsutil::write_file(path, contents, mode).map_err(ServerError::io(path))
}
