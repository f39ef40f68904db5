//! PATCH of an object or its `status`: JSON Patch, JSON merge patch, strategic merge patch and
//! server-side apply (`api::ownership`, which also creates a missing object). The patch is
//! re-applied to the latest version when a concurrent write wins, like upstream's
//! GuaranteedUpdate.

use http::{Response, StatusCode};
use serde_json::Value;

use super::request::ApiRequest;
use super::status::{ApiError, Cause};
use super::update::{body_rv, is_conflict, replace_parsed, MAX_ATTEMPTS};
use super::{body, create, options, ownership, validation, ApiBody};
use crate::kube::patch::{self as patches, PatchError};
use crate::kube::resources::ResourceInfo;

/// The patch formats, by Content-Type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PatchKind {
    Json,
    Merge,
    Strategic,
    Apply,
}

const ACCEPTED: &str = "application/json-patch+json, application/merge-patch+json, application/strategic-merge-patch+json, application/apply-patch+yaml";

pub fn patch_kind(content_type: &str) -> Result<PatchKind, ApiError> {
    match content_type.split(';').next().unwrap_or("").trim() {
        "application/json-patch+json" => Ok(PatchKind::Json),
        "application/merge-patch+json" => Ok(PatchKind::Merge),
        "application/strategic-merge-patch+json" => Ok(PatchKind::Strategic),
        "application/apply-patch+yaml" => Ok(PatchKind::Apply),
        _ => Err(ApiError::UnsupportedMediaType(ACCEPTED.into())),
    }
}

/// What kube-apiserver answers a JSON patch that does not apply (a failed `test`, a missing
/// path): 422 with no details.
const JSON_PATCH_FAILED: &str = "the server rejected our request due to an error in our request";

fn patch_error(info: &ResourceInfo, name: &str, kind: PatchKind, e: PatchError) -> ApiError {
    match e {
        PatchError::Malformed(m) => ApiError::BadRequest(m),
        PatchError::NotApplicable(_) if kind == PatchKind::Json => {
            ApiError::Unprocessable(JSON_PATCH_FAILED.into())
        }
        PatchError::Unsupported(_) => ApiError::UnsupportedMediaType(
            "application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml"
                .into(),
        ),
        PatchError::NotApplicable(m) => ApiError::invalid(
            info,
            name,
            vec![Cause {
                reason: "FieldValueInvalid",
                field: "patch".into(),
                message: m,
            }],
        ),
    }
}

fn apply_patch(
    info: &ResourceInfo,
    name: &str,
    kind: PatchKind,
    target: &Value,
    patch: &Value,
) -> Result<Value, ApiError> {
    let result = match kind {
        PatchKind::Json => patches::apply_json_patch(target, patch),
        PatchKind::Merge | PatchKind::Apply => patches::apply_merge_patch(target, patch),
        PatchKind::Strategic => patches::apply_strategic_merge_patch(info, target, patch),
    };
    result.map_err(|e| patch_error(info, name, kind, e))
}

/// Serves PATCH on a named object or its status.
pub async fn patch(req: &ApiRequest) -> Result<Response<ApiBody>, ApiError> {
    let info = req.info();
    let name = req.name().to_string();
    let kind = patch_kind(&req.content_type)?;
    options::check(
        req,
        options::Options::Patch {
            apply: kind == PatchKind::Apply,
        },
    )?;
    let encoding = if kind == PatchKind::Apply {
        body::Encoding::Yaml
    } else {
        body::Encoding::Json
    };
    let patch = body::decode(&req.body, encoding)?;
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
    let status_only = req.target.subresource.as_deref() == Some("status");
    for _ in 0..MAX_ATTEMPTS {
        let Some(current) = req.ctx.store.get(&req.target.key(&name)) else {
            if kind == PatchKind::Apply && !status_only {
                let mut object = ownership::applied(req, None, &patch)?;
                validation::check_body_name(&mut object, &name)?;
                let written = create::create(req, object).await?;
                return written.respond(req, StatusCode::CREATED);
            }
            return Err(ApiError::not_found(info, &name));
        };
        let old = current.value();
        let mut patched = if kind == PatchKind::Apply {
            ownership::applied(req, Some(&old), &patch)?
        } else {
            apply_patch(info, &name, kind, &old, &patch)?
        };
        if !patched.is_object() {
            return Err(ApiError::BadRequest(
                "the patched object is not an object".into(),
            ));
        }
        validation::check_type(info, &mut patched)?;
        validation::check_body_name(&mut patched, &name)?;
        validation::check_namespace(info, req.target.namespace.as_deref(), &mut patched)?;
        check_uid_unchanged(info, &name, &current.uid, &patched)?;
        let client_rv = body_rv(&patched)?;
        if client_rv.is_some_and(|rv| rv != current.resource_version) {
            return Err(ApiError::conflict_modified(info, &name));
        }
        // A precondition the patch itself carried must not be retried past.
        let pinned = matches!(
            kind,
            PatchKind::Json | PatchKind::Merge | PatchKind::Strategic
        ) && patch.pointer("/metadata/resourceVersion").is_some();
        match replace_parsed(req, &current, old, patched, status_only).await {
            Err(e) if is_conflict(&e) && !pinned => continue,
            Err(e) => return Err(e),
            Ok(written) => return written.respond(req, StatusCode::OK),
        }
    }
    Err(ApiError::conflict_modified(info, &name))
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn content_types() {
        assert_eq!(
            patch_kind("application/strategic-merge-patch+json").unwrap(),
            PatchKind::Strategic
        );
        assert_eq!(
            patch_kind("application/apply-patch+yaml; charset=utf-8").unwrap(),
            PatchKind::Apply
        );
        let e = patch_kind("application/json").unwrap_err();
        assert_eq!(e.code(), StatusCode::UNSUPPORTED_MEDIA_TYPE);
    }

    #[test]
    fn patch_errors_map_to_upstream_codes() {
        let cm = crate::kube::resources::find("", "v1", "configmaps").unwrap();
        let cases = [
            (
                PatchKind::Strategic,
                PatchError::Unsupported("x".into()),
                415,
                "UnsupportedMediaType",
            ),
            (
                PatchKind::Json,
                PatchError::NotApplicable("test failed".into()),
                422,
                "Invalid",
            ),
            (
                PatchKind::Json,
                PatchError::Malformed("bad op".into()),
                400,
                "BadRequest",
            ),
            (
                PatchKind::Strategic,
                PatchError::NotApplicable("x".into()),
                422,
                "Invalid",
            ),
        ];
        for (kind, error, code, reason) in cases {
            let e = patch_error(cm, "c", kind, error);
            assert_eq!((e.code().as_u16(), e.reason()), (code, reason), "{kind:?}");
        }
    }
}
