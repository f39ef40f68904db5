//! The deterministic in-memory object store.
//!
//! `Store::apply` is a pure function of (state, Mutation): it checks the precondition, assigns
//! the next resourceVersion (the counter of applied mutations; failed ones do not count),
//! stores the object with `metadata.resourceVersion` filled in, updates the indexes and records
//! the watch event. No clock, randomness or allocation of names/IPs happens here, so the same
//! Mutations give the same state on every server and on every replay.
//!
//! Objects live in persistent maps (`imbl`), so `snapshot()` is O(1): lists, snapshot builders
//! and checkpoints read a frozen view without holding the lock while new Mutations apply.

use std::collections::HashSet;
use std::ops::Bound;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use imbl::{OrdMap, OrdSet};
use parking_lot::RwLock;
use serde_json::Value;
use tokio::sync::{broadcast, watch};

use super::drop_later::drop_later;
use super::mutation::{ApplyError, Mutation, Precondition};
use super::object::{ObjectFacts, ObjectKey, ObjectRef, StoredObject};
use super::prepared_object::{PreparedCache, PreparedObject};
use super::watch::{EventKind, History, TooOld, WatchEvent};

/// Sizes that bound the store's memory.
#[derive(Debug, Clone)]
pub struct StoreConfig {
    /// Events kept for watches that resume from an older resourceVersion.
    pub history_window: usize,
    /// Events a live watcher may fall behind before it is dropped.
    pub live_buffer: usize,
}

impl Default for StoreConfig {
    fn default() -> Self {
        StoreConfig {
            history_window: 10_000,
            live_buffer: 8_192,
        }
    }
}

/// One label of one object in the label index. Ordered by label, value, then object key, so
/// the objects of one resource (and one namespace in it) carrying `label=value` are one range.
///
/// Why one flat set rather than a set of keys per label value: a persistent set allocates a
/// whole node (room for 64 keys) for its first key, and label values that only one object
/// carries are common (`statefulset.kubernetes.io/pod-name`, `controller-uid`). Per label
/// value, that cost about 6.6 KB per object (docs/performance-notes.md, "Labels as a sorted
/// slice; one label index set").
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
struct LabelEntry {
    label: Box<str>,
    value: Box<str>,
    key: ObjectKey,
}

type LabelIndex = OrdSet<LabelEntry>;

/// A frozen, consistent view of every object at one resourceVersion.
#[derive(Clone, Debug)]
pub struct StoreSnapshot {
    pub resource_version: u64,
    objects: OrdMap<ObjectKey, ObjectRef>,
    labels: LabelIndex,
}

impl StoreSnapshot {
    pub fn get(&self, key: &ObjectKey) -> Option<&ObjectRef> {
        self.objects.get(key)
    }

    /// Objects of `resource`, in `namespace` when given, ordered by (namespace, name), starting
    /// after `after` when given (for paginated lists).
    pub fn range<'a>(
        &'a self,
        resource: &str,
        namespace: Option<&str>,
        after: Option<&ObjectKey>,
    ) -> impl Iterator<Item = &'a ObjectRef> + 'a {
        let (lower, upper) = resource_bounds(resource, namespace);
        let lower = match (after, &lower) {
            (Some(key), Bound::Included(start)) if key >= start => Bound::Excluded(key.clone()),
            _ => lower,
        };
        self.objects.range((lower, upper)).map(|(_, v)| v)
    }

    /// Objects of `resource` (in `namespace` when given) carrying label `key=value`, from the
    /// label index.
    pub fn with_label<'a>(
        &'a self,
        resource: &str,
        namespace: Option<&'a str>,
        key: &str,
        value: &str,
    ) -> Vec<&'a ObjectRef> {
        // The smallest entry of the range: the empty name sorts first.
        let first = LabelEntry {
            label: key.into(),
            value: value.into(),
            key: ObjectKey::new(resource, namespace.unwrap_or_default(), ""),
        };
        self.labels
            .range(first..)
            .take_while(|entry| {
                &*entry.label == key
                    && &*entry.value == value
                    && entry.key.resource == resource
                    && namespace.is_none_or(|ns| entry.key.namespace == ns)
            })
            .filter_map(|entry| self.objects.get(&entry.key))
            .collect()
    }

    /// Every object, in key order (for checkpoints and Raft snapshots).
    pub fn iter(&self) -> impl Iterator<Item = &ObjectRef> {
        self.objects.values()
    }

    pub fn len(&self) -> usize {
        self.objects.len()
    }

    pub fn is_empty(&self) -> bool {
        self.objects.is_empty()
    }
}

