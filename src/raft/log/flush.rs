//! The flush path: the only writer of segment files. Whoever flushes takes everything queued,
//! writes it in order, calls fdatasync once per dirty file when anyone waits for durability,
//! then completes the waiting callbacks in order (group commit). The first failed write or
//! sync fails the log for good: the error is logged, every pending and later callback gets it,
//! and nothing is retried (after a failed fsync the page cache state is unknown).
//!
//! Two callers flush, one at a time (`Pending::busy`), each taking the queue in order: the flush
//! thread, and an appender that finds the path idle (`Queue::submit`), which then flushes on
//! its own thread. openraft 0.9's core waits for each append's flush before its next command, so
//! flushing on the core's thread costs it nothing, and saves two thread wake-ups per append
//! (handing the bytes to the flush thread, and its completion back). While the path is busy,
//! appends queue for the flush thread and group commit batches them.

use std::fs::File;
use std::io;
use std::path::PathBuf;
use std::sync::Arc;

use parking_lot::{Condvar, Mutex, RwLock};

use super::state::State;
use crate::storage::fsutil::fsync_dir;
use crate::storage::io::FileIo;
use crate::storage::zeros;

/// Called once with the outcome of the flush that made its records durable.
pub(crate) type Done = Box<dyn FnOnce(io::Result<()>) + Send>;

pub(crate) enum Op {
    /// Bytes for one segment at one offset; `wseq` identifies the write for cache eviction.
    Write {
        file: Arc<File>,
        seq: u64,
        offset: u64,
        bytes: Vec<u8>,
        wseq: u64,
    },
    /// The log moves on from segment `seq`: make it durable before anything lands in the
    /// next one, so that only the last segment can ever have a torn tail.
    Seal { file: Arc<File>, seq: u64 },
    /// Complete after everything queued before it is durable.
    Done(Done),
    /// Delete these files once everything before is durable (purged segments).
    Unlink(Vec<PathBuf>),
}

#[derive(Default)]
struct Pending {
    ops: Vec<Op>,
    shutdown: bool,
    /// Someone (the flush thread or an appender) is flushing: ops wait for it.
    busy: bool,
}

/// The queue between the log's callers and whoever flushes, and the flushing state itself.
pub(crate) struct Queue {
    pending: Mutex<Pending>,
    cv: Condvar,
    flusher: Mutex<Flusher>,
}

/// What [`Queue::submit`] did with the ops.
#[must_use]
pub(crate) enum Submitted {
    /// Queued for the flush thread.
    Queued,
    /// The path was idle: the caller must pass these (the queue's earlier ops, then its own)
    /// to [`Queue::flush_claimed`], after releasing the log's state lock.
    Claimed(Vec<Op>),
}

impl Queue {
    pub fn new(flusher: Flusher) -> Queue {
        Queue {
            pending: Mutex::new(Pending::default()),
            cv: Condvar::new(),
            flusher: Mutex::new(flusher),
        }
    }

    /// Queues `ops`. Plain writes alone do not wake the thread: it holds bytes nobody waits
    /// for until the next flush someone does (a COMMITTED record after every commit would
    /// otherwise wake it for nothing, a futex call on the Raft thread each time).
    pub fn push(&self, ops: Vec<Op>) {
        let wake = ops.iter().any(|op| !matches!(op, Op::Write { .. }));
        self.pending.lock().ops.extend(ops);
        if wake {
            self.cv.notify_one();
        }
    }

    /// Queues `ops`, or, when nobody is flushing, claims the path with them for the caller to
    /// flush on its own thread. Called under the log's state lock, like `push`, so the order
    /// of claims and pushes is the log order.
    pub fn submit(&self, ops: Vec<Op>) -> Submitted {
        let mut pending = self.pending.lock();
        if pending.busy || pending.shutdown {
            drop(pending);
            self.push(ops);
            return Submitted::Queued;
        }
        pending.busy = true;
        let mut claimed = std::mem::take(&mut pending.ops);
        claimed.extend(ops);
        Submitted::Claimed(claimed)
    }

    /// Flushes ops claimed by [`Queue::submit`] on the calling thread, then hands the path back.
    pub fn flush_claimed(&self, ops: Vec<Op>) {
        self.flusher.lock().flush(ops);
        self.hand_back();
    }

    /// Ends a flush (of the flush thread or a claimer): the path is free again, and the flush
    /// thread is woken if ops someone waits for arrived meanwhile (it may be waiting for the
    /// path; when it is the one handing back, its next `take` sees them anyway).
    fn hand_back(&self) {
        let mut pending = self.pending.lock();
        pending.busy = false;
        let waited_for = pending.ops.iter().any(|op| !matches!(op, Op::Write { .. }));
        if waited_for || pending.shutdown {
            self.cv.notify_one();
        }
    }

    pub fn shutdown(&self) {
        self.pending.lock().shutdown = true;
        self.cv.notify_one();
    }

