//! `litek8s cluster apply|status -f cluster.yaml`: a whole cluster from one file, from the
//! machine of the person who runs it, over the system's ssh client. See docs/clusters.md.
//!
//! Layout, one job per file:
//! - [`file`]: the cluster file's format and the checks made before touching any host;
//! - [`probe`]: what a host runs now (read over ssh);
//! - [`binary`]: whether a host's binary is the one running apply (a cheap fingerprint);
//! - [`packages`]: hosts that take the litek8s packages instead (`package: deb|rpm`);
//! - [`record`]: what the previous apply set up, kept beside the file (for removals);
//! - [`plan`]: pure: file + probes + record -> steps, in the cluster's order;
//! - [`ssh`]: running commands and copying files through `ssh`/`scp`;
//! - [`run`]: carrying out a plan, host by host, reporting each host's outcome;
//! - [`api`]: what is asked of the Kubernetes API (nodes, draining);
//! - [`status`]: the table of `cluster status`.

pub mod api;
pub mod binary;
pub mod file;
pub mod packages;
pub mod plan;
pub mod probe;
pub mod record;
pub mod run;
pub mod ssh;
pub mod status;

use std::path::PathBuf;

use clap::{Args, Subcommand};

/// `litek8s cluster …`
#[derive(Debug, Args)]
pub struct ClusterArgs {
    #[command(subcommand)]
    pub command: ClusterCommand,
}

#[derive(Debug, Subcommand)]
pub enum ClusterCommand {
    /// Bring the machines of a cluster file to what it says, over ssh: install the first
    /// server, join the others one at a time, the agents in parallel; remove what left the
    /// file. Running it again changes nothing.
    Apply(ApplyArgs),
    /// Each machine's units, Raft role and node readiness.
    Status(StatusArgs),
}

#[derive(Debug, Args)]
pub struct ApplyArgs {
    /// The cluster file (apiVersion litek8s.dev/v1, kind Cluster).
    #[arg(short = 'f', long = "file", value_name = "FILE")]
    pub file: PathBuf,
    /// Print the plan and change nothing.
    #[arg(long)]
    pub dry_run: bool,
    /// Where to write the kubeconfig for this machine [default: FILE.kubeconfig].
    #[arg(long, value_name = "PATH")]
    pub kubeconfig_out: Option<PathBuf>,
}

#[derive(Debug, Args)]
pub struct StatusArgs {
    /// The cluster file.
    #[arg(short = 'f', long = "file", value_name = "FILE")]
    pub file: PathBuf,
}

impl ClusterArgs {
    pub fn run(&self) -> anyhow::Result<()> {
        match &self.command {
            ClusterCommand::Apply(a) => run::apply(a),
            ClusterCommand::Status(s) => status::show(s),
        }
    }
}
