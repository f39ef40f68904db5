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
//!   [`bootstrap`]: the system namespaces and the `kubernetes` Service and endpoints;
//!   [`rbac_defaults`]: the default roles and bindings, reconciled before the controllers start.
//! - Controllers, one file or folder each: [`service_account`] (`default` in every namespace),
//!   [`service_account_token`] (legacy tokens in `kubernetes.io/service-account-token` Secrets),
//!   [`root_ca`] (`kube-root-ca.crt` in every namespace), [`event_ttl`] (Events expire),
//!   [`node_lifecycle`] (silent nodes, taints from conditions), [`node_ipam`] (pod CIDRs), [`taint_eviction`] (pods
//!   leave NoExecute-tainted nodes), [`pod_gc`] (terminated and orphaned pods),
//!   [`endpoints`] (EndpointSlices and Endpoints of Services), [`service_lb`] (node
//!   addresses as LoadBalancer Services' ingress), [`disruption`]
//!   (PodDisruptionBudget status), [`namespace`] (deleted namespaces emptied),
//!   [`garbage_collector`] (owner references and propagation policies), [`replicaset`]
//!   (ReplicaSets and ReplicationControllers), [`deployment`]
//!   (Deployments), [`statefulset`] (StatefulSets), [`daemonset`] (DaemonSets);
//!   [`clusterrole_aggregation`] (aggregated ClusterRoles' rules); [`resource_quota`]
//!   (ResourceQuota status); [`crd_cleanup`] (a deleted CustomResourceDefinition's objects
//!   deleted before it goes); [`csr_approving`] (nodes' requests for their own client
//!   certificates approved); [`csr_signer`] (approved CertificateSigningRequests for the
//!   API server's client signers); [`apiservice_availability`] (APIServices' `Available`
//!   condition and the front-proxy trust aggregated API servers read); [`taints`]: taints
//!   and tolerations.
//! - [`claim`]: adopting and releasing objects by selector and controller reference;
//!   [`pod_control`]: pods from templates, with events and slow-start batches;
//!   [`template`]: pod template hashes and comparison; [`history`]: ControllerRevisions.
//! - [`job`]: Jobs run their pods to completion; [`cronjob`]: CronJobs make Jobs on a
//!   schedule; [`ttl_after_finished`]: finished Jobs with a TTL are deleted.
//! - [`scheduler`]: kube-scheduler's job — a node for every pending pod, bound through
//!   `pods/binding` — with its own queue and cache (a folder of its own).
//!
//! Every write goes through the in-process client (`crate::client`), so controllers' writes
//! get the API's defaults, validation and managedFields, and fail on a deposed leader.

pub(crate) mod apiservice_availability;
pub(crate) mod bootstrap;
pub(crate) mod claim;
pub(crate) mod clusterrole_aggregation;
pub(crate) mod crd_cleanup;
pub(crate) mod cronjob;
pub(crate) mod csr_approving;
pub(crate) mod csr_signer;
pub(crate) mod daemonset;
pub(crate) mod deployment;
pub(crate) mod disruption;
pub(crate) mod endpoints;
pub(crate) mod event_ttl;
pub mod events;
pub(crate) mod garbage_collector;
pub(crate) mod history;
pub mod informer;
pub(crate) mod job;
pub(crate) mod leader_lease;
pub(crate) mod namespace;
pub(crate) mod node_ipam;
pub(crate) mod node_lifecycle;
pub(crate) mod objects;
pub(crate) mod pod_control;
pub(crate) mod pod_gc;
pub(crate) mod queue;
pub(crate) mod rbac_defaults;
pub(crate) mod replicaset;
pub(crate) mod resource_quota;
pub(crate) mod root_ca;
pub(crate) mod runner;
pub mod scheduler;
pub(crate) mod service_account;
pub(crate) mod service_account_token;
pub(crate) mod service_lb;
pub(crate) mod statefulset;
pub(crate) mod taint_eviction;
pub(crate) mod taints;
pub(crate) mod template;
#[cfg(test)]
pub(crate) mod test_env;
pub(crate) mod ttl_after_finished;
pub(crate) mod worker;

use crate::client::Client;

