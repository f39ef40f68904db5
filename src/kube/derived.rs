//! A value derived from some of the store's resources and kept current from its watch, read
//! without a request: the RBAC index and the custom-kind registry. A read first takes the
//! events the store sent since the last one (so it reflects every write applied before it);
//! a watch that lagged or closed (a restored snapshot) builds the value again from a
//! snapshot. `follow` keeps taking events while nothing reads, so the watch never falls far
//! behind.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use parking_lot::{Mutex, RwLock, RwLockReadGuard};
use tokio::sync::broadcast::{self, error::TryRecvError};
use tokio_util::sync::CancellationToken;

use crate::kube::object::StoredObject;
use crate::kube::store::Store;
use crate::kube::watch::{EventKind, WatchEvent};

/// How often `follow` takes events while writes keep coming.
const FOLLOW_EVERY: Duration = Duration::from_millis(100);

/// What a derived value is made of.
pub trait FromStore: Default + Send + Sync {
    /// The store resources (`group/plural` keys) it is computed from.
    const RESOURCES: &'static [&'static str];
    /// Takes one object of those resources into account.
    fn apply(&mut self, kind: EventKind, object: &StoredObject);
}

/// `T`, kept up to date from the store.
pub struct Derived<T> {
    store: Arc<Store>,
    value: RwLock<T>,
    /// The store's watch from where the value stands; `None` until the first use.
    events: Mutex<Option<broadcast::Receiver<Arc<WatchEvent>>>>,
    /// The resourceVersion the value reflects (`u64::MAX` before the first build).
    seen: AtomicU64,
}

impl<T: FromStore> Derived<T> {
    pub fn new(store: Arc<Store>) -> Derived<T> {
        Derived {
            store,
            value: RwLock::new(T::default()),
            events: Mutex::new(None),
            seen: AtomicU64::new(u64::MAX),
        }
    }

    pub fn store(&self) -> &Arc<Store> {
        &self.store
    }

    /// The value, reflecting every write the store has applied.
    pub fn fresh(&self) -> RwLockReadGuard<'_, T> {
        self.catch_up();
        self.value.read()
    }

    /// Takes the events the store has sent since the last call.
    pub fn catch_up(&self) {
        let now = self.store.resource_version();
        if self.seen.load(Ordering::Acquire) == now {
            return;
        }
        let mut events = self.events.lock();
        loop {
            let Some(rx) = events.as_mut() else {
                self.rebuild(&mut events);
                continue;
            };
            match rx.try_recv() {
                Ok(event) => {
                    if T::RESOURCES.contains(&event.object.key.resource.as_str()) {
                        self.value.write().apply(event.kind, &event.object);
                    }
                    // Events come in resourceVersion order.
                    self.seen.store(event.resource_version(), Ordering::Release);
                }
                // Every event up to `now` was sent before `now` was readable.
                Err(TryRecvError::Empty) => return,
                Err(TryRecvError::Lagged(_)) | Err(TryRecvError::Closed) => *events = None,
            }
        }
    }

    /// Builds the value again from a snapshot and follows the store's watch from there.
    fn rebuild(&self, events: &mut Option<broadcast::Receiver<Arc<WatchEvent>>>) {
        let (snapshot, rx) = self.store.snapshot_and_subscribe();
        let mut value = T::default();
        for resource in T::RESOURCES {
            for object in snapshot.range(resource, None, None) {
                value.apply(EventKind::Added, object);
            }
        }
        *self.value.write() = value;
        self.seen
            .store(snapshot.resource_version, Ordering::Release);
        *events = Some(rx);
    }

    /// Keeps the value following the store while nothing reads, until `stop`.
    pub async fn follow(&self, stop: CancellationToken) {
        let mut applied = self.store.applied_versions();
        self.catch_up();
        loop {
            tokio::select! {
                _ = stop.cancelled() => return,
                changed = applied.changed() => if changed.is_err() { return },
            }
            self.catch_up();
            tokio::select! {
                _ = stop.cancelled() => return,
                _ = tokio::time::sleep(FOLLOW_EVERY) => {}
            }
        }
    }
}
