//! On-disk building blocks shared by every persistent file litek8s writes:
//! the CRC-framed record format (`record`), small durable-file helpers (`fsutil`), the
//! zero-filling of preallocated log space (`zeros`) and the I/O seam of the logs' append
//! paths (`io`).
//! `objects.wal`, Raft log segments and snapshots all use the same framing.

pub(crate) mod fsutil;
pub mod io;
pub mod record;
pub(crate) mod zeros;
