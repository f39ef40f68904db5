//! Assembly of `litek8s agent`, in order: the node directory (0700), the server list (the
//! `--server` and `servers.json`), the node's credential (stored, or a join), the API client
//! and the server list's health checks and discovery, the Node's registration (retried until
//! a server takes it), then the Node's watch, Lease and status loops. `READY=1` once the Node
//! is registered and Ready; `STATUS=` names the server in use; `WATCHDOG=1` while the Lease
//! loop makes progress. SIGTERM or SIGINT: `STOPPING=1`, the loops stop, exit 0; what runs on
//! the node is left running (a restart or an upgrade of the agent does not touch it).

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use super::api::ApiClient;
use super::join::{self, JoinError};
use super::node::lease::LeaseRenewer;
use super::node::machine::{Machine, Sources};
use super::node::status::{NodeSpecifics, RuntimeInfo};
use super::node::{watch_node, NodeReporter, NodeState};
use super::settings::{AgentSettings, RuntimeChoice};
use crate::failover::{discovery, health, Failover, StateFile};
use crate::http_client::{TlsError, Transport};
use crate::systemd::notify::{self, Notifier};
use crate::systemd::watchdog::{self, Heartbeat};

/// How often the server list is asked of a server besides every change of server.
const DISCOVERY_INTERVAL: Duration = Duration::from_secs(30);

/// Why the agent stopped before it could run.
#[derive(Debug, thiserror::Error)]
pub enum AgentError {
    #[error("the node directory {}: {error}", path.display())]
    NodeDir {
        path: PathBuf,
        error: std::io::Error,
    },
    #[error("joining the cluster: {0}")]
    Join(#[from] JoinError),
    #[error("the node credential: {0}")]
    Credential(#[from] TlsError),
    #[error("installing the signal handlers: {0}")]
    Signals(std::io::Error),
}

/// Creates the node directory owner-only (it will hold the node's key).
fn prepare_node_dir(dir: &Path) -> Result<(), AgentError> {
    use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
    let err = |error| AgentError::NodeDir {
        path: dir.to_path_buf(),
        error,
    };
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
        .map_err(err)?;
    let mode = std::fs::metadata(dir).map_err(err)?.permissions().mode();
    if mode & 0o077 != 0 {
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700)).map_err(err)?;
    }
    Ok(())
}

/// The container runtime as the Node reports it. Which runtime runs containers, its version
/// and whether it works here are the runtime module's to detect (`agent::runtime`); this
/// names the `--runtime` choice, with version `unknown` until that detection reports one.
fn runtime_info(choice: RuntimeChoice) -> RuntimeInfo {
    RuntimeInfo {
        name: match choice {
            RuntimeChoice::Detect => "oci".to_string(),
            other => other.name().to_string(),
        },
        version: "unknown".to_string(),
    }
}

/// Runs the agent until SIGTERM or SIGINT.
pub async fn run(settings: AgentSettings) -> Result<(), AgentError> {
    use tokio::signal::unix::{signal, SignalKind};
    let mut term = signal(SignalKind::terminate()).map_err(AgentError::Signals)?;
    let mut int = signal(SignalKind::interrupt()).map_err(AgentError::Signals)?;
    let notifier = Notifier::from_env();
    let stop = CancellationToken::new();
    let running = tokio::spawn(run_until(settings, notifier.clone(), stop.clone()));
    tokio::pin!(running);
    let signal_name = tokio::select! {
        _ = term.recv() => "SIGTERM",
        _ = int.recv() => "SIGINT",
        ended = &mut running => {
            return ended.unwrap_or_else(|e| {
                tracing::error!(component = "agent", "the agent's task failed: {e}");
                Ok(())
            })
        }
    };
    tracing::info!(component = "agent", signal = signal_name, "stopping");
    notifier.stopping(&format!("{signal_name}: stopping"));
    stop.cancel();
    match tokio::time::timeout(Duration::from_secs(5), running).await {
        Ok(Ok(result)) => result,
        _ => Ok(()),
    }
}

