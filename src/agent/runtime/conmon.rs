//! Starting a container's monitor: conmon runs `runtime create`, reports the container's
//! pid (or the runtime's error) on a sync pipe, then stays with the container, writing its
//! output to the CRI log and its exit code to `<bundle>/exit`.
//!
//! The protocol (conmon 2.x, `--api-version 1`):
//! - conmon finds the write end of the sync pipe in the fd named by `_OCI_SYNCPIPE`;
//! - it forks, the first process writes the monitor's pid to `--conmon-pidfile` and exits
//!   0; the monitor calls `setsid()`, so it is in its own session and process group and
//!   outlives the agent (nothing the agent's death signals reaches it);
//! - after `runtime create` it writes one JSON line: `{"data": <pid>}` on success,
//!   `{"data": -1, "message": "<runtime stderr>"}` on failure;
//! - the container is then *created*: its process waits until `runtime start`.
//!
//! conmon and the runtime get a clean environment: an inherited `NOTIFY_SOCKET` would make
//! runc pass the agent's systemd socket into the container, `LISTEN_FDS` would hand it the
//! agent's sockets.

use std::os::fd::{AsRawFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use tokio::io::AsyncReadExt;

use super::command::runtime_message;
use super::layout::files;
use super::RuntimeError;

/// `PATH` for conmon and the runtime (they look up nothing else).
pub const CHILD_PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/// The fd number conmon finds the sync pipe at.
const SYNC_FD: i32 = 3;

/// Longest sync message read (conmon sends at most 8 KiB of runtime stderr).
const MAX_SYNC: usize = 64 * 1024;

#[derive(Debug, Clone)]
pub struct Launch<'a> {
    pub conmon: &'a Path,
    pub runtime: &'a Path,
    /// Global runtime arguments (`--root=…`, `--cgroup-manager=disabled`).
    pub runtime_args: &'a [String],
    /// Passes `--no-new-keyring` to the runtime's `create` (where keyrings are refused).
    pub no_new_keyring: bool,
    pub id: &'a str,
    /// Container name for conmon's own log lines.
    pub name: &'a str,
    /// The container directory: bundle, conmon's working and persist directory.
    pub bundle: &'a Path,
    pub log_path: &'a Path,
    pub socket_dir: &'a Path,
    /// A pipe to the container's stdin for attach, kept open after an attached client
    /// leaves unless `stdin_once`.
    pub stdin: bool,
    pub stdin_once: bool,
    /// A terminal: the spec asks for one and conmon takes its master from the runtime.
    pub tty: bool,
    /// How long `runtime create` may take.
    pub timeout: Duration,
}

/// A created container: its monitor and its init process.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Launched {
    pub conmon_pid: i32,
    pub container_pid: i32,
}

