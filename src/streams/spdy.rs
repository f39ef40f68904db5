//! An exec session over SPDY/3.1 (kubectl ≤ 1.29, remote-command `v4.channel.k8s.io`):
//! the framing written here, the header blocks compressed with zlib and SPDY/3's preset
//! dictionary (one compression context per direction for the whole connection, as SPDY
//! requires), the rest (streams to channels) as kubelet's server does it.
//!
//! kubectl opens one stream per channel (SYN_STREAM with a `streamtype` header: `error`,
//! `stdin`, `stdout`, `stderr`, `resize`) and waits for each SYN_REPLY. Its stdin data
//! become tunnel frames, and stdin's FIN (or reset) ends the command's input; the agent's
//! output goes out as DATA on the matching stream once every stream the request asked for
//! exists. At the end: the Status on the `error` stream, FIN on every output stream, GOAWAY,
//! and the connection closes.
//!
//! kubectl's SPDY implementation does not do SPDY/3.1 flow control, so neither side waits
//! for window updates; what bounds memory is the tunnel's HTTP/2 flow control and the
//! small channels between the tasks. A frame that cannot be parsed (a bad version, a length
//! beyond [`MAX_FRAME`], a header block that does not inflate) ends the session.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use bytes::{Buf, BufMut, Bytes, BytesMut};
use flate2::{Compress, Compression, Decompress, FlushCompress, FlushDecompress};
use http_body_util::BodyExt;
use hyper::upgrade::Upgraded;
use hyper_util::rt::TokioIo;
use parking_lot::Mutex;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::{mpsc, Notify};

use super::frame::{self, Decoder};

const VERSION: u16 = 3;
pub const SYN_STREAM: u16 = 1;
pub const SYN_REPLY: u16 = 2;
pub const RST_STREAM: u16 = 3;
pub const PING: u16 = 6;
pub const GOAWAY: u16 = 7;
pub const HEADERS: u16 = 8;
pub const FLAG_FIN: u8 = 1;
/// The longest frame accepted (kubectl's are at most 32 KiB of data).
pub const MAX_FRAME: usize = 1 << 20;
/// The most header bytes one block may inflate to.
const MAX_HEADERS: usize = 64 * 1024;
/// How long kubectl has to open the streams it asked for.
const STREAMS_TIMEOUT: Duration = Duration::from_secs(30);

/// Names of HTTP/1.1 headers SPDY/3's dictionary starts with, each length-prefixed.
const DICTIONARY_WORDS: [&str; 65] = [
    "options",
    "head",
    "post",
    "put",
    "delete",
    "trace",
    "accept",
    "accept-charset",
    "accept-encoding",
    "accept-language",
    "accept-ranges",
    "age",
    "allow",
    "authorization",
    "cache-control",
    "connection",
    "content-base",
    "content-encoding",
    "content-language",
    "content-length",
    "content-location",
    "content-md5",
    "content-range",
    "content-type",
    "date",
    "etag",
    "expect",
    "expires",
    "from",
    "host",
    "if-match",
    "if-modified-since",
    "if-none-match",
    "if-range",
    "if-unmodified-since",
    "last-modified",
    "location",
    "max-forwards",
    "pragma",
    "proxy-authenticate",
    "proxy-authorization",
    "range",
    "referer",
    "retry-after",
    "server",
    "te",
    "trailer",
    "transfer-encoding",
    "upgrade",
    "user-agent",
    "vary",
    "via",
    "warning",
    "www-authenticate",
    "method",
    "get",
    "status",
    "200 OK",
    "version",
    "HTTP/1.1",
    "url",
    "public",
    "set-cookie",
    "keep-alive",
    "origin",
];
/// The dictionary's unprefixed tail.
const DICTIONARY_TAIL: &str = concat!(
    "100101201202205206300302303304305306307402405406407408409410411412413414415416417502504505",
    "203 Non-Authoritative Information204 No Content301 Moved Permanently400 Bad Request",
    "401 Unauthorized403 Forbidden404 Not Found500 Internal Server Error501 Not Implemented",
    "503 Service UnavailableJan Feb Mar Apr May Jun Jul Aug Sept Oct Nov Dec 00:00:00 ",
    "Mon, Tue, Wed, Thu, Fri, Sat, Sun, GMTchunked,text/html,image/png,image/jpg,image/gif,",
    "application/xml,application/xhtml+xml,text/plain,text/javascript,publicprivatemax-age=",
    "gzip,deflate,sdchcharset=utf-8charset=iso-8859-1,utf-,*,enq=0.",
);

