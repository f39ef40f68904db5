//! `ServerError`: why an API server could not start or keep running. Every variant names the
//! file or address involved, so `litek8s: <error>` on one line is enough to act on.

use std::net::SocketAddr;
use std::path::PathBuf;

use crate::cluster::ClusterError;
use crate::kube::wal::WalError;

#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    /// A file or directory could not be read, written or created.
    // Fields are not named `source`: the message already includes the cause, and anyhow's
    // `{:#}` would repeat it.
    #[error("{}: {error}", path.display())]
    Io {
        path: PathBuf,
        error: std::io::Error,
    },
    /// A file exists and reads fine, but its contents are unusable.
    #[error("{}: {reason}", path.display())]
    Corrupt { path: PathBuf, reason: String },
    /// Generating a key or certificate failed.
    #[error("generating {what}: {reason}")]
    Crypto { what: &'static str, reason: String },
    #[error("cannot listen on {addr}: {error}")]
    Bind {
        addr: SocketAddr,
        error: std::io::Error,
    },
    #[error(transparent)]
    Wal(#[from] WalError),
    /// The `--token-auth-file` cannot be used.
    #[error(transparent)]
    TokenFile(#[from] crate::auth::token_file::TokenFileError),
    /// The `--admission-control-config-file` cannot be used.
    #[error(transparent)]
    AdmissionConfig(#[from] crate::api::write::admission::PodSecurityConfigError),
    /// The audit policy or log cannot be used.
    #[error(transparent)]
    Audit(#[from] crate::audit::AuditError),
    /// A start-up task stopped before finishing (it panicked or the runtime is stopping).
    #[error("{what}: {reason}")]
    Task { what: &'static str, reason: String },
    /// Forming, joining or running the cluster failed.
    #[error("cluster: {0}")]
    Cluster(#[from] ClusterError),
}

impl ServerError {
    pub(crate) fn io(path: impl Into<PathBuf>) -> impl FnOnce(std::io::Error) -> ServerError {
        let path = path.into();
        move |error| ServerError::Io { path, error }
    }

    pub(crate) fn corrupt(path: impl Into<PathBuf>, reason: impl Into<String>) -> ServerError {
        ServerError::Corrupt {
            path: path.into(),
            reason: reason.into(),
        }
    }
}
