//! The agent's settings: the command line (`cli::agent` fills [`AgentFlags`]) and the
//! environment resolved once into validated [`AgentSettings`], so that the rest of the agent
//! never parses a flag. Machine-dependent defaults are decided here: the node name (the
//! hostname) and the node IP (the source address of the route to the server).
//!
//! The join token comes from `--token-file`, `--token` or `LITEK8S_TOKEN`, in that order; it is
//! needed only while the node directory holds no usable credential, so it is never required
//! on a command line (and a unit keeps it in an environment file).

use std::collections::BTreeMap;
use std::net::{IpAddr, SocketAddr, ToSocketAddrs, UdpSocket};
use std::path::PathBuf;
use std::time::Duration;

use super::proxy::model::Cidr;
use crate::cluster::join_token::{JoinToken, TokenError};
use crate::cluster::node_credential::is_node_name;
use crate::controllers::taints::{Effect, Taint};
use crate::http_client::{Scheme, ServerUrl};

/// Where the agent keeps its state unless `--node-dir` says otherwise.
pub const DEFAULT_NODE_DIR: &str = "/var/lib/litek8s/node-agent";
/// How often the server in use (and every other known server) is checked.
pub const SERVER_CHECK_INTERVAL: Duration = Duration::from_secs(2);

/// The flags as given, before validation.
#[derive(Debug, Clone, Default)]
pub struct AgentFlags {
    pub server: String,
    pub token: Option<String>,
    pub token_file: Option<PathBuf>,
    /// The `LITEK8S_TOKEN` environment variable.
    pub token_env: Option<String>,
    pub node_dir: PathBuf,
    pub node_name: Option<String>,
    pub node_ip: Option<IpAddr>,
    pub runtime: Option<String>,
    pub node_labels: Vec<String>,
    pub node_taints: Vec<String>,
    pub system_reserved: Option<String>,
    pub eviction_hard: Option<String>,
    pub node_lease_duration_seconds: u64,
    pub node_status_update_frequency: Duration,
    pub node_status_report_frequency: Duration,
    /// `--log-dir`: where container logs go (`<node-dir>/logs` when not given).
    pub log_dir: Option<PathBuf>,
    /// `--insecure-registry`: registries spoken to in plain HTTP.
    pub insecure_registries: Vec<String>,
    /// `--cni-bridge`: the bridge of the generated pod network.
    pub cni_bridge: Option<String>,
    /// `--cluster-cidr` (default [`DEFAULT_CLUSTER_CIDR`]).
    pub cluster_cidr: Option<String>,
    /// `--disable-proxy`: no Service rules, no pod routes.
    pub disable_proxy: bool,
    /// `--disable-network-policy`: NetworkPolicies are not enforced on this node.
    pub disable_network_policy: bool,
    /// `--cluster-dns`: the `kube-dns` Service's ClusterIP, pods' nameserver.
    pub cluster_dns: Option<IpAddr>,
    /// `--cluster-domain`.
    pub cluster_domain: Option<String>,
    /// `--dns-listen`: where the cluster DNS responder listens.
    pub dns_listen: Option<String>,
    /// `--kubelet-port` (default [`DEFAULT_KUBELET_PORT`]; 0: off).
    pub kubelet_port: Option<u16>,
    /// `--container-log-max-size` (default [`DEFAULT_CONTAINER_LOG_MAX_SIZE`]).
    pub container_log_max_size: Option<String>,
    /// `--container-log-max-files` (default [`DEFAULT_CONTAINER_LOG_MAX_FILES`]).
    pub container_log_max_files: Option<u32>,
}

/// The node port unless `--kubelet-port` says otherwise (kubelet's).
pub const DEFAULT_KUBELET_PORT: u16 = 10250;
/// When a container's log is rotated unless `--container-log-max-size` says otherwise.
pub const DEFAULT_CONTAINER_LOG_MAX_SIZE: &str = "10Mi";
/// The files a container's log keeps (the current one included) unless
/// `--container-log-max-files` says otherwise (kubelet's defaults, both).
pub const DEFAULT_CONTAINER_LOG_MAX_FILES: u32 = 5;

/// The `kube-dns` Service's ClusterIP unless `--cluster-dns` says otherwise (k3s's).
pub const DEFAULT_CLUSTER_DNS: IpAddr = IpAddr::V4(std::net::Ipv4Addr::new(10, 43, 0, 10));
/// The cluster domain unless `--cluster-domain` says otherwise.
pub const DEFAULT_CLUSTER_DOMAIN: &str = "cluster.local";