/// The store resource of namespaces.
const NAMESPACES: &str = "namespaces";

fn resource_bounds(
    resource: &str,
    namespace: Option<&str>,
) -> (Bound<ObjectKey>, Bound<ObjectKey>) {
    match namespace {
        Some(ns) => (
            Bound::Included(ObjectKey::new(resource, ns, "")),
            // Names are at most 253 ASCII characters, so this sorts after every real name.
            Bound::Included(ObjectKey::new(resource, ns, "\u{10FFFF}")),
        ),
        None => (
            Bound::Included(ObjectKey::new(resource, "", "")),
            Bound::Excluded(ObjectKey::new(format!("{resource}\0"), "", "")),
        ),
    }
}

struct State {
    resource_version: u64,
    objects: OrdMap<ObjectKey, ObjectRef>,
    /// The names of the stored namespaces that are not being deleted: every create in a
    /// namespace checks it, and a hash lookup is much cheaper than a search of `objects`.
    open_namespaces: HashSet<String>,
    labels: LabelIndex,
    history: History,
    live: broadcast::Sender<Arc<WatchEvent>>,
}

/// The store. Cheap to share behind an `Arc`; all methods take `&self`.
pub struct Store {
    state: RwLock<State>,
    applied: watch::Sender<u64>,
    config: StoreConfig,
}

/// A watch's starting point: the events after its resourceVersion, then the live channel.
pub struct Subscription {
    pub backlog: Vec<Arc<WatchEvent>>,
    pub live: broadcast::Receiver<Arc<WatchEvent>>,
    /// The store's resourceVersion when the subscription was taken.
    pub resource_version: u64,
}

impl Store {
    pub fn new(config: StoreConfig) -> Self {
        let (live, _) = broadcast::channel(config.live_buffer.max(16));
        let (applied, _) = watch::channel(0);
        Store {
            state: RwLock::new(State {
                resource_version: 0,
                objects: OrdMap::new(),
                open_namespaces: HashSet::new(),
                labels: LabelIndex::new(),
                history: History::new(config.history_window, 0),
                live,
            }),
            applied,
            config,
        }
    }

    pub fn config(&self) -> &StoreConfig {
        &self.config
    }

    /// The resourceVersion of the last applied Mutation.
    pub fn resource_version(&self) -> u64 {
        self.state.read().resource_version
    }

    /// A frozen view of all objects; O(1).
    pub fn snapshot(&self) -> StoreSnapshot {
        let state = self.state.read();
        StoreSnapshot {
            resource_version: state.resource_version,
            objects: state.objects.clone(),
            labels: state.labels.clone(),
        }
    }

    pub fn get(&self, key: &ObjectKey) -> Option<ObjectRef> {
        self.state.read().objects.get(key).cloned()
    }

    /// Applies one Mutation. See the module documentation for the rules.
    pub fn apply(&self, mutation: Mutation) -> Result<ObjectRef, ApplyError> {
        let mut state = self.state.write();
        let result = apply_locked(&mut state, mutation, None, &mut Vec::new());
        let rv = state.resource_version;
        drop(state);
        self.applied.send_replace(rv);
        result
    }

    /// Applies Mutations in order under one lock acquisition; one result per Mutation.
    pub fn apply_batch(
        &self,
        mutations: impl IntoIterator<Item = Mutation>,
    ) -> Vec<Result<ObjectRef, ApplyError>> {
        self.apply_prepared_batch(mutations.into_iter().map(|m| (m, PreparedCache::default())))
    }

