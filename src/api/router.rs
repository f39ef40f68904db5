//! Routes an authenticated request to its handler. The transport calls [`serve`] for
//! authenticated HTTPS requests and [`serve_anonymous`] for plain HTTP and unauthenticated
//! health checks.

use std::sync::Arc;

use http::{Request, Response, StatusCode};
use hyper::body::Incoming;

use super::{response, ApiBody, ApiContext, User};

/// Serves an authenticated API request.
pub async fn serve(
    _ctx: Arc<ApiContext>,
    _req: Request<Incoming>,
    _user: User,
) -> Response<ApiBody> {
    response::json(StatusCode::NOT_FOUND, "{}")
}

/// Serves the anonymous endpoints (/readyz, /livez, /healthz, /version); `None` for any other
/// path, which the transport answers with 401 (HTTPS) or 404/400 (plain HTTP).
pub async fn serve_anonymous(
    _ctx: Arc<ApiContext>,
    _req: &Request<Incoming>,
) -> Option<Response<ApiBody>> {
    None
}
