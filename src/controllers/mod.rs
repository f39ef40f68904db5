//! The control plane that acts on stored objects: what kube-controller-manager and
//! kube-scheduler do in Kubernetes, run inside the API server by the leader only.
//!
//! # Layout
//! - [`runner`]: starts a session of everything below while this server leads, stops it when
//!   leadership goes; the same in single-server and cluster mode.
//! - [`informer`]: shared informers over the local store (caches holding the store's own
//!   objects, handlers, relist after falling behind, resync); [`queue`]: the work queue
//!   (deduplicated keys, rate-limited retries, delays); [`worker`]: the `Controller` trait
//!   and the loop its workers run.
//! - [`events`]: the event recorder (aggregation, spam filter, bounded);
//!   [`objects`]: selectors, owner references, pod conditions and times read from objects.
//! - [`leader_lease`]: the `kube-controller-manager` and `kube-scheduler` Leases;
//!   [`bootstrap`]: the system namespaces and the `kubernetes` Service and endpoints.
//! - Controllers, one file each: [`service_account`] (`default` in every namespace),
//!   [`root_ca`] (`kube-root-ca.crt` in every namespace), [`event_ttl`] (Events expire),
//!   [`node_lifecycle`] (silent nodes, taints from conditions), [`taint_eviction`] (pods
//!   leave NoExecute-tainted nodes), [`pod_gc`] (terminated and orphaned pods),
//!   [`endpoints`] (EndpointSlices and Endpoints of Services); [`taints`]:
//!   taints and tolerations.
//!
//! Every write goes through the in-process client (`crate::client`), so controllers' writes
//! get the API's defaults, validation and managedFields, and fail on a deposed leader.

pub mod bootstrap;
pub mod endpoints;
pub mod event_ttl;
pub mod events;
pub mod informer;
pub mod leader_lease;
pub mod node_lifecycle;
pub mod objects;
pub mod pod_gc;
pub mod queue;
pub mod root_ca;
pub mod runner;
pub mod service_account;
pub mod taint_eviction;
pub mod taints;
pub mod worker;

use crate::client::Client;

/// What every controller of a session shares: clients under the control plane's identities.
#[derive(Clone)]
pub struct Shared {
    /// kube-controller-manager's identity and field manager.
    pub controller_manager: Client,
    /// kube-scheduler's.
    pub scheduler: Client,
    /// The API server's own (bootstrap objects, endpoints).
    pub apiserver: Client,
    /// This server's name (events' `source.host`).
    pub server_name: String,
    pub settings: std::sync::Arc<ControllerSettings>,
    /// The session's end: loops a controller starts (event writers …) stop with it.
    pub stop: tokio_util::sync::CancellationToken,
}

/// Settings of the controllers, fixed for the life of the process.
#[derive(Debug, Clone)]
pub struct ControllerSettings {
    /// How long an Event lives after its last update (`--event-ttl`, default 1 h).
    pub event_ttl: std::time::Duration,
    /// The cluster CA certificate (PEM), published as `kube-root-ca.crt` in every namespace.
    pub ca_cert_pem: String,
    /// How long a node may go unheard before it is marked Unknown
    /// (`--node-monitor-grace-period`, default 40 s).
    pub node_monitor_grace_period: std::time::Duration,
    /// Terminated pods kept before the oldest are deleted (`--terminated-pod-gc-threshold`,
    /// default 12,500; 0 keeps all).
    pub terminated_pod_gc_threshold: usize,
}
