//! `None` conversion between the versions of a custom kind: objects are stored in the
//! storage version and served in the version a request names, and the two differ only in
//! `apiVersion` (kube-apiserver's `None` strategy). Conversion webhooks are refused when a
//! definition is written (`definition`).
//!
//! The verbs convert at their edges: a write's object is turned to the storage version just
//! before it becomes a Mutation; the current object a PUT or PATCH starts from, and every
//! object answered (get, list, watch, a write's response), is turned to the request's
//! version. Built-in kinds and requests in the storage version take none of this: their
//! stored bytes are sent as they are.

use bytes::Bytes;
use serde_json::Value;

use crate::api::context::ApiContext;
use crate::kube::resources::ResourceInfo;

/// A request in a version of a custom kind other than its storage version.
#[derive(Debug, Clone)]
pub struct Conversion {
    /// `group/version` the request names.
    request: String,
    /// `group/version` objects are stored in.
    storage: String,
}

impl Conversion {
    /// The conversion a request for `info` needs (`None` for built-in kinds and for the
    /// storage version).
    pub fn of(ctx: &ApiContext, info: &ResourceInfo) -> Option<Conversion> {
        let kind = ctx.custom_kinds.of(info)?;
        let storage = kind.versions.iter().find(|v| v.storage)?;
        (storage.name != info.version).then(|| Conversion {
            request: info.api_version(),
            storage: format!("{}/{}", kind.group, storage.name),
        })
    }

    /// Turns `object` (from the client, in the request's version) to the storage version.
    pub fn to_storage(&self, object: &mut Value) {
        set_api_version(object, &self.storage);
    }

    /// Turns `object` (as stored) to the request's version.
    pub fn to_request(&self, object: &mut Value) {
        set_api_version(object, &self.request);
    }

    /// A stored object's bytes in the request's version.
    pub fn served(&self, json: &[u8]) -> Bytes {
        match serde_json::from_slice::<Value>(json) {
            Ok(mut object) => {
                self.to_request(&mut object);
                Bytes::from(serde_json::to_vec(&object).unwrap_or_default())
            }
            // Stored bytes are always an object; keep them rather than answer nothing.
            Err(_) => Bytes::copy_from_slice(json),
        }
    }
}

fn set_api_version(object: &mut Value, api_version: &str) {
    if let Some(fields) = object.as_object_mut() {
        fields.insert("apiVersion".into(), Value::String(api_version.to_string()));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn only_api_version_changes() {
        let c = Conversion {
            request: "example.com/v1beta1".into(),
            storage: "example.com/v1".into(),
        };
        let mut object = json!({"apiVersion": "example.com/v1beta1", "kind": "Widget",
            "metadata": {"ownerReferences": [{"apiVersion": "apps/v1"}]}, "spec": {"a": 1}});
        c.to_storage(&mut object);
        assert_eq!(object["apiVersion"], "example.com/v1");
        assert_eq!(
            object["metadata"]["ownerReferences"][0]["apiVersion"],
            "apps/v1"
        );
        let served: Value =
            serde_json::from_slice(&c.served(&serde_json::to_vec(&object).unwrap())).unwrap();
        assert_eq!(served["apiVersion"], "example.com/v1beta1");
        assert_eq!(served["spec"], json!({"a": 1}));
    }
}