    /// `apply_batch` for Mutations whose objects may come prepared (a Raft leader's own
    /// proposals, see `prepared_object`): their stored form is built from the preparation,
    /// identical to what `apply_batch` builds, and their `Value`s are freed off this thread.
    pub fn apply_prepared_batch(
        &self,
        mutations: impl IntoIterator<Item = (Mutation, PreparedCache)>,
    ) -> Vec<Result<ObjectRef, ApplyError>> {
        let mut garbage = Vec::new();
        let mut state = self.state.write();
        let results: Vec<_> = mutations
            .into_iter()
            .map(|(m, prepared)| apply_locked(&mut state, m, prepared.get(), &mut garbage))
            .collect();
        let rv = state.resource_version;
        drop(state);
        self.applied.send_replace(rv);
        if !garbage.is_empty() {
            drop_later(garbage);
        }
        results
    }

    /// Replaces the whole state with `objects` at `resource_version` (loading a checkpoint or
    /// installing a Raft snapshot). The history restarts empty, and current watchers are cut
    /// off (their channel closes) so that their clients relist.
    pub fn restore(&self, resource_version: u64, objects: impl IntoIterator<Item = StoredObject>) {
        let mut map = OrdMap::new();
        let mut labels = LabelIndex::new();
        for object in objects {
            index_labels(&mut labels, &object, true);
            map.insert(object.key.clone(), Arc::new(object));
        }
        let (live, _) = broadcast::channel(self.config.live_buffer.max(16));
        let mut state = self.state.write();
        *state = State {
            resource_version,
            open_namespaces: open_namespaces(&map),
            objects: map,
            labels,
            history: History::new(self.config.history_window, resource_version),
            live,
        };
        drop(state);
        self.applied.send_replace(resource_version);
    }

    /// Starts a watch after `resource_version` (events with a higher one follow).
    pub fn subscribe(&self, resource_version: u64) -> Result<Subscription, TooOld> {
        let state = self.state.read();
        let backlog = state.history.since(resource_version)?;
        Ok(Subscription {
            backlog,
            live: state.live.subscribe(),
            resource_version: state.resource_version,
        })
    }

    /// A live subscription starting now, with a consistent snapshot of the current state (for
    /// watches that begin with synthetic ADDED events).
    pub fn snapshot_and_subscribe(&self) -> (StoreSnapshot, broadcast::Receiver<Arc<WatchEvent>>) {
        let state = self.state.read();
        let snapshot = StoreSnapshot {
            resource_version: state.resource_version,
            objects: state.objects.clone(),
            labels: state.labels.clone(),
        };
        (snapshot, state.live.subscribe())
    }

    /// The oldest resourceVersion a watch can resume from.
    pub fn oldest_watchable(&self) -> u64 {
        self.state.read().history.oldest_available()
    }

    /// Waits until the store has applied `resource_version`, for at most `timeout`. Returns
    /// the store's version at the end (check it against the one asked for).
    pub async fn wait_for(&self, resource_version: u64, timeout: Duration) -> u64 {
        let mut rx = self.applied.subscribe();
        let reached = tokio::time::timeout(timeout, async {
            rx.wait_for(|rv| *rv >= resource_version).await.is_ok()
        })
        .await;
        match reached {
            Ok(true) => resource_version.max(self.resource_version()),
            _ => self.resource_version(),
        }
    }

    /// A receiver that sees every new resourceVersion (for readiness and benchmarks).
    pub fn applied_versions(&self) -> watch::Receiver<u64> {
        self.applied.subscribe()
    }
}

