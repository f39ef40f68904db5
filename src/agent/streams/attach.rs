//! An attach session (`kubectl attach`, `kubectl run -i`): the server's frames joined to the
//! container's own process through its conmon (`runtime::attach`). Output from then on goes
//! out as stdout and stderr frames (a terminal's all as stdout), stdin frames are its input,
//! resize frames set its terminal's size, and the end of kubectl's input ends this client's
//! input (conmon then closes the container's stdin if the container has `stdinOnce`). The
//! session ends when the container exits (conmon closes the socket) or kubectl goes; its
//! Status is Success, as kubelet's: an attach has no exit code of its own.

use std::sync::Arc;

use bytes::Bytes;
use http::{Request, Response, StatusCode};
use http_body_util::BodyExt;
use serde_json::json;
use std::time::Duration;

use tokio::sync::{mpsc, watch};

use super::exec::{parse_size, running_container};
use super::{status, StreamsDeps};
use crate::agent::runtime::attach::{self, Attached};
use crate::agent::runtime::PodRef;
use crate::api::ApiBody;
use crate::streams::channel_body;
use crate::streams::frame::{self, Decoder};

pub async fn serve(
    deps: &StreamsDeps,
    req: Request<ApiBody>,
    pod: &PodRef,
    container: &str,
) -> Response<ApiBody> {
    let id = match running_container(deps, pod, container) {
        Ok(id) => id,
        Err(why) => return status(StatusCode::BAD_REQUEST, "BadRequest", &why),
    };
    let attached = match deps.runtime.attach(&id) {
        Ok(a) => Arc::new(a),
        Err(e) => {
            return status(
                StatusCode::INTERNAL_SERVER_ERROR,
                "InternalError",
                &format!("error attaching to container: {e}"),
            )
        }
    };
    let (tx, rx) = mpsc::channel::<Bytes>(16);
    let feeding = tokio::spawn(feed(req.into_body(), attached.clone()));
    tokio::spawn(async move {
        let mut buf = Box::new([0u8; attach::MAX_MESSAGE]);
        loop {
            let got = tokio::select! {
                got = attached.recv(&mut buf) => got,
                // kubectl went: nothing more to read for.
                _ = tx.closed() => break,
            };
            let (stream, n) = match got {
                Ok(Some(m)) => m,
                Ok(None) => break,
                Err(e) => {
                    tracing::warn!(component = "streams", "reading an attach socket: {e}");
                    break;
                }
            };
            let channel = match stream {
                attach::STDOUT => frame::STDOUT,
                attach::STDERR => frame::STDERR,
                _ => continue,
            };
            if tx.send(frame::encode(channel, &buf[1..n])).await.is_err() {
                break;
            }
        }
        feeding.abort();
        let done = json!({"metadata": {}, "status": "Success"}).to_string();
        let _ = tx.send(frame::encode(frame::STATUS, done.as_bytes())).await;
    });
    Response::new(channel_body(rx))
}

/// The least time between two sizes written to conmon's control fifo: conmon 2.1 acts on
/// one line per read of it, so sizes written together (kubectl attach sends its size plus
/// one, then its size, to have the screen redrawn) would lose the last one.
const RESIZE_GAP: Duration = Duration::from_millis(50);

/// Applies the server's frames to the container until they end.
async fn feed(mut body: ApiBody, attached: Arc<Attached>) {
    let (size_tx, mut size_rx) = watch::channel::<Option<(u16, u16)>>(None);
    let resizer = {
        let attached = attached.clone();
        tokio::spawn(async move {
            while size_rx.changed().await.is_ok() {
                let size = *size_rx.borrow_and_update();
                if let Some((width, height)) = size {
                    if let Err(e) = attached.resize(width, height) {
                        tracing::debug!(component = "streams", "resizing a terminal: {e}");
                    }
                }
                tokio::time::sleep(RESIZE_GAP).await;
            }
        })
    };
    let mut decoder = Decoder::default();
    'body: while let Some(Ok(piece)) = body.frame().await {
        let Ok(data) = piece.into_data() else {
            continue;
        };
        decoder.push(&data);
        loop {
            match decoder.next_frame() {
                Ok(Some((frame::STDIN, bytes))) => {
                    if attached.send(&bytes).await.is_err() {
                        break 'body;
                    }
                }
                Ok(Some((frame::RESIZE, json))) => {
                    if let Some(size) = parse_size(&json) {
                        let _ = size_tx.send(Some(size));
                    }
                }
                Ok(Some((frame::CLOSE, which))) if which.first() == Some(&frame::STDIN) => {
                    attached.close_input();
                }
                Ok(Some(_)) => {}
                Ok(None) => break,
                Err(_) => break 'body,
            }
        }
    }
    attached.close_input();
    // The last size still goes out.
    drop(size_tx);
    let _ = resizer.await;
}
