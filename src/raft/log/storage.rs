//! `LogStore`: the log's public handle and openraft's `RaftLogStorage`. Every mutation of the
//! log happens here under the state lock: records are encoded, placed at their offsets
//! (moving to a new segment when the current one is full) and queued in the same critical
//! section, so the queue order is the log order. An append that finds nobody flushing flushes
//! on its own thread (`flush`); otherwise the flush thread does.

use std::fs::File;
use std::io;
use std::ops::RangeBounds;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::thread::JoinHandle;

use openraft::storage::{LogFlushed, LogState, RaftLogStorage};
use openraft::{AnyError, ErrorSubject, ErrorVerb, OptionalSend, RaftLogReader};
use parking_lot::{Mutex, RwLock};

use super::error::LogError;
use super::flush::{self, BufferPool, Done, Flusher, Op, Queue, Submitted};
use super::format::{self, segment_path};
use super::preallocate::Preallocator;
use super::reader::LogReader;
use super::recovery;
use super::state::{SegmentInfo, Slot, State};
use crate::raft::types::{Entry, LogId, StorageError, TypeConfig, Vote};
use crate::storage::io::{FileIo, RealIo};

/// Tunables of the log engine.
#[derive(Clone)]
pub struct LogConfig {
    /// Size of each segment file (16 MiB).
    pub segment_size: u64,
    /// Bytes of recent encoded entries kept in memory (64 MiB).
    pub cache_bytes: usize,
    /// The I/O used for segment writes and syncs (tests inject failures here).
    pub io: Arc<dyn FileIo>,
}

impl Default for LogConfig {
    fn default() -> Self {
        LogConfig {
            segment_size: 16 << 20,
            cache_bytes: 64 << 20,
            io: Arc::new(RealIo),
        }
    }
}

impl std::fmt::Debug for LogConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LogConfig")
            .field("segment_size", &self.segment_size)
            .field("cache_bytes", &self.cache_bytes)
            .finish()
    }
}

pub(crate) struct Inner {
    pub dir: PathBuf,
    pub segment_size: u64,
    pub state: Arc<RwLock<State>>,
    queue: Arc<Queue>,
    pool: Arc<BufferPool>,
    prealloc: Preallocator,
    flush: Mutex<Option<JoinHandle<()>>>,
}

impl Drop for Inner {
    fn drop(&mut self) {
        self.queue.shutdown();
        if let Some(thread) = self.flush.lock().take() {
            let _ = thread.join();
        }
    }
}

/// The Raft log. Cheap to clone; all clones share one log.
#[derive(Clone)]
pub struct LogStore {
    pub(crate) inner: Arc<Inner>,
}

/// Bytes queued for one segment, growing as records are placed.
struct Run {
    /// None only before the first segment exists, when nothing fits and `place` rotates.
    file: Option<Arc<File>>,
    seq: u64,
    offset: u64,
    bytes: Vec<u8>,
    wseq: u64,
}

impl LogStore {
    /// Opens (or creates) the log in `dir`, recovering from a crash as described in
    /// `recovery`, and starts the flush and preallocation threads.
    pub fn open(dir: &Path, config: LogConfig) -> Result<LogStore, LogError> {
        let state = recovery::recover(dir, config.cache_bytes)?;
        let next = state.active + 1;
        let prealloc = Preallocator::start(dir.to_path_buf(), config.segment_size, next)
            .map_err(|e| LogError::io(dir, e))?;
        let state = Arc::new(RwLock::new(state));
        let pool = Arc::new(BufferPool::default());
        let queue = Arc::new(Queue::new(Flusher::new(
            state.clone(),
            config.io.clone(),
            dir.to_path_buf(),
            pool.clone(),
        )));
        let thread = {
            let queue = queue.clone();
            std::thread::Builder::new()
                .name("raft-log-flush".into())
                .spawn(move || flush::run(queue))
                .map_err(|e| LogError::io(dir, e))?
        };
        let store = LogStore {
            inner: Arc::new(Inner {
                dir: dir.to_path_buf(),
                segment_size: config.segment_size,
                state,
                queue,
                pool,
                prealloc,
                flush: Mutex::new(Some(thread)),
            }),
        };
        {
            let mut st = store.inner.state.write();
            if st.active == 0 {
                let mut ops = Vec::new();
                let run = store.rotate(&mut st, &mut ops, None)?;
                store.finish(&mut st, ops, run, None);
            }
        }
        Ok(store)
    }

