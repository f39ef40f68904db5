//! tcpSocket probes: success when a TCP connection opens within the timeout; it is closed
//! at once. Failures read as Go's dialer words them (`dial tcp 10.42.0.7:80: connect:
//! connection refused`, `…: i/o timeout`), which is what kubelet's events show.

use std::time::Duration;

use super::Outcome;

/// `host:port`, with IPv6 addresses in brackets (Go's `net.JoinHostPort`).
pub fn join_host_port(host: &str, port: u16) -> String {
    if host.contains(':') && !host.starts_with('[') {
        format!("[{host}]:{port}")
    } else {
        format!("{host}:{port}")
    }
}

/// One run of a tcpSocket probe.
pub async fn run(host: &str, port: u16, timeout: Duration) -> Outcome {
    match dial(host, port, timeout).await {
        Ok(stream) => {
            drop(stream);
            Outcome::Success(String::new())
        }
        Err(message) => Outcome::Failure(message),
    }
}

/// A connection, or Go's text for why not.
pub async fn dial(
    host: &str,
    port: u16,
    timeout: Duration,
) -> Result<tokio::net::TcpStream, String> {
    let addr = join_host_port(host, port);
    match tokio::time::timeout(timeout, tokio::net::TcpStream::connect(&addr)).await {
        Ok(Ok(stream)) => Ok(stream),
        Ok(Err(e)) => Err(format!("dial tcp {addr}: {}", connect_error(&e))),
        Err(_) => Err(format!("dial tcp {addr}: i/o timeout")),
    }
}

/// An OS error as Go prints it: `connect: connection refused`.
pub fn connect_error(e: &std::io::Error) -> String {
    match e.raw_os_error() {
        Some(code) => {
            let text = nix::errno::Errno::from_raw(code).desc();
            let mut chars = text.chars();
            let lower = match chars.next() {
                Some(first) => first.to_lowercase().chain(chars).collect(),
                None => String::new(),
            };
            format!("connect: {lower}")
        }
        None => e.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn open_and_closed_ports() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        assert_eq!(
            run("127.0.0.1", port, Duration::from_secs(1)).await,
            Outcome::Success(String::new())
        );
        drop(listener);
        assert_eq!(
            run("127.0.0.1", port, Duration::from_secs(1)).await,
            Outcome::Failure(format!(
                "dial tcp 127.0.0.1:{port}: connect: connection refused"
            ))
        );
    }

    #[test]
    fn hosts_join_like_go() {
        assert_eq!(join_host_port("10.0.0.1", 80), "10.0.0.1:80");
        assert_eq!(join_host_port("fd00::1", 80), "[fd00::1]:80");
        assert_eq!(join_host_port("example.com", 443), "example.com:443");
    }
}
