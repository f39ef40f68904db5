//! Streams benchmark: `kubectl exec`, `kubectl port-forward` and `kubectl logs -f` through
//! the servers' relays to a node's agent. Run through `bench/streams.sh`, which builds the
//! release binaries and passes them in `LITEK8S_BIN`; writes a Markdown table to the path
//! given as the first argument (default bench/STREAMS.md). Needs root, runc (or crun),
//! conmon, the CNI plugins, busybox-static and kubectl 1.33, as tests/agent_streams.rs does.
//!
//! Three release servers on loopback (A, B, C) and a release agent `n1` whose tunnel goes
//! to B. Every measure is taken twice: with kubectl at B (one server between kubectl and
//! the agent) and with kubectl at C (C relays to B: two servers). kubectl 1.33 is the
//! client throughout (WebSocket `v5.channel.k8s.io` for exec, WebSocket-tunnelled SPDY for
//! port-forward).
//!
//! - **exec in**: `kubectl exec -i sink -- sh -c 'cat > /dev/null'` fed `STREAMS_BENCH_MIB`
//!   (default 1024) MiB of zeros on its stdin, timed from its start to its exit.
//! - **exec out**: `kubectl exec sink -- dd if=/dev/zero bs=1M count=N`, its stdout counted.
//! - **port-forward download**: `kubectl port-forward pod/zero :8080` to busybox `httpd`
//!   serving a sparse file of N MiB; one connection downloads it.
//! - **logs -f latency**: the `logger` pod copies a FIFO of the host (a hostPath volume) to
//!   its stdout; this program writes 1,000 lines/s into it, each carrying its write time, and
//!   reads them from `kubectl logs -f`: the latency is from the write to the line read.
//! - **100 exec sessions**: 100 `kubectl exec sink -- sh -c 'echo open; exec sleep 600'`
//!   held open; the servers' RSS (`VmRSS`) before they start and once all 100 printed `open`.
//!
//! Throughputs and the `logs -f` p99 are the median of three runs (the p99 over all lines of
//! the three runs is shown too).

#[path = "../tests/agent_support/mod.rs"]
mod agent_support;
#[path = "../tests/cluster_support/mod.rs"]
mod cluster_support;
#[path = "../tests/support/mod.rs"]
mod support;

mod report;

use std::io::{BufRead, BufReader, Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use agent_support::{missing_pod_tools, Agent};
use cluster_support::Cluster;
use report::{percentile, row, Row};
use serde_json::{json, Value};
use support::{runtime, Api};

const IMAGE: &str = "litek8s.test/busybox:1";
const KUBECTL: &str = "/usr/lib/google-cloud-sdk/bin/kubectl.1.33";
const RUNS: usize = 3;
const BRIDGE: &str = "lk8strm0";
const CIDR: &str = "10.252.7.0/24";
const LOG_RATE: u64 = 1000;
const LOG_SECONDS: u64 = 10;
const SESSIONS: usize = 100;
const THROUGHPUT_TARGET: f64 = 200.0;
const LOG_P99_TARGET: Duration = Duration::from_millis(100);
const RSS_TARGET: f64 = 20.0;

fn mib_to_move() -> u64 {
    std::env::var("STREAMS_BENCH_MIB")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1024)
}

fn pod(name: &str, command: &[&str], extra: Value) -> Value {
    let mut spec = json!({"nodeName": "n1"});
    if let (Some(s), Some(e)) = (spec.as_object_mut(), extra.as_object()) {
        for (k, v) in e {
            s.insert(k.clone(), v.clone());
        }
    }
    agent_support::pod(name, IMAGE, command, 0, spec)
}

async fn create(api: &Api, pod: &Value) {
    let resp = api
        .post_json("/api/v1/namespaces/default/pods", pod)
        .await
        .expect("POST");
    assert_eq!(resp.status, 201, "{}", resp.text());
}

