//! The cache's feed: for each kind (Services, EndpointSlices, Pods) a list, then a watch from
//! the list's resourceVersion, started again from the last version seen when it ends, and a
//! new list when the server no longer has that version (410 or an `ERROR` event). One task
//! applies the events to the [`Cache`] and, once no more are waiting, builds the zone again
//! and swaps it in, so a burst of changes costs one build.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde_json::Value;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::cache::{Cache, Kind};
use super::server::ZoneHandle;
use super::zone::{Zone, ZoneSettings};
use crate::agent::api::ApiClient;

/// Events waiting to be applied at most (the watches wait when it is full).
const QUEUE: usize = 1024;

enum Event {
    Listed(Kind, Vec<Value>),
    Changed(Kind, Value),
    Deleted(Kind, Value),
}

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

fn apply(cache: &mut Cache, event: Event) {
    match event {
        Event::Listed(kind, items) => cache.replace(kind, &items),
        Event::Changed(kind, object) => cache.changed(kind, &object),
        Event::Deleted(kind, object) => cache.deleted(kind, &object),
    }
}

async fn follow(api: ApiClient, kind: Kind, events: mpsc::Sender<Event>, stop: CancellationToken) {
    let mut retry = Duration::from_millis(250);
    let mut version: Option<String> = None;
    loop {
        if version.is_none() {
            let listed = tokio::select! {
                _ = stop.cancelled() => return,
                l = api.get(path(kind)) => l,
            };
            match listed {
                Ok(Some(mut list)) => {
                    retry = Duration::from_millis(250);
                    version = list["metadata"]["resourceVersion"]
                        .as_str()
                        .map(str::to_string);
                    let items = match list["items"].take() {
                        Value::Array(items) => items,
                        _ => Vec::new(),
                    };
                    if events.send(Event::Listed(kind, items)).await.is_err() {
                        return;
                    }
                }
                other => {
                    if let Err(e) = other {
                        tracing::warn!(component = "dns", ?kind, "listing: {e}");
                    }
                    tokio::select! {
                        _ = stop.cancelled() => return,
                        _ = tokio::time::sleep(retry) => {}
                    }
                    retry = (retry * 2).min(Duration::from_secs(5));
                    continue;
                }
            }
        }
        let started = tokio::time::Instant::now();
        let watch_path = format!(
            "{}?watch=true&allowWatchBookmarks=true&resourceVersion={}",
            path(kind),
            version.as_deref().unwrap_or_default()
        );
        let watching = tokio::select! {
            _ = stop.cancelled() => return,
            w = api.watch(&watch_path) => w,
        };
        match watching {
            Ok(mut watch) => loop {
                let event = tokio::select! {
                    _ = stop.cancelled() => return,
                    e = watch.next() => e,
                };
                let event = match event {
                    None => break,
                    Some(Ok(e)) => e,
                    Some(Err(e)) => {
                        tracing::debug!(component = "dns", ?kind, "watching: {e}");
                        version = None;
                        break;
                    }
                };
                if let Some(rv) = event.object["metadata"]["resourceVersion"].as_str() {
                    version = Some(rv.to_string());
                }
                let sent = match event.kind.as_str() {
                    "ADDED" | "MODIFIED" => events.send(Event::Changed(kind, event.object)).await,
                    "DELETED" => events.send(Event::Deleted(kind, event.object)).await,
                    "BOOKMARK" => Ok(()),
                    _ => {
                        // ERROR: most likely 410 Gone, the version is too old to watch from.
                        version = None;
                        break;
                    }
                };
                if sent.is_err() {
                    return;
                }
            },
            Err(e) => {
                tracing::debug!(component = "dns", ?kind, "watching: {e}");
                if e.status().is_some() {
                    version = None;
                }
            }
        }
        // A watch that ends at once is not started again in a tight loop.
        if started.elapsed() < Duration::from_secs(1) {
            tokio::select! {
                _ = stop.cancelled() => return,
                _ = tokio::time::sleep(Duration::from_secs(1)) => {}
            }
        }
    }
}
