//! Patches applied to JSON objects: JSON Patch (RFC 6902), JSON Merge Patch (RFC 7386) and
//! Kubernetes strategic merge patch. Pure functions over `serde_json::Value`.
//!
//! Layout:
//! - `json_patch`: RFC 6902 operations and JSON Pointer (RFC 6901) resolution.
//! - `merge_patch`: RFC 7386.
//! - `apply`: server-side apply and `metadata.managedFields` ownership (format documented
//!   there), sharing the merge-key table with strategic merge.
//! - `strategic`: the strategic merge algorithm (`strategic/mod.rs`, list ordering in
//!   `strategic/order.rs`) and the per-kind table of list merge keys (`strategic/schema.rs`).
//!
//! Every entry point first bounds the nesting depth of the patch document, so the recursive
//! algorithms can never overflow the stack and a patch can never build an object deeper than
//! the JSON decoder accepts when the stored object is read back.

use serde_json::Value;

use super::resources::ResourceInfo;

pub(crate) mod apply;
mod json_patch;
mod merge_patch;
mod strategic;

/// Deepest nesting (objects and arrays) accepted in a patch document or produced by one.
/// Kubernetes objects stay far below this; `serde_json` refuses to parse past 128.
pub const MAX_DEPTH: usize = 100;

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
    /// The kind has no strategic-merge metadata (custom resources): 415.
    #[error("{0}")]
    Unsupported(String),
}

/// RFC 6902 JSON Patch.
pub fn apply_json_patch(target: &Value, patch: &Value) -> Result<Value, PatchError> {
    check_patch_depth(patch)?;
    json_patch::apply(target, patch)
}

/// RFC 7386 JSON Merge Patch.
pub fn apply_merge_patch(target: &Value, patch: &Value) -> Result<Value, PatchError> {
    check_patch_depth(patch)?;
    Ok(merge_patch::apply(target, patch))
}

/// Kubernetes strategic merge patch for the built-in kind `info`.
pub fn apply_strategic_merge_patch(
    info: &ResourceInfo,
    target: &Value,
    patch: &Value,
) -> Result<Value, PatchError> {
    check_patch_depth(patch)?;
    if !strategic::schema::has_strategic_schema(info.group) {
        return Err(PatchError::Unsupported(format!(
            "strategic merge patch is not supported for {}",
            info.qualified_plural()
        )));
    }
    strategic::apply(
        strategic::schema::for_kind(info.group, info.kind),
        target,
        patch,
    )
}

fn check_patch_depth(patch: &Value) -> Result<(), PatchError> {
    if depth(patch) > MAX_DEPTH {
        return Err(PatchError::Malformed(format!(
            "patch is nested deeper than {MAX_DEPTH} levels"
        )));
    }
    Ok(())
}

/// Nesting depth of `value`: 0 for a scalar, 1 for a flat object or array. Iterative, so it
/// is safe on values of any depth.
pub(crate) fn depth(value: &Value) -> usize {
    let mut deepest = 0;
    let mut stack = vec![(value, 0usize)];
    while let Some((v, d)) = stack.pop() {
        match v {
            Value::Object(map) => {
                deepest = deepest.max(d + 1);
                stack.extend(map.values().map(|c| (c, d + 1)));
            }
            Value::Array(items) => {
                deepest = deepest.max(d + 1);
                stack.extend(items.iter().map(|c| (c, d + 1)));
            }
            _ => {}
        }
    }
    deepest
}

/// JSON equality where numbers compare by value (`1` equals `1.0`), as RFC 6902 `test`
/// requires and as Go's decoding to float64 makes Kubernetes behave for merge keys.
pub(crate) fn json_eq(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => {
            if let (Some(x), Some(y)) = (x.as_i64(), y.as_i64()) {
                x == y
            } else if let (Some(x), Some(y)) = (x.as_u64(), y.as_u64()) {
                x == y
            } else {
                x.as_f64() == y.as_f64()
            }
        }
        (Value::Array(x), Value::Array(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(a, b)| json_eq(a, b))
        }
        (Value::Object(x), Value::Object(y)) => {
            x.len() == y.len()
                && x.iter()
                    .all(|(k, v)| y.get(k).is_some_and(|w| json_eq(v, w)))
        }
        _ => a == b,
    }
}
