//! `pods/exec`.

use std::sync::Arc;

use http::{Request, Response};

use crate::api::status::ApiError;
use crate::api::{ApiBody, ApiContext, UserInfo};

pub async fn serve<B: Send + 'static>(
    _ctx: &Arc<ApiContext>,
    _ns: &str,
    _name: &str,
    _req: Request<B>,
    _user: &UserInfo,
) -> Result<Response<ApiBody>, ApiError> {
    Err(ApiError::MethodNotAllowed)
}
