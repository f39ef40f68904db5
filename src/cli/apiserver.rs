//! Flags of `litek8s apiserver` and their resolution into `ServerSettings`.

use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;

use clap::Args;

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

    /// Watch events kept for watches that resume from an older resourceVersion.
    #[arg(long, value_name = "N", default_value_t = 10_000)]
    pub watch_history: usize,
}