    /// Appends entries, readable when this returns; `done` runs once they are durable (or
    /// with the error that failed the log).
    pub fn append_with(
        &self,
        entries: impl IntoIterator<Item = Entry>,
        done: impl FnOnce(io::Result<()>) + Send + 'static,
    ) -> Result<(), LogError> {
        let mut st = self.inner.state.write();
        st.usable()?;
        // Entries at or below the purge point are already covered by a snapshot; openraft's
        // suite appends such entries after a purge, and there is nothing to keep of them.
        let purged = st.purged.map(|p| p.index);
        let entries: Vec<Entry> = entries
            .into_iter()
            .filter(|e| purged.is_none_or(|p| e.log_id.index > p))
            .collect();
        let mut expected = st.last_log_id().map(|l| l.index + 1);
        for entry in &entries {
            if expected.is_some_and(|e| e != entry.log_id.index) {
                return Err(LogError::Invalid(format!(
                    "append of entry {} where {} was expected",
                    entry.log_id,
                    expected.unwrap_or_default()
                )));
            }
            expected = Some(entry.log_id.index + 1);
        }
        let mut ops = Vec::new();
        let mut run = self.current_run(&mut st);
        for entry in entries {
            // Encoded straight into the bytes queued for the flush thread; only a record that
            // has to move to the next segment is copied.
            let start = run.bytes.len();
            let len = format::encode_entry(&mut run.bytes, &entry)
                .map_err(|e| LogError::Invalid(format!("encoding entry {}: {e}", entry.log_id)))?;
            let offset;
            if st.write_offset + len as u64 <= st.active_capacity {
                offset = st.write_offset;
                st.write_offset += len as u64;
            } else {
                let record = run.bytes.split_off(start);
                (run, offset) = self.place(&mut st, &mut ops, run, &record)?;
            }
            let index = entry.log_id.index;
            st.slots.push_back(Slot {
                log_id: entry.log_id,
                seq: run.seq,
                offset,
                len: len as u32,
                wseq: run.wseq,
                entry: Some(Box::new(entry)),
            });
            st.cache_bytes += len;
            if let Some(info) = st.segments.get_mut(&run.seq) {
                info.max_index = Some(info.max_index.map_or(index, |m| m.max(index)));
            }
        }
        // Flushed on this thread when nobody else is flushing (see `flush`).
        self.push_run(&mut st, &mut ops, run);
        ops.push(Op::Done(Box::new(done)));
        let submitted = self.inner.queue.submit(ops);
        drop(st);
        if let Submitted::Claimed(ops) = submitted {
            self.inner.queue.flush_claimed(ops);
        }
        Ok(())
    }

    /// Saves the vote; durable when this returns.
    pub async fn save_vote_durably(&self, vote: &Vote) -> Result<(), LogError> {
        let (tx, rx) = tokio::sync::oneshot::channel();
        {
            let mut st = self.inner.state.write();
            st.usable()?;
            st.vote = Some(*vote);
            let mut record = Vec::new();
            format::encode_vote(&mut record, vote);
            self.write_record(&mut st, &record, Some(Box::new(move |r| drop(tx.send(r)))))?;
        }
        match rx.await {
            Ok(Ok(())) => Ok(()),
            Ok(Err(e)) => Err(LogError::Failed(e.to_string())),
            Err(_) => Err(LogError::Failed("the flush thread stopped".into())),
        }
    }

    /// The last saved vote.
    pub fn vote(&self) -> Option<Vote> {
        self.inner.state.read().vote
    }

    /// Records the committed id; written with the next flush, never waited for.
    pub fn set_committed(&self, committed: Option<LogId>) -> Result<(), LogError> {
        let mut st = self.inner.state.write();
        st.usable()?;
        if st.committed == committed {
            return Ok(());
        }
        st.committed = committed;
        let mut record = Vec::new();
        format::encode_committed(&mut record, &committed);
        self.write_record(&mut st, &record, None)
    }

    pub fn committed(&self) -> Option<LogId> {
        self.inner.state.read().committed
    }

    /// (last purged id, last id), as openraft's `get_log_state` wants them.
    pub fn log_state(&self) -> Result<(Option<LogId>, Option<LogId>), LogError> {
        let st = self.inner.state.read();
        st.usable()?;
        Ok((st.purged, st.last_log_id()))
    }

