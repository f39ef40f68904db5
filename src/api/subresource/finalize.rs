//! PUT `/api/v1/namespaces/NAME/finalize`: replaces the namespace's `spec.finalizers` (what
//! its purge waits for) and nothing else.

use http::Response;
use serde_json::json;

use crate::api::request::ApiRequest;
use crate::api::status::ApiError;
use crate::api::write::{self, OnConflict, Plan};
use crate::api::{meta, ApiBody};

pub async fn put(req: &ApiRequest) -> Result<Response<ApiBody>, ApiError> {
    let name = req.name().to_string();
    let wanted = write::decode(req)?;
    let finalizers = wanted
        .pointer("/spec/finalizers")
        .cloned()
        .unwrap_or_else(|| json!([]));
    let outcome = write::read_modify_write(req, &name, req.query.dry_run, |current| {
        let current = current.ok_or_else(|| ApiError::not_found(req.info(), &name))?;
        let mut value = current.value();
        meta::set_path(&mut value, &["spec", "finalizers"], finalizers.clone());
        Ok(Plan::Mark {
            object: value,
            on_conflict: OnConflict::Fail,
        })
    })
    .await?;
    outcome.respond(req)
}