impl Launch<'_> {
    fn args(&self) -> Vec<String> {
        let mut args: Vec<String> = vec![
            "--api-version".into(),
            "1".into(),
            "--cid".into(),
            self.id.into(),
            "--cuuid".into(),
            self.id.into(),
            "--name".into(),
            self.name.into(),
            "--runtime".into(),
            path(self.runtime),
            "--bundle".into(),
            path(self.bundle),
            "--container-pidfile".into(),
            path(&self.bundle.join(files::PID)),
            "--conmon-pidfile".into(),
            path(&self.bundle.join(files::CONMON_PID)),
            "--log-path".into(),
            format!("k8s-file:{}", self.log_path.display()),
            "--persist-dir".into(),
            path(self.bundle),
            "--socket-dir-path".into(),
            path(self.socket_dir),
            "--log-level".into(),
            "error".into(),
        ];
        for a in self.runtime_args {
            args.push(format!("--runtime-arg={a}"));
        }
        if self.no_new_keyring {
            args.push("--no-new-keyring".into());
        }
        if self.stdin {
            args.push("--stdin".into());
            if !self.stdin_once {
                args.push("--leave-stdin-open".into());
            }
        }
        if self.tty {
            args.push("--terminal".into());
        }
        args
    }

    /// Runs conmon and waits for the runtime's verdict on `create`.
    pub async fn run(&self) -> Result<Launched, RuntimeError> {
        let (sync_read, sync_write) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC)
            .map_err(|e| RuntimeError::io("sync pipe", e.into()))?;
        let write_fd = sync_write.as_raw_fd();
        let mut cmd = tokio::process::Command::new(self.conmon);
        cmd.args(self.args())
            .env_clear()
            .env("PATH", CHILD_PATH)
            .env("_OCI_SYNCPIPE", SYNC_FD.to_string())
            .current_dir(self.bundle)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        // SAFETY: the closure only calls dup2/fcntl, which are async-signal-safe.
        unsafe {
            cmd.pre_exec(move || {
                if write_fd == SYNC_FD {
                    if libc::fcntl(SYNC_FD, libc::F_SETFD, 0) < 0 {
                        return Err(std::io::Error::last_os_error());
                    }
                } else if libc::dup2(write_fd, SYNC_FD) < 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        let child = cmd
            .spawn()
            .map_err(|e| RuntimeError::io(format!("run {}", self.conmon.display()), e))?;
        drop(sync_write);

        // The first conmon process exits as soon as the monitor is forked.
        let out = tokio::time::timeout(self.timeout, child.wait_with_output())
            .await
            .map_err(|_| RuntimeError::Timeout {
                what: "conmon".into(),
                after: self.timeout,
            })?
            .map_err(|e| RuntimeError::io("wait for conmon", e))?;
        if !out.status.success() {
            return Err(RuntimeError::Conmon(format!(
                "exited with {}: {}",
                out.status,
                String::from_utf8_lossy(&out.stderr).trim()
            )));
        }
        let conmon_pid = read_pid(&self.bundle.join(files::CONMON_PID))?;

        match tokio::time::timeout(self.timeout, read_sync(sync_read)).await {
            Ok(Ok(SyncMessage { data, .. })) if data > 0 => Ok(Launched {
                conmon_pid,
                container_pid: data,
            }),
            Ok(Ok(SyncMessage { message, .. })) => Err(RuntimeError::Create {
                runtime: runtime_name(self.runtime),
                message: message
                    .map(|m| runtime_message(&m))
                    .filter(|m| !m.is_empty())
                    .unwrap_or_else(|| "create failed without a message".into()),
            }),
            Ok(Err(e)) => Err(e),
            Err(_) => {
                // conmon's create child dies with it (PDEATHSIG).
                let _ = nix::sys::signal::kill(
                    nix::unistd::Pid::from_raw(conmon_pid),
                    nix::sys::signal::Signal::SIGKILL,
                );
                Err(RuntimeError::Timeout {
                    what: format!("{} create", runtime_name(self.runtime)),
                    after: self.timeout,
                })
            }
        }
    }
}

fn path(p: &Path) -> String {
    p.display().to_string()
}

fn runtime_name(p: &Path) -> String {
    p.file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| path(p))
}

#[derive(Debug, serde::Deserialize)]
struct SyncMessage {
    data: i32,
    #[serde(default)]
    message: Option<String>,
}

/// Reads conmon's first sync line. EOF before a line means the monitor died without a word
/// (its own error went to the log level we silenced, or it was killed).
async fn read_sync(fd: OwnedFd) -> Result<SyncMessage, RuntimeError> {
    let mut rx = tokio::net::unix::pipe::Receiver::from_owned_fd(fd)
        .map_err(|e| RuntimeError::io("sync pipe", e))?;
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        let n = rx
            .read(&mut chunk)
            .await
            .map_err(|e| RuntimeError::io("read conmon's sync pipe", e))?;
        if n == 0 {
            return Err(RuntimeError::Conmon(if buf.is_empty() {
                "exited before reporting the container".into()
            } else {
                format!(
                    "unterminated sync message {:?}",
                    String::from_utf8_lossy(&buf)
                )
            }));
        }
        buf.extend_from_slice(&chunk[..n]);
        if let Some(end) = buf.iter().position(|b| *b == b'\n') {
            return serde_json::from_slice(&buf[..end]).map_err(|e| {
                RuntimeError::Conmon(format!(
                    "unreadable sync message {:?}: {e}",
                    String::from_utf8_lossy(&buf[..end])
                ))
            });
        }
        if buf.len() > MAX_SYNC {
            return Err(RuntimeError::Conmon("sync message too long".into()));
        }
    }
}

