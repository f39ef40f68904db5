//! Who a server is in the cluster: its Raft node id, name and addresses (`Member`, carried in
//! openraft's `BasicNode` as JSON), and the identity file `<data-dir>/raft/member.json` whose
//! presence means "this data directory belongs to a cluster".

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::error::{read_optional, write_file, ClusterError};
use crate::raft::types::NodeId;

/// One server as the membership records it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Member {
    pub name: String,
    /// `host:port` of its Raft listener.
    pub raft: String,
    /// `host:port` of its API listener (forwarded requests, joins).
    pub api: String,
}

impl Member {
    /// The openraft node value: this member as JSON in `BasicNode::addr`.
    pub fn to_node(&self) -> openraft::BasicNode {
        openraft::BasicNode::new(serde_json::to_string(self).unwrap_or_default())
    }

    /// Reads a member back from a node value; a node that is not ours reads as unnamed.
    pub fn from_node(node: &openraft::BasicNode) -> Member {
        serde_json::from_str(&node.addr).unwrap_or_else(|_| Member {
            name: String::new(),
            raft: node.addr.clone(),
            api: String::new(),
        })
    }
}

/// The identity file of a cluster member.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Identity {
    pub node_id: NodeId,
    pub name: String,
}

/// Where cluster state lives inside the data directory.
#[derive(Debug, Clone)]
pub struct ClusterDir {
    root: PathBuf,
}

impl ClusterDir {
    pub fn new(data_dir: &Path) -> ClusterDir {
        ClusterDir {
            root: data_dir.to_path_buf(),
        }
    }

    pub fn raft(&self) -> PathBuf {
        self.root.join("raft")
    }
    pub fn log(&self) -> PathBuf {
        self.raft().join("log")
    }
    pub fn snapshot(&self) -> PathBuf {
        self.raft().join("snapshot")
    }
    pub fn identity_file(&self) -> PathBuf {
        self.raft().join("member.json")
    }
    pub fn secret_file(&self) -> PathBuf {
        self.root.join("cluster-secret")
    }
    pub fn join_token_file(&self) -> PathBuf {
        self.root.join("join-token")
    }

    /// The identity, if this directory already belongs to a cluster.
    pub fn identity(&self) -> Result<Option<Identity>, ClusterError> {
        let path = self.identity_file();
        let Some(text) = read_optional(&path)? else {
            return Ok(None);
        };
        serde_json::from_str(&text)
            .map(Some)
            .map_err(|e| ClusterError::corrupt(&path, format!("not a member identity: {e}")))
    }

    /// Writes the identity last of all cluster files: its presence marks a complete join.
    pub fn write_identity(&self, identity: &Identity) -> Result<(), ClusterError> {
        std::fs::create_dir_all(self.raft()).map_err(ClusterError::io(self.raft()))?;
        let json = serde_json::to_vec_pretty(identity).unwrap_or_default();
        write_file(
            &self.identity_file(),
            &json,
            crate::storage::fsutil::SECRET_MODE,
        )
    }
}

/// A fresh node id: random, never 0, so a server that rejoins with an empty data directory
/// is a new Raft node even under its old name.
pub fn new_node_id() -> NodeId {
    loop {
        let id: u64 = rand::random::<u64>() >> 1;
        if id != 0 {
            return id;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn member_round_trips_through_basic_node() {
        let m = Member {
            name: "lk1".into(),
            raft: "127.0.0.1:6444".into(),
            api: "127.0.0.1:6443".into(),
        };
        assert_eq!(Member::from_node(&m.to_node()), m);
        assert_eq!(
            Member::from_node(&openraft::BasicNode::new("x:1")).raft,
            "x:1"
        );
    }

    #[test]
    fn identity_round_trips_and_corruption_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let cd = ClusterDir::new(dir.path());
        assert_eq!(cd.identity().unwrap(), None);
        let id = Identity {
            node_id: new_node_id(),
            name: "lk1".into(),
        };
        cd.write_identity(&id).unwrap();
        assert_eq!(cd.identity().unwrap(), Some(id));
        std::fs::write(cd.identity_file(), "{").unwrap();
        assert!(cd.identity().is_err());
    }
}
