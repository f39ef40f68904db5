//! Flags of `litek8s apiserver` and their resolution into `ServerSettings`.

use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;

use anyhow::Context;
use clap::Args;

use crate::audit::{AuditSettings, LogSettings};
use crate::cluster::ClusterFlags;
use crate::controllers::node_ipam::ClusterCidr;
use crate::server::settings::{cluster_dns_ip, first_service_ip, ServerSettings};

/// The long help of `litek8s apiserver --help`.
pub const LONG_ABOUT: &str =
    "Run the Kubernetes API server: a single server, or a member of an HA cluster of 3 or 5
servers (--cluster-init on the first, --server https://FIRST:6443 with LITEK8S_TOKEN on the
others).

On first start the data directory is created (mode 0700) with a cluster CA, a serving \
certificate, an admin token and objects.wal, and an admin kubeconfig is written; later starts \
reuse them. The API port speaks HTTPS; plain HTTP on the same port answers only /readyz, \
/livez, /healthz and /version. SIGTERM or SIGINT stops it gracefully.

Example:
  litek8s apiserver --data-dir /var/lib/litek8s/apiserver --listen 0.0.0.0:6443 --node-ip 192.0.2.10
  kubectl --kubeconfig /var/lib/litek8s/apiserver/kubeconfig.yaml get ns";

/// Flags of `litek8s apiserver`.
#[derive(Debug, Args)]
pub struct ApiserverArgs {
    /// Directory holding objects.wal, certificates and the admin token.
    #[arg(long, value_name = "DIR", default_value = "./litek8s-data")]
    pub data_dir: PathBuf,

    /// Address and port of the API (HTTPS, with /readyz /livez /healthz /version over plain HTTP).
    #[arg(long, value_name = "ADDR:PORT", default_value = "127.0.0.1:6443")]
    pub listen: SocketAddr,

    /// Where to write the admin kubeconfig [default: <data-dir>/kubeconfig.yaml].
    #[arg(long, value_name = "PATH")]
    pub kubeconfig: Option<PathBuf>,

    /// Address other hosts reach this server at (repeatable); added to the certificate.
    #[arg(long = "node-ip", value_name = "IP")]
    pub node_ips: Vec<IpAddr>,

    /// This server's name [default: the hostname].
    #[arg(long, value_name = "NAME")]
    pub name: Option<String>,

    /// Service CIDR; its first address is the `kubernetes` Service's ClusterIP.
    #[arg(long, value_name = "CIDR", default_value = "10.43.0.0/16")]
    pub service_cidr: String,

    /// ClusterIP of the cluster DNS Service (kube-system/kube-dns), inside --service-cidr;
    /// every agent answers DNS for its pods behind it [default: the CIDR's tenth address,
    /// 10.43.0.10].
    #[arg(long, value_name = "IP")]
    pub cluster_dns: Option<IpAddr>,

    /// Watch events kept for watches that resume from an older resourceVersion.
    #[arg(long, value_name = "N", default_value_t = 10_000)]
    pub watch_history: usize,

    /// Start a new HA cluster with this server as its first member. The join token is
    /// written to <data-dir>/join-token; LITEK8S_TOKEN, when set, supplies the secret.
    #[arg(long, conflicts_with = "server")]
    pub cluster_init: bool,

    /// Join the cluster of this server (https://HOST:PORT, its API address). The join token
    /// comes from the LITEK8S_TOKEN environment variable, never from the command line.
    #[arg(long, value_name = "URL")]
    pub server: Option<String>,

    /// Port of the Raft listener (server-to-server traffic); default: the API port + 1.
    #[arg(long, value_name = "PORT")]
    pub raft_port: Option<u16>,

    /// How long Events are kept after their last update (kube-apiserver's --event-ttl), as a
    /// Go duration: 1h, 30m, 1h30m, 90s.
    #[arg(long, value_name = "DURATION", default_value = "1h", value_parser = parse_go_duration)]
    pub event_ttl: std::time::Duration,

    /// The longest a certificate issued for a CertificateSigningRequest is valid
    /// (kube-controller-manager's --cluster-signing-duration), as a Go duration; a request's
    /// `expirationSeconds` may only shorten it.
    #[arg(long, value_name = "DURATION", default_value = "8760h", value_parser = parse_go_duration)]
    pub cluster_signing_duration: std::time::Duration,

