//! The Raft log engine: openraft's `RaftLogStorage` over segment files with group commit.
//!
//! # Files
//! The log directory holds segment files named `{seq:016x}.seg` (seq counts up from 1 and has
//! no gaps). Each is `segment_size` bytes (16 MiB by default), created by a background thread
//! as `{seq:016x}.seg.tmp`, zero-filled, fsynced, renamed into place and the directory
//! fsynced, all before it is needed. Appending is then an overwrite of zeros in place: the file
//! size never changes, so `fdatasync` has no metadata to journal.
//!
//! # Records
//! Every segment is a sequence of `storage::record` frames (8-byte aligned: u32 length, type
//! byte, 3 zero bytes, crc32 of type+payload, payload, zero padding), ended by an all-zero
//! header (the preallocated space). Integers are little-endian.
//!
//! ```text
//! type  name            payload
//! 16    SEGMENT_HEADER  "LK8SLOG1", seq u64, next index u64 (informational)
//! 17    ENTRY           index u64, term u64, leader node u64, then the JSON of the Entry
//! 18    VOTE            JSON of the Vote
//! 19    COMMITTED       JSON of Option<LogId>
//! 20    TRUNCATE        index u64: entries at this index and later are gone
//! 21    PURGE           index u64, term u64, leader node u64: entries up to here are gone
//! ```
//! A segment starts with SEGMENT_HEADER followed by the current VOTE, COMMITTED and PURGE
//! (when set), so the newest segment alone carries the state even after every older segment
//! is deleted. Later records are replayed in order: TRUNCATE and PURGE are logical, and whole
//! segments are unlinked only once every entry in them is purged.
//!
//! # Durability
//! `append` encodes the entries, makes them readable at once (an in-memory cache) and queues
//! the bytes. Whoever flushes (the flush thread, or an append that finds nobody flushing, on its
//! own thread) writes all queued bytes, calls `fdatasync` once per file and then completes the
//! queued callbacks in order (group commit). The previous segment is synced
//! before anything is written into the next one, so only the last segment can have a torn
//! tail. A failed write or sync fails the log for good: no fsync is retried.
//!
//! # Recovery
//! See `recovery`: a torn tail of the last segment is cut and zeroed; anything else that does
//! not decode, and any gap in segment numbers or entry indexes, refuses to open.

mod error;
mod flush;
pub(crate) mod format;
mod preallocate;
mod reader;
mod recovery;
mod state;
mod storage;

pub use error::LogError;
pub use reader::LogReader;
pub use storage::{LogConfig, LogStore};