/// Where the cluster DNS responder listens.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DnsListen {
    /// Port 53 of the pod bridge's gateway, the first address of the node's podCIDR (where
    /// the Service proxy sends the `kube-dns` ClusterIP), once the podCIDR is known.
    Gateway,
    /// An address given (tests, or a machine whose proxy sends DNS elsewhere).
    At(std::net::SocketAddr),
    /// No responder on this node.
    Off,
}

/// The cluster's pod network unless `--cluster-cidr` says otherwise (the servers' default).
pub const DEFAULT_CLUSTER_CIDR: &str = "10.42.0.0/16";

/// The bridge the generated pod network uses unless `--cni-bridge` names another.
pub const DEFAULT_CNI_BRIDGE: &str = "litek8s0";

/// The OCI runtime the agent runs containers with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RuntimeChoice {
    /// Not given: the runtime is detected at start (`agent::runtime`).
    Detect,
    Runc,
    Crun,
}

impl RuntimeChoice {
    pub fn name(self) -> &'static str {
        match self {
            RuntimeChoice::Detect => "detect",
            RuntimeChoice::Runc => "runc",
            RuntimeChoice::Crun => "crun",
        }
    }
}

/// What `--system-reserved` keeps from the pods (subtracted from allocatable).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Reserved {
    pub cpu_millis: u64,
    pub memory_bytes: u64,
    pub ephemeral_storage_bytes: u64,
}

/// A hard eviction threshold: what must stay available, as a quantity or a share.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Threshold {
    Quantity(u64),
    Percent(f64),
}

impl Threshold {
    /// The threshold in the unit of `total` (bytes, inodes, pids).
    pub fn of(self, total: u64) -> u64 {
        match self {
            Threshold::Quantity(n) => n,
            Threshold::Percent(p) => (total as f64 * p / 100.0) as u64,
        }
    }
}

/// kubelet's `--eviction-hard`: below these, the node reports pressure; the memory and
/// node file system thresholds are also kept from allocatable. The images live in the node
/// directory, so the image file system is the node file system here.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct EvictionHard {
    pub memory_available: Option<Threshold>,
    pub nodefs_available: Option<Threshold>,
    pub nodefs_inodes_free: Option<Threshold>,
    pub imagefs_available: Option<Threshold>,
    pub imagefs_inodes_free: Option<Threshold>,
    pub pid_available: Option<Threshold>,
}

impl Default for EvictionHard {
    /// kubelet's defaults on Linux.
    fn default() -> EvictionHard {
        EvictionHard {
            memory_available: Some(Threshold::Quantity(100 << 20)),
            nodefs_available: Some(Threshold::Percent(10.0)),
            nodefs_inodes_free: Some(Threshold::Percent(5.0)),
            imagefs_available: Some(Threshold::Percent(15.0)),
            imagefs_inodes_free: Some(Threshold::Percent(5.0)),
            pid_available: None,
        }
    }
}

/// Everything the agent needs, validated.
#[derive(Clone)]
pub struct AgentSettings {
    /// The `--server` as `host:port`: the first server asked, kept in the failover list.
    pub server: String,
    pub token: Option<JoinToken>,
    pub node_dir: PathBuf,
    pub node_name: String,
    pub node_ip: IpAddr,
    pub runtime: RuntimeChoice,
    /// `--node-label`s, applied at every start (never removed).
    pub labels: BTreeMap<String, String>,
    /// `--node-taint`s, given to the Node when it is created (as kubelet's
    /// `--register-with-taints`; later taints belong to the cluster).
    pub taints: Vec<Taint>,
    pub system_reserved: Reserved,
    pub eviction_hard: EvictionHard,
    /// The node Lease's duration; it is renewed every quarter of it (kubelet's rule).
    pub lease_duration: Duration,
    /// How often the node's status is computed and written if it changed.
    pub status_update_frequency: Duration,
    /// How often the status is written even when nothing changed.
    pub status_report_frequency: Duration,
    pub server_check_interval: Duration,
    /// Container logs, kubelet's layout below it (`<ns>_<pod>_<uid>/<container>/<n>.log`).
    pub log_dir: PathBuf,
    /// Registries (`host` or `host:port`) spoken to in plain HTTP.
    pub insecure_registries: Vec<String>,
    /// The Linux bridge of the generated pod network.
    pub cni_bridge: String,
    /// The cluster's pod network (every node's podCIDR is inside it).
    pub cluster_cidr: Cidr,
    /// Whether the Service proxy and the pod routes run.
    pub proxy: bool,
    /// Whether NetworkPolicies are enforced for this node's pods.
    pub network_policy: bool,
    /// The `kube-dns` ClusterIP: the nameserver of ClusterFirst pods.
    pub cluster_dns: IpAddr,
    /// `cluster.local`: lower case, without dots at the ends.
    pub cluster_domain: String,
    pub dns_listen: DnsListen,
    /// The node port (0: off).
    pub kubelet_port: u16,
    /// A container's log file is rotated past this many bytes.
    pub container_log_max_size: u64,
    /// Files a container's log keeps, the one written included (at least 2).
    pub container_log_max_files: u32,
}

