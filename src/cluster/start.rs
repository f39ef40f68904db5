//! How a server becomes (or resumes being) a cluster member, and the pieces `server::run`
//! plugs into the API: the mode decided from the data directory and flags, the first
//! snapshot of `--cluster-init` (which carries a single server's objects.wal, resourceVersions
//! included), the join handshake, the Raft listener and node, and the readiness loop.

use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;
use std::path::Path;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use openraft::{LogId, Membership, ServerState, StoredMembership};
use tokio::net::TcpListener;
use tokio_rustls::TlsAcceptor;
use tokio_util::sync::CancellationToken;

use super::crash_watch;
use super::endpoints::ClusterEndpoints;
use super::join;
use super::member::{new_node_id, ClusterDir, Identity, Member};
use super::node::{ClusterNode, NodeConfig};
use super::reads::ReadIndexBarrier;
use super::rpc;
use super::timers::Timers;
use super::token::{ClusterSecret, JoinToken};
use super::writer::ClusterWriter;
use crate::api::ApiContext;
use crate::kube::store::{Store, StoreConfig};
use crate::kube::wal::{WalConfig, WalWriter};
use crate::raft::log::{LogConfig, LogStore};
use crate::raft::snapshot::{self, SnapshotFile, SnapshotMeta};
use crate::server::datadir::{read_optional, write_file, DataDir, SECRET_MODE};
use crate::server::settings::ServerSettings;
use crate::server::ServerError;
use crate::systemd::readiness::{Readiness, ReadinessReporter, Role};

/// How this start runs.
#[derive(Debug)]
pub enum Mode {
    /// No cluster: objects.wal.
    Single,
    /// `--cluster-init` on a directory that is not a member yet.
    Init { secret: ClusterSecret },
    /// `--server URL` on a directory that is not a member yet.
    Join { addr: String, token: JoinToken },
    /// The directory belongs to a cluster.
    Member(Identity),
}

fn cluster(reason: impl Into<String>) -> ServerError {
    ServerError::Cluster(reason.into())
}

/// Decides the mode from the data directory and the flags.
pub fn decide(settings: &ServerSettings, dir: &ClusterDir) -> Result<Mode, ServerError> {
    let flags = &settings.cluster;
    if let Some(identity) = dir.identity()? {
        if flags.init || flags.server.is_some() {
            tracing::info!(
                name = %identity.name,
                node_id = identity.node_id,
                "the data directory already belongs to a cluster: --cluster-init/--server ignored, restarting as that member"
            );
        }
        return Ok(Mode::Member(identity));
    }
    let token = flags
        .token
        .as_deref()
        .map(JoinToken::parse)
        .transpose()
        .map_err(|e| cluster(format!("LITEK8S_TOKEN: {e}")))?;
    if flags.init {
        let secret = match token {
            Some(token) => token.secret,
            None => ClusterSecret::generate(),
        };
        return Ok(Mode::Init { secret });
    }
    if let Some(url) = &flags.server {
        let addr = join::server_address(url).map_err(cluster)?;
        let token = token.ok_or_else(|| {
            cluster("joining needs the join token in the LITEK8S_TOKEN environment variable")
        })?;
        return Ok(Mode::Join { addr, token });
    }
    Ok(Mode::Single)
}

/// Join step before the PKI is loaded: verify the cluster CA and store what the cluster
/// shares (CA certificate and key, admin token, secret) in the data directory.
pub async fn prepare_join(
    data: &DataDir,
    dir: &ClusterDir,
    addr: &str,
    token: &JoinToken,
) -> Result<(), ServerError> {
    let ca = join::fetch_verified_ca(addr, token)
        .await
        .map_err(cluster)?;
    let bundle = join::fetch_bundle(addr, &ca, token)
        .await
        .map_err(|e| cluster(format!("joining {addr}: {e}")))?;
    if let Some(existing) = read_optional(&data.ca_cert())? {
        if existing != bundle.ca_cert {
            // A different CA here means certificates of another cluster: start over.
            let _ = std::fs::remove_file(data.server_cert());
            let _ = std::fs::remove_file(data.server_key());
        }
    }
    write_file(&data.ca_cert(), bundle.ca_cert.as_bytes(), 0o644)?;
    write_file(&data.ca_key(), bundle.ca_key.as_bytes(), SECRET_MODE)?;
    write_file(
        &data.admin_token(),
        format!("{}\n", bundle.admin_token).as_bytes(),
        SECRET_MODE,
    )?;
    write_secret(dir, &token.secret)?;
    tracing::info!(%addr, members = bundle.members.len(), "received the join bundle");
    Ok(())
}

