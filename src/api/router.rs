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
///
/// PLACEHOLDER (transport branch): just enough for the transport's tests; the API work
/// replaces this body.
pub async fn serve_anonymous(
    ctx: Arc<ApiContext>,
    req: &Request<Incoming>,
) -> Option<Response<ApiBody>> {
    let text = |status, body: &'static str| {
        Some(response::with_type(
            status,
            "text/plain; charset=utf-8",
            body,
        ))
    };
    match req.uri().path() {
        "/readyz" if ctx.ready.load(std::sync::atomic::Ordering::SeqCst) => {
            text(StatusCode::OK, "ok")
        }
        "/readyz" => text(
            StatusCode::INTERNAL_SERVER_ERROR,
            "[-]ready failed: not ready",
        ),
        "/livez" | "/healthz" => text(StatusCode::OK, "ok"),
        "/version" => Some(response::json(
            StatusCode::OK,
            r#"{"major":"1","minor":"33","gitVersion":"v1.33.0-litek8s"}"#,
        )),
        _ => None,
    }
}
