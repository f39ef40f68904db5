//! An object prepared for the store before it reaches the Raft thread: its JSON encoded once,
//! with the place of `metadata.resourceVersion` marked, and the facts the store indexes.
//!
//! On the Raft leader, everything about a write used to happen on the one Raft thread: the
//! object was encoded into the log entry, encoded again by the store's `stamp` with the new
//! resourceVersion, and read for its uid, labels and selectable fields. The batcher instead
//! prepares each object on the caller's thread, where the API handlers run in parallel; the
//! log entry copies these bytes, and `stamp` splices the resourceVersion into them. The result
//! must be byte-identical to the plain path (every server compares the store's bytes; entries
//! replayed from the log at start take the plain path): the tests check that on objects with
//! and without a resourceVersion, with other types in its place, and with strings that need
//! escaping.

use std::fmt;
use std::sync::Arc;

use serde_json::Value;

use super::json_writer::{write_str, write_value};
use super::object::{ObjectFacts, ObjectKey, StoredObject};

/// Where `stamp`'s `metadata.insert("resourceVersion", …)` puts its value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum VersionSlot {
    /// The object has the key: its value occupies `start..end` and is replaced there (an
    /// IndexMap keeps a replaced key in place).
    Replace { start: usize, end: usize },
    /// The object lacks it: the pair goes before `metadata`'s closing brace, after a comma
    /// unless `metadata` is empty (an IndexMap appends new keys).
    Insert { at: usize, comma: bool },
}

/// An object whose `metadata` is a JSON object, prepared for the store.
#[derive(Clone, PartialEq, Eq)]
pub struct PreparedObject {
    /// The compact JSON of the object as given (no resourceVersion added).
    json: Vec<u8>,
    slot: VersionSlot,
    facts: ObjectFacts,
}

impl fmt::Debug for PreparedObject {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "PreparedObject({} bytes, {:?})",
            self.json.len(),
            self.slot
        )
    }
}

impl PreparedObject {
    /// Prepares `object`, an object of the store resource `resource`; its JSON is what
    /// `json_writer::write_value` writes. `None` when it is not a JSON object with an object
    /// `metadata` (the store refuses those anyway).
    pub fn prepare(resource: &str, object: &Value) -> Option<PreparedObject> {
        let json = encode(object)?;
        Some(PreparedObject {
            json: json.0,
            slot: json.1,
            facts: ObjectFacts::of(resource, object),
        })
    }

    /// The object's JSON as given (no resourceVersion added).
    pub fn as_bytes(&self) -> &[u8] {
        &self.json
    }

    /// The stored form of the object under `key` at `resource_version`: what the store's
    /// plain path builds from the `Value`, byte for byte.
    pub fn stored(&self, key: ObjectKey, resource_version: u64) -> StoredObject {
        StoredObject {
            key,
            resource_version,
            uid: self.facts.uid.clone(),
            labels: self.facts.labels.clone(),
            fields: self.facts.fields.clone(),
            json: self.with_resource_version(resource_version).into(),
        }
    }