/// SPDY/3's zlib preset dictionary (1423 bytes).
pub fn dictionary() -> &'static [u8] {
    static DICTIONARY: OnceLock<Vec<u8>> = OnceLock::new();
    DICTIONARY.get_or_init(|| {
        let mut d = Vec::with_capacity(1423);
        for w in DICTIONARY_WORDS {
            d.extend_from_slice(&(w.len() as u32).to_be_bytes());
            d.extend_from_slice(w.as_bytes());
        }
        d.extend_from_slice(DICTIONARY_TAIL.as_bytes());
        d
    })
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SpdyError {
    #[error("SPDY version {0} is not 3")]
    Version(u16),
    #[error("a SPDY frame of {0} bytes is larger than allowed")]
    TooLarge(usize),
    #[error("a SPDY header block does not inflate: {0}")]
    Headers(String),
}

/// One frame from the peer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SpdyFrame {
    Control { kind: u16, flags: u8, data: Bytes },
    Data { stream: u32, flags: u8, data: Bytes },
}

/// Reassembles frames from the connection's bytes.
#[derive(Default)]
pub struct FrameReader {
    buf: BytesMut,
}

impl FrameReader {
    pub fn buffer(&mut self) -> &mut BytesMut {
        &mut self.buf
    }

    pub fn next_frame(&mut self) -> Result<Option<SpdyFrame>, SpdyError> {
        if self.buf.len() < 8 {
            return Ok(None);
        }
        let b = &self.buf;
        let len = u32::from_be_bytes([0, b[5], b[6], b[7]]) as usize;
        if len > MAX_FRAME {
            return Err(SpdyError::TooLarge(len));
        }
        let control = b[0] & 0x80 != 0;
        if control {
            let version = u16::from_be_bytes([b[0] & 0x7f, b[1]]);
            if version != VERSION {
                return Err(SpdyError::Version(version));
            }
        }
        if self.buf.len() < 8 + len {
            return Ok(None);
        }
        let head = self.buf.split_to(8);
        let data = self.buf.split_to(len).freeze();
        let flags = head[4];
        Ok(Some(if control {
            SpdyFrame::Control {
                kind: u16::from_be_bytes([head[2], head[3]]),
                flags,
                data,
            }
        } else {
            SpdyFrame::Data {
                stream: u32::from_be_bytes([head[0], head[1], head[2], head[3]]) & 0x7fff_ffff,
                flags,
                data,
            }
        }))
    }
}

/// A control frame's bytes.
pub fn control(kind: u16, flags: u8, payload: &[u8]) -> Bytes {
    let mut out = BytesMut::with_capacity(8 + payload.len());
    out.put_u16(0x8000 | VERSION);
    out.put_u16(kind);
    out.put_u32(((flags as u32) << 24) | payload.len() as u32);
    out.put_slice(payload);
    out.freeze()
}

/// A data frame's bytes.
pub fn data(stream: u32, flags: u8, payload: &[u8]) -> Bytes {
    let mut out = BytesMut::with_capacity(8 + payload.len());
    out.put_u32(stream & 0x7fff_ffff);
    out.put_u32(((flags as u32) << 24) | payload.len() as u32);
    out.put_slice(payload);
    out.freeze()
}

/// The inflating side of one direction's header blocks.
pub struct HeaderInflater {
    z: Decompress,
}

impl Default for HeaderInflater {
    fn default() -> Self {
        HeaderInflater {
            z: Decompress::new(true),
        }
    }
}