    /// How long a node's agent may stay silent (no Lease renewal, no status) before the node
    /// is marked Unknown and tainted unreachable (kube-controller-manager's flag), Go duration.
    #[arg(long, value_name = "DURATION", default_value = "40s", value_parser = parse_go_duration)]
    pub node_monitor_grace_period: std::time::Duration,

    /// The pods' address range; each node gets a /24 of it as its podCIDR.
    #[arg(long, value_name = "CIDR", default_value = "10.42.0.0/16", value_parser = ClusterCidr::parse)]
    pub cluster_cidr: ClusterCidr,

    /// Terminated pods kept before the oldest are deleted (0: keep all).
    #[arg(long, value_name = "N", default_value_t = 12_500)]
    pub terminated_pod_gc_threshold: usize,

    /// Do not run the controllers (k3s's flag): for clusters whose own kube-controller-manager
    /// holds the kube-system Lease, and to measure the API server alone.
    #[arg(long)]
    pub disable_controller_manager: bool,

    /// Do not run the scheduler (k3s's flag): pods stay Pending unless another scheduler, or
    /// the pod's own spec.nodeName, places them.
    #[arg(long)]
    pub disable_scheduler: bool,

    /// Static bearer tokens, in kube-apiserver's CSV format (token,user,uid,"group1,group2"),
    /// read at start.
    #[arg(long, value_name = "PATH")]
    pub token_auth_file: Option<PathBuf>,

    /// kube-apiserver's admission configuration (an apiserver.config.k8s.io
    /// AdmissionConfiguration, YAML or JSON): the PodSecurity plugin's defaults and
    /// exemptions. Checked at start.
    #[arg(long, value_name = "PATH")]
    pub admission_control_config_file: Option<PathBuf>,

    /// Where the audit log is written (`-`: stdout); events are recorded as
    /// `--audit-policy-file` says. Unset: no audit log.
    #[arg(long, value_name = "PATH")]
    pub audit_log_path: Option<PathBuf>,

    /// The audit policy (kube-apiserver's audit.k8s.io/v1 Policy, YAML or JSON), checked at
    /// start. Without it nothing is recorded.
    #[arg(long, value_name = "PATH")]
    pub audit_policy_file: Option<PathBuf>,

    /// Megabytes the audit log may reach before it is rotated.
    #[arg(long, value_name = "MB", default_value_t = 100)]
    pub audit_log_maxsize: u64,

    /// Rotated audit logs kept (0: all).
    #[arg(long, value_name = "N", default_value_t = 0)]
    pub audit_log_maxbackup: usize,

    /// Days a rotated audit log is kept (0: no limit).
    #[arg(long, value_name = "DAYS", default_value_t = 0)]
    pub audit_log_maxage: u64,
}

/// Parses a Go duration (`1h`, `30m`, `1h30m10s`, `500ms`), as kube-apiserver's flags take.
pub fn parse_go_duration(text: &str) -> Result<std::time::Duration, String> {
    let invalid = || format!("invalid duration {text:?} (examples: 1h, 30m, 90s)");
    let mut rest = text.trim();
    if rest.is_empty() {
        return Err(invalid());
    }
    let mut total = std::time::Duration::ZERO;
    while !rest.is_empty() {
        let digits = rest
            .find(|c: char| !c.is_ascii_digit() && c != '.')
            .ok_or_else(invalid)?;
        let number: f64 = rest[..digits].parse().map_err(|_| invalid())?;
        rest = &rest[digits..];
        let unit_len = rest
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(rest.len());
        let seconds = match &rest[..unit_len] {
            "h" => 3600.0,
            "m" => 60.0,
            "s" => 1.0,
            "ms" => 0.001,
            _ => return Err(invalid()),
        };
        rest = &rest[unit_len..];
        total += std::time::Duration::try_from_secs_f64(number * seconds).map_err(|_| invalid())?;
    }
    Ok(total)
}

