//! Assembles and runs one API server process, in one order for both modes: data directory
//! (and, joining a cluster, what the cluster shares), PKI and token, store (a single server
//! replays objects.wal first), listener, kubeconfig, the backend (`backend`: single server or
//! cluster member), the API context, the leader-gated runner, this server's identity Lease,
//! readiness, and shutdown on SIGTERM or SIGINT.
//!
//! Readiness (`ApiContext::ready`) turns true once the backend is in step (a single server:
//! the WAL replayed; a member: following a leader) and the store holds the bootstrap objects,
//! so a client that sees /readyz 200 finds the namespaces.

use std::sync::Arc;

use tokio::net::TcpListener;
use tokio_rustls::TlsAcceptor;
use tokio_util::sync::CancellationToken;

use super::admin_token::AdminToken;
use super::authn::Authenticator;
use super::backend::{self, Backend};
use super::datadir::{read_optional, write_file, DataDir, PUBLIC_MODE, SECRET_MODE};
use super::dispatch::Dispatch;
use super::error::ServerError;
use super::listener::{Limits, Listener};
use super::settings::ServerSettings;
use super::{identity_lease, kubeconfig, pki, tls};
use crate::api::write::admission::PodSecurityConfig;
use crate::api::{ApiContext, ApiSettings};
use crate::auth::service_account::ServiceAccountTokens;
use crate::auth::token_file::TokenFile;
use crate::client::{identities, Client};
use crate::cluster::endpoints::{ClusterEndpoints, Servers};
use crate::cluster::member::ClusterDir;
use crate::cluster::mode::{self, Mode};
use crate::cluster::protocol::JoinBundle;
use crate::cluster::start as cluster_start;
use crate::controllers::bootstrap::{self, ApiServers};
use crate::controllers::runner::{self, RunnerInputs};
use crate::controllers::ControllerSettings;
use crate::kube::object::ObjectKey;
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
/// of a cluster member, the API runtime of a single server.
pub async fn run_until(
    settings: ServerSettings,
    shutdown: CancellationToken,
    readiness: Arc<crate::systemd::readiness::ReadinessReporter>,
    heartbeat: crate::systemd::watchdog::Heartbeat,
) -> Result<(), ServerError> {
    // Until the backend runs, the API runtime staying responsive is the liveness signal (it
    // covers WAL replay and joining).
    let startup_beat = shutdown.child_token();
    tokio::spawn(backend::beat_while_running(
        heartbeat.clone(),
        startup_beat.clone(),
    ));
    let dir = DataDir::prepare(&settings.data_dir)?;
    let cluster_dir = ClusterDir::new(dir.root());
    let mode = mode::decide(&settings.cluster, &cluster_dir)?;
    if let Mode::Join { addr, token } = &mode {
        let bundle = mode::fetch_join_bundle(&cluster_dir, addr, token).await?;
        store_join_bundle(&dir, &bundle)?;
    }
    let token = AdminToken::load_or_create(&dir.admin_token())?;
    let static_tokens = match &settings.token_auth_file {
        Some(path) => {
            let tokens = TokenFile::load(path)?;
            tracing::info!(component = "server", path = %path.display(), tokens = tokens.count(), "read the token file");
            tokens
        }
        None => TokenFile::default(),
    };
    let pod_security = match &settings.admission_control_config_file {
        Some(path) => Arc::new(PodSecurityConfig::load(path)?),
        None => Arc::default(),
    };
    let audit = crate::audit::Auditor::start(&settings.audit)?;
    let pki = pki::load_or_create(&dir, &pki::serving_names(&settings))?;
    let tls_config = tls::server_config(&pki)?;

    let store = Arc::new(Store::new(StoreConfig {
        history_window: settings.watch_history,
        ..StoreConfig::default()
    }));
    let wal = match mode {
        Mode::Single { .. } => Some(open_wal(&dir, &store, &readiness).await?),
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

    let ca_key = read_optional(&dir.ca_key())?.unwrap_or_default();
    let ca_key_pem = ca_key.clone();
    let advertised_ip = settings
        .advertised_ips()
        .first()
        .copied()
        .unwrap_or(bound.ip());
    let backend = match (wal, mode) {
        (Some(wal), Mode::Single { secret }) => {
            // Agents join a single server as they join a cluster: with its join token.
            mode::write_secret_and_token(&cluster_dir, &pki.ca_cert_pem, &secret)?;
            let endpoints = Arc::new(ClusterEndpoints {
                servers: Servers::Single {
                    api: std::net::SocketAddr::new(advertised_ip, bound.port()).to_string(),
                },
                secret,
                ca_cert: pki.ca_cert_pem.clone(),
                ca_key,
                admin_token: token.as_str().to_string(),
            });
            Backend::single(wal, endpoints)
        }
        (_, mode) => Backend::member(
            cluster_start::start(cluster_start::StartInputs {
                mode,
                name: settings.name.clone(),
                data_dir: dir.root(),
                listen_ip: settings.listen.ip(),
                advertised_ip,
                raft_port: settings.cluster.raft_port,
                store: store.clone(),
                ca_cert: pki.ca_cert_pem.clone(),
                ca_key,
                tls: TlsAcceptor::from(tls_config.clone()),
                admin_token: token.as_str().to_string(),
                api_addr: bound,
                shutdown: shutdown.clone(),
                readiness: readiness.clone(),
            })
            .await?,
        ),
    };
    let api_settings = ApiSettings {
        server_name: settings.name.clone(),
        node_ips: settings.advertised_ips(),
        api_port: bound.port(),
        service_cidr: settings.service_cidr.clone(),
    };
    // Every server holds the CA key, so every server checks the tokens any server issued.
    let service_accounts = Arc::new(
        ServiceAccountTokens::from_ca_key(&ca_key_pem, store.clone()).map_err(|e| {
            ServerError::Crypto {
                what: "the service account token key",
                reason: e.to_string(),
            }
        })?,
    );
    let ctx = Arc::new(
        ApiContext::new(store.clone(), backend.writer(), api_settings)
            .with_reads(backend.reads())
            .with_service_accounts(service_accounts.clone())
            .with_pod_security(pod_security),
    );
    // Every server derives the same front-proxy identity from the CA key.
    match crate::api::aggregation::front_proxy::FrontProxy::derive(&ca_key_pem) {
        Ok(front_proxy) => ctx.aggregator.set_front_proxy(front_proxy),
        Err(error) => {
            return Err(ServerError::Crypto {
                what: "the front-proxy certificates",
                reason: error.to_string(),
            })
        }
    }
    if let Some(node) = backend.cluster_endpoints().node() {
        // Stream requests for nodes connected to another server are relayed to it.
        let tls = crate::http_client::TlsConfig::pinned(&pki.ca_cert_pem, None).map_err(|e| {
            ServerError::Task {
                what: "the cluster transport for streams",
                reason: e.to_string(),
            }
        })?;
        let _ = ctx.streams.peers.set(crate::streams::Peers {
            node: node.clone(),
            tls,
        });
    }
    ctx.metrics.add_sections(super::metrics::sections(
        &backend,
        dir.root(),
        shutdown.clone(),
    ));
    let listener = Listener {
        tcp,
        tls: TlsAcceptor::from(tls_config),
        dispatch: Arc::new(Dispatch {
            ctx: ctx.clone(),
            authn: Authenticator::new(token, static_tokens, &pki.ca_cert_pem)?
                .with_service_accounts(service_accounts),
            cluster: backend.cluster_endpoints(),
            audit,
        }),
        limits: Limits::default(),
    };
    let serving = tokio::spawn(listener.run(shutdown.clone()));
    // The RBAC index follows the store from now on (requests also bring it up to date).
    tokio::spawn(ctx.authorizer.clone().follow(shutdown.clone()));
    tokio::spawn(ctx.custom_kinds.clone().follow(shutdown.clone()));
    tokio::spawn(ctx.webhooks.clone().follow(shutdown.clone()));
    tokio::spawn(ctx.policies.clone().follow(shutdown.clone()));
    tracing::info!(
        component = "server",
        listen = %bound,
        kubeconfig = %settings.kubeconfig.display(),
        name = %settings.name,
        "API server listening"
    );

    // The leader-gated singletons, the same in both modes.
    let api_server_ips = backend.api_server_ips(settings.advertised_ips());
    let (service_ip, api_port) = (settings.kubernetes_service_ip, bound.port());
    let dns_service_ip = settings.cluster_dns;
    tokio::spawn(runner::run(
        RunnerInputs {
            leading: backend.leading(),
            ctx: Arc::new(backend.leader_context(&ctx)),
            server_name: settings.name.clone(),
            api_servers: Arc::new(move || ApiServers {
                ips: api_server_ips(),
                port: api_port,
                service_ip,
                dns_service_ip,
            }),
            bootstrap_delay: crate::failpoints::bootstrap_delay().unwrap_or_default(),
            settings: ControllerSettings {
                event_ttl: settings.event_ttl,
                node_monitor_grace_period: settings.node_monitor_grace_period,
                terminated_pod_gc_threshold: settings.terminated_pod_gc_threshold,
                cluster_cidr: settings.cluster_cidr,
                run_controller_manager: settings.run_controller_manager,
                run_scheduler: settings.run_scheduler,
                ca_cert_pem: pki.ca_cert_pem.clone(),
                ca_key_pem: ca_key_pem.clone(),
                cluster_signing_duration: settings.cluster_signing_duration,
            },
        },
        shutdown.clone(),
    ));
    // Every server's own identity Lease, written like any of its own writes.
    let lease_client = Client::new(ctx.clone(), identities::apiserver(), "kube-apiserver");
    tokio::spawn(identity_lease::renew_loop(
        lease_client,
        settings.name.clone(),
        settings.hostname.clone(),
        shutdown.clone(),
    ));
    startup_beat.cancel();
    // Ready once the bootstrap objects exist; a single server, which writes them itself, also
    // once its own Lease exists (clients that list leases after /readyz find it). A member's
    // Lease goes through the leader and may lag its readiness.
    let own_lease = ObjectKey::new(
        "coordination.k8s.io/leases",
        "kube-system",
        identity_lease::lease_name(&settings.name),
    );
    let single = matches!(backend, Backend::Single(_));
    let bootstrapped: Arc<dyn Fn(&Store) -> bool + Send + Sync> = Arc::new(move |store| {
        bootstrap::present(store) && (!single || store.get(&own_lease).is_some())
    });
    backend.watch_health(
        ctx.clone(),
        bootstrapped,
        readiness.clone(),
        heartbeat,
        shutdown.clone(),
    );

    if serving.await.is_err() {
        tracing::error!("the listener task panicked");
    }
    backend.stop().await;
    tracing::info!(component = "server", "stopped");
    Ok(())
}

/// Stores what a joiner received from the cluster in the data directory: the CA (a different
/// CA than before means certificates of another cluster, so the serving certificate is made
/// again), the CA key and the admin token.
fn store_join_bundle(dir: &DataDir, bundle: &JoinBundle) -> Result<(), ServerError> {
    if let Some(existing) = read_optional(&dir.ca_cert())? {
        if existing != bundle.ca_cert {
            let _ = std::fs::remove_file(dir.server_cert());
            let _ = std::fs::remove_file(dir.server_key());
        }
    }
    write_file(&dir.ca_cert(), bundle.ca_cert.as_bytes(), PUBLIC_MODE)?;
    write_file(&dir.ca_key(), bundle.ca_key.as_bytes(), SECRET_MODE)?;
    write_file(
        &dir.admin_token(),
        format!("{}\n", bundle.admin_token).as_bytes(),
        SECRET_MODE,
    )
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
    let (writer, report) = replayed.map_err(|e| ServerError::Task {
        what: "replaying objects.wal",
        reason: e.to_string(),
    })??;
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