async fn wait_running(api: &Api, agent: &Agent, name: &str) {
    let deadline = Instant::now() + Duration::from_secs(90);
    loop {
        let p = api
            .get(&format!("/api/v1/namespaces/default/pods/{name}"))
            .await
            .expect("GET")
            .json();
        if p["status"]["containerStatuses"][0]["state"]["running"].is_object() {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "pod {name} never ran: {:#}\nagent log:\n{}",
            p["status"],
            agent.logs()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The server the Node's annotation names.
async fn wait_tunnel(api: &Api, agent: &Agent) -> String {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if let Some(n) = agent_support::node(api, "n1").await {
            if let Some(name) = n["metadata"]["annotations"]["litek8s.io/tunnel-server"].as_str() {
                return name.to_string();
            }
        }
        assert!(Instant::now() < deadline, "no tunnel:\n{}", agent.logs());
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn kubectl(kc: &Path) -> Command {
    let mut c = Command::new(KUBECTL);
    c.arg("--kubeconfig").arg(kc);
    c
}

fn mib_per_s(bytes: u64, d: Duration) -> f64 {
    bytes as f64 / (1 << 20) as f64 / d.as_secs_f64()
}

/// `exec -i … cat > /dev/null` fed `bytes` zeros: MiB/s.
fn exec_in(kc: &Path, bytes: u64) -> f64 {
    let started = Instant::now();
    let mut child = kubectl(kc)
        .args(["exec", "-i", "sink", "--", "sh", "-c", "cat > /dev/null"])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("kubectl exec");
    let mut stdin = child.stdin.take().expect("stdin");
    let chunk = vec![0u8; 1 << 20];
    let mut left = bytes;
    while left > 0 {
        let n = left.min(chunk.len() as u64) as usize;
        stdin.write_all(&chunk[..n]).expect("kubectl's stdin");
        left -= n as u64;
    }
    drop(stdin);
    let out = child.wait_with_output().expect("kubectl exec");
    let took = started.elapsed();
    assert!(
        out.status.success(),
        "exec in: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    mib_per_s(bytes, took)
}

/// `exec … dd if=/dev/zero` of `bytes`, read from kubectl's stdout: MiB/s.
fn exec_out(kc: &Path, bytes: u64) -> f64 {
    let started = Instant::now();
    let count = (bytes >> 20).to_string();
    let mut child = kubectl(kc)
        .args(["exec", "sink", "--", "sh", "-c"])
        .arg(format!(
            "dd if=/dev/zero bs=1048576 count={count} 2>/dev/null"
        ))
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("kubectl exec");
    let mut stdout = child.stdout.take().expect("stdout");
    let mut buf = vec![0u8; 1 << 20];
    let mut got = 0u64;
    loop {
        match stdout.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => got += n as u64,
        }
    }
    let out = child.wait_with_output().expect("kubectl exec");
    let took = started.elapsed();
    assert!(
        out.status.success() && got == bytes,
        "exec out: {got} of {bytes} bytes: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    mib_per_s(bytes, took)
}

/// A running `kubectl port-forward pod/zero :8080` and its local port.
fn port_forward(kc: &Path) -> (Child, u16) {
    let mut child = kubectl(kc)
        .args(["port-forward", "pod/zero", ":8080"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("kubectl port-forward");
    let stdout = child.stdout.take().expect("stdout");
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                return;
            }
        }
    });
    while let Ok(line) = rx.recv_timeout(Duration::from_secs(30)) {
        let port = line
            .strip_prefix("Forwarding from 127.0.0.1:")
            .and_then(|rest| rest.split_once(" -> "))
            .and_then(|(p, _)| p.parse().ok());
        if let Some(port) = port {
            return (child, port);
        }
    }
    let _ = child.kill();
    let _ = child.wait();
    panic!("no forwarding line from kubectl port-forward");
}

/// One HTTP/1.0 download of the `zero` pod's file of `bytes` through the forward: MiB/s
/// (from the connect to the end of the answer).
fn download(port: u16, bytes: u64) -> f64 {
    let started = Instant::now();
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).expect("connect");
    s.write_all(b"GET /zero HTTP/1.0\r\n\r\n")
        .expect("the request");
    let mut buf = vec![0u8; 1 << 20];
    let mut got = 0u64;
    loop {
        match s.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => got += n as u64,
        }
    }
    let took = started.elapsed();
    // The answer's head is a few hundred bytes more than the file.
    assert!(got >= bytes, "port-forward: {got} of {bytes} bytes");
    mib_per_s(bytes, took)
}

fn now_nanos() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0)
}

