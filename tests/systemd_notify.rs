//! systemd readiness (docs/guarantees.md, systemd readiness) against the real binary: the test
//! binds its own `NOTIFY_SOCKET` datagram socket and reads what `litek8s apiserver` tells systemd.
//!
//! - a single server: `STATUS=` (replay progress) and `EXTEND_TIMEOUT_USEC=` before one
//!   `READY=1`, `WATCHDOG=1` keeps coming while healthy, `STOPPING=1` on SIGTERM;
//! - cluster members: the first one reports `leader, term N, applied M, ready`, a joiner
//!   `joining <address of lk1> as learner` and then `follower of lk1, term N, applied M, ready`;
//! - a member of a 3-server cluster whose peers are down never sends `READY=1`, only
//!   `not ready: …` status lines, and still `STOPPING=1` on SIGTERM.

mod cluster_support;
mod support;

use std::os::unix::net::UnixDatagram;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use cluster_support::Cluster;
use support::{bin, free_port, readyz, terminate_child};

/// A datagram socket standing in for systemd's notification socket; a thread collects every
/// datagram in arrival order.
struct NotifySocket {
    _dir: tempfile::TempDir,
    path: std::path::PathBuf,
    received: Arc<Mutex<Vec<String>>>,
}

impl NotifySocket {
    fn bind() -> NotifySocket {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("notify.sock");
        let sock = UnixDatagram::bind(&path).expect("bind notify socket");
        let received = Arc::new(Mutex::new(Vec::new()));
        let sink = received.clone();
        std::thread::spawn(move || {
            let mut buf = vec![0u8; 65536];
            // Ends when the test process exits; the socket file goes with the tempdir.
            while let Ok(n) = sock.recv(&mut buf) {
                let text = String::from_utf8_lossy(&buf[..n]).into_owned();
                sink.lock().expect("lock").push(text);
            }
        });
        NotifySocket {
            _dir: dir,
            path,
            received,
        }
    }

    /// Every datagram so far.
    fn messages(&self) -> Vec<String> {
        self.received.lock().expect("lock").clone()
    }

    /// Every line of every datagram so far, in order.
    fn lines(&self) -> Vec<String> {
        self.messages()
            .iter()
            .flat_map(|m| m.lines().map(str::to_string).collect::<Vec<_>>())
            .collect()
    }

