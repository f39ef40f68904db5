//! Shared helpers for integration tests: start the real `litek8s apiserver` binary on a free
//! loopback port with a temporary data directory, wait until /readyz answers, and talk to it
//! over plain HTTP or TLS (verified against the server's own CA).
//!
//! ```ignore
//! mod common;
//! let server = common::TestServer::start();
//! let out = server.kubectl(&["get", "--raw", "/readyz"]);
//! ```
#![allow(dead_code)] // each test crate uses a different subset

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Output, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

#[path = "../support/ports.rs"]
mod ports;
pub use ports::free_port;

/// How long a server may take to become ready before the test gives up (a hang guard, not
/// a performance assertion).
const READY_GUARD: Duration = Duration::from_secs(60);

/// The kubectl the tests drive.
pub const KUBECTL: &str = "/usr/bin/kubectl";

/// A running `litek8s apiserver` child process. Dropping it kills the process.
pub struct TestServer {
    child: Option<Child>,
    port: u16,
    data: tempfile::TempDir,
    logs: tempfile::TempDir,
    starts: u32,
    extra_args: Vec<String>,
}

/// A response read by `plain_get` / `https_get`.
#[derive(Debug, Clone)]
pub struct HttpResponse {
    pub status: u16,
    pub headers: String,
    pub body: String,
}

impl HttpResponse {
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_str(&self.body)
            .unwrap_or_else(|e| panic!("body is not JSON ({e}): {}", self.body))
    }
}

impl TestServer {
    /// Starts a server on a free port with a fresh data directory and waits until ready.
    pub fn start() -> TestServer {
        TestServer::start_with(&[])
    }

    /// Like `start`, with extra `litek8s apiserver` flags.
    pub fn start_with(extra_args: &[&str]) -> TestServer {
        let mut server = TestServer {
            child: None,
            port: free_port(),
            data: tempfile::tempdir().expect("temp data dir"),
            logs: tempfile::tempdir().expect("temp log dir"),
            starts: 0,
            extra_args: extra_args.iter().map(|s| s.to_string()).collect(),
        };
        server.spawn();
        server.wait_ready();
        server
    }

    /// The command line the server runs with (for tests that run the binary themselves).
    pub fn command(data_dir: &Path, port: u16) -> Command {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_litek8s"));
        cmd.arg("apiserver")
            .arg("--data-dir")
            .arg(data_dir)
            .arg("--listen")
            .arg(format!("127.0.0.1:{port}"))
            .env_remove("RUST_LOG")
            .env("LITEK8S_LOG", "info");
        cmd
    }

    fn spawn(&mut self) {
        self.starts += 1;
        let log = std::fs::File::create(self.log_path()).expect("log file");
        let child = TestServer::command(&self.data_dir(), self.port)
            .args(&self.extra_args)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("spawn litek8s");
        self.child = Some(child);
    }

    fn log_path(&self) -> PathBuf {
        self.logs.path().join(format!("stderr.{}.log", self.starts))
    }

    /// Everything the current (or last) process wrote to stderr.
    pub fn logs(&self) -> String {
        std::fs::read_to_string(self.log_path()).unwrap_or_default()
    }

