//! Opening `objects.wal`: create it when missing, load its checkpoint, replay its Mutations
//! into the store, and decide what to do with whatever follows the last whole record.
//!
//! The recovery policy, in one place:
//! - The checkpoint at the head of the file must be whole; anything wrong with it refuses to
//!   start (`WalError::Corrupt`).
//! - A Mutation record whose checksum holds but whose payload does not decode, or a record of
//!   an unexpected type, refuses to start.
//! - After the last whole record there may be zeros (preallocated space), or a torn tail: a
//!   short record, a header that does not decode, a checksum mismatch. If no valid record
//!   follows anywhere after it, it is the unfinished write of the moment the process died: it
//!   is zeroed, synced, and logged with its offset. If a valid record does follow, data in the
//!   middle of the log is damaged and the server refuses to start, naming file and offset.
//! - A leftover `objects.wal.tmp` is an unfinished checkpoint and is deleted.
//!
//! A process crash (SIGKILL, panic) leaves a written prefix of the last batch, which the rule
//! above repairs. A power loss can, on some devices, persist a later sector of the last,
//! never-acknowledged batch without an earlier one; that looks like damage in the middle and
//! refuses to start rather than guess (the error names the offset; the records after it were
//! never acknowledged if it is within the last batch, which an operator can confirm).

use std::fs::{self, File, OpenOptions};
use std::io;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use super::file::{self, Segment, TMP_FILE, WAL_FILE};
use super::reader::{self, Item, RecordReader};
use super::{ReplayReport, WalError};
use crate::kube::checkpoint::{self, CHECKPOINT_END, MUTATION};
use crate::kube::mutation::Mutation;
use crate::kube::store::Store;
use crate::storage::fsutil;
use crate::storage::io::{write_zeros, FileIo};
use crate::storage::record;

/// Mutations decoded before they are applied under one store lock.
const APPLY_BATCH: usize = 1024;

/// The opened, replayed log, ready for appends.
pub(super) struct Recovered {
    pub segment: Segment,
    /// Mutation records after the file's checkpoint.
    pub since_checkpoint: u64,
    pub report: ReplayReport,
}

fn io_err(path: &Path) -> impl FnOnce(io::Error) -> WalError + '_ {
    move |source| WalError::Io {
        path: path.to_path_buf(),
        source,
    }
}

fn corrupt(path: &Path, offset: u64, reason: impl Into<String>) -> WalError {
    WalError::Corrupt {
        path: path.to_path_buf(),
        offset,
        reason: reason.into(),
    }
}

/// Opens (creating if needed) `<dir>/objects.wal` and replays it into `store`.
pub(super) fn recover(
    dir: &Path,
    store: &Store,
    io: &dyn FileIo,
    chunk: u64,
) -> Result<Recovered, WalError> {
    let path = dir.join(WAL_FILE);
    let tmp = dir.join(TMP_FILE);
    match fs::remove_file(&tmp) {
        Ok(()) => tracing::info!(file = %tmp.display(), "removed an unfinished checkpoint"),
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(e) => return Err(io_err(&tmp)(e)),
    }
    if !path.exists() {
        create(dir, &path, &tmp, store, chunk)?;
    }
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .open(&path)
        .map_err(io_err(&path))?;
    let file_len = file.metadata().map_err(io_err(&path))?.len();

    let (checkpoint_objects, start) = load_checkpoint(&path, &file, file_len, store)?;
    let (replayed, end, stop) = replay(&path, &file, file_len, start, store)?;
    let truncated_tail_at = repair_tail(&path, &file, io, end, stop, file_len)?;
    Ok(Recovered {
        segment: Segment {
            file,
            end,
            len: file_len,
        },
        since_checkpoint: replayed,
        report: ReplayReport {
            checkpoint_objects,
            replayed_mutations: replayed,
            truncated_tail_at,
        },
    })
}

/// A new log: a checkpoint of the store as it is (usually empty), preallocated, made durable
/// under its final name by the temp-file, fsync, rename, fsync-directory sequence.
fn create(dir: &Path, path: &Path, tmp: &Path, store: &Store, chunk: u64) -> Result<(), WalError> {
    let mut buf = Vec::new();
    checkpoint::encode(&store.snapshot(), &mut buf);
    let file = OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(tmp)
        .map_err(io_err(tmp))?;
    file.write_all_at(&buf, 0).map_err(io_err(tmp))?;
    let len = file::round_up(buf.len() as u64 + 1, chunk);
    crate::storage::zeros::fill(&file, buf.len() as u64, len).map_err(io_err(tmp))?;
    file.sync_all().map_err(io_err(tmp))?;
    fs::rename(tmp, path).map_err(io_err(path))?;
    fsutil::fsync_dir(dir).map_err(io_err(dir))?;
    tracing::info!(file = %path.display(), "created a new write-ahead log");
    Ok(())
}

