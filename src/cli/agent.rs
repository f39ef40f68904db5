//! Flags of `litek8s agent` and of the `litek8s-agent` executable (the same flags); resolved
//! into `AgentSettings` by `agent::settings`.

use std::net::IpAddr;
use std::path::PathBuf;

use anyhow::Context;
use clap::Args;

use super::apiserver::parse_go_duration;
use crate::agent::settings::{AgentFlags, AgentSettings, DEFAULT_NODE_DIR};

/// The long help of `litek8s agent --help`.
pub const LONG_ABOUT: &str = "Run the node agent: join a cluster (or a single server) and \
register this machine as a Node, kept Ready through its Lease and status.

The first start joins with the cluster's join token (<data-dir>/join-token on a server), \
given in LITEK8S_TOKEN or a file (--token-file): the agent fetches the cluster CA, checks it \
against the token's hash, and exchanges the token for a client certificate of its own, kept in \
<node-dir>/credentials/. Later starts need no token. The servers of the cluster are learned \
and remembered in <node-dir>/servers.json; the agent checks the server in use every 2 s and \
moves to another when it is unreachable or not ready.

Example:
  LITEK8S_TOKEN=$(cat /var/lib/litek8s/apiserver/join-token) \\
    litek8s agent --server https://192.0.2.10:6443 --node-label tier=web";

/// The command line of `litek8s-agent`: the agent's flags and the global `--log-level`
/// (`config_merge::parse_agent`).
#[derive(Debug)]
pub struct AgentCli {
    pub log_level: String,
    pub args: AgentArgs,
}

impl super::Invocation for AgentCli {
    fn init_logging(&self) -> anyhow::Result<()> {
        super::init_logging(&self.log_level, self.args.log_node_name())
    }
    fn run(self) -> anyhow::Result<()> {
        self.args.run()
    }
}

/// Flags of `litek8s agent`.
#[derive(Debug, Args)]
pub struct AgentArgs {
    /// A server of the cluster (https://HOST:PORT); the others are learned from it.
    /// Required except with --cleanup (checked in `settings`: the configuration files'
    /// relaxed first parse knows only `required`).
    #[arg(long, value_name = "URL")]
    pub server: Option<String>,

    /// The join token. Visible to every user of the machine in the process list: prefer
    /// LITEK8S_TOKEN or --token-file. Needed only to join (or to renew the credential).
    #[arg(long, value_name = "TOKEN", conflicts_with = "token_file")]
    pub token: Option<String>,

    /// A file holding the join token.
    #[arg(long, value_name = "PATH")]
    pub token_file: Option<PathBuf>,

    /// Directory of the agent's state: credentials, server list, and what runs on the node.
    #[arg(long, value_name = "DIR", default_value = DEFAULT_NODE_DIR)]
    pub node_dir: PathBuf,

    /// This node's name [default: the hostname].
    #[arg(long, value_name = "NAME")]
    pub node_name: Option<String>,

    /// The node's address [default: the source address of the route to the server].
    #[arg(long, value_name = "IP")]
    pub node_ip: Option<IpAddr>,

    /// The OCI runtime: runc or crun [default: detected].
    #[arg(long, value_name = "RUNTIME")]
    pub runtime: Option<String>,

    /// A label of the Node, KEY=VALUE (repeatable); applied at every start.
    #[arg(long = "node-label", value_name = "KEY=VALUE")]
    pub node_labels: Vec<String>,

    /// A taint of the Node, KEY[=VALUE]:EFFECT (repeatable); given when the Node is created.
    #[arg(long = "node-taint", value_name = "KEY=VALUE:EFFECT")]
    pub node_taints: Vec<String>,

    /// Resources kept from pods, e.g. cpu=500m,memory=512Mi,ephemeral-storage=1Gi.
    #[arg(long, value_name = "LIST")]
    pub system_reserved: Option<String>,

