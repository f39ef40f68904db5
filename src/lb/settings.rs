//! The balancer's validated settings (built from the command line by `cli::lb`), and how a
//! `--server` URL becomes the `host:port` the balancer connects to.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use super::health::CheckMode;
use super::proxy::ProxySettings;

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

/// `https://HOST:PORT`, `http://HOST:PORT` or `HOST:PORT` (port 6443 when omitted) →
/// `HOST:PORT`.
pub fn server_address(url: &str) -> Result<String, String> {
    let bad = |why: &str| format!("--server {url:?}: {why} (expected https://HOST:PORT)");
    let rest = url
        .strip_prefix("https://")
        .or_else(|| url.strip_prefix("http://"))
        .unwrap_or(url);
    if rest.contains("://") {
        return Err(bad("unknown scheme"));
    }
    let authority = rest.strip_suffix('/').unwrap_or(rest);
    if authority.is_empty() {
        return Err(bad("no host"));
    }
    if authority.contains(['/', '?', '#', '@', ' ']) {
        return Err(bad("only a host and a port are allowed"));
    }
    // `[v6]:port`, `[v6]`, `host:port`, `host`.
    let (host, port) = if let Some(v6) = authority.strip_prefix('[') {
        let (host, after) = v6.split_once(']').ok_or_else(|| bad("unclosed ["))?;
        let port = match after {
            "" => None,
            p => Some(p.strip_prefix(':').ok_or_else(|| bad("junk after ]"))?),
        };
        (format!("[{host}]"), port)
    } else {
        match authority.split_once(':') {
            Some((h, p)) => (h.to_string(), Some(p)),
            None => (authority.to_string(), None),
        }
    };
    if host.is_empty() || host == "[]" {
        return Err(bad("no host"));
    }
    let port = match port {
        None => 6443,
        Some(p) => match p.parse::<u16>() {
            Ok(p) if p > 0 => p,
            _ => return Err(bad("bad port")),
        },
    };
    Ok(format!("{host}:{port}"))
}

#[cfg(test)]
mod tests {
    use super::server_address;

    #[test]
    fn server_urls() {
        for (url, addr) in [
            ("https://127.0.0.1:7010", "127.0.0.1:7010"),
            ("https://10.0.0.1:6443/", "10.0.0.1:6443"),
            ("http://s1.example", "s1.example:6443"),
            ("s1:1", "s1:1"),
            ("https://[::1]:6443", "[::1]:6443"),
            ("[fd00::1]", "[fd00::1]:6443"),
        ] {
            assert_eq!(server_address(url).as_deref(), Ok(addr), "{url}");
        }
        for bad in [
            "",
            "https://",
            "ftp://x:1",
            "https://x:0",
            "https://x:99999",
            "https://x:1/api",
            "x:y",
            "[::1",
            "[::1]x",
            "https://u@x:1",
            "[]:1",
        ] {
            assert!(server_address(bad).is_err(), "{bad}");
        }
    }
}
