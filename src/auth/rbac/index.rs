//! The RBAC objects of the store, indexed for authorization: Roles and ClusterRoles by name,
//! and every RoleBinding and ClusterRoleBinding under each subject it names, so a decision
//! reads the bindings of the caller's name and groups (ordered by namespace, so a namespace's
//! bindings are one range) instead of scanning them all.
//!
//! The index follows the store's watch: [`RbacCache::fresh`] first takes every event the store
//! has sent since the last call (all of them were sent before the store's resourceVersion
//! moved, so an index that has seen up to that version holds every applied RBAC write: a
//! RoleBinding answered 201 authorizes the very next request). A subscription that fell
//! behind, or a store restored from a snapshot, rebuilds the index from a snapshot.

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;

use serde::Deserialize;

use super::rule::PolicyRule;
use crate::auth::user::service_account_user;
use crate::kube::derived::{Derived, FromStore};
use crate::kube::object::StoredObject;
use crate::kube::watch::EventKind;

/// The store keys of the four RBAC kinds.
pub const ROLES: &str = "rbac.authorization.k8s.io/roles";
pub const CLUSTER_ROLES: &str = "rbac.authorization.k8s.io/clusterroles";
pub const ROLE_BINDINGS: &str = "rbac.authorization.k8s.io/rolebindings";
pub const CLUSTER_ROLE_BINDINGS: &str = "rbac.authorization.k8s.io/clusterrolebindings";

/// Who a binding grants to: a user name (a service account is its user name,
/// `system:serviceaccount:<ns>:<name>`, as kube-apiserver compares them) or a group.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum SubjectKey {
    User(String),
    Group(String),
}

/// A subject as a binding lists it, for the reasons of a decision.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Subject {
    pub kind: String,
    pub name: String,
    /// A ServiceAccount's namespace (the binding's when the subject names none).
    pub namespace: String,
}

impl Subject {
    /// kube-apiserver's `describeSubject`: `User "alice"`, `ServiceAccount "sa/ns"`.
    pub fn describe(&self) -> String {
        use crate::auth::messages::go_quote;
        if self.kind == "ServiceAccount" {
            format!(
                "{} {}",
                self.kind,
                go_quote(&format!("{}/{}", self.name, self.namespace))
            )
        } else {
            format!("{} {}", self.kind, go_quote(&self.name))
        }
    }

    fn key(&self) -> Option<SubjectKey> {
        match self.kind.as_str() {
            "User" => Some(SubjectKey::User(self.name.clone())),
            "Group" => Some(SubjectKey::Group(self.name.clone())),
            "ServiceAccount" if !self.namespace.is_empty() => Some(SubjectKey::User(
                service_account_user(&self.namespace, &self.name),
            )),
            _ => None,
        }
    }
}

/// A RoleBinding (namespace set) or ClusterRoleBinding (namespace empty).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Binding {
    pub namespace: String,
    pub name: String,
    /// `Role` or `ClusterRole`.
    pub role_kind: String,
    pub role_name: String,
    pub subjects: Vec<Subject>,
}

impl Binding {
    /// kube-apiserver's binding describer: `ClusterRoleBinding "b" of ClusterRole "r" to
    /// Group "g"`, `RoleBinding "b/ns" of Role "r" to User "u"`.
    pub fn describe(&self, subject: &Subject) -> String {
        use crate::auth::messages::go_quote;
        if self.namespace.is_empty() {
            format!(
                "ClusterRoleBinding {} of {} {} to {}",
                go_quote(&self.name),
                self.role_kind,
                go_quote(&self.role_name),
                subject.describe()
            )
        } else {
            format!(
                "RoleBinding {} of {} {} to {}",
                go_quote(&format!("{}/{}", self.name, self.namespace)),
                self.role_kind,
                go_quote(&self.role_name),
                subject.describe()
            )
        }
    }
}

/// A role's rules, shared by every decision that reads them.
pub type Rules = Arc<[PolicyRule]>;

/// The indexed RBAC objects at one point of the store's history.
#[derive(Default)]
pub struct Index {
    cluster_roles: HashMap<String, Rules>,
    /// (namespace, name)
    roles: HashMap<(String, String), Rules>,
    /// (namespace, name); the namespace of a ClusterRoleBinding is empty.
    bindings: HashMap<(String, String), Arc<Binding>>,
    by_subject: HashMap<SubjectKey, BTreeSet<(String, String)>>,
}

