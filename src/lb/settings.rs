//! The balancer's validated settings (built from the command line by `cli::lb`; `--server`
//! URLs become `host:port` through `http_client::ServerUrl`), and what its check flags
//! mean.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use super::proxy::ProxySettings;
use crate::failover::health::Check;
use crate::http_client::{TlsConfig, TlsError, Transport};

/// Everything `lb::run` needs.
#[derive(Debug, Clone)]
pub struct LbSettings {
    /// Where clients connect, unless systemd passes the socket.
    pub listen: SocketAddr,
    /// The `--server` addresses (`host:port`), in the order given.
    pub seeds: Vec<String>,
    pub check: CheckMode,
    pub check_interval: Duration,
    /// Bound of one check; below the interval so a round ends before the next begins.
    pub check_timeout: Duration,
    pub discovery_interval: Duration,
    /// Where `servers.json` lives; `None`: nothing is remembered across restarts.
    pub state_dir: Option<PathBuf>,
    /// Plain-HTTP `/metrics` and `/status`, unless systemd passes a socket named `status`.
    pub status_listen: Option<SocketAddr>,
    pub proxy: ProxySettings,
    /// How long SIGTERM waits for open connections before closing them.
    pub drain_timeout: Duration,
}

/// How servers are checked (`--https-check`, `--tcp-check`, else plain HTTP).
#[derive(Debug, Clone)]
pub enum CheckMode {
    /// `GET /readyz` over plain HTTP (litek8s answers it on the API port).
    Http,
    /// `GET /readyz` over TLS (kube-apiservers that allow anonymous /readyz).
    Https,
    /// Only a TCP connect.
    Tcp,
}

impl CheckMode {
    pub fn name(&self) -> &'static str {
        match self {
            CheckMode::Http => "http",
            CheckMode::Https => "https",
            CheckMode::Tcp => "tcp",
        }
    }

    /// The health check.
    pub fn check(&self) -> Result<Check, TlsError> {
        match self {
            CheckMode::Tcp => Ok(Check::Tcp),
            CheckMode::Http | CheckMode::Https => Ok(Check::Readyz(self.transport()?)),
        }
    }

    /// How `/readyz` and the member list are fetched. With `--https-check`, TLS without
    /// certificate verification: the balancer trusts nothing it reads there beyond "this
    /// address answers /readyz with 200" and a list of addresses to check, and passes client
    /// bytes untouched, so clients still verify the server they reach.
    pub fn transport(&self) -> Result<Transport, TlsError> {
        match self {
            CheckMode::Https => Ok(Transport::Tls(TlsConfig::unverified()?)),
            CheckMode::Http | CheckMode::Tcp => Ok(Transport::Plain),
        }
    }
}
