//! The API objects the proxy follows, kept current: Services, EndpointSlices
//! (`discovery.k8s.io/v1`) and Nodes, each listed and then watched from the list's
//! resourceVersion. A watch that ends is started again from the last version seen; when the
//! server no longer has that version (an `ERROR` event, a refused watch) the kind is listed
//! again and the list replaces what was known of it. Every [`RESYNC`] a kind is listed again
//! anyway, so a missed event cannot last. Objects are read into the proxy's model as they
//! arrive ([`Snapshot`]); every change wakes the sync loop through [`Shared::changed`].

use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use serde_json::Value;
use tokio::sync::{watch, Notify};
use tokio_util::sync::CancellationToken;

use super::model::{Node, ObjectKey, Service, Slice, Snapshot};
use crate::agent::api::ApiClient;
use crate::agent::reflector::{self, Change, Collection};

/// How often each kind is listed again even when its watch is healthy.
pub const RESYNC: Duration = Duration::from_secs(600);

/// A kind the proxy follows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Services,
    Slices,
    Nodes,
}

impl Kind {
    pub const ALL: [Kind; 3] = [Kind::Services, Kind::Slices, Kind::Nodes];

    fn path(self) -> &'static str {
        match self {
            Kind::Services => "/api/v1/services",
            Kind::Slices => "/apis/discovery.k8s.io/v1/endpointslices",
            Kind::Nodes => "/api/v1/nodes",
        }
    }

    fn bit(self) -> u8 {
        match self {
            Kind::Services => 1,
            Kind::Slices => 2,
            Kind::Nodes => 4,
        }
    }

    /// Applies an added or changed object (`deleted`: its removal).
    fn apply(self, snapshot: &mut Snapshot, object: &Value, deleted: bool, w: &mut Vec<String>) {
        match self {
            Kind::Services => {
                let Some(key) = ObjectKey::of(object) else {
                    return;
                };
                match (!deleted).then(|| Service::from_json(object, w)).flatten() {
                    Some(service) => snapshot.services.insert(key, service),
                    None => snapshot.services.remove(&key),
                };
            }
            Kind::Slices => {
                let Some(key) = ObjectKey::of(object) else {
                    return;
                };
                match (!deleted).then(|| Slice::from_json(object, w)).flatten() {
                    Some(slice) => snapshot.slices.insert(key, slice),
                    None => snapshot.slices.remove(&key),
                };
            }
            Kind::Nodes => {
                let Some(node) = Node::from_json(object) else {
                    return;
                };
                if deleted {
                    snapshot.nodes.remove(&node.name);
                } else {
                    snapshot.nodes.insert(node.name.clone(), node);
                }
            }
        }
    }

    fn clear(self, snapshot: &mut Snapshot) {
        match self {
            Kind::Services => snapshot.services.clear(),
            Kind::Slices => snapshot.slices.clear(),
            Kind::Nodes => snapshot.nodes.clear(),
        }
    }
}

/// What the informers share with the sync loop.
#[derive(Default)]
pub struct Shared {
    pub snapshot: Mutex<Snapshot>,
    /// Warnings from reading objects, taken (and logged once each) by the sync loop.
    pub warnings: Mutex<Vec<String>>,
    /// Notified at every change.
    pub changed: Notify,
    /// The kinds listed at least once (bits of [`Kind`]): no rules are written before every
    /// kind is known, so a starting agent never replaces good rules with partial ones.
    listed: watch::Sender<u8>,
}

impl Shared {
    /// Waits until every kind has been listed; `false` if `stop` came first.
    pub async fn all_listed(&self, stop: &CancellationToken) -> bool {
        let all = Kind::ALL.iter().fold(0, |acc, k| acc | k.bit());
        let mut listed = self.listed.subscribe();
        tokio::select! {
            _ = stop.cancelled() => false,
            done = listed.wait_for(|bits| bits & all == all) => done.is_ok(),
        }
    }

    /// Waits until `kind` has been listed, for at most `limit`; whether it has.
    pub async fn listed_within(&self, kind: Kind, limit: std::time::Duration) -> bool {
        let mut listed = self.listed.subscribe();
        tokio::time::timeout(limit, listed.wait_for(|bits| bits & kind.bit() != 0))
            .await
            .is_ok_and(|r| r.is_ok())
    }

    /// Replaces the objects of `kind` with `items` (a list).
    pub fn listed(&self, kind: Kind, items: &[Value]) {
        let mut warnings = Vec::new();
        {
            let mut snapshot = self.snapshot.lock();
            kind.clear(&mut snapshot);
            for item in items {
                kind.apply(&mut snapshot, item, false, &mut warnings);
            }
        }
        self.warnings.lock().extend(warnings);
        self.listed.send_modify(|bits| *bits |= kind.bit());
        self.changed.notify_one();
    }

    /// Applies one watch event's object.
    pub fn event(&self, kind: Kind, object: &Value, deleted: bool) {
        let mut warnings = Vec::new();
        kind.apply(&mut self.snapshot.lock(), object, deleted, &mut warnings);
        self.warnings.lock().extend(warnings);
        self.changed.notify_one();
    }
}

/// Follows `kind` into `shared` until `stop` (the following is [`reflector`]'s).
pub async fn run(api: ApiClient, kind: Kind, shared: Arc<Shared>, stop: CancellationToken) {
    let collection = Collection {
        path: kind.path(),
        resync: Some(RESYNC),
        component: "proxy",
    };
    reflector::run(&api, collection, &stop, |change| {
        match change {
            Change::Listed(items) => shared.listed(kind, &items),
            Change::Changed(object) => shared.event(kind, &object, false),
            Change::Deleted(object) => shared.event(kind, &object, true),
        }
        std::future::ready(true)
    })
    .await;
}
