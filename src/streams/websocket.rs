//! An exec session over WebSocket (`v5.channel.k8s.io`, `v4.channel.k8s.io`), after the
//! upgrade: every binary message is one channel byte and its data. kubectl's stdin (0) and
//! resize (4) messages become tunnel frames, and with v5 its close message (255, then the
//! channel) ends stdin; the agent's stdout (1), stderr (2) and Status (3) frames become
//! messages. When the agent's answer ends, the session ends with a normal close frame (v5
//! says so; v4 clients read the connection's end the same way).
//!
//! Framing errors (a malformed or oversized frame, a message without a channel byte) end
//! the session: kubectl sees the connection close, the server goes on.
//!
//! The first message waits until [`CLIENT_SETUP_GRACE`] after the upgrade. client-go starts
//! reading the connection and creating its stdout/stderr streams concurrently, and discards a
//! message for a stream it has not created yet ("Unknown stream id 2, discarding message").
//! kube-apiserver never meets this because its answer comes from a kubelet that first starts
//! the command through the container runtime; here a fast command's output can be in the
//! same TCP segment as the 101. The agent's output waits in the tunnel meanwhile: nothing is
//! lost, and only the first message is held.

use bytes::{Bytes, BytesMut};
use futures::{SinkExt, StreamExt};
use http_body_util::BodyExt;
use hyper::upgrade::Upgraded;
use hyper_util::rt::TokioIo;
use tokio::sync::mpsc;
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;
use tokio_tungstenite::tungstenite::protocol::{CloseFrame, Role, WebSocketConfig};
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::WebSocketStream;

use super::frame::{self, Decoder};
use crate::api::ApiBody;

/// The largest message accepted from kubectl (its stdin messages are 32 KiB).
const MAX_MESSAGE: usize = 1 << 20;
/// How long kubectl has to answer the close frame.
const CLOSE_GRACE: std::time::Duration = std::time::Duration::from_secs(2);
/// How long after the upgrade the first message to kubectl waits (see the module doc).
const CLIENT_SETUP_GRACE: std::time::Duration = std::time::Duration::from_millis(30);

/// What a message from kubectl means for the agent (`None`: nothing).
pub fn from_client(v5: bool, data: &[u8]) -> Option<Bytes> {
    let (&channel, payload) = data.split_first()?;
    match channel {
        frame::STDIN | frame::RESIZE => Some(frame::encode(channel, payload)),
        frame::CLOSE if v5 => Some(frame::encode(frame::CLOSE, payload)),
        _ => None,
    }
}

pub async fn run(io: Upgraded, v5: bool, to_agent: mpsc::Sender<Bytes>, mut from_agent: ApiBody) {
    let mut config = WebSocketConfig::default();
    config.max_message_size = Some(MAX_MESSAGE);
    config.max_frame_size = Some(MAX_MESSAGE);
    let ws = WebSocketStream::from_raw_socket(TokioIo::new(io), Role::Server, Some(config)).await;
    let mut first_message_at = Some(tokio::time::Instant::now() + CLIENT_SETUP_GRACE);
    let (mut sink, mut stream) = ws.split();
    let reader = tokio::spawn(async move {
        while let Some(message) = stream.next().await {
            match message {
                Ok(Message::Binary(data)) => {
                    if let Some(f) = from_client(v5, &data) {
                        if to_agent.send(f).await.is_err() {
                            break;
                        }
                    }
                }
                Ok(Message::Close(_)) | Err(_) => break,
                Ok(_) => {}
            }
        }
        // kubectl is gone or closed: the command's stdin ends.
        let _ = to_agent
            .send(frame::encode(frame::CLOSE, &[frame::STDIN]))
            .await;
    });
    let mut decoder = Decoder::default();
    'body: while let Some(Ok(piece)) = from_agent.frame().await {
        let Ok(data) = piece.into_data() else {
            continue;
        };
        decoder.push(&data);
        loop {
            match decoder.next_frame() {
                Ok(Some((channel, payload))) if channel <= frame::STATUS => {
                    let mut message = BytesMut::with_capacity(1 + payload.len());
                    message.extend_from_slice(&[channel]);
                    message.extend_from_slice(&payload);
                    if let Some(at) = first_message_at.take() {
                        tokio::time::sleep_until(at).await;
                    }
                    if sink.send(Message::Binary(message.freeze())).await.is_err() {
                        break 'body;
                    }
                }
                Ok(Some(_)) => {}
                Ok(None) => break,
                Err(_) => break 'body,
            }
        }
    }
    let close = CloseFrame {
        code: CloseCode::Normal,
        reason: "".into(),
    };
    let _ = sink.send(Message::Close(Some(close))).await;
    let _ = tokio::time::timeout(CLOSE_GRACE, reader).await;
    let _ = sink.close().await;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn client_messages_map_to_frames() {
        assert_eq!(
            from_client(true, &[0, b'h', b'i']),
            Some(frame::encode(frame::STDIN, b"hi"))
        );
        assert_eq!(
            from_client(true, &[255, 0]),
            Some(frame::encode(frame::CLOSE, &[0]))
        );
        assert_eq!(from_client(false, &[255, 0]), None);
        assert_eq!(from_client(true, &[1, b'x']), None);
        assert_eq!(from_client(true, &[]), None);
    }
}