    /// Hard eviction thresholds: below them the node reports pressure, e.g.
    /// memory.available<100Mi,nodefs.available<10% (kubelet's syntax; signals not given keep
    /// kubelet's defaults).
    #[arg(long, value_name = "LIST")]
    pub eviction_hard: Option<String>,

    /// Duration of the node's Lease in kube-node-lease; renewed every quarter of it.
    #[arg(long, value_name = "SECONDS", default_value_t = 40)]
    pub node_lease_duration_seconds: u64,

    /// How often the node's status is computed (and written when it changed), Go duration.
    #[arg(long, value_name = "DURATION", default_value = "10s", value_parser = parse_go_duration)]
    pub node_status_update_frequency: std::time::Duration,

    /// How often the node's status is written even when unchanged, Go duration.
    #[arg(long, value_name = "DURATION", default_value = "5m", value_parser = parse_go_duration)]
    pub node_status_report_frequency: std::time::Duration,

    /// Directory of the containers' logs [default: <node-dir>/logs].
    #[arg(long, value_name = "DIR")]
    pub log_dir: Option<PathBuf>,

    /// A registry spoken to in plain HTTP, HOST (any port) or HOST:PORT (repeatable).
    #[arg(long = "insecure-registry", value_name = "HOST[:PORT]")]
    pub insecure_registries: Vec<String>,

    /// The Linux bridge of the pod network the agent generates [default: litek8s0].
    #[arg(long, value_name = "NAME")]
    pub cni_bridge: Option<String>,

    /// The cluster's pod network, holding every node's podCIDR: pod traffic leaving it is
    /// masqueraded, pod-to-pod traffic keeps its addresses.
    #[arg(long, value_name = "CIDR", default_value = "10.42.0.0/16")]
    pub cluster_cidr: String,

    /// Run no Service proxy and keep no pod routes (another proxy owns them).
    #[arg(long)]
    pub disable_proxy: bool,

    /// Do not enforce NetworkPolicies for this node's pods (another controller does, or none
    /// is wanted).
    #[arg(long)]
    pub disable_network_policy: bool,

    /// Remove the agent's Service rules and network policies (nftables tables inet litek8s
    /// and inet litek8s-netpol) and pod routes, then exit; pods and credentials are left
    /// alone.
    #[arg(long)]
    pub cleanup: bool,

    /// The cluster DNS Service's ClusterIP: the nameserver of pods with dnsPolicy ClusterFirst
    /// [default: 10.43.0.10].
    #[arg(long, value_name = "IP")]
    pub cluster_dns: Option<IpAddr>,

    /// The cluster's DNS domain [default: cluster.local].
    #[arg(long, value_name = "DOMAIN")]
    pub cluster_domain: Option<String>,

    /// Where this node's cluster DNS responder listens, UDP and TCP: IP or IP:PORT; 0 turns
    /// it off [default: port 53 of the pod bridge's gateway, the first address of the node's
    /// podCIDR, where the Service rules send the cluster DNS ClusterIP].
    #[arg(long, value_name = "ADDR")]
    pub dns_listen: Option<String>,

    /// The node API's port (kubelet's: metrics-server and other tools that dial nodes
    /// directly), HTTPS with the node's serving certificate; 0 turns it off.
    #[arg(long, value_name = "PORT", default_value_t = 10250)]
    pub kubelet_port: u16,

    /// A container's log file is rotated when it grows past this size (a quantity: 10Mi).
    #[arg(long, value_name = "QUANTITY", default_value = "10Mi")]
    pub container_log_max_size: String,

    /// The files a container's log keeps, the one being written included (at least 2).
    #[arg(long, value_name = "N", default_value_t = 5)]
    pub container_log_max_files: u32,
}