impl std::fmt::Debug for AgentSettings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AgentSettings")
            .field("server", &self.server)
            .field("token", &self.token.as_ref().map(|_| "<redacted>"))
            .field("node_dir", &self.node_dir)
            .field("node_name", &self.node_name)
            .field("node_ip", &self.node_ip)
            .field("runtime", &self.runtime)
            .field("labels", &self.labels)
            .field("taints", &self.taints)
            .field("system_reserved", &self.system_reserved)
            .finish_non_exhaustive()
    }
}

/// Why the flags were refused. Each message names the flag.
#[derive(Debug, thiserror::Error)]
pub enum SettingsError {
    #[error("--server {0}")]
    Server(String),
    #[error("{source_name}: {error}")]
    Token {
        source_name: String,
        error: TokenError,
    },
    #[error("--token-file {}: {error}", path.display())]
    TokenFile {
        path: PathBuf,
        error: std::io::Error,
    },
    #[error("--token and --token-file are both given: pass one")]
    TwoTokens,
    #[error("{0}")]
    NodeName(String),
    #[error("--node-ip: {0}")]
    NodeIp(String),
    #[error("--runtime {0:?}: expected runc or crun")]
    Runtime(String),
    #[error("--node-label {given:?}: {reason}")]
    Label { given: String, reason: String },
    #[error("--node-taint {given:?}: {reason}")]
    Taint { given: String, reason: String },
    #[error("--system-reserved {given:?}: {reason}")]
    Reserved { given: String, reason: String },
    #[error("--eviction-hard {given:?}: {reason}")]
    Eviction { given: String, reason: String },
    #[error("{0}")]
    Interval(String),
    #[error(
        "--cni-bridge {0:?}: a network interface name (1 to 15 letters, digits, '-', '_' or '.')"
    )]
    Bridge(String),
    #[error("--cluster-cidr {0:?}: expected an IPv4 network, e.g. 10.42.0.0/16")]
    ClusterCidr(String),
    #[error("--insecure-registry {0:?}: expected HOST or HOST:PORT")]
    Registry(String),
    #[error("--cluster-domain {0:?}: expected a DNS name such as cluster.local")]
    ClusterDomain(String),
    #[error("--dns-listen {0:?}: expected IP, IP:PORT, or 0 to turn the responder off")]
    DnsListen(String),
    #[error("--container-log-max-size {given:?}: {reason}")]
    LogMaxSize { given: String, reason: String },
    #[error("--container-log-max-files {0}: at least 2 (the file written and one rotated)")]
    LogMaxFiles(u32),
}

