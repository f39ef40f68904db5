//! Object metadata the server owns: uid, creationTimestamp, generateName, generation, and what
//! an update may and may not change (apiserver pkg/registry/rest/{create,update,meta}.go).

use rand::Rng;
use serde_json::{json, Map, Value};

use crate::kube::resources::ResourceInfo;

/// `metav1.Time`: RFC3339 with whole seconds and `Z`.
pub fn now_rfc3339() -> String {
    format_time(chrono::Utc::now())
}

pub fn format_time(t: chrono::DateTime<chrono::Utc>) -> String {
    t.format("%Y-%m-%dT%H:%M:%SZ").to_string()
}

/// The alphabet of generated name suffixes (apimachinery util/rand: no vowels, no confusables).
const SUFFIX_ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";

/// `generateName` + 5 random characters, the prefix cut to 58 characters.
pub fn generate_name(prefix: &str) -> String {
    let mut cut = prefix.len().min(58);
    while !prefix.is_char_boundary(cut) {
        cut -= 1;
    }
    let mut rng = rand::thread_rng();
    let suffix: String = (0..5)
        .map(|_| SUFFIX_ALPHABET[rng.gen_range(0..SUFFIX_ALPHABET.len())] as char)
        .collect();
    format!("{}{}", &prefix[..cut], suffix)
}

/// The metadata object of `object`, created if missing or not an object.
pub fn metadata_mut(object: &mut Value) -> &mut Map<String, Value> {
    if !object.get("metadata").is_some_and(Value::is_object) {
        object["metadata"] = json!({});
    }
    match object.get_mut("metadata") {
        Some(Value::Object(m)) => m,
        // Just made sure it is an object.
        _ => unreachable!("metadata is an object"),
    }
}

/// Sets `path` in `object`, replacing anything on the way that is not an object.
pub fn set_path(object: &mut Value, path: &[&str], value: Value) {
    let Some((last, parents)) = path.split_last() else {
        *object = value;
        return;
    };
    let mut node = object;
    for key in parents {
        if !node.is_object() {
            *node = json!({});
        }
        node = &mut node[*key];
    }
    if !node.is_object() {
        *node = json!({});
    }
    node[*last] = value;
}

pub fn str_at<'a>(object: &'a Value, pointer: &str) -> Option<&'a str> {
    object.pointer(pointer).and_then(Value::as_str)
}

/// Server-set fields of a new object. `name` is already decided (generateName resolved).
pub fn prepare_create(info: &ResourceInfo, object: &mut Value, name: &str, now: &str) {
    let md = metadata_mut(object);
    md.insert("name".into(), json!(name));
    md.insert("uid".into(), json!(uuid::Uuid::new_v4().to_string()));
    md.insert("creationTimestamp".into(), json!(now));
    for field in [
        "resourceVersion",
        "deletionTimestamp",
        "deletionGracePeriodSeconds",
        "selfLink",
    ] {
        md.remove(field);
    }
    if info.tracks_generation {
        md.insert("generation".into(), json!(1));
    } else {
        md.remove("generation");
    }
}

/// Whether two versions differ outside metadata and status (what bumps generation).
pub fn spec_changed(old: &Value, new: &Value) -> bool {
    !equal_except(old, new, &["metadata", "status"])
}

/// Whether two values are equal once the top-level `skipped` fields of both are left out
/// (JSON object equality: key order does not matter). Compares in place, without copies.
fn equal_except(a: &Value, b: &Value, skipped: &[&str]) -> bool {
    let (Some(a), Some(b)) = (a.as_object(), b.as_object()) else {
        return a == b;
    };
    let kept = |m: &'_ serde_json::Map<String, Value>| {
        m.keys().filter(|k| !skipped.contains(&k.as_str())).count()
    };
    kept(a) == kept(b)
        && a.iter()
            .filter(|(k, _)| !skipped.contains(&k.as_str()))
            .all(|(k, v)| b.get(k) == Some(v))
}

/// Whether `new` equals `old` apart from `metadata.resourceVersion` (an update that changes
/// nothing else is not written).
pub fn same_but_rv(old: &Value, new: &Value) -> bool {
    if !equal_except(old, new, &["metadata"]) {
        return false;
    }
    match (old.get("metadata"), new.get("metadata")) {
        (Some(a), Some(b)) => equal_except(a, b, &["resourceVersion"]),
        (a, b) => a == b,
    }
}