impl HeaderInflater {
    pub fn headers(&mut self, block: &[u8]) -> Result<Vec<(String, String)>, SpdyError> {
        let bad = |e: String| SpdyError::Headers(e);
        let mut out: Vec<u8> = Vec::with_capacity(1024);
        let mut input = block;
        for _ in 0..1024 {
            let before = self.z.total_in();
            if let Err(e) = self
                .z
                .decompress_vec(input, &mut out, FlushDecompress::Sync)
            {
                match e.needs_dictionary() {
                    Some(_) => {
                        self.z
                            .set_dictionary(dictionary())
                            .map_err(|e| bad(e.to_string()))?;
                    }
                    None => return Err(bad(e.to_string())),
                }
            }
            input = &input[(self.z.total_in() - before) as usize..];
            if out.len() > MAX_HEADERS {
                return Err(bad("too large".into()));
            }
            if input.is_empty() && out.len() < out.capacity() {
                return parse_headers(&out).ok_or_else(|| bad("not a header block".into()));
            }
            if out.len() == out.capacity() {
                out.reserve(4096);
            }
        }
        Err(bad("no progress".into()))
    }
}

fn parse_headers(mut raw: &[u8]) -> Option<Vec<(String, String)>> {
    let take = |raw: &mut &[u8]| -> Option<String> {
        if raw.len() < 4 {
            return None;
        }
        let n = raw.get_u32() as usize;
        if raw.len() < n {
            return None;
        }
        let s = String::from_utf8_lossy(&raw[..n]).into_owned();
        raw.advance(n);
        Some(s)
    };
    if raw.len() < 4 {
        return None;
    }
    let count = raw.get_u32();
    let mut headers = Vec::new();
    for _ in 0..count.min(256) {
        let name = take(&mut raw)?;
        let value = take(&mut raw)?;
        headers.push((name, value));
    }
    Some(headers)
}

/// The deflating side of one direction's header blocks.
pub struct HeaderDeflater {
    z: Compress,
}

impl Default for HeaderDeflater {
    fn default() -> Self {
        let mut z = Compress::new(Compression::default(), true);
        // Set before the first block: a fresh stream always takes a dictionary.
        let _ = z.set_dictionary(dictionary());
        HeaderDeflater { z }
    }
}

impl HeaderDeflater {
    pub fn block(&mut self, headers: &[(&str, &str)]) -> Vec<u8> {
        let mut raw = Vec::new();
        raw.extend_from_slice(&(headers.len() as u32).to_be_bytes());
        for (k, v) in headers {
            raw.extend_from_slice(&(k.len() as u32).to_be_bytes());
            raw.extend_from_slice(k.as_bytes());
            raw.extend_from_slice(&(v.len() as u32).to_be_bytes());
            raw.extend_from_slice(v.as_bytes());
        }
        let mut out = Vec::with_capacity(raw.len() + 64);
        let mut input = &raw[..];
        loop {
            let before = self.z.total_in();
            if self
                .z
                .compress_vec(input, &mut out, FlushCompress::Sync)
                .is_err()
            {
                break;
            }
            input = &input[(self.z.total_in() - before) as usize..];
            if input.is_empty() && out.len() < out.capacity() {
                break;
            }
            out.reserve(256);
        }
        out
    }
}

/// The streams the request asked for.
#[derive(Debug, Clone, Copy)]
pub struct Expected {
    pub stdin: bool,
    pub stdout: bool,
    pub stderr: bool,
}

/// kubectl's streams by channel.
#[derive(Default)]
struct Streams {
    by_channel: HashMap<u8, u32>,
}

impl Streams {
    fn channel_of(&self, stream: u32) -> Option<u8> {
        self.by_channel
            .iter()
            .find(|(_, s)| **s == stream)
            .map(|(c, _)| *c)
    }

    fn complete(&self, e: Expected) -> bool {
        let has = |c| self.by_channel.contains_key(&c);
        has(frame::STATUS)
            && (!e.stdin || has(frame::STDIN))
            && (!e.stdout || has(frame::STDOUT))
            && (!e.stderr || has(frame::STDERR))
    }
}

fn channel_of_type(streamtype: &str) -> Option<u8> {
    Some(match streamtype {
        "error" => frame::STATUS,
        "stdin" => frame::STDIN,
        "stdout" => frame::STDOUT,
        "stderr" => frame::STDERR,
        "resize" => frame::RESIZE,
        _ => return None,
    })
}

