//! POST (create) on a collection: the body is the new object, created by the write step
//! (`write::create`, which also decides whether the create waits for the read barrier).

use http::{Response, StatusCode};

use super::request::ApiRequest;
use super::status::ApiError;
use super::{options, write, ApiBody};

/// Serves POST on a collection.
pub async fn post(req: &ApiRequest) -> Result<Response<ApiBody>, ApiError> {
    options::check(req, options::Options::Create)?;
    let object = write::decode(req)?;
    write::create(req, object)
        .await?
        .respond(req, StatusCode::CREATED)
}
