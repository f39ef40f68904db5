//! The leader-gated runner: the one place that starts and stops everything only the leader
//! may run, the same way on a single server (always the leader) and on a cluster member
//! (while it leads and has applied an entry of its term).
//!
//! While this server leads, a session runs:
//! 1. the bootstrap objects and the `kubernetes` Service's endpoints, checked every 5 s
//!    against the API servers that are up to date (`bootstrap`);
//! 2. the default RBAC roles and bindings, reconciled once the system namespaces exist
//!    (`rbac_defaults`); everything below waits for them, since the scheduler is authorized by
//!    its default role;
//! 3. the control plane's leader Leases, renewed every 2 s (`leader_lease`);
//! 4. the shared informers and every controller's workers, and the scheduler's loop, once the
//!    caches are synced.
//!
//! When leadership goes (or the server stops) the session's token is cancelled: every loop
//! stops, work queues shut down, and writes already on their way fail, because the session's
//! writer never forwards. A new session (this server leading again later) starts from fresh
//! caches and queues.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use super::apiservice_availability::ApiServiceAvailability;
use super::bootstrap::{self, ApiServers};
use super::clusterrole_aggregation::ClusterRoleAggregation;
use super::crd_cleanup::CrdCleanup;
use super::cronjob::CronJobs;
use super::csr_approving::CsrApprover;
use super::csr_signer::CsrSigner;
use super::daemonset::DaemonSets;
use super::deployment::Deployments;
use super::disruption::Disruption;
use super::endpoints::Endpoints;
use super::event_ttl::EventTtl;
use super::garbage_collector::GarbageCollector;
use super::informer::{Informers, InformersBuilder};
use super::job::Jobs;
use super::namespace::Namespaces;
use super::node_ipam::NodeIpam;
use super::node_lifecycle::NodeLifecycle;
use super::pod_gc::PodGc;
use super::queue::WorkQueue;
use super::replicaset::{ReplicaSets, ReplicationControllers};
use super::resource_quota::ResourceQuotas;
use super::root_ca::RootCaPublisher;
use super::service_account::ServiceAccounts;
use super::service_account_token::TokenSecrets;
use super::service_lb::ServiceLb;
use super::statefulset::StatefulSets;
use super::taint_eviction::TaintEviction;
use super::ttl_after_finished::TtlAfterFinished;
use super::worker::{self, Controller};
use super::{leader_lease, rbac_defaults, scheduler, Shared};
use crate::api::ApiContext;
use crate::client::{identities, Client};

/// How often the leader re-checks the bootstrap objects and the published endpoints.
const RECONCILE_BOOTSTRAP_EVERY: Duration = Duration::from_secs(5);

/// What the runner needs from the server.
pub struct RunnerInputs {
    /// `Some(term)` while this server may run the leader-gated singletons.
    pub leading: watch::Receiver<Option<u64>>,
    /// The context of their writes: on a cluster member, the leader-only writer.
    pub ctx: Arc<ApiContext>,
    /// This server's name; the leader Leases' holder identity is `<name>_<uuid>`.
    pub server_name: String,
    /// Where the `kubernetes` Service points now (the up-to-date members on a cluster).
    pub api_servers: Arc<dyn Fn() -> ApiServers + Send + Sync>,
    /// Delay before a new leader's first pass over the bootstrap objects (a test seam to
    /// show readiness waiting for them; zero otherwise).
    pub bootstrap_delay: Duration,
    pub settings: super::ControllerSettings,
}

/// Runs sessions as leadership comes and goes, until `shutdown`.
pub async fn run(mut inputs: RunnerInputs, shutdown: CancellationToken) {
    // One identity per process, as kube-controller-manager's `<hostname>_<uuid>`.
    let identity = format!("{}_{}", inputs.server_name, uuid::Uuid::new_v4());
    let settings = Arc::new(inputs.settings.clone());
    let mut session: Option<CancellationToken> = None;
    loop {
        let leading = *inputs.leading.borrow_and_update();
        match (leading, &session) {
            (Some(term), None) => {
                tracing::info!(
                    component = "controllers",
                    term,
                    "leading: starting the controllers"
                );
                let token = shutdown.child_token();
                start_session(&inputs, &settings, &identity, token.clone());
                session = Some(token);
            }
            (None, Some(token)) => {
                tracing::info!(
                    component = "controllers",
                    "no longer leading: stopping the controllers"
                );
                token.cancel();
                session = None;
            }
            _ => {}
        }
        tokio::select! {
            _ = shutdown.cancelled() => break,
            changed = inputs.leading.changed() => if changed.is_err() { break },
        }
    }
    if let Some(token) = session {
        token.cancel();
    }
}

/// A function that starts one controller once the informers are synced.
pub(super) type Launch = Box<dyn FnOnce(&Shared, &Arc<Informers>, CancellationToken) + Send>;

/// Registers controller `C` with the informers; returns how to start it.
fn launch<C: Controller>(builder: &mut InformersBuilder) -> Launch {
    let queue = WorkQueue::<C::Key>::new();
    C::register(builder, &queue);
    Box::new(move |shared, informers, stop| {
        let controller = Arc::new(C::new(shared, informers, queue.clone()));
        tokio::spawn(worker::run(controller, queue, stop));
    })
}

/// Every controller the runner starts, registered with `builder`: kube-controller-manager's
/// and the scheduler, each unless its `--disable-…` flag is given.
fn controllers(
    builder: &mut InformersBuilder,
    settings: &super::ControllerSettings,
) -> Vec<Launch> {
    let mut launches = Vec::new();
    if settings.run_controller_manager {
        launches.extend(controller_manager(builder));
    }
    if settings.run_scheduler {
        launches.push(scheduler::launch(builder));
    }
    launches
}