pub async fn run(
    io: Upgraded,
    expected: Expected,
    to_agent: mpsc::Sender<Bytes>,
    mut from_agent: crate::api::ApiBody,
) {
    let (mut rd, mut wr) = tokio::io::split(TokioIo::new(io));
    let (out_tx, mut out_rx) = mpsc::channel::<Bytes>(32);
    let writer = tokio::spawn(async move {
        while let Some(bytes) = out_rx.recv().await {
            if wr.write_all(&bytes).await.is_err() {
                break;
            }
        }
        let _ = wr.shutdown().await;
    });
    let streams = Arc::new(Mutex::new(Streams::default()));
    let changed = Arc::new(Notify::new());
    // Set when kubectl's side ended (closed, or a frame that cannot be read).
    let gone = Arc::new(AtomicBool::new(false));
    let reader = {
        let (streams, changed, out_tx) = (streams.clone(), changed.clone(), out_tx.clone());
        let gone = gone.clone();
        tokio::spawn(async move {
            let mut frames = FrameReader::default();
            let mut inflater = HeaderInflater::default();
            let mut deflater = HeaderDeflater::default();
            let close_stdin = frame::encode(frame::CLOSE, &[frame::STDIN]);
            'read: loop {
                loop {
                    let next = match frames.next_frame() {
                        Ok(Some(f)) => f,
                        Ok(None) => break,
                        Err(e) => {
                            tracing::debug!(component = "streams", "exec over SPDY: {e}");
                            break 'read;
                        }
                    };
                    match next {
                        SpdyFrame::Control { kind, data, .. } => match kind {
                            SYN_STREAM if data.len() >= 10 => {
                                let id = u32::from_be_bytes([data[0], data[1], data[2], data[3]])
                                    & 0x7fff_ffff;
                                let headers = match inflater.headers(&data[10..]) {
                                    Ok(h) => h,
                                    Err(e) => {
                                        tracing::debug!(
                                            component = "streams",
                                            "exec over SPDY: {e}"
                                        );
                                        break 'read;
                                    }
                                };
                                let channel = headers
                                    .iter()
                                    .find(|(k, _)| k == "streamtype")
                                    .and_then(|(_, v)| channel_of_type(v));
                                if let Some(c) = channel {
                                    streams.lock().by_channel.insert(c, id);
                                    changed.notify_one();
                                }
                                let mut reply = id.to_be_bytes().to_vec();
                                reply.extend_from_slice(&deflater.block(&[]));
                                if out_tx.send(control(SYN_REPLY, 0, &reply)).await.is_err() {
                                    break 'read;
                                }
                            }
                            SYN_STREAM => break 'read,
                            // Inflated only to keep the compression context in step.
                            HEADERS if data.len() >= 4 && inflater.headers(&data[4..]).is_err() => {
                                break 'read;
                            }
                            PING => {
                                let _ = out_tx.send(control(PING, 0, &data)).await;
                            }
                            RST_STREAM if data.len() >= 4 => {
                                let id = u32::from_be_bytes([data[0], data[1], data[2], data[3]])
                                    & 0x7fff_ffff;
                                if streams.lock().channel_of(id) == Some(frame::STDIN) {
                                    let _ = to_agent.send(close_stdin.clone()).await;
                                }
                            }
                            GOAWAY => break 'read,
                            _ => {}
                        },
                        SpdyFrame::Data {
                            stream,
                            flags,
                            data,
                        } => {
                            let channel = streams.lock().channel_of(stream);
                            let forward = match channel {
                                Some(c @ (frame::STDIN | frame::RESIZE)) if !data.is_empty() => {
                                    Some(frame::encode(c, &data))
                                }
                                _ => None,
                            };
                            if let Some(f) = forward {
                                if to_agent.send(f).await.is_err() {
                                    break 'read;
                                }
                            }
                            if flags & FLAG_FIN != 0 && channel == Some(frame::STDIN) {
                                let _ = to_agent.send(close_stdin.clone()).await;
                            }
                        }
                    }
                }
                match rd.read_buf(frames.buffer()).await {
                    Ok(0) | Err(_) => break,
                    Ok(_) => {}
                }
            }
            gone.store(true, Ordering::SeqCst);
            changed.notify_one();
            let _ = to_agent.send(close_stdin).await;
        })
    };

    // Output waits for every stream the request asked for.
    let ready = tokio::time::timeout(STREAMS_TIMEOUT, async {
        loop {
            let notified = changed.notified();
            if streams.lock().complete(expected) {
                return true;
            }
            if gone.load(Ordering::SeqCst) {
                return false;
            }
            notified.await;
        }
    })
    .await;
    let mut status_sent = false;
    if ready == Ok(true) {
        let mut decoder = Decoder::default();
        'body: while let Some(Ok(piece)) = from_agent.frame().await {
            let Ok(bytes) = piece.into_data() else {
                continue;
            };
            decoder.push(&bytes);
            loop {
                let (channel, payload) = match decoder.next_frame() {
                    Ok(Some(f)) => f,
                    Ok(None) => break,
                    Err(_) => break 'body,
                };
                let Some(stream) = streams.lock().by_channel.get(&channel).copied() else {
                    continue;
                };
                let flags = if channel == frame::STATUS {
                    status_sent = true;
                    FLAG_FIN
                } else {
                    0
                };
                if matches!(channel, frame::STDOUT | frame::STDERR | frame::STATUS)
                    && out_tx.send(data(stream, flags, &payload)).await.is_err()
                {
                    break 'body;
                }
            }
        }
        let ends: Vec<u32> = {
            let s = streams.lock();
            [frame::STDOUT, frame::STDERR]
                .iter()
                .chain((!status_sent).then_some(&frame::STATUS))
                .filter_map(|c| s.by_channel.get(c).copied())
                .collect()
        };
        for stream in ends {
            let _ = out_tx.send(data(stream, FLAG_FIN, &[])).await;
        }
        let _ = out_tx.send(control(GOAWAY, 0, &[0; 8])).await;
    }
    reader.abort();
    drop(out_tx);
    let _ = tokio::time::timeout(Duration::from_secs(2), writer).await;
}

