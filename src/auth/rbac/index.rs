//! The RBAC objects of the store, indexed for authorization: Roles and ClusterRoles by name,
//! and every RoleBinding and ClusterRoleBinding under each subject it names, so a decision
//! reads the bindings of the caller's name and groups (by namespace, so only the cluster's and
//! the request namespace's) instead of scanning them all, looking them up by the caller's own
//! strings: a decision allocates only the list of its bindings.
//!
//! The index follows the store's watch: [`RbacCache::fresh`] first takes every event the store
//! has sent since the last call (all of them were sent before the store's resourceVersion
//! moved, so an index that has seen up to that version holds every applied RBAC write: a
//! RoleBinding answered 201 authorizes the very next request). A subscription that fell
//! behind, or a store restored from a snapshot, rebuilds the index from a snapshot.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use serde::Deserialize;

use super::memo::DecisionMemo;
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

impl SubjectKey {
    fn name(&self) -> &str {
        match self {
            SubjectKey::User(name) | SubjectKey::Group(name) => name,
        }
    }
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
    /// `RBAC: allowed by <binding> to <subject>` for each subject, in order: the reason of a
    /// decision, written once here rather than on every request it allows.
    pub allowed_by: Vec<String>,
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

/// (namespace, name) of a binding; the namespace of a ClusterRoleBinding is empty.
type BindingId = (String, String);

/// The indexed RBAC objects at one point of the store's history. Every lookup a decision makes
/// borrows the caller's strings: authorizing a request allocates nothing but the list of its
/// bindings.
#[derive(Default)]
pub struct Index {
    cluster_roles: HashMap<String, Rules>,
    /// namespace → name → rules
    roles: HashMap<String, HashMap<String, Rules>>,
    bindings: HashMap<BindingId, Arc<Binding>>,
    /// The bindings naming each user (a service account by its user name), and each group.
    by_user: HashMap<String, ByNamespace>,
    by_group: HashMap<String, ByNamespace>,
    /// The requests these objects allowed, with their reasons.
    pub memo: DecisionMemo,
}

/// Bindings by namespace (empty for ClusterRoleBindings), then by name.
type ByNamespace = HashMap<String, BTreeMap<String, Arc<Binding>>>;

impl Index {
    /// The bindings that apply to the user `name` in `groups` in `namespace`
    /// (ClusterRoleBindings first, then the RoleBindings of `namespace` when it is not empty,
    /// each in name order), each once.
    pub fn bindings_for(&self, name: &str, groups: &[String], namespace: &str) -> Vec<&Binding> {
        let mut found: Vec<&Binding> = self.bindings_in(name, groups, "").collect();
        if !namespace.is_empty() {
            found.extend(self.bindings_in(name, groups, namespace));
        }
        // A binding naming several of the keys once.
        found.sort_unstable_by(|a, b| (&a.namespace, &a.name).cmp(&(&b.namespace, &b.name)));
        found.dedup_by(|a, b| std::ptr::eq(*a, *b));
        found
    }

    /// The bindings of exactly `namespace` (empty: the ClusterRoleBindings) that name the user
    /// `name` or one of `groups`: the user's in name order, then each group's. A binding that
    /// names several of them comes once for each; nothing is allocated.
    pub fn bindings_in<'a, 'q>(
        &'a self,
        name: &'q str,
        groups: &'q [String],
        namespace: &'q str,
    ) -> impl Iterator<Item = &'a Binding> + 'q
    where
        'a: 'q,
    {
        std::iter::once(self.by_user.get(name))
            .chain(groups.iter().map(|g| self.by_group.get(g.as_str())))
            .flatten()
            .filter_map(move |by_namespace| by_namespace.get(namespace))
            .flat_map(|named| named.values())
            .map(|binding| &**binding)
    }