fn apply_locked(
    state: &mut State,
    mutation: Mutation,
    prepared: Option<&PreparedObject>,
    garbage: &mut Vec<Value>,
) -> Result<ObjectRef, ApplyError> {
    let next_rv = state.resource_version + 1;
    let (kind, stored, prev) = match mutation {
        Mutation::Create {
            key,
            object,
            requires_open_namespace,
        } => {
            // An existing object is found by the insert below (one tree search instead of
            // two): the errors found before it only stand when the key is free.
            if requires_open_namespace && !namespace_open(state, &key.namespace) {
                return Err(already_exists_or(state, key, ApplyError::NamespaceNotOpen));
            }
            let stored = match stored_form(key, object, next_rv, prepared, garbage) {
                Ok(stored) => Arc::new(stored),
                Err(ApplyError::Invalid { key, reason }) => {
                    return Err(already_exists_or(state, key, |key| ApplyError::Invalid {
                        key,
                        reason,
                    }))
                }
                Err(other) => return Err(other),
            };
            if let Some(existing) = state.objects.insert(stored.key.clone(), stored.clone()) {
                let key = existing.key.clone();
                state.objects.insert(key.clone(), existing);
                return Err(ApplyError::AlreadyExists(key));
            }
            (EventKind::Added, stored, None)
        }
        Mutation::Update {
            key,
            object,
            precondition,
        } => {
            let current = existing(state, &key, &precondition)?;
            let stored = Arc::new(stored_form(key, object, next_rv, prepared, garbage)?);
            (EventKind::Modified, stored, Some(current))
        }
        Mutation::Delete { key, precondition } => {
            let current = existing(state, &key, &precondition)?;
            let stored = Arc::new(stamp(key, current.value(), next_rv)?);
            (EventKind::Deleted, stored, Some(current))
        }
    };
    if let Some(prev) = &prev {
        index_labels(&mut state.labels, prev, false);
    }
    match kind {
        EventKind::Deleted => {
            state.objects.remove(&stored.key);
        }
        EventKind::Added => index_labels(&mut state.labels, &stored, true),
        EventKind::Modified => {
            index_labels(&mut state.labels, &stored, true);
            state.objects.insert(stored.key.clone(), stored.clone());
        }
    }
    if stored.key.resource == NAMESPACES {
        track_namespace(&mut state.open_namespaces, &stored, kind);
    }
    state.resource_version = next_rv;
    let event = Arc::new(WatchEvent {
        kind,
        object: stored.clone(),
        prev,
    });
    state.history.push(event.clone());
    // No receivers is fine: nobody is watching.
    let _ = state.live.send(event);
    Ok(stored)
}

/// The error `otherwise` makes of `key`, unless an object already has that key: a create
/// reports that first.
fn already_exists_or(
    state: &State,
    key: ObjectKey,
    otherwise: impl FnOnce(ObjectKey) -> ApplyError,
) -> ApplyError {
    if state.objects.contains_key(&key) {
        ApplyError::AlreadyExists(key)
    } else {
        otherwise(key)
    }
}

/// Whether the namespace `name` is stored and not being deleted (no deletionTimestamp).
fn namespace_open(state: &State, name: &str) -> bool {
    state.open_namespaces.contains(name)
}

/// Keeps `open` (the namespaces stored and not being deleted) up to date with a write of the
/// namespace `stored`.
fn track_namespace(open: &mut HashSet<String>, stored: &StoredObject, kind: EventKind) {
    if kind != EventKind::Deleted && !stored.is_deleting() {
        open.insert(stored.key.name.clone());
    } else {
        open.remove(&stored.key.name);
    }
}

/// The namespaces among `objects` that are not being deleted.
fn open_namespaces(objects: &OrdMap<ObjectKey, ObjectRef>) -> HashSet<String> {
    objects
        .range(resource_bounds(NAMESPACES, None))
        .filter(|(_, ns)| !ns.is_deleting())
        .map(|(key, _)| key.name.clone())
        .collect()
}

fn existing(
    state: &State,
    key: &ObjectKey,
    precondition: &Precondition,
) -> Result<ObjectRef, ApplyError> {
    let current = state
        .objects
        .get(key)
        .cloned()
        .ok_or_else(|| ApplyError::NotFound(key.clone()))?;
    let rv_ok = precondition
        .resource_version
        .is_none_or(|rv| rv == current.resource_version);
    let uid_ok = precondition
        .uid
        .as_ref()
        .is_none_or(|uid| *uid == current.uid);
    if rv_ok && uid_ok {
        Ok(current)
    } else {
        Err(ApplyError::Conflict {
            key: key.clone(),
            current: current.resource_version,
        })
    }
}

/// The stored form of a created or updated `object`: built from its preparation when there
/// is one (the `Value` is then only freed, off this thread), else by `stamp`.
fn stored_form(
    key: ObjectKey,
    object: Value,
    resource_version: u64,
    prepared: Option<&PreparedObject>,
    garbage: &mut Vec<Value>,
) -> Result<StoredObject, ApplyError> {
    match prepared {
        Some(prepared) => {
            garbage.push(object);
            Ok(prepared.stored(key, resource_version))
        }
        None => stamp(key, object, resource_version),
    }
}

