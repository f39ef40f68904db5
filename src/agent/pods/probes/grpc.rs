//! grpc probes: `grpc.health.v1.Health/Check` over HTTP/2 without TLS (kubelet supports no
//! credentials either), success when the answer is `SERVING`.
//!
//! The wire format is small enough to write here:
//! - request: `POST /grpc.health.v1.Health/Check`, `content-type: application/grpc`,
//!   `te: trailers`, a body of one length-prefixed message (a 0 byte for "not compressed",
//!   a big-endian u32 length, the protobuf `HealthCheckRequest { string service = 1; }`);
//! - answer: one length-prefixed `HealthCheckResponse { ServingStatus status = 1; }`
//!   (`UNKNOWN` 0, `SERVING` 1, `NOT_SERVING` 2, `SERVICE_UNKNOWN` 3), then trailers with
//!   `grpc-status` (0 = OK) and `grpc-message`; an error may come as headers only.
//!
//! Messages are kubelet's: `service unhealthy (responded with "NOT_SERVING")`, `error: this
//! server does not implement the grpc health protocol (grpc.health.v1.Health): …`,
//! `timeout: health rpc did not complete within 1s`, `error: health rpc probe failed: rpc
//! error: code = NotFound desc = unknown service`.

use std::time::Duration;

use bytes::{Buf, BufMut, Bytes, BytesMut};
use http::{HeaderMap, Request};
use http_body_util::{BodyExt, Full, Limited};
use hyper_util::rt::{TokioExecutor, TokioIo};

use super::tcp::{dial, join_host_port};
use super::{go_duration, user_agent, Outcome};

/// The longest answer read (a health answer is a few bytes).
const MAX_ANSWER: usize = 64 * 1024;

/// gRPC status codes by number, as grpc-go names them.
const CODES: [&str; 17] = [
    "OK",
    "Canceled",
    "Unknown",
    "InvalidArgument",
    "DeadlineExceeded",
    "NotFound",
    "AlreadyExists",
    "PermissionDenied",
    "ResourceExhausted",
    "FailedPrecondition",
    "Aborted",
    "OutOfRange",
    "Unimplemented",
    "Internal",
    "Unavailable",
    "DataLoss",
    "Unauthenticated",
];
const UNIMPLEMENTED: u32 = 12;
const DEADLINE_EXCEEDED: u32 = 4;

/// `HealthCheckResponse.ServingStatus` names.
fn status_name(status: u64) -> String {
    match status {
        0 => "UNKNOWN".into(),
        1 => "SERVING".into(),
        2 => "NOT_SERVING".into(),
        3 => "SERVICE_UNKNOWN".into(),
        n => n.to_string(),
    }
}

/// How the call ended short of an answer.
enum CallError {
    Connect(String),
    /// A gRPC status other than OK.
    Status {
        code: u32,
        message: String,
    },
    Other(String),
}

/// One run of a grpc probe.
pub async fn run(host: &str, port: u16, service: &str, timeout: Duration) -> Outcome {
    let addr = join_host_port(host, port);
    let result = tokio::time::timeout(timeout, check(host, port, service, timeout)).await;
    let status = match result {
        Err(_) => {
            return Outcome::Failure(format!(
                "timeout: health rpc did not complete within {}",
                go_duration(timeout)
            ))
        }
        Ok(Err(CallError::Connect(cause))) => {
            return Outcome::Failure(format!(
                "error: failed to connect service at {addr:?}: {cause}"
            ))
        }
        Ok(Err(CallError::Status { code, message })) if code == UNIMPLEMENTED => {
            return Outcome::Failure(format!(
                "error: this server does not implement the grpc health protocol (grpc.health.v1.Health): {message}"
            ))
        }
        Ok(Err(CallError::Status { code, .. })) if code == DEADLINE_EXCEEDED => {
            return Outcome::Failure(format!(
                "timeout: health rpc did not complete within {}",
                go_duration(timeout)
            ))
        }
        Ok(Err(CallError::Status { code, message })) => {
            let name = CODES
                .get(code as usize)
                .map_or_else(|| format!("Code({code})"), |n| n.to_string());
            return Outcome::Failure(format!(
                "error: health rpc probe failed: rpc error: code = {name} desc = {message}"
            ));
        }
        Ok(Err(CallError::Other(cause))) => {
            return Outcome::Failure(format!("error: health rpc probe failed: {cause}"))
        }
        Ok(Ok(status)) => status,
    };
    if status == 1 {
        Outcome::Success("service is serving".into())
    } else {
        Outcome::Failure(format!(
            "service unhealthy (responded with {:?})",
            status_name(status)
        ))
    }
}

