//! The persisted server list, `servers.json` (in the balancer's state directory, in the
//! agent's node directory), so a restarted process finds the cluster even when the servers
//! given with `--server` are gone:
//!
//! ```json
//! {"version": 1, "seeds": ["10.0.0.1:6443"], "servers": ["10.0.0.1:6443", "10.0.0.2:6443"]}
//! ```
//!
//! `seeds` are the `--server` addresses of the run that wrote it; a file written for other
//! seeds belongs to another configuration and is ignored. `servers` are the cluster's API
//! addresses as last learned. Written atomically (temp file, fsync, rename) on every change.

use std::io;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::storage::fsutil::write_atomic;

/// The file name inside the state directory.
const FILE_NAME: &str = "servers.json";
const VERSION: u32 = 1;

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct Remembered {
    version: u32,
    seeds: Vec<String>,
    servers: Vec<String>,
}

/// Why the file could not be read or written.
#[derive(Debug, thiserror::Error)]
pub enum PersistError {
    #[error("reading {}: {source}", path.display())]
    Read { path: PathBuf, source: io::Error },
    /// The file is there but damaged, or not a server list.
    #[error("{} is not a server list: {source}", path.display())]
    Corrupt {
        path: PathBuf,
        source: serde_json::Error,
    },
    /// Written by a newer litek8s (or damaged in a way that still parses).
    #[error("{} has version {found}, expected {VERSION}", path.display())]
    Version { path: PathBuf, found: u32 },
    #[error("creating {}: {source}", path.display())]
    CreateDir { path: PathBuf, source: io::Error },
    #[error("writing {}: {source}", path.display())]
    Write { path: PathBuf, source: io::Error },
}

/// The state file of one process.
#[derive(Debug, Clone)]
pub struct StateFile {
    path: PathBuf,
}

impl StateFile {
    pub fn in_dir(dir: &Path) -> StateFile {
        StateFile {
            path: dir.join(FILE_NAME),
        }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The remembered servers for these `seeds`: `Ok(None)` when there is no file or it was
    /// written for other seeds (logged); `Err` when it cannot be read or parsed.
    pub fn load(&self, seeds: &[String]) -> Result<Option<Vec<String>>, PersistError> {
        let path = || self.path.clone();
        let text = match std::fs::read(&self.path) {
            Ok(text) => text,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
            Err(source) => {
                return Err(PersistError::Read {
                    path: path(),
                    source,
                })
            }
        };
        let remembered: Remembered =
            serde_json::from_slice(&text).map_err(|source| PersistError::Corrupt {
                path: path(),
                source,
            })?;
        if remembered.version != VERSION {
            return Err(PersistError::Version {
                path: path(),
                found: remembered.version,
            });
        }
        if remembered.seeds != seeds {
            tracing::info!(
                "{} was written for --server {:?}, not {:?}: ignored",
                self.path.display(),
                remembered.seeds,
                seeds
            );
            return Ok(None);
        }
        Ok(Some(remembered.servers))
    }

    /// Replaces the file with this list (creating the directory, mode 0700, if needed).
    pub fn save(&self, seeds: &[String], servers: &[String]) -> Result<(), PersistError> {
        let dir = self.path.parent().unwrap_or(Path::new("."));
        if !dir.exists() {
            use std::os::unix::fs::DirBuilderExt;
            std::fs::DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(dir)
                .map_err(|source| PersistError::CreateDir {
                    path: dir.to_path_buf(),
                    source,
                })?;
        }
        let remembered = Remembered {
            version: VERSION,
            seeds: seeds.to_vec(),
            servers: servers.to_vec(),
        };
        // Strings only: encoding cannot fail, and an empty file would be refused on load.
        let json = serde_json::to_vec_pretty(&remembered).unwrap_or_default();
        write_atomic(&self.path, &json, 0o600).map_err(|source| PersistError::Write {
            path: self.path.clone(),
            source,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn list(items: &[&str]) -> Vec<String> {
        items.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn round_trip_and_seed_mismatch() {
        let dir = tempfile::tempdir().unwrap();
        let file = StateFile::in_dir(&dir.path().join("lb"));
        assert_eq!(file.load(&list(&["a:1"])).unwrap(), None);
        file.save(&list(&["a:1"]), &list(&["a:1", "b:1"])).unwrap();
        assert_eq!(
            file.load(&list(&["a:1"])).unwrap(),
            Some(list(&["a:1", "b:1"]))
        );
        assert_eq!(file.load(&list(&["other:1"])).unwrap(), None);
    }

    #[test]
    fn damaged_files_are_errors_not_panics() {
        let dir = tempfile::tempdir().unwrap();
        let file = StateFile::in_dir(dir.path());
        for bad in [&b""[..], b"{", b"[]", b"{\"version\":1}"] {
            std::fs::write(file.path(), bad).unwrap();
            assert!(
                matches!(file.load(&[]), Err(PersistError::Corrupt { .. })),
                "{:?}",
                String::from_utf8_lossy(bad)
            );
        }
        std::fs::write(file.path(), b"{\"version\":9,\"seeds\":[],\"servers\":[]}").unwrap();
        assert!(matches!(
            file.load(&[]),
            Err(PersistError::Version { found: 9, .. })
        ));
    }
}
