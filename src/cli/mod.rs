//! Command-line interface: the `litek8s` command, its subcommands and their flags. Flags are
//! turned into settings structs here; subcommands receive settings, never raw arguments.

pub mod apiserver;

use std::io::IsTerminal;

use clap::{Parser, Subcommand};
use tracing_subscriber::EnvFilter;

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
    /// Log filter, e.g. `info`, `debug`, `litek8s::raft=debug` (RUST_LOG, if set, wins).
    #[arg(long, global = true, env = "LITEK8S_LOG", default_value = "info")]
    pub log_level: String,

    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the Kubernetes API server (single server; HA cluster in a later release).
    #[command(long_about = apiserver::LONG_ABOUT)]
    Apiserver(apiserver::ApiserverArgs),
}

impl Cli {
    /// Sets up logging to stderr. Fails on an unparsable filter.
    pub fn init_logging(&self) -> anyhow::Result<()> {
        let filter = match std::env::var("RUST_LOG") {
            Ok(from_env) if !from_env.is_empty() => EnvFilter::try_new(&from_env)
                .map_err(|e| anyhow::anyhow!("invalid RUST_LOG {from_env:?}: {e}"))?,
            _ => EnvFilter::try_new(&self.log_level)
                .map_err(|e| anyhow::anyhow!("invalid --log-level {:?}: {e}", self.log_level))?,
        };
        tracing_subscriber::fmt()
            .with_env_filter(filter)
            .with_writer(std::io::stderr)
            .with_ansi(std::io::stderr().is_terminal())
            .init();
        Ok(())
    }

    /// Runs the chosen subcommand.
    pub fn run(self) -> anyhow::Result<()> {
        match self.command {
            Command::Apiserver(args) => args.run(),
        }
    }
}
