//! Running a command in a running container (`runtime exec`), for exec probes and exec
//! lifecycle hooks: its exit code and what it wrote, bounded in time and size.
//!
//! The command runs as the container's own process does: the process description given to
//! the runtime (`--process`) is the container's `config.json` `process` with only `args`
//! replaced and no terminal, so user, environment, working directory, capabilities and
//! `noNewPrivileges` are the container's. Using a file also keeps the command out of the
//! runtime's own argument parsing (runc takes `--` as the command, crun would read a `-c`
//! after the container id as its own option).
//!
//! Whether the command started is told by the runtime's `--pid-file`: the runtime writes it
//! only once the process runs. A runtime that exits without writing it refused the exec (no
//! such container, a stopped one, a command not in the image) and its message is the error;
//! otherwise the runtime's exit status is the command's (128 + n when a signal n ended it).
//!
//! At the timeout the command's process is SIGKILLed (the runtime forwards catchable signals
//! only, so killing the runtime would leave the command running in the container) and the
//! call returns [`RuntimeError::Timeout`]. Processes the command left behind in the
//! background are the container's: their output is not waited for.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use tokio::io::{AsyncRead, AsyncReadExt};

use super::command::runtime_message;
use super::conmon::CHILD_PATH;
use super::layout::files;
use super::pty::{self, Pty};
use super::{Runtime, RuntimeError};

/// The most of each stream kept; the rest is read and dropped so the command never blocks
/// on a full pipe.
pub const MAX_EXEC_OUTPUT: usize = 64 * 1024;

/// How long the output is still read after the command ended (a background process may
/// hold the pipes open for ever).
const DRAIN: Duration = Duration::from_millis(200);

/// What a command run in a container did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExecOutput {
    /// The command's exit code; 128 + n when signal n ended it.
    pub exit_code: i32,
    /// At most [`MAX_EXEC_OUTPUT`] bytes of each stream, decoded lossily.
    pub stdout: String,
    pub stderr: String,
}

impl Runtime {
    /// Runs `argv` in the running container `id` and waits for it, at most `timeout`.
    pub async fn exec(
        &self,
        id: &str,
        argv: &[String],
        timeout: Duration,
    ) -> Result<ExecOutput, RuntimeError> {
        let (files, mut cmd) = self.exec_command(id, argv, false)?;
        let pid_file = &files.0[1];
        let what = || format!("{} exec {id}", self.cli.kind);
        cmd.stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        let mut child = cmd.spawn().map_err(|e| RuntimeError::io(what(), e))?;
        let stdout = Capture::start(child.stdout.take());
        let stderr = Capture::start(child.stderr.take());

        let status = match tokio::time::timeout(timeout, child.wait()).await {
            Ok(status) => status.map_err(|e| RuntimeError::io(what(), e))?,
            Err(_) => {
                match read_pid(pid_file) {
                    // The command's process, in the host's PID namespace.
                    Some(pid) => {
                        let _ = nix::sys::signal::kill(
                            nix::unistd::Pid::from_raw(pid),
                            nix::sys::signal::Signal::SIGKILL,
                        );
                    }
                    None => {
                        let _ = child.start_kill();
                    }
                }
                if tokio::time::timeout(self.cli.timeout, child.wait())
                    .await
                    .is_err()
                {
                    let _ = child.start_kill();
                }
                return Err(RuntimeError::Timeout {
                    what: format!("command {:?} in container {id}", argv.join(" ")),
                    after: timeout,
                });
            }
        };
        let stdout = stdout.finish().await;
        let stderr = stderr.finish().await;
        if read_pid(pid_file).is_none() {
            let mut message = runtime_message(&stderr);
            if message.is_empty() {
                message = format!("exited with {status}");
            }
            return Err(RuntimeError::Command {
                command: what(),
                message,
            });
        }
        Ok(ExecOutput {
            exit_code: exit_code(status),
            stdout,
            stderr,
        })
    }
}

