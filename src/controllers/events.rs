//! Events the control plane records about objects (`SuccessfulCreate`, `FailedScheduling`,
//! `ScalingReplicaSet` …), written as core/v1 Events the way client-go's event recorder and
//! correlator write them, so `kubectl describe` and `kubectl get events` read them as usual.
//!
//! - Recording never blocks a controller: events go into a bounded channel (1,000, as
//!   client-go's broadcaster) and a writer task sends them; when the channel is full the event
//!   is dropped and counted, never queued without bound.
//! - An event equal to one written in the last 10 minutes (same object, type, reason, message
//!   and component) increments that Event's `count` and `lastTimestamp` instead of creating a
//!   new one (client-go's aggregation by identical events).
//! - Each (component, object) pair may write 25 events at once, then one per 5 minutes
//!   (client-go's spam filter), so a controller failing in a loop cannot flood the store.
//! - The memory of both is bounded: at most `CACHE_ENTRIES` remembered events and buckets,
//!   the oldest forgotten first.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use chrono::Utc;
use serde_json::{json, Value};
use tokio::sync::mpsc;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::api::meta::format_time;
use crate::client::{Client, PatchKind};
use crate::kube::object::StoredObject;
use crate::kube::resources::{self, ResourceInfo};

/// Events waiting to be written; more are dropped.
const CHANNEL: usize = 1_000;
/// Remembered events (for aggregation) and spam-filter buckets, each.
const CACHE_ENTRIES: usize = 4_096;
/// How long an identical event is folded into the previous one.
const AGGREGATE_WINDOW: Duration = Duration::from_secs(600);
/// Spam filter: burst, and the time to earn one more event.
const SPAM_BURST: u32 = 25;
const SPAM_REFILL: Duration = Duration::from_secs(300);

/// `Normal` or `Warning`, as the Event's `type`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum EventType {
    Normal,
    Warning,
}

impl EventType {
    fn as_str(self) -> &'static str {
        match self {
            EventType::Normal => "Normal",
            EventType::Warning => "Warning",
        }
    }
}

/// The object an event is about (an Event's `involvedObject`).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Involved {
    pub api_version: String,
    pub kind: String,
    pub namespace: String,
    pub name: String,
    pub uid: String,
    pub resource_version: String,
}

impl Involved {
    /// The reference to a stored object of kind `info`.
    pub fn of(info: &ResourceInfo, object: &StoredObject) -> Involved {
        Involved {
            api_version: info.api_version(),
            kind: info.kind.to_string(),
            namespace: object.key.namespace.clone(),
            name: object.key.name.clone(),
            uid: object.uid.clone(),
            resource_version: object.resource_version.to_string(),
        }
    }
}

struct Pending {
    involved: Involved,
    kind: EventType,
    reason: String,
    message: String,
}

/// Records events for one component (`source.component`, e.g. `default-scheduler`,
/// `replicaset-controller`). Cheap to clone.
#[derive(Clone)]
pub struct EventRecorder {
    component: Arc<str>,
    tx: mpsc::Sender<Pending>,
    dropped: Arc<AtomicU64>,
}

impl EventRecorder {
    /// A recorder whose writer task runs until `stop`, writing through `client`.
    pub fn start(client: Client, component: &str, host: &str, stop: CancellationToken) -> Self {
        let (tx, rx) = mpsc::channel(CHANNEL);
        let component: Arc<str> = component.into();
        let writer = Writer {
            client,
            component: component.clone(),
            host: host.to_string(),
            seen: Lru::new(CACHE_ENTRIES),
            buckets: Lru::new(CACHE_ENTRIES),
        };
        tokio::spawn(writer.run(rx, stop));
        EventRecorder {
            component,
            tx,
            dropped: Arc::new(AtomicU64::new(0)),
        }
    }

    /// Records an event; never waits.
    pub fn record(&self, involved: Involved, kind: EventType, reason: &str, message: &str) {
        let pending = Pending {
            involved,
            kind,
            reason: reason.to_string(),
            message: truncate(message),
        };
        if self.tx.try_send(pending).is_err() {
            let n = self.dropped.fetch_add(1, Ordering::Relaxed) + 1;
            if n.is_power_of_two() {
                tracing::warn!(component = "controllers", source = %self.component, dropped = n, "event channel full: events dropped");
            }
        }
    }

    pub fn normal(&self, involved: Involved, reason: &str, message: &str) {
        self.record(involved, EventType::Normal, reason, message);
    }

    pub fn warning(&self, involved: Involved, reason: &str, message: &str) {
        self.record(involved, EventType::Warning, reason, message);
    }
}

