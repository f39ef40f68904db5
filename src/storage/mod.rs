//! On-disk building blocks shared by every persistent file litek8s writes:
//! the CRC-framed record format (`record`), small durable-file helpers (`fsutil`) and the
//! zero-filling of preallocated log space (`zeros`).
//! `objects.wal`, Raft log segments and snapshots all use the same framing.

pub mod fsutil;
pub mod record;
pub mod zeros;
