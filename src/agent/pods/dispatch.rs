//! The dispatcher: one loop that owns the map of workers (pod UID → the channel of the
//! pod's latest version) and routes what happens to them:
//!
//! - a pod added or changed goes to its worker, started for a UID seen the first time; a
//!   pod the API finished (Succeeded, Failed) with nothing of it on the node gets none;
//! - a pod deleted from the API, or missing from a new list, is `Gone` for its worker;
//! - after the first list, pods that have containers or a sandbox on the node but are not
//!   in the API (deleted while the agent was down) get a worker that stops and removes
//!   them (orphans);
//! - PLEG events, probe updates and changes of the ConfigMaps and Secrets a pod uses wake
//!   its worker;
//! - a worker that ended is forgotten; its UID is remembered for a while so that a late
//!   event of the pod does not start a new worker.

use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::Value;
use tokio::sync::{mpsc, watch};
use tokio_util::sync::CancellationToken;

use super::containers::annotations;
use super::context::PodsContext;
use super::objects::{self, ObjectKey};
use super::pod::Pod;
use super::probes::ProbeUpdate;
use super::source::SourceEvent;
use super::worker::{Observed, Worker};
use super::PodCounts;
use crate::agent::runtime::pleg::PodEvent;
use crate::agent::runtime::PodRef;

/// How long an ended worker's UID is remembered.
const TOMBSTONE_TTL: Duration = Duration::from_secs(600);
/// At most this many remembered UIDs.
const MAX_TOMBSTONES: usize = 4096;

pub(super) struct Inputs {
    pub source: mpsc::Receiver<SourceEvent>,
    pub pleg: mpsc::Receiver<PodEvent>,
    pub objects: mpsc::Receiver<ObjectKey>,
    pub probes: mpsc::Receiver<ProbeUpdate>,
}

struct Dispatcher {
    ctx: Arc<PodsContext>,
    counts: PodCounts,
    workers: HashMap<String, watch::Sender<Observed>>,
    done: mpsc::UnboundedSender<String>,
    ended: VecDeque<(String, Instant)>,
    ended_set: HashSet<String>,
    listed: bool,
    stop: CancellationToken,
}

pub(super) async fn run(
    ctx: Arc<PodsContext>,
    counts: PodCounts,
    mut inputs: Inputs,
    stop: CancellationToken,
) {
    let (done, mut finished) = mpsc::unbounded_channel();
    let mut d = Dispatcher {
        ctx,
        counts,
        workers: HashMap::new(),
        done,
        ended: VecDeque::new(),
        ended_set: HashSet::new(),
        listed: false,
        stop: stop.clone(),
    };
    loop {
        tokio::select! {
            _ = stop.cancelled() => return,
            event = inputs.source.recv() => match event {
                Some(event) => d.on_source(event),
                None => return,
            },
            Some(event) = inputs.pleg.recv() => d.ctx.waker.wake(&event.pod_uid),
            Some(key) = inputs.objects.recv() => {
                for uid in d.ctx.objects.users(&key) {
                    d.ctx.waker.wake(&uid);
                }
            }
            Some(update) = inputs.probes.recv() => {
                d.ctx.probes.on_update(&update);
                d.ctx.waker.wake(&update.pod_uid);
            }
            Some(uid) = finished.recv() => d.on_finished(uid),
        }
    }
}

impl Dispatcher {
    fn on_source(&mut self, event: SourceEvent) {
        match event {
            SourceEvent::Changed(object) => self.on_pod(object),
            SourceEvent::Deleted(object) => {
                if let Some(uid) = object["metadata"]["uid"].as_str() {
                    self.gone(uid);
                }
            }
            SourceEvent::Listed(items) => {
                let mut listed = HashSet::new();
                for object in items {
                    if let Some(uid) = object["metadata"]["uid"].as_str() {
                        listed.insert(uid.to_string());
                    }
                    self.on_pod(object);
                }
                let missing: Vec<String> = self
                    .workers
                    .keys()
                    .filter(|uid| !listed.contains(*uid))
                    .cloned()
                    .collect();
                for uid in missing {
                    self.gone(&uid);
                }
                if !self.listed {
                    self.listed = true;
                    self.adopt_orphans(&listed);
                }
            }
        }
    }

