//! The pod workers: everything that runs pods on this node, as kubelet's pod workers do.
//! The pods bound to the node come from a watch; each pod UID gets one worker that moves
//! it through sync → terminating → terminated (`worker`), making the node match the spec
//! and writing the pod's status; containers that exist when the agent starts are adopted
//! by the workers of their pods (not restarted, their restart counts kept), and those of
//! pods the API no longer has are stopped and removed.
//!
//! # Layout
//! - [`source`]: list and watch of the pods with `spec.nodeName=<node>`.
//! - `dispatch`: routes the source's pods, the PLEG's events and object changes to the
//!   workers; starts a worker per new pod UID and for orphans at start.
//! - [`worker`]: one pod's state machine; `sync` (one sync pass), `terminate` (stopping
//!   and removing), [`status`] (the pod status kubelet writes), [`backoff`]
//!   (CrashLoopBackOff, ImagePullBackOff).
//! - [`pod`]: the pod object as the agent reads it; [`containers`] and [`identity`]: a
//!   container's runtime description from its spec and image.
//! - [`objects`]: the ConfigMaps and Secrets pods use, watched while they are used.
//! - [`plug`]: where volumes, environment sources, probes and exec hooks plug in.
//! - [`env`]: a container's environment, with [`service_env`] the Service variables;
//!   [`volumes`]: the pod's volumes; [`probes`]: startup, liveness and readiness probes.
//! - [`context`]: what the workers share.
//!
//! Behaviour for users (phases, reasons, restarts, deletion): docs/agent.md, "Pods".

pub mod backoff;
pub mod containers;
pub mod context;
mod dispatch;
pub mod env;
pub mod identity;
pub mod objects;
pub mod plug;
pub mod pod;
pub mod probes;
pub mod service_env;
pub mod source;
pub mod status;
mod sync;
mod terminate;
pub mod volumes;
pub mod worker;

use std::collections::HashMap;
use std::sync::Arc;

use parking_lot::Mutex;
use tokio::sync::{mpsc, watch, Notify};
use tokio_util::sync::CancellationToken;

pub use context::{PodsContext, PodsSettings};
pub use status::Phase;

use crate::agent::api::ApiClient;
use crate::agent::images::Images;
use crate::agent::proxy::informer::Shared as ServiceInformer;
use crate::agent::runtime::{pleg, Runtime};
use crate::agent::sandbox::Sandboxes;

/// Wakes a pod's worker: the PLEG saw one of its containers change, an object it uses
/// changed.
#[derive(Clone, Default)]
pub struct PodWaker {
    notifies: Arc<Mutex<HashMap<String, Arc<Notify>>>>,
}

impl PodWaker {
    pub fn wake(&self, uid: &str) {
        if let Some(n) = self.notifies.lock().get(uid) {
            n.notify_one();
        }
    }

    fn register(&self, uid: &str) -> Arc<Notify> {
        self.notifies
            .lock()
            .entry(uid.to_string())
            .or_default()
            .clone()
    }

    fn unregister(&self, uid: &str) {
        self.notifies.lock().remove(uid);
    }
}

/// The phase of every pod with a worker, and how many run (for sd_notify's `STATUS=`).
#[derive(Clone)]
pub struct PodCounts {
    phases: Arc<Mutex<HashMap<String, Phase>>>,
    running: watch::Sender<usize>,
}

impl Default for PodCounts {
    fn default() -> Self {
        PodCounts {
            phases: Arc::default(),
            running: watch::Sender::new(0),
        }
    }
}

impl PodCounts {
    fn update(&self, phases: &HashMap<String, Phase>) {
        let n = phases.values().filter(|p| **p == Phase::Running).count();
        self.running.send_if_modified(|cur| {
            let changed = *cur != n;
            *cur = n;
            changed
        });
    }

    pub(crate) fn set(&self, uid: &str, phase: Phase) {
        let mut phases = self.phases.lock();
        if phases.get(uid) != Some(&phase) {
            phases.insert(uid.to_string(), phase);
            self.update(&phases);
        }
    }

    pub(crate) fn remove(&self, uid: &str) {
        let mut phases = self.phases.lock();
        if phases.remove(uid).is_some() {
            self.update(&phases);
        }
    }

    /// How many pods are Running.
    pub fn running(&self) -> watch::Receiver<usize> {
        self.running.subscribe()
    }
}

/// What the pod workers are built from.
pub struct PodsDeps {
    pub api: ApiClient,
    pub runtime: Arc<Runtime>,
    pub images: Arc<Images>,
    pub sandboxes: Arc<Sandboxes>,
    /// The Services the proxy's informer follows (the containers' Service variables).
    pub services: Arc<ServiceInformer>,
    pub settings: PodsSettings,
}

/// Starts the pod source, the PLEG and the dispatcher; they run until `stop` (the pods
/// keep running after it) and keep `counts`. The runtime's containers must have been
/// adopted first.
pub fn start(deps: PodsDeps, counts: PodCounts, stop: CancellationToken) {
    let waker = PodWaker::default();
    let (objects_tx, objects_rx) = mpsc::channel(64);
    let objects = objects::Objects::new(deps.api.clone(), objects_tx, stop.clone());
    let (probes_tx, probes_rx) = mpsc::channel(256);
    let ctx = Arc::new(PodsContext {
        starts: tokio::sync::Semaphore::new(deps.settings.parallel_starts.max(1)),
        probes: plug::Probes::new(deps.runtime.clone(), probes_tx),
        settings: deps.settings,
        api: deps.api,
        runtime: deps.runtime,
        images: deps.images,
        sandboxes: deps.sandboxes,
        services: deps.services,
        objects,
        waker,
    });
    let (source_tx, source_rx) = mpsc::channel(256);
    tokio::spawn(source::run(
        ctx.api.clone(),
        ctx.settings.node_name.clone(),
        source_tx,
        stop.clone(),
    ));
    let (pleg_tx, pleg_rx) = mpsc::channel(1024);
    tokio::spawn(pleg::run(
        ctx.runtime.clone(),
        pleg::RELIST_PERIOD,
        pleg_tx,
        stop.clone(),
    ));
    tokio::spawn(dispatch::run(
        ctx,
        counts.clone(),
        dispatch::Inputs {
            source: source_rx,
            pleg: pleg_rx,
            objects: objects_rx,
            probes: probes_rx,
        },
        stop,
    ));
}
