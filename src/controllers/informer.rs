//! Shared informers over the local store: one subscription to the store's watch feeds a cache
//! per kind and every handler registered for that kind, as client-go's shared informer
//! factory does with one watch per kind for all controllers of a process.
//!
//! - **Cache**: a kind's cache maps (namespace, name) to the store's own `ObjectRef`s, so an
//!   object is held once, in the store's encoding; a cached object costs a map entry and the
//!   index entries, not a decoded copy. Controllers read it (`KindCache::get`, `list`,
//!   `by_index`) and parse the one object a reconcile needs.
//! - **Handlers** map a change to work-queue keys and must be quick (they run on the
//!   informer's task); heavy work belongs to the controller's workers.
//! - **Start**: `Informers::start` lists every registered kind from one store snapshot, fills
//!   the caches, calls the handlers with `Added` for each object, and only then returns the
//!   task that follows the watch. So when workers start, the caches are synced.
//! - **Falling behind**: a subscriber more than the store's live buffer behind is cut off,
//!   and a store restored from a Raft snapshot closes every subscription. Either way the
//!   informer lists again from a new snapshot and tells handlers the difference against its
//!   cache (`Added`/`Modified`/`Deleted`), so no change is lost and memory stays bounded.
//! - **Resync**: a handler registered with a period is also called with `Resync` for every
//!   cached object once per period (client-go's resync), for controllers that reconcile on
//!   time as well as on change.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use parking_lot::RwLock;
use tokio::sync::broadcast::error::RecvError;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::kube::object::{ObjectRef, StoredObject};
use crate::kube::store::{Store, StoreSnapshot};
use crate::kube::watch::{EventKind, WatchEvent};

/// An object's namespace and name: the key of caches and of most work queues.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ObjectName {
    pub namespace: String,
    pub name: String,
}

impl ObjectName {
    pub fn new(namespace: impl Into<String>, name: impl Into<String>) -> ObjectName {
        ObjectName {
            namespace: namespace.into(),
            name: name.into(),
        }
    }

    pub fn of(object: &StoredObject) -> ObjectName {
        ObjectName::new(object.key.namespace.clone(), object.key.name.clone())
    }
}

impl std::fmt::Display for ObjectName {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.namespace.is_empty() {
            f.write_str(&self.name)
        } else {
            write!(f, "{}/{}", self.namespace, self.name)
        }
    }
}

/// One change of a cached object, as handlers see it.
#[derive(Debug, Clone, Copy)]
pub enum Change<'a> {
    Added(&'a ObjectRef),
    Modified {
        old: &'a ObjectRef,
        new: &'a ObjectRef,
    },
    Deleted(&'a ObjectRef),
    /// The periodic resync of an unchanged object.
    Resync(&'a ObjectRef),
}

impl<'a> Change<'a> {
    /// The object as it is now (for `Deleted`, its last state).
    pub fn object(&self) -> &'a ObjectRef {
        match self {
            Change::Added(o) | Change::Deleted(o) | Change::Resync(o) => o,
            Change::Modified { new, .. } => new,
        }
    }

    /// The object before the change, for `Modified`.
    pub fn old(&self) -> Option<&'a ObjectRef> {
        match self {
            Change::Modified { old, .. } => Some(old),
            _ => None,
        }
    }
}

