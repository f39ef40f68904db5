//! Object identity (`ObjectKey`) and the stored form of an object (`StoredObject`).
//!
//! Objects are kept as serialized JSON (with `metadata.resourceVersion` already filled in) so
//! that get, list and watch copy bytes instead of re-serializing, plus the few fields the store
//! indexes and filters on (uid, labels, selectable fields). Everything here is derived
//! deterministically from the object, so every server of a cluster holds identical values.

use std::sync::Arc;

use bytes::Bytes;
use serde::{Deserialize, Serialize};

use super::labels::Labels;

/// Whether `object` is being deleted: it has a (non-null) `metadata.deletionTimestamp` and
/// waits for its finalizers.
pub fn is_deleting(object: &serde_json::Value) -> bool {
    object
        .pointer("/metadata/deletionTimestamp")
        .is_some_and(|v| !v.is_null())
}

/// Identifies one object: its resource (`"configmaps"`, `"apps/deployments"`), namespace
/// (empty for cluster-scoped kinds) and name. Ordered so that one resource, and one namespace
/// within it, are contiguous ranges.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct ObjectKey {
    pub resource: String,
    pub namespace: String,
    pub name: String,
}

impl ObjectKey {
    pub fn new(
        resource: impl Into<String>,
        namespace: impl Into<String>,
        name: impl Into<String>,
    ) -> Self {
        ObjectKey {
            resource: resource.into(),
            namespace: namespace.into(),
            name: name.into(),
        }
    }
}

impl std::fmt::Display for ObjectKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.namespace.is_empty() {
            write!(f, "{}/{}", self.resource, self.name)
        } else {
            write!(f, "{}/{}/{}", self.resource, self.namespace, self.name)
        }
    }
}

/// What the store keeps beside an object's JSON, read from the object alone: its uid, its
/// labels (string values only) and the values of its kind's selectable fields.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ObjectFacts {
    pub uid: String,
    pub labels: Labels,
    pub fields: Vec<(String, String)>,
}

impl ObjectFacts {
    /// The facts of `object`, an object of the store resource `resource`.
    pub fn of(resource: &str, object: &serde_json::Value) -> ObjectFacts {
        let metadata = object.get("metadata");
        let uid = metadata
            .and_then(|m| m.get("uid"))
            .and_then(serde_json::Value::as_str)
            .unwrap_or_default()
            .to_string();
        let labels = metadata
            .and_then(|m| m.get("labels"))
            .and_then(serde_json::Value::as_object)
            .map(|labels| {
                labels
                    .iter()
                    .filter_map(|(k, v)| v.as_str().map(|v| (k.as_str(), v)))
                    .collect()
            })
            .unwrap_or_default();
        ObjectFacts {
            uid,
            labels,
            fields: super::resources::selectable_fields(resource, object),
        }
    }
}

/// One object as the store holds it.
#[derive(Debug, Clone, PartialEq)]
pub struct StoredObject {
    pub key: ObjectKey,
    /// The store counter value at which this version of the object was written.
    pub resource_version: u64,
    pub uid: String,
    pub labels: Labels,
    /// Values of the kind's selectable fields (see `resources::selectable_fields`), e.g.
    /// `("spec.nodeName", "n1")`. `metadata.name`/`metadata.namespace` are not repeated here.
    pub fields: Vec<(String, String)>,
    /// The whole object as compact JSON, `metadata.resourceVersion` included.
    pub json: Bytes,
}

impl StoredObject {
    /// Parses the stored JSON back into a value (for patches, tables and updates).
    pub fn value(&self) -> serde_json::Value {
        // The bytes were produced by serde_json from a Value inside the store, so they parse.
        serde_json::from_slice(&self.json).unwrap_or(serde_json::Value::Null)
    }

    /// Whether the stored object is being deleted (`is_deleting` of its value), read without
    /// building the value: every create checks its namespace this way, on the API thread and
    /// again when it applies, and a whole parse of the namespace was most of that check.
    pub fn is_deleting(&self) -> bool {
        #[derive(Deserialize)]
        struct Object {
            metadata: Option<Metadata>,
        }
        #[derive(Deserialize)]
        struct Metadata {
            #[serde(rename = "deletionTimestamp")]
            deletion_timestamp: Option<serde::de::IgnoredAny>,
        }
        // Bytes that do not read as an object with an object `metadata` have no
        // `metadata.deletionTimestamp` for `is_deleting` to find either.
        serde_json::from_slice::<Object>(&self.json).is_ok_and(|object| {
            object
                .metadata
                .is_some_and(|metadata| metadata.deletion_timestamp.is_some())
        })
    }

    /// The value of a selectable field, including `metadata.name` and `metadata.namespace`.
    pub fn field(&self, name: &str) -> Option<&str> {
        match name {
            "metadata.name" => Some(&self.key.name),
            "metadata.namespace" => Some(&self.key.namespace),
            _ => self
                .fields
                .iter()
                .find(|(k, _)| k == name)
                .map(|(_, v)| v.as_str()),
        }
    }
}

pub type ObjectRef = Arc<StoredObject>;

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn stored(json: &[u8]) -> StoredObject {
        StoredObject {
            key: ObjectKey::new("namespaces", "", "n"),
            resource_version: 1,
            uid: String::new(),
            labels: Labels::default(),
            fields: Vec::new(),
            json: Bytes::copy_from_slice(json),
        }
    }

    #[test]
    fn reading_deletion_from_the_bytes_agrees_with_the_value() {
        let cases = [
            (json!({"metadata":{"name":"n"}}), false),
            (
                json!({"metadata":{"name":"n","deletionTimestamp":"2026-12-04T10:00:00Z"}}),
                true,
            ),
            (json!({"metadata":{"deletionTimestamp":null}}), false),
            (json!({"metadata":{"deletionTimestamp":{"odd":[1]}}}), true),
            (json!({"metadata":null}), false),
            (json!({"metadata":"text"}), false),
            (json!({"kind":"Namespace"}), false),
            (
                json!({"spec":{"deletionTimestamp":"x"},"metadata":{"annotations":{"deletionTimestamp":"y"}}}),
                false,
            ),
        ];
        for (object, deleting) in cases {
            let bytes = serde_json::to_vec(&object).expect("encode");
            assert_eq!(is_deleting(&object), deleting, "{object}");
            assert_eq!(stored(&bytes).is_deleting(), deleting, "{object}");
        }
        assert!(!stored(b"not json").is_deleting());
    }
}
