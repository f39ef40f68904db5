//! The file primitives of `objects.wal`: appends through the I/O seam (`storage::io`, where
//! tests inject failures), zero-filled preallocation, and the data-directory lock.
//!
//! The file is grown in zero-filled chunks, so an ordinary append overwrites zeros inside the
//! file and `fdatasync` has no file-size metadata to journal. Zeros after the last record mean
//! "end" (see `storage::record`).

use std::fs::File;
use std::io;
use std::path::Path;

use crate::storage::io::FileIo;
use crate::storage::zeros;

/// The log itself.
pub(super) const WAL_FILE: &str = "objects.wal";
/// A checkpoint being built; renamed over `objects.wal` once complete and durable.
pub(super) const TMP_FILE: &str = "objects.wal.tmp";

/// `n` rounded up to a multiple of `chunk` (a chunk of 0 counts as 1).
pub(super) fn round_up(n: u64, chunk: u64) -> u64 {
    let chunk = chunk.max(1);
    n.div_ceil(chunk) * chunk
}

/// The open `objects.wal` (or the checkpoint that is about to replace it).
#[derive(Debug)]
pub(super) struct Segment {
    pub file: File,
    /// Where the next record goes: just past the last record.
    pub end: u64,
    /// The file's length; everything in `[end, len)` is zero.
    pub len: u64,
}

impl Segment {
    /// Writes `bytes` at the end, growing the file by zero-filled chunks of `chunk` bytes when
    /// they do not fit. Not durable until `sync_data`.
    ///
    /// The write is extended with zeros to the next page boundary (zeros are there already):
    /// preallocated pages are written directly and are not cached, and a write ending inside
    /// an uncached page would make the kernel read it first (see `storage::zeros`). The zeros
    /// are appended to `bytes` for the write and removed again, so the caller's buffer comes
    /// back as it was, without a copy.
    pub fn append(&mut self, io: &dyn FileIo, bytes: &mut Vec<u8>, chunk: u64) -> io::Result<()> {
        let len = bytes.len();
        let needed = self.end + len as u64;
        if needed > self.len {
            let new_len = round_up(needed, chunk);
            zeros::fill(&self.file, self.len, new_len)?;
            self.len = new_len;
        }
        let padded = zeros::padded_end(needed, self.len);
        bytes.resize(len + (padded - needed) as usize, 0);
        let written = io.write_at(&self.file, bytes, self.end);
        bytes.truncate(len);
        written?;
        self.end = needed;
        Ok(())
    }
}

/// Holds an exclusive `flock` on the data directory so two processes never append to the same
/// `objects.wal`. Released when dropped (or when the process dies).
pub(super) struct DirLock {
    _lock: nix::fcntl::Flock<File>,
}

impl std::fmt::Debug for DirLock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("DirLock")
    }
}

pub(super) fn lock_dir(dir: &Path) -> io::Result<DirLock> {
    let file = File::open(dir)?;
    match nix::fcntl::Flock::lock(file, nix::fcntl::FlockArg::LockExclusiveNonblock) {
        Ok(lock) => Ok(DirLock { _lock: lock }),
        Err((_, nix::errno::Errno::EWOULDBLOCK)) => Err(io::Error::new(
            io::ErrorKind::WouldBlock,
            "the data directory is in use by another process (or another WAL in this one)",
        )),
        Err((_, errno)) => Err(io::Error::from(errno)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::storage::io::RealIo;

    /// Appends pad to the page boundary inside the file, never past its end, leave the caller's
    /// buffer as it was, and grow the file by whole chunks.
    #[test]
    fn append_pads_within_the_file_and_returns_the_buffer_unchanged() {
        let dir = tempfile::tempdir().unwrap();
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(dir.path().join("wal"))
            .unwrap();
        let chunk = 3 * zeros::PAGE + 100;
        let mut segment = Segment {
            file,
            end: 0,
            len: 0,
        };
        let mut expected = Vec::new();
        for (i, size) in [10usize, 4090, 5000, 3000, 1].into_iter().enumerate() {
            let mut bytes = vec![i as u8 + 1; size];
            segment.append(&RealIo, &mut bytes, chunk).unwrap();
            assert_eq!(
                bytes,
                vec![i as u8 + 1; size],
                "caller's buffer after append {i}"
            );
            expected.extend_from_slice(&bytes);
            let on_disk = std::fs::read(dir.path().join("wal")).unwrap();
            assert_eq!(
                on_disk.len() as u64,
                segment.len,
                "file length after append {i}"
            );
            assert_eq!(segment.len % chunk, 0);
            assert_eq!(&on_disk[..expected.len()], &expected[..]);
            assert!(on_disk[expected.len()..].iter().all(|&b| b == 0));
        }
        assert_eq!(segment.end, expected.len() as u64);
    }
}
