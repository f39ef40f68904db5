//! The two I/O calls the flush thread makes on segment files, behind a trait so that tests
//! can inject write and fdatasync failures.

use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

/// Positional writes and data syncs of segment files.
pub trait SegmentIo: Send + Sync + 'static {
    fn write_at(&self, file: &File, buf: &[u8], offset: u64) -> io::Result<()>;
    fn sync_data(&self, file: &File) -> io::Result<()>;
}

/// The real thing: `pwrite` and `fdatasync`.
#[derive(Debug, Default)]
pub struct RealIo;

impl SegmentIo for RealIo {
    fn write_at(&self, file: &File, buf: &[u8], offset: u64) -> io::Result<()> {
        file.write_all_at(buf, offset)
    }

    fn sync_data(&self, file: &File) -> io::Result<()> {
        file.sync_data()
    }
}

/// Real I/O that fails on demand and counts its writes (tests and fault drills).
#[derive(Debug, Default)]
pub struct FaultyIo {
    pub fail_writes: AtomicBool,
    pub fail_syncs: AtomicBool,
    /// pwrite calls made (failed ones included).
    pub writes: AtomicU64,
}

impl SegmentIo for FaultyIo {
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

/// Real I/O whose writes wait first while a control file exists, for as many milliseconds as
/// it holds (the fail point `raft_log::write_delay` of `crate::failpoints`). A test stalls a
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

impl SegmentIo for DelayedIo {
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