/// Carries over what an update may not change (uid, creationTimestamp, deletion fields,
/// generation) and bumps generation when the spec changed.
pub fn prepare_update(info: &ResourceInfo, old: &Value, new: &mut Value) {
    let old_md = old.get("metadata");
    let changed = info.tracks_generation && spec_changed(old, new);
    let md = metadata_mut(new);
    for field in [
        "uid",
        "creationTimestamp",
        "deletionTimestamp",
        "deletionGracePeriodSeconds",
        "generation",
    ] {
        match old_md.and_then(|m| m.get(field)) {
            Some(v) => md.insert(field.into(), v.clone()),
            None => md.remove(field),
        };
    }
    md.remove("selfLink");
    if changed {
        let generation = old_md
            .and_then(|m| m.get("generation"))
            .and_then(Value::as_i64)
            .unwrap_or(0);
        md.insert("generation".into(), json!(generation + 1));
    }
}

/// The object's finalizers.
pub fn finalizers(object: &Value) -> Vec<String> {
    object
        .pointer("/metadata/finalizers")
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(|v| v.as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default()
}

pub use crate::kube::object::is_deleting;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kube::resources;

    #[test]
    fn changes_are_found_without_copies() {
        let old = json!({"metadata": {"name": "a", "resourceVersion": "5"},
            "spec": {"replicas": 1, "x": [1, 2]}, "status": {"ready": 0}});
        let same = json!({"spec": {"x": [1, 2], "replicas": 1},
            "metadata": {"name": "a"}, "status": {"ready": 0}});
        assert!(same_but_rv(&old, &same));
        assert!(!spec_changed(&old, &same));
        let status_moved = json!({"metadata": {"name": "a"},
            "spec": {"replicas": 1, "x": [1, 2]}, "status": {"ready": 1}});
        assert!(!spec_changed(&old, &status_moved));
        assert!(!same_but_rv(&old, &status_moved));
        let labelled = json!({"metadata": {"name": "a", "labels": {"l": "v"}},
            "spec": {"replicas": 1, "x": [1, 2]}, "status": {"ready": 0}});
        assert!(!spec_changed(&old, &labelled));
        assert!(!same_but_rv(&old, &labelled));
        let scaled = json!({"metadata": {"name": "a"},
            "spec": {"replicas": 2, "x": [1, 2]}, "status": {"ready": 0}});
        assert!(spec_changed(&old, &scaled));
        // A field added or dropped outside metadata and status is a change too.
        let extra = json!({"metadata": {"name": "a"}, "spec": {"replicas": 1, "x": [1, 2]},
            "status": {"ready": 0}, "data": {}});
        assert!(spec_changed(&old, &extra) && spec_changed(&extra, &old));
        assert!(!same_but_rv(&old, &json!({"metadata": {"name": "a"}})));
    }

    #[test]
    fn generated_names() {
        let long = "a".repeat(80);
        let n = generate_name(&long);
        assert_eq!(n.len(), 63);
        let n = generate_name("web-");
        assert!(n.starts_with("web-") && n.len() == 9);
        assert!(n[4..].bytes().all(|b| SUFFIX_ALPHABET.contains(&b)));
    }

    #[test]
    fn create_and_update_metadata() {
        let slices = resources::find("discovery.k8s.io", "v1", "endpointslices").unwrap();
        let mut obj = json!({"metadata":{"uid":"mine","resourceVersion":"5","deletionTimestamp":"x"},"endpoints":[]});
        prepare_create(slices, &mut obj, "s", "2024-01-01T00:00:00Z");
        let md = &obj["metadata"];
        assert_ne!(md["uid"], "mine");
        assert!(md.get("resourceVersion").is_none() && md.get("deletionTimestamp").is_none());
        assert_eq!(md["generation"], 1);
        assert_eq!(md["creationTimestamp"], "2024-01-01T00:00:00Z");

        let mut same = obj.clone();
        same["metadata"]["labels"] = json!({"a":"b"});
        same["metadata"]["uid"] = json!("other");
        prepare_update(slices, &obj, &mut same);
        assert_eq!(same["metadata"]["generation"], 1);
        assert_eq!(same["metadata"]["uid"], obj["metadata"]["uid"]);
        let mut changed = obj.clone();
        changed["endpoints"] = json!([{"addresses":["10.0.0.1"]}]);
        prepare_update(slices, &obj, &mut changed);
        assert_eq!(changed["metadata"]["generation"], 2);
    }

    #[test]
    fn time_format() {
        let t = chrono::DateTime::from_timestamp(1_700_000_000, 123_000_000).unwrap();
        assert_eq!(format_time(t), "2023-11-14T22:13:20Z");
    }
}
