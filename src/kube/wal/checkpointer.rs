//! Checkpoint scheduling: replacing `objects.wal` by a new file that starts with a checkpoint,
//! so restart time and disk use stay bounded.
//!
//! The new file is `checkpoint(S) + every Mutation record applied after S`, where S is a store
//! snapshot taken (in O(1)) on the flush thread right after a batch was applied, so S is
//! exactly the state at a known offset of the current file. S is deliberately taken
//! `keep` records before the checkpoint is written: those records follow the checkpoint in the
//! new file, so after a restart the watch history holds them again and watches keep resuming
//! across restarts (the history window's worth, at most `checkpoint_every`).
//!
//! Encoding the snapshot and copying the records runs on a helper thread into
//! `objects.wal.tmp` while the flush thread keeps appending to the current file (and keeps a
//! copy of what it appends in memory). When the helper is done, the flush thread, between two
//! batches, appends that copy to the temporary file, syncs it, renames it over `objects.wal`
//! and syncs the directory before it acknowledges anything written to the new file. Every
//! acknowledged record is therefore in whichever file a crash leaves behind, in order.

use std::fs::{self, File, OpenOptions};
use std::io;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::thread::JoinHandle;

use super::file::{self, Segment, TMP_FILE, WAL_FILE};
use crate::kube::checkpoint;
use crate::kube::store::{Store, StoreSnapshot};
use crate::storage::io::RealIo;
use crate::storage::{fsutil, zeros};

/// Records appended while a checkpoint is built are also kept in memory; past this many bytes
/// the flush thread waits for the helper instead of buffering more.
const MAX_PENDING: usize = 64 << 20;
/// Bytes copied from the current file to the new one at a time.
const COPY_PIECE: usize = 4 << 20;

/// Where the checkpoint cycle is.
enum Phase {
    /// Counting Mutation records after the current file's checkpoint.
    Counting { since_base: u64 },
    /// A snapshot is pinned; the records after it start at `offset` of the current file.
    Pinned {
        snapshot: StoreSnapshot,
        offset: u64,
        since: u64,
    },
    /// The helper thread is writing `objects.wal.tmp`; records appended since it started are
    /// also in `pending`.
    Building {
        since: u64,
        pending: Vec<u8>,
        done: mpsc::Receiver<io::Result<Segment>>,
        helper: JoinHandle<()>,
    },
}

/// The flush thread's checkpoint scheduler.
pub(super) struct Checkpointer {
    phase: Phase,
    dir: PathBuf,
    /// Pin a snapshot after this many records in the current file.
    every: u64,
    /// Records kept after the snapshot in the new file (for watch history across restarts).
    keep: u64,
    chunk: u64,
}

/// The checkpoint left the log in a state that cannot be trusted: poison the WAL.
#[derive(Debug)]
pub(super) struct Fatal(pub String);

impl Checkpointer {
    pub fn new(dir: &Path, since_base: u64, every: u64, keep: u64, chunk: u64) -> Self {
        Checkpointer {
            phase: Phase::Counting { since_base },
            dir: dir.to_path_buf(),
            every: every.max(1),
            keep: keep.min(every.max(1)),
            chunk,
        }
    }

    /// Called after a batch of `count` records (`bytes`) was appended, synced and applied.
    /// May switch `segment` to the new file.
    pub fn after_batch(
        &mut self,
        store: &Store,
        segment: &mut Segment,
        bytes: &[u8],
        count: u64,
    ) -> Result<(), Fatal> {
        let phase = std::mem::replace(&mut self.phase, Phase::Counting { since_base: 0 });
        self.phase = match phase {
            Phase::Counting { since_base } if since_base + count >= self.every => Phase::Pinned {
                snapshot: store.snapshot(),
                offset: segment.end,
                since: 0,
            },
            Phase::Counting { since_base } => Phase::Counting {
                since_base: since_base + count,
            },
            Phase::Pinned {
                snapshot,
                offset,
                since,
            } => self.maybe_start(snapshot, offset, since + count, segment),
            Phase::Building {
                since,
                mut pending,
                done,
                helper,
            } => {
                pending.extend_from_slice(bytes);
                let result = if pending.len() > MAX_PENDING {
                    done.recv().ok()
                } else {
                    done.try_recv().ok()
                };
                match result {
                    None => Phase::Building {
                        since: since + count,
                        pending,
                        done,
                        helper,
                    },
                    Some(built) => {
                        let _ = helper.join();
                        self.finish(built, &mut pending, since + count, segment)?
                    }
                }
            }
        };
        // A snapshot pinned with keep == 0 starts at once.
        if let Phase::Pinned { since: 0, .. } = self.phase {
            if self.keep == 0 {
                let phase = std::mem::replace(&mut self.phase, Phase::Counting { since_base: 0 });
                if let Phase::Pinned {
                    snapshot, offset, ..
                } = phase
                {
                    self.phase = self.maybe_start(snapshot, offset, 0, segment);
                }
            }
        }
        Ok(())
    }

