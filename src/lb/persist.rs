//! The persisted server list, `<state-dir>/servers.json`, so a restarted balancer finds the
//! cluster even when the servers given with `--server` are gone:
//!
//! ```json
//! {"version": 1, "seeds": ["10.0.0.1:6443"], "servers": ["10.0.0.1:6443", "10.0.0.2:6443"]}
//! ```
//!
//! `seeds` are the `--server` addresses of the run that wrote it; a file written for other
//! seeds belongs to another configuration and is ignored. `servers` are the cluster's API
//! addresses as last learned. Written atomically (temp file, fsync, rename) on every change.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::storage::fsutil::write_atomic;

/// The file name inside the state directory.
pub const FILE_NAME: &str = "servers.json";
const VERSION: u32 = 1;

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct Remembered {
    version: u32,
    seeds: Vec<String>,
    servers: Vec<String>,
}

/// The state file of one balancer.
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
    pub fn load(&self, seeds: &[String]) -> Result<Option<Vec<String>>, String> {
        let text = match std::fs::read(&self.path) {
            Ok(text) => text,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(format!("reading {}: {e}", self.path.display())),
        };
        let remembered: Remembered = serde_json::from_slice(&text)
            .map_err(|e| format!("{} is not a server list: {e}", self.path.display()))?;
        if remembered.version != VERSION {
            return Err(format!(
                "{} has version {}, expected {VERSION}",
                self.path.display(),
                remembered.version
            ));
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
    pub fn save(&self, seeds: &[String], servers: &[String]) -> Result<(), String> {
        let dir = self.path.parent().unwrap_or(Path::new("."));
        if !dir.exists() {
            use std::os::unix::fs::DirBuilderExt;
            std::fs::DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(dir)
                .map_err(|e| format!("creating {}: {e}", dir.display()))?;
        }
        let remembered = Remembered {
            version: VERSION,
            seeds: seeds.to_vec(),
            servers: servers.to_vec(),
        };
        let json = serde_json::to_vec_pretty(&remembered).map_err(|e| e.to_string())?;
        write_atomic(&self.path, &json, 0o600)
            .map_err(|e| format!("writing {}: {e}", self.path.display()))
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
        for bad in [
            &b""[..],
            b"{",
            b"[]",
            b"{\"version\":9,\"seeds\":[],\"servers\":[]}",
        ] {
            std::fs::write(file.path(), bad).unwrap();
            assert!(
                file.load(&[]).is_err(),
                "{:?}",
                String::from_utf8_lossy(bad)
            );
        }
    }
}