/// Runs the agent until `stop` (tests and embedders drive this directly).
pub async fn run_until(
    settings: AgentSettings,
    notifier: Notifier,
    stop: CancellationToken,
) -> Result<(), AgentError> {
    prepare_node_dir(&settings.node_dir)?;
    let servers = Arc::new(Failover::open(
        vec![settings.server.clone()],
        Some(StateFile::in_dir(&settings.node_dir)),
    ));
    let mut join_via = vec![settings.server.clone()];
    join_via.extend(
        servers
            .addrs()
            .into_iter()
            .filter(|a| *a != settings.server),
    );
    notifier.status(&format!("joining via {}", settings.server));
    let joined = tokio::select! {
        _ = stop.cancelled() => return Ok(()),
        joined = join::ensure(&settings, &join_via) => joined?,
    };
    servers.on_members(&joined.servers);
    let api = ApiClient::new(&joined.credentials.tls()?, servers.clone());

    let check_every = settings.server_check_interval;
    tokio::spawn(health::run(
        servers.clone(),
        health::checker(health::Check::Readyz(Transport::Plain), check_every / 2),
        check_every,
        stop.clone(),
    ));
    tokio::spawn(discovery::run(
        servers.clone(),
        Transport::Plain,
        DISCOVERY_INTERVAL,
        check_every / 2,
        stop.clone(),
    ));

    // The runtime keeps this: why pods cannot run here (`None`: they can). Ready follows it.
    let runtime_problem = watch::Sender::new(None::<String>);
    let state = NodeState::default();
    let reporter = NodeReporter {
        api: api.clone(),
        node: NodeSpecifics {
            name: settings.node_name.clone(),
            ip: settings.node_ip,
            labels: settings.labels.clone(),
            taints: settings.taints.clone(),
            reserved: settings.system_reserved,
            eviction: settings.eviction_hard,
            runtime: runtime_info(settings.runtime),
        },
        machine: Machine::read(&Sources::default(), &settings.node_dir),
        sources: Sources::default(),
        node_dir: settings.node_dir.clone(),
        update_every: settings.status_update_frequency,
        report_every: settings.status_report_frequency,
        runtime_problem: runtime_problem.subscribe(),
        state: state.clone(),
    };
    notifier.status(&format!("registering node {}", settings.node_name));
    let mut retry = Duration::from_millis(500);
    let registered = loop {
        match reporter.register().await {
            Ok(status) => break status,
            Err(e) => {
                tracing::warn!(
                    component = "node",
                    "registering the Node: {e}; retrying in {retry:?}"
                );
                tokio::select! {
                    _ = stop.cancelled() => return Ok(()),
                    _ = tokio::time::sleep(retry) => {}
                }
                retry = (retry * 2).min(Duration::from_secs(10));
            }
        }
    };

    let heartbeat = Heartbeat::new();
    if let Some(interval) = notify::watchdog_interval() {
        tokio::spawn(watchdog::run_watchdog(
            notifier.clone(),
            interval,
            heartbeat.clone(),
            stop.clone().cancelled_owned(),
        ));
    }
    let mut tasks = tokio::task::JoinSet::new();
    tasks.spawn(watch_node(
        api.clone(),
        settings.node_name.clone(),
        state.clone(),
        stop.clone(),
    ));
    tasks.spawn(
        LeaseRenewer::new(
            api.clone(),
            settings.node_name.clone(),
            settings.lease_duration,
        )
        .run(state.uid.subscribe(), heartbeat, stop.clone()),
    );
    tasks.spawn(reporter.run(registered, stop.clone()));
    report(&settings.node_name, &api, &state, &notifier, stop.clone()).await;
    // The loops end at `stop`; their requests in flight are not waited for long.
    let _ = tokio::time::timeout(Duration::from_secs(2), async {
        while tasks.join_next().await.is_some() {}
    })
    .await;
    drop(runtime_problem);
    Ok(())
}

/// Keeps systemd informed until `stop`: `READY=1` the first time the Node is Ready, and
/// `STATUS=` with its readiness and the server in use whenever either changes.
async fn report(
    node: &str,
    api: &ApiClient,
    state: &NodeState,
    notifier: &Notifier,
    stop: CancellationToken,
) {
    let mut ready = state.ready.subscribe();
    let mut announced_ready = false;
    let mut last_status = String::new();
    let mut ticks = tokio::time::interval(Duration::from_secs(1));
    loop {
        let server = api
            .in_use()
            .or_else(|| api.servers().active())
            .unwrap_or_else(|| "none".into());
        let is_ready = *ready.borrow_and_update();
        let text = format!(
            "node {node} {}; server {server}",
            if is_ready { "Ready" } else { "NotReady" }
        );
        if is_ready && !announced_ready {
            announced_ready = true;
            tracing::info!(component = "agent", node, %server, "the Node is registered and Ready");
            notifier.ready(&text);
            last_status = text;
        } else if text != last_status {
            notifier.status(&text);
            last_status = text;
        }
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = ticks.tick() => {}
            _ = ready.changed() => {}
        }
    }
}
