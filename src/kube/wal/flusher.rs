//! The group-commit thread: the only code that appends to `objects.wal` and applies Mutations
//! to the store.
//!
//! It blocks for one request, takes everything else already queued (up to a bound), writes all
//! their records with one write, calls `fdatasync` once, applies the batch to the store in
//! order, and completes each caller with its own result. So a caller hears back only after its
//! Mutation is durable, and concurrent callers share one sync.
//!
//! A failed write or sync poisons the WAL for good (the kernel may have dropped the dirty
//! pages, so retrying an fsync can report success for data that is gone): that batch and every
//! later request get `WriteError::Unavailable`, and nothing more is written.

use std::path::PathBuf;
use std::sync::{Arc, OnceLock};

use tokio::sync::{mpsc, oneshot};

use super::checkpointer::{Checkpointer, Fatal};
use super::file::{DirLock, Segment};
use crate::kube::mutation::Mutation;
use crate::kube::object::ObjectRef;
use crate::kube::store::Store;
use crate::kube::writer::WriteError;
use crate::storage::io::FileIo;

/// Requests taken into one batch at most.
const MAX_BATCH: usize = 1024;
/// Record bytes in one batch at most (one more request may go past it).
const MAX_BATCH_BYTES: usize = 16 << 20;

/// One caller's write.
pub(super) struct Request {
    /// The framed Mutation record, encoded by the caller.
    pub record: Vec<u8>,
    pub mutation: Mutation,
    pub reply: oneshot::Sender<Result<ObjectRef, WriteError>>,
}

/// Why writes fail once the WAL is poisoned; shared with `WalWriter` so callers fail fast.
pub(super) type Poison = Arc<OnceLock<String>>;

pub(super) fn unavailable(poison: &Poison) -> WriteError {
    WriteError::Unavailable(
        poison
            .get()
            .cloned()
            .unwrap_or_else(|| "the write-ahead log has stopped".to_string()),
    )
}

/// Everything the flush thread owns.
pub(super) struct Flusher {
    pub rx: mpsc::Receiver<Request>,
    pub store: Arc<Store>,
    pub segment: Segment,
    pub io: Arc<dyn FileIo>,
    pub poison: Poison,
    pub checkpointer: Checkpointer,
    pub path: PathBuf,
    pub chunk: u64,
    /// Held for as long as this thread appends to the log.
    pub lock: DirLock,
}

impl Flusher {
    /// The thread body: runs until every `WalWriter` handle is gone.
    pub fn run(mut self) {
        let mut batch: Vec<Request> = Vec::with_capacity(MAX_BATCH);
        let mut bytes: Vec<u8> = Vec::new();
        while let Some(first) = self.rx.blocking_recv() {
            batch.push(first);
            let mut size = batch[0].record.len();
            while batch.len() < MAX_BATCH && size < MAX_BATCH_BYTES {
                match self.rx.try_recv() {
                    Ok(request) => {
                        size += request.record.len();
                        batch.push(request);
                    }
                    Err(_) => break,
                }
            }
            if self.poison.get().is_some() {
                self.fail(&mut batch);
                continue;
            }
            bytes.clear();
            for request in &batch {
                bytes.extend_from_slice(&request.record);
            }
            let durable = self
                .segment
                .append(self.io.as_ref(), &mut bytes, self.chunk)
                .and_then(|()| self.io.sync_data(&self.segment.file));
            if let Err(e) = durable {
                self.set_poison(format!(
                    "writing {} failed at offset {}: {e}",
                    self.path.display(),
                    self.segment.end
                ));
                self.fail(&mut batch);
                continue;
            }
            let count = batch.len() as u64;
            let (mutations, replies): (Vec<_>, Vec<_>) = batch
                .drain(..)
                .map(|request| (request.mutation, request.reply))
                .unzip();
            let results = self.store.apply_batch(mutations);
            for (reply, result) in replies.into_iter().zip(results) {
                // The caller may have given up waiting; the write stands regardless.
                let _ = reply.send(result.map_err(WriteError::from));
            }
            if let Err(Fatal(reason)) =
                self.checkpointer
                    .after_batch(&self.store, &mut self.segment, &bytes, count)
            {
                self.set_poison(reason);
            }
            if bytes.capacity() > 2 * MAX_BATCH_BYTES {
                bytes = Vec::new();
            }
        }
        let healthy = self.poison.get().is_none();
        self.checkpointer
            .shutdown(healthy.then_some(&mut self.segment));
        drop(self.lock);
    }

    fn set_poison(&self, reason: String) {
        tracing::error!(
            file = %self.path.display(),
            "write-ahead log failed, refusing all further writes until restart: {reason}"
        );
        let _ = self.poison.set(reason);
    }

    fn fail(&self, batch: &mut Vec<Request>) {
        for request in batch.drain(..) {
            let _ = request.reply.send(Err(unavailable(&self.poison)));
        }
    }
}
