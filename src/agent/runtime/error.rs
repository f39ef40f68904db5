//! What can go wrong when running containers, and the pod status reason each failure shows.

use std::path::PathBuf;
use std::time::Duration;

#[derive(Debug, thiserror::Error)]
pub enum RuntimeError {
    /// Neither runc nor crun can run containers on this machine (or the one forced with
    /// `--runtime` is missing); the text says why.
    #[error("no usable OCI runtime: {0}")]
    NoRuntime(String),
    /// conmon is not installed.
    #[error("conmon not found on PATH (install the conmon package)")]
    NoConmon,
    /// A file or directory the runtime owns could not be read or written.
    #[error("{what}: {source}")]
    Io {
        what: String,
        #[source]
        source: std::io::Error,
    },
    /// A container's `state.json` exists but does not parse: the container is skipped, not
    /// guessed at.
    #[error("container state {path} is corrupt: {detail}")]
    CorruptState { path: PathBuf, detail: String },
    #[error("container {0} not found")]
    NotFound(String),
    /// The description the pod worker filled in cannot become a runtime config.
    #[error("invalid container config: {0}")]
    InvalidConfig(String),
    /// `runtime create` failed (under conmon): the runtime's own message, e.g.
    /// `exec: "nosuch": executable file not found in $PATH`.
    #[error("{}", prefixed(runtime, "create", message))]
    Create { runtime: String, message: String },
    /// `runtime start` failed.
    #[error("{}", prefixed(runtime, "start", message))]
    Start { runtime: String, message: String },
    /// conmon itself failed before it could report on the container.
    #[error("conmon: {0}")]
    Conmon(String),
    /// Another runtime command (kill, delete, state) failed.
    #[error("{command}: {message}")]
    Command { command: String, message: String },
    #[error("{what}: no answer after {after:?}")]
    Timeout { what: String, after: Duration },
    /// The container must be stopped before it is removed.
    #[error("container {0} is still running")]
    StillRunning(String),
}

/// `runc create failed: …` as runc words it, the same prefix added to crun's bare messages.
fn prefixed(runtime: &str, command: &str, message: &str) -> String {
    let prefix = format!("{runtime} {command} failed");
    if message.starts_with(&prefix) {
        message.to_string()
    } else {
        format!("{prefix}: {message}")
    }
}

impl RuntimeError {
    pub(crate) fn io(what: impl Into<String>, source: std::io::Error) -> Self {
        RuntimeError::Io {
            what: what.into(),
            source,
        }
    }

    /// The reason a pod's container status shows while it waits after this error, as
    /// kubelet names it: a bad description is the pod's fault (`CreateContainerConfigError`),
    /// a failed create `CreateContainerError`, everything else at start `RunContainerError`.
    /// A create or start failure also leaves the container terminated with reason
    /// `StartError` and exit code 128 (see `ContainerStatus`), as containerd reports it.
    pub fn reason(&self) -> &'static str {
        match self {
            RuntimeError::InvalidConfig(_) => "CreateContainerConfigError",
            RuntimeError::Io { .. } | RuntimeError::Conmon(_) => "CreateContainerError",
            _ => "RunContainerError",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn runtime_messages_get_one_prefix() {
        let runc = RuntimeError::Create {
            runtime: "runc".into(),
            message: "runc create failed: unable to start container process: exec: \"x\": executable file not found in $PATH".into(),
        };
        assert_eq!(
            runc.to_string(),
            "runc create failed: unable to start container process: exec: \"x\": executable file not found in $PATH"
        );
        let crun = RuntimeError::Start {
            runtime: "crun".into(),
            message: "executable file `x` not found in $PATH: No such file or directory".into(),
        };
        assert_eq!(
            crun.to_string(),
            "crun start failed: executable file `x` not found in $PATH: No such file or directory"
        );
        assert_eq!(crun.reason(), "RunContainerError");
    }
}
