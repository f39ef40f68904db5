//! Metadata the server fills in for objects it creates itself (bootstrap objects, its
//! Lease): uid, creationTimestamp, and the timestamp formats Kubernetes clients parse.

use chrono::{DateTime, Utc};
use serde_json::{Map, Value};

use crate::kube::object::ObjectKey;

/// `metav1.Time`: RFC 3339, whole seconds, `Z`.
pub fn time(at: DateTime<Utc>) -> String {
    at.format("%Y-%m-%dT%H:%M:%SZ").to_string()
}

/// `metav1.MicroTime`: exactly six fractional digits, `Z` (client-go parses a fixed layout).
pub fn micro_time(at: DateTime<Utc>) -> String {
    at.format("%Y-%m-%dT%H:%M:%S%.6fZ").to_string()
}

/// `object` with name/namespace from `key`, a fresh uid and creationTimestamp of now.
pub fn with_new_metadata(mut object: Value, key: &ObjectKey) -> Value {
    if let Some(obj) = object.as_object_mut() {
        let metadata = obj
            .entry("metadata")
            .or_insert_with(|| Value::Object(Map::new()));
        if let Some(metadata) = metadata.as_object_mut() {
            metadata.insert("name".into(), Value::String(key.name.clone()));
            if !key.namespace.is_empty() {
                metadata.insert("namespace".into(), Value::String(key.namespace.clone()));
            }
            metadata.insert(
                "uid".into(),
                Value::String(uuid::Uuid::new_v4().to_string()),
            );
            metadata.insert("creationTimestamp".into(), Value::String(time(Utc::now())));
        }
    }
    object
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;

    #[test]
    fn timestamp_layouts() {
        let at = Utc.with_ymd_and_hms(2006, 1, 2, 15, 4, 5).unwrap();
        assert_eq!(time(at), "2006-01-02T15:04:05Z");
        assert_eq!(micro_time(at), "2006-01-02T15:04:05.000000Z");
        let at = at + chrono::Duration::microseconds(123_456);
        assert_eq!(micro_time(at), "2006-01-02T15:04:05.123456Z");
    }
}
