//! The patch formats of PATCH (and of PATCH on a subresource): which one a Content-Type names,
//! how its body is decoded, how it applies to an object (`kube::patch`), and its failures as
//! kube-apiserver answers them.

use serde_json::Value;

use super::body;
use super::status::{ApiError, Cause};
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

/// The patch format a Content-Type names; 415 for anything else.
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

/// A patch that failed, as kube-apiserver answers it.
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

/// `patch` of format `kind` applied to `target`, an object of kind `info` named `name`
/// (server-side apply is `ownership::applied`'s; here it merges like a merge patch).
pub fn apply_patch(
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

/// Decodes a patch body: YAML for server-side apply, JSON for the others.
pub fn decode(kind: PatchKind, bytes: &[u8]) -> Result<Value, ApiError> {
    let encoding = if kind == PatchKind::Apply {
        body::Encoding::Yaml
    } else {
        body::Encoding::Json
    };
    body::decode(bytes, encoding)
}

#[cfg(test)]
mod tests {
    use http::StatusCode;

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