/// A command started in a container for `kubectl exec`: with its standard streams as
/// pipes, or with a terminal (`pty`, the child's pipes then are all `None`). Its files go
/// when it is dropped.
pub struct AttachedExec {
    pub child: tokio::process::Child,
    pub pty: Option<Pty>,
    _files: TempFiles,
}

/// The standard streams of an attached command.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExecStreams {
    /// stdout and stderr as pipes, stdin too when asked for.
    Pipes { stdin: bool },
    /// One terminal for all three (see `pty`).
    Tty,
}

/// How long a runtime may take to start an attached command.
const ATTACH_START: Duration = Duration::from_secs(10);

impl AttachedExec {
    /// The command's exit code once it ended (128 + n for signal n).
    pub async fn wait(&mut self) -> Result<i32, RuntimeError> {
        let status = self
            .child
            .wait()
            .await
            .map_err(|e| RuntimeError::io("exec", e))?;
        Ok(exit_code(status))
    }
}

impl Runtime {
    /// Starts `argv` in the running container `id` with `streams`, and returns once the
    /// command runs; a refusal (no such or a stopped container, a command not in the
    /// image) is the runtime's message.
    pub async fn exec_attached(
        &self,
        id: &str,
        argv: &[String],
        streams: ExecStreams,
    ) -> Result<AttachedExec, RuntimeError> {
        let tty = streams == ExecStreams::Tty;
        let (files, mut cmd) = self.exec_command(id, argv, tty)?;
        let pid_file = files.0[1].clone();
        let what = || format!("{} exec {id}", self.cli.kind);
        let mut pty = None;
        match streams {
            ExecStreams::Pipes { stdin } => {
                cmd.stdin(if stdin { Stdio::piped() } else { Stdio::null() })
                    .stdout(Stdio::piped())
                    .stderr(Stdio::piped());
            }
            ExecStreams::Tty => {
                let (master, slave) = pty::open().map_err(|e| RuntimeError::io("open a pty", e))?;
                let io = |fd: &std::os::fd::OwnedFd| {
                    fd.try_clone()
                        .map(Stdio::from)
                        .map_err(|e| RuntimeError::io("open a pty", e))
                };
                cmd.stdin(io(&slave)?)
                    .stdout(io(&slave)?)
                    .stderr(io(&slave)?);
                // SAFETY: the closure only calls setsid and ioctl (async-signal-safe).
                unsafe {
                    cmd.pre_exec(pty::become_session_leader);
                }
                pty = Some(master);
            }
        }
        cmd.kill_on_drop(true);
        let mut child = cmd.spawn().map_err(|e| RuntimeError::io(what(), e))?;
        // The slave's copies of this process go with the command: the master then reads
        // the end once the runtime exits.
        drop(cmd);
        let deadline = tokio::time::Instant::now() + ATTACH_START;
        loop {
            if read_pid(&pid_file).is_some() {
                return Ok(AttachedExec {
                    child,
                    pty,
                    _files: files,
                });
            }
            let exited = child.try_wait().map_err(|e| RuntimeError::io(what(), e))?;
            if let Some(status) = exited {
                if read_pid(&pid_file).is_some() {
                    return Ok(AttachedExec {
                        child,
                        pty,
                        _files: files,
                    });
                }
                let stderr = match (&pty, child.stderr.take()) {
                    (Some(master), _) => read_pty(master).await,
                    (None, pipe) => Capture::start(pipe).finish().await,
                };
                let mut message = runtime_message(&stderr);
                if message.is_empty() {
                    message = format!("exited with {status}");
                }
                return Err(RuntimeError::Command {
                    command: what(),
                    message,
                });
            }
            if tokio::time::Instant::now() >= deadline {
                let _ = child.start_kill();
                return Err(RuntimeError::Timeout {
                    what: what(),
                    after: ATTACH_START,
                });
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }
}

impl Runtime {
    /// `runtime exec --process FILE --pid-file FILE ID` for `argv` in the running container
    /// `id` (with a terminal when `tty`), with the process file written; both files go when
    /// the returned [`TempFiles`] is dropped (the pid file is its second). The caller sets
    /// the standard streams.
    fn exec_command(
        &self,
        id: &str,
        argv: &[String],
        tty: bool,
    ) -> Result<(TempFiles, tokio::process::Command), RuntimeError> {
        if argv.first().is_none_or(|a| a.is_empty()) {
            return Err(RuntimeError::InvalidConfig(format!(
                "exec in container {id}: no command"
            )));
        }
        let record = self.record(id)?;
        let dir = self.dir_of(&record);
        let tag = uuid::Uuid::new_v4().simple().to_string();
        let files = TempFiles(vec![
            dir.join(format!("exec-{tag}.json")),
            dir.join(format!("exec-{tag}.pid")),
        ]);
        let (process_file, pid_file) = (&files.0[0], &files.0[1]);
        let process = process_for(&dir.join(files::CONFIG), argv, tty)?;
        std::fs::write(process_file, process)
            .map_err(|e| RuntimeError::io(format!("write {}", process_file.display()), e))?;
        let mut cmd = tokio::process::Command::new(&self.cli.path);
        cmd.args(&self.cli.global_args)
            .arg("exec")
            .arg("--process")
            .arg(process_file)
            .arg("--pid-file")
            .arg(pid_file)
            .arg(id)
            .env_clear()
            .env("PATH", CHILD_PATH);
        Ok((files, cmd))
    }
}

/// The container's process description with `argv` as its arguments, with a terminal only
/// when `tty`.
fn process_for(config: &Path, argv: &[String], tty: bool) -> Result<Vec<u8>, RuntimeError> {
    let bytes = std::fs::read(config)
        .map_err(|e| RuntimeError::io(format!("read {}", config.display()), e))?;
    let spec: serde_json::Value =
        serde_json::from_slice(&bytes).map_err(|e| RuntimeError::CorruptState {
            path: config.to_path_buf(),
            detail: e.to_string(),
        })?;
    let mut process = match spec.get("process") {
        Some(p @ serde_json::Value::Object(_)) => p.clone(),
        _ => {
            return Err(RuntimeError::CorruptState {
                path: config.to_path_buf(),
                detail: "no process".into(),
            })
        }
    };
    process["args"] = serde_json::json!(argv);
    process["terminal"] = serde_json::Value::Bool(tty);
    serde_json::to_vec(&process).map_err(|e| RuntimeError::InvalidConfig(e.to_string()))
}

/// What a runtime that refused a terminal exec wrote on it (bounded, and at most
/// [`DRAIN`] of waiting).
async fn read_pty(master: &Pty) -> String {
    let mut out = Vec::new();
    let mut buf = [0u8; 4096];
    let _ = tokio::time::timeout(DRAIN, async {
        while out.len() < MAX_EXEC_OUTPUT {
            match master.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => out.extend_from_slice(&buf[..n]),
            }
        }
    })
    .await;
    String::from_utf8_lossy(&out).into_owned()
}

fn read_pid(path: &Path) -> Option<i32> {
    std::fs::read_to_string(path)
        .ok()?
        .trim()
        .parse()
        .ok()
        .filter(|p| *p > 0)
}

/// The runtime reports a signal death of the command as 128 + n itself; a signal that
/// ends the runtime is counted the same way.
fn exit_code(status: std::process::ExitStatus) -> i32 {
    use std::os::unix::process::ExitStatusExt;
    status
        .code()
        .or_else(|| status.signal().map(|s| 128 + s))
        .unwrap_or(-1)
}

/// Files of one exec, removed when it ends however it ends.
struct TempFiles(Vec<PathBuf>);

impl Drop for TempFiles {
    fn drop(&mut self) {
        for f in &self.0 {
            let _ = std::fs::remove_file(f);
        }
    }
}

/// One output stream read in the background: the first [`MAX_EXEC_OUTPUT`] bytes kept,
/// the rest dropped.
struct Capture {
    kept: Arc<Mutex<Vec<u8>>>,
    task: Option<tokio::task::JoinHandle<()>>,
}

impl Capture {
    fn start<R: AsyncRead + Unpin + Send + 'static>(pipe: Option<R>) -> Capture {
        let kept = Arc::new(Mutex::new(Vec::new()));
        let task = pipe.map(|mut pipe| {
            let kept = kept.clone();
            tokio::spawn(async move {
                let mut buf = vec![0u8; 8192];
                loop {
                    match pipe.read(&mut buf).await {
                        Ok(0) | Err(_) => break,
                        Ok(n) => {
                            let mut k = kept.lock();
                            let room = MAX_EXEC_OUTPUT.saturating_sub(k.len());
                            k.extend_from_slice(&buf[..n.min(room)]);
                        }
                    }
                }
            })
        });
        Capture { kept, task }
    }

