//! Pod templates as workload controllers compare and name them: the template hash that names a
//! Deployment's ReplicaSets (`<deployment>-<hash>`, the `pod-template-hash` label) and that
//! DaemonSets and StatefulSets put on their controller revisions, and the comparison that
//! tells whether two templates describe the same pods.
//!
//! kube-controller-manager's `ComputeHash` is FNV-32a over a dump of the Go struct, then the
//! collision count as 8 little-endian bytes, printed in decimal and mapped onto the
//! `bcdfghjklmnpqrstvwxz2456789` alphabet. The Go dump cannot be reproduced from JSON, so the
//! bytes hashed here are the template's canonical JSON (keys sorted, empty values dropped, see
//! [`normalized`]); everything after that is upstream's, so names look and behave the same
//! (ten characters or fewer from that alphabet, a new name for each collision count) without
//! being equal to a kube-controller-manager's for the same template. Controllers never rely
//! on the name to find a template: they compare templates ([`equal_ignoring_hash`]), as
//! upstream does, so a name that changes between versions is harmless.

use serde_json::{Map, Value};

/// The label a Deployment adds to its ReplicaSets' selectors and pod templates.
pub const POD_TEMPLATE_HASH: &str = "pod-template-hash";

/// apimachinery's `rand.SafeEncodeString` alphabet: no vowels, no look-alike characters.
const ALPHANUMS: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";

/// The hash of `template` with `collision_count` mixed in (upstream's `ComputeHash`).
pub fn compute_hash(template: &Value, collision_count: Option<u32>) -> String {
    let mut hash = Fnv32a::new();
    hash.write(&canonical_json(template));
    if let Some(count) = collision_count {
        // Upstream writes the count into an 8-byte buffer with PutUint32, so the last four
        // bytes are always zero; kept, so the same counts give the same sequence of names.
        let mut bytes = [0u8; 8];
        bytes[..4].copy_from_slice(&count.to_le_bytes());
        hash.write(&bytes);
    }
    safe_encode(&hash.finish().to_string())
}

/// Maps each character onto the safe alphabet (`rand.SafeEncodeString`).
pub fn safe_encode(text: &str) -> String {
    text.chars()
        .map(|c| ALPHANUMS[(c as usize) % ALPHANUMS.len()] as char)
        .collect()
}

/// Whether two pod templates describe the same pods, ignoring the `pod-template-hash` label
/// (upstream's `EqualIgnoreHash`: the ReplicaSet's template carries the label, the
/// Deployment's does not) and differences that do not change the pods (see [`normalized`]).
pub fn equal_ignoring_hash(a: &Value, b: &Value) -> bool {
    normalized(&without_hash_label(a)) == normalized(&without_hash_label(b))
}

/// `template` without the `pod-template-hash` label.
pub fn without_hash_label(template: &Value) -> Value {
    let mut copy = template.clone();
    if let Some(labels) = copy
        .pointer_mut("/metadata/labels")
        .and_then(Value::as_object_mut)
    {
        labels.remove(POD_TEMPLATE_HASH);
    }
    copy
}

/// The template as upstream's semantic equality sees it: nulls, empty objects and empty
/// arrays dropped, recursively. A template written back by a client that decodes it into Go
/// types (`kubectl rollout undo` patches the old ReplicaSet's template into the Deployment)
/// gains `creationTimestamp: null` and `resources: {}` and loses empty lists; those are not
/// differences between pods.
pub fn normalized(value: &Value) -> Value {
    match value {
        Value::Object(map) => {
            let mut out = Map::new();
            for (k, v) in map {
                let v = normalized(v);
                if !is_empty(&v) {
                    out.insert(k.clone(), v);
                }
            }
            Value::Object(out)
        }
        Value::Array(items) => Value::Array(items.iter().map(normalized).collect()),
        other => other.clone(),
    }
}

fn is_empty(value: &Value) -> bool {
    match value {
        Value::Null => true,
        Value::Object(m) => m.is_empty(),
        Value::Array(a) => a.is_empty(),
        _ => false,
    }
}

