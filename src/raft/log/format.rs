//! Encoding and decoding of the log's record payloads (the record types are listed in the
//! module documentation of `raft::log`) and the names of segment files.
//!
//! Decoding reads bytes that already passed their record's checksum, so a payload that does
//! not decode is damage (or a format this version does not know), never a failed read: the
//! decoders answer [`FormatError`], which the callers report as corruption at the record's
//! file and offset (`LogError::Corrupt`).

use std::path::{Path, PathBuf};

use openraft::CommittedLeaderId;

use crate::raft::types::{Entry, LogId, Vote};
use crate::storage::record;

pub const SEGMENT_HEADER: u8 = 16;
pub const ENTRY: u8 = 17;
pub const VOTE: u8 = 18;
pub const COMMITTED: u8 = 19;
pub const TRUNCATE: u8 = 20;
pub const PURGE: u8 = 21;

const MAGIC: &[u8; 8] = b"LK8SLOG1";
/// Bytes of the binary prefix of an ENTRY payload (index, term, leader node).
pub const ENTRY_PREFIX: usize = 24;

/// Why a record payload does not decode.
#[derive(Debug, thiserror::Error)]
pub enum FormatError {
    #[error("bad segment header (wrong magic or length)")]
    SegmentHeader,
    #[error("entry record shorter than its {ENTRY_PREFIX}-byte prefix")]
    ShortEntry,
    #[error("{record} record of {len} bytes (expected {expected})")]
    Length {
        record: &'static str,
        len: usize,
        expected: usize,
    },
    #[error("bad {record} JSON: {source}")]
    Json {
        record: &'static str,
        source: serde_json::Error,
    },
    #[error("entry {entry} does not match its prefix {prefix}")]
    PrefixMismatch { entry: LogId, prefix: LogId },
}

/// The file name of segment `seq`.
pub fn segment_path(dir: &Path, seq: u64) -> PathBuf {
    dir.join(format!("{seq:016x}.seg"))
}

/// The temporary name a segment is prepared under.
pub fn segment_tmp_path(dir: &Path, seq: u64) -> PathBuf {
    dir.join(format!("{seq:016x}.seg.tmp"))
}

/// The seq of a segment file name, if it is one.
pub fn parse_segment_name(name: &str) -> Option<u64> {
    let hex = name.strip_suffix(".seg")?;
    if hex.len() != 16 {
        return None;
    }
    u64::from_str_radix(hex, 16).ok()
}

fn log_id_bytes(log_id: &LogId) -> [u8; 24] {
    let mut out = [0u8; 24];
    out[0..8].copy_from_slice(&log_id.index.to_le_bytes());
    out[8..16].copy_from_slice(&log_id.leader_id.term.to_le_bytes());
    out[16..24].copy_from_slice(&log_id.leader_id.node_id.to_le_bytes());
    out
}

fn u64_at(buf: &[u8], at: usize) -> Option<u64> {
    let bytes: [u8; 8] = buf.get(at..at + 8)?.try_into().ok()?;
    Some(u64::from_le_bytes(bytes))
}

fn log_id_from(buf: &[u8]) -> Option<LogId> {
    Some(LogId {
        index: u64_at(buf, 0)?,
        leader_id: CommittedLeaderId::new(u64_at(buf, 8)?, u64_at(buf, 16)?),
    })
}

/// Appends the SEGMENT_HEADER record.
pub fn encode_segment_header(out: &mut Vec<u8>, seq: u64, next_index: u64) {
    let mut payload = Vec::with_capacity(24);
    payload.extend_from_slice(MAGIC);
    payload.extend_from_slice(&seq.to_le_bytes());
    payload.extend_from_slice(&next_index.to_le_bytes());
    record::encode_into(out, SEGMENT_HEADER, &payload);
}

/// The seq a SEGMENT_HEADER payload names.
pub fn decode_segment_header(payload: &[u8]) -> Result<u64, FormatError> {
    if payload.len() != 24 || &payload[..8] != MAGIC {
        return Err(FormatError::SegmentHeader);
    }
    u64_at(payload, 8).ok_or(FormatError::SegmentHeader)
}

/// Appends an ENTRY record; returns its framed length. The JSON is written straight into
/// `out` (entries of a large batch run to hundreds of KiB: no copy of them is made).
pub fn encode_entry(out: &mut Vec<u8>, entry: &Entry) -> Result<usize, serde_json::Error> {
    let start = out.len();
    record::encode_in_place(out, ENTRY, |payload| {
        payload.extend_from_slice(&log_id_bytes(&entry.log_id));
        write_entry_json(payload, entry)
    })?;
    Ok(out.len() - start)
}

