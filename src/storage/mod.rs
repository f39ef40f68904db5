//! On-disk building blocks shared by every persistent file litek8s writes:
//! the CRC-framed record format (`record`) and small durable-file helpers (`fsutil`).
//! `objects.wal`, Raft log segments and snapshots all use the same framing.

pub mod fsutil;
pub mod record;