/// Loads the checkpoint at the head of the file into the store; returns its object count and
/// the offset just past it.
fn load_checkpoint(
    path: &Path,
    file: &File,
    file_len: u64,
    store: &Store,
) -> Result<(usize, u64), WalError> {
    // Gather the checkpoint's records (framed exactly as on disk, so offsets in errors from
    // `checkpoint::decode` are file offsets) and hand them to the checkpoint decoder.
    let mut reader = RecordReader::new(file, file_len);
    let mut bytes = Vec::new();
    let mut offset = 0u64;
    loop {
        match reader.at(offset).map_err(io_err(path))? {
            Item::Record {
                record_type,
                payload,
                next,
            } => {
                record::encode_into(&mut bytes, record_type, payload);
                offset = next;
                if record_type == CHECKPOINT_END || record_type == MUTATION {
                    break;
                }
            }
            Item::End => break,
            Item::Invalid(reason) => {
                return Err(corrupt(path, offset, format!("checkpoint: {reason}")));
            }
        }
    }
    let checkpoint = checkpoint::decode(&bytes, 0).map_err(|e| match e {
        checkpoint::CheckpointError::Corrupt { offset, reason } => {
            corrupt(path, offset as u64, format!("checkpoint: {reason}"))
        }
    })?;
    drop(bytes);
    let count = checkpoint.objects.len();
    store.restore(checkpoint.resource_version, checkpoint.objects);
    Ok((count, checkpoint.end_offset as u64))
}

/// Applies the Mutation records from `start` on. Returns how many there were, the offset just
/// past the last one, and why reading stopped there (`None`: zeros or end of file).
fn replay(
    path: &Path,
    file: &File,
    file_len: u64,
    start: u64,
    store: &Store,
) -> Result<(u64, u64, Option<record::InvalidRecord>), WalError> {
    // Reading and JSON-decoding records is about half the work of a replay, so it runs on its
    // own thread and hands batches to this one, which applies them in order.
    let (batches, applier) = std::sync::mpsc::sync_channel::<Vec<Mutation>>(4);
    std::thread::scope(|scope| {
        let decoder = scope.spawn(move || decode_records(path, file, file_len, start, batches));
        for batch in applier {
            // Rejections are part of the deterministic history: they were rejected when first
            // applied too, and do not consume a resourceVersion.
            store.apply_batch(batch);
        }
        decoder
            .join()
            .unwrap_or_else(|_| Err(corrupt(path, start, "the replay decoder panicked")))
    })
}

/// Reads Mutation records from `start` and sends them in batches of `APPLY_BATCH`. Returns the
/// number of records, the offset after the last whole one, and why reading stopped there.
fn decode_records(
    path: &Path,
    file: &File,
    file_len: u64,
    start: u64,
    batches: std::sync::mpsc::SyncSender<Vec<Mutation>>,
) -> Result<(u64, u64, Option<record::InvalidRecord>), WalError> {
    let mut reader = RecordReader::new(file, file_len);
    let mut offset = start;
    let mut count = 0u64;
    let mut batch = Vec::with_capacity(APPLY_BATCH);
    let stop = loop {
        match reader.at(offset).map_err(io_err(path))? {
            Item::Record {
                record_type: MUTATION,
                payload,
                next,
            } => {
                let mutation = Mutation::decode(payload).map_err(|e| {
                    corrupt(path, offset, format!("undecodable Mutation record: {e}"))
                })?;
                batch.push(mutation);
                if batch.len() == APPLY_BATCH {
                    let full = std::mem::replace(&mut batch, Vec::with_capacity(APPLY_BATCH));
                    if batches.send(full).is_err() {
                        break None;
                    }
                }
                count += 1;
                offset = next;
            }
            Item::Record { record_type, .. } => {
                return Err(corrupt(
                    path,
                    offset,
                    format!("unexpected record type {record_type} after the checkpoint"),
                ));
            }
            Item::End => break None,
            Item::Invalid(reason) => break Some(reason),
        }
    };
    // The receiver only goes away if the applying thread is gone, which ends the replay anyway.
    let _ = batches.send(batch);
    Ok((count, offset, stop))
}

/// Decides what the bytes after the last whole record at `end` are (see the module
/// documentation) and zeroes a torn tail. Returns the offset of a truncated tail.
fn repair_tail(
    path: &Path,
    file: &File,
    io: &dyn FileIo,
    end: u64,
    stop: Option<record::InvalidRecord>,
    file_len: u64,
) -> Result<Option<u64>, WalError> {
    let Some(dirty_end) = reader::last_nonzero(file, end, file_len).map_err(io_err(path))? else {
        return Ok(None);
    };
    let reason = match stop {
        Some(reason) => reason.to_string(),
        None => "non-zero bytes after the end of the log".to_string(),
    };
    // Read the whole damaged stretch (plus room for a record whose last bytes are zeros) and
    // look for any valid record in it.
    let scan_end = (dirty_end + record::MAX_PAYLOAD as u64 + 16).min(file_len);
    let mut rest = vec![0u8; (scan_end - end) as usize];
    file.read_exact_at(&mut rest, end).map_err(io_err(path))?;
    if let Some(valid) = record::scan_for_valid_record(&rest, 0) {
        return Err(corrupt(
            path,
            end,
            format!(
                "{reason}, followed by a valid record at offset {}: the log is damaged in the \
                 middle, refusing to start",
                end + valid as u64
            ),
        ));
    }
    drop(rest);
    tracing::warn!(
        file = %path.display(),
        offset = end,
        "torn write at the end of the log ({reason}); discarding {} bytes after the last \
         whole record",
        dirty_end - end
    );
    let zero_to = file::round_up(dirty_end, 8).min(file_len.max(dirty_end));
    write_zeros(io, file, end, zero_to).map_err(io_err(path))?;
    io.sync_data(file).map_err(io_err(path))?;
    Ok(Some(end))
}

/// Paths of the log in `dir` (for error messages from other parts of the WAL).
pub(super) fn wal_path(dir: &Path) -> PathBuf {
    dir.join(WAL_FILE)
}
