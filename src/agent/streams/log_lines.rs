//! Reading a container log file line by line with a bound on what one line may hold. conmon
//! writes a long line of output as partial CRI lines of at most 8 KiB, so a run of bytes
//! without a newline longer than [`MAX_LINE`] is no CRI line: a damaged file, or one no
//! runtime wrote (a 10 GiB file of zeros). Such a run is skipped piece by piece to its
//! newline, never held whole in memory, and the reader goes on after it; the holes of a
//! sparse file in it (zeros the filesystem does not store, so no newline) are jumped over
//! with `SEEK_DATA` rather than read. Lines are bytes here; they become text without failing
//! on bytes that are not UTF-8 (a container printing binary output), which are replaced.

use std::borrow::Cow;
use std::fs::File;
use std::io::{BufRead, BufReader, Read, Seek, SeekFrom};
use std::os::fd::AsRawFd;

use nix::unistd::{lseek, Whence};

/// The longest line read whole.
pub const MAX_LINE: usize = 256 * 1024;

/// What one read found.
#[derive(Debug, PartialEq, Eq)]
pub enum Line {
    /// A whole line, its newline included, in the caller's buffer.
    Whole,
    /// The end of what is written: this many bytes of a line that has no newline yet (in the
    /// caller's buffer).
    Unfinished(usize),
    /// A run longer than [`MAX_LINE`], skipped to its newline (included) or to the end of
    /// what is written: this many bytes.
    Skipped(u64),
    /// Nothing more is written.
    End,
}

/// Reads the next line into `line` (cleared first).
pub fn read_line(reader: &mut BufReader<File>, line: &mut Vec<u8>) -> std::io::Result<Line> {
    line.clear();
    // One byte more than a line may hold: reading it means the line is too long.
    let n = Read::take(&mut *reader, MAX_LINE as u64 + 1).read_until(b'\n', line)?;
    if n == 0 {
        return Ok(Line::End);
    }
    if line.ends_with(b"\n") {
        return Ok(Line::Whole);
    }
    if n <= MAX_LINE {
        return Ok(Line::Unfinished(n));
    }
    let mut skipped = n as u64;
    loop {
        if reader.buffer().is_empty() {
            skipped += skip_hole(reader)?;
            if reader.fill_buf()?.is_empty() {
                line.clear();
                return Ok(Line::Skipped(skipped));
            }
        }
        // What the buffer holds, up to a newline: unless a newline ends the run there, the
        // buffer is empty afterwards and the next round looks for a hole first.
        let buffered = reader.buffer().len() as u64;
        line.clear();
        let n = Read::take(&mut *reader, buffered).read_until(b'\n', line)?;
        skipped += n as u64;
        if line.ends_with(b"\n") {
            line.clear();
            return Ok(Line::Skipped(skipped));
        }
    }
}

/// Moves past a hole of the file at the reader's position (its buffer empty); the bytes
/// jumped over. Nothing when there is none or the filesystem cannot say.
fn skip_hole(reader: &mut BufReader<File>) -> std::io::Result<u64> {
    let at = reader.stream_position()?;
    let Ok(offset) = i64::try_from(at) else {
        return Ok(0);
    };
    let data = match lseek(reader.get_ref().as_raw_fd(), offset, Whence::SeekData) {
        Ok(data) => u64::try_from(data).unwrap_or(at),
        // No data after this point: the hole runs to the end of the file.
        Err(nix::Error::ENXIO) => reader.get_ref().metadata()?.len(),
        Err(_) => at,
    };
    // `lseek` moved the file's offset: the reader is put where it goes on in any case.
    reader.seek(SeekFrom::Start(data.max(at)))?;
    Ok(data.saturating_sub(at))
}

/// A whole line's text, without its newline.
pub fn text(line: &[u8]) -> Cow<'_, str> {
    String::from_utf8_lossy(line.strip_suffix(b"\n").unwrap_or(line))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every read of a file holding `input` (and a hole of `hole` bytes after it).
    fn all(input: &[u8], hole: u64) -> Vec<(Line, Vec<u8>)> {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("0.log");
        let mut file = File::create(&path).unwrap();
        std::io::Write::write_all(&mut file, input).unwrap();
        file.set_len(input.len() as u64 + hole).unwrap();
        let mut reader = BufReader::with_capacity(4096, File::open(&path).unwrap());
        let mut line = Vec::new();
        let mut got = Vec::new();
        loop {
            let l = read_line(&mut reader, &mut line).unwrap();
            let end = l == Line::End;
            got.push((l, line.clone()));
            if end {
                return got;
            }
        }
    }

    #[test]
    fn lines_come_whole_and_an_unfinished_one_says_so() {
        assert_eq!(
            all(b"a\nbc\nd", 0),
            vec![
                (Line::Whole, b"a\n".to_vec()),
                (Line::Whole, b"bc\n".to_vec()),
                (Line::Unfinished(1), b"d".to_vec()),
                (Line::End, vec![]),
            ]
        );
    }

    #[test]
    fn an_over_long_run_is_skipped_without_being_kept() {
        let mut input = b"first\n".to_vec();
        input.extend(std::iter::repeat_n(b'x', 3 * MAX_LINE));
        input.extend_from_slice(b"\nlast\n");
        input.extend(std::iter::repeat_n(0u8, MAX_LINE + 10));
        let got = all(&input, 0);
        assert_eq!(got[0], (Line::Whole, b"first\n".to_vec()));
        assert_eq!(got[1], (Line::Skipped(3 * MAX_LINE as u64 + 1), vec![]));
        assert_eq!(got[2], (Line::Whole, b"last\n".to_vec()));
        // Unfinished and too long: skipped to the end of what is there.
        assert_eq!(got[3], (Line::Skipped(MAX_LINE as u64 + 10), vec![]));
        assert_eq!(got[4], (Line::End, vec![]));
    }

    #[test]
    fn the_holes_of_a_sparse_run_are_jumped_over() {
        // A line, then a run of 2 MiB + 1 GiB of zeros (the first 2 MiB written, the rest a
        // hole) without a newline: skipped to the end, the hole counted, not read.
        let mut input = b"one\n".to_vec();
        input.extend(std::iter::repeat_n(0u8, 2 << 20));
        let got = all(&input, 1 << 30);
        assert_eq!(got[0], (Line::Whole, b"one\n".to_vec()));
        assert_eq!(got[1], (Line::Skipped((2 << 20) + (1 << 30)), vec![]));
        assert_eq!(got[2], (Line::End, vec![]));
    }

    #[test]
    fn bytes_that_are_not_utf8_do_not_stop_the_reading() {
        assert_eq!(text(b"ok \xff\xfe done\n"), "ok \u{fffd}\u{fffd} done");
        assert_eq!(text(b"no newline"), "no newline");
    }
}