    /// The next ops for the flush thread (the path then busy); `None` once shut down and
    /// drained.
    fn take(&self) -> Option<Vec<Op>> {
        let mut pending = self.pending.lock();
        loop {
            if !pending.busy && !pending.ops.is_empty() {
                pending.busy = true;
                return Some(std::mem::take(&mut pending.ops));
            }
            if pending.shutdown && !pending.busy {
                return None;
            }
            self.cv.wait(&mut pending);
        }
    }
}

/// Write buffers handed back by the flush thread for the next appends to fill: a batch
/// entry is hundreds of KiB, and a fresh buffer for each would have the allocator fault in
/// (and zero) new pages on every append. Bounded in count and in the size it keeps.
#[derive(Default)]
pub(crate) struct BufferPool {
    free: Mutex<Vec<Vec<u8>>>,
}

impl BufferPool {
    const MAX_BUFFERS: usize = 4;
    /// Larger buffers (a follower catching up in big appends) are not kept.
    const MAX_KEPT_CAPACITY: usize = 1 << 20;

    pub fn take(&self) -> Vec<u8> {
        self.free.lock().pop().unwrap_or_default()
    }

    pub fn give_back(&self, mut buffer: Vec<u8>) {
        if buffer.capacity() == 0 || buffer.capacity() > Self::MAX_KEPT_CAPACITY {
            return;
        }
        buffer.clear();
        let mut free = self.free.lock();
        if free.len() < Self::MAX_BUFFERS {
            free.push(buffer);
        }
    }
}

/// Bytes gathered for one pwrite: queued writes that continue each other in one segment.
struct PendingWrite {
    file: Arc<File>,
    seq: u64,
    offset: u64,
    bytes: Vec<u8>,
    wseq: u64,
    /// The segment file's (preallocated, fixed) length: padding stops there.
    file_len: u64,
}

impl PendingWrite {
    /// Writes joined into one are copied; past this size a separate pwrite costs less than
    /// the copy.
    const MAX_JOINED: usize = 64 << 10;

    fn continues_with(&self, seq: u64, offset: u64, len: usize) -> bool {
        self.seq == seq
            && self.offset + self.bytes.len() as u64 == offset
            && self.bytes.len() + len <= Self::MAX_JOINED
    }

    /// Writes the bytes; on success records the segment as dirty and the write as done,
    /// on failure returns the reason.
    fn write(
        mut self,
        io: &dyn FileIo,
        pool: &BufferPool,
        dirty: &mut Vec<(u64, Arc<File>)>,
        written: &mut Option<u64>,
    ) -> Option<String> {
        let len = self.bytes.len();
        // Zeros up to the page boundary (zeros are there already): the segment's pages were
        // written directly, so a write ending inside an uncached page would read it first.
        let end = self.offset + len as u64;
        let padded = zeros::padded_end(end, self.file_len);
        self.bytes.resize(len + (padded - end) as usize, 0);
        let result = io.write_at(&self.file, &self.bytes, self.offset);
        pool.give_back(self.bytes);
        match result {
            Ok(()) => {
                *written = Some(self.wseq);
                if !dirty.iter().any(|(s, _)| *s == self.seq) {
                    dirty.push((self.seq, self.file));
                }
                None
            }
            Err(e) => Some(format!(
                "write of {len} bytes to segment {} at offset {}: {e}",
                self.seq, self.offset
            )),
        }
    }
}

/// The lengths of the segments written lately (a segment's length never changes once it is
/// in place), so that padding costs one `fstat` per segment.
#[derive(Default)]
struct SegmentLengths(Vec<(u64, u64)>);

impl SegmentLengths {
    const KEPT: usize = 8;

    /// The length of segment `seq`; 0 (no padding) if it cannot be read.
    fn of(&mut self, seq: u64, file: &File) -> u64 {
        if let Some((_, len)) = self.0.iter().find(|(s, _)| *s == seq) {
            return *len;
        }
        let len = file.metadata().map(|m| m.len()).unwrap_or(0);
        if self.0.len() == Self::KEPT {
            self.0.remove(0);
        }
        self.0.push((seq, len));
        len
    }
}

/// The flushing state, shared by the flush thread and appenders that flush (one at a time).
pub(crate) struct Flusher {
    state: Arc<RwLock<State>>,
    io: Arc<dyn FileIo>,
    dir: PathBuf,
    pool: Arc<BufferPool>,
    /// Why the log failed for good, once it has.
    failed: Option<String>,
    /// Files written but not yet synced, by seq. Writes nobody waits for (committed ids,
    /// truncations) stay here until the next flush that someone does wait for.
    dirty: Vec<(u64, Arc<File>)>,
    /// Writes that continue each other in one segment (a COMMITTED record and the entry
    /// appended after it) go out as one pwrite; bytes nobody waits for yet are held until
    /// the next flush someone does wait for (or shutdown).
    run: Option<PendingWrite>,
    lengths: SegmentLengths,
}

