//! The scheduler: gives every pending pod of `default-scheduler` (or naming no scheduler) a
//! node, as kube-scheduler 1.33 does with its default profile, and binds it through the
//! `pods/binding` subresource under kube-scheduler's identity. It runs in the leader's
//! controller session (`runner`), beside the controllers.
//!
//! # Layout
//! - [`pod`], [`node`]: pods and nodes read once from the store's JSON when they change;
//!   [`resources`] and [`quantity`]: requests and allocatable as integers; [`terms`]: node
//!   selectors, taints and tolerations, inter-pod affinity terms.
//! - [`cache`]: every node's summary with the pods counted on it, including pods *assumed*
//!   bound while their binding is on its way (so the next decision sees their resources).
//! - [`queue`]: active, backoff, unschedulable and gated pods; [`hints`]: which cluster
//!   changes wake which unschedulable pods.
//! - [`plugins`]: the default profile's filters and scores; [`framework`]: one decision, and
//!   kube-scheduler's "0/3 nodes are available: …" message when no node fits.
//!
//! # How it runs
//! Informer handlers keep the cache and the queue current (a pod is parsed when it arrives or
//! changes, never per decision) and wake the scheduling loop when a pod becomes active. The
//! loop takes pods one at a time: decide, assume the pod on its node, and hand the binding to
//! a task of its own (many bindings are in flight at once, so their writes share the WAL's
//! group commits); on success the binder records `Scheduled` ("Successfully assigned ns/pod to
//! node"). A pod no node takes gets `PodScheduled=False` (reason `Unschedulable`, the message)
//! through `pods/status` and a `FailedScheduling` Warning event, and waits in the queue for a
//! change that may help. With no pod pending the loop sleeps on a notification alone: no
//! timer, no polling.
//!
//! Not built: preemption (the message reports what upstream's dry run finds, see
//! [`framework`]), the volume plugins, ImageLocality, extenders and other profiles.

pub(crate) mod cache;
pub(crate) mod framework;
pub(crate) mod hints;
pub(crate) mod node;
pub(crate) mod plugins;
pub(crate) mod pod;
pub(crate) mod quantity;
pub(crate) mod queue;
pub(crate) mod resources;
pub(crate) mod terms;

#[cfg(test)]
mod testing;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use parking_lot::Mutex;
use serde::Deserialize;
use serde_json::{json, Value};
use tokio::sync::{Notify, Semaphore};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use self::cache::{Cache, OwnerKey};
use self::framework::{Chooser, Decision};
use self::pod::PodInfo;
use self::queue::SchedulingQueue;
use super::events::{EventRecorder, Involved};
use super::informer::{Change, Informers, InformersBuilder};
use super::objects::{label_selector, map_selector};
use super::runner::Launch;
use super::Shared;
use crate::client::{Client, ClientError, PatchKind};
use crate::kube::object::ObjectRef;
use crate::kube::resources::{self as registry, ResourceInfo};

/// The component name of the scheduler's events.
pub const COMPONENT: &str = "default-scheduler";

/// Bindings sent at once. The loop waits for a slot beyond this, so a slow store slows the
/// scheduler instead of piling up tasks.
const BINDINGS_IN_FLIGHT: usize = 128;

/// Counters of what the scheduler did (for tests and the benchmark's reading).
#[derive(Debug, Default)]
pub struct Stats {
    /// Decisions made.
    pub decisions: AtomicU64,
    /// Bindings the API accepted.
    pub bound: AtomicU64,
    /// Pods no node took, and decisions or bindings that failed.
    pub unschedulable: AtomicU64,
    pub errors: AtomicU64,
    /// Times the loop woke from waiting (a notification or a deadline).
    pub wakeups: AtomicU64,
}

/// The scheduler's shared state: what the informer handlers update and the loop reads.
pub struct Scheduler {
    cache: Mutex<Cache>,
    queue: Mutex<SchedulingQueue>,
    /// Wakes the loop when a pod becomes active.
    wake: Notify,
    pub stats: Stats,
}

fn pods() -> &'static ResourceInfo {
    registry::find("", "v1", "pods")
        .unwrap_or_else(|| panic!("built-in kind pods is not registered"))
}

impl Scheduler {
    pub fn new() -> Arc<Scheduler> {
        Arc::new(Scheduler {
            cache: Mutex::new(Cache::new()),
            queue: Mutex::new(SchedulingQueue::new()),
            wake: Notify::new(),
            stats: Stats::default(),
        })
    }

