//! The OCI runtime's command line after `create` (which conmon runs): `start`, `kill`,
//! `delete`, `state`, each bounded by a timeout, with the runtime's error message extracted
//! from its stderr.

use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;

use super::detect::RuntimeKind;
use super::RuntimeError;

/// The runtime binary and the global arguments every invocation gets.
#[derive(Debug, Clone)]
pub struct OciCli {
    pub kind: RuntimeKind,
    pub path: PathBuf,
    pub global_args: Vec<String>,
    pub timeout: Duration,
}

/// What `runtime state` says (the fields the agent reads).
#[derive(Debug, Clone, PartialEq, Eq, serde::Deserialize)]
pub struct OciState {
    /// `created`, `running`, `stopped` or `paused`.
    pub status: String,
    #[serde(default)]
    pub pid: i32,
}

/// The command did not succeed: its exit status and the runtime's message.
#[derive(Debug)]
struct Failure {
    message: String,
}

impl OciCli {
    async fn run(&self, args: &[&str]) -> Result<Result<Vec<u8>, Failure>, RuntimeError> {
        let mut cmd = tokio::process::Command::new(&self.path);
        cmd.args(&self.global_args)
            .args(args)
            .env_clear()
            .env("PATH", super::conmon::CHILD_PATH)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        let what = || format!("{} {}", self.kind, args.join(" "));
        let child = cmd.spawn().map_err(|e| RuntimeError::io(what(), e))?;
        let out = tokio::time::timeout(self.timeout, child.wait_with_output())
            .await
            .map_err(|_| RuntimeError::Timeout {
                what: what(),
                after: self.timeout,
            })?
            .map_err(|e| RuntimeError::io(what(), e))?;
        if out.status.success() {
            Ok(Ok(out.stdout))
        } else {
            let mut message = runtime_message(&String::from_utf8_lossy(&out.stderr));
            if message.is_empty() {
                message = format!("exited with {}", out.status);
            }
            Ok(Err(Failure { message }))
        }
    }

    fn failed(&self, args: &[&str], f: Failure) -> RuntimeError {
        RuntimeError::Command {
            command: format!("{} {}", self.kind, args.join(" ")),
            message: f.message,
        }
    }

    /// Starts a created container (runs its process).
    pub async fn start(&self, id: &str) -> Result<(), RuntimeError> {
        self.run(&["start", id])
            .await?
            .map(|_| ())
            .map_err(|f| RuntimeError::Start {
                runtime: self.kind.to_string(),
                message: f.message,
            })
    }

    /// Sends `signal` (`TERM`, `KILL`, …) to the container's init process. `Ok(false)`
    /// when the container is not running any more (or was never created).
    pub async fn kill(&self, id: &str, signal: &str) -> Result<bool, RuntimeError> {
        let args = ["kill", id, signal];
        match self.run(&args).await? {
            Ok(_) => Ok(true),
            Err(f) if is_gone(&f.message) => Ok(false),
            Err(f) => Err(self.failed(&args, f)),
        }
    }

    /// Deletes the runtime's state of the container (killing it first if it still runs).
    /// A container the runtime does not know is already deleted.
    pub async fn delete(&self, id: &str) -> Result<(), RuntimeError> {
        let args = ["delete", "--force", id];
        match self.run(&args).await? {
            Ok(_) => Ok(()),
            Err(f) if is_gone(&f.message) => Ok(()),
            Err(f) => Err(self.failed(&args, f)),
        }
    }

    /// The runtime's view of the container; `None` when it does not know it.
    pub async fn state(&self, id: &str) -> Result<Option<OciState>, RuntimeError> {
        let args = ["state", id];
        match self.run(&args).await? {
            Ok(stdout) => serde_json::from_slice(&stdout).map(Some).map_err(|e| {
                self.failed(
                    &args,
                    Failure {
                        message: format!("unreadable output: {e}"),
                    },
                )
            }),
            Err(f) if is_gone(&f.message) => Ok(None),
            Err(f) => Err(self.failed(&args, f)),
        }
    }
}