    /// What was read, after the stream ended or [`DRAIN`] passed.
    async fn finish(mut self) -> String {
        if let Some(mut task) = self.task.take() {
            if tokio::time::timeout(DRAIN, &mut task).await.is_err() {
                task.abort();
            }
        }
        let kept = self.kept.lock();
        String::from_utf8_lossy(&kept).into_owned()
    }
}

impl Drop for Capture {
    /// A capture given up (the command timed out) stops reading: a process left in the
    /// background could hold the pipe open for ever.
    fn drop(&mut self) {
        if let Some(task) = &self.task {
            task.abort();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_process_is_the_containers_with_new_args() {
        let dir = tempfile::tempdir().unwrap();
        let config = dir.path().join("config.json");
        std::fs::write(
            &config,
            r#"{"ociVersion":"1.0.2","process":{"terminal":true,"user":{"uid":1000,"gid":1000},"args":["sleep","1000"],"env":["PATH=/bin","A=b"],"cwd":"/work"},"root":{"path":"rootfs"}}"#,
        )
        .unwrap();
        let p: serde_json::Value = serde_json::from_slice(
            &process_for(&config, &["cat".into(), "/x".into()], false).unwrap(),
        )
        .unwrap();
        assert_eq!(p["args"], serde_json::json!(["cat", "/x"]));
        assert_eq!(p["terminal"], false);
        assert_eq!(p["user"]["uid"], 1000);
        assert_eq!(p["env"], serde_json::json!(["PATH=/bin", "A=b"]));
        assert_eq!(p["cwd"], "/work");

        std::fs::write(&config, "{}").unwrap();
        assert!(matches!(
            process_for(&config, &["x".into()], false),
            Err(RuntimeError::CorruptState { .. })
        ));
    }

    #[test]
    fn pid_files_and_exit_codes() {
        use std::os::unix::process::ExitStatusExt;
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("pid");
        assert_eq!(read_pid(&f), None);
        std::fs::write(&f, "1234\n").unwrap();
        assert_eq!(read_pid(&f), Some(1234));
        std::fs::write(&f, "").unwrap();
        assert_eq!(read_pid(&f), None);
        assert_eq!(exit_code(std::process::ExitStatus::from_raw(3 << 8)), 3);
        assert_eq!(exit_code(std::process::ExitStatus::from_raw(9)), 137);
    }

    #[tokio::test]
    async fn output_is_bounded_and_drained() {
        let (mut w, r) = tokio::io::duplex(1024);
        let capture = Capture::start(Some(r));
        let writer = tokio::spawn(async move {
            use tokio::io::AsyncWriteExt;
            let chunk = vec![b'x'; 4096];
            for _ in 0..(MAX_EXEC_OUTPUT / 4096 + 4) {
                w.write_all(&chunk).await.unwrap();
            }
            // Kept open: a background process holding the pipe.
            w
        });
        let _w = writer.await.unwrap();
        let out = capture.finish().await;
        assert_eq!(out.len(), MAX_EXEC_OUTPUT);
    }
}