#[cfg(test)]
mod tests {
    use super::*;

    fn adler32(data: &[u8]) -> u32 {
        let (mut a, mut b) = (1u32, 0u32);
        for &x in data {
            a = (a + x as u32) % 65521;
            b = (b + a) % 65521;
        }
        (b << 16) | a
    }

    #[test]
    fn the_dictionary_is_spdy3s() {
        assert_eq!(dictionary().len(), 1423);
        assert_eq!(adler32(dictionary()), 0xe3c6_a7c2);
    }

    #[test]
    fn header_blocks_round_trip_across_frames() {
        let mut out = HeaderDeflater::default();
        let mut inn = HeaderInflater::default();
        for stream in ["error", "stdin", "stdout"] {
            let block = out.block(&[("streamtype", stream), ("x", "y")]);
            assert_eq!(
                inn.headers(&block).unwrap(),
                vec![
                    ("streamtype".to_string(), stream.to_string()),
                    ("x".into(), "y".into())
                ]
            );
        }
    }

    #[test]
    fn frames_parse_and_bad_ones_are_errors() {
        let mut r = FrameReader::default();
        r.buffer()
            .extend_from_slice(&control(PING, 0, &[0, 0, 0, 1]));
        r.buffer().extend_from_slice(&data(5, FLAG_FIN, b"hi"));
        assert_eq!(
            r.next_frame().unwrap(),
            Some(SpdyFrame::Control {
                kind: PING,
                flags: 0,
                data: Bytes::from_static(&[0, 0, 0, 1])
            })
        );
        assert_eq!(
            r.next_frame().unwrap(),
            Some(SpdyFrame::Data {
                stream: 5,
                flags: FLAG_FIN,
                data: Bytes::from_static(b"hi")
            })
        );
        assert_eq!(r.next_frame().unwrap(), None);
        let mut bad = FrameReader::default();
        bad.buffer().extend_from_slice(&[0x80, 2, 0, 1, 0, 0, 0, 0]);
        assert_eq!(bad.next_frame(), Err(SpdyError::Version(2)));
        let mut huge = FrameReader::default();
        huge.buffer()
            .extend_from_slice(&[0, 0, 0, 1, 0, 0xff, 0xff, 0xff]);
        assert!(matches!(huge.next_frame(), Err(SpdyError::TooLarge(_))));
        let mut garbage = HeaderInflater::default();
        assert!(garbage.headers(&[1, 2, 3, 4, 5]).is_err());
    }
}
