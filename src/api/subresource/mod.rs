//! Subresources other than `status` (a part of the object that `get`, `update` and `patch`
//! serve themselves): `scale` (deployments, replicasets, statefulsets, replicationcontrollers),
//! namespace `finalize`, pod `eviction`, pod `binding` (and the legacy `bindings`
//! collection, which binds the pod its body names) and service account `token` (a bound
//! token, stored nowhere). A subresource that writes plans one
//! attempt from the stored object and the request (`write::Plan`: replace the object with a
//! new version, or store a change of fields the server owns, or remove it) and hands the plan
//! to `write::read_modify_write`, which carries it through the write step and plans again when
//! a concurrent write won.
//!
//! A new subresource is accepted by `request::parse_path`, listed for discovery by
//! `ResourceInfo::subresources` (`kube::resources`), routed by [`serve`], and gets a file here
//! with its handler and planner.

mod binding;
mod eviction;
mod finalize;
mod scale;
mod token;

use http::{Method, Response};

use super::request::ApiRequest;
use super::status::ApiError;
use super::ApiBody;

/// Serves a request on a named object's subresource other than `status`.
pub async fn serve(req: &ApiRequest) -> Result<Response<ApiBody>, ApiError> {
    match (req.target.subresource.as_deref(), &req.method) {
        (Some("scale"), &Method::GET) => scale::get(req).await,
        (Some("scale"), &Method::PUT | &Method::PATCH) => scale::write(req).await,
        (Some("finalize"), &Method::PUT) => finalize::put(req).await,
        (Some("eviction"), &Method::POST) => eviction::post(req).await,
        (Some("binding"), &Method::POST) => binding::post(req).await,
        (Some("token"), &Method::POST) => token::post(req).await,
        _ => Err(ApiError::MethodNotAllowed),
    }
}

/// Serves the legacy `bindings` collection (every request on a create-only resource).
pub async fn bindings(req: &ApiRequest) -> Result<Response<ApiBody>, ApiError> {
    binding::post_legacy(req).await
}
