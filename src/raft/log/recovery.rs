//! Opening the log: replays every segment in order into a fresh `State`.
//!
//! - A torn tail of the last segment (a short record, a zeroed or garbage header, or a bad
//!   checksum with nothing valid after it) is what a crash mid-write leaves: the tail is
//!   zeroed and synced, with a warning naming the file and offset.
//! - A bad record followed by valid ones, a bad record in any earlier segment, a missing
//!   segment or a gap in the entry indexes is damage a crash cannot explain: opening fails
//!   with an error naming the file and offset.
//! - Trailing segment files without a header are unused preallocated space and are removed;
//!   so are leftover temp files.

use std::fs::{self, File, OpenOptions};
use std::io::Read;
use std::path::Path;
use std::sync::Arc;

use super::error::LogError;
use super::format::{self, parse_segment_name, segment_path};
use super::state::{SegmentInfo, Slot, State};
use crate::storage::fsutil::fsync_dir;
use crate::storage::io::{self, RealIo};
use crate::storage::record::{self, Decoded};

/// Replays the log in `dir` (created if missing).
pub(crate) fn recover(dir: &Path, cache_cap: usize) -> Result<State, LogError> {
    fs::create_dir_all(dir).map_err(|e| LogError::io(dir, e))?;
    let mut seqs = Vec::new();
    let mut removed = false;
    for item in fs::read_dir(dir).map_err(|e| LogError::io(dir, e))? {
        let item = item.map_err(|e| LogError::io(dir, e))?;
        let name = item.file_name().to_string_lossy().into_owned();
        if name.ends_with(".seg.tmp") {
            fs::remove_file(item.path()).map_err(|e| LogError::io(item.path(), e))?;
            removed = true;
        } else if let Some(seq) = parse_segment_name(&name) {
            seqs.push(seq);
        }
    }
    seqs.sort_unstable();
    for pair in seqs.windows(2) {
        if pair[1] != pair[0] + 1 {
            return Err(LogError::corrupt(
                segment_path(dir, pair[0] + 1),
                0,
                format!("segment missing between {} and {}", pair[0], pair[1]),
            ));
        }
    }
    let mut buf = Vec::new();
    // Trailing files without a header were preallocated and never used (or their header
    // write was torn by a crash before it was synced): drop them.
    while let Some(&seq) = seqs.last() {
        let path = segment_path(dir, seq);
        read_file(&path, &mut buf)?;
        let has_header = matches!(record::decode_at(&buf, 0), Decoded::Record { .. });
        if has_header || record::scan_for_valid_record(&buf, 0).is_some() {
            break;
        }
        fs::remove_file(&path).map_err(|e| LogError::io(&path, e))?;
        removed = true;
        seqs.pop();
    }
    if removed {
        fsync_dir(dir).map_err(|e| LogError::io(dir, e))?;
    }
    let mut state = State::new(cache_cap);
    let last = seqs.len();
    for (i, &seq) in seqs.iter().enumerate() {
        let path = segment_path(dir, seq);
        read_file(&path, &mut buf)?;
        let end = replay_segment(&mut state, seq, &path, &buf, i + 1 == last)?;
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .open(&path)
            .map_err(|e| LogError::io(&path, e))?;
        state.active = seq;
        state.active_capacity = buf.len() as u64;
        state.write_offset = end;
        if let Some(info) = state.segments.get_mut(&seq) {
            info.file = Arc::new(file);
        }
    }
    if let (Some(purged), Some(first)) = (state.purged, state.slots.front()) {
        if first.log_id.index != purged.index + 1 {
            return Err(LogError::corrupt(
                segment_path(dir, first.seq),
                first.offset,
                format!(
                    "entries resume at index {} but only up to {} are purged",
                    first.log_id.index, purged.index
                ),
            ));
        }
    }
    Ok(state)
}

fn read_file(path: &Path, buf: &mut Vec<u8>) -> Result<(), LogError> {
    buf.clear();
    File::open(path)
        .and_then(|mut f| f.read_to_end(buf))
        .map_err(|e| LogError::io(path, e))?;
    Ok(())
}

