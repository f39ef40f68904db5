//! Assembly of `litek8s agent`, in order: the node directory (0700), the server list (the
//! `--server` and `servers.json`), the node's credential (stored, or a join), the API client
//! and the server list's health checks and discovery, the Node's registration (retried until
//! a server takes it), then the Node's watch, Lease and status loops, and the pods: the
//! container runtime (detected before registering, so the Node reports it from the start),
//! the containers adopted from the last run, the image store and its air-gap directory
//! (imported before any pod starts), sandboxes on the node's podCIDR, the pod workers, and
//! (unless `--disable-proxy`) the Service proxy and pod routes, and (unless
//! `--disable-network-policy`) the NetworkPolicy rules of this node's pods.
//! `READY=1` once the Node is registered and Ready; `STATUS=` names the server in use and
//! the pods running; `WATCHDOG=1` while the Lease loop makes progress. SIGTERM or SIGINT:
//! `STOPPING=1`, the loops stop, exit 0; what runs on the node is left running (a restart or
//! an upgrade of the agent does not touch it).

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use super::api::ApiClient;
use super::dns::{self, DnsSettings, ZoneSettings};
use super::images::{ImageSettings, Images};
use super::join::CredentialFiles;
use super::join::{self, JoinError};
use super::node::lease::LeaseRenewer;
use super::node::machine::{Machine, Sources};
use super::node::status::{NodeSpecifics, RuntimeInfo};
use super::node::{watch_node, NodeReporter, NodeState};
use super::pods::env::NodeAllocatable;
use super::pods::{self, PodCounts, PodsDeps, PodsSettings};
use super::runtime::{self, Runtime, RuntimeKind, RuntimeSettings};
use super::sandbox::{SandboxSettings, Sandboxes};
use super::settings::{AgentSettings, DnsListen, RuntimeChoice};
use super::streams::node_port::NodePort;
use super::streams::StreamsDeps;
use crate::failover::{discovery, health, Failover, StateFile};
use crate::http_client::{TlsError, Transport};
use crate::systemd::notify::{self, Notifier};
use crate::systemd::watchdog::{self, Heartbeat};

/// How often the server list is asked of a server besides every change of server.
const DISCOVERY_INTERVAL: Duration = Duration::from_secs(30);
/// How often image GC looks at the disk (kubelet's).
const IMAGE_GC_INTERVAL: Duration = Duration::from_secs(300);

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

/// The container runtime as the Node reports it: the detected one, or (when none can run
/// containers here) the `--runtime` choice with version `unknown`.
fn runtime_info(
    choice: RuntimeChoice,
    detected: &Result<runtime::RuntimeInfo, String>,
) -> RuntimeInfo {
    match detected {
        Ok(info) => RuntimeInfo {
            name: info.kind.to_string(),
            version: info.version.clone(),
            note: info.limits_message(),
        },
        Err(_) => RuntimeInfo {
            name: match choice {
                RuntimeChoice::Detect => "oci".to_string(),
                other => other.name().to_string(),
            },
            version: "unknown".to_string(),
            note: None,
        },
    }
}

/// Which runtime runs containers here (blocking: runs `--version`).
async fn detect_runtime(choice: RuntimeChoice) -> Result<runtime::RuntimeInfo, String> {
    let forced = match choice {
        RuntimeChoice::Detect => None,
        RuntimeChoice::Runc => Some(RuntimeKind::Runc),
        RuntimeChoice::Crun => Some(RuntimeKind::Crun),
    };
    match tokio::task::spawn_blocking(move || runtime::detect::detect(forced)).await {
        Ok(Ok(info)) => Ok(info),
        Ok(Err(e)) => Err(e.to_string()),
        Err(e) => Err(format!("detecting the container runtime: {e}")),
    }
}

/// What the pod workers share with the rest of the agent.
struct PodsShared {
    /// The pods running, for the node's status and sd_notify.
    counts: PodCounts,
    /// The Services the proxy follows, for the containers' Service variables.
    services: Arc<super::proxy::informer::Shared>,
}