/// Event messages are capped like upstream's (1 KiB).
fn truncate(message: &str) -> String {
    const MAX: usize = 1024;
    if message.len() <= MAX {
        return message.to_string();
    }
    let mut end = MAX - 3;
    while !message.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}...", &message[..end])
}

/// What identifies an event for aggregation.
#[derive(Clone, PartialEq, Eq, Hash)]
struct Identity {
    uid: String,
    namespace: String,
    name: String,
    kind: EventType,
    reason: String,
    message: String,
}

struct Seen {
    event_name: String,
    count: u64,
    at: Instant,
}

struct Bucket {
    tokens: u32,
    refilled: Instant,
}

struct Writer {
    client: Client,
    component: Arc<str>,
    host: String,
    seen: Lru<Identity, Seen>,
    buckets: Lru<String, Bucket>,
}

impl Writer {
    async fn run(mut self, mut rx: mpsc::Receiver<Pending>, stop: CancellationToken) {
        loop {
            let pending = tokio::select! {
                _ = stop.cancelled() => return,
                p = rx.recv() => match p { Some(p) => p, None => return },
            };
            if !self.allowed(&pending.involved) {
                continue;
            }
            if let Err(e) = self.write(pending).await {
                tracing::debug!(component = "controllers", error = %e, "writing an event failed");
            }
        }
    }

    /// The spam filter: a token bucket per object.
    fn allowed(&mut self, involved: &Involved) -> bool {
        let key = format!("{}/{}/{}", involved.namespace, involved.name, involved.uid);
        let now = Instant::now();
        let bucket = self.buckets.get_or_insert(key, || Bucket {
            tokens: SPAM_BURST,
            refilled: now,
        });
        let earned = (now.duration_since(bucket.refilled).as_secs() / SPAM_REFILL.as_secs()) as u32;
        if earned > 0 {
            bucket.tokens = (bucket.tokens + earned).min(SPAM_BURST);
            bucket.refilled = now;
        }
        if bucket.tokens == 0 {
            return false;
        }
        bucket.tokens -= 1;
        true
    }

    async fn write(&mut self, pending: Pending) -> Result<(), crate::client::ClientError> {
        let now = Instant::now();
        let timestamp = format_time(Utc::now());
        let identity = Identity {
            uid: pending.involved.uid.clone(),
            namespace: pending.involved.namespace.clone(),
            name: pending.involved.name.clone(),
            kind: pending.kind,
            reason: pending.reason.clone(),
            message: pending.message.clone(),
        };
        let namespace = event_namespace(&pending.involved);
        if let Some(seen) = self.seen.get_mut(&identity) {
            if now.duration_since(seen.at) < AGGREGATE_WINDOW {
                seen.count += 1;
                seen.at = now;
                let patch = json!({"count": seen.count, "lastTimestamp": timestamp});
                let name = seen.event_name.clone();
                match self
                    .client
                    .patch(events(), &namespace, &name, None, PatchKind::Merge, &patch)
                    .await
                {
                    Ok(_) => return Ok(()),
                    // Expired or deleted meanwhile: write a new one.
                    Err(e) if e.is_not_found() => {}
                    Err(e) => return Err(e),
                }
            }
        }
        let name = format!(
            "{}.{:x}",
            pending.involved.name,
            Utc::now().timestamp_nanos_opt().unwrap_or_default()
        );
        let event = new_event(
            &name,
            &namespace,
            &pending,
            &self.component,
            &self.host,
            &timestamp,
        );
        self.client.create(events(), &namespace, &event).await?;
        self.seen.insert(
            identity,
            Seen {
                event_name: name,
                count: 1,
                at: now,
            },
        );
        Ok(())
    }
}

/// Events about cluster-scoped objects (nodes) live in `default`, as upstream's do.
fn event_namespace(involved: &Involved) -> String {
    if involved.namespace.is_empty() {
        "default".to_string()
    } else {
        involved.namespace.clone()
    }
}

fn events() -> &'static ResourceInfo {
    resources::find("", "v1", "events")
        .unwrap_or_else(|| panic!("built-in kind events is not registered"))
}