    /// Waits (bounded) until some line satisfies `pred`; returns it.
    fn wait_line(&self, limit: Duration, pred: impl Fn(&str) -> bool) -> Option<String> {
        let deadline = Instant::now() + limit;
        loop {
            if let Some(line) = self.lines().into_iter().find(|l| pred(l)) {
                return Some(line);
            }
            if Instant::now() > deadline {
                return None;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    fn count(&self, line: &str) -> usize {
        self.lines().iter().filter(|l| *l == line).count()
    }
}

/// Index of the first line equal to / starting with `prefix`.
fn position(lines: &[String], prefix: &str) -> Option<usize> {
    lines.iter().position(|l| l.starts_with(prefix))
}

/// `STATUS=` text of the datagram that carried `READY=1`.
fn ready_status(messages: &[String]) -> Option<String> {
    messages
        .iter()
        .find(|m| m.lines().any(|l| l == "READY=1"))
        .and_then(|m| m.lines().find_map(|l| l.strip_prefix("STATUS=")))
        .map(str::to_string)
}

/// Checks `text` against "<role> of <leader>, term N, applied M, ready" (or the leader's
/// "leader, term N, applied M, ready").
fn is_raft_ready_status(text: &str, role: &str) -> bool {
    let rest = match role {
        "leader" => text.strip_prefix("leader, "),
        _ => text
            .strip_prefix(role)
            .and_then(|r| r.strip_prefix(" of lk1, ")),
    };
    let Some(rest) = rest else { return false };
    let parts: Vec<&str> = rest.split(", ").collect();
    parts.len() == 3
        && parts[0]
            .strip_prefix("term ")
            .is_some_and(|n| n.parse::<u64>().is_ok_and(|n| n >= 1))
        && parts[1]
            .strip_prefix("applied ")
            .is_some_and(|n| n.parse::<u64>().is_ok())
        && parts[2] == "ready"
}

fn spawn_logged(mut cmd: Command, log: &std::path::Path) -> Child {
    let file = std::fs::File::create(log).expect("log file");
    cmd.stdout(file.try_clone().expect("clone log"))
        .stderr(file)
        .stdin(Stdio::null())
        .spawn()
        .expect("spawn litek8s")
}

#[test]
fn single_server_reports_status_then_ready_watchdog_and_stopping() {
    let notify = NotifySocket::bind();
    let tmp = tempfile::tempdir().expect("tempdir");
    let addr = std::net::SocketAddr::from(([127, 0, 0, 1], free_port()));
    let mut cmd = Command::new(bin());
    cmd.arg("apiserver")
        .arg("--data-dir")
        .arg(tmp.path().join("data"))
        .arg("--listen")
        .arg(addr.to_string())
        .arg("--name")
        .arg("notify")
        .env("NOTIFY_SOCKET", &notify.path)
        // WatchdogSec=1s: a ping every 500 ms while the loop beats (once a second).
        .env("WATCHDOG_USEC", "1000000")
        .env_remove("WATCHDOG_PID");
    let log = tmp.path().join("server.log");
    let child = spawn_logged(cmd, &log);
    let logs = || std::fs::read_to_string(&log).unwrap_or_default();

    assert!(
        notify
            .wait_line(support::READY_TIMEOUT, |l| l == "READY=1")
            .is_some(),
        "no READY=1; got {:?}\nlog:\n{}",
        notify.messages(),
        logs()
    );
    assert_eq!(readyz(addr), Some(200), "READY=1 before /readyz is 200");
    let lines = notify.lines();
    let ready_at = position(&lines, "READY=1").expect("READY=1");
    assert_eq!(lines[0], "STATUS=starting", "{lines:?}");
    let replay_at = position(&lines, "STATUS=replaying log").expect("a replay status line");
    let extend_at = position(&lines, "EXTEND_TIMEOUT_USEC=").expect("EXTEND_TIMEOUT_USEC=");
    assert!(
        replay_at < ready_at && extend_at < ready_at,
        "status and timeout extension must come before READY=1: {lines:?}"
    );
    let status = ready_status(&notify.messages()).expect("READY=1 carries a STATUS=");
    assert!(
        status.starts_with("single server, applied ") && status.ends_with(", ready"),
        "{status}"
    );

    // WATCHDOG=1 keeps coming while healthy: at least three more within ~10 s.
    let before = notify.count("WATCHDOG=1");
    let deadline = Instant::now() + Duration::from_secs(10);
    while notify.count("WATCHDOG=1") < before + 3 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(
        notify.count("WATCHDOG=1") >= before + 3,
        "WATCHDOG=1 stopped coming: {:?}",
        notify.messages()
    );

    let status = terminate_child(child).expect("server exits on SIGTERM");
    assert!(status.success(), "exit status {status}; log:\n{}", logs());
    let lines = notify.lines();
    let stopping_at = position(&lines, "STOPPING=1").expect("STOPPING=1 on SIGTERM");
    assert!(stopping_at > ready_at);
    assert_eq!(notify.count("READY=1"), 1, "{lines:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_members_report_their_raft_state() {
    let mut cluster = Cluster::start_placed(0, 100, &|_| cluster_support::Placement::loopback());

    // The first member: cluster-init, then leader.
    let first = NotifySocket::bind();
    let i = cluster.add_stopped_member();
    let cmd = cluster.command(i);
    let mut cmd = cmd;
    cmd.env("NOTIFY_SOCKET", &first.path);
    cluster.spawn_command(i, cmd);
    cluster.wait_ready(i);
    let leader_line = first.wait_line(Duration::from_secs(20), |l| l == "READY=1");
    assert!(leader_line.is_some(), "{:?}", first.messages());
    let status = ready_status(&first.messages()).expect("status with READY=1");
    assert!(is_raft_ready_status(&status, "leader"), "{status}");

    // A joiner: joining, then follower of lk1.
    let joiner = NotifySocket::bind();
    let j = cluster.add_stopped_member();
    let mut cmd = cluster.command(j);
    cmd.env("NOTIFY_SOCKET", &joiner.path);
    cluster.spawn_command(j, cmd);
    cluster.wait_ready(j);
    assert!(
        joiner
            .wait_line(Duration::from_secs(20), |l| l == "READY=1")
            .is_some(),
        "{:?}\n{}",
        joiner.messages(),
        cluster.members[j].logs()
    );
    let lines = joiner.lines();
    let joining_at = lines
        .iter()
        .position(|l| l.starts_with("STATUS=joining ") && l.ends_with(" as learner"))
        .unwrap_or_else(|| panic!("no joining status: {lines:?}"));
    let ready_at = position(&lines, "READY=1").expect("READY=1");
    assert!(joining_at < ready_at, "{lines:?}");
    let status = ready_status(&joiner.messages()).expect("status with READY=1");
    assert!(
        is_raft_ready_status(&status, "follower") || is_raft_ready_status(&status, "learner"),
        "{status}"
    );
    // Once promoted, the status line says follower (it follows the Raft state after READY=1).
    assert!(
        joiner
            .wait_line(Duration::from_secs(20), |l| l
                .strip_prefix("STATUS=")
                .is_some_and(|s| is_raft_ready_status(s, "follower")))
            .is_some(),
        "{lines:?}"
    );
    cluster.terminate(j);
    assert!(position(&joiner.lines(), "STOPPING=1").is_some());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn member_without_quorum_never_sends_ready() {
    let mut cluster = Cluster::start(3);
    cluster.wait_leader().await;
    for i in 0..3 {
        cluster.terminate(i);
    }
    // lk3 alone: its two peers are down, so no leader can be elected.
    let notify = NotifySocket::bind();
    let mut cmd = cluster.command(2);
    cmd.env("NOTIFY_SOCKET", &notify.path);
    cluster.spawn_command(2, cmd);
    let not_ready = notify.wait_line(Duration::from_secs(20), |l| {
        l.starts_with("STATUS=not ready: ")
    });
    assert!(not_ready.is_some(), "{:?}", notify.messages());
    // Dozens of election timeouts (heartbeat 100 ms): still no READY=1.
    std::thread::sleep(Duration::from_secs(5));
    assert!(
        cluster.members[2].is_running(),
        "{}",
        cluster.members[2].logs()
    );
    assert_ne!(readyz(cluster.members[2].api), Some(200));
    let lines = notify.lines();
    assert!(!lines.iter().any(|l| l == "READY=1"), "{lines:?}");
    assert!(
        lines.iter().filter(|l| l.starts_with("STATUS=")).count() >= 2,
        "{lines:?}"
    );
    let status = cluster.terminate(2).expect("exits on SIGTERM");
    assert!(status.success(), "{status}");
    let lines = notify.lines();
    assert!(position(&lines, "STOPPING=1").is_some(), "{lines:?}");
    assert!(!lines.iter().any(|l| l == "READY=1"), "{lines:?}");
}