impl ApiserverArgs {
    /// Validates the flags and fills in defaults that depend on the machine.
    pub fn settings(self) -> anyhow::Result<ServerSettings> {
        let hostname = nix::unistd::gethostname()
            .context("reading the hostname")?
            .to_string_lossy()
            .to_ascii_lowercase();
        let name = match self.name {
            Some(name) => {
                check_name(&name).with_context(|| format!("invalid --name {name:?}"))?;
                name
            }
            None => {
                check_name(&hostname).with_context(|| {
                    format!("the hostname {hostname:?} is not a usable server name; pass --name")
                })?;
                hostname.clone()
            }
        };
        let kubernetes_service_ip = first_service_ip(&self.service_cidr)?;
        let cluster_dns = cluster_dns_ip(&self.service_cidr, self.cluster_dns)?;
        if self.watch_history == 0 {
            anyhow::bail!("--watch-history must be at least 1");
        }
        let kubeconfig = self
            .kubeconfig
            .unwrap_or_else(|| self.data_dir.join("kubeconfig.yaml"));
        Ok(ServerSettings {
            data_dir: self.data_dir,
            listen: self.listen,
            kubeconfig,
            node_ips: self.node_ips,
            name,
            hostname,
            service_cidr: self.service_cidr,
            kubernetes_service_ip,
            cluster_dns: Some(cluster_dns),
            watch_history: self.watch_history,
            event_ttl: self.event_ttl,
            cluster_signing_duration: self.cluster_signing_duration,
            node_monitor_grace_period: self.node_monitor_grace_period,
            terminated_pod_gc_threshold: self.terminated_pod_gc_threshold,
            cluster_cidr: self.cluster_cidr,
            run_controller_manager: !self.disable_controller_manager,
            run_scheduler: !self.disable_scheduler,
            token_auth_file: self.token_auth_file,
            admission_control_config_file: self.admission_control_config_file,
            audit: AuditSettings {
                log: self.audit_log_path.map(|path| LogSettings {
                    path,
                    // lumberjack, which kube-apiserver rotates with, reads 0 as its default.
                    max_size: if self.audit_log_maxsize == 0 {
                        100
                    } else {
                        self.audit_log_maxsize
                    }
                    .saturating_mul(1 << 20),
                    max_backups: self.audit_log_maxbackup,
                    max_age: std::time::Duration::from_secs(
                        self.audit_log_maxage.saturating_mul(86_400),
                    ),
                }),
                policy_file: self.audit_policy_file,
            },
            cluster: ClusterFlags {
                init: self.cluster_init,
                server: self.server,
                raft_port: self.raft_port,
                token: std::env::var("LITEK8S_TOKEN")
                    .ok()
                    .filter(|t| !t.trim().is_empty()),
            },
        })
    }

    /// Runs the API server until SIGTERM or SIGINT.
    pub fn run(self) -> anyhow::Result<()> {
        let settings = self.settings()?;
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .enable_all()
            .thread_name("litek8s-api")
            .build()
            .context("starting the async runtime")?;
        runtime.block_on(crate::server::run(settings))?;
        // Connections still open after draining (long watches) must not delay the exit.
        runtime.shutdown_timeout(std::time::Duration::from_millis(100));
        Ok(())
    }
}

/// The server name becomes part of a Lease name: a DNS-1123 subdomain of at most 200
/// characters (room for the `litek8s-apiserver-` prefix), lowercase.
fn check_name(name: &str) -> anyhow::Result<()> {
    let ok_char = |c: char| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '.';
    let ends_ok = |c: Option<char>| c.is_some_and(|c| c.is_ascii_alphanumeric());
    if name.is_empty() || name.len() > 200 {
        anyhow::bail!("must be 1 to 200 characters");
    }
    if !name.chars().all(ok_char) || !ends_ok(name.chars().next()) || !ends_ok(name.chars().last())
    {
        anyhow::bail!("must be lowercase letters, digits, '-' and '.', starting and ending with a letter or digit");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::check_name;

    #[test]
    fn server_names() {
        for ok in ["a", "node-1", "n1.example.com"] {
            assert!(check_name(ok).is_ok(), "{ok}");
        }
        for bad in ["", "Node", "-a", "a-", "a_b", &"x".repeat(201)] {
            assert!(check_name(bad).is_err(), "{bad}");
        }
    }
}
