//! Assembles and runs one API server process: data directory, PKI and token, kubeconfig,
//! store and WAL, listener, bootstrap objects, the Lease loop, and shutdown on SIGTERM or
//! SIGINT.
//!
//! Readiness (`ApiContext::ready`) turns true once the WAL is replayed, the port is bound and
//! the bootstrap objects exist, so a client that sees /readyz 200 finds the namespaces.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use tokio::net::TcpListener;
use tokio_rustls::TlsAcceptor;
use tokio_util::sync::CancellationToken;

use super::authn::Authenticator;
use super::datadir::DataDir;
use super::dispatch::Dispatch;
use super::error::ServerError;
use super::listener::{Limits, Listener};
use super::settings::ServerSettings;
use super::token::AdminToken;
use super::{bootstrap, kubeconfig, lease, pki, tls};
use crate::api::{ApiContext, ApiSettings};
use crate::cluster::member::ClusterDir;
use crate::cluster::start::{self as cluster_start, Mode};
use crate::kube::store::{Store, StoreConfig};
use crate::kube::wal::{WalConfig, WalWriter};

/// Runs the API server until SIGTERM or SIGINT; returns after draining connections.
pub async fn run(settings: ServerSettings) -> Result<(), ServerError> {
    use crate::systemd::{journal, notify, readiness, signals, watchdog};
    let reporter = Arc::new(readiness::ReadinessReporter::new(
        notify::Notifier::from_env(),
    ));
    let shutdown = CancellationToken::new();
    spawn_signal_handler(shutdown.clone(), reporter.clone())?;
    tokio::spawn(crate::allocator::tune_for_load_when_heap_grows());
    if let Some(logs) = journal::installed_handle() {
        tokio::spawn(signals::reload_on_sighup(
            reporter.clone(),
            logs,
            signals::ReloadSource::server_default(),
            shutdown.clone().cancelled_owned(),
        ));
    }
    // The loop that proves liveness beats `heartbeat` (see `run_until`); WATCHDOG=1 is sent
    // only while it does.
    let heartbeat = watchdog::Heartbeat::new();
    if let Some(interval) = notify::watchdog_interval() {
        tokio::spawn(watchdog::run_watchdog(
            reporter.notifier().clone(),
            interval,
            heartbeat.clone(),
            shutdown.clone().cancelled_owned(),
        ));
    }
    run_until(settings, shutdown, reporter, heartbeat).await
}

/// Runs the API server until `shutdown` fires (tests and embedders drive this directly).
/// `heartbeat` is beaten by the loop whose liveness the systemd watchdog checks: the Raft core
/// of a cluster member (`cluster::start::beat_while_core_responds`), the API runtime of a
/// single server.
pub async fn run_until(
    settings: ServerSettings,
    shutdown: CancellationToken,
    readiness: Arc<crate::systemd::readiness::ReadinessReporter>,
    heartbeat: crate::systemd::watchdog::Heartbeat,
) -> Result<(), ServerError> {
    // Until a Raft core exists, the API runtime staying responsive is the liveness signal
    // (it covers WAL replay and joining); a single server keeps it for good.
    let runtime_beat = shutdown.child_token();
    tokio::spawn(beat_while_running(heartbeat.clone(), runtime_beat.clone()));
    let dir = DataDir::prepare(&settings.data_dir)?;
    let cluster_dir = ClusterDir::new(dir.root());
    let mode = cluster_start::decide(&settings, &cluster_dir)?;
    if let Mode::Join { addr, token } = &mode {
        cluster_start::prepare_join(&dir, &cluster_dir, addr, token).await?;
    }
    let token = AdminToken::load_or_create(&dir.admin_token())?;
    let pki = pki::load_or_create(&dir, &pki::serving_names(&settings))?;
    let tls_config = tls::server_config(&pki)?;

    let store = Arc::new(Store::new(StoreConfig {
        history_window: settings.watch_history,
        ..StoreConfig::default()
    }));
    let wal_writer = match mode {
        Mode::Single => Some(open_wal(&dir, &store, &readiness).await?),
        _ => None,
    };

    let tcp = TcpListener::bind(settings.listen)
        .await
        .map_err(|error| ServerError::Bind {
            addr: settings.listen,
            error,
        })?;
    let bound = tcp.local_addr().map_err(|error| ServerError::Bind {
        addr: settings.listen,
        error,
    })?;
    // After binding, so `--listen 127.0.0.1:0` gets the real port.
    let url = ServerSettings {
        listen: bound,
        ..settings.clone()
    }
    .local_url();
    let kubeconfig_yaml = kubeconfig::render(&url, &pki.ca_cert_pem, token.as_str());
    kubeconfig::write(&settings.kubeconfig, &kubeconfig_yaml)?;

    let api_settings = ApiSettings {
        server_name: settings.name.clone(),
        node_ips: settings.advertised_ips(),
        api_port: bound.port(),
        service_cidr: settings.service_cidr.clone(),
    };
    let (ctx, member) = match wal_writer {
        Some(writer) => (
            Arc::new(ApiContext::new(
                store.clone(),
                Arc::new(writer),
                api_settings.clone(),
            )),
            None,
        ),
        None => {
            let started = cluster_start::start(cluster_start::StartInputs {
                mode,
                settings: &settings,
                data: &dir,
                store: store.clone(),
                ca_cert: pki.ca_cert_pem.clone(),
                tls: TlsAcceptor::from(tls_config.clone()),
                admin_token: token.as_str().to_string(),
                api_addr: bound,
                shutdown: shutdown.clone(),
                readiness: readiness.clone(),
            })
            .await?;
            let ctx = Arc::new(cluster_start::api_context(
                &started.node,
                store.clone(),
                api_settings.clone(),
            ));
            (ctx, Some(started))
        }
    };
    let listener = Listener {
        tcp,
        tls: TlsAcceptor::from(tls_config),
        dispatch: Arc::new(Dispatch {
            ctx: ctx.clone(),
            authn: Authenticator::new(token),
            cluster: member.as_ref().map(|m| m.endpoints.clone()),
        }),
        limits: Limits::default(),
    };
    let serving = tokio::spawn(listener.run(shutdown.clone()));
    tracing::info!(
        component = "server",
        listen = %bound,
        kubeconfig = %settings.kubeconfig.display(),
        name = %settings.name,
        "API server listening"
    );

    match &member {
        None => {
            bootstrap::ensure_all(&ctx).await?;
            lease::renew(&ctx, &settings.hostname)
                .await
                .map_err(|e| ServerError::Bootstrap(format!("apiserver lease: {e}")))?;
            tokio::spawn(lease::renew_loop(
                ctx.clone(),
                settings.hostname.clone(),
                shutdown.clone(),
            ));
            ctx.ready.store(true, Ordering::SeqCst);
            tracing::info!(component = "server", "ready");

            readiness.set(
                crate::systemd::readiness::Readiness::Ready {
                    role: crate::systemd::readiness::Role::Single,
                    term: 0,
                    applied: ctx.store.resource_version(),
                },
                "WAL replayed, listening, bootstrap objects present",
            );
        }
        Some(started) => {
            tokio::spawn(crate::cluster::leader::run(
                started.node.clone(),
                store.clone(),
                api_settings,
                shutdown.clone(),
            ));
            runtime_beat.cancel();
            tokio::spawn(cluster_start::beat_while_core_responds(
                started.node.clone(),
                heartbeat.clone(),
                shutdown.clone(),
            ));
            tokio::spawn(cluster_start::readiness_loop(
                started.node.clone(),
                ctx.clone(),
                readiness.clone(),
                shutdown.clone(),
            ));
            // Each member's own identity Lease, renewed through the cluster writer (a follower's
            // renewal is a proposal to the leader; docs/guarantees.md, Identity Leases).
            let (lease_ctx, name, stop) = (ctx.clone(), settings.name.clone(), shutdown.clone());
            tokio::spawn(async move {
                if let Err(e) = lease::renew(&lease_ctx, &name).await {
                    tracing::warn!(error = %e, "creating the apiserver lease failed; retrying");
                }
                lease::renew_loop(lease_ctx, name, stop).await;
            });
        }
    }

    if serving.await.is_err() {
        tracing::error!("the listener task panicked");
    }
    if let Some(started) = member {
        crate::cluster::handoff::hand_off(&started.node).await;
        started.node.shutdown().await;
    }
    tracing::info!(component = "server", "stopped");
    Ok(())
}

