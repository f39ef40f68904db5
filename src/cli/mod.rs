//! Command-line interface: the `litek8s` command, its subcommands and their flags. Flags are
//! turned into settings structs here; subcommands receive settings, never raw arguments.

pub(crate) mod agent;
pub(crate) mod apiserver;
pub mod config_file;
pub mod config_merge;
pub(crate) mod config_show;
pub(crate) mod lb;
pub(crate) mod server;

pub use agent::AgentCli;
pub use config_merge::{parse, parse_agent, ParseError};

use std::ffi::OsString;
use std::process::ExitCode;

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
    /// Sets up logging (see [`init_logging`]), with the node name of a server or an agent.
    pub fn init_logging(&self) -> anyhow::Result<()> {
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
        init_logging(&self.log_level, node_name)
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

/// Sets up logging: journald with structured fields (`NODE_NAME` on every entry of a server or
/// an agent) when stderr is the journal, plain text on stderr otherwise. `RUST_LOG` wins over
/// `--log-level`. Fails on an unparsable filter.
pub fn init_logging(log_level: &str, node_name: Option<String>) -> anyhow::Result<()> {
    let (source, mut text) = match std::env::var("RUST_LOG") {
        Ok(from_env) if !from_env.is_empty() => ("RUST_LOG", from_env),
        _ => ("--log-level", log_level.to_string()),
    };
    // openraft logs every vote and replication step at info; keep its warnings unless
    // the filter names it.
    if !text.contains("openraft") {
        text.push_str(",openraft=warn");
    }
    let fields: Vec<(&str, String)> = node_name.map(|n| ("NODE_NAME", n)).into_iter().collect();
    crate::systemd::journal::init(&text, "litek8s", &fields)
        .map_err(|e| anyhow::anyhow!("invalid {source} {text:?}: {e}"))?;
    Ok(())
}

/// A parsed command line that a binary's `main` runs.
pub trait Invocation {
    fn init_logging(&self) -> anyhow::Result<()>;
    fn run(self) -> anyhow::Result<()>;
}

impl Invocation for Cli {
    fn init_logging(&self) -> anyhow::Result<()> {
        Cli::init_logging(self)
    }
    fn run(self) -> anyhow::Result<()> {
        Cli::run(self)
    }
}

/// The whole of a binary's `main` after the allocator is set: parse the process's arguments
/// with `parse`, set up logging, run, and map every error to one line on stderr prefixed with
/// `program` and a non-zero exit code (2 for the command line and configuration files, 1 for
/// a failed run). Both executables, `litek8s` and `litek8s-agent`, end here.
pub fn main<I: Invocation>(
    program: &str,
    parse: impl FnOnce(Vec<OsString>) -> Result<I, ParseError>,
) -> ExitCode {
    let invocation = match parse(std::env::args_os().collect()) {
        Ok(invocation) => invocation,
        // A configuration file's error names its file and line.
        Err(ParseError::Config(e)) => {
            eprintln!("{program}: {e}");
            return ExitCode::from(2);
        }
        // --help and --version print their text and exit 0; usage errors print one line.
        Err(ParseError::Usage(e)) if !e.use_stderr() => {
            return e.print().map_or(ExitCode::FAILURE, |_| ExitCode::SUCCESS)
        }
        Err(ParseError::Usage(e)) => {
            // The first paragraph on one line: "required arguments were not provided:"
            // is followed by the arguments on the next lines.
            let text = e.to_string();
            let first: Vec<&str> = text
                .lines()
                .take_while(|l| !l.trim().is_empty())
                .map(str::trim)
                .collect();
            eprintln!(
                "{program}: {} (see --help)",
                first.join(" ").trim_start_matches("error: ")
            );
            return ExitCode::from(2);
        }
    };
    let run = invocation.init_logging().and_then(|()| {
        crate::failpoints::check();
        invocation.run()
    });
    match run {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("{program}: {}", one_line(&e));
            ExitCode::FAILURE
        }
    }
}

/// The error and its causes on one line, skipping a cause its parent's message already
/// quotes (many error types print their source inside their own message).
fn one_line(e: &anyhow::Error) -> String {
    let mut line = String::new();
    for cause in e.chain() {
        let text = cause.to_string();
        if !line.contains(&text) {
            if !line.is_empty() {
                line.push_str(": ");
            }
            line.push_str(&text);
        }
    }
    line.replace('\n', " ")
}
