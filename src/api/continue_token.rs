//! Continue tokens for paginated lists: opaque base64url JSON `{"v","rv","start"}` naming the
//! list's resourceVersion and the last key served, like upstream's (apiserver
//! pkg/storage/continue.go). The store keeps only the current state, so a later page is served
//! from the current snapshot when nothing in the listed range changed since `rv` (checked
//! against the watch history), and answered 410 otherwise.

use base64::Engine;
use serde::{Deserialize, Serialize};

use super::status::ApiError;
use crate::kube::store::Store;

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ContinueToken {
    #[serde(rename = "v")]
    pub version: String,
    pub rv: u64,
    /// `<namespace>/<name>` of the last object served.
    pub start: String,
}

impl ContinueToken {
    pub fn new(rv: u64, namespace: &str, name: &str) -> Self {
        ContinueToken {
            version: "meta.k8s.io/v1".into(),
            rv,
            start: format!("{namespace}/{name}"),
        }
    }

    pub fn encode(&self) -> String {
        let json = serde_json::to_vec(self).unwrap_or_default();
        base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(json)
    }

    pub fn decode(token: &str) -> Result<ContinueToken, ApiError> {
        let bad = || ApiError::BadRequest("continue key is not valid: invalid token".into());
        let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
            .decode(token.trim_end_matches('='))
            .map_err(|_| bad())?;
        let token: ContinueToken = serde_json::from_slice(&bytes).map_err(|_| bad())?;
        if token.version != "meta.k8s.io/v1" || !token.start.contains('/') {
            return Err(bad());
        }
        Ok(token)
    }

    /// The (namespace, name) after which the next page starts.
    pub fn start_key(&self) -> (&str, &str) {
        self.start.split_once('/').unwrap_or(("", &self.start))
    }
}

/// Whether no object of `resource` (in `namespace` when given) changed after `rv`, so the
/// current state is also the state at `rv` for that range. False when the history no longer
/// reaches back to `rv`.
pub fn unchanged_since(store: &Store, rv: u64, resource: &str, namespace: Option<&str>) -> bool {
    if rv >= store.resource_version() {
        return true;
    }
    match store.subscribe(rv) {
        Ok(sub) => !sub.backlog.iter().any(|e| {
            let key = &e.object.key;
            key.resource == resource && namespace.is_none_or(|ns| key.namespace == ns)
        }),
        Err(_) => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kube::mutation::Mutation;
    use crate::kube::object::ObjectKey;
    use crate::kube::store::StoreConfig;
    use serde_json::json;

    #[test]
    fn round_trip_and_garbage() {
        let t = ContinueToken::new(42, "default", "a-b");
        let decoded = ContinueToken::decode(&t.encode()).unwrap();
        assert_eq!(decoded, t);
        assert_eq!(decoded.start_key(), ("default", "a-b"));
        assert_eq!(ContinueToken::new(1, "", "n").start_key(), ("", "n"));
        for bad in ["", "!!!", "e30", "eyJ2IjoieCJ9"] {
            assert!(ContinueToken::decode(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn consistency_check_uses_history() {
        let store = Store::new(StoreConfig {
            history_window: 3,
            live_buffer: 16,
        });
        let create = |res: &str, name: &str| Mutation::Create {
            key: ObjectKey::new(res, "ns", name),
            object: json!({"metadata":{"name":name}}),
            requires_open_namespace: false,
        };
        store.apply(create("configmaps", "a")).unwrap();
        store.apply(create("secrets", "s")).unwrap();
        assert!(unchanged_since(&store, 1, "configmaps", Some("ns")));
        assert!(!unchanged_since(&store, 1, "secrets", None));
        store.apply(create("secrets", "t")).unwrap();
        store.apply(create("secrets", "u")).unwrap();
        store.apply(create("secrets", "v")).unwrap();
        // rv 1 fell out of the 3-event window: cannot prove consistency.
        assert!(!unchanged_since(&store, 1, "configmaps", None));
    }
}