/// Reads a pid file (a decimal number, maybe newline-terminated).
pub fn read_pid(path: &Path) -> Result<i32, RuntimeError> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| RuntimeError::io(path.display().to_string(), e))?;
    text.trim()
        .parse::<i32>()
        .ok()
        .filter(|p| *p > 0)
        .ok_or_else(|| RuntimeError::CorruptState {
            path: PathBuf::from(path),
            detail: format!("not a pid: {:?}", text.trim()),
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arguments_name_every_file_in_the_bundle() {
        let runtime_args = vec![
            "--root=/run/litek8s/crun".to_string(),
            "--cgroup-manager=disabled".to_string(),
        ];
        let mut l = Launch {
            conmon: Path::new("/usr/bin/conmon"),
            runtime: Path::new("/usr/bin/crun"),
            runtime_args: &runtime_args,
            no_new_keyring: false,
            id: "abc",
            name: "default_web_app",
            bundle: Path::new("/n/pods/u/containers/abc"),
            log_path: Path::new("/var/log/pods/default_web_u/app/0.log"),
            socket_dir: Path::new("/run/litek8s/conmon"),
            stdin: false,
            stdin_once: false,
            tty: false,
            timeout: Duration::from_secs(1),
        };
        let args = l.args().join(" ");
        for part in [
            "--api-version 1",
            "--cid abc --cuuid abc",
            "--runtime /usr/bin/crun",
            "--bundle /n/pods/u/containers/abc",
            "--container-pidfile /n/pods/u/containers/abc/pidfile",
            "--conmon-pidfile /n/pods/u/containers/abc/conmon.pid",
            "--log-path k8s-file:/var/log/pods/default_web_u/app/0.log",
            "--persist-dir /n/pods/u/containers/abc",
            "--runtime-arg=--root=/run/litek8s/crun --runtime-arg=--cgroup-manager=disabled",
        ] {
            assert!(args.contains(part), "{part} not in {args}");
        }
        assert!(!args.contains("--no-new-keyring"), "{args}");
        l.no_new_keyring = true;
        assert!(l.args().iter().any(|a| a == "--no-new-keyring"));
        for flag in ["--stdin", "--leave-stdin-open", "--terminal"] {
            assert!(!l.args().iter().any(|a| a == flag), "{flag}");
        }
        (l.stdin, l.tty) = (true, true);
        let args = l.args().join(" ");
        assert!(
            args.contains("--stdin --leave-stdin-open --terminal"),
            "{args}"
        );
        l.stdin_once = true;
        assert!(!l.args().iter().any(|a| a == "--leave-stdin-open"));
    }

    #[tokio::test]
    async fn sync_messages_parse() {
        use std::io::Write;
        let (r, w) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC).unwrap();
        let mut w = std::fs::File::from(w);
        w.write_all(b"{\"data\": -1, \"message\": \"boom\\n\"}\n")
            .unwrap();
        drop(w);
        let m = read_sync(r).await.unwrap();
        assert_eq!((m.data, m.message.as_deref()), (-1, Some("boom\n")));

        let (r, w) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC).unwrap();
        drop(w);
        let e = read_sync(r).await.unwrap_err();
        assert!(e.to_string().contains("exited before"), "{e}");
    }
}