impl AgentSettings {
    /// Validates `flags`, reading the token file and looking up the hostname and the route to
    /// the server where they are not given.
    pub fn resolve(flags: AgentFlags) -> Result<AgentSettings, SettingsError> {
        let url =
            ServerUrl::parse(&flags.server).map_err(|e| SettingsError::Server(e.to_string()))?;
        if url.scheme == Some(Scheme::Http) {
            return Err(SettingsError::Server(format!(
                "{:?}: the agent talks HTTPS (expected https://HOST:PORT)",
                flags.server
            )));
        }
        let server = url.authority();
        let token = resolve_token(&flags)?;
        let node_name = match &flags.node_name {
            Some(name) => {
                if !is_node_name(name) {
                    return Err(SettingsError::NodeName(format!(
                        "--node-name {name:?}: must be a DNS subdomain (lowercase letters, digits, '-' and '.')"
                    )));
                }
                name.clone()
            }
            None => {
                let host = nix::unistd::gethostname()
                    .map_err(|e| SettingsError::NodeName(format!("reading the hostname: {e}")))?
                    .to_string_lossy()
                    .to_ascii_lowercase();
                if !is_node_name(&host) {
                    return Err(SettingsError::NodeName(format!(
                        "the hostname {host:?} is not a usable node name; pass --node-name"
                    )));
                }
                host
            }
        };
        let node_ip = match flags.node_ip {
            Some(ip) => ip,
            None => route_source(&server).map_err(SettingsError::NodeIp)?,
        };
        let runtime = match flags.runtime.as_deref() {
            None => RuntimeChoice::Detect,
            Some("runc") => RuntimeChoice::Runc,
            Some("crun") => RuntimeChoice::Crun,
            Some(other) => return Err(SettingsError::Runtime(other.to_string())),
        };
        let mut labels = BTreeMap::new();
        for given in &flags.node_labels {
            let (key, value) = parse_label(given).map_err(|reason| SettingsError::Label {
                given: given.clone(),
                reason,
            })?;
            labels.insert(key, value);
        }
        let mut taints = Vec::new();
        for given in &flags.node_taints {
            taints.push(parse_taint(given).map_err(|reason| SettingsError::Taint {
                given: given.clone(),
                reason,
            })?);
        }
        let system_reserved = match &flags.system_reserved {
            Some(given) => parse_reserved(given).map_err(|reason| SettingsError::Reserved {
                given: given.clone(),
                reason,
            })?,
            None => Reserved::default(),
        };
        let eviction_hard = match &flags.eviction_hard {
            Some(given) => parse_eviction(given).map_err(|reason| SettingsError::Eviction {
                given: given.clone(),
                reason,
            })?,
            None => EvictionHard::default(),
        };
        if flags.node_lease_duration_seconds == 0 {
            return Err(SettingsError::Interval(
                "--node-lease-duration-seconds must be at least 1".into(),
            ));
        }
        if flags.node_status_update_frequency.is_zero()
            || flags.node_status_report_frequency < flags.node_status_update_frequency
        {
            return Err(SettingsError::Interval(
                "--node-status-update-frequency must be positive and at most --node-status-report-frequency".into(),
            ));
        }
        let cni_bridge = flags
            .cni_bridge
            .clone()
            .unwrap_or_else(|| DEFAULT_CNI_BRIDGE.to_string());
        let bridge_ok = (1..=15).contains(&cni_bridge.len())
            && cni_bridge
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b))
            && cni_bridge != "."
            && cni_bridge != "..";
        if !bridge_ok {
            return Err(SettingsError::Bridge(cni_bridge));
        }
        for registry in &flags.insecure_registries {
            let r = registry.trim();
            if r.is_empty() || r.contains(['/', ' ', '@']) {
                return Err(SettingsError::Registry(registry.clone()));
            }
        }
        let cluster_cidr_text = flags
            .cluster_cidr
            .clone()
            .unwrap_or_else(|| DEFAULT_CLUSTER_CIDR.to_string());
        let cluster_cidr = Cidr::parse(&cluster_cidr_text)
            .filter(|c| c.prefix >= 8)
            .ok_or(SettingsError::ClusterCidr(cluster_cidr_text))?;
        let domain = flags
            .cluster_domain
            .as_deref()
            .unwrap_or(DEFAULT_CLUSTER_DOMAIN)
            .trim_matches('.')
            .to_ascii_lowercase();
        if !crate::api::validation::is_dns1123_subdomain(&domain) {
            return Err(SettingsError::ClusterDomain(domain));
        }
        let dns_listen = parse_dns_listen(flags.dns_listen.as_deref())?;
        let max_size_text = flags
            .container_log_max_size
            .as_deref()
            .unwrap_or(DEFAULT_CONTAINER_LOG_MAX_SIZE);
        let container_log_max_size = parse_quantity(max_size_text, 1)
            .and_then(|n| {
                (n >= 1024)
                    .then_some(n)
                    .ok_or_else(|| "at least 1Ki".to_string())
            })
            .map_err(|reason| SettingsError::LogMaxSize {
                given: max_size_text.to_string(),
                reason,
            })?;
        let container_log_max_files = flags
            .container_log_max_files
            .unwrap_or(DEFAULT_CONTAINER_LOG_MAX_FILES);
        if container_log_max_files < 2 {
            return Err(SettingsError::LogMaxFiles(container_log_max_files));
        }
        Ok(AgentSettings {
            kubelet_port: flags.kubelet_port.unwrap_or(DEFAULT_KUBELET_PORT),
            container_log_max_size,
            container_log_max_files,
            server,
            token,
            cluster_cidr,
            proxy: !flags.disable_proxy,
            network_policy: !flags.disable_network_policy,
            cluster_dns: flags.cluster_dns.unwrap_or(DEFAULT_CLUSTER_DNS),
            cluster_domain: domain,
            dns_listen,
            log_dir: flags
                .log_dir
                .clone()
                .unwrap_or_else(|| flags.node_dir.join("logs")),
            insecure_registries: flags.insecure_registries.clone(),
            cni_bridge,
            node_dir: flags.node_dir,
            node_name,
            node_ip,
            runtime,
            labels,
            taints,
            system_reserved,
            eviction_hard,
            lease_duration: Duration::from_secs(flags.node_lease_duration_seconds),
            status_update_frequency: flags.node_status_update_frequency,
            status_report_frequency: flags.node_status_report_frequency,
            server_check_interval: SERVER_CHECK_INTERVAL,
        })
    }
}

