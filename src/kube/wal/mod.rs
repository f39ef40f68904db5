//! `objects.wal`: the single-server write-ahead log of Mutations, with group commit,
//! replay on start and checkpoints.
//!
//! # File format
//! One file, `<data_dir>/objects.wal`, of CRC-framed records (`storage::record`):
//!
//! ```text
//! checkpoint (kube::checkpoint: header, objects, end; an empty store has 0 objects)
//! MUTATION record (type 3, payload Mutation::encode())   × any number, in apply order
//! zeros to the end of the file (preallocated in chunks)
//! ```
//! Every Mutation that reached the log is in it, including ones the store then rejected
//! (conflicts and the like): replaying the same sequence onto the checkpoint gives the same
//! decisions and the same resourceVersions, and rebuilds the watch history.
//!
//! # Parts
//! - `flusher`: the group-commit thread (one write and one fdatasync per batch, then apply).
//! - `recovery`: open, create, replay, torn-tail repair and the corruption policy.
//! - `checkpointer`: replacing the file by a fresh checkpoint plus recent records.
//! - `reader`: windowed record reading; `file`: appends, preallocation, directory lock (the
//!   I/O seam of the append path is `storage::io`, shared with the Raft log).
//!
//! The WAL must be the only thing that applies Mutations to its store: checkpoints rely on
//! the store's state matching a position in the file.

mod checkpointer;
mod file;
mod flusher;
mod reader;
mod recovery;
#[cfg(test)]
mod tests;

use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};

use tokio::sync::{mpsc, oneshot};

use self::checkpointer::Checkpointer;
use self::flusher::{Flusher, Poison, Request};
use super::checkpoint::MUTATION;
use super::mutation::{ApplyError, Mutation};
use super::store::Store;
use super::writer::{WriteError, WriteFuture, Writer};
use crate::storage::io::{FileIo, RealIo};
use crate::storage::record;

/// Tunables of the WAL. Build with `..WalConfig::default()` so new fields stay compatible.
#[derive(Debug, Clone)]
pub struct WalConfig {
    /// Write a checkpoint after this many Mutations since the last one.
    pub checkpoint_every: u64,
    /// The file grows by zero-filled chunks of this many bytes.
    pub preallocate_bytes: u64,
    /// Writes queued for the flush thread at most; callers wait for room beyond that.
    pub queue_depth: usize,
}

impl Default for WalConfig {
    fn default() -> Self {
        WalConfig {
            checkpoint_every: 100_000,
            preallocate_bytes: 64 << 20,
            queue_depth: 4096,
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

/// The WAL-backed writer of a single server. Dropping it stops the flush thread after the
/// queued writes are done.
pub struct WalWriter {
    tx: Option<mpsc::Sender<Request>>,
    poison: Poison,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl WalWriter {
    /// Opens (or creates) `<data_dir>/objects.wal`, replays it into `store`, and starts the
    /// flush thread.
    pub fn open(
        data_dir: &Path,
        store: Arc<Store>,
        config: WalConfig,
    ) -> Result<(WalWriter, ReplayReport), WalError> {
        Self::open_with_io(data_dir, store, config, Arc::new(RealIo))
    }

    /// `open` with the append path's I/O swapped (tests inject failures through it).
    pub(crate) fn open_with_io(
        data_dir: &Path,
        store: Arc<Store>,
        config: WalConfig,
        io: Arc<dyn FileIo>,
    ) -> Result<(WalWriter, ReplayReport), WalError> {
        let path = recovery::wal_path(data_dir);
        let lock = file::lock_dir(data_dir).map_err(|source| WalError::Io {
            path: data_dir.to_path_buf(),
            source,
        })?;
        let chunk = config.preallocate_bytes.max(4096);
        let recovered = recovery::recover(data_dir, &store, io.as_ref(), chunk)?;
        let keep = store.config().history_window as u64;
        let checkpointer = Checkpointer::new(
            data_dir,
            recovered.since_checkpoint,
            config.checkpoint_every,
            keep,
            chunk,
        );
        let (tx, rx) = mpsc::channel(config.queue_depth.max(1));
        let poison: Poison = Arc::new(OnceLock::new());
        let flusher = Flusher {
            rx,
            store,
            segment: recovered.segment,
            io,
            poison: poison.clone(),
            checkpointer,
            path: path.clone(),
            chunk,
            lock,
        };
        let thread = std::thread::Builder::new()
            .name("wal-flush".into())
            .spawn(move || flusher.run())
            .map_err(|source| WalError::Io { path, source })?;
        Ok((
            WalWriter {
                tx: Some(tx),
                poison,
                thread: Some(thread),
            },
            recovered.report,
        ))
    }

    /// Whether a failed write or sync has stopped the WAL (the server must be restarted).
    pub fn is_poisoned(&self) -> bool {
        self.poison.get().is_some()
    }
}

impl Writer for WalWriter {
    fn write(&self, mutation: Mutation) -> WriteFuture<'_> {
        Box::pin(async move {
            if self.poison.get().is_some() {
                return Err(flusher::unavailable(&self.poison));
            }
            let payload = mutation.encode();
            if payload.len() > record::MAX_PAYLOAD {
                // It would be refused as corruption on replay, so it never reaches the log.
                return Err(WriteError::Rejected(ApplyError::Invalid {
                    key: mutation.key().clone(),
                    reason: format!("object too large ({} bytes encoded)", payload.len()),
                }));
            }
            let record = record::encode(MUTATION, &payload);
            let (reply, result) = oneshot::channel();
            let tx = self
                .tx
                .as_ref()
                .ok_or_else(|| flusher::unavailable(&self.poison))?;
            tx.send(Request {
                record,
                mutation,
                reply,
            })
            .await
            .map_err(|_| flusher::unavailable(&self.poison))?;
            result
                .await
                .map_err(|_| flusher::unavailable(&self.poison))?
        })
    }
}

impl Drop for WalWriter {
    fn drop(&mut self) {
        // Closing the queue ends the flush thread once it has done what is queued; waiting for
        // it releases the file and the directory lock before a reopen.
        drop(self.tx.take());
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}
