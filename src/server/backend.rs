//! The backend of an API server: the one value that says how its writes become durable and
//! who may run the leader-gated singletons, so that the rest of the process (handlers, the
//! runner, readiness, shutdown) asks it instead of branching on the mode.
//!
//! - `Single`: `objects.wal`; the server is always the leader; every read is linearizable
//!   already (its store is the only copy).
//! - `Member`: a Raft cluster member; client writes go through the cluster writer (a
//!   follower forwards its own writes to the leader as proposals), reads of the latest state
//!   pass the ReadIndex barrier, and the singletons run while it leads, writing through the
//!   leader-only writer.

use std::net::IpAddr;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use crate::api::ApiContext;
use crate::cluster::endpoints::ClusterEndpoints;
use crate::cluster::leader::{self, LeaderReads};
use crate::cluster::node::ClusterNode;
use crate::cluster::raft_writer::{ClusterWriter, LeaderOnlyWriter};
use crate::cluster::reads::ReadIndexBarrier;
use crate::cluster::start::Started;
use crate::kube::store::Store;
use crate::kube::wal::WalWriter;
use crate::kube::writer::{LocalReads, ReadBarrier, Writer};
use crate::systemd::readiness::{Readiness, ReadinessReporter, Role};
use crate::systemd::watchdog::Heartbeat;

/// How this server stores writes.
pub enum Backend {
    Single(Single),
    Member(Member),
}

/// A single server.
pub struct Single {
    wal: Arc<WalWriter>,
    /// `/cacerts`, its own address as the server list, node credentials.
    endpoints: Arc<ClusterEndpoints>,
    /// Always `Some(0)`: a single server leads for its whole life.
    leading: watch::Sender<Option<u64>>,
}

/// A running cluster member.
pub struct Member {
    pub node: Arc<ClusterNode>,
    pub endpoints: Arc<ClusterEndpoints>,
}

impl Backend {
    pub fn single(wal: WalWriter, endpoints: Arc<ClusterEndpoints>) -> Backend {
        Backend::Single(Single {
            wal: Arc::new(wal),
            endpoints,
            leading: watch::Sender::new(Some(0)),
        })
    }

    pub fn member(started: Started) -> Backend {
        Backend::Member(Member {
            node: started.node,
            endpoints: started.endpoints,
        })
    }

    /// The writer of client requests (and of this server's own writes, like its Lease).
    pub fn writer(&self) -> Arc<dyn Writer> {
        match self {
            Backend::Single(s) => s.wal.clone(),
            Backend::Member(m) => Arc::new(ClusterWriter::new(m.node.clone())),
        }
    }

    /// The barrier reads of the latest state and writes pass first.
    pub fn reads(&self) -> Arc<dyn ReadBarrier> {
        match self {
            Backend::Single(_) => Arc::new(LocalReads),
            Backend::Member(m) => Arc::new(ReadIndexBarrier::start(m.node.clone())),
        }
    }

    /// The context of the leader-gated singletons: over `ctx`'s store, settings and
    /// allocators, with writes that never forward.
    pub fn leader_context(&self, ctx: &ApiContext) -> ApiContext {
        match self {
            Backend::Single(s) => ctx.sharing_with(s.wal.clone(), Arc::new(LocalReads)),
            Backend::Member(m) => ctx.sharing_with(
                Arc::new(LeaderOnlyWriter {
                    node: m.node.clone(),
                }),
                Arc::new(LeaderReads {
                    node: m.node.clone(),
                }),
            ),
        }
    }

    /// `Some(term)` while this server may run the leader-gated singletons.
    pub fn leading(&self) -> watch::Receiver<Option<u64>> {
        match self {
            Backend::Single(s) => s.leading.subscribe(),
            Backend::Member(m) => leader::watch_leading(m.node.clone()),
        }
    }

    /// The API servers the `kubernetes` Service should list: the members that are up to date
    /// (falling back to `own` while none is known), or this server's own addresses.
    pub fn api_server_ips(&self, own: Vec<IpAddr>) -> Arc<dyn Fn() -> Vec<IpAddr> + Send + Sync> {
        match self {
            Backend::Single(_) => Arc::new(move || own.clone()),
            Backend::Member(m) => {
                let node = m.node.clone();
                Arc::new(move || {
                    let ips = leader::up_to_date_ips(&node);
                    if ips.is_empty() {
                        own.clone()
                    } else {
                        ips
                    }
                })
            }
        }
    }

    /// The cluster endpoints of the API port (`/cacerts`, the server list, node credentials;
    /// on a member also joins and forwarding).
    pub fn cluster_endpoints(&self) -> Arc<ClusterEndpoints> {
        match self {
            Backend::Single(s) => s.endpoints.clone(),
            Backend::Member(m) => m.endpoints.clone(),
        }
    }

    /// Starts what keeps `/readyz`, sd_notify and the watchdog current until `shutdown`. Both
    /// modes are ready only once `bootstrapped` says the store holds what a client expects
    /// of a running server (the bootstrap objects; a single server also its own Lease).
    pub fn watch_health(
        &self,
        ctx: Arc<ApiContext>,
        bootstrapped: Arc<dyn Fn(&Store) -> bool + Send + Sync>,
        readiness: Arc<ReadinessReporter>,
        heartbeat: Heartbeat,
        shutdown: CancellationToken,
    ) {
        match self {
            Backend::Single(_) => {
                tokio::spawn(beat_while_running(heartbeat, shutdown.clone()));
                tokio::spawn(single_ready_when_bootstrapped(
                    ctx,
                    bootstrapped,
                    readiness,
                    shutdown,
                ));
            }
            Backend::Member(m) => {
                tokio::spawn(crate::cluster::readiness::beat_while_core_responds(
                    m.node.clone(),
                    heartbeat,
                    shutdown.clone(),
                ));
                tokio::spawn(crate::cluster::readiness::readiness_loop(
                    m.node.clone(),
                    ctx,
                    bootstrapped,
                    readiness,
                    shutdown,
                ));
            }
        }
    }

    /// Stops the backend after the listener drained: a leader hands off to the most
    /// up-to-date voter first. (The WAL's flush thread stops when the last writer goes.)
    pub async fn stop(self) {
        if let Backend::Member(m) = self {
            crate::cluster::handoff::hand_off(&m.node).await;
            m.node.shutdown().await;
        }
    }
}

/// Beats `heartbeat` every second until `stop`: proof that the runtime runs its tasks (the
/// liveness signal of a single server, and of a member until its Raft core exists).
pub async fn beat_while_running(heartbeat: Heartbeat, stop: CancellationToken) {
    while !stop.is_cancelled() {
        heartbeat.beat();
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = tokio::time::sleep(std::time::Duration::from_secs(1)) => {}
        }
    }
}

/// A single server is ready once the runner has created the bootstrap objects.
async fn single_ready_when_bootstrapped(
    ctx: Arc<ApiContext>,
    bootstrapped: Arc<dyn Fn(&Store) -> bool + Send + Sync>,
    readiness: Arc<ReadinessReporter>,
    shutdown: CancellationToken,
) {
    let mut applied = ctx.store.applied_versions();
    while !bootstrapped(&ctx.store) {
        tokio::select! {
            _ = shutdown.cancelled() => return,
            changed = applied.changed() => if changed.is_err() { return },
        }
    }
    ctx.ready.store(true, Ordering::SeqCst);
    tracing::info!(component = "server", "ready");
    readiness.set(
        Readiness::Ready {
            role: Role::Single,
            term: 0,
            applied: ctx.store.resource_version(),
        },
        "WAL replayed, listening, bootstrap objects present",
    );
}