/// Everything that runs pods, started in order (module doc).
async fn start_pods(
    settings: &AgentSettings,
    api: &ApiClient,
    info: runtime::RuntimeInfo,
    state: &NodeState,
    machine: &Machine,
    shared: PodsShared,
    stop: &CancellationToken,
) -> Result<(Arc<Runtime>, Arc<Sandboxes>), String> {
    let runtime = Runtime::new(
        info,
        RuntimeSettings::new(&settings.node_dir, &settings.log_dir),
    )
    .map_err(|e| format!("the container runtime: {e}"))?;
    let runtime = Arc::new(runtime);
    let adopted = runtime
        .adopt()
        .await
        .map_err(|e| format!("reading the containers of the last run: {e}"))?;
    for (dir, why) in &adopted.skipped {
        tracing::warn!(
            component = "runtime",
            "{}: left alone: {why}",
            dir.display()
        );
    }
    if adopted.adopted > 0 {
        tracing::info!(
            component = "runtime",
            "adopted {} container(s) of the last run",
            adopted.adopted
        );
    }

    let mut image_settings = ImageSettings::new(&settings.node_dir);
    image_settings.registry.insecure = settings.insecure_registries.clone();
    let images = tokio::task::spawn_blocking(move || Images::open(image_settings))
        .await
        .map_err(|e| format!("the image store: {e}"))?
        .map_err(|e| format!("the image store: {e}"))?;
    let images = Arc::new(images);
    let (scanned, first_scan) = tokio::sync::oneshot::channel();
    tokio::spawn(super::images::watch::watch_signalling(
        images.clone(),
        stop.clone(),
        Some(scanned),
    ));
    let _ = first_scan.await;
    tokio::spawn(collect_images(
        images.clone(),
        runtime.clone(),
        stop.clone(),
    ));

    let mut sandbox_settings = SandboxSettings::new(&settings.node_dir);
    sandbox_settings.cni.bridge = settings.cni_bridge.clone();
    sandbox_settings.cluster_dns = Some(settings.cluster_dns);
    sandbox_settings.cluster_domain = settings.cluster_domain.clone();
    tokio::spawn(run_dns(
        settings.clone(),
        api.clone(),
        sandbox_settings.resolv_conf.clone(),
        sandbox_settings.resolved_upstream.clone(),
        state.pod_cidr.subscribe(),
        stop.clone(),
    ));
    let sandboxes = Arc::new(Sandboxes::new(
        sandbox_settings,
        state.pod_cidr.borrow().clone(),
    ));
    tokio::spawn(follow_pod_cidr(
        sandboxes.clone(),
        state.pod_cidr.subscribe(),
        stop.clone(),
    ));

    let mut pods_settings = PodsSettings::new(&settings.node_name, settings.node_ip);
    pods_settings.memory_capacity = machine.memory_bytes;
    pods_settings.allocatable = node_allocatable(settings, machine);
    pods::start(
        PodsDeps {
            api: api.clone(),
            runtime: runtime.clone(),
            images,
            sandboxes: sandboxes.clone(),
            services: shared.services,
            settings: pods_settings,
        },
        shared.counts,
        stop.clone(),
    );
    Ok((runtime, sandboxes))
}

/// What pods may use of this machine, as the Node's allocatable says: capacity minus
/// `--system-reserved` minus the memory and node file system eviction thresholds.
fn node_allocatable(settings: &AgentSettings, machine: &Machine) -> NodeAllocatable {
    let reserved = &settings.system_reserved;
    let eviction = &settings.eviction_hard;
    let kept =
        |t: Option<crate::agent::settings::Threshold>, total: u64| t.map_or(0, |t| t.of(total));
    let clamp = |n: u64| i64::try_from(n).unwrap_or(i64::MAX);
    NodeAllocatable {
        cpu_millis: clamp(machine.cpu_millis.saturating_sub(reserved.cpu_millis)),
        memory_bytes: clamp(
            machine
                .memory_bytes
                .saturating_sub(reserved.memory_bytes)
                .saturating_sub(kept(eviction.memory_available, machine.memory_bytes)),
        ),
        ephemeral_storage_bytes: clamp(
            machine
                .storage_bytes
                .saturating_sub(reserved.ephemeral_storage_bytes)
                .saturating_sub(kept(eviction.nodefs_available, machine.storage_bytes)),
        ),
    }
}

/// The cluster DNS responder, on `--dns-listen` or, by default, port 53 of the pod bridge's
/// gateway once the node's podCIDR is known. A failure to listen is logged and tried again:
/// the node runs on without cluster DNS rather than not at all.
async fn run_dns(
    settings: AgentSettings,
    api: ApiClient,
    resolv_conf: PathBuf,
    resolved_upstream: PathBuf,
    mut cidr: watch::Receiver<Option<String>>,
    stop: CancellationToken,
) {
    let listen = match settings.dns_listen {
        DnsListen::Off => return,
        DnsListen::At(addr) => addr,
        DnsListen::Gateway => loop {
            if let Some(gw) = cidr.borrow_and_update().as_deref().and_then(gateway) {
                break std::net::SocketAddr::new(gw, 53);
            }
            tokio::select! {
                _ = stop.cancelled() => return,
                changed = cidr.changed() => if changed.is_err() { return },
            }
        },
    };
    let dns = DnsSettings {
        zone: ZoneSettings {
            domain: settings.cluster_domain.clone(),
            dns_ip: Some(settings.cluster_dns),
        },
        listen,
        upstreams: dns::host_upstreams(&resolv_conf, &resolved_upstream),
    };
    loop {
        match dns::start(api.clone(), dns.clone(), stop.clone()).await {
            Ok(_) => return,
            Err(e) => tracing::error!(component = "dns", "cluster DNS not started: {e}"),
        }
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = tokio::time::sleep(Duration::from_secs(10)) => {}
        }
    }
}

