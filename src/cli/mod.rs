//! Command-line interface: the `litek8s` command, its subcommands and their flags. Flags are
//! turned into settings structs here; subcommands receive settings, never raw arguments.

pub(crate) mod agent;
pub(crate) mod apiserver;
pub mod config_file;
pub mod config_merge;
pub(crate) mod config_show;
pub(crate) mod lb;
pub(crate) mod server;

pub use config_merge::{parse, ParseError};

use clap::{Parser, Subcommand};

/// litek8s: a small, systemd-native Kubernetes distribution.
#[derive(Debug, Parser)]
#[command(
    name = "litek8s",
    version,
    about,
    long_about = None,
    propagate_version = true,
    after_help = "Run `litek8s <COMMAND> --help` for the flags of a command."
)]
pub struct Cli {
    /// Log filter, e.g. `info`, `debug`, `litek8s::cluster=debug` (RUST_LOG, if set, wins;
    /// openraft logs at warn unless the filter names it, e.g. `info,openraft=info`).
    #[arg(long, global = true, env = "LITEK8S_LOG", default_value = "info")]
    pub log_level: String,

    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the Kubernetes API server (a single server or a member of an HA cluster).
    #[command(long_about = apiserver::LONG_ABOUT)]
    Apiserver(apiserver::ApiserverArgs),
    /// List or remove the members of an HA cluster (token from LITEK8S_TOKEN).
    Server(server::ServerArgs),
    /// Run the load balancer: one address for kubectl in front of an HA cluster.
    #[command(long_about = lb::LONG_ABOUT)]
    Lb(lb::LbArgs),
    /// Run the node agent: join a cluster and register this machine as a Node.
    #[command(long_about = agent::LONG_ABOUT)]
    Agent(agent::AgentArgs),
    /// Show a daemon's configuration merged from /etc/litek8s/config.yaml (and its drop-ins
    /// in config.yaml.d/), environment and flags.
    Config(config_show::ConfigArgs),
    /// Check that this machine can run a server, an agent or both (kernel, cgroups, runtime,
    /// CNI plugins, nftables, forwarding, ports), with a fix for each failure.
    CheckConfig(crate::check_config::CheckConfigArgs),
    /// Install a server or an agent as a systemd service (no package needed), start it and
    /// wait until it is ready.
    Install(crate::install::InstallArgs),
    /// Stop and remove what `install` set up (--purge-data: the data too).
    Uninstall(crate::install::UninstallArgs),
    /// A whole cluster from one file, over ssh: `cluster apply -f cluster.yaml`, `cluster
    /// status -f cluster.yaml` (docs/clusters.md).
    Cluster(crate::cluster_apply::ClusterArgs),
}

impl Cli {
    /// Sets up logging: journald with structured fields (`NODE_NAME` on every entry of a
    /// server) when stderr is the journal, plain text on stderr otherwise. `RUST_LOG` wins over `--log-level`. Fails on an unparsable filter.
    pub fn init_logging(&self) -> anyhow::Result<()> {
        let (source, mut text) = match std::env::var("RUST_LOG") {
            Ok(from_env) if !from_env.is_empty() => ("RUST_LOG", from_env),
            _ => ("--log-level", self.log_level.clone()),
        };
        // openraft logs every vote and replication step at info; keep its warnings unless
        // the filter names it.
        if !text.contains("openraft") {
            text.push_str(",openraft=warn");
        }
        let node_name = match &self.command {
            Command::Apiserver(args) => args.name.clone().or_else(|| {
                nix::unistd::gethostname()
                    .ok()
                    .and_then(|h| h.into_string().ok())
            }),
            Command::Agent(args) => args.log_node_name(),
            Command::Server(_)
            | Command::Lb(_)
            | Command::Config(_)
            | Command::CheckConfig(_)
            | Command::Install(_)
            | Command::Uninstall(_)
            | Command::Cluster(_) => None,
        };
        let fields: Vec<(&str, String)> = node_name.map(|n| ("NODE_NAME", n)).into_iter().collect();
        crate::systemd::journal::init(&text, "litek8s", &fields)
            .map_err(|e| anyhow::anyhow!("invalid {source} {text:?}: {e}"))?;
        Ok(())
    }

    /// Runs the chosen subcommand.
    pub fn run(self) -> anyhow::Result<()> {
        match self.command {
            Command::Apiserver(args) => args.run(),
            Command::Server(args) => args.run(),
            Command::Lb(args) => args.run(),
            Command::Agent(args) => args.run(),
            Command::Config(args) => args.run(),
            Command::CheckConfig(args) => crate::check_config::run(&args),
            Command::Install(args) => args.run(),
            Command::Uninstall(args) => args.run(),
            Command::Cluster(args) => args.run(),
        }
    }
}
