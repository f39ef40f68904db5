//! Small builders for whole-body responses shared by every handler.

use bytes::Bytes;
use http::{header, Response, StatusCode};
use http_body_util::{BodyExt, Full};

use super::ApiBody;

/// A complete body as an `ApiBody`.
pub fn body(bytes: impl Into<Bytes>) -> ApiBody {
    Full::new(bytes.into())
        .map_err(|never| match never {})
        .boxed()
}

/// A response with `content_type` and a complete body.
pub fn with_type(
    status: StatusCode,
    content_type: &str,
    bytes: impl Into<Bytes>,
) -> Response<ApiBody> {
    let mut response = Response::new(body(bytes));
    *response.status_mut() = status;
    if let Ok(value) = header::HeaderValue::from_str(content_type) {
        response.headers_mut().insert(header::CONTENT_TYPE, value);
    }
    response
}

/// A JSON response.
pub fn json(status: StatusCode, bytes: impl Into<Bytes>) -> Response<ApiBody> {
    with_type(status, "application/json", bytes)
}

/// A JSON response serialized from a value.
pub fn json_value(status: StatusCode, value: &serde_json::Value) -> Response<ApiBody> {
    json(status, serde_json::to_vec(value).unwrap_or_default())
}