/// The first address of an IPv4 podCIDR: the bridge's gateway (the CNI bridge plugin's
/// default with `isGateway`).
fn gateway(cidr: &str) -> Option<std::net::IpAddr> {
    let (net, _) = cidr.split_once('/')?;
    let net: std::net::Ipv4Addr = net.parse().ok()?;
    Some(std::net::Ipv4Addr::from(u32::from(net).checked_add(1)?).into())
}

/// Keeps the sandboxes' pod network on the node's `spec.podCIDR`.
async fn follow_pod_cidr(
    sandboxes: Arc<Sandboxes>,
    mut cidr: watch::Receiver<Option<String>>,
    stop: CancellationToken,
) {
    loop {
        sandboxes.set_pod_cidr(cidr.borrow_and_update().clone());
        tokio::select! {
            _ = stop.cancelled() => return,
            changed = cidr.changed() => if changed.is_err() { return },
        }
    }
}

/// Image GC every [`IMAGE_GC_INTERVAL`], the images of every container kept.
async fn collect_images(images: Arc<Images>, runtime: Arc<Runtime>, stop: CancellationToken) {
    use pods::containers::annotations;
    loop {
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = tokio::time::sleep(IMAGE_GC_INTERVAL) => {}
        }
        let in_use = runtime
            .list()
            .into_iter()
            .filter_map(|s| s.annotations.get(annotations::IMAGE).cloned())
            .collect();
        match images.collect_garbage(&in_use).await {
            Ok(report) if !report.removed.is_empty() => {
                tracing::info!(
                    component = "images",
                    "image GC removed {}",
                    report.removed.join(", ")
                )
            }
            Ok(_) => {}
            Err(e) => tracing::warn!(component = "images", "image GC: {e}"),
        }
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
    let ca_pem = joined.credentials.ca_pem.clone();
    // Every connection presents the certificate current at its handshake, so a renewed one
    // reaches the API client, the tunnel and everything else made from `tls`.
    let identity = Arc::new(crate::http_client::RotatingIdentity::new(
        joined.credentials.identity()?,
    )?);
    let tls = crate::http_client::TlsConfig::pinned_rotating(
        &joined.credentials.ca_pem,
        identity.clone(),
    )?;
    let api = ApiClient::new(&tls, servers.clone());
    tokio::spawn(super::cert_rotation::run(
        api.clone(),
        join::CredentialFiles::in_node_dir(&settings.node_dir),
        settings.node_name.clone(),
        identity,
        joined.credentials.clone(),
        stop.clone(),
    ));

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

    notifier.status("detecting the container runtime");
    let detected = detect_runtime(settings.runtime).await;
    if let Err(e) = &detected {
        tracing::error!(component = "runtime", "no pods can run here: {e}");
    }
    // Why pods cannot run here (`None`: they can). Ready follows it.
    let runtime_problem = Arc::new(watch::Sender::new(detected.as_ref().err().cloned()));
    let state = NodeState::default();
    let machine = Machine::read(&Sources::default(), &settings.node_dir);
    let pods_machine = machine.clone();
    let reporter = NodeReporter {
        api: api.clone(),
        node: NodeSpecifics {
            name: settings.node_name.clone(),
            ip: settings.node_ip,
            kubelet_port: settings.kubelet_port,
            labels: settings.labels.clone(),
            taints: settings.taints.clone(),
            reserved: settings.system_reserved,
            eviction: settings.eviction_hard,
            runtime: runtime_info(settings.runtime, &detected),
        },
        machine,
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
    // The Services, followed once: for the proxy's rules and the containers' Service
    // variables.
    let services = Arc::new(super::proxy::informer::Shared::default());
    if settings.proxy {
        tasks.spawn(super::proxy::run(
            api.clone(),
            super::proxy::SyncSettings::new(
                &settings.node_name,
                settings.cluster_cidr,
                // The rules are IPv4; an IPv6 cluster DNS address gets no redirect.
                match settings.cluster_dns {
                    std::net::IpAddr::V4(v4) => Some(v4),
                    std::net::IpAddr::V6(_) => None,
                },
            ),
            services.clone(),
            stop.clone(),
        ));
    } else {
        super::proxy::follow_services(api.clone(), services.clone(), stop.clone());
    }
    if settings.network_policy {
        tasks.spawn(super::netpol::run(
            api.clone(),
            super::netpol::SyncSettings::new(&settings.node_name),
            stop.clone(),
        ));
    }
    // Started apart: an air-gap import at start must not hold back READY=1.
    let pods = detected.ok().map(|info| {
        let counts = PodCounts::default();
        let (settings, api, state, counts2, stop) = (
            settings.clone(),
            api.clone(),
            state.clone(),
            counts.clone(),
            stop.clone(),
        );
        let problem = runtime_problem.clone();
        let services = services.clone();
        tokio::spawn(async move {
            let started = start_pods(
                &settings,
                &api,
                info,
                &state,
                &pods_machine,
                PodsShared {
                    counts: counts2,
                    services,
                },
                &stop,
            )
            .await;
            match started {
                // The tunnel serves logs, exec and port-forward of the pods run here.
                Ok((runtime, sandboxes)) => {
                    // Each running container's log kept within its size and count.
                    tokio::spawn(super::runtime::log_rotation::run(
                        runtime.clone(),
                        super::runtime::log_rotation::Policy {
                            max_size: settings.container_log_max_size,
                            max_files: settings.container_log_max_files,
                        },
                        stop.clone(),
                    ));
                    let deps = Arc::new(StreamsDeps {
                        runtime,
                        sandboxes,
                        node_name: settings.node_name.clone(),
                    });
                    tokio::spawn(super::streams::tunnel::run(
                        api.clone(),
                        tls,
                        settings.node_name.clone(),
                        deps.clone(),
                        stop.clone(),
                    ));
                    // The same routes on kubelet's port, for tools that dial nodes.
                    let node_port = NodePort {
                        port: settings.kubelet_port,
                        api: api.clone(),
                        node_name: settings.node_name.clone(),
                        node_ip: settings.node_ip,
                        ca_pem,
                        files: CredentialFiles::in_node_dir(&settings.node_dir),
                    };
                    tokio::spawn(super::streams::node_port::run(
                        node_port,
                        deps,
                        stop.clone(),
                    ));
                }
                Err(e) => {
                    tracing::error!(component = "pods", "no pods can run here: {e}");
                    problem.send_replace(Some(e));
                }
            }
        });
        counts
    });
    report(
        &settings.node_name,
        &api,
        &state,
        pods.as_ref(),
        &notifier,
        stop.clone(),
    )
    .await;
    // The loops end at `stop`; their requests in flight are not waited for long.
    let _ = tokio::time::timeout(Duration::from_secs(2), async {
        while tasks.join_next().await.is_some() {}
    })
    .await;
    drop(runtime_problem);
    Ok(())
}

/// Keeps systemd informed until `stop`: `READY=1` the first time the Node is Ready, and
/// `STATUS=` with its readiness, the server in use and the pods running whenever one
/// changes.
async fn report(
    node: &str,
    api: &ApiClient,
    state: &NodeState,
    pods: Option<&PodCounts>,
    notifier: &Notifier,
    stop: CancellationToken,
) {
    let mut ready = state.ready.subscribe();
    let mut running = pods.map(PodCounts::running);
    let mut announced_ready = false;
    let mut last_status = String::new();
    let mut ticks = tokio::time::interval(Duration::from_secs(1));
    loop {
        let server = api
            .in_use()
            .or_else(|| api.servers().active())
            .unwrap_or_else(|| "none".into());
        let is_ready = *ready.borrow_and_update();
        let pods_text = match running.as_mut().map(|r| *r.borrow_and_update()) {
            Some(1) => "; 1 pod running".to_string(),
            Some(n) => format!("; {n} pods running"),
            None => "; pods cannot run".to_string(),
        };
        let text = format!(
            "node {node} {}; server {server}{pods_text}",
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

#[cfg(test)]
mod tests {
    #[test]
    fn the_gateway_is_the_first_address_of_the_pod_cidr() {
        assert_eq!(super::gateway("10.42.3.0/24"), Some([10, 42, 3, 1].into()));
        assert_eq!(super::gateway("fd00::/64"), None);
        assert_eq!(super::gateway("junk"), None);
    }
}