/// Builds the stored form of `object` at `resource_version`.
fn stamp(
    key: ObjectKey,
    mut object: Value,
    resource_version: u64,
) -> Result<StoredObject, ApplyError> {
    let metadata = object
        .get_mut("metadata")
        .and_then(Value::as_object_mut)
        .ok_or_else(|| ApplyError::Invalid {
            key: key.clone(),
            reason: "object has no metadata".to_string(),
        })?;
    metadata.insert(
        "resourceVersion".to_string(),
        Value::String(resource_version.to_string()),
    );
    let ObjectFacts {
        uid,
        labels,
        fields,
    } = ObjectFacts::of(&key.resource, &object);
    // The encoder's buffer grows by doubling, so a 1.1 KiB object leaves it with 2 KiB of
    // capacity, which `Bytes` would keep for as long as the object is stored.
    let mut json = super::json_writer::to_vec(&object);
    json.shrink_to_fit();
    Ok(StoredObject {
        key,
        resource_version,
        uid,
        labels,
        fields,
        json: Bytes::from(json),
    })
}

fn index_labels(index: &mut LabelIndex, object: &StoredObject, insert: bool) {
    for (label, value) in object.labels.iter() {
        let entry = LabelEntry {
            label: label.into(),
            value: value.into(),
            key: object.key.clone(),
        };
        if insert {
            index.insert(entry);
        } else {
            index.remove(&entry);
        }
    }
}

