//! Shared helpers of the end-to-end tests: start the real `litek8s apiserver` binary in a
//! temporary data directory on a free loopback port, wait for /readyz, stop it with SIGTERM or
//! SIGKILL, restart it on the same data, and talk to it: HTTPS with the admin token over real
//! keep-alive connections (hyper's HTTP/1 client on a rustls stream), one-shot blocking GETs
//! over plain HTTP or TLS, and kubectl with the generated kubeconfig.
//!
//! ```ignore
//! mod support;
//! let server = support::Server::start(&[]);
//! let out = server.kubectl(&["get", "--raw", "/readyz"]);
//! ```
//!
//! Every test binary compiles this module separately and uses a different subset of it. The
//! cluster (`cluster_support`), load-balancer (`lb_support`) and network-namespace
//! (`netns_lab`) helpers build on this one.
#![allow(dead_code)]

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::client::conn::http1::SendRequest;
use hyper_util::rt::TokioIo;
use rustls::pki_types::{CertificateDer, ServerName};
use tokio::net::TcpStream as TokioTcpStream;
use tokio_rustls::TlsConnector;

pub mod aggregated;
pub mod images;
pub mod kubectl;
mod ports;
pub mod serving_tls;
pub mod webhook;
pub use ports::free_port;

/// SIGTERMs `child` and waits for it to exit (up to 30 s, then SIGKILL); `None` if it had to
/// be killed.
pub fn terminate_child(mut child: Child) -> Option<ExitStatus> {
    let pid = nix::unistd::Pid::from_raw(child.id() as i32);
    let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM);
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if let Ok(Some(status)) = child.try_wait() {
            return Some(status);
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            return None;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The binary under test: the one cargo built for this test, else `$LITEK8S_BIN` (the
/// benchmark, an example, passes the release binary that way).
pub fn bin() -> PathBuf {
    if let Some(path) = option_env!("CARGO_BIN_EXE_litek8s") {
        return PathBuf::from(path);
    }
    PathBuf::from(std::env::var_os("LITEK8S_BIN").expect("set LITEK8S_BIN to the litek8s binary"))
}

/// The agent's own executable under test (`litek8s-agent`, what litek8s-agent.service runs):
/// the one cargo built for this test, else `$LITEK8S_AGENT_BIN` (the benchmark passes the
/// release binary that way).
pub fn agent_bin() -> PathBuf {
    if let Some(path) = option_env!("CARGO_BIN_EXE_litek8s-agent") {
        return PathBuf::from(path);
    }
    PathBuf::from(
        std::env::var_os("LITEK8S_AGENT_BIN")
            .expect("set LITEK8S_AGENT_BIN to the litek8s-agent binary"),
    )
}

/// Arms the fail point `name` (`litek8s::failpoints`) with `value` in the environment of
/// `cmd`, next to any armed before. Panics when the binary under test is built without the
/// `failpoints` feature: the fault would silently not happen, and the test pass for nothing.
pub fn arm_failpoint(cmd: &mut Command, name: &str, value: impl std::fmt::Display) {
    if !cfg!(feature = "failpoints") {
        panic!(
            "this test injects the fault {name}: run it with `cargo test --features failpoints`"
        );
    }
    const VAR: &str = "LITEK8S_FAILPOINTS";
    let earlier = cmd
        .get_envs()
        .find(|(k, _)| *k == VAR)
        .and_then(|(_, v)| v)
        .map(|v| v.to_string_lossy().into_owned());
    let spec = match earlier {
        Some(earlier) if !earlier.is_empty() => format!("{earlier};{name}={value}"),
        _ => format!("{name}={value}"),
    };
    cmd.env(VAR, spec);
}

/// How long a server may take to become ready before a test gives up (a hang guard, not a
/// performance assertion).
pub const READY_TIMEOUT: Duration = Duration::from_secs(60);

/// The kubectl the single-server tests drive.
pub const KUBECTL: &str = "/usr/bin/kubectl";

/// The command line of an API server named `e2e` on `data_dir` listening on `addr` (for tests
/// that run the binary themselves, to see it fail).
pub fn server_command(data_dir: &Path, addr: SocketAddr) -> Command {
    let mut cmd = unnamed_server_command(data_dir, addr);
    cmd.arg("--name").arg("e2e");
    cmd
}

fn unnamed_server_command(data_dir: &Path, addr: SocketAddr) -> Command {
    let mut cmd = Command::new(bin());
    cmd.arg("apiserver")
        .arg("--data-dir")
        .arg(data_dir)
        .arg("--listen")
        .arg(addr.to_string())
        .env(
            "LITEK8S_LOG",
            std::env::var("LITEK8S_LOG").unwrap_or_else(|_| "info".to_string()),
        )
        .stdin(Stdio::null());
    cmd
}

/// One `litek8s apiserver` process and its data directory.
pub struct Server {
    /// Owns the temporary directory; the data directory is `<tmp>/data`.
    _tmp: Option<tempfile::TempDir>,
    pub root: PathBuf,
    pub data_dir: PathBuf,
    pub addr: SocketAddr,
    pub extra_args: Vec<String>,
    child: Option<Child>,
    starts: u32,
}

impl Server {
    /// Starts a server in a new temporary directory and waits until it is ready.
    pub fn start(extra_args: &[&str]) -> Server {
        let tmp = tempfile::Builder::new()
            .prefix("litek8s-e2e-")
            .tempdir()
            .expect("tempdir");
        let root = tmp.path().to_path_buf();
        let mut server = Server {
            _tmp: Some(tmp),
            data_dir: root.join("data"),
            root,
            addr: SocketAddr::from(([127, 0, 0, 1], free_port())),
            extra_args: extra_args.iter().map(|s| s.to_string()).collect(),
            child: None,
            starts: 0,
        };
        server.spawn_and_wait();
        server
    }

    /// The command line of this server (named `e2e` unless its flags name it).
    pub fn command(&self) -> Command {
        let mut cmd = if self.extra_args.iter().any(|a| a == "--name") {
            unnamed_server_command(&self.data_dir, self.addr)
        } else {
            server_command(&self.data_dir, self.addr)
        };
        cmd.args(&self.extra_args);
        cmd
    }

    /// Path of the log file of the `n`-th start (1-based).
    pub fn log_path(&self, n: u32) -> PathBuf {
        self.root.join(format!("server-{n}.log"))
    }

    /// Everything every start of this server has logged so far.
    pub fn logs(&self) -> String {
        let mut all = String::new();
        for n in 1..=self.starts {
            all.push_str(&std::fs::read_to_string(self.log_path(n)).unwrap_or_default());
        }
        all
    }

    /// Spawns the process with stdout and stderr going to a new log file.
    pub fn spawn(&mut self) {
        assert!(self.child.is_none(), "server already running");
        self.starts += 1;
        let log = std::fs::File::create(self.log_path(self.starts)).expect("create log");
        let child = self
            .command()
            .stdout(log.try_clone().expect("clone log"))
            .stderr(log)
            .spawn()
            .expect("spawn litek8s");
        self.child = Some(child);
    }

    /// Spawns the process and waits for /readyz; panics with the log if it exits or hangs.
    pub fn spawn_and_wait(&mut self) {
        self.spawn();
        self.wait_ready();
    }

    /// Waits until plain-HTTP /readyz answers 200.
    pub fn wait_ready(&mut self) {
        let deadline = Instant::now() + READY_TIMEOUT;
        loop {
            if let Some(child) = self.child.as_mut() {
                if let Ok(Some(status)) = child.try_wait() {
                    self.child = None;
                    panic!(
                        "litek8s exited during startup with {status}; log:\n{}",
                        self.logs()
                    );
                }
            }
            if readyz(self.addr) == Some(200) {
                return;
            }
            if Instant::now() > deadline {
                panic!(
                    "litek8s not ready after {READY_TIMEOUT:?}; log:\n{}",
                    self.logs()
                );
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(|c| c.id())
    }

    /// SIGKILLs the process and reaps it.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// SIGTERMs the process and waits for it to exit (up to 30 s, then SIGKILL).
    pub fn terminate(&mut self) -> Option<ExitStatus> {
        terminate_child(self.child.take()?)
    }

    /// SIGKILLs the process (if running), starts it again on the same port and data, and
    /// waits until it is ready.
    pub fn restart(&mut self) {
        self.kill();
        self.spawn_and_wait();
    }

    /// Like `restart`, with a new set of extra flags.
    pub fn restart_with(&mut self, extra_args: &[&str]) {
        self.extra_args = extra_args.iter().map(|s| s.to_string()).collect();
        self.restart();
    }

    /// Whether the process is still running.
    pub fn is_running(&mut self) -> bool {
        match self.child.as_mut() {
            Some(child) => matches!(child.try_wait(), Ok(None)),
            None => false,
        }
    }

    /// Runs the server on the same data until it exits or becomes ready. Returns the exit
    /// status if it exited (the process is reaped), or `None` if it became ready (it keeps
    /// running and is owned by `self`).
    pub fn start_expecting_exit(&mut self) -> Option<ExitStatus> {
        self.spawn();
        let deadline = Instant::now() + READY_TIMEOUT;
        loop {
            let child = self.child.as_mut().expect("spawned");
            if let Ok(Some(status)) = child.try_wait() {
                self.child = None;
                return Some(status);
            }
            if readyz(self.addr) == Some(200) {
                return None;
            }
            if Instant::now() > deadline {
                panic!(
                    "litek8s neither exited nor became ready; log:\n{}",
                    self.logs()
                );
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    pub fn token(&self) -> String {
        std::fs::read_to_string(self.data_dir.join("admin-token"))
            .expect("read admin-token")
            .trim()
            .to_string()
    }

    pub fn kubeconfig_path(&self) -> PathBuf {
        self.data_dir.join("kubeconfig.yaml")
    }

    pub fn ca_cert(&self) -> PathBuf {
        self.data_dir.join("ca.crt")
    }

    /// `https://127.0.0.1:<port>`, as the kubeconfig names the server.
    pub fn url(&self) -> String {
        format!("https://{}", self.addr)
    }

    /// Runs [`KUBECTL`] with this server's kubeconfig.
    pub fn kubectl(&self, args: &[&str]) -> std::process::Output {
        Command::new(KUBECTL)
            .arg("--kubeconfig")
            .arg(self.kubeconfig_path())
            .args(args)
            .output()
            .expect("run kubectl")
    }

    /// GET `path` over plain HTTP/1.1.
    pub fn plain_get(&self, path: &str) -> HttpResponse {
        http_get(self.addr, path, Duration::from_secs(10)).expect("plain HTTP GET")
    }

    /// GET `path` over HTTPS/1.1 (verifying the server as `localhost`), with `token`.
    pub fn https_get(&self, path: &str, token: Option<&str>) -> HttpResponse {
        let mut tls = self
            .tls_connect("localhost", &[b"http/1.1"])
            .expect("TLS connect");
        http_get_over(&mut tls, path, token).expect("HTTPS GET")
    }

    /// A completed TLS handshake, verified against ca.crt as `server_name` (a DNS name or an
    /// IP), offering `alpn`.
    pub fn tls_connect(
        &self,
        server_name: &str,
        alpn: &[&[u8]],
    ) -> Result<rustls::StreamOwned<rustls::ClientConnection, TcpStream>, String> {
        let config = client_config(&self.ca_cert(), alpn);
        let name = ServerName::try_from(server_name.to_string()).map_err(|e| e.to_string())?;
        let conn = rustls::ClientConnection::new(config, name).map_err(|e| e.to_string())?;
        let sock = TcpStream::connect(self.addr).map_err(|e| e.to_string())?;
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

    pub fn wal_path(&self) -> PathBuf {
        self.data_dir.join("objects.wal")
    }

    /// An HTTPS client for this server with the admin token.
    pub fn api(&self) -> Api {
        Api::new(self.addr, &self.data_dir.join("ca.crt"), Some(self.token()))
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Status code of plain-HTTP `GET /readyz`, or `None` if the port does not answer HTTP.
pub fn readyz(addr: SocketAddr) -> Option<u16> {
    let mut stream = TcpStream::connect_timeout(&addr, Duration::from_millis(500)).ok()?;
    stream.set_read_timeout(Some(Duration::from_secs(2))).ok()?;
    http_get_over(&mut stream, "/readyz", None)
        .ok()
        .map(|r| r.status)
}

/// A response read whole by [`http_get_over`].
#[derive(Debug, Clone)]
pub struct HttpResponse {
    pub status: u16,
    /// The status line and headers as received.
    pub headers: String,
    pub body: String,
}

impl HttpResponse {
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_str(&self.body)
            .unwrap_or_else(|e| panic!("body is not JSON ({e}): {}", self.body))
    }
}

/// One plain-HTTP GET of `path` from `addr`, connect and reads bounded by `limit`.
pub fn http_get(addr: SocketAddr, path: &str, limit: Duration) -> std::io::Result<HttpResponse> {
    let mut stream = TcpStream::connect_timeout(&addr, limit)?;
    stream.set_read_timeout(Some(limit))?;
    http_get_over(&mut stream, path, None)
}

/// Sends one HTTP/1.1 GET with `Connection: close` (and a bearer `token`) on `stream`, which
/// may be plain TCP, TLS or a socket made in another network namespace, and reads the whole
/// response.
pub fn http_get_over(
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
        .ok_or_else(|| std::io::Error::other(format!("not HTTP: {text:?}")))?;
    Ok(HttpResponse {
        status,
        headers: head.to_string(),
        body: body.to_string(),
    })
}

/// A rustls client trusting only the CA in `ca_path`, offering `alpn`.
pub fn client_config(ca_path: &Path, alpn: &[&[u8]]) -> Arc<rustls::ClientConfig> {
    let pem = std::fs::read(ca_path).expect("read ca.crt");
    let mut roots = rustls::RootCertStore::empty();
    for cert in rustls_pemfile::certs(&mut pem.as_slice()) {
        let cert: CertificateDer<'static> = cert.expect("parse ca.crt");
        roots.add(cert).expect("add CA");
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

/// Installs rustls' ring provider as the process default (kube-rs needs one).
pub fn install_crypto_provider() {
    let _ = rustls::crypto::ring::default_provider().install_default();
}

/// A response read whole.
#[derive(Debug)]
pub struct Resp {
    pub status: u16,
    pub headers: http::HeaderMap,
    pub body: Bytes,
}

impl Resp {
    /// Reads a whole response: status, headers and the collected body.
    async fn read(response: http::Response<hyper::body::Incoming>) -> Result<Resp, String> {
        let status = response.status().as_u16();
        let headers = response.headers().clone();
        let body = response
            .into_body()
            .collect()
            .await
            .map_err(|e| format!("read body: {e}"))?
            .to_bytes();
        Ok(Resp {
            status,
            headers,
            body,
        })
    }

    pub fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.body).unwrap_or(serde_json::Value::Null)
    }

    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }

    /// `reason` of a Status body, or "".
    pub fn reason(&self) -> String {
        self.json()["reason"].as_str().unwrap_or("").to_string()
    }

    pub fn content_type(&self) -> String {
        self.headers
            .get(http::header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
            .to_string()
    }
}

/// Connection parameters of one server: address, trusted CA and bearer token.
#[derive(Clone)]
pub struct Api {
    pub addr: SocketAddr,
    pub token: Option<String>,
    tls: TlsConnector,
}

impl Api {
    pub fn new(addr: SocketAddr, ca_path: &Path, token: Option<String>) -> Api {
        install_crypto_provider();
        Api {
            addr,
            token,
            tls: TlsConnector::from(client_config(ca_path, &[])),
        }
    }

    /// The same server with another (or no) token.
    pub fn with_token(&self, token: Option<&str>) -> Api {
        Api {
            addr: self.addr,
            token: token.map(str::to_string),
            tls: self.tls.clone(),
        }
    }

    /// Opens one keep-alive HTTP/1.1 connection over TLS.
    pub async fn connect(&self) -> Result<Conn, String> {
        let tcp = TokioTcpStream::connect(self.addr)
            .await
            .map_err(|e| format!("connect {}: {e}", self.addr))?;
        self.connect_over(tcp).await
    }

    /// Opens one keep-alive HTTP/1.1 connection over TLS on a TCP connection made elsewhere
    /// (for example in another network namespace) to `self.addr`.
    pub async fn connect_over(&self, tcp: TokioTcpStream) -> Result<Conn, String> {
        let _ = tcp.set_nodelay(true);
        let name = ServerName::IpAddress(self.addr.ip().into());
        let tls = self
            .tls
            .connect(name, tcp)
            .await
            .map_err(|e| format!("TLS handshake: {e}"))?;
        let (sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(tls))
            .await
            .map_err(|e| format!("HTTP handshake: {e}"))?;
        tokio::spawn(async move {
            let _ = connection.await;
        });
        Ok(Conn {
            sender,
            token: self.token.clone(),
        })
    }

    /// One request on a new connection.
    pub async fn request(
        &self,
        method: &str,
        path: &str,
        content_type: Option<&str>,
        body: impl Into<Bytes>,
    ) -> Result<Resp, String> {
        let mut conn = self.connect().await?;
        conn.request(method, path, content_type, body).await
    }

    pub async fn get(&self, path: &str) -> Result<Resp, String> {
        self.request("GET", path, None, Bytes::new()).await
    }

    pub async fn post_json(&self, path: &str, body: &serde_json::Value) -> Result<Resp, String> {
        self.request(
            "POST",
            path,
            Some("application/json"),
            serde_json::to_vec(body).expect("serialize"),
        )
        .await
    }
}

/// One open HTTP/1.1 connection.
pub struct Conn {
    sender: SendRequest<Full<Bytes>>,
    token: Option<String>,
}

impl Conn {
    pub async fn request(
        &mut self,
        method: &str,
        path: &str,
        content_type: Option<&str>,
        body: impl Into<Bytes>,
    ) -> Result<Resp, String> {
        let response = self.send(method, path, content_type, body).await?;
        Resp::read(response).await
    }

    /// A bodiless request with a raw `Authorization` header value instead of the token.
    pub async fn request_with_auth(
        &mut self,
        method: &str,
        path: &str,
        authorization: &str,
    ) -> Result<Resp, String> {
        let response = self
            .send_with(
                method,
                path,
                None,
                Bytes::new(),
                Some(authorization.to_string()),
            )
            .await?;
        Resp::read(response).await
    }

    /// Opens the watch at `path` (a GET with `watch=true` in its query) on this connection,
    /// and reads its events in a task of its own: `(type, object)` per event, in order; the
    /// channel ends when the stream does. Answers the response's status too.
    pub async fn watch(
        mut self,
        path: &str,
    ) -> Result<
        (
            u16,
            tokio::sync::mpsc::UnboundedReceiver<(String, serde_json::Value)>,
        ),
        String,
    > {
        let response = self.send("GET", path, None, Bytes::new()).await?;
        let status = response.status().as_u16();
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
        tokio::spawn(async move {
            let _conn = self;
            let mut body = response.into_body();
            let mut buffer = Vec::new();
            while let Some(Ok(frame)) = body.frame().await {
                let Ok(data) = frame.into_data() else {
                    continue;
                };
                buffer.extend_from_slice(&data);
                while let Some(end) = buffer.iter().position(|b| *b == b'\n') {
                    let line: Vec<u8> = buffer.drain(..=end).collect();
                    if let Ok(mut event) = serde_json::from_slice::<serde_json::Value>(&line) {
                        let kind = event["type"].as_str().unwrap_or_default().to_string();
                        if tx.send((kind, event["object"].take())).is_err() {
                            return;
                        }
                    }
                }
            }
        });
        Ok((status, rx))
    }

    /// Sends a request and returns the response head with its streaming body (for watches).
    pub async fn send(
        &mut self,
        method: &str,
        path: &str,
        content_type: Option<&str>,
        body: impl Into<Bytes>,
    ) -> Result<hyper::Response<hyper::body::Incoming>, String> {
        let auth = self.token.as_ref().map(|t| format!("Bearer {t}"));
        self.send_with(method, path, content_type, body.into(), auth)
            .await
    }

    async fn send_with(
        &mut self,
        method: &str,
        path: &str,
        content_type: Option<&str>,
        body: Bytes,
        authorization: Option<String>,
    ) -> Result<hyper::Response<hyper::body::Incoming>, String> {
        self.send_accepting(
            method,
            path,
            content_type,
            body,
            authorization,
            "application/json",
        )
        .await
    }

    /// A bodiless request with its own `Accept` header (a Table, for example).
    pub async fn request_accept(
        &mut self,
        method: &str,
        path: &str,
        accept: &str,
    ) -> Result<Resp, String> {
        let auth = self.token.as_ref().map(|t| format!("Bearer {t}"));
        let response = self
            .send_accepting(method, path, None, Bytes::new(), auth, accept)
            .await?;
        Resp::read(response).await
    }

    async fn send_accepting(
        &mut self,
        method: &str,
        path: &str,
        content_type: Option<&str>,
        body: Bytes,
        authorization: Option<String>,
        accept: &str,
    ) -> Result<hyper::Response<hyper::body::Incoming>, String> {
        let method = http::Method::from_bytes(method.as_bytes()).map_err(|e| e.to_string())?;
        let mut builder = http::Request::builder()
            .method(method)
            .uri(path)
            .header(http::header::HOST, "127.0.0.1")
            .header(http::header::ACCEPT, accept);
        if let Some(auth) = authorization {
            builder = builder.header(http::header::AUTHORIZATION, auth);
        }
        if let Some(ct) = content_type {
            builder = builder.header(http::header::CONTENT_TYPE, ct);
        }
        let request = builder.body(Full::new(body)).map_err(|e| e.to_string())?;
        self.sender
            .ready()
            .await
            .map_err(|e| format!("connection closed: {e}"))?;
        self.sender
            .send_request(request)
            .await
            .map_err(|e| format!("request failed: {e}"))
    }
}

/// A ConfigMap body with `data`.
pub fn configmap(namespace: &str, name: &str, data: serde_json::Value) -> serde_json::Value {
    serde_json::json!({
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": namespace},
        "data": data,
    })
}

/// `metadata.resourceVersion` of an object, parsed.
pub fn rv_of(object: &serde_json::Value) -> Option<u64> {
    object["metadata"]["resourceVersion"].as_str()?.parse().ok()
}

/// A multi-threaded tokio runtime for tests that drive the server from sync code.
pub fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("tokio runtime")
}

/// A node credential for `name`, asked of `server` with its join secret.
pub fn node_credentials(server: &Server, name: &str) -> litek8s::agent::join::Credentials {
    let token = std::fs::read_to_string(server.data_dir.join("join-token")).unwrap();
    let secret = token.trim().rsplit_once(':').unwrap().1.to_string();
    let key = rcgen::KeyPair::generate().unwrap();
    let csr = rcgen::CertificateParams::new(Vec::<String>::new())
        .unwrap()
        .serialize_request(&key)
        .unwrap()
        .pem()
        .unwrap();
    let rt = runtime();
    let answer = rt.block_on(async {
        server
            .api()
            .with_token(Some(&secret))
            .post_json(
                "/litek8s/v1/node-credential",
                &serde_json::json!({"nodeName": name, "csr": csr}),
            )
            .await
            .unwrap()
    });
    assert_eq!(answer.status, 200, "{}", answer.text());
    let answer = answer.json();
    litek8s::agent::join::Credentials {
        ca_pem: answer["ca"].as_str().unwrap().to_string(),
        cert_pem: answer["certificate"].as_str().unwrap().to_string(),
        key_pem: key.serialize_pem(),
    }
}
