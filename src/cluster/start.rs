//! Starts this server as a cluster member (or resumes it as one): the member's identity and
//! secret for the mode (`cluster::mode`), the join token file, the Raft node on its own
//! runtime, the Raft listener, the crashed-leader watch, and for a joiner the request to be
//! admitted. `server::run` wraps the result as its backend.

use std::net::{IpAddr, SocketAddr};
use std::path::Path;
use std::sync::Arc;

use openraft::ServerState;
use tokio::net::TcpListener;
use tokio_rustls::TlsAcceptor;
use tokio_util::sync::CancellationToken;

use super::crash_watch;
use super::endpoints::{ClusterEndpoints, Servers};
use super::error::ClusterError;
use super::init::{retire_single_server_wal, write_first_snapshot};
use super::join;
use super::member::{new_node_id, ClusterDir, Identity, Member};
use super::mode::{read_secret, write_secret, write_secret_and_token, Mode};
use super::node::{ClusterNode, NodeConfig};
use super::rpc;
use super::timers::Timers;
use crate::kube::store::Store;
use crate::storage::fsutil::remove_dir_if_present;
use crate::systemd::readiness::{Readiness, ReadinessReporter};

/// A running member's pieces for `server::run`.
pub struct Started {
    pub node: Arc<ClusterNode>,
    pub endpoints: Arc<ClusterEndpoints>,
}

/// What `start` needs from the server assembly.
pub struct StartInputs<'a> {
    pub mode: Mode,
    /// This member's name (`--name`).
    pub name: String,
    /// The data directory (the cluster's files live in it, see `ClusterDir`).
    pub data_dir: &'a Path,
    /// The IP the API listens on; the Raft listener binds the same one.
    pub listen_ip: IpAddr,
    /// The address other members reach this one at (`--node-ip`, else the listen address).
    pub advertised_ip: IpAddr,
    /// `--raft-port`; default the API port + 1.
    pub raft_port: Option<u16>,
    pub store: Arc<Store>,
    pub ca_cert: String,
    pub ca_key: String,
    pub tls: TlsAcceptor,
    pub admin_token: String,
    pub api_addr: SocketAddr,
    pub shutdown: CancellationToken,
    pub readiness: Arc<ReadinessReporter>,
}

/// Starts this member: Raft node, Raft listener, and (joining) admission.
pub async fn start(inputs: StartInputs<'_>) -> Result<Started, ClusterError> {
    let StartInputs {
        mode,
        name,
        data_dir,
        listen_ip,
        advertised_ip: advertised,
        raft_port,
        store,
        ca_cert,
        ca_key,
        tls,
        admin_token,
        api_addr,
        shutdown,
        readiness,
    } = inputs;
    let dir = ClusterDir::new(data_dir);
    let timers = Timers::from_env().map_err(ClusterError::Config)?;
    let raft_port = match raft_port {
        Some(port) => port,
        None => api_addr.port().checked_add(1).ok_or_else(|| {
            ClusterError::Config("the API port is 65535: pass --raft-port".into())
        })?,
    };
    let me = Member {
        name: name.clone(),
        raft: SocketAddr::new(advertised, raft_port).to_string(),
        api: SocketAddr::new(advertised, api_addr.port()).to_string(),
    };
    let (identity, secret, join_addr) = match mode {
        Mode::Single { .. } => {
            return Err(ClusterError::Config(
                "a single server is not a cluster member".into(),
            ))
        }
        Mode::Member(identity) => (identity, read_secret(&dir)?, None),
        Mode::Init { secret } => {
            let node_id = new_node_id();
            let store_config = store.config().clone();
            let wal_dir = data_dir.to_path_buf();
            let (cd, me2) = (dir.clone(), me.clone());
            let rv = tokio::task::spawn_blocking(move || {
                write_first_snapshot(&wal_dir, &cd, node_id, &me2, store_config)
            })
            .await
            .map_err(|e| ClusterError::raft("writing the first snapshot", e))??;
            // Before the identity, which marks a complete start: a member never lacks it.
            write_secret(&dir, &secret)?;
            let identity = Identity {
                node_id,
                name: name.clone(),
            };
            dir.write_identity(&identity)?;
            retire_single_server_wal(data_dir)?;
            tracing::info!(
                component = "raft",
                node_id,
                resource_version = rv,
                "initialized a new cluster"
            );
            (identity, secret, None)
        }
        Mode::Join { addr, token } => {
            remove_dir_if_present(&dir.raft()).map_err(ClusterError::io(dir.raft()))?;
            let identity = Identity {
                node_id: new_node_id(),
                name: name.clone(),
            };
            (identity, token.secret, Some(addr))
        }
    };
    write_secret_and_token(&dir, &ca_cert, &secret)?;

    let raft_bind = SocketAddr::new(listen_ip, raft_port);
    let raft_tcp = std::net::TcpListener::bind(raft_bind).map_err(|error| ClusterError::Bind {
        addr: raft_bind,
        error,
    })?;
    raft_tcp
        .set_nonblocking(true)
        .map_err(|error| ClusterError::Bind {
            addr: raft_bind,
            error,
        })?;
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
    let runtime = node.raft_runtime().ok_or_else(|| {
        ClusterError::raft("starting the Raft listener", "the Raft runtime is gone")
    })?;
    {
        let _guard = runtime.enter();
        let tcp = TcpListener::from_std(raft_tcp).map_err(|error| ClusterError::Bind {
            addr: raft_bind,
            error,
        })?;
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
            .map_err(|e| ClusterError::Join {
                addr: addr.clone(),
                reason: e.to_string(),
            })?;
        dir.write_identity(&identity)?;
        tracing::info!(component = "raft", %addr, "joined the cluster");
    } else {
        tracing::info!(
            "join other servers with: LITEK8S_TOKEN=$(cat {}) litek8s apiserver --server https://{}",
            dir.join_token_file().display(),
            me.api
        );
    }
    let endpoints = Arc::new(ClusterEndpoints {
        servers: Servers::Member(node.clone()),
        secret,
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