/// `--dns-listen`: `IP` (port 53), `IP:PORT`, `0` or empty (off); not given: the gateway.
fn parse_dns_listen(given: Option<&str>) -> Result<DnsListen, SettingsError> {
    let Some(given) = given.map(str::trim) else {
        return Ok(DnsListen::Gateway);
    };
    if given.is_empty() || given == "0" {
        return Ok(DnsListen::Off);
    }
    if let Ok(addr) = given.parse() {
        return Ok(DnsListen::At(addr));
    }
    match given.parse::<IpAddr>() {
        Ok(ip) => Ok(DnsListen::At(std::net::SocketAddr::new(ip, 53))),
        Err(_) => Err(SettingsError::DnsListen(given.to_string())),
    }
}

fn resolve_token(flags: &AgentFlags) -> Result<Option<JoinToken>, SettingsError> {
    let parse = |source_name: &str, text: &str| {
        JoinToken::parse(text).map_err(|error| SettingsError::Token {
            source_name: source_name.to_string(),
            error,
        })
    };
    if flags.token.is_some() && flags.token_file.is_some() {
        return Err(SettingsError::TwoTokens);
    }
    if let Some(path) = &flags.token_file {
        let text = std::fs::read_to_string(path).map_err(|error| SettingsError::TokenFile {
            path: path.clone(),
            error,
        })?;
        return parse(&format!("--token-file {}", path.display()), &text).map(Some);
    }
    if let Some(text) = &flags.token {
        tracing::warn!(
            "--token is visible to every user of this machine (ps); prefer LITEK8S_TOKEN or --token-file"
        );
        return parse("--token", text).map(Some);
    }
    match flags.token_env.as_deref().map(str::trim) {
        Some(text) if !text.is_empty() => parse("LITEK8S_TOKEN", text).map(Some),
        _ => Ok(None),
    }
}

/// The source address of the route to `server` (`host:port`): the kernel's choice, found by
/// connecting a UDP socket (nothing is sent).
pub fn route_source(server: &str) -> Result<IpAddr, String> {
    let target: SocketAddr = server
        .to_socket_addrs()
        .map_err(|e| format!("looking up {server}: {e}; pass --node-ip"))?
        .next()
        .ok_or_else(|| format!("{server} has no address; pass --node-ip"))?;
    let local: SocketAddr = if target.is_ipv4() {
        ([0, 0, 0, 0], 0).into()
    } else {
        (std::net::Ipv6Addr::UNSPECIFIED, 0).into()
    };
    let socket = UdpSocket::bind(local).map_err(|e| e.to_string())?;
    socket
        .connect(target)
        .map_err(|e| format!("no route to {target}: {e}; pass --node-ip"))?;
    Ok(socket.local_addr().map_err(|e| e.to_string())?.ip())
}

/// A label key: an optional DNS-subdomain prefix and `/`, then a name of at most 63
/// characters of `[A-Za-z0-9_.-]`, starting and ending alphanumeric.
fn is_label_key(key: &str) -> bool {
    let (prefix, name) = match key.rsplit_once('/') {
        Some((prefix, name)) => (Some(prefix), name),
        None => (None, key),
    };
    prefix.is_none_or(crate::api::validation::is_dns1123_subdomain)
        && !name.is_empty()
        && is_label_value(name)
}

/// A label value: empty, or at most 63 characters of `[A-Za-z0-9_.-]`, starting and ending
/// alphanumeric.
fn is_label_value(value: &str) -> bool {
    let ends_ok = |c: Option<char>| c.is_some_and(|c| c.is_ascii_alphanumeric());
    value.is_empty()
        || (value.len() <= 63
            && value
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
            && ends_ok(value.chars().next())
            && ends_ok(value.chars().last()))
}

