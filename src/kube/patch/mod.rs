//! Patches applied to JSON objects: JSON Patch (RFC 6902), JSON Merge Patch (RFC 7386) and
//! Kubernetes strategic merge patch. Pure functions over `serde_json::Value`.

use serde_json::Value;

use super::resources::ResourceInfo;

/// Why a patch could not be applied; the API answers 422 (or 400 for undecodable patches).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PatchError {
    /// The patch document itself is malformed (400 BadRequest).
    #[error("{0}")]
    Malformed(String),
    /// The patch is well formed but cannot be applied to this object (422 Invalid), e.g. a
    /// JSON Patch `test` that fails or a path that does not exist.
    #[error("{0}")]
    NotApplicable(String),
}

/// RFC 6902 JSON Patch.
pub fn apply_json_patch(_target: &Value, _patch: &Value) -> Result<Value, PatchError> {
    Err(PatchError::Malformed(
        "json patch not implemented yet".into(),
    ))
}

/// RFC 7386 JSON Merge Patch.
pub fn apply_merge_patch(_target: &Value, _patch: &Value) -> Result<Value, PatchError> {
    Err(PatchError::Malformed(
        "merge patch not implemented yet".into(),
    ))
}

/// Kubernetes strategic merge patch for the built-in kind `info`.
pub fn apply_strategic_merge_patch(
    _info: &ResourceInfo,
    _target: &Value,
    _patch: &Value,
) -> Result<Value, PatchError> {
    Err(PatchError::Malformed(
        "strategic merge patch not implemented yet".into(),
    ))
}
