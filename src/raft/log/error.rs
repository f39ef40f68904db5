//! Errors of the log engine: I/O failures, corruption found on open, and the permanent
//! failure state after a write or sync error.

use std::path::PathBuf;

/// Why the log could not be opened or used.
#[derive(Debug, Clone, thiserror::Error)]
pub enum LogError {
    #[error("{path}: {message}")]
    Io { path: PathBuf, message: String },
    /// The data on disk is damaged somewhere a crash cannot explain; never repaired silently.
    #[error("{path}: corrupt at offset {offset}: {reason}")]
    Corrupt {
        path: PathBuf,
        offset: u64,
        reason: String,
    },
    /// A write or fdatasync failed earlier; the log refuses all further work.
    #[error("raft log failed permanently: {0}")]
    Failed(String),
    /// The caller broke the log's contract (for example appended with a gap).
    #[error("invalid log operation: {0}")]
    Invalid(String),
}

impl LogError {
    pub(crate) fn io(path: impl Into<PathBuf>, err: std::io::Error) -> Self {
        LogError::Io {
            path: path.into(),
            message: err.to_string(),
        }
    }

    /// Damage at `offset` of `path`; `reason` is a message or a typed decoding error
    /// (`format::FormatError`, `storage::record`'s).
    pub(crate) fn corrupt(
        path: impl Into<PathBuf>,
        offset: u64,
        reason: impl std::fmt::Display,
    ) -> Self {
        LogError::Corrupt {
            path: path.into(),
            offset,
            reason: reason.to_string(),
        }
    }
}
