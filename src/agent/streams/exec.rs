//! An exec session (`kubectl exec`): the command started in the pod's running container
//! through the runtime (`Runtime::exec_attached`), its stdout and stderr sent to the server
//! as frames (`crate::streams::frame`) as they come, the server's stdin frames written to
//! the command until stdin's close frame, and at the end the exit as a Status frame (what
//! kubectl reads to print `command terminated with exit code N` and exit with N).
//!
//! With `tty=true` the command gets a terminal (`runtime::pty`): its output, stdout and
//! stderr merged as a terminal merges them, goes out as stdout; stdin frames are typed into
//! it; resize frames (`{"Width":…,"Height":…}`, kubectl's `TerminalSize`) set its size. The
//! end of kubectl's input (it hung up) hangs the terminal up: the runtime gets SIGHUP and
//! passes it to the command, as closing a terminal window does to a shell.
//!
//! The answer's head comes only once the command runs: a container that is not running or
//! a command the runtime refuses is an HTTP error, which the server gives kubectl before any
//! protocol upgrade.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::{Request, Response, StatusCode};
use http_body_util::BodyExt;
use serde_json::json;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use tokio::sync::mpsc;

use super::{status, StreamsDeps};
use crate::agent::runtime::pty::Pty;
use crate::agent::runtime::{ContainerState, ExecStreams, PodRef};
use crate::api::request::query_pairs;
use crate::api::ApiBody;
use crate::streams::channel_body;
use crate::streams::frame::{self, Decoder};

/// How long output is still read after the command ended (a background process may hold
/// the pipes open for ever).
const DRAIN: Duration = Duration::from_secs(1);
/// A pipe holds 64 KiB by default: one read takes what a full pipe (or socket) has.
const READ_SIZE: usize = 64 * 1024;

/// The Status frame's JSON for an exit code.
pub fn exit_status(argv: &[String], code: i32) -> serde_json::Value {
    if code == 0 {
        return json!({"metadata": {}, "status": "Success"});
    }
    json!({
        "metadata": {},
        "status": "Failure",
        "message": format!(
            "command terminated with non-zero exit code: error executing command {argv:?}, exit code {code}"
        ),
        "reason": "NonZeroExitCode",
        "details": {"causes": [{"reason": "ExitCode", "message": code.to_string()}]},
    })
}

pub async fn serve(
    deps: &StreamsDeps,
    req: Request<ApiBody>,
    pod: &PodRef,
    container: &str,
) -> Response<ApiBody> {
    let pairs = query_pairs(req.uri().query().unwrap_or(""));
    let argv: Vec<String> = pairs
        .iter()
        .filter(|(k, _)| k == "command")
        .map(|(_, v)| v.clone())
        .collect();
    let flag = |name: &str| {
        pairs
            .iter()
            .any(|(k, v)| k == name && v != "false" && v != "0")
    };
    let streams = if flag("tty") {
        ExecStreams::Tty
    } else {
        ExecStreams::Pipes {
            stdin: flag("stdin"),
        }
    };
    let id = match running_container(deps, pod, container) {
        Ok(id) => id,
        Err(why) => return status(StatusCode::BAD_REQUEST, "BadRequest", &why),
    };
    let mut exec = match deps.runtime.exec_attached(&id, &argv, streams).await {
        Ok(exec) => exec,
        Err(e) => {
            return status(
                StatusCode::INTERNAL_SERVER_ERROR,
                "InternalError",
                &format!("error executing command in container: {e}"),
            )
        }
    };
    let (tx, rx) = mpsc::channel::<Bytes>(16);
    let terminal = exec.pty.take().map(Arc::new);
    let (out, err) = match &terminal {
        Some(pty) => (pump_pty(pty.clone(), tx.clone()), tokio::spawn(async {})),
        None => (
            pump(exec.child.stdout.take(), frame::STDOUT, tx.clone()),
            pump(exec.child.stderr.take(), frame::STDERR, tx.clone()),
        ),
    };
    let input = match terminal {
        Some(pty) => Input::Tty {
            pty,
            runtime_pid: exec.child.id(),
        },
        None => Input::Pipe(exec.child.stdin.take()),
    };
    let feeding = tokio::spawn(feed(req.into_body(), input));
    tokio::spawn(async move {
        let code = exec.wait().await.unwrap_or(-1);
        for pump in [out, err] {
            let mut pump = pump;
            if tokio::time::timeout(DRAIN, &mut pump).await.is_err() {
                pump.abort();
            }
        }
        feeding.abort();
        let status = exit_status(&argv, code).to_string();
        let _ = tx
            .send(frame::encode(frame::STATUS, status.as_bytes()))
            .await;
    });
    Response::new(channel_body(rx))
}

