//! Helpers of the load balancer tests: a `litek8s lb` child process with a status port and
//! a state directory, its `/status` as JSON, plain-HTTP requests through it, kubeconfigs and
//! kubectl runs that go through it, and small fake servers (garbage, silent, not Kubernetes).
#![allow(dead_code)]

use std::io::Read;
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use super::support::{self, bin, free_port, terminate_child};

/// The kubectl versions the tests drive.
pub const KUBECTLS: [&str; 2] = [
    "/usr/lib/google-cloud-sdk/bin/kubectl.1.27",
    "/usr/lib/google-cloud-sdk/bin/kubectl.1.33",
];

/// One `litek8s lb` process.
pub struct Lb {
    pub listen: SocketAddr,
    pub status: SocketAddr,
    pub state_dir: PathBuf,
    pub servers: Vec<String>,
    pub extra: Vec<String>,
    log_dir: PathBuf,
    child: Option<Child>,
    starts: u32,
}

impl Lb {
    /// Starts a balancer for `servers` (URLs) with its state in `dir`; waits until its
    /// status port answers.
    pub fn start(dir: &Path, servers: &[String], extra: &[&str]) -> Lb {
        let mut lb = Lb::unstarted(dir, servers, extra);
        lb.spawn();
        lb
    }

    /// The command line (without the client socket when `activated`).
    pub fn command(&self) -> Command {
        let mut cmd = Command::new(bin());
        cmd.arg("lb")
            .arg("--listen")
            .arg(self.listen.to_string())
            .arg("--status-listen")
            .arg(self.status.to_string())
            .arg("--state-dir")
            .arg(&self.state_dir);
        for s in &self.servers {
            cmd.arg("--server").arg(s);
        }
        cmd.args(&self.extra)
            .env(
                "RUST_LOG",
                std::env::var("LITEK8S_LOG").unwrap_or_else(|_| "info".into()),
            )
            .stdin(Stdio::null());
        cmd
    }

    pub fn log_path(&self, n: u32) -> PathBuf {
        self.log_dir.join(format!("lb-{n}.log"))
    }

    pub fn logs(&self) -> String {
        (1..=self.starts)
            .map(|n| std::fs::read_to_string(self.log_path(n)).unwrap_or_default())
            .collect::<Vec<_>>()
            .join("\n")
    }

    /// Spawns `cmd` as this balancer (logs to a new file) and waits for its status port.
    pub fn spawn_command(&mut self, cmd: Command) {
        self.spawn_only(cmd);
        self.wait_status();
    }

    /// Spawns `cmd` as this balancer without waiting for anything.
    pub fn spawn_only(&mut self, mut cmd: Command) {
        assert!(self.child.is_none(), "lb already running");
        self.starts += 1;
        let log = std::fs::File::create(self.log_path(self.starts)).expect("log file");
        let child = cmd
            .stdout(log.try_clone().expect("clone log"))
            .stderr(log)
            .spawn()
            .expect("spawn litek8s lb");
        self.child = Some(child);
    }

