//! API discovery: `/api`, `/apis`, `/api/v1`, `/apis/G/V`, and aggregated discovery (v2 and
//! v2beta1) chosen by the Accept header.

use http::Response;

use super::{ApiBody, ApiContext};

/// The discovery response for `path`, or `None` when `path` is not a discovery path.
pub fn respond(_ctx: &ApiContext, _path: &str, _accept: &str) -> Option<Response<ApiBody>> {
    None
}
