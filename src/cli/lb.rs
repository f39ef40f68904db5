//! Flags of `litek8s lb` and their resolution into `LbSettings`.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::{bail, Context};
use clap::Args;

use crate::http_client::ServerUrl;
use crate::lb::proxy::ProxySettings;
use crate::lb::settings::{CheckMode, LbSettings};

/// The long help of `litek8s lb --help`.
pub const LONG_ABOUT: &str =
    "Run the load balancer: one address for kubectl in front of an HA cluster.

It learns every server of the cluster from the ones given (and keeps learning as members come
and go), checks each one's /readyz every second, and passes whole TCP connections (HTTPS,
bytes untouched) to a ready server, staying with the same server while it stays ready. When
that server fails, its connections are closed so clients reconnect through a healthy one.

Under systemd (litek8s-lb.socket) the listening socket comes from socket activation and the
learned servers are remembered in $STATE_DIRECTORY/servers.json.

Example:
  litek8s lb --listen 127.0.0.1:6443 --server https://10.0.0.1:6443 --server https://10.0.0.2:6443
  kubectl --server https://127.0.0.1:6443 get nodes";

/// Flags of `litek8s lb`.
#[derive(Debug, Args)]
pub struct LbArgs {
    /// Address clients connect to (ignored when systemd passes the socket).
    #[arg(long, value_name = "ADDR:PORT", default_value = "127.0.0.1:6443")]
    pub listen: SocketAddr,

    /// A server of the cluster (https://HOST:PORT; repeatable). The others are learned from it.
    #[arg(long = "server", value_name = "URL", required = true)]
    pub servers: Vec<String>,

    /// Check /readyz over TLS instead of plain HTTP (kube-apiservers with anonymous /readyz).
    #[arg(long, conflicts_with = "tcp_check")]
    pub https_check: bool,

    /// Only check that a TCP connection can be made.
    #[arg(long)]
    pub tcp_check: bool,

    /// Directory for servers.json, the learned server list [default: $STATE_DIRECTORY].
    #[arg(long, value_name = "DIR")]
    pub state_dir: Option<PathBuf>,

    /// Serve /metrics and /status over plain HTTP on this address.
    #[arg(long, value_name = "ADDR:PORT")]
    pub status_listen: Option<SocketAddr>,

    /// Milliseconds between two checks of a server.
    #[arg(long, value_name = "MS", default_value_t = 1000)]
    pub check_interval_ms: u64,

    /// Milliseconds one check may take [default: 70% of the interval].
    #[arg(long, value_name = "MS")]
    pub check_timeout_ms: Option<u64>,

    /// Milliseconds between two membership refreshes.
    #[arg(long, value_name = "MS", default_value_t = 2000)]
    pub discovery_interval_ms: u64,

    /// Client connections open at once (more wait in the listen backlog).
    #[arg(long, value_name = "N", default_value_t = 4096)]
    pub max_connections: usize,

    /// Seconds SIGTERM lets open connections finish before closing them.
    #[arg(long, value_name = "SECONDS", default_value_t = 5)]
    pub drain_seconds: u64,
}

impl LbArgs {
    /// Validates the flags.
    pub fn settings(self) -> anyhow::Result<LbSettings> {
        let mut seeds = Vec::new();
        for url in &self.servers {
            let addr = ServerUrl::parse(url)
                .map_err(|e| anyhow::anyhow!("--server {e}"))?
                .authority();
            if !seeds.contains(&addr) {
                seeds.push(addr);
            }
        }
        if self.check_interval_ms < 50 {
            bail!("--check-interval-ms must be at least 50");
        }
        let check_timeout_ms = self
            .check_timeout_ms
            .unwrap_or(self.check_interval_ms * 7 / 10);
        if check_timeout_ms == 0 || check_timeout_ms >= self.check_interval_ms {
            bail!("--check-timeout-ms must be between 1 and --check-interval-ms - 1");
        }
        if self.discovery_interval_ms < 100 {
            bail!("--discovery-interval-ms must be at least 100");
        }
        if self.max_connections == 0 {
            bail!("--max-connections must be at least 1");
        }
        let state_dir = self.state_dir.or_else(|| {
            // systemd's StateDirectory= may list several directories, colon-separated.
            std::env::var_os("STATE_DIRECTORY")
                .and_then(|v| v.to_str()?.split(':').next().map(PathBuf::from))
                .filter(|p| !p.as_os_str().is_empty())
        });
        let check = if self.https_check {
            CheckMode::Https
        } else if self.tcp_check {
            CheckMode::Tcp
        } else {
            CheckMode::Http
        };
        let check_timeout = Duration::from_millis(check_timeout_ms);
        Ok(LbSettings {
            listen: self.listen,
            seeds,
            check,
            check_interval: Duration::from_millis(self.check_interval_ms),
            check_timeout,
            discovery_interval: Duration::from_millis(self.discovery_interval_ms),
            state_dir,
            status_listen: self.status_listen,
            proxy: ProxySettings {
                connect_timeout: check_timeout,
                max_connections: self.max_connections,
            },
            drain_timeout: Duration::from_secs(self.drain_seconds),
        })
    }

    /// Runs the balancer until SIGTERM or SIGINT.
    pub fn run(self) -> anyhow::Result<()> {
        let settings = self.settings()?;
        // Before the runtime's threads exist: this clears the activation variables.
        let listeners = crate::lb::listeners(&settings)?;
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .enable_all()
            .thread_name("litek8s-lb")
            .build()
            .context("starting the async runtime")?;
        runtime.block_on(crate::lb::run(settings, listeners))?;
        runtime.shutdown_timeout(Duration::from_millis(100));
        Ok(())
    }
}