fn write_secret(dir: &ClusterDir, secret: &ClusterSecret) -> Result<(), ServerError> {
    write_file(
        &dir.secret_file(),
        format!("{}\n", secret.as_str()).as_bytes(),
        SECRET_MODE,
    )
}

fn read_secret(dir: &ClusterDir) -> Result<ClusterSecret, ServerError> {
    let path = dir.secret_file();
    let text = read_optional(&path)?
        .ok_or_else(|| ServerError::corrupt(&path, "missing: the cluster secret of this member"))?;
    ClusterSecret::new(text.trim()).map_err(|e| ServerError::corrupt(&path, e.to_string()))
}

fn remove_dir_if_present(path: &Path) -> Result<(), ServerError> {
    match std::fs::remove_dir_all(path) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(ServerError::io(path)(e)),
    }
}

/// `--cluster-init`: the first snapshot (this member as the only voter, plus the objects of a
/// single server's objects.wal with their resourceVersions) at openraft's initial log id, and
/// the log purged up to it, so that every joiner starts from that snapshot.
fn write_first_snapshot(
    data_dir: &Path,
    dir: &ClusterDir,
    node_id: u64,
    me: &Member,
    store_config: StoreConfig,
) -> Result<u64, ServerError> {
    remove_dir_if_present(&dir.raft())?;
    let imported = Arc::new(Store::new(store_config));
    if data_dir.join("objects.wal").exists() {
        let (writer, report) = WalWriter::open(data_dir, imported.clone(), WalConfig::default())?;
        drop(writer);
        tracing::info!(
            objects = imported.snapshot().len(),
            resource_version = imported.resource_version(),
            replayed = report.replayed_mutations,
            "moving the single server's objects into the cluster's first snapshot"
        );
    }
    let first = LogId::default();
    let membership = Membership::new(
        vec![BTreeSet::from([node_id])],
        BTreeMap::from([(node_id, me.to_node())]),
    );
    let meta = SnapshotMeta {
        last_log_id: Some(first),
        last_membership: StoredMembership::new(Some(first), membership),
        snapshot_id: format!("cluster-init-{node_id}"),
    };
    let bytes = snapshot::encode(
        &meta,
        &crate::raft::sessions::Sessions::default(),
        &imported.snapshot(),
    );
    std::fs::create_dir_all(dir.snapshot()).map_err(ServerError::io(dir.snapshot()))?;
    SnapshotFile::new(&dir.snapshot())
        .save(&bytes)
        .map_err(|e| cluster(format!("writing the first snapshot: {e}")))?;
    let log = LogStore::open(&dir.log(), LogConfig::default())
        .map_err(|e| cluster(format!("{}: {e}", dir.log().display())))?;
    log.purge_upto(first)
        .map_err(|e| cluster(format!("{}: {e}", dir.log().display())))?;
    drop(log);
    Ok(imported.resource_version())
}

/// Renames objects.wal once its objects live in the cluster's snapshot.
fn retire_single_server_wal(data_dir: &Path) -> Result<(), ServerError> {
    let wal = data_dir.join("objects.wal");
    if wal.exists() {
        let retired = data_dir.join("objects.wal.imported");
        std::fs::rename(&wal, &retired).map_err(ServerError::io(&wal))?;
        tracing::info!(path = %retired.display(), "objects.wal moved into the cluster; kept as a backup");
    }
    Ok(())
}

/// A running member's pieces for `server::run`.
pub struct Started {
    pub node: Arc<ClusterNode>,
    pub endpoints: Arc<ClusterEndpoints>,
}

/// What `start` needs from the server assembly.
pub struct StartInputs<'a> {
    pub mode: Mode,
    pub settings: &'a ServerSettings,
    pub data: &'a DataDir,
    pub store: Arc<Store>,
    pub ca_cert: String,
    pub tls: TlsAcceptor,
    pub admin_token: String,
    pub api_addr: SocketAddr,
    pub shutdown: CancellationToken,
    pub readiness: Arc<ReadinessReporter>,
}