impl Index {
    /// The bindings that apply to `keys` in `namespace` (ClusterRoleBindings first, then the
    /// RoleBindings of `namespace` when it is not empty), each once.
    pub fn bindings_for(&self, keys: &[SubjectKey], namespace: &str) -> Vec<Arc<Binding>> {
        let mut found: BTreeSet<(String, String)> = BTreeSet::new();
        for key in keys {
            let Some(set) = self.by_subject.get(key) else {
                continue;
            };
            // ClusterRoleBindings sort first (empty namespace).
            let cluster = set
                .range((String::new(), String::new())..(String::from("\0"), String::new()))
                .cloned();
            found.extend(cluster);
            if !namespace.is_empty() {
                let from = (namespace.to_string(), String::new());
                found.extend(
                    set.range(from..)
                        .take_while(|(ns, _)| ns == namespace)
                        .cloned(),
                );
            }
        }
        found
            .iter()
            .filter_map(|key| self.bindings.get(key).cloned())
            .collect()
    }

    /// The rules a binding's role grants, or the error kube-apiserver reports when the role
    /// does not exist.
    pub fn role_rules(&self, binding: &Binding) -> Result<Rules, String> {
        let found = if binding.role_kind == "ClusterRole" {
            self.cluster_roles.get(&binding.role_name)
        } else if binding.role_kind == "Role" {
            self.roles
                .get(&(binding.namespace.clone(), binding.role_name.clone()))
        } else {
            None
        };
        found.cloned().ok_or_else(|| {
            let resource = if binding.role_kind == "Role" {
                "role"
            } else {
                "clusterrole"
            };
            format!(
                "{resource}.rbac.authorization.k8s.io {} not found",
                crate::auth::messages::go_quote(&binding.role_name)
            )
        })
    }

    fn apply(&mut self, kind: EventKind, object: &StoredObject) {
        let key = &object.key;
        let id = (key.namespace.clone(), key.name.clone());
        let deleted = kind == EventKind::Deleted;
        match key.resource.as_str() {
            CLUSTER_ROLES => {
                if deleted {
                    self.cluster_roles.remove(&key.name);
                } else {
                    self.cluster_roles
                        .insert(key.name.clone(), rules_of(object));
                }
            }
            ROLES => {
                if deleted {
                    self.roles.remove(&id);
                } else {
                    self.roles.insert(id, rules_of(object));
                }
            }
            ROLE_BINDINGS | CLUSTER_ROLE_BINDINGS => {
                self.remove_binding(&id);
                if !deleted {
                    if let Some(binding) = binding_of(object) {
                        for subject in &binding.subjects {
                            if let Some(subject_key) = subject.key() {
                                self.by_subject
                                    .entry(subject_key)
                                    .or_default()
                                    .insert(id.clone());
                            }
                        }
                        self.bindings.insert(id, Arc::new(binding));
                    }
                }
            }
            _ => {}
        }
    }

    fn remove_binding(&mut self, id: &(String, String)) {
        let Some(old) = self.bindings.remove(id) else {
            return;
        };
        for subject in &old.subjects {
            if let Some(subject_key) = subject.key() {
                if let Some(set) = self.by_subject.get_mut(&subject_key) {
                    set.remove(id);
                    if set.is_empty() {
                        self.by_subject.remove(&subject_key);
                    }
                }
            }
        }
    }
}

/// A role's rules; an object that does not read as a role grants nothing.
fn rules_of(object: &StoredObject) -> Rules {
    #[derive(Deserialize)]
    struct Role {
        #[serde(default)]
        rules: Option<Vec<PolicyRule>>,
    }
    serde_json::from_slice::<Role>(&object.json)
        .ok()
        .and_then(|role| role.rules)
        .unwrap_or_default()
        .into()
}

fn binding_of(object: &StoredObject) -> Option<Binding> {
    #[derive(Deserialize)]
    struct RoleRef {
        #[serde(default)]
        kind: String,
        #[serde(default)]
        name: String,
    }
    #[derive(Deserialize)]
    struct RawSubject {
        #[serde(default)]
        kind: String,
        #[serde(default)]
        name: String,
        #[serde(default)]
        namespace: String,
    }
    #[derive(Deserialize)]
    struct RawBinding {
        #[serde(rename = "roleRef")]
        role_ref: RoleRef,
        #[serde(default)]
        subjects: Option<Vec<RawSubject>>,
    }
    let raw: RawBinding = serde_json::from_slice(&object.json).ok()?;
    let namespace = object.key.namespace.clone();
    let subjects = raw
        .subjects
        .unwrap_or_default()
        .into_iter()
        .map(|s| Subject {
            namespace: if s.kind == "ServiceAccount" && s.namespace.is_empty() {
                namespace.clone()
            } else {
                s.namespace
            },
            kind: s.kind,
            name: s.name,
        })
        .collect();
    Some(Binding {
        namespace,
        name: object.key.name.clone(),
        role_kind: raw.role_ref.kind,
        role_name: raw.role_ref.name,
        subjects,
    })
}

