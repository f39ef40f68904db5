//! RFC 7386 JSON Merge Patch: objects merge key by key, `null` deletes a key, anything else
//! (arrays included) replaces the target value whole. A non-object patch replaces the whole
//! target, as the RFC says.

use serde_json::{Map, Value};

/// Applies `patch` to a copy of `target`. Recursion follows the patch, whose depth the caller
/// has bounded.
pub(super) fn apply(target: &Value, patch: &Value) -> Value {
    let Value::Object(patch) = patch else {
        return patch.clone();
    };
    let mut merged = match target {
        Value::Object(map) => map.clone(),
        _ => Map::new(),
    };
    merge_into(&mut merged, patch);
    Value::Object(merged)
}

fn merge_into(target: &mut Map<String, Value>, patch: &Map<String, Value>) {
    for (key, value) in patch {
        match value {
            Value::Null => {
                target.shift_remove(key);
            }
            Value::Object(sub_patch) => {
                let slot = target
                    .entry(key.clone())
                    .or_insert_with(|| Value::Object(Map::new()));
                if !slot.is_object() {
                    *slot = Value::Object(Map::new());
                }
                if let Value::Object(sub_target) = slot {
                    merge_into(sub_target, sub_patch);
                }
            }
            other => {
                target.insert(key.clone(), other.clone());
            }
        }
    }
}