/// Starts this member: Raft node, Raft listener, and (joining) admission.
pub async fn start(inputs: StartInputs<'_>) -> Result<Started, ServerError> {
    let StartInputs {
        mode,
        settings,
        data,
        store,
        ca_cert,
        tls,
        admin_token,
        api_addr,
        shutdown,
        readiness,
    } = inputs;
    let dir = ClusterDir::new(data.root());
    let timers = Timers::from_env().map_err(cluster)?;
    let raft_port = match settings.cluster.raft_port {
        Some(port) => port,
        None => api_addr
            .port()
            .checked_add(1)
            .ok_or_else(|| cluster("the API port is 65535: pass --raft-port"))?,
    };
    let advertised = settings
        .advertised_ips()
        .first()
        .copied()
        .unwrap_or(api_addr.ip());
    let me = Member {
        name: settings.name.clone(),
        raft: SocketAddr::new(advertised, raft_port).to_string(),
        api: SocketAddr::new(advertised, api_addr.port()).to_string(),
    };
    let (identity, secret, join_addr) = match mode {
        Mode::Single => return Err(cluster("not a cluster mode")),
        Mode::Member(identity) => (identity, read_secret(&dir)?, None),
        Mode::Init { secret } => {
            let node_id = new_node_id();
            let store_config = store.config().clone();
            let data_dir = data.root().to_path_buf();
            let (cd, me2) = (dir.clone(), me.clone());
            let rv = tokio::task::spawn_blocking(move || {
                write_first_snapshot(&data_dir, &cd, node_id, &me2, store_config)
            })
            .await
            .map_err(|e| cluster(format!("writing the first snapshot: {e}")))??;
            write_secret(&dir, &secret)?;
            let identity = Identity {
                node_id,
                name: settings.name.clone(),
            };
            dir.write_identity(&identity)?;
            retire_single_server_wal(data.root())?;
            tracing::info!(
                component = "raft",
                node_id,
                resource_version = rv,
                "initialized a new cluster"
            );
            (identity, secret, None)
        }
        Mode::Join { addr, token } => {
            remove_dir_if_present(&dir.raft())?;
            let identity = Identity {
                node_id: new_node_id(),
                name: settings.name.clone(),
            };
            (identity, token.secret, Some(addr))
        }
    };
    let token_text = JoinToken::for_cluster(&ca_cert, &secret);
    write_file(
        &dir.join_token_file(),
        format!("{token_text}\n").as_bytes(),
        SECRET_MODE,
    )?;

    let raft_bind = SocketAddr::new(settings.listen.ip(), raft_port);
    let raft_tcp = std::net::TcpListener::bind(raft_bind).map_err(|error| ServerError::Bind {
        addr: raft_bind,
        error,
    })?;
    raft_tcp
        .set_nonblocking(true)
        .map_err(ServerError::io("raft listener"))?;
    let node = ClusterNode::start(NodeConfig {
        id: identity.node_id,
        me: me.clone(),
        store: store.clone(),
        secret: secret.clone(),
        ca_pem: ca_cert.clone(),
        timers,
        log_dir: dir.log(),
        snapshot_dir: dir.snapshot(),
    })
    .await?;
    let runtime = node
        .raft_runtime()
        .ok_or_else(|| cluster("the Raft runtime is gone"))?;
    {
        let _guard = runtime.enter();
        let tcp = TcpListener::from_std(raft_tcp).map_err(ServerError::io("raft listener"))?;
        runtime.spawn(rpc::serve(node.clone(), tcp, tls, shutdown.clone()));
        runtime.spawn(crash_watch::watch_leader(node.clone(), shutdown.clone()));
    }
    tracing::info!(component = "raft", raft = %me.raft, node_id = identity.node_id, "Raft listener up");
    campaign_if_sole_voter(&node, identity.node_id).await;

    if let Some(addr) = join_addr {
        readiness.set(
            Readiness::Joining {
                leader: addr.clone(),
            },
            "asking to be admitted",
        );
        join::request_admission(&node.peers, &addr, identity.node_id, &me)
            .await
            .map_err(|e| cluster(format!("joining {addr}: {e}")))?;
        dir.write_identity(&identity)?;
        tracing::info!(component = "raft", %addr, "joined the cluster");
    } else {
        tracing::info!(
            "join other servers with: LITEK8S_TOKEN=$(cat {}) litek8s apiserver --server https://{}",
            dir.join_token_file().display(),
            me.api
        );
    }
    let ca_key = read_optional(&data.ca_key())?.unwrap_or_default();
    let endpoints = Arc::new(ClusterEndpoints {
        node: node.clone(),
        ca_cert,
        ca_key,
        admin_token,
    });
    Ok(Started { node, endpoints })
}