/// The call: the serving status, or why there is none.
async fn check(host: &str, port: u16, service: &str, timeout: Duration) -> Result<u64, CallError> {
    let tcp = dial(host, port, timeout)
        .await
        .map_err(CallError::Connect)?;
    let _ = tcp.set_nodelay(true);
    let (mut sender, conn) =
        hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(tcp))
            .await
            .map_err(|e| CallError::Connect(e.to_string()))?;
    let uri = format!(
        "http://{}/grpc.health.v1.Health/Check",
        join_host_port(host, port)
    );
    let request = Request::post(uri)
        .header("content-type", "application/grpc")
        .header("te", "trailers")
        .header("user-agent", user_agent())
        .header("grpc-timeout", format!("{}m", timeout.as_millis().max(1)))
        .body(Full::new(frame(&encode_request(service))))
        .map_err(|e| CallError::Other(e.to_string()))?;
    let call = async move {
        let response = sender
            .send_request(request)
            .await
            .map_err(|e| CallError::Other(e.to_string()))?;
        let (parts, body) = response.into_parts();
        if let Some(status) = grpc_status(&parts.headers) {
            // Trailers-only: an error (or an OK without a message).
            return Err(status.unwrap_or_else(|| CallError::Other("no answer message".into())));
        }
        if parts.status != http::StatusCode::OK {
            return Err(CallError::Status {
                code: http_status_code(parts.status),
                message: format!(
                    "unexpected HTTP status code received from server: {}",
                    parts.status
                ),
            });
        }
        let collected = Limited::new(body, MAX_ANSWER)
            .collect()
            .await
            .map_err(|e| CallError::Other(e.to_string()))?;
        let trailers = collected.trailers().cloned().unwrap_or_default();
        let data = collected.to_bytes();
        match grpc_status(&trailers) {
            Some(Some(error)) => Err(error),
            Some(None) => decode_answer(data),
            None => Err(CallError::Other(
                "server closed the stream without sending trailers".into(),
            )),
        }
    };
    tokio::pin!(call);
    tokio::pin!(conn);
    let mut conn_done = false;
    loop {
        tokio::select! {
            result = &mut call => return result,
            _ = &mut conn, if !conn_done => conn_done = true,
        }
    }
}

/// `grpc-status` of a header map: `None` when absent, `Some(None)` for OK, the error
/// otherwise.
fn grpc_status(headers: &HeaderMap) -> Option<Option<CallError>> {
    let code: u32 = headers
        .get("grpc-status")?
        .to_str()
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(2);
    if code == 0 {
        return Some(None);
    }
    let message = headers
        .get("grpc-message")
        .and_then(|v| v.to_str().ok())
        .map(|m| {
            percent_encoding::percent_decode_str(m)
                .decode_utf8_lossy()
                .into_owned()
        })
        .unwrap_or_default();
    Some(Some(CallError::Status { code, message }))
}

/// grpc-go's mapping of an HTTP status without a gRPC status.
fn http_status_code(status: http::StatusCode) -> u32 {
    match status.as_u16() {
        400 => 13,
        401 => 16,
        403 => 7,
        404 => UNIMPLEMENTED,
        429 | 502..=504 => 14,
        _ => 2,
    }
}

/// A message with gRPC's 5-byte prefix (not compressed).
fn frame(message: &[u8]) -> Bytes {
    let mut out = BytesMut::with_capacity(5 + message.len());
    out.put_u8(0);
    out.put_u32(message.len() as u32);
    out.put_slice(message);
    out.freeze()
}