impl Flusher {
    pub fn new(
        state: Arc<RwLock<State>>,
        io: Arc<dyn FileIo>,
        dir: PathBuf,
        pool: Arc<BufferPool>,
    ) -> Flusher {
        Flusher {
            state,
            io,
            dir,
            pool,
            failed: None,
            dirty: Vec::new(),
            run: None,
            lengths: SegmentLengths::default(),
        }
    }

    /// Writes `ops` in order; syncs and completes their callbacks if any waits.
    fn flush(&mut self, ops: Vec<Op>) {
        let Flusher {
            state,
            io,
            dir,
            pool,
            failed,
            dirty,
            run,
            lengths,
        } = self;
        let mut done = Vec::new();
        let mut unlink = Vec::new();
        let mut written = None;
        let mut error: Option<String> = None;
        for op in ops {
            match op {
                Op::Write {
                    file,
                    seq,
                    offset,
                    bytes,
                    wseq,
                } => {
                    if failed.is_some() || error.is_some() {
                        continue;
                    }
                    if let Some(current) = run.as_mut() {
                        if current.continues_with(seq, offset, bytes.len()) {
                            current.bytes.extend_from_slice(&bytes);
                            current.wseq = wseq;
                            pool.give_back(bytes);
                            continue;
                        }
                    }
                    if let Some(previous) = run.take() {
                        error = previous.write(io.as_ref(), pool, dirty, &mut written);
                    }
                    if error.is_none() {
                        let file_len = lengths.of(seq, &file);
                        *run = Some(PendingWrite {
                            file,
                            seq,
                            offset,
                            bytes,
                            wseq,
                            file_len,
                        });
                    }
                }
                Op::Seal { file, seq } => {
                    if let Some(previous) = run.take() {
                        if error.is_none() && failed.is_none() {
                            error = previous.write(io.as_ref(), pool, dirty, &mut written);
                        }
                    }
                    if failed.is_some() || error.is_some() {
                        continue;
                    }
                    if let Some(pos) = dirty.iter().position(|(s, _)| *s == seq) {
                        dirty.remove(pos);
                        if let Err(e) = io.sync_data(&file) {
                            error = Some(format!("fdatasync of segment {seq}: {e}"));
                        }
                    }
                }
                Op::Done(d) => done.push(d),
                Op::Unlink(paths) => unlink.extend(paths),
            }
        }
        let waited_for = !done.is_empty() || !unlink.is_empty();
        if failed.is_some() || error.is_some() {
            *run = None;
        } else if waited_for {
            if let Some(last) = run.take() {
                error = last.write(io.as_ref(), pool, dirty, &mut written);
            }
        }
        if let Some(wseq) = written {
            let mut st = state.write();
            st.written_wseq = st.written_wseq.max(wseq);
            st.evict();
        }
        if failed.is_none() && error.is_none() && waited_for {
            for (seq, file) in dirty.drain(..) {
                if let Err(e) = io.sync_data(&file) {
                    error = Some(format!("fdatasync of segment {seq}: {e}"));
                    break;
                }
            }
        }
        if let Some(reason) = error {
            let reason = format!("{}: {reason}", dir.display());
            tracing::error!("raft log failed for good, refusing all further writes: {reason}");
            state.write().failed = Some(reason.clone());
            *failed = Some(reason);
        }
        if let Some(reason) = failed.as_ref() {
            for d in done {
                d(Err(io::Error::other(reason.clone())));
            }
            return;
        }
        for d in done {
            d(Ok(()));
        }
        if !unlink.is_empty() {
            for path in &unlink {
                if let Err(e) = std::fs::remove_file(path) {
                    tracing::warn!("raft log: removing purged segment {}: {e}", path.display());
                }
            }
            if let Err(e) = fsync_dir(dir) {
                let reason = format!("{}: fsync of the directory: {e}", dir.display());
                tracing::error!("raft log failed for good, refusing all further writes: {reason}");
                state.write().failed = Some(reason.clone());
                *failed = Some(reason);
            }
        }
    }

    /// At shutdown: writes the bytes still held (nobody waits for them; no sync).
    fn write_held(&mut self) {
        if let (Some(last), None) = (self.run.take(), &self.failed) {
            let mut written = None;
            if let Some(reason) =
                last.write(self.io.as_ref(), &self.pool, &mut self.dirty, &mut written)
            {
                tracing::error!("raft log: {}: at shutdown: {reason}", self.dir.display());
            }
        }
    }
}

/// The flush thread's loop; returns after shutdown once the queue is empty.
pub(crate) fn run(queue: Arc<Queue>) {
    while let Some(ops) = queue.take() {
        queue.flusher.lock().flush(ops);
        queue.hand_back();
    }
    queue.flusher.lock().write_held();
}