/// Rebuilds a `StoredObject` from its JSON (objects read back from a checkpoint or snapshot).
pub fn stored_from_json(key: ObjectKey, json: &[u8]) -> Result<StoredObject, ApplyError> {
    let value: Value = serde_json::from_slice(json).map_err(|e| ApplyError::Invalid {
        key: key.clone(),
        reason: e.to_string(),
    })?;
    let rv = value
        .pointer("/metadata/resourceVersion")
        .and_then(Value::as_str)
        .and_then(|s| s.parse::<u64>().ok())
        .ok_or_else(|| ApplyError::Invalid {
            key: key.clone(),
            reason: "stored object has no numeric metadata.resourceVersion".into(),
        })?;
    stamp(key, value, rv)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn cm(name: &str, labels: Value) -> Value {
        json!({"apiVersion":"v1","kind":"ConfigMap",
               "metadata":{"name":name,"namespace":"default","uid":format!("uid-{name}"),"labels":labels},
               "data":{"k":"v"}})
    }

    fn key(name: &str) -> ObjectKey {
        ObjectKey::new("configmaps", "default", name)
    }

    #[test]
    fn a_create_that_requires_an_open_namespace_checks_it_when_it_applies() {
        let store = Store::new(StoreConfig::default());
        let create = |requires_open_namespace| Mutation::Create {
            key: key("a"),
            object: cm("a", json!({})),
            requires_open_namespace,
        };
        let namespace = |deletion: serde_json::Value| json!({"metadata": {"name": "default", "uid": "ns-uid", "deletionTimestamp": deletion}});
        let ns_key = ObjectKey::new("namespaces", "", "default");
        assert_eq!(
            store.apply(create(true)),
            Err(ApplyError::NamespaceNotOpen(key("a")))
        );
        store
            .apply(Mutation::Create {
                key: ns_key.clone(),
                object: namespace(serde_json::Value::Null),
                requires_open_namespace: false,
            })
            .unwrap();
        let created = store.apply(create(true)).unwrap();
        assert_eq!(
            created.resource_version, 2,
            "a refused create takes no version"
        );
        store
            .apply(Mutation::Delete {
                key: key("a"),
                precondition: Precondition::none(),
            })
            .unwrap();
        store
            .apply(Mutation::Update {
                key: ns_key,
                object: namespace(json!("2026-01-01T00:00:00Z")),
                precondition: Precondition::none(),
            })
            .unwrap();
        assert_eq!(
            store.apply(create(true)),
            Err(ApplyError::NamespaceNotOpen(key("a")))
        );
        // Entries written before the requirement existed apply as they did then.
        assert!(store.apply(create(false)).is_ok());
    }

    /// The open-namespace set the creates consult follows deletes and restores, and a create
    /// of an existing key leaves the stored object as it was, whatever else is wrong with it.
    #[test]
    fn open_namespaces_follow_deletes_and_restores_and_a_duplicate_create_changes_nothing() {
        let store = Store::new(StoreConfig::default());
        let namespace = |name: &str, deletion: Value| json!({"metadata": {"name": name, "uid": format!("ns-{name}"), "deletionTimestamp": deletion}});
        let create_ns = |name: &str, deletion: Value| Mutation::Create {
            key: ObjectKey::new("namespaces", "", name),
            object: namespace(name, deletion),
            requires_open_namespace: false,
        };
        let create = |name: &str| Mutation::Create {
            key: key(name),
            object: cm(name, json!({})),
            requires_open_namespace: true,
        };
        store.apply(create_ns("default", Value::Null)).unwrap();
        let original = store.apply(create("a")).unwrap();
        let duplicate = Mutation::Create {
            key: key("a"),
            object: cm("a", json!({"changed": "yes"})),
            requires_open_namespace: true,
        };
        assert_eq!(
            store.apply(duplicate),
            Err(ApplyError::AlreadyExists(key("a")))
        );
        assert_eq!(store.get(&key("a")), Some(original.clone()));
        let invalid_duplicate = Mutation::Create {
            key: key("a"),
            object: json!({"kind": "ConfigMap"}),
            requires_open_namespace: true,
        };
        assert_eq!(
            store.apply(invalid_duplicate),
            Err(ApplyError::AlreadyExists(key("a"))),
            "an existing key is reported before an invalid object"
        );
        assert!(matches!(
            store.apply(Mutation::Create {
                key: key("fresh"),
                object: json!({"kind": "ConfigMap"}),
                requires_open_namespace: true,
            }),
            Err(ApplyError::Invalid { .. })
        ));
        assert_eq!(store.get(&key("a")), Some(original.clone()));
        assert_eq!(
            store.resource_version(),
            2,
            "a refused create takes no version"
        );

        store
            .apply(Mutation::Delete {
                key: ObjectKey::new("namespaces", "", "default"),
                precondition: Precondition::none(),
            })
            .unwrap();
        assert_eq!(
            store.apply(create("a")),
            Err(ApplyError::AlreadyExists(key("a"))),
            "an existing key is reported before a closed namespace"
        );
        assert_eq!(
            store.apply(create("b")),
            Err(ApplyError::NamespaceNotOpen(key("b")))
        );

        let restored = Store::new(StoreConfig::default());
        let mut objects: Vec<StoredObject> =
            store.snapshot().iter().map(|o| (**o).clone()).collect();
        for (name, deletion) in [
            ("open", Value::Null),
            ("closing", json!("2026-01-01T00:00:00Z")),
        ] {
            let scratch = Store::new(StoreConfig::default());
            objects.push((*scratch.apply(create_ns(name, deletion)).unwrap()).clone());
        }
        restored.restore(10, objects);
        let create_in = |ns: &str| Mutation::Create {
            key: ObjectKey::new("configmaps", ns, "c"),
            object: json!({"metadata": {"name": "c", "namespace": ns, "uid": "c"}}),
            requires_open_namespace: true,
        };
        assert!(restored.apply(create_in("open")).is_ok());
        assert!(matches!(
            restored.apply(create_in("closing")),
            Err(ApplyError::NamespaceNotOpen(_))
        ));
        assert!(matches!(
            restored.apply(create_in("default")),
            Err(ApplyError::NamespaceNotOpen(_))
        ));
    }

    #[test]
    fn versions_count_only_applied_mutations() {
        let store = Store::new(StoreConfig::default());
        let a = store
            .apply(Mutation::Create {
                key: key("a"),
                object: cm("a", json!({})),
                requires_open_namespace: false,
            })
            .unwrap();
        assert_eq!(a.resource_version, 1);
        let dup = store.apply(Mutation::Create {
            key: key("a"),
            object: cm("a", json!({})),
            requires_open_namespace: false,
        });
        assert!(matches!(dup, Err(ApplyError::AlreadyExists(_))));
        let stale = store.apply(Mutation::Update {
            key: key("a"),
            object: cm("a", json!({})),
            precondition: Precondition::at(7),
        });
        assert_eq!(
            stale,
            Err(ApplyError::Conflict {
                key: key("a"),
                current: 1
            })
        );
        let b = store
            .apply(Mutation::Update {
                key: key("a"),
                object: cm("a", json!({"x":"y"})),
                precondition: Precondition::at(1),
            })
            .unwrap();
        assert_eq!(b.resource_version, 2);
        assert_eq!(store.resource_version(), 2);
        assert_eq!(b.value()["metadata"]["resourceVersion"], "2");
    }

    #[test]
    fn same_mutations_give_identical_state() {
        let run = || {
            let store = Store::new(StoreConfig::default());
            for i in 0..50 {
                let name = format!("o{}", i % 7);
                let _ = store.apply(Mutation::Create {
                    key: key(&name),
                    object: cm(&name, json!({"i": i.to_string()})),
                    requires_open_namespace: false,
                });
                if i % 3 == 0 {
                    let _ = store.apply(Mutation::Delete {
                        key: key(&name),
                        precondition: Precondition::none(),
                    });
                }
            }
            store
                .snapshot()
                .iter()
                .map(|o| (o.key.clone(), o.json.clone()))
                .collect::<Vec<_>>()
        };
        assert_eq!(run(), run());
    }

    #[test]
    fn objects_encoded_ahead_are_stored_with_the_same_bytes_and_events() {
        let mutations: Vec<Mutation> = (0..40)
            .map(|i| {
                let name = format!("o{}", i % 6);
                let mut object = cm(&name, json!({"i": i.to_string(), "esc": "q\"\n"}));
                if i % 4 == 1 {
                    object["metadata"]["resourceVersion"] = json!("999");
                }
                if i % 5 == 2 {
                    object["metadata"]["resourceVersion"] = json!(7);
                }
                match i % 3 {
                    0 => Mutation::Create {
                        key: key(&name),
                        object,
                        requires_open_namespace: false,
                    },
                    1 => Mutation::Update {
                        key: key(&name),
                        object,
                        precondition: Precondition::none(),
                    },
                    _ => Mutation::Delete {
                        key: key(&name),
                        precondition: Precondition::none(),
                    },
                }
            })
            .collect();
        let encoded = |m: &Mutation| match m {
            Mutation::Create { object, .. } | Mutation::Update { object, .. } => {
                PreparedCache::new(PreparedObject::prepare(&m.key().resource, object))
            }
            Mutation::Delete { .. } => PreparedCache::default(),
        };
        let plain = Store::new(StoreConfig::default());
        let ahead = Store::new(StoreConfig::default());
        let plain_results = plain.apply_batch(mutations.clone());
        let ahead_results =
            ahead.apply_prepared_batch(mutations.iter().map(|m| (m.clone(), encoded(m))));
        let bytes = |results: Vec<Result<ObjectRef, ApplyError>>| {
            results
                .into_iter()
                .map(|r| r.map(|o| (o.resource_version, o.json.clone(), o.fields.clone())))
                .collect::<Vec<_>>()
        };
        assert_eq!(bytes(plain_results), bytes(ahead_results));
        let contents = |store: &Store| {
            store
                .snapshot()
                .iter()
                .map(|o| {
                    (
                        o.key.clone(),
                        o.json.clone(),
                        o.uid.clone(),
                        o.labels.clone(),
                    )
                })
                .collect::<Vec<_>>()
        };
        assert_eq!(contents(&plain), contents(&ahead));
        assert!(!contents(&plain).is_empty());
    }

    #[test]
    fn label_index_and_ranges() {
        let store = Store::new(StoreConfig::default());
        for (name, app) in [("a", "x"), ("b", "y"), ("c", "x")] {
            store
                .apply(Mutation::Create {
                    key: key(name),
                    object: cm(name, json!({"app": app})),
                    requires_open_namespace: false,
                })
                .unwrap();
        }
        store
            .apply(Mutation::Create {
                key: ObjectKey::new("configmaps", "other", "d"),
                object: json!({"metadata":{"name":"d","namespace":"other","labels":{"app":"x"}}}),
                requires_open_namespace: false,
            })
            .unwrap();
        let snap = store.snapshot();
        assert_eq!(snap.with_label("configmaps", None, "app", "x").len(), 3);
        assert_eq!(
            snap.with_label("configmaps", Some("default"), "app", "x")
                .len(),
            2
        );
        assert_eq!(snap.range("configmaps", Some("default"), None).count(), 3);
        assert_eq!(snap.range("configmaps", None, None).count(), 4);
        assert_eq!(
            snap.range("configmaps", Some("default"), Some(&key("a")))
                .count(),
            2
        );
        store
            .apply(Mutation::Update {
                key: key("a"),
                object: cm("a", json!({"app": "z"})),
                precondition: Precondition::none(),
            })
            .unwrap();
        assert_eq!(
            store
                .snapshot()
                .with_label("configmaps", None, "app", "x")
                .len(),
            2
        );
    }

    #[test]
    fn the_label_index_answers_per_resource_namespace_and_value() {
        let store = Store::new(StoreConfig::default());
        let create = |resource: &str, namespace: &str, name: &str, labels: Value| {
            let object = json!({"metadata":{"name":name,"namespace":namespace,"labels":labels}});
            store
                .apply(Mutation::Create {
                    key: ObjectKey::new(resource, namespace, name),
                    object,
                    requires_open_namespace: false,
                })
                .unwrap();
        };
        create("configmaps", "b", "one", json!({"app": "x", "tier": "web"}));
        create("configmaps", "a", "two", json!({"app": "x"}));
        create(
            "configmaps",
            "c",
            "three",
            json!({"app": "x", "tier": "db"}),
        );
        create("secrets", "a", "four", json!({"app": "x"}));
        create("apps/deployments", "a", "five", json!({"app": "x"}));
        create("configmaps", "a", "six", json!({"app": "xy", "apps": "x"}));
        let names = |resource: &str, namespace: Option<&str>, label: &str, value: &str| {
            store
                .snapshot()
                .with_label(resource, namespace, label, value)
                .iter()
                .map(|o| format!("{}/{}", o.key.namespace, o.key.name))
                .collect::<Vec<_>>()
        };
        assert_eq!(
            names("configmaps", None, "app", "x"),
            ["a/two", "b/one", "c/three"]
        );
        assert_eq!(names("configmaps", Some("b"), "app", "x"), ["b/one"]);
        assert_eq!(
            names("configmaps", Some("d"), "app", "x"),
            Vec::<String>::new()
        );
        assert_eq!(names("secrets", None, "app", "x"), ["a/four"]);
        assert_eq!(names("apps/deployments", Some("a"), "app", "x"), ["a/five"]);
        assert_eq!(names("configmaps", None, "app", "xy"), ["a/six"]);
        assert_eq!(names("configmaps", None, "apps", "x"), ["a/six"]);
        assert_eq!(names("configmaps", None, "tier", "db"), ["c/three"]);
        assert_eq!(names("configmaps", None, "app", ""), Vec::<String>::new());
        store
            .apply(Mutation::Delete {
                key: ObjectKey::new("configmaps", "b", "one"),
                precondition: Precondition::none(),
            })
            .unwrap();
        assert_eq!(names("configmaps", None, "app", "x"), ["a/two", "c/three"]);
        assert_eq!(
            names("configmaps", None, "tier", "web"),
            Vec::<String>::new()
        );
        // A restored store indexes what it restores.
        let objects: Vec<StoredObject> = store.snapshot().iter().map(|o| (**o).clone()).collect();
        store.restore(store.resource_version(), objects);
        assert_eq!(names("configmaps", None, "app", "x"), ["a/two", "c/three"]);
        assert_eq!(names("secrets", Some("a"), "app", "x"), ["a/four"]);
    }

    #[test]
    fn history_window_expires_old_versions() {
        let store = Store::new(StoreConfig {
            history_window: 5,
            live_buffer: 16,
        });
        for i in 0..10 {
            let name = format!("o{i}");
            store
                .apply(Mutation::Create {
                    key: key(&name),
                    object: cm(&name, json!({})),
                    requires_open_namespace: false,
                })
                .unwrap();
        }
        assert!(store.subscribe(4).is_err());
        let sub = store.subscribe(5).unwrap();
        let versions: Vec<u64> = sub.backlog.iter().map(|e| e.resource_version()).collect();
        assert_eq!(versions, vec![6, 7, 8, 9, 10]);
    }
}
