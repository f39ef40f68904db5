//! Raft snapshots of the state machine: the format, the file that keeps the latest one, and
//! the snapshot policy defaults.
//!
//! A snapshot is a SNAPSHOT_META record followed by a checkpoint of the store (the same
//! records `objects.wal` starts with, see `kube::checkpoint`):
//!
//! ```text
//! record type 22  SNAPSHOT_META     JSON of openraft's SnapshotMeta (last log id, membership, id)
//! record type 23  SESSIONS          JSON of the client-session table (`raft::sessions`);
//!                                   absent when the table is empty
//! record type 1   CHECKPOINT_HEADER ...                 (kube::checkpoint)
//! record type 2   OBJECT            ... × COUNT
//! record type 4   CHECKPOINT_END    ...
//! ```
//! The latest snapshot is kept in `<dir>/snapshot.bin`, replaced atomically.

use std::path::{Path, PathBuf};

use crate::kube::checkpoint::{self, Checkpoint};
use crate::kube::store::StoreSnapshot;
use crate::raft::sessions::Sessions;
use crate::raft::types::NodeId;
use crate::storage::fsutil::write_atomic;
use crate::storage::record::{self, Decoded as Record};

pub const SNAPSHOT_META: u8 = 22;
pub const SESSIONS: u8 = 23;
/// Take a snapshot after this many entries since the last one.
pub const SNAPSHOT_EVERY: u64 = 20_000;
/// Entries kept in the log before a snapshot's last index (for lagging followers).
pub const LOGS_KEPT: u64 = 2_000;

pub type SnapshotMeta = openraft::SnapshotMeta<NodeId, openraft::BasicNode>;

/// Sets the snapshot policy defaults on an openraft config.
pub fn apply_policy(config: &mut openraft::Config) {
    config.snapshot_policy = openraft::SnapshotPolicy::LogsSinceLast(SNAPSHOT_EVERY);
    config.max_in_snapshot_log_to_keep = LOGS_KEPT;
}

/// Why a snapshot could not be read or written.
#[derive(Debug, thiserror::Error)]
pub enum SnapshotError {
    #[error("{path}: {message}")]
    Io { path: PathBuf, message: String },
    #[error("snapshot corrupt at offset {offset}: {reason}")]
    Corrupt { offset: usize, reason: String },
}

/// Encodes `meta`, the session table and the store view into a snapshot.
pub fn encode(meta: &SnapshotMeta, sessions: &Sessions, store: &StoreSnapshot) -> Vec<u8> {
    let mut out = Vec::new();
    let json = serde_json::to_vec(meta).unwrap_or_default();
    record::encode_into(&mut out, SNAPSHOT_META, &json);
    if !sessions.is_empty() {
        let json = serde_json::to_vec(sessions).unwrap_or_default();
        record::encode_into(&mut out, SESSIONS, &json);
    }
    checkpoint::encode(store, &mut out);
    out
}

/// A decoded snapshot.
pub struct Decoded {
    pub meta: SnapshotMeta,
    pub sessions: Sessions,
    pub checkpoint: Checkpoint,
}

/// Decodes a whole snapshot.
pub fn decode(buf: &[u8]) -> Result<Decoded, SnapshotError> {
    let corrupt = |offset: usize, reason: String| SnapshotError::Corrupt { offset, reason };
    let (meta, next) = match record::decode_at(buf, 0) {
        Record::Record {
            record_type: SNAPSHOT_META,
            payload,
            next,
        } => {
            let meta: SnapshotMeta = serde_json::from_slice(payload)
                .map_err(|e| corrupt(0, format!("bad snapshot meta: {e}")))?;
            (meta, next)
        }
        Record::Record { record_type, .. } => {
            return Err(corrupt(
                0,
                format!("expected snapshot meta, found type {record_type}"),
            ))
        }
        Record::End => return Err(corrupt(0, "empty snapshot".into())),
        Record::Invalid(e) => return Err(corrupt(0, e.to_string())),
    };
    let (sessions, next) = match record::decode_at(buf, next) {
        Record::Record {
            record_type: SESSIONS,
            payload,
            next: after,
        } => {
            let sessions: Sessions = serde_json::from_slice(payload)
                .map_err(|e| corrupt(next, format!("bad session table: {e}")))?;
            (sessions, after)
        }
        _ => (Sessions::default(), next),
    };
    let checkpoint = checkpoint::decode(buf, next).map_err(|e| match e {
        checkpoint::CheckpointError::Corrupt { offset, reason } => corrupt(offset, reason),
    })?;
    if checkpoint.end_offset != buf.len() {
        return Err(corrupt(
            checkpoint.end_offset,
            "trailing bytes after the snapshot".into(),
        ));
    }
    Ok(Decoded {
        meta,
        sessions,
        checkpoint,
    })
}

/// The file holding the latest snapshot.
#[derive(Debug, Clone)]
pub struct SnapshotFile {
    path: PathBuf,
}

impl SnapshotFile {
    pub fn new(dir: &Path) -> Self {
        SnapshotFile {
            path: dir.join("snapshot.bin"),
        }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Replaces the file with `bytes`, durably.
    pub fn save(&self, bytes: &[u8]) -> Result<(), SnapshotError> {
        write_atomic(&self.path, bytes, 0o600).map_err(|e| self.io(e))
    }

    /// The saved snapshot, if there is one.
    pub fn load(&self) -> Result<Option<Vec<u8>>, SnapshotError> {
        match std::fs::read(&self.path) {
            Ok(bytes) => Ok(Some(bytes)),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(self.io(e)),
        }
    }

    fn io(&self, e: std::io::Error) -> SnapshotError {
        SnapshotError::Io {
            path: self.path.clone(),
            message: e.to_string(),
        }
    }
}