    /// Deletes entries at `index` and later.
    pub fn truncate_from(&self, index: u64) -> Result<(), LogError> {
        let mut st = self.inner.state.write();
        st.usable()?;
        st.truncate_from(index);
        let mut record = Vec::new();
        format::encode_truncate(&mut record, index);
        self.write_record(&mut st, &record, None)
    }

    /// Deletes entries up to and including `log_id` (which may lie past the last entry), and
    /// every segment file holding nothing newer.
    pub fn purge_upto(&self, log_id: LogId) -> Result<(), LogError> {
        let mut st = self.inner.state.write();
        st.usable()?;
        if st.purged.is_some_and(|p| p.index >= log_id.index) {
            return Ok(());
        }
        st.purged = Some(log_id);
        st.purge_upto(log_id.index);
        let mut record = Vec::new();
        format::encode_purge(&mut record, &log_id);
        let mut ops = Vec::new();
        let run = self.current_run(&mut st);
        let (run, _) = self.place(&mut st, &mut ops, run, &record)?;
        let active = st.active;
        let doomed: Vec<u64> = st
            .segments
            .iter()
            .take_while(|(seq, info)| {
                **seq < active && info.max_index.is_none_or(|m| m <= log_id.index)
            })
            .map(|(seq, _)| *seq)
            .collect();
        let paths: Vec<PathBuf> = doomed
            .iter()
            .filter_map(|seq| st.segments.remove(seq).map(|info| info.path))
            .collect();
        self.push_run(&mut st, &mut ops, run);
        if !paths.is_empty() {
            ops.push(Op::Unlink(paths));
        }
        self.inner.queue.push(ops);
        Ok(())
    }

    /// The reason the log failed for good, if it has.
    pub fn failure(&self) -> Option<String> {
        self.inner.state.read().failed.clone()
    }

    /// A reader sharing this log.
    pub fn reader(&self) -> LogReader {
        LogReader {
            inner: self.inner.clone(),
        }
    }

    /// The log's directory.
    pub fn dir(&self) -> &Path {
        &self.inner.dir
    }

    /// Numbers of the segment files in use (for tests and status).
    pub fn segments(&self) -> Vec<u64> {
        self.inner.state.read().segments.keys().copied().collect()
    }

    fn write_record(
        &self,
        st: &mut State,
        record: &[u8],
        done: Option<Done>,
    ) -> Result<(), LogError> {
        let mut ops = Vec::new();
        let run = self.current_run(st);
        let (run, _) = self.place(st, &mut ops, run, record)?;
        self.finish(st, ops, run, done);
        Ok(())
    }

    fn current_run(&self, st: &mut State) -> Run {
        let file = st.segments.get(&st.active).map(|info| info.file.clone());
        Run {
            file,
            seq: st.active,
            offset: st.write_offset,
            bytes: self.inner.pool.take(),
            wseq: st.next_wseq,
        }
    }

    /// Places `record` at the end of the log, moving to a new segment first if it does not
    /// fit; returns the run it went into and its offset.
    fn place(
        &self,
        st: &mut State,
        ops: &mut Vec<Op>,
        mut run: Run,
        record: &[u8],
    ) -> Result<(Run, u64), LogError> {
        if st.write_offset + record.len() as u64 > st.active_capacity {
            if record.len() as u64 > self.inner.segment_size / 2 {
                return Err(LogError::Invalid(format!(
                    "record of {} bytes is too large for {}-byte segments",
                    record.len(),
                    self.inner.segment_size
                )));
            }
            run = self.rotate(st, ops, Some(run))?;
        }
        let offset = st.write_offset;
        run.bytes.extend_from_slice(record);
        st.write_offset += record.len() as u64;
        Ok((run, offset))
    }

    /// Seals the active segment and starts the next one with its head records.
    fn rotate(&self, st: &mut State, ops: &mut Vec<Op>, run: Option<Run>) -> Result<Run, LogError> {
        if let Some(run) = run {
            let (file, seq) = (run.file.clone(), run.seq);
            self.push_run(st, ops, run);
            if let Some(file) = file {
                ops.push(Op::Seal { file, seq });
            }
        }
        let seq = st.active + 1;
        let path = segment_path(&self.inner.dir, seq);
        let file = match self.inner.prealloc.take(seq) {
            Ok(file) => Arc::new(file),
            Err(e) => {
                // Entries may already be placed in this critical section: the log cannot go
                // on consistently, so it fails like a failed write.
                let reason = format!("{}: preparing the next segment: {e}", path.display());
                tracing::error!("raft log failed for good: {reason}");
                st.failed = Some(reason.clone());
                return Err(LogError::Failed(reason));
            }
        };
        st.segments.insert(
            seq,
            SegmentInfo {
                file: file.clone(),
                path,
                max_index: None,
            },
        );
        let next_index = st.last_log_id().map_or(0, |l| l.index + 1);
        let mut head = Vec::new();
        format::encode_segment_header(&mut head, seq, next_index);
        if let Some(vote) = &st.vote {
            format::encode_vote(&mut head, vote);
        }
        if st.committed.is_some() {
            format::encode_committed(&mut head, &st.committed);
        }
        if let Some(purged) = &st.purged {
            format::encode_purge(&mut head, purged);
        }
        st.active = seq;
        st.active_capacity = self.inner.segment_size;
        st.write_offset = head.len() as u64;
        Ok(Run {
            file: Some(file),
            seq,
            offset: 0,
            bytes: head,
            wseq: st.next_wseq,
        })
    }

