//! Reads the records of `objects.wal` one at a time through a bounded window, so replaying a
//! large log never holds the whole file in memory.

use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;

use crate::storage::record::{self, Decoded, InvalidRecord, HEADER_LEN};

/// Bytes read from the file at a time (a record larger than this gets a window of its own).
const WINDOW: usize = 4 << 20;

/// What is at an offset of the file.
pub(super) enum Item<'a> {
    Record {
        record_type: u8,
        payload: &'a [u8],
        next: u64,
    },
    /// Zeros or the end of the file: no more records.
    End,
    Invalid(InvalidRecord),
}

pub(super) struct RecordReader<'f> {
    file: &'f File,
    file_len: u64,
    buf: Vec<u8>,
    /// File offset of `buf[0]`.
    buf_start: u64,
}

impl<'f> RecordReader<'f> {
    pub fn new(file: &'f File, file_len: u64) -> Self {
        RecordReader {
            file,
            file_len,
            buf: Vec::new(),
            buf_start: 0,
        }
    }

    /// The record at `offset` (8-byte aligned).
    pub fn at(&mut self, offset: u64) -> io::Result<Item<'_>> {
        let left = self.file_len.saturating_sub(offset);
        self.ensure(offset, left.min(HEADER_LEN as u64))?;
        // A record that runs past the window but not past the file: widen the window.
        let needed = match record::decode_at(&self.buf, (offset - self.buf_start) as usize) {
            Decoded::Invalid(InvalidRecord::ShortRecord { needed, .. })
                if needed as u64 <= left =>
            {
                Some(needed as u64)
            }
            _ => None,
        };
        if let Some(needed) = needed {
            self.ensure(offset, needed)?;
        }
        Ok(
            match record::decode_at(&self.buf, (offset - self.buf_start) as usize) {
                Decoded::Record {
                    record_type,
                    payload,
                    next,
                } => Item::Record {
                    record_type,
                    payload,
                    next: self.buf_start + next as u64,
                },
                Decoded::End => Item::End,
                Decoded::Invalid(reason) => Item::Invalid(reason),
            },
        )
    }

    /// Makes `buf` cover `[offset, offset + want)`.
    fn ensure(&mut self, offset: u64, want: u64) -> io::Result<()> {
        let buf_end = self.buf_start + self.buf.len() as u64;
        if offset >= self.buf_start && offset + want <= buf_end {
            return Ok(());
        }
        let len = want
            .max(WINDOW as u64)
            .min(self.file_len.saturating_sub(offset));
        self.buf.clear();
        self.buf.resize(len as usize, 0);
        self.file.read_exact_at(&mut self.buf, offset)?;
        self.buf_start = offset;
        Ok(())
    }
}

/// The offset just past the last non-zero byte in `[from, file_len)`, if there is one.
pub(super) fn last_nonzero(file: &File, from: u64, file_len: u64) -> io::Result<Option<u64>> {
    let mut buf = vec![0u8; WINDOW.min(file_len.saturating_sub(from) as usize)];
    let mut at = from;
    let mut last = None;
    while at < file_len {
        let n = (file_len - at).min(buf.len() as u64) as usize;
        file.read_exact_at(&mut buf[..n], at)?;
        if let Some(i) = crate::storage::zeros::last_nonzero_byte(&buf[..n]) {
            last = Some(at + i as u64 + 1);
        }
        at += n as u64;
    }
    Ok(last)
}