/// Compact JSON of the normalized value with object keys in sorted order, whatever order
/// the object was written in.
fn canonical_json(value: &Value) -> Vec<u8> {
    fn write(value: &Value, out: &mut Vec<u8>) {
        match value {
            Value::Object(map) => {
                let mut keys: Vec<&String> = map.keys().collect();
                keys.sort();
                out.push(b'{');
                for (i, k) in keys.into_iter().enumerate() {
                    if i > 0 {
                        out.push(b',');
                    }
                    // A string always serializes.
                    out.extend_from_slice(&serde_json::to_vec(k).unwrap_or_default());
                    out.push(b':');
                    write(&map[k], out);
                }
                out.push(b'}');
            }
            Value::Array(items) => {
                out.push(b'[');
                for (i, item) in items.iter().enumerate() {
                    if i > 0 {
                        out.push(b',');
                    }
                    write(item, out);
                }
                out.push(b']');
            }
            scalar => out.extend_from_slice(&serde_json::to_vec(scalar).unwrap_or_default()),
        }
    }
    let mut out = Vec::new();
    write(&normalized(value), &mut out);
    out
}

/// 32-bit FNV-1a (Go's `hash/fnv.New32a`).
struct Fnv32a(u32);

impl Fnv32a {
    const OFFSET: u32 = 2_166_136_261;
    const PRIME: u32 = 16_777_619;

    fn new() -> Fnv32a {
        Fnv32a(Self::OFFSET)
    }

    fn write(&mut self, bytes: &[u8]) {
        for b in bytes {
            self.0 ^= u32::from(*b);
            self.0 = self.0.wrapping_mul(Self::PRIME);
        }
    }

    fn finish(&self) -> u32 {
        self.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn template() -> Value {
        json!({
            "metadata": {"labels": {"app": "web"}},
            "spec": {"containers": [{"name": "c", "image": "nginx", "args": []}]},
        })
    }

    #[test]
    fn fnv_matches_the_reference_vectors() {
        // From the FNV reference test suite (and Go's hash/fnv tests).
        for (input, want) in [
            ("", 0x811c9dc5u32),
            ("a", 0xe40c292c),
            ("foobar", 0xbf9cf968),
        ] {
            let mut h = Fnv32a::new();
            h.write(input.as_bytes());
            assert_eq!(h.finish(), want, "{input:?}");
        }
    }

    #[test]
    fn safe_encoding_maps_digits_as_upstream() {
        // '0'..'9' are bytes 48..57; 48 % 27 = 21 is '4', 54 % 27 = 0 is 'b'.
        assert_eq!(safe_encode("0123456789"), "456789bcdf");
    }

    #[test]
    fn the_hash_is_stable_and_changes_with_the_template_and_the_collision_count() {
        let h = compute_hash(&template(), None);
        assert!(h.len() <= 10 && !h.is_empty(), "{h}");
        assert!(h.bytes().all(|b| ALPHANUMS.contains(&b)), "{h}");
        // Key order and empty values do not matter.
        let reordered = json!({
            "spec": {"containers": [{"image": "nginx", "name": "c"}]},
            "metadata": {"creationTimestamp": null, "labels": {"app": "web"}},
        });
        assert_eq!(compute_hash(&reordered, None), h);
        let mut other = template();
        other["spec"]["containers"][0]["image"] = json!("nginx:2");
        assert_ne!(compute_hash(&other, None), h);
        let first = compute_hash(&template(), Some(1));
        assert_ne!(first, h);
        assert_ne!(compute_hash(&template(), Some(2)), first);
        assert_eq!(compute_hash(&template(), Some(1)), first);
    }

    #[test]
    fn templates_compare_without_the_hash_label_and_empty_values() {
        let mut with_label = template();
        with_label["metadata"]["labels"][POD_TEMPLATE_HASH] = json!("abc");
        with_label["spec"]["containers"][0]["resources"] = json!({});
        assert!(equal_ignoring_hash(&with_label, &template()));
        let mut changed = template();
        changed["metadata"]["labels"]["tier"] = json!("x");
        assert!(!equal_ignoring_hash(&changed, &template()));
        assert_eq!(
            without_hash_label(&with_label)["metadata"]["labels"],
            json!({"app": "web"})
        );
    }
}
