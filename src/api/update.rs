//! PUT (update) of an object or its `status`: the body is the wanted version, checked against
//! the URL and, when it carries them, the stored resourceVersion and uid; a missing object is
//! created for the kinds that allow it. The version itself is written by the write step
//! (`write::read_modify_write`).

use http::Response;
use serde_json::Value;

use crate::api::crd::conversion::Conversion;

use super::request::ApiRequest;
use super::status::{ApiError, Gr};
use super::write::{self, OnConflict, Plan};
use super::{kind_rules, lease, meta, options, validation, ApiBody};
use crate::kube::object::ObjectRef;

/// Serves PUT on a named object or its status.
pub async fn put(req: &ApiRequest) -> Result<Response<ApiBody>, ApiError> {
    let info = req.info();
    let name = req.name().to_string();
    options::check(req, options::Options::Update)?;
    let mut object = write::decode(req)?;
    validation::check_type(info, &mut object)?;
    validation::check_body_name(&mut object, &name)?;
    validation::check_namespace(info, req.target.namespace.as_deref(), &mut object)?;
    let client_rv = write::body_rv(&object)?;
    let outcome = write::read_modify_write(req, &name, req.query.dry_run, |current| {
        plan(req, &name, &object, client_rv, current)
    })
    .await?;
    outcome.respond(req)
}

/// One attempt: `object` over `current`.
fn plan(
    req: &ApiRequest,
    name: &str,
    object: &Value,
    client_rv: Option<u64>,
    current: Option<&ObjectRef>,
) -> Result<Plan, ApiError> {
    let info = req.info();
    let status_only = write::status_only(req);
    let Some(current) = current else {
        if kind_rules::allows_create_on_update(info) && !status_only {
            return Ok(Plan::Create(object.clone()));
        }
        return Err(ApiError::not_found(info, name));
    };
    if client_rv.is_none() && lease::is_lease(info) && !status_only {
        return Err(lease::missing_rv(info, name));
    }
    if client_rv.is_some_and(|rv| rv != current.resource_version) {
        return Err(ApiError::conflict_modified(info, name));
    }
    if let Some(uid) = meta::str_at(object, "/metadata/uid").filter(|u| !u.is_empty()) {
        if uid != current.uid {
            return Err(ApiError::Conflict {
                gr: Gr::of(info),
                name: name.to_string(),
                detail: format!(
                    "Precondition failed: UID in precondition: {uid}, UID in object meta: {}",
                    current.uid
                ),
            });
        }
    }
    let mut old = current.value();
    if let Some(conversion) = Conversion::of(&req.ctx, info) {
        conversion.to_request(&mut old);
    }
    Ok(Plan::Replace {
        old,
        wanted: object.clone(),
        // A resourceVersion in the body is a precondition: never retried past.
        on_conflict: if client_rv.is_none() {
            OnConflict::Retry
        } else {
            OnConflict::Fail
        },
    })
}
