//! PATCH of an object or its `status`: JSON Patch, JSON merge patch, strategic merge patch
//! (`patch_format`) and server-side apply (`ownership`, which also creates a missing object).
//! The patch is applied to the latest version again when a concurrent write wins, like
//! upstream's GuaranteedUpdate (`write::read_modify_write`).

use http::Response;
use serde_json::Value;

use crate::api::crd::conversion::Conversion;

use super::patch_format::{self, PatchKind};
use super::request::ApiRequest;
use super::status::{ApiError, Cause};
use super::write::{self, OnConflict, Plan};
use super::{options, ownership, validation, ApiBody};
use crate::kube::object::ObjectRef;
use crate::kube::resources::ResourceInfo;

/// Serves PATCH on a named object or its status.
pub async fn patch(req: &ApiRequest) -> Result<Response<ApiBody>, ApiError> {
    let name = req.name().to_string();
    let kind = patch_format::patch_kind(&req.content_type)?;
    options::check(
        req,
        options::Options::Patch {
            apply: kind == PatchKind::Apply,
        },
    )?;
    let patch = patch_format::decode(kind, &req.body)?;
    match kind {
        PatchKind::Json if !patch.is_array() => {
            return Err(ApiError::BadRequest(
                "json patch must be an array of operations".into(),
            ))
        }
        PatchKind::Apply => {
            // Checked with kube-apiserver's messages by `ownership::applied`.
        }
        PatchKind::Merge | PatchKind::Strategic if !patch.is_object() => {
            return Err(ApiError::BadRequest("patch must be a JSON object".into()))
        }
        _ => {}
    }
    // A precondition the patch itself carried must not be retried past.
    let on_conflict = match kind {
        PatchKind::Json | PatchKind::Merge | PatchKind::Strategic
            if patch.pointer("/metadata/resourceVersion").is_some() =>
        {
            OnConflict::Fail
        }
        _ => OnConflict::Retry,
    };
    let outcome = write::read_modify_write(req, &name, req.query.dry_run, |current| {
        plan(req, &name, kind, &patch, current, on_conflict)
    })
    .await?;
    outcome.respond(req)
}

/// One attempt: the patch applied to `current`.
fn plan(
    req: &ApiRequest,
    name: &str,
    kind: PatchKind,
    patch: &Value,
    current: Option<&ObjectRef>,
    on_conflict: OnConflict,
) -> Result<Plan, ApiError> {
    let info = req.info();
    let Some(current) = current else {
        if kind == PatchKind::Apply && !write::status_only(req) {
            let mut object = ownership::applied(req, None, patch)?;
            validation::check_body_name(&mut object, name)?;
            return Ok(Plan::Create(object));
        }
        return Err(ApiError::not_found(info, name));
    };
    let mut old = current.value();
    if let Some(conversion) = Conversion::of(&req.ctx, info) {
        conversion.to_request(&mut old);
    }
    let mut patched = if kind == PatchKind::Apply {
        ownership::applied(req, Some(&old), patch)?
    } else {
        patch_format::apply_patch(info, name, kind, &old, patch)?
    };
    if !patched.is_object() {
        return Err(ApiError::BadRequest(
            "the patched object is not an object".into(),
        ));
    }
    validation::check_type(info, &mut patched)?;
    validation::check_body_name(&mut patched, name)?;
    validation::check_namespace(info, req.target.namespace.as_deref(), &mut patched)?;
    check_uid_unchanged(info, name, &current.uid, &patched)?;
    let client_rv = write::body_rv(&patched)?;
    if client_rv.is_some_and(|rv| rv != current.resource_version) {
        return Err(ApiError::conflict_modified(info, name));
    }
    Ok(Plan::Replace {
        old,
        wanted: patched,
        on_conflict,
    })
}

/// `metadata.uid` is immutable: a patch may repeat it but not change it (422, as upstream's
/// object-meta update validation answers).
fn check_uid_unchanged(
    info: &ResourceInfo,
    name: &str,
    current: &str,
    patched: &Value,
) -> Result<(), ApiError> {
    match patched.pointer("/metadata/uid").and_then(Value::as_str) {
        Some(uid) if !uid.is_empty() && uid != current => Err(ApiError::invalid(
            info,
            name,
            vec![Cause::invalid(
                "metadata.uid",
                &Value::String(uid.to_string()),
                "field is immutable",
            )],
        )),
        _ => Ok(()),
    }
}
