//! The API objects the policy enforcer follows, kept current through [`reflector`]:
//! NetworkPolicies, Pods (of every node: a rule's peers may be anywhere) and Namespaces (a
//! `namespaceSelector` needs their labels). Each is listed, then watched; a list replaces
//! what was known of its kind; every change wakes the sync loop through [`Shared::changed`].

use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use serde_json::Value;
use tokio::sync::{watch, Notify};
use tokio_util::sync::CancellationToken;

use super::model::{namespace_labels, Pod, Policy, Snapshot};
use crate::agent::api::ApiClient;
use crate::agent::proxy::model::ObjectKey;
use crate::agent::reflector::{self, Change, Collection};

/// How often each kind is listed again even when its watch is healthy.
pub const RESYNC: Duration = Duration::from_secs(600);

/// A kind the enforcer follows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Policies,
    Pods,
    Namespaces,
}

impl Kind {
    pub const ALL: [Kind; 3] = [Kind::Policies, Kind::Pods, Kind::Namespaces];

    fn path(self) -> &'static str {
        match self {
            Kind::Policies => "/apis/networking.k8s.io/v1/networkpolicies",
            Kind::Pods => "/api/v1/pods",
            Kind::Namespaces => "/api/v1/namespaces",
        }
    }

    fn bit(self) -> u8 {
        match self {
            Kind::Policies => 1,
            Kind::Pods => 2,
            Kind::Namespaces => 4,
        }
    }

    /// Applies an added or changed object (`deleted`: its removal).
    pub fn apply(self, snapshot: &mut Snapshot, object: &Value, deleted: bool) {
        match self {
            Kind::Policies => {
                let Some(key) = ObjectKey::of(object) else {
                    return;
                };
                match (!deleted).then(|| Policy::from_json(object)).flatten() {
                    Some(policy) => snapshot.policies.insert(key, policy),
                    None => snapshot.policies.remove(&key),
                };
            }
            Kind::Pods => {
                let Some(key) = ObjectKey::of(object) else {
                    return;
                };
                // A pod without an address (yet, or any more) is no one's peer or target.
                match (!deleted).then(|| Pod::from_json(object)).flatten() {
                    Some(pod) => snapshot.pods.insert(key, pod),
                    None => snapshot.pods.remove(&key),
                };
            }
            Kind::Namespaces => {
                let Some((name, labels)) = namespace_labels(object) else {
                    return;
                };
                if deleted {
                    snapshot.namespaces.remove(&name);
                } else {
                    snapshot.namespaces.insert(name, labels);
                }
            }
        }
    }

    fn clear(self, snapshot: &mut Snapshot) {
        match self {
            Kind::Policies => snapshot.policies.clear(),
            Kind::Pods => snapshot.pods.clear(),
            Kind::Namespaces => snapshot.namespaces.clear(),
        }
    }
}

/// What the informers share with the sync loop.
#[derive(Default)]
pub struct Shared {
    pub snapshot: Mutex<Snapshot>,
    /// Notified at every change.
    pub changed: Notify,
    /// The kinds listed at least once (bits of [`Kind`]): no rules are written before every
    /// kind is known, so a starting agent never isolates a pod with half the peers missing.
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

    /// Replaces the objects of `kind` with `items` (a list).
    pub fn listed(&self, kind: Kind, items: &[Value]) {
        {
            let mut snapshot = self.snapshot.lock();
            kind.clear(&mut snapshot);
            for item in items {
                kind.apply(&mut snapshot, item, false);
            }
        }
        self.listed.send_modify(|bits| *bits |= kind.bit());
        self.changed.notify_one();
    }

    /// Applies one watch event's object.
    pub fn event(&self, kind: Kind, object: &Value, deleted: bool) {
        kind.apply(&mut self.snapshot.lock(), object, deleted);
        self.changed.notify_one();
    }
}

/// Follows `kind` into `shared` until `stop`.
pub async fn run(api: ApiClient, kind: Kind, shared: Arc<Shared>, stop: CancellationToken) {
    let collection = Collection {
        path: kind.path(),
        resync: Some(RESYNC),
        component: "netpol",
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
