//! The upgrade a streaming request (exec, attach, port-forward) asks for, read from its
//! headers the same way for each: a WebSocket handshake (key present, version 13) with the
//! subprotocols kubectl offers, or SPDY/3.1 with the stream protocol the caller serves.
//! Which WebSocket subprotocol fits is the caller's choice. Also the `101` answers accepting
//! either.

use bytes::Bytes;
use http::{header, HeaderMap, HeaderValue, Response, StatusCode};

use crate::api::status::ApiError;
use crate::api::{response, ApiBody};

/// What the client asked to be upgraded to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Requested<'a> {
    /// A valid WebSocket handshake: the subprotocols offered, and the accept key to answer.
    WebSocket {
        offered: Vec<&'a str>,
        accept: String,
    },
    /// SPDY/3.1 with the stream protocol served.
    Spdy,
}

/// The comma-separated values of every `name` header.
fn values<'a>(headers: &'a HeaderMap, name: &str) -> impl Iterator<Item = &'a str> {
    headers
        .get_all(name)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .map(str::trim)
}

/// Reads the upgrade of `headers`; a SPDY request must offer `spdy_protocol` (the stream
/// protocol version the caller serves).
pub fn requested<'a>(
    headers: &'a HeaderMap,
    spdy_protocol: &str,
) -> Result<Requested<'a>, ApiError> {
    let upgrade = headers
        .get(header::UPGRADE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_ascii_lowercase();
    if upgrade == "websocket" {
        let key = headers
            .get("sec-websocket-key")
            .map(|k| k.as_bytes())
            .filter(|k| !k.is_empty())
            .ok_or_else(|| {
                ApiError::BadRequest("malformed WebSocket upgrade: no Sec-WebSocket-Key".into())
            })?;
        if headers.get("sec-websocket-version").map(|v| v.as_bytes()) != Some(b"13") {
            return Err(ApiError::BadRequest(
                "malformed WebSocket upgrade: Sec-WebSocket-Version must be 13".into(),
            ));
        }
        return Ok(Requested::WebSocket {
            offered: values(headers, "sec-websocket-protocol").collect(),
            accept: tokio_tungstenite::tungstenite::handshake::derive_accept_key(key),
        });
    }
    if upgrade == "spdy/3.1" {
        if values(headers, "x-stream-protocol-version").any(|v| v == spdy_protocol) {
            return Ok(Requested::Spdy);
        }
        return Err(ApiError::BadRequest(format!(
            "unable to upgrade: no stream protocol in common (served {spdy_protocol})"
        )));
    }
    Err(ApiError::BadRequest("Upgrade request required".into()))
}

/// The `101 Switching Protocols` answer accepting a WebSocket handshake with `accept` (the
/// accept key) and `subprotocol`.
pub fn websocket_accepted(accept: &str, subprotocol: &'static str) -> Response<ApiBody> {
    let mut resp = switching("websocket");
    let headers = resp.headers_mut();
    if let Ok(v) = HeaderValue::from_str(accept) {
        headers.insert("sec-websocket-accept", v);
    }
    headers.insert(
        "sec-websocket-protocol",
        HeaderValue::from_static(subprotocol),
    );
    resp
}

/// The `101 Switching Protocols` answer accepting SPDY/3.1 with `stream_protocol`.
pub fn spdy_accepted(stream_protocol: &'static str) -> Response<ApiBody> {
    let mut resp = switching("SPDY/3.1");
    resp.headers_mut().insert(
        "x-stream-protocol-version",
        HeaderValue::from_static(stream_protocol),
    );
    resp
}

fn switching(upgrade: &'static str) -> Response<ApiBody> {
    let mut resp = Response::new(response::body(Bytes::new()));
    *resp.status_mut() = StatusCode::SWITCHING_PROTOCOLS;
    let headers = resp.headers_mut();
    headers.insert(header::CONNECTION, HeaderValue::from_static("Upgrade"));
    headers.insert(header::UPGRADE, HeaderValue::from_static(upgrade));
    resp
}
