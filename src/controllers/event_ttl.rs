//! Event expiry: an Event is deleted once `--event-ttl` (default 1 h) has passed since its
//! last update, as kube-apiserver's storage TTL does for Events in etcd.
//!
//! Each Event's key is queued for the moment it expires (work-queue delays, one timer for all
//! of them), not polled: an idle cluster costs nothing, and a flood of Events costs one queue
//! entry each. The last update is the newest of the Event's times (`lastTimestamp`,
//! `eventTime`, `series.lastObservedTime`, `creationTimestamp`); an Event updated meanwhile is
//! queued again by its change, and the delete carries the resourceVersion it was judged at, so
//! a refresh that races the expiry wins.

use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use serde_json::Value;

use super::informer::{Change, Informers, InformersBuilder, KindCache, ObjectName};
use super::objects::parse_time;
use super::queue::WorkQueue;
use super::worker::{Controller, Outcome, ReconcileError};
use super::Shared;
use crate::client::{Client, DeleteOptions};
use crate::kube::resources::{self, ResourceInfo};

/// Both Event APIs, each with its own objects here: (store resource, registry entry).
const EVENT_KINDS: [(&str, &str, &str); 2] = [
    ("events", "", "v1"),
    ("events.k8s.io/events", "events.k8s.io", "v1"),
];

pub struct EventTtl {
    client: Client,
    ttl: Duration,
    caches: Vec<(Arc<KindCache>, &'static ResourceInfo)>,
}

/// (index into `EVENT_KINDS`, namespace/name).
type EventKey = (usize, ObjectName);

/// The newest time an Event records about itself.
pub fn last_update(event: &Value) -> Option<DateTime<Utc>> {
    [
        "/lastTimestamp",
        "/eventTime",
        "/series/lastObservedTime",
        "/deprecatedLastTimestamp",
        "/metadata/creationTimestamp",
    ]
    .iter()
    .filter_map(|p| {
        event
            .pointer(p)
            .and_then(Value::as_str)
            .and_then(parse_time)
    })
    .max()
}

impl Controller for EventTtl {
    type Key = EventKeyDisplay;
    const NAME: &'static str = "event-ttl";
    const WORKERS: usize = 1;

    fn register(builder: &mut InformersBuilder, queue: &WorkQueue<EventKeyDisplay>) {
        for (i, (resource, _, _)) in EVENT_KINDS.iter().enumerate() {
            let q = queue.clone();
            builder.on_change(
                resource,
                Arc::new(move |change: Change<'_>| {
                    if !matches!(change, Change::Deleted(_)) {
                        q.add(EventKeyDisplay((i, ObjectName::of(change.object()))));
                    }
                }),
            );
        }
    }

    fn new(
        shared: &Shared,
        informers: &Arc<Informers>,
        _queue: WorkQueue<EventKeyDisplay>,
    ) -> Self {
        let caches = EVENT_KINDS
            .iter()
            .map(|(resource, group, version)| {
                let cache = informers.cache(resource).expect("registered in `register`");
                let info = resources::find(group, version, "events")
                    .unwrap_or_else(|| panic!("built-in kind events.{group} is not registered"));
                (cache, info)
            })
            .collect();
        EventTtl {
            client: shared.controller_manager.clone(),
            ttl: shared.settings.event_ttl,
            caches,
        }
    }

    async fn reconcile(&self, key: &EventKeyDisplay) -> Result<Outcome, ReconcileError> {
        let (kind, name) = &key.0;
        let Some((cache, info)) = self.caches.get(*kind) else {
            return Ok(Outcome::Done);
        };
        let Some(event) = cache.get(&name.namespace, &name.name) else {
            return Ok(Outcome::Done);
        };
        let value = event.value();
        let expires = last_update(&value).unwrap_or_else(Utc::now)
            + chrono::Duration::from_std(self.ttl).unwrap_or(chrono::Duration::hours(1));
        let now = Utc::now();
        if expires > now {
            let left = (expires - now).to_std().unwrap_or(Duration::from_secs(1));
            return Ok(Outcome::RequeueAfter(left + Duration::from_millis(10)));
        }
        let options = DeleteOptions {
            resource_version: Some(event.resource_version.to_string()),
            ..Default::default()
        };
        match self
            .client
            .delete(info, &name.namespace, &name.name, &options)
            .await
        {
            // Updated since (the change queues it again) or gone already.
            Err(e) if e.is_conflict() || e.is_not_found() => Ok(Outcome::Done),
            Err(e) => Err(e.into()),
            Ok(_) => Ok(Outcome::Done),
        }
    }
}

/// An Event's queue key, printable in logs.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct EventKeyDisplay(pub EventKey);

impl std::fmt::Display for EventKeyDisplay {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", EVENT_KINDS[self.0 .0].0, self.0 .1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_last_update_is_the_newest_recorded_time() {
        let e = json!({
            "metadata": {"creationTimestamp": "2026-01-01T00:00:00Z"},
            "lastTimestamp": "2026-01-01T00:10:00Z",
            "series": {"lastObservedTime": "2026-01-01T00:20:00.123456Z"},
        });
        assert_eq!(
            last_update(&e).unwrap().to_rfc3339(),
            "2026-01-01T00:20:00.123456+00:00"
        );
        assert!(last_update(&json!({})).is_none());
    }
}