/// The index, kept up to date from the store.
pub type RbacCache = Derived<Index>;

impl FromStore for Index {
    const RESOURCES: &'static [&'static str] =
        &[CLUSTER_ROLES, ROLES, CLUSTER_ROLE_BINDINGS, ROLE_BINDINGS];

    fn apply(&mut self, kind: EventKind, object: &StoredObject) {
        Index::apply(self, kind, object);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kube::mutation::Mutation;
    use crate::kube::object::ObjectKey;
    use crate::kube::store::{Store, StoreConfig};
    use serde_json::json;

    fn create(store: &Store, resource: &str, ns: &str, name: &str, body: serde_json::Value) {
        let mut object = body;
        object["metadata"] = json!({"name": name, "namespace": ns, "uid": format!("{ns}-{name}")});
        store
            .apply(Mutation::Create {
                key: ObjectKey::new(resource, ns, name),
                object,
                requires_open_namespace: false,
            })
            .unwrap();
    }

    #[test]
    fn follows_the_store_and_finds_bindings_by_subject() {
        let store = Arc::new(Store::new(StoreConfig::default()));
        let cache = RbacCache::new(store.clone());
        assert!(cache
            .fresh()
            .bindings_for(&[SubjectKey::User("alice".into())], "a")
            .is_empty());

        create(
            &store,
            ROLES,
            "a",
            "reader",
            json!({"rules": [{"verbs": ["get"], "apiGroups": [""], "resources": ["pods"]}]}),
        );
        create(
            &store,
            ROLE_BINDINGS,
            "a",
            "alice-reads",
            json!({
            "roleRef": {"kind": "Role", "name": "reader", "apiGroup": "rbac.authorization.k8s.io"},
            "subjects": [{"kind": "User", "name": "alice"}, {"kind": "ServiceAccount", "name": "bot"}]}),
        );
        create(
            &store,
            CLUSTER_ROLE_BINDINGS,
            "",
            "devs",
            json!({
            "roleRef": {"kind": "ClusterRole", "name": "missing"},
            "subjects": [{"kind": "Group", "name": "devs"}]}),
        );

        let index = cache.fresh();
        let alice = index.bindings_for(&[SubjectKey::User("alice".into())], "a");
        assert_eq!(alice.len(), 1);
        assert_eq!(index.role_rules(&alice[0]).unwrap().len(), 1);
        assert!(index
            .bindings_for(&[SubjectKey::User("alice".into())], "b")
            .is_empty());
        let bot = index.bindings_for(
            &[SubjectKey::User("system:serviceaccount:a:bot".into())],
            "a",
        );
        assert_eq!(bot.len(), 1);
        assert_eq!(
            alice[0].describe(&alice[0].subjects[1]),
            r#"RoleBinding "alice-reads/a" of Role "reader" to ServiceAccount "bot/a""#
        );
        let devs = index.bindings_for(&[SubjectKey::Group("devs".into())], "anywhere");
        assert_eq!(
            index.role_rules(&devs[0]).unwrap_err(),
            r#"clusterrole.rbac.authorization.k8s.io "missing" not found"#
        );
        drop(index);

        store
            .apply(Mutation::Delete {
                key: ObjectKey::new(ROLE_BINDINGS, "a", "alice-reads"),
                precondition: Default::default(),
            })
            .unwrap();
        assert!(cache
            .fresh()
            .bindings_for(&[SubjectKey::User("alice".into())], "a")
            .is_empty());

        // A restored store (a Raft snapshot) closes the watch: the index is built again.
        let objects: Vec<StoredObject> = store.snapshot().iter().map(|o| (**o).clone()).collect();
        store.restore(store.resource_version() + 5, objects);
        assert_eq!(
            cache
                .fresh()
                .bindings_for(&[SubjectKey::Group("devs".into())], "")
                .len(),
            1
        );
    }
}
