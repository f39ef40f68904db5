//! `objects.wal`: the single-server write-ahead log of Mutations, with group commit,
//! replay on start and checkpoints.
//!
//! STUB (replaced by the WAL work): `Wal::open` replays nothing and `WalWriter` applies
//! Mutations to the store without persisting them. The public API below is the contract the
//! server assembly codes against.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::mutation::Mutation;
use super::store::Store;
use super::writer::{WriteError, WriteFuture, Writer};

/// Tunables of the WAL.
#[derive(Debug, Clone)]
pub struct WalConfig {
    /// Write a checkpoint after this many Mutations since the last one.
    pub checkpoint_every: u64,
}

impl Default for WalConfig {
    fn default() -> Self {
        WalConfig {
            checkpoint_every: 100_000,
        }
    }
}

/// Why the WAL could not be opened or written.
#[derive(Debug, thiserror::Error)]
pub enum WalError {
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path}: corrupt record at offset {offset}: {reason}")]
    Corrupt {
        path: PathBuf,
        offset: u64,
        reason: String,
    },
}

/// Statistics of opening the WAL (for logs and sd_notify STATUS lines).
#[derive(Debug, Clone, Default)]
pub struct ReplayReport {
    pub checkpoint_objects: usize,
    pub replayed_mutations: u64,
    pub truncated_tail_at: Option<u64>,
}

/// The WAL-backed writer of a single server.
pub struct WalWriter {
    store: Arc<Store>,
}

impl WalWriter {
    /// Opens (or creates) `<data_dir>/objects.wal`, replays it into `store`, and starts the
    /// flush thread.
    pub fn open(
        _data_dir: &Path,
        store: Arc<Store>,
        _config: WalConfig,
    ) -> Result<(WalWriter, ReplayReport), WalError> {
        Ok((WalWriter { store }, ReplayReport::default()))
    }
}

impl Writer for WalWriter {
    fn write(&self, mutation: Mutation) -> WriteFuture<'_> {
        Box::pin(async move { self.store.apply(mutation).map_err(WriteError::from) })
    }
}