/// A change handler.
pub type Handler = Arc<dyn Fn(Change<'_>) + Send + Sync>;
/// An index function: the values an object is found under.
pub type IndexFn = fn(&StoredObject) -> Vec<String>;

/// The cache of one kind: its objects and indexes, readable from any task.
pub struct KindCache {
    /// The store's resource key (`pods`, `apps/deployments`).
    resource: String,
    state: RwLock<CacheState>,
}

#[derive(Default)]
struct CacheState {
    objects: BTreeMap<ObjectName, ObjectRef>,
    indexes: HashMap<&'static str, Index>,
}

struct Index {
    function: IndexFn,
    entries: HashMap<String, HashSet<ObjectName>>,
}

impl KindCache {
    fn new(resource: &str, index_functions: &[(&'static str, IndexFn)]) -> KindCache {
        let indexes = index_functions
            .iter()
            .map(|(name, function)| {
                (
                    *name,
                    Index {
                        function: *function,
                        entries: HashMap::new(),
                    },
                )
            })
            .collect();
        KindCache {
            resource: resource.to_string(),
            state: RwLock::new(CacheState {
                objects: BTreeMap::new(),
                indexes,
            }),
        }
    }

    pub fn resource(&self) -> &str {
        &self.resource
    }

    pub fn get(&self, namespace: &str, name: &str) -> Option<ObjectRef> {
        self.state
            .read()
            .objects
            .get(&ObjectName::new(namespace, name))
            .cloned()
    }

    /// The cached objects, of one namespace when given.
    pub fn list(&self, namespace: Option<&str>) -> Vec<ObjectRef> {
        let state = self.state.read();
        match namespace {
            None => state.objects.values().cloned().collect(),
            Some(ns) => {
                let start = ObjectName::new(ns, "");
                state
                    .objects
                    .range(start..)
                    .take_while(|(k, _)| k.namespace == ns)
                    .map(|(_, v)| v.clone())
                    .collect()
            }
        }
    }

    /// The cached objects an index finds under `value`.
    pub fn by_index(&self, index: &str, value: &str) -> Vec<ObjectRef> {
        let state = self.state.read();
        let Some(names) = state.indexes.get(index).and_then(|i| i.entries.get(value)) else {
            return Vec::new();
        };
        names
            .iter()
            .filter_map(|n| state.objects.get(n).cloned())
            .collect()
    }

    /// The values an index currently holds objects under.
    pub fn index_values(&self, index: &str) -> Vec<String> {
        let state = self.state.read();
        state
            .indexes
            .get(index)
            .map(|i| i.entries.keys().cloned().collect())
            .unwrap_or_default()
    }

    pub fn len(&self) -> usize {
        self.state.read().objects.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Puts `object` in the cache; the previous version, if any.
    fn insert(&self, object: &ObjectRef) -> Option<ObjectRef> {
        let name = ObjectName::of(object);
        let mut state = self.state.write();
        let old = state.objects.insert(name.clone(), object.clone());
        let CacheState { indexes, .. } = &mut *state;
        for index in indexes.values_mut() {
            if let Some(old) = &old {
                remove_from_index(index, &name, old);
            }
            for value in (index.function)(object) {
                index.entries.entry(value).or_default().insert(name.clone());
            }
        }
        old
    }

    fn remove(&self, name: &ObjectName) -> Option<ObjectRef> {
        let mut state = self.state.write();
        let old = state.objects.remove(name)?;
        for index in state.indexes.values_mut() {
            remove_from_index(index, name, &old);
        }
        Some(old)
    }
}

fn remove_from_index(index: &mut Index, name: &ObjectName, object: &StoredObject) {
    for value in (index.function)(object) {
        if let Some(set) = index.entries.get_mut(&value) {
            set.remove(name);
            if set.is_empty() {
                index.entries.remove(&value);
            }
        }
    }
}

struct KindEntry {
    cache: Arc<KindCache>,
    handlers: Vec<Handler>,
    /// Handlers with a resync period: (handler index, period).
    resyncs: Vec<(usize, Duration)>,
}

/// What controllers register for one kind: its indexes and its handlers (each with an
/// optional resync period).
#[derive(Default)]
struct Registration {
    indexes: Vec<(&'static str, IndexFn)>,
    handlers: Vec<(Handler, Option<Duration>)>,
}

/// What controllers register before the informers start.
#[derive(Default)]
pub struct InformersBuilder {
    kinds: BTreeMap<String, Registration>,
}

impl InformersBuilder {
    pub fn new() -> InformersBuilder {
        InformersBuilder::default()
    }

    /// Makes sure `resource` (a store key) is cached, without a handler.
    pub fn watch(&mut self, resource: &str) -> &mut Self {
        self.kinds.entry(resource.to_string()).or_default();
        self
    }

    /// Calls `handler` for every change of `resource`.
    pub fn on_change(&mut self, resource: &str, handler: Handler) -> &mut Self {
        self.kinds
            .entry(resource.to_string())
            .or_default()
            .handlers
            .push((handler, None));
        self
    }

    /// Calls `handler` for every change, and for every cached object once per `period`.
    pub fn on_change_with_resync(
        &mut self,
        resource: &str,
        period: Duration,
        handler: Handler,
    ) -> &mut Self {
        self.kinds
            .entry(resource.to_string())
            .or_default()
            .handlers
            .push((handler, Some(period)));
        self
    }

    /// Adds a named index to `resource`'s cache (a second registration of the name is
    /// ignored: several controllers may ask for the same index).
    pub fn index(&mut self, resource: &str, name: &'static str, function: IndexFn) -> &mut Self {
        let indexes = &mut self.kinds.entry(resource.to_string()).or_default().indexes;
        if !indexes.iter().any(|(n, _)| *n == name) {
            indexes.push((name, function));
        }
        self
    }

    /// Lists every registered kind, fills the caches and calls the handlers with `Added`;
    /// returns the informers, whose `run` then follows the store's watch.
    pub fn start(self, store: Arc<Store>) -> Informers {
        let kinds: HashMap<String, KindEntry> = self
            .kinds
            .into_iter()
            .map(|(resource, Registration { indexes, handlers })| {
                let resyncs = handlers
                    .iter()
                    .enumerate()
                    .filter_map(|(i, (_, period))| period.map(|p| (i, p)))
                    .collect();
                let entry = KindEntry {
                    cache: Arc::new(KindCache::new(&resource, &indexes)),
                    handlers: handlers.into_iter().map(|(h, _)| h).collect(),
                    resyncs,
                };
                (resource, entry)
            })
            .collect();
        let (snapshot, live) = store.snapshot_and_subscribe();
        let informers = Informers {
            store,
            kinds: Arc::new(kinds),
            live: parking_lot::Mutex::new(Some(live)),
        };
        informers.relist(&snapshot);
        informers
    }
}

/// The running informers: the caches, and the task that keeps them current.
pub struct Informers {
    store: Arc<Store>,
    kinds: Arc<HashMap<String, KindEntry>>,
    /// The subscription taken with the initial list, until `run` takes it over.
    live: parking_lot::Mutex<
        Option<tokio::sync::broadcast::Receiver<Arc<crate::kube::watch::WatchEvent>>>,
    >,
}

impl Informers {
    /// The cache of `resource`; `None` if no controller registered it.
    pub fn cache(&self, resource: &str) -> Option<Arc<KindCache>> {
        self.kinds.get(resource).map(|k| k.cache.clone())
    }

    /// Follows the store's watch until `stop`, calling handlers for each change.
    pub async fn run(&self, stop: CancellationToken) {
        let Some(mut live) = self.live.lock().take() else {
            return;
        };
        let mut next_resync = self.first_resync_times();
        loop {
            let resync_at = next_resync.values().min().copied();
            let event = tokio::select! {
                _ = stop.cancelled() => return,
                event = live.recv() => event,
                _ = sleep_until_or_forever(resync_at) => {
                    self.resync_due(&mut next_resync);
                    continue;
                }
            };
            match event {
                Ok(event) => self.apply(&event),
                Err(RecvError::Lagged(missed)) => {
                    tracing::info!(
                        component = "controllers",
                        missed,
                        "informers fell behind the store's watch: listing again"
                    );
                    let (snapshot, fresh) = self.store.snapshot_and_subscribe();
                    live = fresh;
                    self.relist(&snapshot);
                }
                Err(RecvError::Closed) => {
                    // The store was restored (a Raft snapshot was installed): list again.
                    let (snapshot, fresh) = self.store.snapshot_and_subscribe();
                    live = fresh;
                    self.relist(&snapshot);
                }
            }
        }
    }

    fn apply(&self, event: &WatchEvent) {
        let Some(kind) = self.kinds.get(&event.object.key.resource) else {
            return;
        };
        match event.kind {
            EventKind::Added | EventKind::Modified => {
                let new = &event.object;
                match kind.cache.insert(new) {
                    Some(old) => notify(kind, Change::Modified { old: &old, new }),
                    None => notify(kind, Change::Added(new)),
                }
            }
            EventKind::Deleted => {
                let name = ObjectName::of(&event.object);
                if kind.cache.remove(&name).is_some() {
                    notify(kind, Change::Deleted(&event.object));
                }
            }
        }
    }

    /// Brings every cache to `snapshot`, telling handlers what changed.
    fn relist(&self, snapshot: &StoreSnapshot) {
        for (resource, kind) in self.kinds.iter() {
            let mut seen = HashSet::new();
            for object in snapshot.range(resource, None, None) {
                let name = ObjectName::of(object);
                seen.insert(name);
                let cached = kind.cache.get(&object.key.namespace, &object.key.name);
                match cached {
                    Some(old) if old.resource_version == object.resource_version => {}
                    Some(_) => {
                        if let Some(old) = kind.cache.insert(object) {
                            notify(
                                kind,
                                Change::Modified {
                                    old: &old,
                                    new: object,
                                },
                            );
                        }
                    }
                    None => {
                        kind.cache.insert(object);
                        notify(kind, Change::Added(object));
                    }
                }
            }
            let gone: Vec<ObjectName> = kind
                .cache
                .state
                .read()
                .objects
                .keys()
                .filter(|k| !seen.contains(*k))
                .cloned()
                .collect();
            for name in gone {
                if let Some(old) = kind.cache.remove(&name) {
                    notify(kind, Change::Deleted(&old));
                }
            }
        }
    }

    fn first_resync_times(&self) -> HashMap<(String, usize), Instant> {
        let now = Instant::now();
        let mut times = HashMap::new();
        for (resource, kind) in self.kinds.iter() {
            for (handler, period) in &kind.resyncs {
                times.insert((resource.clone(), *handler), now + *period);
            }
        }
        times
    }

    fn resync_due(&self, next: &mut HashMap<(String, usize), Instant>) {
        let now = Instant::now();
        for ((resource, handler), at) in next.iter_mut() {
            if *at > now {
                continue;
            }
            let Some(kind) = self.kinds.get(resource) else {
                continue;
            };
            let period = kind
                .resyncs
                .iter()
                .find(|(h, _)| h == handler)
                .map(|(_, p)| *p)
                .unwrap_or(Duration::from_secs(3600));
            *at = now + period;
            if let Some(f) = kind.handlers.get(*handler) {
                for object in kind.cache.list(None) {
                    f(Change::Resync(&object));
                }
            }
        }
    }
}

fn notify(kind: &KindEntry, change: Change<'_>) {
    for handler in &kind.handlers {
        handler(change);
    }
}

async fn sleep_until_or_forever(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

#[cfg(test)]
mod tests;
