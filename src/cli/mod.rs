//! Command-line interface: the `litek8s` command, its subcommands and their flags. Flags are
//! turned into settings structs here; subcommands receive settings, never raw arguments.

pub mod apiserver;

use clap::{Parser, Subcommand};

/// litek8s: a small, systemd-native Kubernetes distribution.
#[derive(Debug, Parser)]
#[command(name = "litek8s", version, about, long_about = None, propagate_version = true)]
pub struct Cli {
    /// Log filter, e.g. `info`, `debug`, `litek8s::raft=debug` (also RUST_LOG).
    #[arg(long, global = true, env = "LITEK8S_LOG", default_value = "info")]
    pub log_level: String,

    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the Kubernetes API server (single server; HA cluster in a later release).
    Apiserver(apiserver::ApiserverArgs),
}
