//! The cache's feed: each kind (Services, EndpointSlices, Pods) followed by list and watch
//! ([`reflector`]), its changes queued in order. One task
//! applies the events to the [`Cache`] and, once no more are waiting, builds the zone again
//! and swaps it in, so a burst of changes costs one build.

use std::time::{SystemTime, UNIX_EPOCH};

use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::cache::{Cache, Kind};
use super::server::ZoneHandle;
use super::zone::{Zone, ZoneSettings};
use crate::agent::api::ApiClient;
use crate::agent::reflector::{self, Change, Collection};

/// Events waiting to be applied at most (the watches wait when it is full).
const QUEUE: usize = 1024;

/// A change of one kind.
struct Event(Kind, Change);

fn path(kind: Kind) -> &'static str {
    match kind {
        Kind::Services => "/api/v1/services",
        Kind::EndpointSlices => "/apis/discovery.k8s.io/v1/endpointslices",
        Kind::Pods => "/api/v1/pods",
    }
}

/// Follows the three kinds and keeps `zone` built from them until `stop`.
pub async fn run(
    api: ApiClient,
    settings: ZoneSettings,
    zone: ZoneHandle,
    stop: CancellationToken,
) {
    let (tx, mut rx) = mpsc::channel(QUEUE);
    for kind in [Kind::Services, Kind::EndpointSlices, Kind::Pods] {
        tokio::spawn(follow(api.clone(), kind, tx.clone(), stop.clone()));
    }
    drop(tx);
    let mut cache = Cache::default();
    loop {
        let event = tokio::select! {
            _ = stop.cancelled() => return,
            e = rx.recv() => match e {
                Some(e) => e,
                None => return,
            },
        };
        apply(&mut cache, event);
        while let Ok(event) = rx.try_recv() {
            apply(&mut cache, event);
        }
        let serial = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_secs() as u32)
            .unwrap_or(0);
        let built = Zone::build(&cache, &settings, serial);
        *zone.write() = std::sync::Arc::new(built);
    }
}

fn apply(cache: &mut Cache, Event(kind, change): Event) {
    match change {
        Change::Listed(items) => cache.replace(kind, &items),
        Change::Changed(object) => cache.changed(kind, &object),
        Change::Deleted(object) => cache.deleted(kind, &object),
    }
}

/// Feeds one kind's changes into the queue (the following is [`reflector`]'s).
async fn follow(api: ApiClient, kind: Kind, events: mpsc::Sender<Event>, stop: CancellationToken) {
    let collection = Collection {
        path: path(kind),
        resync: None,
        component: "dns",
    };
    reflector::run(&api, collection, &stop, |change| {
        let events = events.clone();
        async move { events.send(Event(kind, change)).await.is_ok() }
    })
    .await;
}
