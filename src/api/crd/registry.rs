//! The custom kinds this server serves, derived from the CustomResourceDefinitions in the
//! store and nothing else: a definition is served once it is stored with its `Established`
//! condition true (the server that stores it writes the condition, `definition`), so every
//! server of a cluster serves the same kinds as soon as its store has applied the write.
//!
//! The registry follows the store's watch as the RBAC index does: every lookup first takes
//! the events the store has sent since the last one (all of them were sent before the store's
//! resourceVersion moved, so a definition answered 201 is routable on the very next request),
//! and a subscription that fell behind, or a store restored from a snapshot, rebuilds the
//! registry from a snapshot. [`CustomKinds::follow`] keeps the watch drained while nothing
//! asks.

use std::collections::HashMap;
use std::sync::Arc;

use serde_json::Value;
use tokio_util::sync::CancellationToken;

use super::kind::CustomKind;
use super::CRDS;
use crate::kube::derived::{Derived, FromStore};
use crate::kube::object::StoredObject;
use crate::kube::resources::{ResourceInfo, RESOURCES};
use crate::kube::store::Store;
use crate::kube::watch::EventKind;

/// The served kinds, by store key (`group/plural`) and by definition name.
#[derive(Default)]
struct Kinds {
    by_key: HashMap<String, Arc<CustomKind>>,
    /// Definition name → the store key it serves.
    by_definition: HashMap<String, String>,
}

impl Kinds {
    fn apply(&mut self, kind: EventKind, object: &StoredObject) {
        let name = object.key.name.to_string();
        if let Some(key) = self.by_definition.remove(&name) {
            self.by_key.remove(&key);
        }
        if kind == EventKind::Deleted {
            return;
        }
        let value = object.value();
        if !established(&value) {
            return;
        }
        let Some(custom) = CustomKind::from_definition(&value) else {
            return;
        };
        let key = custom.store_key();
        // Two definitions stored at once may both have been accepted; the first one served
        // keeps its names.
        if self.by_key.contains_key(&key) {
            return;
        }
        self.by_definition.insert(name, key.clone());
        self.by_key.insert(key, Arc::new(custom));
    }
}

/// Whether a stored definition's `Established` condition is true.
pub fn established(crd: &Value) -> bool {
    crd.pointer("/status/conditions")
        .and_then(Value::as_array)
        .is_some_and(|conditions| {
            conditions
                .iter()
                .any(|c| c["type"] == "Established" && c["status"] == "True")
        })
}

/// The registry of custom kinds, kept up to date from the store.
pub struct CustomKinds {
    kinds: Derived<Kinds>,
}

impl FromStore for Kinds {
    const RESOURCES: &'static [&'static str] = &[CRDS];

    fn apply(&mut self, kind: EventKind, object: &StoredObject) {
        Kinds::apply(self, kind, object);
    }
}

impl CustomKinds {
    pub fn new(store: Arc<Store>) -> CustomKinds {
        CustomKinds {
            kinds: Derived::new(store),
        }
    }

    /// The served version `version` of the custom kind `plural` in `group`.
    pub fn find(&self, group: &str, version: &str, plural: &str) -> Option<&'static ResourceInfo> {
        let kind = self.by_key(&format!("{group}/{plural}"))?;
        kind.version(version).filter(|v| v.served).map(|v| v.info)
    }

    /// The custom kind whose objects the store keeps under `store_key`.
    pub fn by_key(&self, store_key: &str) -> Option<Arc<CustomKind>> {
        self.kinds.fresh().by_key.get(store_key).cloned()
    }

    /// The custom kind `info` is a version of (`None` for built-in kinds).
    pub fn of(&self, info: &ResourceInfo) -> Option<Arc<CustomKind>> {
        // Every write asks: a built-in kind is answered without a lookup.
        if info.group.is_empty() || RESOURCES.as_ptr_range().contains(&std::ptr::from_ref(info)) {
            return None;
        }
        self.by_key(&info.store_key()).filter(|k| {
            k.version(info.version)
                .is_some_and(|v| std::ptr::eq(v.info, info))
        })
    }

    /// Every custom kind, ordered by group and plural (for the OpenAPI documents).
    pub fn kinds(&self) -> Vec<Arc<CustomKind>> {
        let mut out: Vec<Arc<CustomKind>> = self.kinds.fresh().by_key.values().cloned().collect();
        out.sort_by(|a, b| (&a.group, &a.plural).cmp(&(&b.group, &b.plural)));
        out
    }

    /// Every served version of every custom kind, for discovery.
    pub fn served(&self) -> Vec<&'static ResourceInfo> {
        let kinds = self.kinds.fresh();
        let mut out: Vec<&'static ResourceInfo> = kinds
            .by_key
            .values()
            .flat_map(|k| k.versions.iter().filter(|v| v.served).map(|v| v.info))
            .collect();
        out.sort_by_key(|i| (i.group, i.plural, i.version));
        out
    }

    /// Keeps the registry following the store while nothing asks, until `stop`.
    pub async fn follow(self: Arc<Self>, stop: CancellationToken) {
        self.kinds.follow(stop).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kube::mutation::Mutation;
    use crate::kube::object::ObjectKey;
    use crate::kube::store::StoreConfig;
    use serde_json::json;

    fn definition(established: bool) -> Value {
        json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
            "metadata": {"name": "widgets.example.com", "uid": "u1"},
            "spec": {"group": "example.com", "scope": "Namespaced",
                "names": {"plural": "widgets", "kind": "Widget"},
                "versions": [{"name": "v1", "served": true, "storage": true,
                              "schema": {"openAPIV3Schema": {"type": "object"}}},
                             {"name": "v2", "served": false, "storage": false,
                              "schema": {"openAPIV3Schema": {"type": "object"}}}]},
            "status": {"conditions": [{"type": "Established",
                                       "status": if established { "True" } else { "False" }}]}})
    }

    #[test]
    fn the_registry_follows_the_stored_definitions() {
        let store = Arc::new(Store::new(StoreConfig::default()));
        let kinds = CustomKinds::new(store.clone());
        assert!(kinds.find("example.com", "v1", "widgets").is_none());
        let key = ObjectKey::new(CRDS, "", "widgets.example.com");
        store
            .apply(Mutation::Create {
                key: key.clone(),
                object: definition(false),
                requires_open_namespace: false,
            })
            .expect("create");
        assert!(
            kinds.find("example.com", "v1", "widgets").is_none(),
            "not established: not served"
        );
        store
            .apply(Mutation::Update {
                key: key.clone(),
                object: definition(true),
                precondition: Default::default(),
            })
            .expect("update");
        let info = kinds.find("example.com", "v1", "widgets").expect("served");
        assert_eq!(info.kind, "Widget");
        assert!(
            kinds.find("example.com", "v2", "widgets").is_none(),
            "not served"
        );
        assert!(kinds.of(info).is_some());
        let builtin = crate::kube::resources::find("apps", "v1", "deployments").expect("built-in");
        assert!(kinds.of(builtin).is_none());
        let served = kinds.served();
        assert!(served.len() == 1 && std::ptr::eq(served[0], info));
        store
            .apply(Mutation::Delete {
                key,
                precondition: Default::default(),
            })
            .expect("delete");
        assert!(kinds.find("example.com", "v1", "widgets").is_none());
        assert!(kinds.served().is_empty());
    }
}