    /// The rules a binding's role grants, or the error kube-apiserver reports when the role
    /// does not exist.
    pub fn role_rules(&self, binding: &Binding) -> Result<&Rules, String> {
        let found = if binding.role_kind == "ClusterRole" {
            self.cluster_roles.get(&binding.role_name)
        } else if binding.role_kind == "Role" {
            self.roles
                .get(&binding.namespace)
                .and_then(|roles| roles.get(&binding.role_name))
        } else {
            None
        };
        found.ok_or_else(|| {
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
        self.memo.clear();
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
                    if let Some(roles) = self.roles.get_mut(&key.namespace) {
                        roles.remove(&key.name);
                        if roles.is_empty() {
                            self.roles.remove(&key.namespace);
                        }
                    }
                } else {
                    self.roles
                        .entry(key.namespace.clone())
                        .or_default()
                        .insert(key.name.clone(), rules_of(object));
                }
            }
            ROLE_BINDINGS | CLUSTER_ROLE_BINDINGS => {
                self.remove_binding(&id);
                if !deleted {
                    if let Some(binding) = binding_of(object) {
                        let binding = Arc::new(binding);
                        for subject in &binding.subjects {
                            if let Some(subject_key) = subject.key() {
                                self.subject_map(&subject_key)
                                    .entry(subject_key.name().to_string())
                                    .or_default()
                                    .entry(id.0.clone())
                                    .or_default()
                                    .insert(id.1.clone(), binding.clone());
                            }
                        }
                        self.bindings.insert(id, binding);
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
                let map = self.subject_map(&subject_key);
                let Some(by_namespace) = map.get_mut(subject_key.name()) else {
                    continue;
                };
                if let Some(named) = by_namespace.get_mut(&id.0) {
                    named.remove(&id.1);
                    if named.is_empty() {
                        by_namespace.remove(&id.0);
                    }
                }
                if by_namespace.is_empty() {
                    map.remove(subject_key.name());
                }
            }
        }
    }

    fn subject_map(&mut self, key: &SubjectKey) -> &mut HashMap<String, ByNamespace> {
        match key {
            SubjectKey::User(_) => &mut self.by_user,
            SubjectKey::Group(_) => &mut self.by_group,
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
    let mut binding = Binding {
        namespace,
        name: object.key.name.clone(),
        role_kind: raw.role_ref.kind,
        role_name: raw.role_ref.name,
        subjects,
        allowed_by: Vec::new(),
    };
    binding.allowed_by = binding
        .subjects
        .iter()
        .map(|s| format!("RBAC: allowed by {}", binding.describe(s)))
        .collect();
    Some(binding)
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
        assert!(cache.fresh().bindings_for("alice", &[], "a").is_empty());

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
        let alice = index.bindings_for("alice", &[], "a");
        assert_eq!(alice.len(), 1);
        assert_eq!(index.role_rules(alice[0]).unwrap().len(), 1);
        assert!(index.bindings_for("alice", &[], "b").is_empty());
        let bot = index.bindings_for("system:serviceaccount:a:bot", &[], "a");
        assert_eq!(bot.len(), 1);
        assert_eq!(
            alice[0].describe(&alice[0].subjects[1]),
            r#"RoleBinding "alice-reads/a" of Role "reader" to ServiceAccount "bot/a""#
        );
        let devs = index.bindings_for("", &["devs".to_string()], "anywhere");
        assert_eq!(
            index.role_rules(devs[0]).unwrap_err(),
            r#"clusterrole.rbac.authorization.k8s.io "missing" not found"#
        );
        drop(index);

        store
            .apply(Mutation::Delete {
                key: ObjectKey::new(ROLE_BINDINGS, "a", "alice-reads"),
                precondition: Default::default(),
            })
            .unwrap();
        assert!(cache.fresh().bindings_for("alice", &[], "a").is_empty());

        // A restored store (a Raft snapshot) closes the watch: the index is built again.
        let objects: Vec<StoredObject> = store.snapshot().iter().map(|o| (**o).clone()).collect();
        store.restore(store.resource_version() + 5, objects);
        assert_eq!(
            cache
                .fresh()
                .bindings_for("", &["devs".to_string()], "")
                .len(),
            1
        );
    }
}
