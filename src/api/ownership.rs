//! The API side of field ownership: server-side apply requests (checks on the applied
//! configuration, the merge, 409 conflicts) and the Update entries every other write records.
//! The algorithm lives in `kube::patch::apply`.

use serde_json::Value;

use super::meta;
use super::request::ApiRequest;
use super::status::{ApiError, Cause};
use crate::kube::patch::apply::{self, ApplyError, WriteContext};

/// Whether the request is a server-side apply (its ownership is recorded by [`applied`]).
pub fn is_apply(req: &ApiRequest) -> bool {
    req.method == http::Method::PATCH
        && req
            .content_type
            .split(';')
            .next()
            .is_some_and(|m| m.trim() == "application/apply-patch+yaml")
}

fn status_subresource(req: &ApiRequest) -> bool {
    req.target.subresource.as_deref() == Some("status")
}

/// Records a create, update or non-apply patch in `new`'s managedFields (`old` is the stored
/// version, `None` on create).
pub fn record_write(req: &ApiRequest, old: Option<&Value>, new: &mut Value) {
    if is_apply(req) {
        return;
    }
    let now = meta::now_rfc3339();
    let ctx = WriteContext::new(req.info(), status_subresource(req), &now);
    let manager = apply::manager_or_user_agent(req.query.field_manager.as_deref(), &req.user_agent);
    apply::record_update(&ctx, old, new, &manager);
}

/// The object an apply of `config` produces over `live` (`None`: the object is created).
pub fn applied(req: &ApiRequest, live: Option<&Value>, config: &Value) -> Result<Value, ApiError> {
    let info = req.info();
    if !config.is_object() {
        return Err(ApiError::BadRequest(format!(
            "error decoding patch: json: cannot unmarshal {} into Go value of type map[string]interface {{}}",
            go_type(config)
        )));
    }
    let expected = info.api_version();
    let given = config
        .get("apiVersion")
        .and_then(Value::as_str)
        .unwrap_or("");
    if given != expected {
        return Err(ApiError::BadRequest(format!(
            "Incorrect version specified in apply patch. Specified patch version: {given}, expected: {expected}"
        )));
    }
    if config
        .get("kind")
        .and_then(Value::as_str)
        .unwrap_or("")
        .is_empty()
    {
        return Err(ApiError::BadRequest(format!(
            "Object 'Kind' is missing in '{config}'"
        )));
    }
    if config
        .pointer("/metadata/managedFields")
        .is_some_and(|m| !m.is_null())
    {
        return Err(ApiError::BadRequest(
            "metadata.managedFields must be nil".into(),
        ));
    }
    let now = meta::now_rfc3339();
    let ctx = WriteContext::new(info, status_subresource(req), &now);
    let manager = req.query.field_manager.as_deref().unwrap_or("");
    let force = req.query.force.unwrap_or(false);
    apply::apply(&ctx, live, config, manager, force).map_err(|e| match e {
        ApplyError::Conflicts(conflicts) => ApiError::ApplyConflict {
            message: ApplyError::Conflicts(conflicts.clone()).to_string(),
            causes: conflicts
                .into_iter()
                .map(|c| (format!("conflict with {}", c.manager), c.field))
                .collect(),
        },
        ApplyError::Invalid(e) => ApiError::invalid(
            info,
            req.name(),
            vec![Cause {
                reason: "FieldValueInvalid",
                field: "patch".into(),
                message: e.to_string(),
            }],
        ),
    })
}

fn go_type(value: &Value) -> &'static str {
    match value {
        Value::Array(_) => "array",
        Value::String(_) => "string",
        Value::Number(_) => "number",
        Value::Bool(_) => "bool",
        _ => "null",
    }
}