    fn maybe_start(
        &self,
        snapshot: StoreSnapshot,
        offset: u64,
        since: u64,
        segment: &Segment,
    ) -> Phase {
        if since < self.keep {
            return Phase::Pinned {
                snapshot,
                offset,
                since,
            };
        }
        let source = match segment.file.try_clone() {
            Ok(file) => file,
            Err(e) => {
                tracing::error!(error = %e, "cannot start a checkpoint; will retry later");
                return Phase::Counting { since_base: 0 };
            }
        };
        let (tx, done) = mpsc::sync_channel(1);
        let dir = self.dir.clone();
        let (to, chunk) = (segment.end, self.chunk);
        let spawned = std::thread::Builder::new()
            .name("wal-checkpoint".into())
            .spawn(move || {
                let _ = tx.send(build(&dir, snapshot, &source, offset, to, chunk));
            });
        match spawned {
            Ok(helper) => Phase::Building {
                since,
                pending: Vec::new(),
                done,
                helper,
            },
            Err(e) => {
                tracing::error!(error = %e, "cannot start the checkpoint thread; will retry later");
                Phase::Counting { since_base: 0 }
            }
        }
    }

    /// Completes the switch to the new file. Failures before the rename leave the current file
    /// in charge (it holds everything) and retry after another `every` records.
    fn finish(
        &self,
        built: io::Result<Segment>,
        pending: &mut Vec<u8>,
        since: u64,
        segment: &mut Segment,
    ) -> Result<Phase, Fatal> {
        let tmp = self.dir.join(TMP_FILE);
        let path = self.dir.join(WAL_FILE);
        let prepared = built.and_then(|mut new| {
            new.append(&RealIo, pending, self.chunk)?;
            new.file.sync_all()?;
            fs::rename(&tmp, &path)?;
            Ok(new)
        });
        let new = match prepared {
            Ok(new) => new,
            Err(e) => {
                tracing::error!(file = %tmp.display(), error = %e,
                    "checkpoint failed; keeping the current log and retrying later");
                let _ = fs::remove_file(&tmp);
                return Ok(Phase::Counting { since_base: 0 });
            }
        };
        // The rename happened: the old file is gone from the directory. Until the directory
        // is synced a crash could bring it back, so nothing may be acknowledged from the new
        // file before that; if the sync fails, nothing can be promised any more.
        fsutil::fsync_dir(&self.dir).map_err(|e| {
            Fatal(format!(
                "fsync of {} after installing a checkpoint failed: {e}",
                self.dir.display()
            ))
        })?;
        tracing::info!(file = %path.display(), records_after = since, bytes = new.end,
            "installed a new checkpoint");
        *segment = new;
        Ok(Phase::Counting { since_base: since })
    }

    /// Waits for a running helper (so no thread outlives the WAL writer). With `segment` (the
    /// log is healthy), what the helper built is installed as well, so the next start replays
    /// from the new checkpoint instead of the older one; without it, the result is dropped.
    pub fn shutdown(mut self, segment: Option<&mut Segment>) {
        let phase = std::mem::replace(&mut self.phase, Phase::Counting { since_base: 0 });
        let Phase::Building {
            since,
            mut pending,
            done,
            helper,
        } = phase
        else {
            return;
        };
        let built = done.recv().ok();
        let _ = helper.join();
        if let (Some(built), Some(segment)) = (built, segment) {
            if let Err(Fatal(reason)) = self.finish(built, &mut pending, since, segment) {
                // The rename happened and only the directory sync failed: the old file, if a
                // crash brings it back, holds every record too.
                tracing::error!("finishing a checkpoint at shutdown: {reason}");
            }
        }
    }
}

/// The helper thread's job: `objects.wal.tmp` = checkpoint of `snapshot` + the records in
/// `[from, to)` of `source`, preallocated and synced.
fn build(
    dir: &Path,
    snapshot: StoreSnapshot,
    source: &File,
    from: u64,
    to: u64,
    chunk: u64,
) -> io::Result<Segment> {
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(true)
        .open(dir.join(TMP_FILE))?;
    let mut buf = Vec::new();
    checkpoint::encode(&snapshot, &mut buf);
    drop(snapshot);
    file.write_all_at(&buf, 0)?;
    let mut end = buf.len() as u64;
    drop(buf);
    let mut piece = vec![0u8; COPY_PIECE.min(to.saturating_sub(from) as usize)];
    let mut at = from;
    while at < to {
        let n = (to - at).min(piece.len() as u64) as usize;
        source.read_exact_at(&mut piece[..n], at)?;
        file.write_all_at(&piece[..n], end)?;
        end += n as u64;
        at += n as u64;
    }
    let len = file::round_up(end + 1, chunk);
    zeros::fill(&file, end, len)?;
    file.sync_all()?;
    Ok(Segment { file, end, len })
}