    fn on_pod(&mut self, object: Value) {
        let pod = match Pod::from_api(object) {
            Ok(pod) => pod,
            Err(e) => {
                tracing::warn!(component = "pods", "a pod the agent cannot read: {e}");
                return;
            }
        };
        if self.ended_set.contains(&pod.uid) {
            return;
        }
        self.ctx.objects.set_pod(&pod.uid, objects::refs_of(&pod));
        if let Some(tx) = self.workers.get(&pod.uid) {
            tx.send_replace(Observed::Present(Box::new(pod)));
            return;
        }
        // Containers and sandbox live in the pod's directory.
        let local = self.ctx.sandboxes.pod_dir(&pod.uid).exists();
        if pod.api_phase_is_terminal() && !local {
            // Finished before, nothing of it here: nothing to do.
            self.ctx.objects.remove_pod(&pod.uid);
            return;
        }
        self.spawn(pod.clone(), Observed::Present(Box::new(pod)));
    }

    fn gone(&mut self, uid: &str) {
        if let Some(tx) = self.workers.get(uid) {
            tx.send_replace(Observed::Gone);
        }
    }

    fn spawn(&mut self, pod: Pod, observed: Observed) {
        let uid = pod.uid.clone();
        let in_api = matches!(observed, Observed::Present(_));
        let (tx, rx) = watch::channel(observed);
        let wake = self.ctx.waker.register(&uid);
        let worker = Worker::new(self.ctx.clone(), pod, in_api, self.counts.clone());
        let (done, stop) = (self.done.clone(), self.stop.clone());
        let ended_uid = uid.clone();
        tokio::spawn(async move {
            worker.run(rx, wake, stop).await;
            let _ = done.send(ended_uid);
        });
        self.workers.insert(uid, tx);
    }

    fn on_finished(&mut self, uid: String) {
        self.workers.remove(&uid);
        self.ctx.waker.unregister(&uid);
        if self.stop.is_cancelled() {
            return;
        }
        let now = Instant::now();
        while let Some((old, at)) = self.ended.front() {
            if now.duration_since(*at) < TOMBSTONE_TTL && self.ended.len() < MAX_TOMBSTONES {
                break;
            }
            self.ended_set.remove(old);
            self.ended.pop_front();
        }
        self.ended_set.insert(uid.clone());
        self.ended.push_back((uid, now));
    }

    /// Pods with containers or a sandbox on the node, with the grace period their
    /// containers were made with.
    fn local_uids(&self) -> BTreeMap<String, (PodRef, Option<i64>)> {
        let mut local = BTreeMap::new();
        for s in self.ctx.runtime.list() {
            let grace = s
                .annotations
                .get(annotations::GRACE)
                .and_then(|g| g.parse().ok());
            local.insert(s.pod.uid.clone(), (s.pod, grace));
        }
        for (uid, sandbox) in self.ctx.sandboxes.list() {
            if let Ok(sandbox) = sandbox {
                local.entry(uid).or_insert((sandbox.pod, None));
            }
        }
        local
    }

    /// Workers for what is on the node but not in the API.
    fn adopt_orphans(&mut self, listed: &HashSet<String>) {
        for (uid, (pod_ref, grace)) in &self.local_uids() {
            if listed.contains(uid) || self.workers.contains_key(uid) {
                continue;
            }
            tracing::info!(component = "pods", pod = %format!("{}/{}", pod_ref.namespace, pod_ref.name), uid = %uid, "on the node but not in the API: stopping it");
            self.spawn(Pod::orphan(pod_ref, *grace), Observed::Gone);
        }
    }
}