/// Beats `heartbeat` every second until `stop`: proof that the runtime runs its tasks.
async fn beat_while_running(
    heartbeat: crate::systemd::watchdog::Heartbeat,
    stop: CancellationToken,
) {
    while !stop.is_cancelled() {
        heartbeat.beat();
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = tokio::time::sleep(std::time::Duration::from_secs(1)) => {}
        }
    }
}

/// Replays objects.wal into `store` (single server).
async fn open_wal(
    dir: &DataDir,
    store: &Arc<Store>,
    readiness: &crate::systemd::readiness::ReadinessReporter,
) -> Result<WalWriter, ServerError> {
    let data_dir = dir.root().to_path_buf();
    let wal_store = store.clone();
    readiness.set(
        crate::systemd::readiness::Readiness::ReplayingLog { done: 0, total: 0 },
        "opening objects.wal",
    );
    // Replay is synchronous disk work; keep it off the async workers. Meanwhile report how
    // far it got (each report also extends systemd's start timeout).
    let mut replay = tokio::task::spawn_blocking(move || {
        WalWriter::open(&data_dir, wal_store, WalConfig::default())
    });
    let mut progress = tokio::time::interval(std::time::Duration::from_millis(500));
    progress.tick().await;
    let replayed = loop {
        tokio::select! {
            done = &mut replay => break done,
            _ = progress.tick() => readiness.set(
                crate::systemd::readiness::Readiness::ReplayingLog {
                    done: store.resource_version(),
                    total: 0,
                },
                "replaying objects.wal",
            ),
        }
    };
    let (writer, report) =
        replayed.map_err(|e| ServerError::Bootstrap(format!("WAL replay task failed: {e}")))??;
    tracing::info!(
        component = "store",
        checkpoint_objects = report.checkpoint_objects,
        replayed = report.replayed_mutations,
        resource_version = store.resource_version(),
        "objects.wal replayed"
    );
    Ok(writer)
}

/// Fires `shutdown` on the first SIGTERM or SIGINT.
fn spawn_signal_handler(
    shutdown: CancellationToken,
    reporter: Arc<crate::systemd::readiness::ReadinessReporter>,
) -> Result<(), ServerError> {
    use tokio::signal::unix::{signal, SignalKind};
    let signal_err = |error| ServerError::Io {
        path: "signal handler".into(),
        error,
    };
    let mut term = signal(SignalKind::terminate()).map_err(signal_err)?;
    let mut int = signal(SignalKind::interrupt()).map_err(signal_err)?;
    tokio::spawn(async move {
        let name = tokio::select! {
            _ = term.recv() => "SIGTERM",
            _ = int.recv() => "SIGINT",
        };
        tracing::info!(component = "server", signal = name, "shutting down");
        reporter.set(crate::systemd::readiness::Readiness::Stopping, name);
        shutdown.cancel();
    });
    Ok(())
}
