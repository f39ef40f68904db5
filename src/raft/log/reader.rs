//! `LogReader`: openraft's `RaftLogReader` over the log. Recent entries come from the cache;
//! older ones are read back from their segment with `pread` (outside the state lock) and
//! checked against their CRC. Committed entries read for applying leave the cache (see
//! `read_committed_once`).

use std::fs::File;
use std::ops::{Bound, RangeBounds};
use std::os::unix::fs::FileExt;
use std::path::PathBuf;
use std::sync::Arc;

use openraft::{ErrorSubject, ErrorVerb, OptionalSend, RaftLogReader};

use super::error::LogError;
use super::format;
use super::storage::{storage_error, Inner};
use crate::raft::types::{Entry, StorageError, TypeConfig};
use crate::storage::record::{self, Decoded};

/// Cap on the bytes `limited_get_log_entries` returns at once (at least one entry always).
const LIMITED_BYTES: usize = 4 << 20;

/// Reads entries of a `LogStore`; cheap to clone.
#[derive(Clone)]
pub struct LogReader {
    pub(crate) inner: Arc<Inner>,
}

enum Planned {
    Cached(Entry),
    OnDisk {
        file: Arc<File>,
        path: PathBuf,
        offset: u64,
        len: u32,
    },
}

impl LogReader {
    /// Entries with indexes in `[start, end)` that exist, stopping after `byte_cap` bytes.
    pub fn read(&self, start: u64, end: u64, byte_cap: usize) -> Result<Vec<Entry>, LogError> {
        let plan = {
            let st = self.inner.state.read();
            st.usable()?;
            let mut plan = Vec::new();
            let Some(first) = st.first_index() else {
                return Ok(Vec::new());
            };
            let mut bytes = 0usize;
            let mut index = start.max(first);
            while index < end {
                let Some(slot) = st.slot(index) else { break };
                if !plan.is_empty() && bytes + slot.len as usize > byte_cap {
                    break;
                }
                bytes += slot.len as usize;
                plan.push(match &slot.entry {
                    Some(entry) => Planned::Cached((**entry).clone()),
                    None => on_disk(&st, index, slot.seq, slot.offset, slot.len)?,
                });
                index += 1;
            }
            plan
        };
        complete(plan)
    }

    /// Like `read`, but a cached entry at or below the committed index whose record the flush
    /// thread has already written is handed over instead of cloned, and leaves the cache (a
    /// later read decodes it from its segment). This is the state machine's read: entries are
    /// applied once, after replication has read them, so cloning every Mutation of every entry
    /// only to drop the cached copy later would be pure cost.
    pub fn read_committed_once(&self, start: u64, end: u64) -> Result<Vec<Entry>, LogError> {
        let plan = {
            let mut st = self.inner.state.write();
            st.usable()?;
            let mut plan = Vec::new();
            let Some(first) = st.first_index() else {
                return Ok(Vec::new());
            };
            let committed = st.committed.map(|c| c.index);
            let written = st.written_wseq;
            let mut handed_over = 0usize;
            let mut index = start.max(first);
            while index < end {
                let Some(slot) = usize::try_from(index - first)
                    .ok()
                    .and_then(|pos| st.slots.get_mut(pos))
                else {
                    break;
                };
                let (seq, offset, len) = (slot.seq, slot.offset, slot.len);
                let hand_over = committed.is_some_and(|c| index <= c) && slot.wseq <= written;
                let cached = match slot.entry.take() {
                    Some(entry) if hand_over => {
                        handed_over += len as usize;
                        Some(*entry)
                    }
                    Some(entry) => {
                        let copy = (*entry).clone();
                        slot.entry = Some(entry);
                        Some(copy)
                    }
                    None => None,
                };
                plan.push(match cached {
                    Some(entry) => Planned::Cached(entry),
                    None => on_disk(&st, index, seq, offset, len)?,
                });
                index += 1;
            }
            st.cache_bytes -= handed_over;
            plan
        };
        complete(plan)
    }
}

/// Where to read an entry that is no longer cached.
fn on_disk(
    st: &super::state::State,
    index: u64,
    seq: u64,
    offset: u64,
    len: u32,
) -> Result<Planned, LogError> {
    let info = st
        .segments
        .get(&seq)
        .ok_or_else(|| LogError::Invalid(format!("entry {index} in a deleted segment")))?;
    Ok(Planned::OnDisk {
        file: info.file.clone(),
        path: info.path.clone(),
        offset,
        len,
    })
}

/// Reads and decodes the planned entries that are on disk (outside the state lock).
fn complete(plan: Vec<Planned>) -> Result<Vec<Entry>, LogError> {
    let mut buf = Vec::new();
    plan.into_iter()
        .map(|p| match p {
            Planned::Cached(entry) => Ok(entry),
            Planned::OnDisk {
                file,
                path,
                offset,
                len,
            } => {
                buf.resize(len as usize, 0);
                file.read_exact_at(&mut buf, offset)
                    .map_err(|e| LogError::io(&path, e))?;
                match record::decode_at(&buf, 0) {
                    Decoded::Record {
                        record_type: format::ENTRY,
                        payload,
                        ..
                    } => format::decode_entry(payload)
                        .map_err(|r| LogError::corrupt(&path, offset, r)),
                    Decoded::Record { record_type, .. } => Err(LogError::corrupt(
                        &path,
                        offset,
                        format!("expected an entry, found record type {record_type}"),
                    )),
                    Decoded::End => Err(LogError::corrupt(&path, offset, "entry is missing")),
                    Decoded::Invalid(e) => Err(LogError::corrupt(&path, offset, e.to_string())),
                }
            }
        })
        .collect()
}

fn bounds(range: &impl RangeBounds<u64>) -> (u64, u64) {
    let start = match range.start_bound() {
        Bound::Included(s) => *s,
        Bound::Excluded(s) => s.saturating_add(1),
        Bound::Unbounded => 0,
    };
    let end = match range.end_bound() {
        Bound::Included(e) => e.saturating_add(1),
        Bound::Excluded(e) => *e,
        Bound::Unbounded => u64::MAX,
    };
    (start, end)
}

fn read_error(e: LogError) -> StorageError {
    storage_error(ErrorVerb::Read, ErrorSubject::Logs, e)
}

impl RaftLogReader<TypeConfig> for LogReader {
    async fn try_get_log_entries<RB: RangeBounds<u64> + Clone + std::fmt::Debug + OptionalSend>(
        &mut self,
        range: RB,
    ) -> Result<Vec<Entry>, StorageError> {
        // openraft reads through here to apply committed entries (replication uses
        // `limited_get_log_entries`), so committed entries are handed over, not cloned.
        let (start, end) = bounds(&range);
        self.read_committed_once(start, end).map_err(read_error)
    }

    async fn limited_get_log_entries(
        &mut self,
        start: u64,
        end: u64,
    ) -> Result<Vec<Entry>, StorageError> {
        self.read(start, end, LIMITED_BYTES).map_err(read_error)
    }
}
