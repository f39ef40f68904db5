//! The record of what an apply set up, kept beside the cluster file (`FILE.applied`, JSON):
//! the one thing the hosts cannot tell, namely which machines belonged to the cluster and
//! have since left the file (to remove a server from the Raft membership and drain a node,
//! apply needs their names even when they no longer answer).

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::file::ClusterFile;
use super::plan::Observed;

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Record {
    pub servers: Vec<Recorded>,
    pub agents: Vec<Recorded>,
}

/// A machine and its name in the cluster (its hostname: the server's member name and the
/// Node's name).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Recorded {
    pub ssh: String,
    pub name: String,
}

/// Where the record of `file` lives.
pub fn path_for(file: &Path) -> PathBuf {
    let mut name = file.as_os_str().to_owned();
    name.push(".applied");
    PathBuf::from(name)
}

impl Record {
    /// An empty record when there is none yet.
    pub fn load(path: &Path) -> anyhow::Result<Record> {
        match std::fs::read(path) {
            Ok(bytes) => serde_json::from_slice(&bytes)
                .map_err(|e| anyhow::anyhow!("{}: {e}", path.display())),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Record::default()),
            Err(e) => Err(anyhow::anyhow!("read {}: {e}", path.display())),
        }
    }

    pub fn save(&self, path: &Path) -> anyhow::Result<()> {
        let text = serde_json::to_string_pretty(self)?;
        let tmp = path.with_extension("applied.tmp");
        std::fs::write(&tmp, text + "\n")
            .map_err(|e| anyhow::anyhow!("write {}: {e}", tmp.display()))?;
        std::fs::rename(&tmp, path)
            .map_err(|e| anyhow::anyhow!("rename to {}: {e}", path.display()))
    }

    /// The machines of `file` whose names are known (the probe answered).
    pub fn from_file(file: &ClusterFile, observed: &Observed) -> Record {
        Record::default().next(file, observed, &[])
    }

    /// The record after an apply: the machines of the file (named by their probe, or by this
    /// record when they did not answer) and the removals that did not finish, so that the
    /// next apply tries them again.
    pub fn next(&self, file: &ClusterFile, observed: &Observed, unfinished: &[String]) -> Record {
        let name = |ssh: &str| -> Option<String> {
            match observed.get(ssh) {
                Some(Ok(s)) => Some(s.hostname.clone()),
                _ => self
                    .servers
                    .iter()
                    .chain(&self.agents)
                    .find(|r| r.ssh == ssh)
                    .map(|r| r.name.clone()),
            }
        };
        let list = |machines: &[super::file::Machine], old: &[Recorded]| -> Vec<Recorded> {
            let mut out: Vec<Recorded> = machines
                .iter()
                .filter_map(|m| {
                    name(&m.ssh).map(|name| Recorded {
                        ssh: m.ssh.clone(),
                        name,
                    })
                })
                .collect();
            for r in old {
                if unfinished.contains(&r.ssh) && !out.iter().any(|o| o.ssh == r.ssh) {
                    out.push(r.clone());
                }
            }
            out
        };
        Record {
            servers: list(&file.servers, &self.servers),
            agents: list(&file.agents, &self.agents),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::super::plan::HostState;
    use super::*;

    #[test]
    fn a_removal_that_did_not_finish_stays_recorded_and_silent_hosts_keep_their_names() {
        let file = |servers: &str| {
            ClusterFile::parse(
                Path::new("c.yaml"),
                &format!("apiVersion: litek8s.dev/v1\nkind: Cluster\nservers: [{servers}]\n"),
            )
            .expect("valid")
            .file
        };
        let named = |n: &str| {
            Ok(HostState {
                hostname: n.into(),
                ..HostState::default()
            })
        };
        let observed: Observed = [
            ("a".to_string(), named("lk-a")),
            ("b".to_string(), named("lk-b")),
            ("c".to_string(), named("lk-c")),
        ]
        .into_iter()
        .collect();
        let first = Record::from_file(&file("{ssh: a}, {ssh: b}, {ssh: c}"), &observed);
        assert_eq!(first.servers.len(), 3);
        // b no longer answers; c left the file but its uninstall failed; a is fine.
        let observed: Observed = [
            ("a".to_string(), named("lk-a")),
            ("b".to_string(), Err("unreachable".to_string())),
        ]
        .into_iter()
        .collect();
        let next = first.next(&file("{ssh: a}, {ssh: b}"), &observed, &["c".to_string()]);
        let names: Vec<(&str, &str)> = next
            .servers
            .iter()
            .map(|r| (r.ssh.as_str(), r.name.as_str()))
            .collect();
        assert_eq!(names, [("a", "lk-a"), ("b", "lk-b"), ("c", "lk-c")]);
        // Once it is done, it is forgotten.
        let done = next.next(&file("{ssh: a}, {ssh: b}"), &observed, &[]);
        assert_eq!(done.servers.len(), 2);

        let dir = tempfile::tempdir().expect("tempdir");
        let path = path_for(&dir.path().join("cluster.yaml"));
        assert!(path.ends_with("cluster.yaml.applied"));
        assert_eq!(Record::load(&path).expect("none yet"), Record::default());
        next.save(&path).expect("save");
        assert_eq!(Record::load(&path).expect("load"), next);
    }
}
