//! The in-memory side of the log: where every live entry is on disk, the recent entries
//! themselves (so appends are readable before they are written), the vote, the committed id,
//! the purge point and the segment files. Guarded by one lock in `storage::Inner`.

use std::collections::{BTreeMap, VecDeque};
use std::fs::File;
use std::path::PathBuf;
use std::sync::Arc;

use super::error::LogError;
use crate::raft::types::{Entry, LogId, Vote};

/// One live entry.
pub(crate) struct Slot {
    pub log_id: LogId,
    /// Segment seq and byte offset of its ENTRY record, and the record's framed length.
    pub seq: u64,
    pub offset: u64,
    pub len: u32,
    /// The flush write that carries the record; the cached copy may only be dropped once the
    /// flush thread has written it (`State::written_wseq`).
    pub wseq: u64,
    pub entry: Option<Box<Entry>>,
}

/// One segment file.
pub(crate) struct SegmentInfo {
    pub file: Arc<File>,
    pub path: PathBuf,
    /// The highest entry index ever written into it (dead ones included): the segment may be
    /// deleted once the purge point reaches this.
    pub max_index: Option<u64>,
}

pub(crate) struct State {
    pub slots: VecDeque<Slot>,
    pub purged: Option<LogId>,
    pub vote: Option<Vote>,
    pub committed: Option<LogId>,
    pub segments: BTreeMap<u64, SegmentInfo>,
    /// The segment being appended to (0 before the first exists), its size and the offset
    /// where the next record goes.
    pub active: u64,
    pub active_capacity: u64,
    pub write_offset: u64,
    pub next_wseq: u64,
    pub written_wseq: u64,
    pub cache_bytes: usize,
    pub cache_cap: usize,
    /// Every slot below this index has no cached entry.
    pub evict_from: u64,
    /// Set for good by the first failed write or sync.
    pub failed: Option<String>,
}

impl State {
    pub fn new(cache_cap: usize) -> Self {
        State {
            slots: VecDeque::new(),
            purged: None,
            vote: None,
            committed: None,
            segments: BTreeMap::new(),
            active: 0,
            active_capacity: 0,
            write_offset: 0,
            next_wseq: 1,
            written_wseq: 0,
            cache_bytes: 0,
            cache_cap,
            evict_from: 0,
            failed: None,
        }
    }

    pub fn usable(&self) -> Result<(), LogError> {
        match &self.failed {
            Some(reason) => Err(LogError::Failed(reason.clone())),
            None => Ok(()),
        }
    }

    /// The last entry's id, or the purge point when no entry is left.
    pub fn last_log_id(&self) -> Option<LogId> {
        self.slots.back().map(|s| s.log_id).or(self.purged)
    }

    pub fn first_index(&self) -> Option<u64> {
        self.slots.front().map(|s| s.log_id.index)
    }

    pub fn slot(&self, index: u64) -> Option<&Slot> {
        let first = self.first_index()?;
        let pos = usize::try_from(index.checked_sub(first)?).ok()?;
        self.slots.get(pos)
    }

    /// Removes entries at `index` and later.
    pub fn truncate_from(&mut self, index: u64) {
        while self.slots.back().is_some_and(|s| s.log_id.index >= index) {
            if let Some(slot) = self.slots.pop_back() {
                if slot.entry.is_some() {
                    self.cache_bytes -= slot.len as usize;
                }
            }
        }
        self.evict_from = self.evict_from.min(index);
    }

    /// Removes entries up to and including `index`.
    pub fn purge_upto(&mut self, index: u64) {
        while self.slots.front().is_some_and(|s| s.log_id.index <= index) {
            if let Some(slot) = self.slots.pop_front() {
                if slot.entry.is_some() {
                    self.cache_bytes -= slot.len as usize;
                }
            }
        }
    }

    /// Drops cached entries, oldest first, while the cache is over its budget; only entries
    /// the flush thread has already written can go (they are then read back from the file).
    pub fn evict(&mut self) {
        let Some(first) = self.first_index() else {
            return;
        };
        let mut index = self.evict_from.max(first);
        while self.cache_bytes > self.cache_cap {
            let written = self.written_wseq;
            let Some(pos) = usize::try_from(index - first).ok() else {
                break;
            };
            let Some(slot) = self.slots.get_mut(pos) else {
                break;
            };
            if slot.wseq > written {
                break;
            }
            if slot.entry.take().is_some() {
                self.cache_bytes -= slot.len as usize;
            }
            index += 1;
        }
        self.evict_from = index;
    }
}