// What a new leader writes before its controllers and scheduler start, for programs that run
// a controller or the scheduler over a store of their own (the benchmarks): the system
// namespaces and the `kubernetes` Service (`ensure_bootstrap_objects`), then the default
// roles and bindings the control plane's identities are authorized by
// (`reconcile_default_rbac`). The runner does the same, with retries.
pub use bootstrap::{ensure_all as ensure_bootstrap_objects, ApiServers, BootstrapError};
pub use rbac_defaults::{reconcile as reconcile_default_rbac, RbacDefaultsError};

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
    /// The cluster CA's key (PEM): the CSR signer issues client certificates with it.
    pub ca_key_pem: String,
    /// The longest certificate the CSR signer issues (`--cluster-signing-duration`, default
    /// one year).
    pub cluster_signing_duration: std::time::Duration,
    /// How long a node may go unheard before it is marked Unknown
    /// (`--node-monitor-grace-period`, default 40 s).
    pub node_monitor_grace_period: std::time::Duration,
    /// Terminated pods kept before the oldest are deleted (`--terminated-pod-gc-threshold`,
    /// default 12,500; 0 keeps all).
    pub terminated_pod_gc_threshold: usize,
    /// The pods' address range (`--cluster-cidr`, default 10.42.0.0/16), a /24 per node.
    pub cluster_cidr: node_ipam::ClusterCidr,
    /// Whether the session runs the controllers and holds kube-controller-manager's Lease
    /// (`--disable-controller-manager` turns it off).
    pub run_controller_manager: bool,
    /// Whether the session runs the scheduler and holds kube-scheduler's Lease
    /// (`--disable-scheduler` turns it off).
    pub run_scheduler: bool,
}

/// An in-process session for controller tests: a real store, objects.wal and API pipeline,
/// informers running, one controller built as the runner builds it.
#[cfg(test)]
pub mod testing {
    use std::sync::Arc;

    use tokio_util::sync::CancellationToken;

    use super::informer::InformersBuilder;
    use super::queue::WorkQueue;
    use super::worker::Controller;
    use super::{ControllerSettings, Shared};
    use crate::client::testing::wal_context;
    use crate::client::{identities, Client};

    pub struct Session<C: Controller> {
        pub client: Client,
        pub controller: Arc<C>,
        pub queue: WorkQueue<C::Key>,
        pub stop: CancellationToken,
        _dir: tempfile::TempDir,
    }

    impl<C: Controller> Drop for Session<C> {
        fn drop(&mut self) {
            self.stop.cancel();
        }
    }

    /// Settings with short, test-friendly values.
    pub fn settings() -> ControllerSettings {
        ControllerSettings {
            event_ttl: std::time::Duration::from_secs(3600),
            ca_cert_pem: "CA".into(),
            ca_key_pem: String::new(),
            cluster_signing_duration: std::time::Duration::from_secs(365 * 24 * 3600),
            node_monitor_grace_period: std::time::Duration::from_secs(40),
            terminated_pod_gc_threshold: 12_500,
            cluster_cidr: super::node_ipam::ClusterCidr::parse("10.42.0.0/16")
                .expect("a valid CIDR"),
            run_controller_manager: true,
            run_scheduler: true,
        }
    }

    /// Starts controller `C` (not its workers: tests call `reconcile` themselves) over a
    /// fresh store in which `setup` ran first.
    pub async fn session<C: Controller>(
        settings: ControllerSettings,
        setup: impl AsyncFnOnce(&Client),
    ) -> Session<C> {
        let dir = tempfile::tempdir().expect("temp dir");
        let ctx = wal_context(dir.path());
        let client = Client::new(ctx.clone(), identities::controller_manager(), "test");
        setup(&client).await;
        let stop = CancellationToken::new();
        let shared = Shared {
            controller_manager: client.clone(),
            scheduler: client.clone(),
            apiserver: client.clone(),
            server_name: "s1".into(),
            settings: Arc::new(settings),
            stop: stop.clone(),
        };
        let queue = WorkQueue::new();
        let mut builder = InformersBuilder::new();
        C::register(&mut builder, &queue);
        let informers = Arc::new(builder.start(ctx.store.clone()));
        {
            let (informers, stop) = (informers.clone(), stop.clone());
            tokio::spawn(async move { informers.run(stop).await });
        }
        let controller = Arc::new(C::new(&shared, &informers, queue.clone()));
        Session {
            client,
            controller,
            queue,
            stop,
            _dir: dir,
        }
    }

    /// Waits (up to 5 s) until `done`: the informers run on another task.
    pub async fn until(done: impl Fn() -> bool) {
        for _ in 0..500 {
            if done() {
                return;
            }
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
        panic!("condition not reached in 5 s");
    }
}