    fn push_run(&self, st: &mut State, ops: &mut Vec<Op>, run: Run) {
        let Some(file) = run.file else {
            return;
        };
        if run.bytes.is_empty() {
            self.inner.pool.give_back(run.bytes);
            return;
        }
        ops.push(Op::Write {
            file,
            seq: run.seq,
            offset: run.offset,
            bytes: run.bytes,
            wseq: run.wseq,
        });
        st.next_wseq = run.wseq + 1;
    }

    fn finish(&self, st: &mut State, mut ops: Vec<Op>, run: Run, done: Option<Done>) {
        self.push_run(st, &mut ops, run);
        if let Some(done) = done {
            ops.push(Op::Done(done));
        }
        self.inner.queue.push(ops);
    }
}

pub(crate) fn storage_error(
    verb: ErrorVerb,
    subject: ErrorSubject<u64>,
    e: LogError,
) -> StorageError {
    StorageError::IO {
        source: openraft::StorageIOError::new(subject, verb, AnyError::new(&e)),
    }
}

impl RaftLogReader<TypeConfig> for LogStore {
    async fn try_get_log_entries<RB: RangeBounds<u64> + Clone + std::fmt::Debug + OptionalSend>(
        &mut self,
        range: RB,
    ) -> Result<Vec<Entry>, StorageError> {
        self.reader().try_get_log_entries(range).await
    }
}

impl RaftLogStorage<TypeConfig> for LogStore {
    type LogReader = LogReader;

    async fn get_log_state(&mut self) -> Result<LogState<TypeConfig>, StorageError> {
        let (last_purged_log_id, last_log_id) = self
            .log_state()
            .map_err(|e| storage_error(ErrorVerb::Read, ErrorSubject::Logs, e))?;
        Ok(LogState {
            last_purged_log_id,
            last_log_id,
        })
    }

    async fn get_log_reader(&mut self) -> Self::LogReader {
        self.reader()
    }

    async fn save_vote(&mut self, vote: &Vote) -> Result<(), StorageError> {
        self.save_vote_durably(vote)
            .await
            .map_err(|e| storage_error(ErrorVerb::Write, ErrorSubject::Vote, e))
    }

    async fn read_vote(&mut self) -> Result<Option<Vote>, StorageError> {
        Ok(self.vote())
    }

    async fn save_committed(&mut self, committed: Option<LogId>) -> Result<(), StorageError> {
        self.set_committed(committed)
            .map_err(|e| storage_error(ErrorVerb::Write, ErrorSubject::Store, e))
    }

    async fn read_committed(&mut self) -> Result<Option<LogId>, StorageError> {
        Ok(self.committed())
    }

    async fn append<I>(
        &mut self,
        entries: I,
        callback: LogFlushed<TypeConfig>,
    ) -> Result<(), StorageError>
    where
        I: IntoIterator<Item = Entry> + OptionalSend,
        I::IntoIter: OptionalSend,
    {
        self.append_with(entries, move |result| callback.log_io_completed(result))
            .map_err(|e| storage_error(ErrorVerb::Write, ErrorSubject::Logs, e))
    }

    async fn truncate(&mut self, log_id: LogId) -> Result<(), StorageError> {
        self.truncate_from(log_id.index)
            .map_err(|e| storage_error(ErrorVerb::Delete, ErrorSubject::Logs, e))
    }

    async fn purge(&mut self, log_id: LogId) -> Result<(), StorageError> {
        self.purge_upto(log_id)
            .map_err(|e| storage_error(ErrorVerb::Delete, ErrorSubject::Logs, e))
    }
}