/// `HealthCheckRequest { service }`: field 1, length-delimited; left out when empty.
fn encode_request(service: &str) -> Vec<u8> {
    let mut out = Vec::new();
    if !service.is_empty() {
        out.push(0x0a);
        put_varint(&mut out, service.len() as u64);
        out.extend_from_slice(service.as_bytes());
    }
    out
}

fn put_varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

fn get_varint(buf: &mut &[u8]) -> Option<u64> {
    let mut v = 0u64;
    for shift in (0..64).step_by(7) {
        let (&b, rest) = buf.split_first()?;
        *buf = rest;
        v |= u64::from(b & 0x7f) << shift;
        if b & 0x80 == 0 {
            return Some(v);
        }
    }
    None
}

/// The serving status of a framed `HealthCheckResponse` (unknown fields skipped).
fn decode_answer(mut data: Bytes) -> Result<u64, CallError> {
    let bad = |why: &str| CallError::Other(format!("malformed answer: {why}"));
    if data.len() < 5 {
        return Err(bad("no message"));
    }
    let compressed = data.get_u8();
    let len = data.get_u32() as usize;
    if compressed != 0 {
        return Err(bad("compressed, though no compression was offered"));
    }
    if data.len() < len {
        return Err(bad("shorter than its length"));
    }
    let mut msg: &[u8] = &data[..len];
    let mut status = 0;
    while !msg.is_empty() {
        let tag = get_varint(&mut msg).ok_or_else(|| bad("truncated tag"))?;
        match (tag >> 3, tag & 7) {
            (1, 0) => status = get_varint(&mut msg).ok_or_else(|| bad("truncated status"))?,
            (_, 0) => {
                get_varint(&mut msg).ok_or_else(|| bad("truncated field"))?;
            }
            (_, 1) => msg = msg.get(8..).ok_or_else(|| bad("truncated field"))?,
            (_, 5) => msg = msg.get(4..).ok_or_else(|| bad("truncated field"))?,
            (_, 2) => {
                let n = get_varint(&mut msg).ok_or_else(|| bad("truncated field"))? as usize;
                msg = msg.get(n..).ok_or_else(|| bad("truncated field"))?;
            }
            _ => return Err(bad("unknown wire type")),
        }
    }
    Ok(status)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::convert::Infallible;
    use std::net::SocketAddr;

    use http::{HeaderValue, Response};
    use http_body_util::StreamBody;
    use hyper::body::{Frame, Incoming};
    use tokio::net::TcpListener;

    type Answer = Response<
        StreamBody<futures::stream::Iter<std::vec::IntoIter<Result<Frame<Bytes>, Infallible>>>>,
    >;

    fn trailers(code: u32, message: &str) -> HeaderMap {
        let mut t = HeaderMap::new();
        t.insert("grpc-status", HeaderValue::from(code));
        if !message.is_empty() {
            t.insert("grpc-message", HeaderValue::from_str(message).unwrap());
        }
        t
    }

    fn respond(frames: Vec<Frame<Bytes>>) -> Answer {
        let mut r = Response::new(StreamBody::new(futures::stream::iter(
            frames.into_iter().map(Ok).collect::<Vec<_>>(),
        )));
        r.headers_mut()
            .insert("content-type", HeaderValue::from_static("application/grpc"));
        r
    }

    /// A health server: `""` and `"app"` serve, `"down"` does not, `"slow"` never answers,
    /// anything else is unknown (NOT_FOUND, as grpc-go's health server says).
    async fn answer(req: Request<Incoming>) -> Result<Answer, Infallible> {
        if req.uri().path() != "/grpc.health.v1.Health/Check" {
            return Ok(respond(vec![Frame::trailers(trailers(
                12,
                "unknown service other.Service",
            ))]));
        }
        assert_eq!(req.headers()["content-type"], "application/grpc");
        let body = req.into_body().collect().await.unwrap().to_bytes();
        let msg = &body[5..];
        let service = if msg.is_empty() {
            String::new()
        } else {
            String::from_utf8(msg[2..].to_vec()).unwrap()
        };
        let status = match service.as_str() {
            "" | "app" => 1u8,
            "down" => 2,
            "slow" => {
                tokio::time::sleep(Duration::from_secs(5)).await;
                1
            }
            _ => {
                return Ok(respond(vec![Frame::trailers(trailers(
                    5,
                    "unknown service",
                ))]))
            }
        };
        // An unknown field before the status, as a newer server might send.
        let message = [0x1a, 0x01, b'x', 0x08, status];
        Ok(respond(vec![
            Frame::data(frame(&message)),
            Frame::trailers(trailers(0, "")),
        ]))
    }

    async fn server(unimplemented: bool) -> SocketAddr {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move {
            while let Ok((tcp, _)) = listener.accept().await {
                tokio::spawn(async move {
                    let service = hyper::service::service_fn(move |mut r: Request<Incoming>| {
                        if unimplemented {
                            *r.uri_mut() = "/other.Service/Call".parse().unwrap();
                        }
                        answer(r)
                    });
                    let _ = hyper::server::conn::http2::Builder::new(TokioExecutor::new())
                        .serve_connection(TokioIo::new(tcp), service)
                        .await;
                });
            }
        });
        addr
    }

    #[tokio::test]
    async fn health_answers() {
        let addr = server(false).await;
        let p = addr.port();
        let t = Duration::from_secs(1);
        assert_eq!(
            run("127.0.0.1", p, "", t).await,
            Outcome::Success("service is serving".into())
        );
        assert_eq!(
            run("127.0.0.1", p, "app", t).await,
            Outcome::Success("service is serving".into())
        );
        assert_eq!(
            run("127.0.0.1", p, "down", t).await,
            Outcome::Failure("service unhealthy (responded with \"NOT_SERVING\")".into())
        );
        assert_eq!(
            run("127.0.0.1", p, "nope", t).await,
            Outcome::Failure(
                "error: health rpc probe failed: rpc error: code = NotFound desc = unknown service"
                    .into()
            )
        );
        assert_eq!(
            run("127.0.0.1", p, "slow", Duration::from_millis(300)).await,
            Outcome::Failure("timeout: health rpc did not complete within 300ms".into())
        );
        let other = server(true).await;
        assert_eq!(
            run("127.0.0.1", other.port(), "", t).await,
            Outcome::Failure("error: this server does not implement the grpc health protocol (grpc.health.v1.Health): unknown service other.Service".into())
        );
    }

    #[tokio::test]
    async fn no_server_and_not_grpc() {
        let closed = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = closed.local_addr().unwrap().port();
        drop(closed);
        assert_eq!(
            run("127.0.0.1", port, "", Duration::from_secs(1)).await,
            Outcome::Failure(format!(
                "error: failed to connect service at \"127.0.0.1:{port}\": dial tcp 127.0.0.1:{port}: connect: connection refused"
            ))
        );
        // An HTTP/1 server: the HTTP/2 handshake fails, a failure, not a hang.
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        tokio::spawn(async move {
            while let Ok((mut tcp, _)) = listener.accept().await {
                use tokio::io::AsyncWriteExt;
                let _ = tcp
                    .write_all(b"HTTP/1.1 400 Bad Request\r\nConnection: close\r\n\r\n")
                    .await;
            }
        });
        match run("127.0.0.1", port, "", Duration::from_secs(1)).await {
            Outcome::Failure(m) => {
                assert!(m.starts_with("error:") || m.starts_with("timeout:"), "{m}")
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn protobuf_by_hand() {
        assert_eq!(encode_request(""), Vec::<u8>::new());
        assert_eq!(encode_request("ab"), [0x0a, 2, b'a', b'b']);
        let long = "s".repeat(200);
        let enc = encode_request(&long);
        assert_eq!(&enc[..3], &[0x0a, 0xc8, 0x01]);
        let ok = |m: &[u8]| decode_answer(frame(m)).ok();
        assert_eq!(ok(&[0x08, 1]), Some(1));
        assert_eq!(ok(&[]), Some(0), "a missing status is UNKNOWN");
        assert_eq!(ok(&[0x11, 1, 2, 3, 4, 5, 6, 7, 8, 0x08, 2]), Some(2));
        assert!(ok(&[0x08]).is_none());
        assert!(ok(&[0x0b]).is_none());
        assert!(decode_answer(Bytes::from_static(&[1, 0, 0, 0, 0])).is_err());
    }
}