/// A member that is the only voter (a new `--cluster-init`, or a one-server cluster
/// restarting) needs no one's vote: campaign now instead of after an election timeout, so
/// `READY=1` is not delayed by it. With other voters the normal timeout applies.
async fn campaign_if_sole_voter(node: &ClusterNode, me: u64) {
    let metrics = node.metrics();
    let voters: Vec<u64> = metrics.membership_config.membership().voter_ids().collect();
    if voters == [me] && metrics.state != ServerState::Leader {
        if let Err(e) = node.raft.trigger().elect().await {
            tracing::warn!(component = "raft", "campaigning as the only voter: {e}");
        }
    }
}

/// The API context of a member: the cluster writer and the ReadIndex barrier.
pub fn api_context(
    node: &Arc<ClusterNode>,
    store: Arc<Store>,
    settings: crate::api::ApiSettings,
) -> ApiContext {
    ApiContext::new(store, Arc::new(ClusterWriter::new(node.clone())), settings)
        .with_reads(Arc::new(ReadIndexBarrier::start(node.clone())))
}

/// Beats `heartbeat` (the systemd watchdog's liveness signal) once a second while the Raft
/// core answers, until `shutdown`.
pub async fn beat_while_core_responds(
    node: Arc<ClusterNode>,
    heartbeat: crate::systemd::watchdog::Heartbeat,
    shutdown: CancellationToken,
) {
    while !shutdown.is_cancelled() {
        if node.core_responds(Duration::from_secs(5)).await {
            heartbeat.beat();
        }
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = tokio::time::sleep(Duration::from_secs(1)) => {}
        }
    }
}

/// The Raft role as journal entries name it (`RAFT_ROLE=`).
fn role_name(state: ServerState) -> &'static str {
    match state {
        ServerState::Leader => "leader",
        ServerState::Follower => "follower",
        ServerState::Learner => "learner",
        ServerState::Candidate => "candidate",
        ServerState::Shutdown => "shutdown",
    }
}

