//! Writing one blob into the store: bytes go to a temporary file and are hashed as they
//! pass; [`BlobWriter::commit`] checks size and digest, fsyncs, and renames the file under
//! the blob's name (then fsyncs the directory). Dropped without a commit, or on a mismatch,
//! the temporary file is removed: nothing is kept of content that is not what it claims.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::PathBuf;

use super::digest::{Digest, Hasher};
use super::store::{io_at, StoreError};
use crate::storage::fsutil;

/// A blob being written: bytes go to a temporary file and are hashed as they pass; dropped
/// without [`BlobWriter::commit`], the file is removed.
pub struct BlobWriter {
    file: Option<io::BufWriter<File>>,
    tmp: PathBuf,
    dest: PathBuf,
    expected: Digest,
    size: Option<u64>,
    hasher: Hasher,
    written: u64,
    committed: bool,
}

impl BlobWriter {
    /// A writer into a new file `tmp` for the blob `expected` of `size` bytes (when known),
    /// renamed to `dest` by [`BlobWriter::commit`].
    pub(super) fn create(
        tmp: PathBuf,
        dest: PathBuf,
        expected: &Digest,
        size: Option<u64>,
    ) -> Result<BlobWriter, StoreError> {
        let file = OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o644)
            .open(&tmp)
            .map_err(io_at(&tmp))?;
        Ok(BlobWriter {
            file: Some(io::BufWriter::with_capacity(256 << 10, file)),
            tmp,
            dest,
            expected: expected.clone(),
            size,
            hasher: Hasher::new(),
            written: 0,
            committed: false,
        })
    }

    /// Appends `bytes`; more than the announced size fails at once.
    pub fn write(&mut self, bytes: &[u8]) -> Result<(), StoreError> {
        self.written += bytes.len() as u64;
        if let Some(size) = self.size {
            if self.written > size {
                return Err(StoreError::Size {
                    what: format!("blob {}", self.expected),
                    expected: size,
                    actual: self.written,
                });
            }
        }
        self.hasher.update(bytes);
        let file = self.file.as_mut().ok_or_else(|| StoreError::Io {
            path: self.tmp.clone(),
            source: io::Error::other("written after commit"),
        })?;
        file.write_all(bytes).map_err(io_at(&self.tmp))
    }

    pub fn written(&self) -> u64 {
        self.written
    }

    /// Checks size and digest, then makes the blob durable under its name (blocking: fsync).
    pub fn commit(mut self) -> Result<(), StoreError> {
        let what = || format!("blob {}", self.expected);
        if let Some(size) = self.size {
            if self.written != size {
                return Err(StoreError::Size {
                    what: what(),
                    expected: size,
                    actual: self.written,
                });
            }
        }
        let actual = std::mem::take(&mut self.hasher).finish();
        if actual != self.expected {
            return Err(StoreError::DigestMismatch {
                what: what(),
                expected: self.expected.clone(),
                actual,
            });
        }
        let file = self.file.take().ok_or_else(|| StoreError::Io {
            path: self.tmp.clone(),
            source: io::Error::other("committed twice"),
        })?;
        let file = file
            .into_inner()
            .map_err(|e| io_at(&self.tmp)(e.into_error()))?;
        file.sync_all().map_err(io_at(&self.tmp))?;
        drop(file);
        fs::rename(&self.tmp, &self.dest).map_err(io_at(&self.dest))?;
        self.committed = true;
        if let Some(dir) = self.dest.parent() {
            fsutil::fsync_dir(dir).map_err(io_at(dir))?;
        }
        Ok(())
    }
}

impl Drop for BlobWriter {
    fn drop(&mut self) {
        if !self.committed {
            let _ = fs::remove_file(&self.tmp);
        }
    }
}