    /// Registers the scheduler's informer handlers.
    pub fn register(self: &Arc<Self>, builder: &mut InformersBuilder) {
        let s = self.clone();
        builder.on_change("pods", Arc::new(move |c: Change<'_>| s.on_pod(c)));
        let s = self.clone();
        builder.on_change("nodes", Arc::new(move |c: Change<'_>| s.on_node(c)));
        let s = self.clone();
        builder.on_change(
            "namespaces",
            Arc::new(move |c: Change<'_>| {
                let mut cache = s.cache.lock();
                match c {
                    Change::Deleted(o) => cache.remove_namespace(&o.key.name),
                    Change::Resync(_) => {}
                    _ => cache.set_namespace(c.object()),
                }
            }),
        );
        let s = self.clone();
        builder.on_change(
            "services",
            Arc::new(move |c: Change<'_>| {
                let o = c.object();
                let mut cache = s.cache.lock();
                match c {
                    Change::Deleted(_) => cache.remove_service(&o.key.namespace, &o.key.name),
                    Change::Resync(_) => {}
                    _ => {
                        let selector = read_selector(o)
                            .and_then(|v| v.as_object().cloned())
                            .map(|m| {
                                m.into_iter()
                                    .filter_map(|(k, v)| v.as_str().map(|v| (k, v.to_string())))
                                    .collect()
                            })
                            .unwrap_or_default();
                        cache.set_service(&o.key.namespace, &o.key.name, selector);
                    }
                }
            }),
        );
        for (resource, kind) in [
            ("apps/replicasets", "ReplicaSet"),
            ("apps/statefulsets", "StatefulSet"),
            ("replicationcontrollers", "ReplicationController"),
        ] {
            let s = self.clone();
            builder.on_change(
                resource,
                Arc::new(move |c: Change<'_>| {
                    let o = c.object();
                    let key: OwnerKey = (kind.into(), o.key.namespace.clone(), o.key.name.clone());
                    let mut cache = s.cache.lock();
                    match c {
                        Change::Deleted(_) => cache.remove_owner(&key),
                        Change::Resync(_) => {}
                        _ => {
                            let raw = read_selector(o);
                            let selector = if kind == "ReplicationController" {
                                map_selector(raw.as_ref())
                            } else {
                                label_selector(raw.as_ref()).ok().flatten()
                            };
                            cache.set_owner(key, selector);
                        }
                    }
                }),
            );
        }
    }

    fn on_node(&self, change: Change<'_>) {
        let hints = {
            let mut cache = self.cache.lock();
            match change {
                Change::Deleted(o) => {
                    cache.remove_node(&o.key.name);
                    0
                }
                Change::Resync(_) => 0,
                _ => cache.upsert_node(change.object()),
            }
        };
        self.event(hints);
    }

    /// A cluster change: wakes the unschedulable pods it may help (and the loop, whose next
    /// pod or deadline it may have changed).
    fn event(&self, hints: hints::Hints) {
        if hints != 0 && self.queue.lock().event(hints, Instant::now()) {
            self.wake.notify_one();
        }
    }

    fn on_pod(&self, change: Change<'_>) {
        let object = change.object();
        let uid = object.uid.as_str();
        if let Change::Deleted(_) = change {
            let hints = self.cache.lock().remove_pod(uid);
            self.queue.lock().remove(uid);
            self.event(hints);
            return;
        }
        if let Change::Resync(_) = change {
            return;
        }
        let node = object.field("spec.nodeName").unwrap_or_default();
        let terminal = matches!(object.field("status.phase"), Some("Succeeded" | "Failed"));
        if !node.is_empty() {
            // Bound: it counts on its node until it ends.
            self.queue.lock().remove(uid);
            let hints = if terminal {
                self.cache.lock().remove_pod(uid)
            } else {
                self.cache_bound_pod(object)
            };
            self.event(hints);
            return;
        }
        let ours = matches!(
            object.field("spec.schedulerName"),
            None | Some("") | Some(pod::DEFAULT_SCHEDULER)
        );
        if terminal || !ours {
            self.queue.lock().remove(uid);
            return;
        }
        let pod = PodInfo::new(object.clone());
        if self.queue.lock().upsert(pod, Instant::now()) {
            self.wake.notify_one();
        }
    }

    /// Counts a bound pod; a status-only change swaps in the new object without parsing.
    fn cache_bound_pod(&self, object: &ObjectRef) -> hints::Hints {
        let mut cache = self.cache.lock();
        let node = object.field("spec.nodeName").unwrap_or_default();
        let known = cache.node_pods(node).and_then(|pods| {
            pods.iter()
                .find(|p| p.uid() == object.uid)
                .map(|p| p.spec.clone())
        });
        let reusable = known
            .filter(|spec| !cache.is_assumed(&object.uid) && spec.deleting == object.is_deleting());
        let pod = match reusable {
            Some(spec) => PodInfo {
                object: object.clone(),
                spec,
            },
            None => PodInfo::new(object.clone()),
        };
        cache.upsert_pod(pod)
    }

    /// Runs the scheduling loop until `stop`.
    pub async fn run(
        self: Arc<Self>,
        client: Client,
        recorder: EventRecorder,
        stop: CancellationToken,
    ) {
        let seed = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(1);
        let mut chooser = Chooser::new(seed);
        let slots = Arc::new(Semaphore::new(BINDINGS_IN_FLIGHT));
        let binder = Arc::new(Binder { client, recorder });
        loop {
            let next = {
                let now = Instant::now();
                let mut queue = self.queue.lock();
                queue.flush(now);
                queue.pop(now).ok_or_else(|| queue.next_deadline())
            };
            let pod = match next {
                Ok(pod) => pod,
                Err(deadline) => {
                    tokio::select! {
                        _ = stop.cancelled() => return,
                        _ = self.wake.notified() => {}
                        _ = sleep_until(deadline) => {}
                    }
                    self.stats.wakeups.fetch_add(1, Ordering::Relaxed);
                    continue;
                }
            };
            if stop.is_cancelled() {
                return;
            }
            self.stats.decisions.fetch_add(1, Ordering::Relaxed);
            let decision = chooser.decide(&self.cache.lock(), &pod);
            match decision {
                Decision::Node(node) => {
                    self.cache.lock().assume(pod.clone(), &node);
                    self.queue.lock().binding(pod.uid());
                    let slot = tokio::select! {
                        _ = stop.cancelled() => return,
                        slot = slots.clone().acquire_owned() => slot,
                    };
                    let (s, b) = (self.clone(), binder.clone());
                    tokio::spawn(async move {
                        s.bind(&b, pod, node).await;
                        drop(slot);
                    });
                }
                Decision::Unschedulable { message, hints } => {
                    self.stats.unschedulable.fetch_add(1, Ordering::Relaxed);
                    self.queue
                        .lock()
                        .unschedulable(pod.uid(), hints, Instant::now());
                    binder.report(&pod, "Unschedulable", &message);
                }
                Decision::Error(message) => {
                    self.stats.errors.fetch_add(1, Ordering::Relaxed);
                    self.queue.lock().failed(pod.uid(), Instant::now());
                    binder.report(&pod, "SchedulerError", &message);
                }
            }
            // Let the bindings and the informer run between decisions.
            tokio::task::yield_now().await;
        }
    }

    /// Sends the binding of an assumed pod; on failure the pod stops counting on the node and
    /// backs off.
    async fn bind(&self, binder: &Binder, pod: PodInfo, node: Arc<str>) {
        let body = json!({
            "apiVersion": "v1", "kind": "Binding",
            "metadata": {"name": pod.name(), "namespace": pod.namespace(), "uid": pod.uid()},
            "target": {"kind": "Node", "name": &*node},
        });
        let result = binder
            .client
            .create_subresource(pods(), pod.namespace(), pod.name(), "binding", &body)
            .await;
        match result {
            Ok(_) => {
                self.stats.bound.fetch_add(1, Ordering::Relaxed);
                binder.recorder.normal(
                    Involved::of(pods(), &pod.object),
                    "Scheduled",
                    &format!(
                        "Successfully assigned {}/{} to {node}",
                        pod.namespace(),
                        pod.name()
                    ),
                );
            }
            Err(e) => {
                self.stats.errors.fetch_add(1, Ordering::Relaxed);
                tracing::debug!(component = "scheduler", pod = %pod.key(), node = %node, error = %e, "binding failed");
                let forgotten = self.cache.lock().forget(pod.uid());
                let still_pending = {
                    let mut queue = self.queue.lock();
                    let pending = queue.contains(pod.uid());
                    if pending {
                        queue.failed(pod.uid(), Instant::now());
                    }
                    pending
                };
                if still_pending {
                    // Its backoff may end before whatever the loop sleeps until.
                    self.wake.notify_one();
                }
                if forgotten {
                    // The room it held is free again for the others.
                    self.event(hints::ASSIGNED_POD_GONE);
                }
                // A pod bound by someone else or deleted meanwhile is left as it is.
                let current = binder.client.get(pods(), pod.namespace(), pod.name());
                let unbound = current.is_some_and(|c| {
                    c.uid == pod.uid() && c.field("spec.nodeName").unwrap_or_default().is_empty()
                });
                if still_pending && unbound {
                    binder.report(
                        &pod,
                        "SchedulerError",
                        &format!(
                            "running Bind plugin \"DefaultBinder\": {}",
                            status_message(&e)
                        ),
                    );
                }
            }
        }
    }

    /// Pods waiting in the queue, by state (see `SchedulingQueue::counts`).
    pub fn queue_counts(&self) -> (usize, usize, usize, usize, usize) {
        self.queue.lock().counts()
    }

    /// Pods counted on nodes (bound and assumed).
    pub fn cached_pods(&self) -> usize {
        self.cache.lock().pod_count()
    }
}

/// What failures and successes are told through: the API client and the event recorder.
struct Binder {
    client: Client,
    recorder: EventRecorder,
}

impl Binder {
    /// A failed decision: a `FailedScheduling` event, and `PodScheduled=False` with `reason`
    /// and `message` unless the pod already says so (`updatePod`).
    fn report(&self, pod: &PodInfo, reason: &str, message: &str) {
        self.recorder.warning(
            Involved::of(pods(), &pod.object),
            "FailedScheduling",
            message,
        );
        let current = pod.spec.scheduled_condition.as_ref();
        if current.is_some_and(|(s, r, m)| s == "False" && r == reason && m == message) {
            return;
        }
        let mut condition = json!({"type": "PodScheduled", "status": "False",
                                   "lastProbeTime": null, "reason": reason, "message": message});
        // The transition time moves only when the status does.
        if current.is_none_or(|(s, _, _)| s != "False") {
            condition["lastTransitionTime"] = json!(crate::api::meta::now_rfc3339());
        }
        let patch = json!({"status": {"conditions": [condition]}});
        let client = self.client.clone();
        let (namespace, name) = (pod.namespace().to_string(), pod.name().to_string());
        tokio::spawn(async move {
            let result = client
                .patch(
                    pods(),
                    &namespace,
                    &name,
                    Some("status"),
                    PatchKind::Strategic,
                    &patch,
                )
                .await;
            match result {
                Err(e) if !e.is_not_found() => {
                    tracing::debug!(component = "scheduler", pod = %format!("{namespace}/{name}"), error = %e, "updating PodScheduled failed");
                }
                _ => {}
            }
        });
    }
}

/// The `Status` message of an API error (what client-go's error prints).
fn status_message(e: &ClientError) -> String {
    match e {
        ClientError::Status { message, .. } => message.clone(),
        other => other.to_string(),
    }
}

/// `spec.selector` of a Service or controller, read without the rest of the object.
fn read_selector(object: &ObjectRef) -> Option<Value> {
    #[derive(Deserialize)]
    struct Object {
        spec: Option<Spec>,
    }
    #[derive(Deserialize)]
    struct Spec {
        selector: Option<Value>,
    }
    serde_json::from_slice::<Object>(&object.json)
        .ok()?
        .spec?
        .selector
}

async fn sleep_until(deadline: Option<Instant>) {
    match deadline {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

/// Registers the scheduler with the informers; the runner starts its loop once the caches are
/// synced.
pub fn launch(builder: &mut InformersBuilder) -> Launch {
    let scheduler = Scheduler::new();
    scheduler.register(builder);
    Box::new(
        move |shared: &Shared, _informers: &Arc<Informers>, stop: CancellationToken| {
            let recorder = EventRecorder::start(
                shared.scheduler.clone(),
                COMPONENT,
                &shared.server_name,
                stop.clone(),
            );
            tokio::spawn(scheduler.run(shared.scheduler.clone(), recorder, stop));
        },
    )
}

#[cfg(test)]
mod tests;