/// One run of `logs -f` at [`LOG_RATE`] lines/s for [`LOG_SECONDS`]: each line's latency.
fn logs_follow(kc: &Path, fifo: &Path) -> Vec<Duration> {
    let mut child = kubectl(kc)
        .args(["logs", "-f", "--tail=0", "logger"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("kubectl logs -f");
    let stdout = child.stdout.take().expect("stdout");
    let reader = std::thread::spawn(move || {
        let mut latencies = Vec::new();
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            let Some(sent) = line.strip_prefix("t=").and_then(|t| t.parse::<u128>().ok()) else {
                continue;
            };
            if sent == 0 {
                break;
            }
            let late = now_nanos().saturating_sub(sent);
            latencies.push(Duration::from_nanos(late as u64));
        }
        latencies
    });
    // kubectl connects and the agent starts following before the first line.
    std::thread::sleep(Duration::from_secs(2));
    let mut feed = std::fs::OpenOptions::new()
        .write(true)
        .open(fifo)
        .expect("the logger's FIFO");
    let started = Instant::now();
    let lines = LOG_RATE * LOG_SECONDS;
    for i in 0..lines {
        let at = started + Duration::from_nanos(i * 1_000_000_000 / LOG_RATE);
        if let Some(wait) = at.checked_duration_since(Instant::now()) {
            std::thread::sleep(wait);
        }
        let _ = writeln!(feed, "t={}", now_nanos());
    }
    // The end marker, then give the last lines time to arrive.
    let _ = writeln!(feed, "t=0");
    drop(feed);
    let deadline = Instant::now() + Duration::from_secs(10);
    while !reader.is_finished() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    let _ = child.kill();
    let _ = child.wait();
    let mut latencies = reader.join().unwrap_or_default();
    latencies.sort();
    latencies
}

fn rss_mib(pid: u32) -> f64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
        .map_or(0.0, |kb| kb / 1024.0)
}

/// Opens [`SESSIONS`] exec sessions and waits until each runs: the RSS growth of each
/// server in `pids`, in MiB.
fn sessions(kc: &Path, pids: &[u32]) -> Vec<f64> {
    let before: Vec<f64> = pids.iter().map(|&p| rss_mib(p)).collect();
    let (tx, rx) = std::sync::mpsc::channel();
    let mut children = Vec::new();
    for i in 0..SESSIONS {
        let mut child = kubectl(kc)
            .args([
                "exec",
                "sink",
                "--",
                "sh",
                "-c",
                "echo open; exec sleep 600",
            ])
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("kubectl exec");
        let stdout = child.stdout.take().expect("stdout");
        let tx = tx.clone();
        std::thread::spawn(move || {
            let mut line = String::new();
            let _ = BufReader::new(stdout).read_line(&mut line);
            let _ = tx.send((i, line));
        });
        children.push(child);
        // kubectl's start is the costly part on 2 cores: a few at a time.
        if i % 10 == 9 {
            std::thread::sleep(Duration::from_millis(500));
        }
    }
    let mut open = 0;
    let deadline = Instant::now() + Duration::from_secs(120);
    while open < SESSIONS {
        let left = deadline.saturating_duration_since(Instant::now());
        let (i, line) = rx.recv_timeout(left).expect("sessions never opened");
        assert_eq!(line.trim(), "open", "session {i}");
        open += 1;
    }
    std::thread::sleep(Duration::from_secs(2));
    let growth: Vec<f64> = pids
        .iter()
        .zip(&before)
        .map(|(&p, b)| rss_mib(p) - b)
        .collect();
    for mut c in children {
        let _ = c.kill();
        let _ = c.wait();
    }
    growth
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn runs(v: &[f64]) -> String {
    v.iter()
        .map(|x| format!("{x:.0}"))
        .collect::<Vec<_>>()
        .join(" · ")
}

/// What one path measured.
struct PathResult {
    label: &'static str,
    exec_in: Vec<f64>,
    exec_out: Vec<f64>,
    forward: Vec<f64>,
    log_p50: Duration,
    log_p99: Duration,
    log_lines: usize,
    log_runs: Vec<Duration>,
    rss: Vec<(String, f64)>,
}

fn measure(
    label: &'static str,
    kc: &Path,
    fifo: &Path,
    servers: &[(String, u32)],
    bytes: u64,
) -> PathResult {
    let only = std::env::var("STREAMS_BENCH_ONLY").unwrap_or_default();
    let wanted = |m: &str| only.is_empty() || only.split(',').any(|o| o == m);
    let (mut ein, mut eout, mut fwd) = (Vec::new(), Vec::new(), Vec::new());
    for run in 0..RUNS {
        if wanted("exec") {
            ein.push(exec_in(kc, bytes));
            eout.push(exec_out(kc, bytes));
        }
        if wanted("forward") {
            let (mut child, port) = port_forward(kc);
            fwd.push(download(port, bytes));
            let _ = child.kill();
            let _ = child.wait();
        }
        eprintln!(
            "{label} run {run}: exec in {:?} out {:?} forward {:?} MiB/s",
            ein.last(),
            eout.last(),
            fwd.last()
        );
    }
    let (mut all, mut log_runs) = (Vec::new(), Vec::new());
    if wanted("logs") {
        for run in 0..RUNS {
            let l = logs_follow(kc, fifo);
            eprintln!(
                "{label} logs run {run}: {} lines, p50 {:?} p99 {:?}",
                l.len(),
                percentile(&l, 0.5),
                percentile(&l, 0.99)
            );
            log_runs.push(percentile(&l, 0.99));
            all.extend(l);
        }
    }
    all.sort();
    let rss = if wanted("sessions") {
        let pids: Vec<u32> = servers.iter().map(|(_, p)| *p).collect();
        let growth = sessions(kc, &pids);
        eprintln!("{label}: {SESSIONS} sessions, RSS growth {growth:?} MiB");
        servers.iter().map(|(n, _)| n.clone()).zip(growth).collect()
    } else {
        Vec::new()
    };
    PathResult {
        label,
        exec_in: ein,
        exec_out: eout,
        forward: fwd,
        log_p50: percentile(&all, 0.5),
        log_p99: percentile(&all, 0.99),
        log_lines: all.len(),
        log_runs,
        rss,
    }
}

fn rows(r: &PathResult, out: &mut Vec<Row>) {
    let target = format!("≥ {THROUGHPUT_TARGET:.0} MiB/s");
    for (what, v) in [
        ("`exec` stdin → `cat > /dev/null`", &r.exec_in),
        ("`exec` `dd if=/dev/zero` → stdout", &r.exec_out),
        ("`port-forward` download", &r.forward),
    ] {
        if v.is_empty() {
            continue;
        }
        let m = median(v.clone());
        out.push(row(
            format!("{what}, {} (runs: {} MiB/s)", r.label, runs(v)),
            format!("{m:.0} MiB/s"),
            &target,
            Some(m >= THROUGHPUT_TARGET),
        ));
    }
    if r.log_lines > 0 {
        let mut p99s = r.log_runs.clone();
        p99s.sort();
        let median_p99 = p99s[p99s.len() / 2];
        let per_run = r
            .log_runs
            .iter()
            .map(|d| format!("{:.1}", d.as_secs_f64() * 1000.0))
            .collect::<Vec<_>>()
            .join(" · ");
        out.push(row(
            format!(
                "`logs -f` latency p99 at {LOG_RATE} lines/s, {} (p99 per run: {per_run} ms; over all {} lines: p50 {:.1} ms, p99 {:.1} ms)",
                r.label,
                r.log_lines,
                r.log_p50.as_secs_f64() * 1000.0,
                r.log_p99.as_secs_f64() * 1000.0,
            ),
            format!("{:.1} ms", median_p99.as_secs_f64() * 1000.0),
            "≤ 100 ms",
            Some(median_p99 <= LOG_P99_TARGET),
        ));
    }
    for (server, growth) in &r.rss {
        out.push(row(
            format!(
                "server {server} RSS growth, {SESSIONS} exec sessions open, {}",
                r.label
            ),
            format!("{growth:.1} MiB"),
            &format!("≤ {RSS_TARGET:.0} MiB"),
            Some(*growth <= RSS_TARGET),
        ));
    }
}

fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .unwrap_or_default()
        .split_whitespace()
        .take(3)
        .collect::<Vec<_>>()
        .join(" ")
}