impl AgentArgs {
    /// Validates the flags (and reads the token's sources).
    pub fn settings(self) -> anyhow::Result<AgentSettings> {
        Ok(AgentSettings::resolve(AgentFlags {
            server: self.server.ok_or_else(|| {
                anyhow::anyhow!("--server is required (a server of the cluster, https://HOST:PORT)")
            })?,
            token: self.token,
            token_file: self.token_file,
            token_env: std::env::var("LITEK8S_TOKEN").ok(),
            node_dir: self.node_dir,
            node_name: self.node_name,
            node_ip: self.node_ip,
            runtime: self.runtime,
            node_labels: self.node_labels,
            node_taints: self.node_taints,
            system_reserved: self.system_reserved,
            eviction_hard: self.eviction_hard,
            node_lease_duration_seconds: self.node_lease_duration_seconds,
            node_status_update_frequency: self.node_status_update_frequency,
            node_status_report_frequency: self.node_status_report_frequency,
            log_dir: self.log_dir,
            insecure_registries: self.insecure_registries,
            cni_bridge: self.cni_bridge,
            cluster_cidr: Some(self.cluster_cidr),
            disable_proxy: self.disable_proxy,
            disable_network_policy: self.disable_network_policy,
            cluster_dns: self.cluster_dns,
            cluster_domain: self.cluster_domain,
            dns_listen: self.dns_listen,
            kubelet_port: Some(self.kubelet_port),
            container_log_max_size: Some(self.container_log_max_size),
            container_log_max_files: Some(self.container_log_max_files),
        })?)
    }

    /// The node name logging names (`NODE_NAME`), before the flags are validated.
    pub fn log_node_name(&self) -> Option<String> {
        self.node_name.clone().or_else(|| {
            nix::unistd::gethostname()
                .ok()
                .and_then(|h| h.into_string().ok())
                .map(|h| h.to_ascii_lowercase())
        })
    }

    /// Runs the agent until SIGTERM or SIGINT.
    pub fn run(self) -> anyhow::Result<()> {
        if self.cleanup {
            return cleanup();
        }
        let settings = self.settings()?;
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .thread_name("litek8s-agent")
            // Pod churn leaves freed memory with the allocator (src/allocator.rs): idle
            // workers give it back.
            .on_thread_park(crate::allocator::release_when_parked)
            .thread_keep_alive(BLOCKING_THREAD_KEEP_ALIVE)
            .build()
            .context("starting the async runtime")?;
        runtime.block_on(crate::agent::run(settings))?;
        runtime.shutdown_timeout(std::time::Duration::from_millis(100));
        Ok(())
    }
}

/// How long a blocking thread of the agent's runtime (sandboxes, root filesystems, the image
/// store, log rotation) waits for more work before it ends (tokio's default: 10 s). The log
/// rotation's pass every second wakes one idle thread after another, so with 10 s every
/// thread a pod burst started lived on; each kept the allocator's pages it had used, which
/// only that thread gives back (the idle collect runs on the async workers). An ended thread
/// leaves them to be collected. After 100 pods: 4 threads instead of 12 and 3-4 MiB less
/// (bench/AGENT.md, notes).
const BLOCKING_THREAD_KEEP_ALIVE: std::time::Duration = std::time::Duration::from_secs(1);

/// `--cleanup`: the agent's tables (Service rules, network policies) and routes removed from
/// this machine.
fn cleanup() -> anyhow::Result<()> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    let tools = crate::agent::proxy::Tools::host();
    let (table, routes) = runtime
        .block_on(crate::agent::proxy::cleanup(&tools))
        .context("removing the Service rules and pod routes")?;
    let policies = runtime
        .block_on(crate::agent::netpol::cleanup(&tools))
        .context("removing the network policy rules")?;
    let said = |removed: bool, table: &str| {
        if removed {
            format!("table inet {table} removed")
        } else {
            format!("no table inet {table}")
        }
    };
    println!(
        "{}; {}; {routes} pod route(s) removed",
        said(table, crate::agent::proxy::ruleset::TABLE),
        said(policies, crate::agent::netpol::ruleset::TABLE),
    );
    Ok(())
}