/// The id of the current instance of `container` in `pod` if it runs, else the 400 answer's
/// message.
pub(super) fn running_container(
    deps: &StreamsDeps,
    pod: &PodRef,
    container: &str,
) -> Result<String, String> {
    let running = deps
        .runtime
        .list()
        .into_iter()
        .filter(|c| {
            c.pod.uid == pod.uid && c.name == container && c.state == ContainerState::Running
        })
        .max_by_key(|c| c.restart_count);
    let Some(running) = running else {
        return Err(format!(
            "container {container:?} in pod {:?} is not running",
            pod.name
        ));
    };
    Ok(running.id)
}

/// Where the session's stdin and resize frames go.
enum Input {
    Pipe(Option<tokio::process::ChildStdin>),
    Tty {
        pty: Arc<Pty>,
        /// The runtime's process, hung up when kubectl's input ends.
        runtime_pid: Option<u32>,
    },
}

impl Input {
    async fn write(&mut self, bytes: &[u8]) {
        match self {
            Input::Pipe(pipe) => {
                if let Some(p) = pipe.as_mut() {
                    if p.write_all(bytes).await.is_err() {
                        *pipe = None;
                    }
                }
            }
            Input::Tty { pty, .. } => {
                let _ = pty.write_all(bytes).await;
            }
        }
    }

    async fn close(&mut self) {
        match self {
            Input::Pipe(pipe) => {
                if let Some(mut p) = pipe.take() {
                    let _ = p.shutdown().await;
                }
            }
            Input::Tty { runtime_pid, .. } => {
                if let Some(pid) = runtime_pid.take().and_then(|p| i32::try_from(p).ok()) {
                    let _ = nix::sys::signal::kill(
                        nix::unistd::Pid::from_raw(pid),
                        nix::sys::signal::Signal::SIGHUP,
                    );
                }
            }
        }
    }

    fn resize(&self, json: &[u8]) {
        let Input::Tty { pty, .. } = self else { return };
        match parse_size(json) {
            Some((width, height)) => {
                if let Err(e) = pty.resize(width, height) {
                    tracing::debug!(component = "streams", "resizing a terminal: {e}");
                }
            }
            None => tracing::debug!(component = "streams", "a resize frame that is no size"),
        }
    }
}

/// kubectl's `TerminalSize` JSON: `{"Width":80,"Height":24}`.
pub(super) fn parse_size(json: &[u8]) -> Option<(u16, u16)> {
    let v: serde_json::Value = serde_json::from_slice(json).ok()?;
    let dim = |k: &str| v.get(k)?.as_u64().and_then(|n| u16::try_from(n).ok());
    Some((dim("Width")?, dim("Height")?))
}

/// Applies the server's frames to the command until they end, then closes its input.
async fn feed(mut body: ApiBody, mut input: Input) {
    let mut decoder = Decoder::default();
    'body: while let Some(Ok(piece)) = body.frame().await {
        let Ok(data) = piece.into_data() else {
            continue;
        };
        decoder.push(&data);
        loop {
            match decoder.next_frame() {
                Ok(Some((frame::STDIN, bytes))) => input.write(&bytes).await,
                Ok(Some((frame::RESIZE, json))) => input.resize(&json),
                Ok(Some((frame::CLOSE, which))) if which.first() == Some(&frame::STDIN) => {
                    input.close().await
                }
                Ok(Some(_)) => {}
                Ok(None) => break,
                Err(_) => break 'body,
            }
        }
    }
    input.close().await;
}

/// Copies a terminal's output into stdout frames.
fn pump_pty(pty: Arc<Pty>, tx: mpsc::Sender<Bytes>) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let mut buf = vec![0u8; READ_SIZE];
        loop {
            match pty.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(n) => {
                    if tx
                        .send(frame::encode(frame::STDOUT, &buf[..n]))
                        .await
                        .is_err()
                    {
                        return;
                    }
                }
            }
        }
    })
}

/// Copies a pipe into frames of `channel`.
fn pump<R: AsyncRead + Unpin + Send + 'static>(
    pipe: Option<R>,
    channel: u8,
    tx: mpsc::Sender<Bytes>,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let Some(mut pipe) = pipe else { return };
        let mut buf = vec![0u8; READ_SIZE];
        loop {
            match pipe.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(n) => {
                    if tx.send(frame::encode(channel, &buf[..n])).await.is_err() {
                        return;
                    }
                }
            }
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_non_zero_exit_reads_as_kubectl_expects() {
        let argv = vec!["sh".to_string(), "-c".into(), "exit 3".into()];
        let s = exit_status(&argv, 3);
        assert_eq!(s["reason"], "NonZeroExitCode");
        assert_eq!(s["details"]["causes"][0]["message"], "3");
        assert_eq!(exit_status(&argv, 0)["status"], "Success");
    }

    #[test]
    fn terminal_sizes_read_as_kubectl_sends_them() {
        assert_eq!(parse_size(br#"{"Width":91,"Height":37}"#), Some((91, 37)));
        assert_eq!(parse_size(br#"{"Width":70000,"Height":37}"#), None);
        assert_eq!(parse_size(br#"{"Width":-1,"Height":37}"#), None);
        assert_eq!(parse_size(b"garbage"), None);
        assert_eq!(parse_size(br#"{"Height":37}"#), None);
    }
}