    /// Waits until the status port answers; panics with the log if the process exits.
    pub fn wait_status(&mut self) {
        let deadline = Instant::now() + Duration::from_secs(30);
        while self.try_status().is_none() {
            if let Some(Ok(Some(status))) = self.child.as_mut().map(|c| c.try_wait()) {
                panic!("lb exited with {status}; log:\n{}", self.logs());
            }
            assert!(
                Instant::now() < deadline,
                "lb status port never answered; log:\n{}",
                self.logs()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Starts a balancer that is not spawned yet (see [`Lb::spawn_only`]).
    pub fn unstarted(dir: &Path, servers: &[String], extra: &[&str]) -> Lb {
        Lb {
            listen: SocketAddr::from(([127, 0, 0, 1], free_port())),
            status: SocketAddr::from(([127, 0, 0, 1], free_port())),
            state_dir: dir.join("lb-state"),
            servers: servers.to_vec(),
            extra: extra.iter().map(|s| s.to_string()).collect(),
            log_dir: dir.to_path_buf(),
            child: None,
            starts: 0,
        }
    }

    pub fn is_running(&mut self) -> bool {
        matches!(self.child.as_mut().map(|c| c.try_wait()), Some(Ok(None)))
    }

    pub fn spawn(&mut self) {
        let cmd = self.command();
        self.spawn_command(cmd);
    }

    /// SIGTERMs the balancer and waits for it.
    pub fn terminate(&mut self) -> Option<std::process::ExitStatus> {
        terminate_child(self.child.take()?)
    }

    pub fn url(&self) -> String {
        format!("https://{}", self.listen)
    }

    /// `/status` as JSON, `None` if the status port does not answer.
    pub fn try_status(&self) -> Option<serde_json::Value> {
        let (code, body) = http_get(self.status, "/status", Duration::from_secs(2)).ok()?;
        (code == 200)
            .then(|| serde_json::from_str(&body).ok())
            .flatten()
    }

    pub fn status(&self) -> serde_json::Value {
        self.try_status()
            .unwrap_or_else(|| panic!("no lb status; log:\n{}", self.logs()))
    }

    /// The active server's address, if any.
    pub fn active(&self) -> Option<String> {
        self.try_status()?["active"].as_str().map(str::to_string)
    }

    /// `(addr, state)` of every server.
    pub fn states(&self) -> Vec<(String, String)> {
        self.status()["servers"]
            .as_array()
            .map(|a| {
                a.iter()
                    .map(|s| {
                        (
                            s["addr"].as_str().unwrap_or("").to_string(),
                            s["state"].as_str().unwrap_or("").to_string(),
                        )
                    })
                    .collect()
            })
            .unwrap_or_default()
    }

    /// Connections made to `addr` so far.
    pub fn total(&self, addr: &str) -> u64 {
        self.status()["servers"]
            .as_array()
            .and_then(|a| a.iter().find(|s| s["addr"] == addr))
            .and_then(|s| s["total"].as_u64())
            .unwrap_or(0)
    }

    /// Waits until `pred` holds for the status (panics with the log after `limit`).
    pub fn wait_for(&self, what: &str, limit: Duration, pred: impl Fn(&serde_json::Value) -> bool) {
        let deadline = Instant::now() + limit;
        loop {
            if let Some(status) = self.try_status() {
                if pred(&status) {
                    return;
                }
            }
            if Instant::now() > deadline {
                panic!(
                    "lb: {what} not reached in {limit:?}; status {:?}; log:\n{}",
                    self.try_status(),
                    self.logs()
                );
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// A kubeconfig like `template` (a member's) whose server is this balancer.
    pub fn kubeconfig(&self, template: &Path, out: &Path) -> PathBuf {
        let text = std::fs::read_to_string(template).expect("kubeconfig");
        let mut lines = Vec::new();
        for line in text.lines() {
            match line.split_once("server: ") {
                Some((indent, _)) if indent.trim().is_empty() => {
                    lines.push(format!("{indent}server: {}", self.url()))
                }
                _ => lines.push(line.to_string()),
            }
        }
        std::fs::write(out, lines.join("\n") + "\n").expect("write kubeconfig");
        out.to_path_buf()
    }
}

impl Drop for Lb {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// The time from `since` until the balancer's active server is set and not `old`.
pub fn switch_time(lb: &Lb, old: &str, since: Instant, limit: Duration) -> Duration {
    loop {
        if let Some(active) = lb.active() {
            if active != old {
                return since.elapsed();
            }
        }
        if since.elapsed() > limit {
            panic!(
                "lb still on {old} after {limit:?}; status {:?}; log:\n{}",
                lb.try_status(),
                lb.logs()
            );
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// One plain-HTTP GET: `(status, body)`.
pub fn http_get(addr: SocketAddr, path: &str, limit: Duration) -> Result<(u16, String), String> {
    let response = support::http_get(addr, path, limit).map_err(|e| e.to_string())?;
    Ok((response.status, response.body))
}

/// Runs kubectl `binary` with `kubeconfig`; the output, bounded by `limit`.
pub fn kubectl(binary: &str, kubeconfig: &Path, args: &[&str], limit: Duration) -> Output {
    let mut child = Command::new("timeout")
        .arg(format!("{}", limit.as_secs().max(1)))
        .arg(binary)
        .arg("--kubeconfig")
        .arg(kubeconfig)
        .arg("--request-timeout=20s")
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn kubectl");
    let _ = &mut child;
    child.wait_with_output().expect("kubectl output")
}

/// kubectl that must succeed; returns stdout.
pub fn kubectl_ok(binary: &str, kubeconfig: &Path, args: &[&str]) -> String {
    let out = kubectl(binary, kubeconfig, args, Duration::from_secs(60));
    assert!(
        out.status.success(),
        "{binary} {args:?} failed: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// A fake server on a free loopback port that treats every connection with `serve` (each in
/// its own thread). The listener lives as long as the process.
pub fn fake_server(serve: fn(TcpStream)) -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = listener.local_addr().expect("addr");
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            std::thread::spawn(move || serve(stream));
        }
    });
    addr
}

/// Reads the request head (bounded) so an answer is not sent before the question.
pub fn read_head(stream: &mut TcpStream) {
    let _ = stream.set_read_timeout(Some(Duration::from_secs(5)));
    let mut buf = [0u8; 4096];
    let mut seen = Vec::new();
    while let Ok(n) = stream.read(&mut buf) {
        if n == 0 {
            break;
        }
        seen.extend_from_slice(&buf[..n]);
        if seen.windows(4).any(|w| w == b"\r\n\r\n") || seen.len() > 64 << 10 {
            break;
        }
    }
}
