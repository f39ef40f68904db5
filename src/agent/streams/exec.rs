//! Exec sessions.

use http::{Request, Response, StatusCode};
use hyper::body::Incoming;

use super::{status, StreamsDeps};
use crate::agent::runtime::PodRef;
use crate::api::ApiBody;

pub async fn serve(
    _deps: &StreamsDeps,
    _req: Request<Incoming>,
    _pod: &PodRef,
    _container: &str,
) -> Response<ApiBody> {
    status(StatusCode::NOT_IMPLEMENTED, "NotImplemented", "exec")
}