/// The same JSON as serde's encoding of `entry`; a Normal entry's Mutations are written by
/// `Batch::write_json` (most of a log's bytes are objects, and serde_json escapes strings a
/// byte at a time).
pub(crate) fn write_entry_json(out: &mut Vec<u8>, entry: &Entry) -> Result<(), serde_json::Error> {
    let openraft::EntryPayload::Normal(batch) = &entry.payload else {
        return serde_json::to_writer(&mut *out, entry);
    };
    out.extend_from_slice(br#"{"log_id":"#);
    serde_json::to_writer(&mut *out, &entry.log_id)?;
    out.extend_from_slice(br#","payload":{"Normal":"#);
    batch.write_json(out);
    out.extend_from_slice(b"}}");
    Ok(())
}

/// The log id of an ENTRY payload, without parsing the entry (for fast replay).
pub fn entry_log_id(payload: &[u8]) -> Result<LogId, FormatError> {
    log_id_from(payload).ok_or(FormatError::ShortEntry)
}

/// The whole entry of an ENTRY payload.
pub fn decode_entry(payload: &[u8]) -> Result<Entry, FormatError> {
    let prefix = entry_log_id(payload)?;
    let entry: Entry =
        serde_json::from_slice(&payload[ENTRY_PREFIX..]).map_err(|source| FormatError::Json {
            record: "entry",
            source,
        })?;
    if entry.log_id != prefix {
        return Err(FormatError::PrefixMismatch {
            entry: entry.log_id,
            prefix,
        });
    }
    Ok(entry)
}

pub fn encode_vote(out: &mut Vec<u8>, vote: &Vote) {
    let json = serde_json::to_vec(vote).unwrap_or_default();
    record::encode_into(out, VOTE, &json);
}

pub fn decode_vote(payload: &[u8]) -> Result<Vote, FormatError> {
    serde_json::from_slice(payload).map_err(|source| FormatError::Json {
        record: "vote",
        source,
    })
}

pub fn encode_committed(out: &mut Vec<u8>, committed: &Option<LogId>) {
    let json = serde_json::to_vec(committed).unwrap_or_default();
    record::encode_into(out, COMMITTED, &json);
}

pub fn decode_committed(payload: &[u8]) -> Result<Option<LogId>, FormatError> {
    serde_json::from_slice(payload).map_err(|source| FormatError::Json {
        record: "committed id",
        source,
    })
}

pub fn encode_truncate(out: &mut Vec<u8>, index: u64) {
    record::encode_into(out, TRUNCATE, &index.to_le_bytes());
}

pub fn decode_truncate(payload: &[u8]) -> Result<u64, FormatError> {
    let length = FormatError::Length {
        record: "truncate",
        len: payload.len(),
        expected: 8,
    };
    match payload.len() {
        8 => u64_at(payload, 0).ok_or(length),
        _ => Err(length),
    }
}

pub fn encode_purge(out: &mut Vec<u8>, log_id: &LogId) {
    record::encode_into(out, PURGE, &log_id_bytes(log_id));
}

pub fn decode_purge(payload: &[u8]) -> Result<LogId, FormatError> {
    let length = || FormatError::Length {
        record: "purge",
        len: payload.len(),
        expected: 24,
    };
    if payload.len() != 24 {
        return Err(length());
    }
    log_id_from(payload).ok_or_else(length)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::storage::record::Decoded;

    #[test]
    fn entry_round_trip_and_names() {
        let entry = Entry {
            log_id: LogId::new(CommittedLeaderId::new(3, 7), 42),
            payload: openraft::EntryPayload::Blank,
        };
        let mut buf = Vec::new();
        let len = encode_entry(&mut buf, &entry).unwrap();
        assert_eq!(len, buf.len());
        let Decoded::Record {
            record_type,
            payload,
            ..
        } = record::decode_at(&buf, 0)
        else {
            panic!("not a record");
        };
        assert_eq!(record_type, ENTRY);
        assert_eq!(entry_log_id(payload).unwrap(), entry.log_id);
        assert_eq!(decode_entry(payload).unwrap().log_id, entry.log_id);
        let path = segment_path(Path::new("/x"), 0x1f);
        let name = path.file_name().unwrap().to_str().unwrap();
        assert_eq!(parse_segment_name(name), Some(0x1f));
        assert_eq!(parse_segment_name("0000000000000001.seg.tmp"), None);
    }

    /// Payloads that passed their checksum but are not what their type says: each decoder
    /// names what is wrong.
    #[test]
    fn undecodable_payloads_are_typed_format_errors() {
        let mut header = Vec::new();
        encode_segment_header(&mut header, 5, 1);
        let Decoded::Record { payload, .. } = record::decode_at(&header, 0) else {
            panic!("not a record");
        };
        assert_eq!(decode_segment_header(payload).unwrap(), 5);
        let mut wrong_magic = payload.to_vec();
        wrong_magic[0] ^= 1;
        assert!(matches!(
            decode_segment_header(&wrong_magic),
            Err(FormatError::SegmentHeader)
        ));
        assert!(matches!(
            entry_log_id(&[0; ENTRY_PREFIX - 1]),
            Err(FormatError::ShortEntry)
        ));
        let mut entry = [0u8; ENTRY_PREFIX].to_vec();
        entry.extend_from_slice(b"{not json");
        assert!(matches!(
            decode_entry(&entry),
            Err(FormatError::Json {
                record: "entry",
                ..
            })
        ));
        let other = Entry {
            log_id: LogId::new(CommittedLeaderId::new(1, 1), 9),
            payload: openraft::EntryPayload::Blank,
        };
        let mut mismatched = [0u8; ENTRY_PREFIX].to_vec();
        mismatched.extend_from_slice(&serde_json::to_vec(&other).unwrap());
        assert!(matches!(
            decode_entry(&mismatched),
            Err(FormatError::PrefixMismatch { .. })
        ));
        assert!(matches!(
            decode_vote(b"[]"),
            Err(FormatError::Json { record: "vote", .. })
        ));
        assert!(matches!(
            decode_committed(b"{"),
            Err(FormatError::Json { .. })
        ));
        assert!(matches!(
            decode_truncate(&[0; 7]),
            Err(FormatError::Length {
                len: 7,
                expected: 8,
                ..
            })
        ));
        assert_eq!(decode_truncate(&9u64.to_le_bytes()).unwrap(), 9);
        assert!(matches!(
            decode_purge(&[0; 25]),
            Err(FormatError::Length {
                len: 25,
                expected: 24,
                ..
            })
        ));
    }

    /// Normal entries are written by hand (`write_entry_json`): the bytes must be exactly
    /// serde's, so that older and newer servers read each other's logs and snapshots.
    #[test]
    fn normal_entries_are_written_exactly_as_serde_writes_them() {
        use crate::kube::mutation::{Mutation, Precondition};
        use crate::kube::object::ObjectKey;
        use crate::raft::types::{Batch, Proposal};
        let key = ObjectKey::new("pods", "default", "p\\1");
        let object =
            serde_json::json!({"metadata": {"name": "p\\1"}, "spec": {"x": "\u{7}\"", "n": 1}});
        let mut followers_write = Proposal::new(Mutation::Update {
            key: key.clone(),
            object: object.clone(),
            precondition: Precondition::at(4),
        });
        (
            followers_write.session,
            followers_write.seq,
            followers_write.acked,
        ) = (Some(9), Some(12), Some(10));
        let mut only_seq = Proposal::new(Mutation::Delete {
            key: key.clone(),
            precondition: Precondition::none(),
        });
        only_seq.seq = Some(1);
        let batches = [
            Batch::default(),
            Batch::new(vec![
                Proposal::new(Mutation::Create {
                    key,
                    object,
                    requires_open_namespace: false,
                }),
                followers_write,
                only_seq,
            ]),
        ];
        for batch in batches {
            let entry = Entry {
                log_id: LogId::new(CommittedLeaderId::new(2, 5), 77),
                payload: openraft::EntryPayload::Normal(batch),
            };
            let mut ours = Vec::new();
            write_entry_json(&mut ours, &entry).unwrap();
            assert_eq!(
                String::from_utf8_lossy(&ours),
                String::from_utf8_lossy(&serde_json::to_vec(&entry).unwrap())
            );
            let mut buf = Vec::new();
            encode_entry(&mut buf, &entry).unwrap();
            let Decoded::Record { payload, .. } = record::decode_at(&buf, 0) else {
                panic!("not a record");
            };
            assert_eq!(decode_entry(payload).unwrap(), entry);
        }
    }
}