// The server's allocator, as in `litek8s`: this process's own work (the client, or the
// server's code run in-process) is measured on it.
litek8s::use_server_allocator!();

fn main() {
    let out = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "bench/STREAMS.md".into());
    let mut missing = missing_pod_tools();
    for f in ["/bin/busybox", KUBECTL] {
        if !Path::new(f).exists() {
            missing.push(f.into());
        }
    }
    assert!(missing.is_empty(), "missing: {}", missing.join(", "));
    let bytes = mib_to_move() << 20;
    let ip_forward = std::fs::read_to_string("/proc/sys/net/ipv4/ip_forward").ok();

    let mut cluster = Cluster::start_with(0, 100);
    for _ in 0..3 {
        let i = cluster.add_stopped_member();
        let mut cmd = cluster.command(i);
        cmd.arg("--cluster-cidr").arg(CIDR);
        cluster.spawn_command(i, cmd);
        cluster.wait_ready(i);
    }
    let mut agent = Agent::new(
        "n1",
        &cluster.url(1),
        Some(&cluster.token()),
        &["--cni-bridge", BRIDGE, "--kubelet-port", "0"],
    );
    let feed: PathBuf = agent.root.join("feed");
    std::fs::create_dir_all(&feed).expect("feed dir");
    let fifo = feed.join("fifo");
    nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o666)).expect("mkfifo");
    agent_support::place_test_image(&agent.node_dir, IMAGE);
    agent.start();
    let rt = runtime();
    let (cores, cpu) = report::machine();

    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let api = cluster.api(0);
        let b_name = rt.block_on(wait_tunnel(&api, &agent));
        let b = (0..3)
            .find(|&i| cluster.members[i].name == b_name)
            .expect("the tunnel's server is a member");
        let c = (b + 1) % 3;
        rt.block_on(async {
            create(&api, &pod("sink", &["sleep", "3600"], json!({}))).await;
            // A sparse file of zeros served by busybox httpd (sendfile, a process per
            // connection).
            let serve_zeros = format!(
                "mkdir -p /www && truncate -s {bytes} /www/zero && exec httpd -f -p 8080 -h /www"
            );
            create(&api, &pod("zero", &["sh", "-c", &serve_zeros], json!({}))).await;
            let mut logger = pod(
                "logger",
                &["sh", "-c", "while true; do cat /feed/fifo; done"],
                json!({"volumes": [{"name": "feed", "hostPath": {"path": feed.to_string_lossy()}}]}),
            );
            logger["spec"]["containers"][0]["volumeMounts"] =
                json!([{"name": "feed", "mountPath": "/feed"}]);
            create(&api, &logger).await;
            for p in ["sink", "zero", "logger"] {
                wait_running(&api, &agent, p).await;
            }
        });
        let kc = |i: usize| cluster.members[i].data_dir.join("kubeconfig.yaml");
        let server = |i: usize, role: &str| {
            (
                format!("{role} ({})", cluster.members[i].name),
                cluster.members[i].pid().expect("server pid"),
            )
        };
        let mut loads = vec![loadavg()];
        let one = measure(
            "one relay (kubectl at B, the agent's server)",
            &kc(b),
            &fifo,
            &[server(b, "B")],
            bytes,
        );
        loads.push(loadavg());
        let two = measure(
            "two relays (kubectl at C, relayed to B)",
            &kc(c),
            &fifo,
            &[server(c, "C"), server(b, "B")],
            bytes,
        );
        loads.push(loadavg());
        (one, two, loads)
    }));
    agent.kill();
    agent_support::remove_pods_leftovers(&agent.node_dir, &agent.root, BRIDGE);
    if let Some(v) = ip_forward {
        let _ = std::fs::write("/proc/sys/net/ipv4/ip_forward", v);
    }
    let (one, two, loads) = match result {
        Ok(r) => r,
        Err(e) => {
            eprintln!("agent log:\n{}", agent.logs());
            std::panic::resume_unwind(e);
        }
    };
    let mut table = Vec::new();
    rows(&one, &mut table);
    rows(&two, &mut table);
    let mut md = String::from("# Streams benchmark\n\n");
    md.push_str(&format!(
        "`bench/streams.sh` on this machine ({cores} cores, {cpu}): three release servers A, B, C on loopback, a release agent whose tunnel goes to B, real pods (runc under conmon, the busybox test image), kubectl 1.33 as the client (WebSocket `v5.channel.k8s.io` for exec, WebSocket-tunnelled SPDY for port-forward). One relay: kubectl at B; two: kubectl at C, which relays to B. {} MiB per transfer, median of {RUNS} runs (`logs -f`: the median of {RUNS} runs' p99, each of {LOG_SECONDS} s). Load average (1, 5, 15 min) at the start, after the one-relay and after the two-relay measures: {}.\n\n",
        bytes >> 20,
        loads.join(" → ")
    ));
    md.push_str(&report::table(&table));
    md.push_str(&format!(
        "\nexec in: `kubectl exec -i sink -- sh -c 'cat > /dev/null'` fed zeros on stdin, from kubectl's start to its exit. exec out: `kubectl exec sink -- sh -c 'dd if=/dev/zero bs=1048576 count=N'`, stdout counted. port-forward: `kubectl port-forward pod/zero :8080`, one HTTP/1.0 download of a sparse file of that size from busybox `httpd` in the pod, timed from the connect to the end of the answer. `logs -f`: the pod copies a host FIFO (hostPath) to its stdout; lines of the wall-clock time written at {LOG_RATE}/s, latency from the write to the line read from `kubectl logs -f --tail=0`. Sessions: {SESSIONS} `kubectl exec sink -- sh -c 'echo open; exec sleep 600'` held open, `VmRSS` of each server on the path before the first and once all printed `open` (2 s later).\n"
    ));
    std::fs::write(&out, md).expect("write the report");
    println!("{}", std::fs::read_to_string(&out).unwrap_or_default());
}
