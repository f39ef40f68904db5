//! Element order of a merged list, as Kubernetes' strategic merge defines it: elements named
//! by the patch (or by its `$setElementOrder` list) keep the patch's relative order, elements
//! only on the server keep theirs, and the two runs are interleaved by server position.
//!
//! Elements are compared through an identity string (the canonical form of the merge-key
//! value, or of the element itself for scalar lists) so every step is a hash lookup: a patch
//! with many thousands of entries costs O(n log n), not O(n²).

use std::collections::HashMap;

use serde_json::Value;

/// A comparable form of a merge-key value or scalar element. Numbers compare by value, as
/// Kubernetes decodes every JSON number to float64 (`80` and `80.0` name the same port).
pub(super) fn canonical(value: &Value) -> String {
    match value {
        Value::String(s) => format!("s{s}"),
        Value::Number(n) => {
            if let Some(i) = n.as_i64() {
                format!("n{i}")
            } else if let Some(u) = n.as_u64() {
                format!("n{u}")
            } else {
                let f = n.as_f64().unwrap_or(f64::NAN);
                // Integral floats in i64 range print like the integer they equal.
                if f.fract() == 0.0 && f.abs() < 9.0e18 {
                    format!("n{}", f as i64)
                } else {
                    format!("n{f}")
                }
            }
        }
        other => format!("j{other}"),
    }
}

/// How list elements are identified: by a merge key, or (scalar lists) by value.
pub(super) fn identity(merge_key: Option<&str>) -> impl Fn(&Value) -> Option<String> + '_ {
    move |value: &Value| match merge_key {
        Some(key) => value.get(key).map(canonical),
        None => Some(canonical(value)),
    }
}

/// Orders `merged`: elements whose identity appears in `patch_order` sorted by it, elements
/// absent from it kept in their current (server) order, then the two runs interleaved so that
/// a server element goes first only when it sat before the next patch element on the server.
/// Patch elements new to the server therefore come before the remaining server elements,
/// which is what Kubernetes does when no `$setElementOrder` is given.
pub(super) fn arrange(
    merged: Vec<Value>,
    ident: &dyn Fn(&Value) -> Option<String>,
    patch_order: &[Option<String>],
    server_order: &[Option<String>],
) -> Vec<Value> {
    let patch_pos = first_positions(patch_order);
    let server_pos = first_positions(server_order);
    let total = merged.len();

    let mut from_patch = Vec::new();
    let mut server_only = Vec::new();
    for value in merged {
        let id = ident(&value);
        let lookup = |positions: &HashMap<&str, usize>| {
            id.as_deref().and_then(|i| positions.get(i)).copied()
        };
        match lookup(&patch_pos) {
            Some(p) => from_patch.push((p, lookup(&server_pos), value)),
            None => server_only.push((lookup(&server_pos), value)),
        }
    }
    // Stable: duplicates of one identity keep their relative order.
    from_patch.sort_by_key(|(p, _, _)| *p);

    let mut out = Vec::with_capacity(total);
    let mut left = server_only.into_iter().peekable();
    let mut right = from_patch.into_iter().peekable();
    loop {
        let take_left = match (left.peek(), right.peek()) {
            (None, None) => break,
            (Some(_), None) => true,
            (None, Some(_)) => false,
            (Some((l, _)), Some((_, r, _))) => matches!((l, r), (Some(l), Some(r)) if l < r),
        };
        let next = if take_left {
            left.next().map(|(_, v)| v)
        } else {
            right.next().map(|(_, _, v)| v)
        };
        out.extend(next);
    }
    out
}

fn first_positions(order: &[Option<String>]) -> HashMap<&str, usize> {
    let mut positions = HashMap::with_capacity(order.len());
    for (i, id) in order.iter().enumerate() {
        if let Some(id) = id {
            positions.entry(id.as_str()).or_insert(i);
        }
    }
    positions
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn ids(values: &[Value]) -> Vec<Option<String>> {
        values.iter().map(identity(None)).collect()
    }

    #[test]
    fn arrange_cases() {
        // (merged, patch order, server order, expected)
        let cases = [
            // A new patch element goes before the remaining server elements.
            (
                json!([1, 2, 3]),
                json!([3]),
                json!([1, 2]),
                json!([3, 1, 2]),
            ),
            // The patch reorders the elements it names; a server-only element goes first
            // when it sat before the next patch element on the server.
            (
                json!([1, 2, 3]),
                json!([3, 1]),
                json!([1, 2, 3]),
                json!([2, 3, 1]),
            ),
            (
                json!([1, 2, 3]),
                json!([1, 2, 3]),
                json!([1, 2, 3]),
                json!([1, 2, 3]),
            ),
            (
                json!([1, 2, 3, 4]),
                json!([4, 2]),
                json!([1, 2, 3, 4]),
                json!([1, 3, 4, 2]),
            ),
            (json!([]), json!([]), json!([]), json!([])),
            // 80 and 80.0 are the same element.
            (
                json!([80.0, 443]),
                json!([80]),
                json!([443, 80]),
                json!([443, 80.0]),
            ),
        ];
        for (merged, patch, server, want) in cases {
            let merged = merged.as_array().cloned().unwrap_or_default();
            let patch = ids(patch.as_array().map(Vec::as_slice).unwrap_or_default());
            let server = ids(server.as_array().map(Vec::as_slice).unwrap_or_default());
            let got = arrange(merged.clone(), &identity(None), &patch, &server);
            assert_eq!(Value::Array(got), want, "merged {merged:?}");
        }
    }
}