/// runc says `container "x" does not exist` or `container not running`; crun names the
/// missing status file.
fn is_gone(message: &str) -> bool {
    let m = message.to_ascii_lowercase();
    m.contains("does not exist")
        || m.contains("not running")
        || m.contains("no such file or directory")
        || m.contains("process already finished")
}

/// The runtime's error text: runc logs `time=… level=error msg="…"` lines (the `msg`
/// value, unescaped, is the message); crun prints plain lines. Several lines are joined
/// with "; ", warnings left out when there is an error.
pub fn runtime_message(stderr: &str) -> String {
    let mut errors = Vec::new();
    let mut others = Vec::new();
    for line in stderr.lines().map(str::trim).filter(|l| !l.is_empty()) {
        match logfmt_field(line, "msg") {
            Some(msg) => {
                let level = logfmt_field(line, "level").unwrap_or_default();
                if level == "error" || level == "fatal" {
                    errors.push(msg);
                } else {
                    others.push(msg);
                }
            }
            None => errors.push(line.strip_prefix("crun: ").unwrap_or(line).to_string()),
        }
    }
    if errors.is_empty() {
        others.join("; ")
    } else {
        errors.join("; ")
    }
}

/// The value of `key=` in a logfmt line, quoted (with `\"` and `\\` escapes) or bare.
fn logfmt_field(line: &str, key: &str) -> Option<String> {
    let pattern = format!("{key}=");
    let mut search = 0;
    let start = loop {
        let at = search + line[search..].find(&pattern)?;
        if at == 0 || line.as_bytes()[at - 1] == b' ' {
            break at + pattern.len();
        }
        search = at + pattern.len();
    };
    let rest = &line[start..];
    if let Some(quoted) = rest.strip_prefix('"') {
        let mut out = String::new();
        let mut chars = quoted.chars();
        while let Some(c) = chars.next() {
            match c {
                '\\' => match chars.next() {
                    Some('n') => out.push('\n'),
                    Some('t') => out.push('\t'),
                    Some(other) => out.push(other),
                    None => break,
                },
                '"' => return Some(out),
                c => out.push(c),
            }
        }
        Some(out)
    } else {
        Some(rest.split(' ').next().unwrap_or("").to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn runc_messages_are_unwrapped() {
        let stderr = r#"time="2026-12-05T17:14:29Z" level=error msg="runc create failed: unable to start container process: exec: \"nosuchcmd\": executable file not found in $PATH""#;
        assert_eq!(
            runtime_message(stderr),
            r#"runc create failed: unable to start container process: exec: "nosuchcmd": executable file not found in $PATH"#
        );
        let two = "time=\"x\" level=warning msg=\"cgroup v1 is deprecated\"\ntime=\"x\" level=error msg=\"boom\"\n";
        assert_eq!(runtime_message(two), "boom");
        assert_eq!(
            runtime_message("time=\"x\" level=warning msg=\"only a warning\"\n"),
            "only a warning"
        );
    }

    #[test]
    fn crun_messages_are_plain() {
        assert_eq!(
            runtime_message(
                "crun: executable file `nosuch` not found in $PATH: No such file or directory\n"
            ),
            "executable file `nosuch` not found in $PATH: No such file or directory"
        );
        assert_eq!(runtime_message(""), "");
    }

    #[test]
    fn logfmt_needs_a_key_boundary() {
        assert_eq!(logfmt_field("xmsg=a msg=b", "msg").as_deref(), Some("b"));
        assert_eq!(
            logfmt_field("level=error", "level").as_deref(),
            Some("error")
        );
        assert_eq!(logfmt_field("nothing here", "msg"), None);
    }

    #[test]
    fn gone_containers_are_recognised() {
        assert!(is_gone("container \"abc\" does not exist"));
        assert!(is_gone("container not running"));
        assert!(is_gone(
            "error opening file `/run/crun/abc/status`: No such file or directory"
        ));
        assert!(!is_gone("permission denied"));
    }
}