/// `key=value` (the value may be empty).
pub fn parse_label(given: &str) -> Result<(String, String), String> {
    let (key, value) = given.split_once('=').ok_or("expected KEY=VALUE")?;
    if !is_label_key(key) {
        return Err(format!("{key:?} is not a label key"));
    }
    if !is_label_value(value) {
        return Err(format!("{value:?} is not a label value"));
    }
    Ok((key.to_string(), value.to_string()))
}

/// `key[=value]:Effect`, as kubelet's `--register-with-taints` and `kubectl taint` write it.
pub fn parse_taint(given: &str) -> Result<Taint, String> {
    let (kv, effect) = given.rsplit_once(':').ok_or("expected KEY=VALUE:EFFECT")?;
    let effect = Effect::parse(effect).ok_or_else(|| {
        format!("{effect:?}: the effect is NoSchedule, PreferNoSchedule or NoExecute")
    })?;
    let (key, value) = kv.split_once('=').unwrap_or((kv, ""));
    if !is_label_key(key) {
        return Err(format!("{key:?} is not a taint key"));
    }
    if !is_label_value(value) {
        return Err(format!("{value:?} is not a taint value"));
    }
    Ok(Taint {
        key: key.to_string(),
        value: value.to_string(),
        effect,
        time_added: None,
    })
}

/// `cpu=500m,memory=1Gi,ephemeral-storage=2Gi` (any subset).
pub fn parse_reserved(given: &str) -> Result<Reserved, String> {
    let mut reserved = Reserved::default();
    for item in given.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        let (name, quantity) = item.split_once('=').ok_or("expected NAME=QUANTITY")?;
        match name {
            "cpu" => reserved.cpu_millis = parse_quantity(quantity, 1000)?,
            "memory" => reserved.memory_bytes = parse_quantity(quantity, 1)?,
            "ephemeral-storage" => reserved.ephemeral_storage_bytes = parse_quantity(quantity, 1)?,
            other => {
                return Err(format!(
                    "{other:?}: only cpu, memory and ephemeral-storage can be reserved"
                ))
            }
        }
    }
    Ok(reserved)
}

/// `memory.available<100Mi,nodefs.available<10%,...` (kubelet's syntax). The signals given
/// replace their defaults; the others keep kubelet's.
pub fn parse_eviction(given: &str) -> Result<EvictionHard, String> {
    let mut eviction = EvictionHard::default();
    for item in given.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        let (signal, threshold) = item.split_once('<').ok_or("expected SIGNAL<THRESHOLD")?;
        let threshold = match threshold.strip_suffix('%') {
            Some(p) => {
                let p: f64 = p
                    .parse()
                    .map_err(|_| format!("{threshold:?} is not a percentage"))?;
                if !(0.0..=100.0).contains(&p) {
                    return Err(format!("{threshold:?} is not between 0% and 100%"));
                }
                Threshold::Percent(p)
            }
            None => Threshold::Quantity(parse_quantity(threshold, 1)?),
        };
        let slot = match signal {
            "memory.available" => &mut eviction.memory_available,
            "nodefs.available" => &mut eviction.nodefs_available,
            "nodefs.inodesFree" => &mut eviction.nodefs_inodes_free,
            "imagefs.available" => &mut eviction.imagefs_available,
            "imagefs.inodesFree" => &mut eviction.imagefs_inodes_free,
            "pid.available" => &mut eviction.pid_available,
            other => return Err(format!("{other:?} is not an eviction signal (memory.available, nodefs.available, nodefs.inodesFree, imagefs.available, imagefs.inodesFree, pid.available)")),
        };
        *slot = Some(threshold);
    }
    Ok(eviction)
}

