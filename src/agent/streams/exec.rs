//! An exec session (`kubectl exec`): the command started in the pod's running container
//! through the runtime (`Runtime::exec_attached`), its stdout and stderr sent to the server
//! as frames (`crate::streams::frame`) as they come, the server's stdin frames written to
//! the command until stdin's close frame, and at the end the exit as a Status frame (what
//! kubectl reads to print `command terminated with exit code N` and exit with N).
//!
//! The answer's head comes only once the command runs: a container that is not running or
//! a command the runtime refuses is an HTTP error, which the server gives kubectl before any
//! protocol upgrade.

use std::time::Duration;

use bytes::Bytes;
use http::{Request, Response, StatusCode};
use http_body_util::BodyExt;
use hyper::body::Incoming;
use serde_json::json;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use tokio::sync::mpsc;

use super::{status, StreamsDeps};
use crate::agent::runtime::{ContainerState, PodRef};
use crate::api::request::query_pairs;
use crate::api::ApiBody;
use crate::streams::channel_body;
use crate::streams::frame::{self, Decoder};

/// How long output is still read after the command ended (a background process may hold
/// the pipes open for ever).
const DRAIN: Duration = Duration::from_secs(1);
const READ_SIZE: usize = 32 * 1024;

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
    req: Request<Incoming>,
    pod: &PodRef,
    container: &str,
) -> Response<ApiBody> {
    let pairs = query_pairs(req.uri().query().unwrap_or(""));
    let argv: Vec<String> = pairs
        .iter()
        .filter(|(k, _)| k == "command")
        .map(|(_, v)| v.clone())
        .collect();
    let stdin = pairs
        .iter()
        .any(|(k, v)| k == "stdin" && v != "false" && v != "0");
    let running = deps
        .runtime
        .list()
        .into_iter()
        .filter(|c| {
            c.pod.uid == pod.uid && c.name == container && c.state == ContainerState::Running
        })
        .max_by_key(|c| c.restart_count);
    let Some(running) = running else {
        return status(
            StatusCode::BAD_REQUEST,
            "BadRequest",
            &format!(
                "container {container:?} in pod {:?} is not running",
                pod.name
            ),
        );
    };
    let mut exec = match deps.runtime.exec_attached(&running.id, &argv, stdin).await {
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
    let out = pump(exec.child.stdout.take(), frame::STDOUT, tx.clone());
    let err = pump(exec.child.stderr.take(), frame::STDERR, tx.clone());
    let mut input = exec.child.stdin.take();
    let mut body = req.into_body();
    let feeding = tokio::spawn(async move {
        let mut decoder = Decoder::default();
        while let Some(Ok(piece)) = body.frame().await {
            let Ok(data) = piece.into_data() else {
                continue;
            };
            decoder.push(&data);
            loop {
                match decoder.next_frame() {
                    Ok(Some((frame::STDIN, bytes))) => {
                        if let Some(pipe) = input.as_mut() {
                            if pipe.write_all(&bytes).await.is_err() {
                                input = None;
                            }
                        }
                    }
                    Ok(Some((frame::CLOSE, which))) if which.first() == Some(&frame::STDIN) => {
                        if let Some(mut pipe) = input.take() {
                            let _ = pipe.shutdown().await;
                        }
                    }
                    Ok(Some(_)) => {}
                    Ok(None) => break,
                    Err(_) => return,
                }
            }
        }
    });
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
}