/// kube-controller-manager's controllers.
fn controller_manager(builder: &mut InformersBuilder) -> Vec<Launch> {
    vec![
        launch::<ServiceAccounts>(builder),
        launch::<RootCaPublisher>(builder),
        launch::<TokenSecrets>(builder),
        launch::<EventTtl>(builder),
        launch::<NodeLifecycle>(builder),
        launch::<TaintEviction>(builder),
        launch::<PodGc>(builder),
        launch::<Endpoints>(builder),
        launch::<NodeIpam>(builder),
        launch::<ServiceLb>(builder),
        launch::<Disruption>(builder),
        launch::<Namespaces>(builder),
        launch::<GarbageCollector>(builder),
        launch::<ReplicaSets>(builder),
        launch::<ReplicationControllers>(builder),
        launch::<Deployments>(builder),
        launch::<StatefulSets>(builder),
        launch::<DaemonSets>(builder),
        launch::<Jobs>(builder),
        launch::<CronJobs>(builder),
        launch::<TtlAfterFinished>(builder),
        launch::<ClusterRoleAggregation>(builder),
        launch::<ResourceQuotas>(builder),
        launch::<CrdCleanup>(builder),
        launch::<ApiServiceAvailability>(builder),
        launch::<CsrApprover>(builder),
        launch::<CsrSigner>(builder),
    ]
}

fn start_session(
    inputs: &RunnerInputs,
    settings: &Arc<super::ControllerSettings>,
    identity: &str,
    stop: CancellationToken,
) {
    let shared = Shared {
        controller_manager: Client::new(
            inputs.ctx.clone(),
            identities::controller_manager(),
            "kube-controller-manager",
        ),
        scheduler: Client::new(
            inputs.ctx.clone(),
            identities::scheduler(),
            "kube-scheduler",
        ),
        apiserver: Client::new(
            inputs.ctx.clone(),
            identities::apiserver(),
            "kube-apiserver",
        ),
        server_name: inputs.server_name.clone(),
        settings: settings.clone(),
        stop: stop.clone(),
    };
    tokio::spawn(keep_bootstrap_objects(
        shared.apiserver.clone(),
        inputs.api_servers.clone(),
        inputs.bootstrap_delay,
        stop.clone(),
    ));
    let store = inputs.ctx.store.clone();
    let identity = identity.to_string();
    tokio::spawn(async move {
        if ensure_rbac_defaults(&shared.apiserver, &stop).await {
            start_control_plane(shared, identity, store, stop);
        }
    });
}

/// The leader Leases, the informers, the controllers and the scheduler.
fn start_control_plane(
    shared: Shared,
    identity: String,
    store: Arc<crate::kube::store::Store>,
    stop: CancellationToken,
) {
    if shared.settings.run_controller_manager {
        tokio::spawn(leader_lease::hold(
            shared.controller_manager.clone(),
            "kube-controller-manager",
            identity.clone(),
            stop.clone(),
        ));
    }
    if shared.settings.run_scheduler {
        tokio::spawn(leader_lease::hold(
            shared.scheduler.clone(),
            "kube-scheduler",
            identity,
            stop.clone(),
        ));
    }
    let mut builder = InformersBuilder::new();
    let launches = controllers(&mut builder, &shared.settings);
    let informers = Arc::new(builder.start(store));
    {
        let (informers, stop) = (informers.clone(), stop.clone());
        tokio::spawn(async move { informers.run(stop).await });
    }
    for start in launches {
        start(&shared, &informers, stop.clone());
    }
}

/// Reconciles the default RBAC objects once the namespaces they live in exist, retrying until
/// it succeeds; false when `stop` came first.
async fn ensure_rbac_defaults(client: &Client, stop: &CancellationToken) -> bool {
    let mut failing = false;
    loop {
        let store = client.store();
        let namespaces_exist = ["kube-system", "kube-public"].iter().all(|ns| {
            store
                .get(&crate::kube::object::ObjectKey::new("namespaces", "", *ns))
                .is_some()
        });
        if namespaces_exist {
            tokio::select! {
                _ = stop.cancelled() => return false,
                result = rbac_defaults::reconcile(client) => match result {
                    Ok(()) => return true,
                    Err(e) if !failing => {
                        failing = true;
                        tracing::warn!(component = "controllers", error = %e, "default RBAC objects: retrying");
                    }
                    Err(_) => {}
                }
            }
        }
        tokio::select! {
            _ = stop.cancelled() => return false,
            _ = tokio::time::sleep(Duration::from_millis(100)) => {}
        }
    }
}

/// Ensures the bootstrap objects now and every `RECONCILE_BOOTSTRAP_EVERY` until `stop`.
async fn keep_bootstrap_objects(
    client: Client,
    api_servers: Arc<dyn Fn() -> ApiServers + Send + Sync>,
    delay: Duration,
    stop: CancellationToken,
) {
    if !delay.is_zero() {
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = tokio::time::sleep(delay) => {}
        }
    }
    let mut failing = false;
    loop {
        let servers = api_servers();
        tokio::select! {
            _ = stop.cancelled() => return,
            result = bootstrap::ensure_all(&client, &servers) => match result {
                Ok(()) => failing = false,
                Err(e) if !failing => {
                    failing = true;
                    tracing::warn!(component = "controllers", error = %e, "bootstrap objects: retrying");
                }
                Err(_) => {}
            }
        }
        // Retry a failure soon; otherwise the periodic check.
        let wait = if failing {
            Duration::from_millis(500)
        } else {
            RECONCILE_BOOTSTRAP_EVERY
        };
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = tokio::time::sleep(wait) => {}
        }
    }
}
