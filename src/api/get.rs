//! GET of one object (and of its `status` subresource, which returns the whole object).

use http::{Response, StatusCode};

use super::read::{rv_request, wait_for_rv, RvRequest};
use super::request::ApiRequest;
use super::status::ApiError;
use super::{output, ApiBody};

pub async fn get(req: &ApiRequest) -> Result<Response<ApiBody>, ApiError> {
    if let RvRequest::At { rv, .. } = rv_request(req)? {
        wait_for_rv(req, rv).await?;
    }
    let name = req.name();
    let object = req
        .ctx
        .store
        .get(&req.target.key(name))
        .ok_or_else(|| ApiError::not_found(req.info(), name))?;
    output::stored(req, StatusCode::OK, &object)
}