/// Replays one segment; returns the offset just past its last valid record.
fn replay_segment(
    state: &mut State,
    seq: u64,
    path: &Path,
    buf: &[u8],
    last: bool,
) -> Result<u64, LogError> {
    let corrupt = |offset: usize, reason: String| LogError::corrupt(path, offset as u64, reason);
    match record::decode_at(buf, 0) {
        Decoded::Record {
            record_type: format::SEGMENT_HEADER,
            payload,
            ..
        } => {
            let named = format::decode_segment_header(payload)
                .map_err(|e| LogError::corrupt(path, 0, e))?;
            if named != seq {
                return Err(corrupt(0, format!("header names segment {named}")));
            }
        }
        _ => return Err(corrupt(0, "no segment header".into())),
    }
    // A placeholder handle until the caller opens the file for writing.
    let placeholder = File::open(path).map_err(|e| LogError::io(path, e))?;
    state.segments.insert(
        seq,
        SegmentInfo {
            file: Arc::new(placeholder),
            path: path.to_path_buf(),
            max_index: None,
        },
    );
    let mut offset = 0;
    loop {
        match record::decode_at(buf, offset) {
            Decoded::Record {
                record_type,
                payload,
                next,
            } => {
                apply(
                    state,
                    seq,
                    path,
                    offset,
                    record_type,
                    payload,
                    next - offset,
                )?;
                offset = next;
            }
            Decoded::End => {
                if record::scan_for_valid_record(buf, offset).is_some() {
                    return Err(corrupt(
                        offset,
                        "zero header followed by valid records".into(),
                    ));
                }
                if last && buf[offset..].iter().any(|b| *b != 0) {
                    cut_tail(path, buf, offset, "garbage after the last record")?;
                }
                return Ok(offset as u64);
            }
            Decoded::Invalid(e) => {
                if !last || record::scan_for_valid_record(buf, offset).is_some() {
                    return Err(corrupt(offset, e.to_string()));
                }
                cut_tail(path, buf, offset, &e.to_string())?;
                return Ok(offset as u64);
            }
        }
    }
}

/// Zeroes a torn tail from `offset` to the end of the file, durably.
fn cut_tail(path: &Path, buf: &[u8], offset: usize, reason: &str) -> Result<(), LogError> {
    tracing::warn!(
        "raft log {}: torn tail at offset {offset} ({reason}); truncating to the last whole record",
        path.display()
    );
    let file = OpenOptions::new()
        .write(true)
        .open(path)
        .map_err(|e| LogError::io(path, e))?;
    io::write_zeros(&RealIo, &file, offset as u64, buf.len() as u64)
        .and_then(|()| file.sync_data())
        .map_err(|e| LogError::io(path, e))
}

fn apply(
    state: &mut State,
    seq: u64,
    path: &Path,
    offset: usize,
    record_type: u8,
    payload: &[u8],
    len: usize,
) -> Result<(), LogError> {
    let corrupt = |reason: String| LogError::corrupt(path, offset as u64, reason);
    let undecodable = |e: format::FormatError| LogError::corrupt(path, offset as u64, e);
    match record_type {
        format::SEGMENT_HEADER if offset == 0 => {}
        format::ENTRY => {
            let log_id = format::entry_log_id(payload).map_err(undecodable)?;
            if let Some(info) = state.segments.get_mut(&seq) {
                info.max_index = Some(info.max_index.map_or(log_id.index, |m| m.max(log_id.index)));
            }
            if state.purged.is_some_and(|p| log_id.index <= p.index) {
                return Ok(()); // purged already; the segment is just not deleted yet
            }
            if let Some(back) = state.slots.back() {
                if log_id.index != back.log_id.index + 1 {
                    return Err(corrupt(format!(
                        "entry {} follows entry {}: a gap in the log",
                        log_id.index, back.log_id.index
                    )));
                }
            }
            state.slots.push_back(Slot {
                log_id,
                seq,
                offset: offset as u64,
                len: len as u32,
                wseq: 0,
                entry: None,
            });
        }
        format::VOTE => state.vote = Some(format::decode_vote(payload).map_err(undecodable)?),
        format::COMMITTED => {
            state.committed = format::decode_committed(payload).map_err(undecodable)?
        }
        format::TRUNCATE => {
            let index = format::decode_truncate(payload).map_err(undecodable)?;
            state.truncate_from(index);
        }
        format::PURGE => {
            let log_id = format::decode_purge(payload).map_err(undecodable)?;
            if state.purged.is_none_or(|p| p.index < log_id.index) {
                state.purged = Some(log_id);
                state.purge_upto(log_id.index);
            }
        }
        other => return Err(corrupt(format!("unexpected record type {other}"))),
    }
    Ok(())
}
