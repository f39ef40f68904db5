//! Assembly of a balancer process: its listeners (from systemd socket activation when
//! present, else bound here), the server list with its state file, the health, discovery,
//! status and proxy tasks, and the shutdown on SIGTERM/SIGINT: stop accepting (the socket
//! stays with systemd, so new clients wait for the next start), let open connections finish
//! for `drain_timeout`, then close the rest.

use std::net::TcpListener as StdListener;
use std::sync::Arc;

use anyhow::Context;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::balancer::Balancer;
use super::settings::LbSettings;
use super::{proxy, status};
use crate::failover::{discovery, health, Failover, StateFile};
use crate::systemd::activation::Activation;
use crate::systemd::notify::Notifier;

/// `FileDescriptorName=` of the client socket in `litek8s-lb.socket`.
pub const SOCKET_NAME: &str = "lb";
/// `FileDescriptorName=` of an optional status socket.
pub const STATUS_SOCKET_NAME: &str = "status";

/// The sockets the balancer serves.
pub struct Listeners {
    pub clients: StdListener,
    /// Whether `clients` came from systemd.
    pub activated: bool,
    pub status: Option<StdListener>,
}

/// Takes the activated sockets or binds `--listen` / `--status-listen`. Call before any
/// thread starts (it clears the activation variables).
pub fn listeners(settings: &LbSettings) -> anyhow::Result<Listeners> {
    let mut activation = Activation::from_env();
    let (clients, activated) = match activation.take_tcp_listener(SOCKET_NAME)? {
        Some(listener) => (listener, true),
        None => {
            if !activation.is_empty() {
                tracing::warn!(
                    "systemd passed {} socket(s), none named {SOCKET_NAME:?}: binding --listen",
                    activation.len()
                );
            }
            let listener = StdListener::bind(settings.listen)
                .with_context(|| format!("listening on {}", settings.listen))?;
            (listener, false)
        }
    };
    let status = match activation.take_tcp_listener(STATUS_SOCKET_NAME)? {
        Some(listener) => Some(listener),
        None => match settings.status_listen {
            Some(addr) => Some(
                StdListener::bind(addr)
                    .with_context(|| format!("listening on --status-listen {addr}"))?,
            ),
            None => None,
        },
    };
    for listener in [Some(&clients), status.as_ref()].into_iter().flatten() {
        listener
            .set_nonblocking(true)
            .context("making a listener non-blocking")?;
    }
    Ok(Listeners {
        clients,
        activated,
        status,
    })
}

/// Runs the balancer until SIGTERM or SIGINT.
pub async fn run(settings: LbSettings, listeners: Listeners) -> anyhow::Result<()> {
    // Before anything is served: a SIGTERM must never meet the default action (instant
    // death with connections in flight).
    use tokio::signal::unix::{signal, SignalKind};
    let mut term = signal(SignalKind::terminate()).context("installing the SIGTERM handler")?;
    let mut int = signal(SignalKind::interrupt()).context("installing the SIGINT handler")?;
    let notifier = Notifier::from_env();
    let state_file = settings.state_dir.as_deref().map(StateFile::in_dir);
    if state_file.is_none() {
        tracing::info!("no --state-dir (and no $STATE_DIRECTORY): the learned servers are not remembered across restarts");
    }
    let servers = Arc::new(Failover::open(settings.seeds.clone(), state_file));
    let balancer = Arc::new(Balancer::new(servers.clone()));
    let check = health::checker(
        settings.check.check().context("the health check")?,
        settings.check_timeout,
    );
    let discovery_transport = settings.check.transport().context("the discovery client")?;
    let clients = tokio::net::TcpListener::from_std(listeners.clients)
        .context("registering the client listener")?;
    let local = clients.local_addr().context("client listener address")?;

    let stop = CancellationToken::new();
    let kill = CancellationToken::new();
    let tracker = TaskTracker::new();
    let mut tasks = tokio::task::JoinSet::new();
    tasks.spawn(health::run(
        servers.clone(),
        check,
        settings.check_interval,
        stop.clone(),
    ));
    tasks.spawn(discovery::run(
        servers.clone(),
        discovery_transport,
        settings.discovery_interval,
        settings.check_timeout,
        stop.clone(),
    ));
    if let Some(listener) = listeners.status {
        let listener = tokio::net::TcpListener::from_std(listener)
            .context("registering the status listener")?;
        tracing::info!(
            "status on http://{}/metrics and /status",
            listener.local_addr().context("status address")?
        );
        tasks.spawn(status::serve(listener, balancer.clone(), stop.clone()));
    }
    tasks.spawn(status::report(
        balancer.clone(),
        notifier.clone(),
        stop.clone(),
    ));
    let accepting = tokio::spawn(proxy::serve(
        clients,
        balancer.clone(),
        settings.proxy.clone(),
        tracker.clone(),
        stop.clone(),
        kill.clone(),
    ));
    tracing::info!(
        "balancing {local}{} over {:?} ({} checks every {:?})",
        if listeners.activated {
            " (socket from systemd)"
        } else {
            ""
        },
        settings.seeds,
        settings.check.name(),
        settings.check_interval
    );
    notifier.ready(&format!("balancing {local}"));

    tokio::select! {
        _ = term.recv() => {}
        _ = int.recv() => {}
    }
    let open = balancer.status().open;
    tracing::info!(
        "stopping: no new connections; waiting up to {:?} for {open} open connection(s)",
        settings.drain_timeout
    );
    notifier.stopping("draining connections");
    stop.cancel();
    // The accept loop first: a connection it accepted just now is tracked before the drain
    // looks at the tracker, so it is served, not cut by the runtime's shutdown.
    let _ = accepting.await;
    tracker.close();
    if tokio::time::timeout(settings.drain_timeout, tracker.wait())
        .await
        .is_err()
    {
        tracing::info!(
            "closing {} connection(s) still open",
            balancer.status().open
        );
        kill.cancel();
        tracker.wait().await;
    }
    while tasks.join_next().await.is_some() {}
    Ok(())
}
