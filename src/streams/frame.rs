//! The framing of an exec session between a server and the agent, inside one HTTP/2 stream
//! of the agent's tunnel (request body: server to agent; response body: agent to server).
//! Whatever kubectl spoke (WebSocket or SPDY), the server turns it into these frames, so the
//! agent speaks one protocol and a relaying server never decodes anything.
//!
//! A frame is `channel (1 byte) | length (4 bytes, big endian) | payload`. The channels are
//! the remote-command channels kubectl knows (0 stdin, 1 stdout, 2 stderr, 3 the final
//! Status as JSON, 4 terminal resize as JSON), plus [`CLOSE`]: the sender's end of the
//! channel named by the payload's one byte (stdin's end of input).

use bytes::{Buf, BufMut, Bytes, BytesMut};

pub const STDIN: u8 = 0;
pub const STDOUT: u8 = 1;
pub const STDERR: u8 = 2;
pub const STATUS: u8 = 3;
pub const RESIZE: u8 = 4;
/// The end of a channel (its number is the payload).
pub const CLOSE: u8 = 255;

/// The largest payload accepted; more is a broken peer.
pub const MAX_PAYLOAD: usize = 4 << 20;
const HEADER: usize = 5;

/// One frame's bytes.
pub fn encode(channel: u8, payload: &[u8]) -> Bytes {
    let mut out = BytesMut::with_capacity(HEADER + payload.len());
    out.put_u8(channel);
    out.put_u32(payload.len() as u32);
    out.put_slice(payload);
    out.freeze()
}

/// A frame the peer sent that cannot be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("a frame of {0} bytes is larger than allowed")]
pub struct TooLarge(pub usize);

/// Reassembles frames from body chunks of any size.
#[derive(Default)]
pub struct Decoder {
    buf: BytesMut,
}

impl Decoder {
    pub fn push(&mut self, chunk: &[u8]) {
        self.buf.extend_from_slice(chunk);
    }

    /// The next whole frame, if there is one.
    pub fn next_frame(&mut self) -> Result<Option<(u8, Bytes)>, TooLarge> {
        if self.buf.len() < HEADER {
            return Ok(None);
        }
        let len = u32::from_be_bytes([self.buf[1], self.buf[2], self.buf[3], self.buf[4]]) as usize;
        if len > MAX_PAYLOAD {
            return Err(TooLarge(len));
        }
        if self.buf.len() < HEADER + len {
            return Ok(None);
        }
        let channel = self.buf[0];
        self.buf.advance(HEADER);
        Ok(Some((channel, self.buf.split_to(len).freeze())))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_survive_any_chunking() {
        let mut wire = Vec::new();
        wire.extend_from_slice(&encode(STDOUT, b"hello"));
        wire.extend_from_slice(&encode(CLOSE, &[STDIN]));
        wire.extend_from_slice(&encode(STDERR, b""));
        for size in 1..wire.len() {
            let mut d = Decoder::default();
            let mut got = Vec::new();
            for chunk in wire.chunks(size) {
                d.push(chunk);
                while let Some(f) = d.next_frame().unwrap() {
                    got.push(f);
                }
            }
            assert_eq!(
                got,
                vec![
                    (STDOUT, Bytes::from_static(b"hello")),
                    (CLOSE, Bytes::from_static(&[STDIN])),
                    (STDERR, Bytes::new())
                ]
            );
        }
    }

    #[test]
    fn an_oversized_frame_is_an_error_not_an_allocation() {
        let mut d = Decoder::default();
        d.push(&[1, 0xff, 0xff, 0xff, 0xff]);
        assert!(d.next_frame().is_err());
    }
}