/// Keeps `/readyz` and sd_notify in step with the Raft state until `shutdown`, so an isolated
/// member turns not ready within 3 s (docs/guarantees.md, Isolation and readiness).
/// Each change of role or term is logged with `COMPONENT=raft`, `RAFT_ROLE=`, `RAFT_TERM=`;
/// while the entries found in the local log at start-up are being re-applied, the status is
/// the replay progress (which also extends systemd's start timeout).
pub async fn readiness_loop(
    node: Arc<ClusterNode>,
    ctx: Arc<ApiContext>,
    reporter: Arc<ReadinessReporter>,
    shutdown: CancellationToken,
) {
    let mut tick = tokio::time::interval(Duration::from_millis(100));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut last_role: Option<(ServerState, u64)> = None;
    // Latched: once this member's store has held the bootstrap objects, their later deletion
    // and re-creation by the leader's reconciler does not make it flap.
    let mut bootstrapped = false;
    // Re-evaluated when the role, leader or term changes (so READY=1 follows an election at
    // once) and every tick (the "heard from the leader" window ages without any change; the
    // applied index changes with every write and is only sampled by the tick).
    let mut changes = node.raft.metrics();
    let mut last_key = None;
    loop {
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = tick.tick() => {}
            changed = changes.changed() => {
                if changed.is_err() {
                    return; // Raft stopped: the process is shutting down.
                }
                let key = {
                    let m = changes.borrow_and_update();
                    (m.state, m.current_leader, m.current_term)
                };
                if last_key == Some(key) {
                    continue;
                }
            }
        }
        let metrics = node.metrics();
        last_key = Some((metrics.state, metrics.current_leader, metrics.current_term));
        let applied = metrics.last_applied.map(|l| l.index).unwrap_or(0);
        let leader_name = match node.leadership() {
            super::node::Leadership::Other { member, .. } => member.name,
            super::node::Leadership::Me => node.me.name.clone(),
            super::node::Leadership::Unknown => String::new(),
        };
        if last_role != Some((metrics.state, metrics.current_term)) {
            last_role = Some((metrics.state, metrics.current_term));
            tracing::info!(
                component = "raft",
                raft_term = metrics.current_term,
                raft_role = role_name(metrics.state),
                raft_leader = %leader_name,
                applied,
                "{} in term {}",
                role_name(metrics.state),
                metrics.current_term
            );
        }
        let verdict = node.readiness().and_then(|()| {
            bootstrapped = bootstrapped || crate::server::bootstrap::present(&ctx.store);
            if bootstrapped {
                Ok(())
            } else {
                Err(
                    "the system namespaces and default/kubernetes have not reached this server yet"
                        .to_string(),
                )
            }
        });
        match verdict {
            Ok(()) => {
                if !ctx.ready.swap(true, Ordering::SeqCst) {
                    tracing::info!(
                        component = "raft",
                        raft_term = metrics.current_term,
                        raft_role = role_name(metrics.state),
                        applied,
                        "ready"
                    );
                }
                let role = match metrics.state {
                    ServerState::Leader => Role::Leader,
                    ServerState::Learner => Role::Learner {
                        leader: leader_name,
                    },
                    _ => Role::Follower {
                        leader: leader_name,
                    },
                };
                reporter.set(
                    Readiness::Ready {
                        role,
                        term: metrics.current_term,
                        applied,
                    },
                    "in step with the leader",
                );
            }
            Err(why) => {
                if ctx.ready.swap(false, Ordering::SeqCst) {
                    tracing::info!(
                        component = "raft",
                        raft_term = metrics.current_term,
                        raft_role = role_name(metrics.state),
                        reason = %why,
                        "not ready"
                    );
                }
                let (status, reason) = status_while_not_ready(
                    node.snapshot_progress(),
                    node.startup_committed,
                    applied,
                    reporter.ready_sent(),
                    why,
                );
                reporter.set(status, reason);
            }
        }
    }
}

/// What the status line says while this member is not ready, with the reason logged for the
/// change: a snapshot transfer, the re-application of the entries known committed when the
/// process started (only before the first `READY=1`), or otherwise the reason it is waiting.
/// An uncommitted tail above `startup_committed` is not replay: it needs a leader.
fn status_while_not_ready(
    snapshot_bytes: Option<u64>,
    startup_committed: Option<u64>,
    applied: u64,
    ready_sent: bool,
    why: String,
) -> (Readiness, &'static str) {
    match (snapshot_bytes, startup_committed) {
        (Some(done), _) => (
            Readiness::InstallingSnapshot { done, total: 0 },
            "receiving a snapshot from the leader",
        ),
        (None, Some(total)) if applied < total && !ready_sent => (
            Readiness::ReplayingLog {
                done: applied,
                total,
            },
            "re-applying the local log",
        ),
        _ => (Readiness::Waiting { why }, "not in step with a leader"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn status(
        snapshot: Option<u64>,
        committed: Option<u64>,
        applied: u64,
        sent: bool,
    ) -> Readiness {
        status_while_not_ready(snapshot, committed, applied, sent, "no leader".into()).0
    }

    #[test]
    fn committed_entries_left_to_apply_are_replay_progress() {
        assert_eq!(
            status(None, Some(40), 12, false),
            Readiness::ReplayingLog {
                done: 12,
                total: 40
            }
        );
    }

    #[test]
    fn an_uncommitted_tail_waits_for_a_leader_instead_of_replaying_forever() {
        // Applied everything known committed at start; the log may hold more, but only a
        // leader can commit it: the status says why the member is not ready.
        let waiting = Readiness::Waiting {
            why: "no leader".into(),
        };
        assert_eq!(status(None, Some(40), 40, false), waiting);
        assert_eq!(status(None, None, 0, false), waiting);
        // After READY=1, falling behind is not a replay either.
        assert_eq!(status(None, Some(40), 12, true), waiting);
    }

    #[test]
    fn a_snapshot_transfer_shows_its_bytes() {
        assert_eq!(
            status(Some(4096), Some(40), 12, false),
            Readiness::InstallingSnapshot {
                done: 4096,
                total: 0
            }
        );
    }
}