    /// Polls plain-HTTP /readyz until it answers 200; panics (with the logs) if the process
    /// exits or the guard expires.
    pub fn wait_ready(&mut self) {
        let started = Instant::now();
        loop {
            if let Some(status) = self
                .child
                .as_mut()
                .and_then(|c| c.try_wait().ok().flatten())
            {
                panic!(
                    "litek8s exited with {status} before ready:\n{}",
                    self.logs()
                );
            }
            if matches!(self.try_plain_get("/readyz"), Ok(r) if r.status == 200) {
                return;
            }
            if started.elapsed() > READY_GUARD {
                panic!("litek8s not ready after {READY_GUARD:?}:\n{}", self.logs());
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    pub fn addr(&self) -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], self.port))
    }

    /// `https://127.0.0.1:<port>`.
    pub fn url(&self) -> String {
        format!("https://127.0.0.1:{}", self.port)
    }

    pub fn data_dir(&self) -> PathBuf {
        self.data.path().join("data")
    }

    pub fn kubeconfig(&self) -> PathBuf {
        self.data_dir().join("kubeconfig.yaml")
    }

    pub fn ca_cert(&self) -> PathBuf {
        self.data_dir().join("ca.crt")
    }

    /// The admin bearer token.
    pub fn token(&self) -> String {
        std::fs::read_to_string(self.data_dir().join("admin-token"))
            .expect("read admin-token")
            .trim()
            .to_string()
    }

    /// The child's process id, while it runs.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// SIGKILLs the process and reaps it.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Sends SIGTERM and waits for the exit status.
    pub fn terminate(&mut self) -> ExitStatus {
        let mut child = self.child.take().expect("server is running");
        let pid = nix::unistd::Pid::from_raw(child.id() as i32);
        nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM).expect("SIGTERM");
        child.wait().expect("wait for litek8s")
    }

    /// Kills the process (if running) and starts it again on the same port and data
    /// directory, then waits until ready.
    pub fn restart(&mut self) {
        self.kill();
        self.spawn();
        self.wait_ready();
    }

    /// Like `restart`, with a new set of extra flags.
    pub fn restart_with(&mut self, extra_args: &[&str]) {
        self.extra_args = extra_args.iter().map(|s| s.to_string()).collect();
        self.restart();
    }

    /// Runs kubectl with this server's kubeconfig.
    pub fn kubectl(&self, args: &[&str]) -> Output {
        Command::new(KUBECTL)
            .arg("--kubeconfig")
            .arg(self.kubeconfig())
            .args(args)
            .output()
            .expect("run kubectl")
    }

    /// GET `path` over plain HTTP/1.1.
    pub fn plain_get(&self, path: &str) -> HttpResponse {
        self.try_plain_get(path).expect("plain HTTP GET")
    }

    fn try_plain_get(&self, path: &str) -> std::io::Result<HttpResponse> {
        let mut stream = TcpStream::connect(self.addr())?;
        stream.set_read_timeout(Some(Duration::from_secs(10)))?;
        exchange(&mut stream, path, None)
    }

    /// GET `path` over HTTPS/1.1, verifying the server against ca.crt as `server_name`.
    pub fn https_get(&self, path: &str, token: Option<&str>) -> HttpResponse {
        let mut tls = self
            .tls_connect("localhost", &[b"http/1.1"])
            .expect("TLS connect");
        exchange(&mut tls, path, token).expect("HTTPS GET")
    }

    /// A completed TLS handshake, verified against ca.crt as `server_name` (a DNS name or an
    /// IP), offering `alpn`.
    pub fn tls_connect(
        &self,
        server_name: &str,
        alpn: &[&[u8]],
    ) -> Result<rustls::StreamOwned<rustls::ClientConnection, TcpStream>, String> {
        let config = client_config(&self.ca_cert(), alpn);
        let name = rustls::pki_types::ServerName::try_from(server_name.to_string())
            .map_err(|e| e.to_string())?;
        let conn = rustls::ClientConnection::new(config, name).map_err(|e| e.to_string())?;
        let sock = TcpStream::connect(self.addr()).map_err(|e| e.to_string())?;
        sock.set_read_timeout(Some(Duration::from_secs(10)))
            .map_err(|e| e.to_string())?;
        let mut tls = rustls::StreamOwned::new(conn, sock);
        while tls.conn.is_handshaking() {
            tls.conn
                .complete_io(&mut tls.sock)
                .map_err(|e| e.to_string())?;
        }
        Ok(tls)
    }
}

impl Drop for TestServer {
    fn drop(&mut self) {
        self.kill();
    }
}

/// A rustls client trusting only the CA in `ca_path`.
pub fn client_config(ca_path: &Path, alpn: &[&[u8]]) -> Arc<rustls::ClientConfig> {
    let pem = std::fs::read(ca_path).expect("read ca.crt");
    let mut roots = rustls::RootCertStore::empty();
    for cert in rustls_pemfile::certs(&mut pem.as_slice()) {
        roots.add(cert.expect("PEM cert")).expect("add CA");
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .expect("protocol versions")
        .with_root_certificates(roots)
        .with_no_client_auth();
    config.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
    Arc::new(config)
}

/// Sends one HTTP/1.1 GET with `Connection: close` and reads the whole response.
fn exchange(
    stream: &mut (impl Read + Write),
    path: &str,
    token: Option<&str>,
) -> std::io::Result<HttpResponse> {
    let auth = token
        .map(|t| format!("Authorization: Bearer {t}\r\n"))
        .unwrap_or_default();
    let request =
        format!("GET {path} HTTP/1.1\r\nHost: localhost\r\n{auth}Connection: close\r\n\r\n");
    stream.write_all(request.as_bytes())?;
    let mut raw = Vec::new();
    match stream.read_to_end(&mut raw) {
        Ok(_) => {}
        // rustls reports a peer that closes without close_notify as UnexpectedEof.
        Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof && !raw.is_empty() => {}
        Err(e) => return Err(e),
    }
    let text = String::from_utf8_lossy(&raw).into_owned();
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| std::io::Error::other(format!("bad response: {text:?}")))?;
    Ok(HttpResponse {
        status,
        headers: head.to_string(),
        body: body.to_string(),
    })
}
