//! `ClusterError`: why a server could not form, join or run as a cluster member. Like the
//! server's own errors, every variant names the file, address or step involved, so that one
//! line in the journal is enough to act on.

use std::net::SocketAddr;
use std::path::PathBuf;

use crate::kube::wal::WalError;

#[derive(Debug, thiserror::Error)]
pub enum ClusterError {
    /// A file or directory of the member could not be read, written or created.
    // Not named `source`: the message already includes the cause (see `ServerError::Io`).
    #[error("{}: {error}", path.display())]
    Io {
        path: PathBuf,
        error: std::io::Error,
    },
    /// A member file exists and reads fine, but its contents are unusable.
    #[error("{}: {reason}", path.display())]
    Corrupt { path: PathBuf, reason: String },
    /// The flags or environment ask for something that cannot work; says what to pass.
    #[error("{0}")]
    Config(String),
    /// The Raft listener's address is taken or not ours.
    #[error("cannot listen on {addr}: {error}")]
    Bind {
        addr: SocketAddr,
        error: std::io::Error,
    },
    /// Talking to the server being joined failed (unreachable, wrong CA, refused).
    #[error("joining {addr}: {reason}")]
    Join { addr: String, reason: String },
    /// The single server's objects.wal could not be read into the first snapshot.
    #[error(transparent)]
    Wal(#[from] WalError),
    /// The Raft log, snapshot or openraft itself failed to start.
    #[error("{what}: {reason}")]
    Raft { what: String, reason: String },
}

impl ClusterError {
    pub(crate) fn io(path: impl Into<PathBuf>) -> impl FnOnce(std::io::Error) -> ClusterError {
        let path = path.into();
        move |error| ClusterError::Io { path, error }
    }

    pub(crate) fn corrupt(path: impl Into<PathBuf>, reason: impl Into<String>) -> ClusterError {
        ClusterError::Corrupt {
            path: path.into(),
            reason: reason.into(),
        }
    }

    pub(crate) fn raft(what: impl Into<String>, reason: impl std::fmt::Display) -> ClusterError {
        ClusterError::Raft {
            what: what.into(),
            reason: reason.to_string(),
        }
    }
}

/// Reads a member file as text; `Ok(None)` if it does not exist.
pub(crate) fn read_optional(path: &std::path::Path) -> Result<Option<String>, ClusterError> {
    crate::storage::fsutil::read_text_optional(path).map_err(|e| match e.kind() {
        std::io::ErrorKind::InvalidData => ClusterError::corrupt(path, "not UTF-8 text"),
        _ => ClusterError::io(path)(e),
    })
}

/// Writes a member file atomically with `mode`, naming it on error.
pub(crate) fn write_file(
    path: &std::path::Path,
    contents: &[u8],
    mode: u32,
) -> Result<(), ClusterError> {
    crate::storage::fsutil::write_file(path, contents, mode).map_err(ClusterError::io(path))
}