    /// The JSON of the object with `metadata.resourceVersion` set to `resource_version` (as
    /// a string), byte-identical to setting it in the `Value` and encoding that.
    fn with_resource_version(&self, resource_version: u64) -> Vec<u8> {
        let version = resource_version.to_string();
        let mut out = Vec::with_capacity(self.json.len() + version.len() + 24);
        match self.slot {
            VersionSlot::Replace { start, end } => {
                out.extend_from_slice(&self.json[..start]);
                push_quoted(&mut out, &version);
                out.extend_from_slice(&self.json[end..]);
            }
            VersionSlot::Insert { at, comma } => {
                out.extend_from_slice(&self.json[..at]);
                if comma {
                    out.push(b',');
                }
                out.extend_from_slice(br#""resourceVersion":"#);
                push_quoted(&mut out, &version);
                out.extend_from_slice(&self.json[at..]);
            }
        }
        out
    }
}

/// `object` as compact JSON, with the place of `metadata.resourceVersion`; `None` unless it
/// is an object with an object `metadata`.
fn encode(object: &Value) -> Option<(Vec<u8>, VersionSlot)> {
    let Value::Object(fields) = object else {
        return None;
    };
    if !matches!(fields.get("metadata"), Some(Value::Object(_))) {
        return None;
    }
    let mut json = Vec::with_capacity(256);
    let mut slot = None;
    json.push(b'{');
    for (i, (key, value)) in fields.iter().enumerate() {
        write_key(&mut json, i, key);
        match value {
            Value::Object(metadata) if key == "metadata" => {
                json.push(b'{');
                for (j, (name, item)) in metadata.iter().enumerate() {
                    write_key(&mut json, j, name);
                    let start = json.len();
                    write_value(&mut json, item);
                    if name == "resourceVersion" {
                        slot = Some(VersionSlot::Replace {
                            start,
                            end: json.len(),
                        });
                    }
                }
                slot.get_or_insert(VersionSlot::Insert {
                    at: json.len(),
                    comma: !metadata.is_empty(),
                });
                json.push(b'}');
            }
            _ => write_value(&mut json, value),
        }
    }
    json.push(b'}');
    Some((json, slot?))
}

/// Writes what precedes the value of a map's `index`-th entry: a comma after the first, then
/// `"key":`.
fn write_key(json: &mut Vec<u8>, index: usize, key: &str) {
    if index > 0 {
        json.push(b',');
    }
    write_str(json, key);
    json.push(b':');
}

/// Digits need no escaping.
fn push_quoted(out: &mut Vec<u8>, digits: &str) {
    out.push(b'"');
    out.extend_from_slice(digits.as_bytes());
    out.push(b'"');
}

/// A Proposal's object, prepared by the batcher on the proposing server. It is derived data:
/// never serialized (a follower prepares the entries it receives again, `Batch::prepare_objects`;
/// entries replayed from the log have none and take the plain path), and ignored when
/// proposals are compared.
#[derive(Clone, Default)]
pub struct PreparedCache(Option<Arc<PreparedObject>>);

impl PreparedCache {
    pub fn new(prepared: Option<PreparedObject>) -> Self {
        PreparedCache(prepared.map(Arc::new))
    }

    pub fn get(&self) -> Option<&PreparedObject> {
        self.0.as_deref()
    }
}

impl PartialEq for PreparedCache {
    fn eq(&self, _: &Self) -> bool {
        true
    }
}

impl fmt::Debug for PreparedCache {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.0 {
            Some(json) => json.fmt(f),
            None => f.write_str("-"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// What `store::stamp` does to the Value, then serde_json's encoding of it.
    fn stamped_by_value(mut object: Value, rv: u64) -> Vec<u8> {
        object["metadata"]
            .as_object_mut()
            .expect("metadata")
            .insert("resourceVersion".into(), Value::String(rv.to_string()));
        serde_json::to_vec(&object).expect("encode")
    }

    #[test]
    fn splicing_the_version_matches_encoding_the_stamped_value() {
        let objects = [
            json!({"apiVersion":"v1","kind":"ConfigMap",
                   "metadata":{"name":"a","namespace":"d"},"data":{"k":"v"}}),
            json!({"metadata":{"name":"a","resourceVersion":"17","uid":"u"},"spec":{}}),
            json!({"metadata":{"resourceVersion":12,"name":"n"}}),
            json!({"metadata":{"name":"x","resourceVersion":null}}),
            json!({"metadata":{"name":"x","resourceVersion":{"nested":["a"]}}}),
            json!({"metadata":{}}),
            json!({"kind":"K","metadata":{},"z":[1,2.5,"q\"\n\u{1}é"]}),
            json!({"metadata":{"name":"tab\there","labels":{"a\\b":"c\"d"}},
                   "data":{"big":"x".repeat(1000)}}),
            json!({"metadata":{"annotations":{"resourceVersion":"not this one"},"name":"y"}}),
        ];
        for object in objects {
            let encoded =
                PreparedObject::prepare("pods", &object).expect("an object with metadata");
            assert_eq!(encoded.facts, ObjectFacts::of("pods", &object));
            assert_eq!(
                encoded.as_bytes(),
                serde_json::to_vec(&object).expect("encode").as_slice(),
                "{object}"
            );
            for rv in [1, 9, 10, 123_456_789_012] {
                assert_eq!(
                    String::from_utf8_lossy(&encoded.with_resource_version(rv)),
                    String::from_utf8_lossy(&stamped_by_value(object.clone(), rv)),
                    "{object} at {rv}"
                );
            }
        }
    }

    #[test]
    fn objects_the_store_refuses_are_not_encoded() {
        for object in [
            json!("text"),
            json!([1]),
            json!({"kind":"K"}),
            json!({"metadata":"m"}),
            json!({"metadata":null}),
        ] {
            assert_eq!(PreparedObject::prepare("pods", &object), None, "{object}");
        }
    }
}
