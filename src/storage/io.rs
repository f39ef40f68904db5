//! The I/O seam of the two durable logs, `objects.wal` (`kube::wal`) and the Raft log
//! (`raft::log`): the positioned writes and data syncs of their append paths, behind one trait
//! so that tests inject write and fdatasync failures (`FaultyIo`) or stall writes
//! (`DelayedIo`) the same way in both. Each engine holds an `Arc<dyn FileIo>`; the real thing
//! is `RealIo`. Creating, preallocating and reading files do not go through here: the faults
//! worth injecting are those of the append path, which the engines must survive by failing
//! for good (see their module documentation). `RealIo` times every fdatasync for `/metrics`.

use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use crate::metrics::{Histogram, FSYNC_BUCKETS};

/// Zeros are written in pieces of this size by [`write_zeros`].
const ZERO_PIECE: usize = 1 << 20;

/// Positional writes and data syncs of log files.
pub trait FileIo: Send + Sync + 'static {
    fn write_at(&self, file: &File, buf: &[u8], offset: u64) -> io::Result<()>;
    fn sync_data(&self, file: &File) -> io::Result<()>;
}

/// How long the real `fdatasync`s of this process took (reported on `/metrics`).
pub static SYNC_DURATIONS: Histogram = Histogram::with_bounds(&FSYNC_BUCKETS);

/// The real thing: `pwrite` and `fdatasync`.
#[derive(Debug, Default)]
pub struct RealIo;

impl FileIo for RealIo {
    fn write_at(&self, file: &File, buf: &[u8], offset: u64) -> io::Result<()> {
        file.write_all_at(buf, offset)
    }

    fn sync_data(&self, file: &File) -> io::Result<()> {
        let started = std::time::Instant::now();
        let result = file.sync_data();
        SYNC_DURATIONS.observe(started.elapsed());
        result
    }
}

/// Real I/O that fails on demand and counts its writes (tests and fault drills). A failed
/// sync leaves the written data in the page cache, as a real one may.
#[derive(Debug, Default)]
pub struct FaultyIo {
    pub fail_writes: AtomicBool,
    pub fail_syncs: AtomicBool,
    /// pwrite calls made (failed ones included).
    pub writes: AtomicU64,
}

impl FileIo for FaultyIo {
    fn write_at(&self, file: &File, buf: &[u8], offset: u64) -> io::Result<()> {
        self.writes.fetch_add(1, Ordering::SeqCst);
        if self.fail_writes.load(Ordering::SeqCst) {
            return Err(io::Error::other("injected write failure"));
        }
        RealIo.write_at(file, buf, offset)
    }

    fn sync_data(&self, file: &File) -> io::Result<()> {
        if self.fail_syncs.load(Ordering::SeqCst) {
            return Err(io::Error::other("injected fdatasync failure"));
        }
        RealIo.sync_data(file)
    }
}

/// Writes zeros over `[from, to)` of `file` through `io`, in pieces of at most 1 MiB (the
/// repair of a torn tail: a short range, not durable until the caller syncs). Preallocated
/// space is zero-filled by `storage::zeros::fill` instead.
pub fn write_zeros(io: &dyn FileIo, file: &File, from: u64, to: u64) -> io::Result<()> {
    let zeros = vec![0u8; ZERO_PIECE.min(to.saturating_sub(from) as usize)];
    let mut at = from;
    while at < to {
        let n = (to - at).min(zeros.len() as u64) as usize;
        io.write_at(file, &zeros[..n], at)?;
        at += n as u64;
    }
    Ok(())
}

/// Real I/O whose writes wait first while a control file exists, for as many milliseconds as
/// it holds (the Raft log's under the fail point `raft_log::write_delay` of
/// `crate::failpoints`). A test stalls a
/// leader's log this way and checks that it acknowledges nothing meanwhile; another holds one
/// flush up to show that appends queue behind it. The file is read at every write; an
/// unreadable or unparsable file means no delay.
#[derive(Debug)]
pub struct DelayedIo {
    pub control: std::path::PathBuf,
}

impl DelayedIo {
    /// The delay the control file asks for now.
    fn delay(&self) -> Option<std::time::Duration> {
        let text = std::fs::read_to_string(&self.control).ok()?;
        let ms: u64 = text.trim().parse().ok()?;
        Some(std::time::Duration::from_millis(ms))
    }
}

impl FileIo for DelayedIo {
    fn write_at(&self, file: &File, buf: &[u8], offset: u64) -> io::Result<()> {
        if let Some(delay) = self.delay() {
            std::thread::sleep(delay);
        }
        RealIo.write_at(file, buf, offset)
    }

    fn sync_data(&self, file: &File) -> io::Result<()> {
        RealIo.sync_data(file)
    }
}