/// A Kubernetes quantity (`500m`, `2`, `1.5Gi`, `100M`) times `scale`, rounded up: cpu with
/// `scale` 1000 gives millicores, memory with 1 gives bytes.
pub fn parse_quantity(text: &str, scale: u64) -> Result<u64, String> {
    let bad = || format!("{text:?} is not a quantity (examples: 500m, 2, 512Mi, 1Gi)");
    let split = text
        .find(|c: char| !c.is_ascii_digit() && c != '.')
        .unwrap_or(text.len());
    let (number, suffix) = text.split_at(split);
    let number: f64 = number.parse().map_err(|_| bad())?;
    let factor: f64 = match suffix {
        "" => 1.0,
        "m" => 0.001,
        "k" => 1e3,
        "M" => 1e6,
        "G" => 1e9,
        "T" => 1e12,
        "Ki" => 1024.0,
        "Mi" => 1024f64.powi(2),
        "Gi" => 1024f64.powi(3),
        "Ti" => 1024f64.powi(4),
        _ => return Err(bad()),
    };
    let value = (number * factor * scale as f64).ceil();
    if !value.is_finite() || value < 0.0 || value > u64::MAX as f64 {
        return Err(bad());
    }
    Ok(value as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn flags() -> AgentFlags {
        AgentFlags {
            server: "https://127.0.0.1:6443".into(),
            node_dir: "/tmp/x".into(),
            node_name: Some("n1".into()),
            node_lease_duration_seconds: 40,
            node_status_update_frequency: Duration::from_secs(10),
            node_status_report_frequency: Duration::from_secs(300),
            ..AgentFlags::default()
        }
    }

    #[test]
    fn defaults_and_route() {
        let s = AgentSettings::resolve(flags()).unwrap();
        assert_eq!(s.server, "127.0.0.1:6443");
        assert_eq!(s.node_ip, IpAddr::from([127, 0, 0, 1]));
        assert_eq!(s.runtime, RuntimeChoice::Detect);
        assert!(s.token.is_none());
        assert_eq!(s.lease_duration, Duration::from_secs(40));
        assert_eq!(s.log_dir, PathBuf::from("/tmp/x/logs"));
        assert_eq!(s.kubelet_port, 10250);
        assert_eq!(s.container_log_max_size, 10 << 20);
        assert_eq!(s.container_log_max_files, 5);
        assert_eq!(s.cni_bridge, "litek8s0");
        assert_eq!(s.cluster_cidr.to_string(), "10.42.0.0/16");
        assert!(s.proxy);
        assert!(s.network_policy);
        assert_eq!(s.cluster_dns, IpAddr::from([10, 43, 0, 10]));
        assert_eq!(s.cluster_domain, "cluster.local");
        assert_eq!(s.dns_listen, DnsListen::Gateway);
    }

    #[test]
    fn dns_flags() {
        let with = |domain: &str, listen: &str| {
            AgentSettings::resolve(AgentFlags {
                cluster_domain: Some(domain.into()),
                dns_listen: Some(listen.into()),
                ..flags()
            })
        };
        let s = with("Cluster.Example.", "127.0.0.1:5353").unwrap();
        assert_eq!(s.cluster_domain, "cluster.example");
        assert_eq!(
            s.dns_listen,
            DnsListen::At("127.0.0.1:5353".parse().unwrap())
        );
        assert_eq!(
            with("cluster.local", "10.42.0.1").unwrap().dns_listen,
            DnsListen::At("10.42.0.1:53".parse().unwrap())
        );
        assert_eq!(
            with("cluster.local", "0").unwrap().dns_listen,
            DnsListen::Off
        );
        assert_eq!(
            with("cluster.local", "").unwrap().dns_listen,
            DnsListen::Off
        );
        assert!(with("cluster.local", "nope")
            .unwrap_err()
            .to_string()
            .starts_with("--dns-listen"));
        assert!(with("bad domain", "0")
            .unwrap_err()
            .to_string()
            .starts_with("--cluster-domain"));
    }

    #[test]
    fn bad_flags_name_themselves() {
        let cases: Vec<(AgentFlags, &str)> = vec![
            (
                AgentFlags {
                    server: "http://a:1".into(),
                    ..flags()
                },
                "--server",
            ),
            (
                AgentFlags {
                    container_log_max_size: Some("10Mx".into()),
                    ..flags()
                },
                "--container-log-max-size",
            ),
            (
                AgentFlags {
                    container_log_max_size: Some("100".into()),
                    ..flags()
                },
                "--container-log-max-size",
            ),
            (
                AgentFlags {
                    container_log_max_files: Some(1),
                    ..flags()
                },
                "--container-log-max-files",
            ),
            (
                AgentFlags {
                    cluster_cidr: Some("10.42.0.0".into()),
                    ..flags()
                },
                "--cluster-cidr",
            ),
            (
                AgentFlags {
                    node_name: Some("N_1".into()),
                    ..flags()
                },
                "--node-name",
            ),
            (
                AgentFlags {
                    runtime: Some("docker".into()),
                    ..flags()
                },
                "--runtime",
            ),
            (
                AgentFlags {
                    node_labels: vec!["a".into()],
                    ..flags()
                },
                "--node-label",
            ),
            (
                AgentFlags {
                    node_labels: vec!["-a=b".into()],
                    ..flags()
                },
                "--node-label",
            ),
            (
                AgentFlags {
                    node_taints: vec!["a=b:Never".into()],
                    ..flags()
                },
                "--node-taint",
            ),
            (
                AgentFlags {
                    node_taints: vec!["a=b".into()],
                    ..flags()
                },
                "--node-taint",
            ),
            (
                AgentFlags {
                    system_reserved: Some("gpu=1".into()),
                    ..flags()
                },
                "--system-reserved",
            ),
            (
                AgentFlags {
                    token_env: Some("short".into()),
                    ..flags()
                },
                "LITEK8S_TOKEN",
            ),
            (
                AgentFlags {
                    token: Some("a".into()),
                    token_file: Some("/x".into()),
                    ..flags()
                },
                "--token",
            ),
            (
                AgentFlags {
                    token_file: Some("/nonexistent/t".into()),
                    ..flags()
                },
                "--token-file",
            ),
            (
                AgentFlags {
                    cni_bridge: Some("a-bridge-name-too-long".into()),
                    ..flags()
                },
                "--cni-bridge",
            ),
            (
                AgentFlags {
                    insecure_registries: vec!["http://x/".into()],
                    ..flags()
                },
                "--insecure-registry",
            ),
        ];
        for (given, flag) in cases {
            let e = AgentSettings::resolve(given).unwrap_err().to_string();
            assert!(e.contains(flag), "{e} should name {flag}");
        }
    }

    #[test]
    fn token_sources_in_order() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("token");
        let hash = "a".repeat(64);
        std::fs::write(&file, format!("K10{hash}::server:from-the-file-0123\n")).unwrap();
        let s = AgentSettings::resolve(AgentFlags {
            token_file: Some(file),
            token_env: Some("from-the-environment-0123".into()),
            ..flags()
        })
        .unwrap();
        assert_eq!(s.token.unwrap().secret.as_str(), "from-the-file-0123");
        let s = AgentSettings::resolve(AgentFlags {
            token_env: Some(" from-the-environment-0123\n".into()),
            ..flags()
        })
        .unwrap();
        assert_eq!(
            s.token.as_ref().unwrap().secret.as_str(),
            "from-the-environment-0123"
        );
        assert!(
            !format!("{s:?}").contains("from-the"),
            "the token is redacted"
        );
    }

    #[test]
    fn labels_taints_and_quantities() {
        assert_eq!(
            parse_label("example.com/tier=web").unwrap(),
            ("example.com/tier".into(), "web".into())
        );
        assert_eq!(parse_label("empty=").unwrap(), ("empty".into(), "".into()));
        assert!(parse_label("a=b c").is_err());
        let t = parse_taint("dedicated=gpu:NoSchedule").unwrap();
        assert_eq!(
            (t.key.as_str(), t.value.as_str(), t.effect),
            ("dedicated", "gpu", Effect::NoSchedule)
        );
        let t = parse_taint("example.com/maintenance:NoExecute").unwrap();
        assert_eq!(
            (t.key.as_str(), t.value.as_str()),
            ("example.com/maintenance", "")
        );
        assert_eq!(parse_quantity("500m", 1000).unwrap(), 500);
        assert_eq!(parse_quantity("2", 1000).unwrap(), 2000);
        assert_eq!(parse_quantity("1.5", 1000).unwrap(), 1500);
        assert_eq!(parse_quantity("1Gi", 1).unwrap(), 1 << 30);
        assert_eq!(parse_quantity("100M", 1).unwrap(), 100_000_000);
        assert!(parse_quantity("1Qi", 1).is_err());
        assert!(parse_quantity("-1", 1).is_err());
        let e = parse_eviction("memory.available<1Gi, nodefs.available<1%").unwrap();
        assert_eq!(e.memory_available, Some(Threshold::Quantity(1 << 30)));
        assert_eq!(e.nodefs_available, Some(Threshold::Percent(1.0)));
        assert_eq!(
            e.imagefs_available,
            EvictionHard::default().imagefs_available
        );
        assert_eq!(Threshold::Percent(10.0).of(1000), 100);
        let r = parse_reserved("cpu=250m, memory=512Mi,ephemeral-storage=1Gi").unwrap();
        assert_eq!(
            r,
            Reserved {
                cpu_millis: 250,
                memory_bytes: 512 << 20,
                ephemeral_storage_bytes: 1 << 30
            }
        );
    }
}
