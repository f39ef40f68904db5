//! What can go wrong setting up or tearing down a pod's sandbox.

use std::path::PathBuf;
use std::time::Duration;

#[derive(Debug, thiserror::Error)]
pub enum SandboxError {
    #[error("{what}: {source}")]
    Io {
        what: String,
        #[source]
        source: std::io::Error,
    },
    /// A namespace could not be created, mounted or removed.
    #[error("{what}: {errno}")]
    Namespace {
        what: String,
        errno: nix::errno::Errno,
    },
    /// No network configuration in the CNI directory, and none can be generated yet (the
    /// node has no podCIDR).
    #[error("no CNI network config in {dir} and the node has no podCIDR to generate one")]
    NoNetworkConfig { dir: PathBuf },
    /// A CNI config file that does not parse.
    #[error("CNI config {path}: {detail}")]
    BadNetworkConfig { path: PathBuf, detail: String },
    #[error("CNI plugin {plugin:?} not found in {dirs}")]
    PluginNotFound { plugin: String, dirs: String },
    /// A plugin failed: the CNI error's code and message (and details), as the plugin
    /// reported them.
    #[error("CNI {command} {plugin}: {message}")]
    Plugin {
        plugin: String,
        command: String,
        code: Option<u32>,
        message: String,
    },
    #[error("CNI {command} {plugin}: no answer after {after:?}")]
    PluginTimeout {
        plugin: String,
        command: String,
        after: Duration,
    },
    /// A pod's `sandbox.json` exists but does not parse.
    #[error("sandbox record {path} is corrupt: {detail}")]
    CorruptState { path: PathBuf, detail: String },
    /// The pod description cannot become a sandbox (names that are not path components, …).
    #[error("invalid pod sandbox: {0}")]
    Invalid(String),
}

impl SandboxError {
    pub(crate) fn io(what: impl Into<String>, source: std::io::Error) -> Self {
        SandboxError::Io {
            what: what.into(),
            source,
        }
    }

    /// The reason a pod shows while its sandbox cannot be made (kubelet's event reason for
    /// a failed sandbox).
    pub fn reason(&self) -> &'static str {
        "FailedCreatePodSandBox"
    }
}