fn new_event(
    name: &str,
    namespace: &str,
    pending: &Pending,
    component: &str,
    host: &str,
    timestamp: &str,
) -> Value {
    let i = &pending.involved;
    let mut involved = json!({
        "apiVersion": i.api_version,
        "kind": i.kind,
        "name": i.name,
        "uid": i.uid,
        "resourceVersion": i.resource_version,
    });
    if !i.namespace.is_empty() {
        involved["namespace"] = json!(i.namespace);
    }
    json!({
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"name": name, "namespace": namespace},
        "involvedObject": involved,
        "reason": pending.reason,
        "message": pending.message,
        "type": pending.kind.as_str(),
        "source": {"component": component, "host": host},
        "reportingComponent": component,
        "reportingInstance": host,
        "firstTimestamp": timestamp,
        "lastTimestamp": timestamp,
        "count": 1,
    })
}

/// A map that forgets its oldest-inserted entries beyond `capacity`.
struct Lru<K, V> {
    map: HashMap<K, V>,
    order: VecDeque<K>,
    capacity: usize,
}

impl<K: Clone + Eq + std::hash::Hash, V> Lru<K, V> {
    fn new(capacity: usize) -> Self {
        Lru {
            map: HashMap::new(),
            order: VecDeque::new(),
            capacity,
        }
    }

    fn get_mut(&mut self, key: &K) -> Option<&mut V> {
        self.map.get_mut(key)
    }

    fn insert(&mut self, key: K, value: V) {
        if self.map.insert(key.clone(), value).is_none() {
            self.order.push_back(key);
            while self.map.len() > self.capacity {
                match self.order.pop_front() {
                    Some(old) => {
                        self.map.remove(&old);
                    }
                    None => break,
                }
            }
        }
    }

    fn get_or_insert(&mut self, key: K, make: impl FnOnce() -> V) -> &mut V {
        if !self.map.contains_key(&key) {
            self.insert(key.clone(), make());
        }
        self.map
            .get_mut(&key)
            .unwrap_or_else(|| unreachable!("inserted above, capacity ≥ 1"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::client::testing::{apiserver_client, wal_context};

    fn involved() -> Involved {
        Involved {
            api_version: "v1".into(),
            kind: "Pod".into(),
            namespace: "default".into(),
            name: "web-1".into(),
            uid: "u1".into(),
            resource_version: "5".into(),
        }
    }

    async fn wait_for_events(client: &Client, n: usize) -> Vec<Value> {
        for _ in 0..500 {
            let snapshot = client.store().snapshot();
            let list: Vec<Value> = snapshot
                .range("events", Some("default"), None)
                .map(|o| o.value())
                .collect();
            if list.len() >= n {
                return list;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        panic!("fewer than {n} events");
    }

    #[tokio::test]
    async fn identical_events_are_counted_in_one_and_floods_are_cut() {
        let dir = tempfile::tempdir().unwrap();
        let ctx = wal_context(dir.path());
        let client = apiserver_client(&ctx);
        client
            .create(
                resources::find("", "v1", "namespaces").unwrap(),
                "",
                &json!({"metadata": {"name": "default"}}),
            )
            .await
            .unwrap();
        let stop = CancellationToken::new();
        let recorder =
            EventRecorder::start(client.clone(), "default-scheduler", "lk1", stop.clone());
        for _ in 0..3 {
            recorder.warning(involved(), "FailedScheduling", "0/3 nodes are available");
        }
        // Written in order: wait until the third has been folded in.
        for _ in 0..500 {
            let list = wait_for_events(&client, 1).await;
            if list[0]["count"] == 3 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        let list = wait_for_events(&client, 1).await;
        assert_eq!(list.len(), 1);
        let event = &list[0];
        assert_eq!(event["count"], 3);
        assert_eq!(event["type"], "Warning");
        assert_eq!(event["reason"], "FailedScheduling");
        assert_eq!(event["source"]["component"], "default-scheduler");
        assert_eq!(event["involvedObject"]["kind"], "Pod");
        assert_eq!(event["involvedObject"]["uid"], "u1");
        assert!(event["metadata"]["name"]
            .as_str()
            .unwrap()
            .starts_with("web-1."));

        // 100 different messages about one object: 25 get through (3 were spent above).
        for i in 0..100 {
            recorder.normal(involved(), "Step", &format!("step {i}"));
        }
        let list = wait_for_events(&client, 23).await;
        tokio::time::sleep(Duration::from_millis(200)).await;
        let after = wait_for_events(&client, 23).await;
        assert_eq!(list.len(), after.len());
        assert_eq!(after.len(), 1 + 22, "burst of 25 per object, 3 used before");
        stop.cancel();
    }

    #[test]
    fn long_messages_are_cut_on_a_character_boundary() {
        let long = "é".repeat(1000);
        let cut = truncate(&long);
        assert!(cut.len() <= 1024 && cut.ends_with("..."));
    }
}
