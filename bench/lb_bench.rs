//! Load balancer benchmark: the same work directly against a backend and through the real
//! (release) `litek8s lb`, alternated and repeated so the machine's noise shows as spread.
//! Run through `bench/lb.sh`, which builds the release binary and passes it in `LITEK8S_BIN`.
//!
//! Two backends. First the product's own: a real (release) `litek8s apiserver` with kubectl's
//! kind of traffic over TLS (the balancer passes the TLS bytes untouched): short GETs of a
//! ConfigMap on 64 keep-alive connections, and a stream of about 100 MiB (lists of 10,000
//! ConfigMaps, one after another on one connection). Then a minimal HTTP/1.1 server in this
//! process (keep-alive, a 2-byte answer to every request, 100 MiB for `/stream`): the worst
//! case, where the backend costs as little as the balancer, and on a small machine client,
//! balancer and backend share the same cores. Also measured: new connections per second, and
//! the balancer's own CPU time per request and per MiB (from /proc), which does not depend on
//! who else shares the machine. Prints a table with the core count and writes it as Markdown
//! to the path given as the first argument (default bench/LB.md).

mod report;

use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use report::percentile;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

#[path = "../tests/support/mod.rs"]
mod support;

const CONNECTIONS: usize = 64;
const SHORT_SECONDS: f64 = 4.0;
const STREAM_BYTES: usize = 100 << 20;
const CONNECT_CLIENTS: usize = 16;
const CONNECT_SECONDS: f64 = 3.0;
/// Rounds per layout unless `LB_BENCH_ROUNDS` says otherwise.
const ROUNDS: usize = 3;
/// ConfigMaps (1 KiB each) in the list the API server streams.
const LIST_OBJECTS: usize = 10_000;
const ANSWER: &[u8] = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok";

/// Reads one request head; false at end of stream.
async fn read_head(stream: &mut TcpStream, buf: &mut Vec<u8>) -> bool {
    let mut chunk = [0u8; 4096];
    loop {
        if let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            buf.drain(..end + 4);
            return true;
        }
        match stream.read(&mut chunk).await {
            Ok(0) | Err(_) => return false,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
        }
    }
}

async fn backend(listener: TcpListener) {
    loop {
        let Ok((mut stream, _)) = listener.accept().await else {
            continue;
        };
        let _ = stream.set_nodelay(true);
        tokio::spawn(async move {
            let mut buf = Vec::new();
            while read_head(&mut stream, &mut buf).await {
                if stream.write_all(ANSWER).await.is_err() {
                    return;
                }
            }
        });
    }
}

/// Serves 100 MiB to every connection after its request head.
async fn stream_backend(listener: TcpListener) {
    loop {
        let Ok((mut stream, _)) = listener.accept().await else {
            continue;
        };
        tokio::spawn(async move {
            let mut buf = Vec::new();
            if !read_head(&mut stream, &mut buf).await {
                return;
            }
            let head = format!("HTTP/1.1 200 OK\r\nContent-Length: {STREAM_BYTES}\r\n\r\n");
            if stream.write_all(head.as_bytes()).await.is_err() {
                return;
            }
            let block = vec![7u8; 256 << 10];
            let mut left = STREAM_BYTES;
            while left > 0 {
                let n = left.min(block.len());
                if stream.write_all(&block[..n]).await.is_err() {
                    return;
                }
                left -= n;
            }
        });
    }
}

/// Lets the client `tasks` run for `SHORT_SECONDS`, stops them through `stop`, and sums up
/// the latencies they recorded: (requests/s, p50, p99).
async fn gather_latencies(
    stop: Arc<AtomicBool>,
    tasks: Vec<tokio::task::JoinHandle<Vec<Duration>>>,
) -> (f64, Duration, Duration) {
    tokio::time::sleep(Duration::from_secs_f64(SHORT_SECONDS)).await;
    stop.store(true, Ordering::Relaxed);
    let mut all = Vec::new();
    for t in tasks {
        all.extend(t.await.expect("client task"));
    }
    all.sort();
    (
        all.len() as f64 / SHORT_SECONDS,
        percentile(&all, 0.5),
        percentile(&all, 0.99),
    )
}

/// Short requests on `CONNECTIONS` keep-alive connections: (requests/s, p50, p99).
async fn short_requests(addr: SocketAddr) -> (f64, Duration, Duration) {
    let stop = Arc::new(AtomicBool::new(false));
    let mut tasks = Vec::new();
    for _ in 0..CONNECTIONS {
        let stop = stop.clone();
        tasks.push(tokio::spawn(async move {
            let mut stream = TcpStream::connect(addr).await.expect("connect");
            let _ = stream.set_nodelay(true);
            let mut latencies = Vec::new();
            let mut buf = vec![0u8; 4096];
            while !stop.load(Ordering::Relaxed) {
                let started = Instant::now();
                stream
                    .write_all(b"GET / HTTP/1.1\r\nHost: b\r\n\r\n")
                    .await
                    .expect("write");
                let mut got = 0;
                while got < ANSWER.len() {
                    let n = stream.read(&mut buf).await.expect("read");
                    assert!(n > 0, "closed");
                    got += n;
                }
                latencies.push(started.elapsed());
            }
            latencies
        }));
    }
    gather_latencies(stop, tasks).await
}

/// One 100 MiB answer: MiB/s.
async fn stream(addr: SocketAddr) -> f64 {
    let started = Instant::now();
    let mut s = TcpStream::connect(addr).await.expect("connect");
    s.write_all(b"GET /stream HTTP/1.1\r\nHost: b\r\n\r\n")
        .await
        .expect("write");
    let mut buf = vec![0u8; 256 << 10];
    let mut total = 0usize;
    loop {
        let n = s.read(&mut buf).await.expect("read");
        if n == 0 {
            break;
        }
        total += n;
        if total >= STREAM_BYTES {
            break;
        }
    }
    assert!(total >= STREAM_BYTES, "short stream: {total}");
    (STREAM_BYTES as f64 / (1 << 20) as f64) / started.elapsed().as_secs_f64()
}

/// New connections per second: connect, one request, read the answer, close.
async fn connections(addr: SocketAddr) -> f64 {
    let stop = Arc::new(AtomicBool::new(false));
    let mut tasks = Vec::new();
    for _ in 0..CONNECT_CLIENTS {
        let stop = stop.clone();
        tasks.push(tokio::spawn(async move {
            let mut done = 0u64;
            let mut buf = vec![0u8; 4096];
            while !stop.load(Ordering::Relaxed) {
                let mut s = TcpStream::connect(addr).await.expect("connect");
                s.write_all(b"GET / HTTP/1.1\r\nHost: b\r\nConnection: close\r\n\r\n")
                    .await
                    .expect("write");
                let mut got = 0;
                while got < ANSWER.len() {
                    let n = s.read(&mut buf).await.expect("read");
                    assert!(n > 0, "closed early");
                    got += n;
                }
                done += 1;
            }
            done
        }));
    }
    tokio::time::sleep(Duration::from_secs_f64(CONNECT_SECONDS)).await;
    stop.store(true, Ordering::Relaxed);
    let mut total = 0;
    for t in tasks {
        total += t.await.expect("task");
    }
    total as f64 / CONNECT_SECONDS
}

/// CPU time (user + system) a process has used, from /proc/<pid>/stat.
fn cpu_time(pid: u32) -> Duration {
    let ticks_per_second = nix::unistd::sysconf(nix::unistd::SysconfVar::CLK_TCK)
        .ok()
        .flatten()
        .unwrap_or(100) as f64;
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // Fields after the command name (which may hold spaces) start at field 3 (state).
    let rest = stat.rsplit_once(')').map_or("", |(_, r)| r);
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let ticks = |i: usize| {
        fields
            .get(i)
            .and_then(|f| f.parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    // utime and stime are fields 14 and 15: indexes 11 and 12 after the command name.
    Duration::from_secs_f64((ticks(11) + ticks(12)) / ticks_per_second)
}

/// Short GETs of one ConfigMap on `connections` keep-alive TLS connections to `api` (the
/// server itself or the balancer in front of it): (requests/s, p50, p99).
async fn api_short_requests(api: &support::Api, connections: usize) -> (f64, Duration, Duration) {
    let stop = Arc::new(AtomicBool::new(false));
    let mut tasks = Vec::new();
    for _ in 0..connections {
        let mut conn = api.connect().await.expect("connect");
        let stop = stop.clone();
        tasks.push(tokio::spawn(async move {
            let mut latencies = Vec::new();
            while !stop.load(Ordering::Relaxed) {
                let started = Instant::now();
                let resp = conn
                    .request("GET", API_OBJECT, None, Bytes::new())
                    .await
                    .expect("GET");
                assert_eq!(resp.status, 200, "GET: {}", resp.text());
                latencies.push(started.elapsed());
            }
            latencies
        }));
    }
    gather_latencies(stop, tasks).await
}

/// The object the short API requests read.
const API_OBJECT: &str = "/api/v1/namespaces/default/configmaps/lb-bench";

/// Lists of `LIST_OBJECTS` ConfigMaps on one connection until 100 MiB have arrived: MiB/s.
async fn api_stream(api: &support::Api) -> f64 {
    let mut conn = api.connect().await.expect("connect");
    let started = Instant::now();
    let mut total = 0usize;
    while total < STREAM_BYTES {
        let resp = conn
            .request(
                "GET",
                "/api/v1/namespaces/lb-bench/configmaps",
                None,
                Bytes::new(),
            )
            .await
            .expect("list");
        assert_eq!(resp.status, 200, "list: {}", resp.text());
        total += resp.body.len();
    }
    (total as f64 / (1 << 20) as f64) / started.elapsed().as_secs_f64()
}

/// Fills the API server: the object of the short requests and the list of the stream.
async fn fill_api(api: &support::Api) {
    let value = "x".repeat(1024);
    let one = support::configmap("default", "lb-bench", serde_json::json!({"v": value}));
    let resp = api
        .post_json("/api/v1/namespaces/default/configmaps", &one)
        .await
        .expect("create");
    assert_eq!(resp.status, 201, "create: {}", resp.text());
    let ns = serde_json::json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "lb-bench"}});
    let resp = api
        .post_json("/api/v1/namespaces", &ns)
        .await
        .expect("namespace");
    assert_eq!(resp.status, 201, "namespace: {}", resp.text());
    let mut tasks = Vec::new();
    for worker in 0..32 {
        let api = api.with_token(api.token.as_deref());
        let value = value.clone();
        tasks.push(tokio::spawn(async move {
            let mut conn = api.connect().await.expect("connect");
            for i in (worker..LIST_OBJECTS).step_by(32) {
                let cm = support::configmap(
                    "lb-bench",
                    &format!("cm-{i}"),
                    serde_json::json!({"v": value}),
                );
                let resp = conn
                    .request(
                        "POST",
                        "/api/v1/namespaces/lb-bench/configmaps",
                        Some("application/json"),
                        serde_json::to_vec(&cm).expect("serialize"),
                    )
                    .await
                    .expect("create");
                assert_eq!(resp.status, 201, "create: {}", resp.text());
            }
        }));
    }
    for t in tasks {
        t.await.expect("fill task");
    }
}

fn free_addr() -> SocketAddr {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("free port")
}

/// A relay process (`litek8s lb` or the HAProxy reference), killed and reaped when dropped
/// (also when the benchmark panics).
struct RelayProcess {
    child: Child,
    /// HAProxy's configuration file, removed with the process.
    _config: Option<tempfile::NamedTempFile>,
}

impl RelayProcess {
    fn id(&self) -> u32 {
        self.child.id()
    }
}

impl Drop for RelayProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The relays measured against direct connections.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Relay {
    /// The product: release `litek8s lb`, copy for short messages, splice for bulk.
    Litek8s,
    /// The reference L4 relay: HAProxy in TCP mode with splice, the same thread count.
    Haproxy,
}

impl Relay {
    fn label(self) -> &'static str {
        match self {
            Relay::Litek8s => "litek8s lb",
            Relay::Haproxy => "haproxy",
        }
    }
}

/// Which backend a relay forwards to, and how a relay may check it.
#[derive(Clone, Copy)]
struct Target {
    addr: SocketAddr,
    /// Only a TCP check (the backend answers every request with a long stream).
    tcp_check: bool,
}

/// Where to find the relay programs.
struct Programs {
    litek8s: String,
    /// `None`: HAProxy is not installed and its column stays empty.
    haproxy: Option<String>,
}

impl Programs {
    fn relays(&self) -> Vec<Relay> {
        let mut relays = vec![Relay::Litek8s];
        if self.haproxy.is_some() {
            relays.push(Relay::Haproxy);
        }
        relays
    }

    /// Starts `relay` for `target` with `threads` threads; returns once it forwards.
    fn start(&self, relay: Relay, target: Target, threads: usize) -> (RelayProcess, SocketAddr) {
        match relay {
            Relay::Litek8s => start_lb(&self.litek8s, target, threads),
            Relay::Haproxy => {
                let haproxy = self.haproxy.as_deref();
                start_haproxy(
                    haproxy.expect("haproxy is listed only when installed"),
                    target,
                    threads,
                )
            }
        }
    }
}

/// A `litek8s lb` for the target, ready once it reports an active server.
fn start_lb(bin: &str, target: Target, threads: usize) -> (RelayProcess, SocketAddr) {
    let (listen, status) = (free_addr(), free_addr());
    let mut cmd = Command::new(bin);
    cmd.args([
        "lb",
        "--listen",
        &listen.to_string(),
        "--status-listen",
        &status.to_string(),
    ])
    .args(["--server", &format!("https://{}", target.addr)])
    .env("RUST_LOG", "warn")
    // The runtime's worker count; tokio would take it from the CPUs it may run on, which
    // are set after it starts.
    .env("TOKIO_WORKER_THREADS", threads.to_string())
    .stdin(Stdio::null());
    if target.tcp_check {
        cmd.arg("--tcp-check");
    }
    let child = RelayProcess {
        child: cmd.spawn().expect("spawn litek8s lb"),
        _config: None,
    };
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let ok = std::net::TcpStream::connect(status).ok().and_then(|mut s| {
            use std::io::{Read, Write};
            s.write_all(b"GET /status HTTP/1.1\r\nHost: s\r\nConnection: close\r\n\r\n")
                .ok()?;
            let mut text = String::new();
            s.read_to_string(&mut text).ok()?;
            Some(text.contains("\"active\": \""))
        });
        if ok == Some(true) {
            return (child, listen);
        }
        assert!(Instant::now() < deadline, "lb never had an active server");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// HAProxy in TCP mode with splice in both directions, ready once its port accepts.
fn start_haproxy(bin: &str, target: Target, threads: usize) -> (RelayProcess, SocketAddr) {
    use std::io::Write;
    let listen = free_addr();
    let mut config = tempfile::NamedTempFile::new().expect("haproxy config file");
    write!(
        config,
        "global\n  nbthread {threads}\n  maxconn 4096\n\
         defaults\n  mode tcp\n  option splice-auto\n  timeout connect 5s\n  \
         timeout client 1h\n  timeout server 1h\n\
         frontend clients\n  bind {listen}\n  default_backend servers\n\
         backend servers\n  server s1 {}\n",
        target.addr
    )
    .expect("write haproxy config");
    let child = Command::new(bin)
        .args(["-db", "-q", "-f"])
        .arg(config.path())
        .stdin(Stdio::null())
        .spawn()
        .expect("spawn haproxy");
    let child = RelayProcess {
        child,
        _config: Some(config),
    };
    let deadline = Instant::now() + Duration::from_secs(20);
    while std::net::TcpStream::connect(listen).is_err() {
        assert!(Instant::now() < deadline, "haproxy never listened");
        std::thread::sleep(Duration::from_millis(50));
    }
    (child, listen)
}

fn median(v: &[f64]) -> f64 {
    let mut v = v.to_vec();
    v.sort_by(|a, b| a.total_cmp(b));
    v.get(v.len() / 2).copied().unwrap_or(f64::NAN)
}

fn spread(v: &[f64]) -> String {
    let (lo, hi) = v
        .iter()
        .fold((f64::MAX, f64::MIN), |(lo, hi), x| (lo.min(*x), hi.max(*x)));
    format!("{lo:.0}–{hi:.0}")
}

fn verdict(ok: bool) -> String {
    if ok { "met" } else { "NOT met" }.to_string()
}

/// Per-round figures of one path (direct, or through one relay) to one backend.
#[derive(Default)]
struct PathSamples {
    rps: Vec<f64>,
    p50: Vec<f64>,
    p99: Vec<f64>,
    /// p50 (ms) of short requests on one connection, where measured.
    single_p50: Vec<f64>,
    mib: Vec<f64>,
    /// New connections per second, where measured.
    cps: Vec<f64>,
    /// The relay's CPU time per short request (µs) and per streamed MiB (ms).
    cpu_per_request: Vec<f64>,
    cpu_per_mib: Vec<f64>,
}

impl PathSamples {
    /// One 64-connection round; `cpu` is the relay's CPU time over it.
    fn short(&mut self, (rps, p50, p99): (f64, Duration, Duration), cpu: Option<Duration>) {
        self.rps.push(rps);
        self.p50.push(p50.as_secs_f64() * 1e3);
        self.p99.push(p99.as_secs_f64() * 1e3);
        if let Some(cpu) = cpu {
            let requests = rps * SHORT_SECONDS;
            self.cpu_per_request
                .push(cpu.as_secs_f64() * 1e6 / requests.max(1.0));
        }
    }

    /// One stream at `rate` MiB/s.
    fn stream(&mut self, rate: f64) {
        self.mib.push(rate);
    }

    /// One stream through a relay: `mib` MiB at `rate` MiB/s, and the relay's CPU time over it.
    fn relayed_stream(&mut self, rate: f64, mib: f64, cpu: Duration) {
        self.stream(rate);
        self.cpu_per_mib
            .push(cpu.as_secs_f64() * 1e3 / mib.max(1e-9));
    }

    fn rate_cell(v: &[f64]) -> String {
        if v.is_empty() {
            return "—".into();
        }
        format!("{:.0} ({})", median(v), spread(v))
    }

    fn ms_cell(v: &[f64]) -> String {
        if v.is_empty() {
            return "—".into();
        }
        format!("{:.3}", median(v))
    }
}

/// Per-round figures of one backend: direct and through each relay.
struct Samples {
    direct: PathSamples,
    relays: Vec<(Relay, PathSamples)>,
}

impl Samples {
    fn new(relays: &[Relay]) -> Samples {
        Samples {
            direct: PathSamples::default(),
            relays: relays
                .iter()
                .map(|r| (*r, PathSamples::default()))
                .collect(),
        }
    }

    fn of(&mut self, relay: Relay) -> &mut PathSamples {
        let at = self
            .relays
            .iter()
            .position(|(r, _)| *r == relay)
            .expect("relay measured");
        &mut self.relays[at].1
    }

    fn relay(&self, relay: Relay) -> Option<&PathSamples> {
        self.relays
            .iter()
            .find(|(r, _)| *r == relay)
            .map(|(_, s)| s)
    }

    /// One line of progress for round `round`.
    fn progress(&self, round: usize) -> String {
        let mut line = format!(
            "direct {:.0} req/s p50 {:.3} ms",
            self.direct.rps[round], self.direct.p50[round]
        );
        for (relay, s) in &self.relays {
            line.push_str(&format!(
                "; {} {:.0} req/s p50 {:.3} ms",
                relay.label(),
                s.rps[round],
                s.p50[round]
            ));
        }
        line.push_str(&format!(
            "; stream direct {:.0} MiB/s",
            self.direct.mib[round]
        ));
        for (relay, s) in &self.relays {
            line.push_str(&format!(", {} {:.0}", relay.label(), s.mib[round]));
        }
        line
    }

    /// A row: the metric, then direct, litek8s lb and haproxy cells from `cell`, then the
    /// result column.
    fn row(
        &self,
        metric: String,
        cell: impl Fn(&PathSamples) -> String,
        result: String,
    ) -> [String; 5] {
        let via = |relay| self.relay(relay).map_or("—".to_string(), &cell);
        [
            metric,
            cell(&self.direct),
            via(Relay::Litek8s),
            via(Relay::Haproxy),
            result,
        ]
    }

    /// The table rows of this backend, the targets judged on litek8s lb's medians.
    fn rows(&self, what: &str, rows: &mut Vec<[String; 5]>) {
        let lb = self.relay(Relay::Litek8s).expect("litek8s lb measured");
        let haproxy = self.relay(Relay::Haproxy);
        let direct = &self.direct;
        let loss = |s: &PathSamples| 100.0 * (1.0 - median(&s.rps) / median(&direct.rps));
        let added = |a: &[f64], b: &[f64]| median(a) - median(b);
        let ratio = |s: &PathSamples| 100.0 * median(&s.mib) / median(&direct.mib);
        // "; haproxy: <what `text` says of its samples>", when HAProxy was measured.
        let reference = |text: &dyn Fn(&PathSamples) -> String| {
            haproxy.map_or(String::new(), |h| format!("; haproxy: {}", text(h)))
        };
        let lb_loss = loss(lb);
        rows.push(self.row(
            format!("{what}: short requests, {CONNECTIONS} keep-alive connections (req/s)"),
            |s| PathSamples::rate_cell(&s.rps),
            format!(
                "loss {lb_loss:.1}% (target ≤ 10%: {}){}",
                verdict(lb_loss <= 10.0),
                reference(&|h| format!("loss {:.1}%", loss(h)))
            ),
        ));
        let lb_added = added(&lb.p50, &direct.p50);
        rows.push(self.row(
            format!("{what}: short requests p50 (ms)"),
            |s| PathSamples::ms_cell(&s.p50),
            format!(
                "added {lb_added:.3} ms (target ≤ 0.2 ms: {}){}",
                verdict(lb_added <= 0.2),
                reference(&|h| format!("added {:.3} ms", added(&h.p50, &direct.p50)))
            ),
        ));
        if !lb.single_p50.is_empty() {
            rows.push(self.row(
                format!("{what}: short requests p50 on 1 connection (ms)"),
                |s| PathSamples::ms_cell(&s.single_p50),
                format!(
                    "added {:.3} ms{}",
                    added(&lb.single_p50, &direct.single_p50),
                    reference(&|h| {
                        format!("added {:.3} ms", added(&h.single_p50, &direct.single_p50))
                    })
                ),
            ));
        }
        rows.push(self.row(
            format!("{what}: short requests p99 (ms)"),
            |s| PathSamples::ms_cell(&s.p99),
            format!("added {:.3} ms", added(&lb.p99, &direct.p99)),
        ));
        let lb_ratio = ratio(lb);
        rows.push(self.row(
            format!("{what}: 100 MiB stream (MiB/s)"),
            |s| PathSamples::rate_cell(&s.mib),
            format!(
                "{lb_ratio:.0}% of direct (target ≥ 90%: {}){}",
                verdict(lb_ratio >= 90.0),
                reference(&|h| format!("{:.0}%", ratio(h)))
            ),
        ));
        rows.push(self.row(
            format!("{what}: relay CPU per short request (µs) / per MiB streamed (ms)"),
            |s| {
                if s.cpu_per_request.is_empty() {
                    String::new()
                } else {
                    format!(
                        "{:.1} / {:.2}",
                        median(&s.cpu_per_request),
                        median(&s.cpu_per_mib)
                    )
                }
            },
            String::new(),
        ));
        if !lb.cps.is_empty() {
            rows.push(self.row(
                format!("{what}: new connections/s ({CONNECT_CLIENTS} clients, one request each)"),
                |s| PathSamples::rate_cell(&s.cps),
                format!(
                    "{:.0}% of direct{}",
                    100.0 * median(&lb.cps) / median(&direct.cps),
                    reference(&|h| format!("{:.0}%", 100.0 * median(&h.cps) / median(&direct.cps)))
                ),
            ));
        }
    }
}

/// Where the client, the balancer and the backend run.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Layout {
    /// All three on all the machine's cores, competing for them.
    Shared,
    /// The backend on the upper half of the cores (its own machine); the client and the
    /// balancer on the lower half, as with `litek8s lb --listen 127.0.0.1:6443` on the
    /// machine kubectl runs on. Direct, the client half runs only the client.
    ClientSide,
    /// The balancer alone on the lower half of the cores (its own machine, as a balancer host
    /// in front of the cluster); the client and the backend on the upper half, direct and
    /// via lb alike.
    Dedicated,
}

/// CPUs of each party of one layout.
struct Placement {
    client: Vec<usize>,
    balancer: Vec<usize>,
    backend: Vec<usize>,
}

impl Layout {
    fn name(self) -> &'static str {
        match self {
            Layout::Shared => "shared",
            Layout::ClientSide => "client-side",
            Layout::Dedicated => "dedicated",
        }
    }

    fn placement(self, cores: usize) -> Placement {
        let (lower, upper): (Vec<usize>, Vec<usize>) =
            ((0..cores / 2).collect(), (cores / 2..cores).collect());
        match self {
            Layout::Shared => Placement {
                client: (0..cores).collect(),
                balancer: (0..cores).collect(),
                backend: (0..cores).collect(),
            },
            Layout::ClientSide => Placement {
                client: lower.clone(),
                balancer: lower,
                backend: upper,
            },
            Layout::Dedicated => Placement {
                client: upper.clone(),
                balancer: lower,
                backend: upper,
            },
        }
    }

    /// The section heading and what the layout stands for, for the report.
    fn describe(self, cores: usize) -> String {
        let p = self.placement(cores);
        match self {
            Layout::Shared => format!(
                "## Shared: client, balancer and backend on all {cores} cores\n\n\
                 The worst case: the balancer's CPU is taken from the same cores the client \
                 and the backend saturate.\n"
            ),
            Layout::ClientSide => format!(
                "## Client side: client and balancer on CPUs {:?}, the backend on CPUs {:?}\n\n\
                 `litek8s lb --listen 127.0.0.1:6443` on the machine its client runs on, the \
                 server on its own machine (here: its own cores; each process started there \
                 with sched_setaffinity). This benchmark's client saturates its cores by itself \
                 (direct, it is the bottleneck), so the balancer's CPU is taken from it.\n",
                p.client, p.backend
            ),
            Layout::Dedicated => format!(
                "## Dedicated: the balancer alone on CPUs {:?}, client and backend on CPUs {:?}\n\n\
                 A balancer host in front of the cluster: it competes with nobody for CPU, and \
                 the client and the backend share the same cores direct and via lb alike, so \
                 the difference is what passing through the balancer costs in throughput and \
                 latency.\n",
                p.balancer, p.client
            ),
        }
    }
}

fn cpu_set(cpus: &[usize]) -> nix::sched::CpuSet {
    let mut set = nix::sched::CpuSet::new();
    for &cpu in cpus {
        set.set(cpu).expect("cpu index within CpuSet");
    }
    set
}

/// Pins the calling thread (threads it starts later inherit the mask).
fn pin_current_thread(cpus: &[usize]) {
    nix::sched::sched_setaffinity(nix::unistd::Pid::from_raw(0), &cpu_set(cpus))
        .expect("sched_setaffinity");
}

/// A multi-thread runtime whose threads run on `cpus`.
fn runtime_on(cpus: Vec<usize>, name: &str) -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .thread_name(name)
        .on_thread_start(move || pin_current_thread(&cpus))
        .build()
        .expect("runtime")
}

/// Runs `spawn` with the calling thread on `cpus` (so the process it starts, and every
/// thread that process starts, runs there), then puts the thread back on `home`.
fn spawned_on<T>(cpus: &[usize], home: &[usize], spawn: impl FnOnce() -> T) -> T {
    pin_current_thread(cpus);
    let spawned = spawn();
    pin_current_thread(home);
    spawned
}

/// All rounds of one layout: the rows of both backends.
fn run_layout(
    programs: &Programs,
    layout: Layout,
    cores: usize,
    rounds: usize,
) -> Vec<[String; 5]> {
    let Placement {
        client: client_cpus,
        balancer: balancer_cpus,
        backend: backend_cpus,
    } = layout.placement(cores);
    println!(
        "layout {}: client on CPUs {client_cpus:?}, relay on {balancer_cpus:?}, backend on {backend_cpus:?}",
        layout.name()
    );
    pin_current_thread(&client_cpus);
    let rt = runtime_on(client_cpus.clone(), "bench-client");
    let relays = programs.relays();
    let threads = balancer_cpus.len();
    let mut rows: Vec<[String; 5]> = Vec::new();

    // --- the real API server behind the relays
    let server = spawned_on(&backend_cpus, &client_cpus, || support::Server::start(&[]));
    let direct_api = server.api();
    rt.block_on(fill_api(&direct_api));
    let target = Target {
        addr: server.addr,
        tcp_check: false,
    };
    let mut via_api = Vec::new();
    for &relay in &relays {
        let (process, addr) = spawned_on(&balancer_cpus, &client_cpus, || {
            programs.start(relay, target, threads)
        });
        let mut api = server.api();
        api.addr = addr;
        via_api.push((relay, process, api));
    }
    let mut api = Samples::new(&relays);
    for round in 0..rounds {
        rt.block_on(async {
            api.direct
                .short(api_short_requests(&direct_api, CONNECTIONS).await, None);
            for (relay, process, via) in &via_api {
                let before = cpu_time(process.id());
                let measured = api_short_requests(via, CONNECTIONS).await;
                api.of(*relay)
                    .short(measured, Some(cpu_time(process.id()) - before));
            }
            // One connection: the added latency without queueing for a saturated CPU.
            api.direct
                .single_p50
                .push(api_short_requests(&direct_api, 1).await.1.as_secs_f64() * 1e3);
            for (relay, _, via) in &via_api {
                let p50 = api_short_requests(via, 1).await.1;
                api.of(*relay).single_p50.push(p50.as_secs_f64() * 1e3);
            }
            api.direct.stream(api_stream(&direct_api).await);
            for (relay, process, via) in &via_api {
                let before = cpu_time(process.id());
                let started = Instant::now();
                let rate = api_stream(via).await;
                let cpu = cpu_time(process.id()) - before;
                api.of(*relay)
                    .relayed_stream(rate, rate * started.elapsed().as_secs_f64(), cpu);
            }
        });
        println!(
            "{} API server round {round}: {}",
            layout.name(),
            api.progress(round)
        );
    }
    drop(via_api);
    drop(server);
    api.rows("litek8s apiserver (TLS)", &mut rows);

    // --- the minimal backend: the relay's cost with nothing to hide it
    let backend_rt = runtime_on(backend_cpus, "bench-backend");
    let (short_addr, stream_addr) = backend_rt.block_on(async {
        let short = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let stream = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addrs = (
            short.local_addr().expect("addr"),
            stream.local_addr().expect("addr"),
        );
        tokio::spawn(backend(short));
        tokio::spawn(stream_backend(stream));
        addrs
    });
    // The short backend answers every path with 200, /readyz included: the default check.
    // The stream backend answers every request with 100 MiB: check it with TCP only.
    let short_target = Target {
        addr: short_addr,
        tcp_check: false,
    };
    let stream_target = Target {
        addr: stream_addr,
        tcp_check: true,
    };
    let mut via_minimal = Vec::new();
    for &relay in &relays {
        let (short, stream) = spawned_on(&balancer_cpus, &client_cpus, || {
            (
                programs.start(relay, short_target, threads),
                programs.start(relay, stream_target, threads),
            )
        });
        via_minimal.push((relay, short, stream));
    }
    let mut minimal = Samples::new(&relays);
    for round in 0..rounds {
        rt.block_on(async {
            minimal.direct.short(short_requests(short_addr).await, None);
            for (relay, (process, addr), _) in &via_minimal {
                let before = cpu_time(process.id());
                let measured = short_requests(*addr).await;
                minimal
                    .of(*relay)
                    .short(measured, Some(cpu_time(process.id()) - before));
            }
            let mib = (STREAM_BYTES >> 20) as f64;
            minimal.direct.stream(stream(stream_addr).await);
            for (relay, _, (process, addr)) in &via_minimal {
                let before = cpu_time(process.id());
                let rate = stream(*addr).await;
                let cpu = cpu_time(process.id()) - before;
                minimal.of(*relay).relayed_stream(rate, mib, cpu);
            }
            minimal.direct.cps.push(connections(short_addr).await);
            for (relay, (_, addr), _) in &via_minimal {
                let cps = connections(*addr).await;
                minimal.of(*relay).cps.push(cps);
            }
        });
        println!(
            "{} minimal backend round {round}: {}",
            layout.name(),
            minimal.progress(round)
        );
    }
    drop(via_minimal);
    backend_rt.shutdown_background();
    minimal.rows("minimal backend", &mut rows);
    rt.shutdown_background();
    rows
}

fn table(rows: &[[String; 5]]) -> String {
    let mut md = String::from(
        "| metric | direct | via litek8s lb | via haproxy (reference) | result (litek8s lb) |\n\
         |---|---|---|---|---|\n",
    );
    for r in rows {
        md.push_str(&format!(
            "| {} | {} | {} | {} | {} |\n",
            r[0], r[1], r[2], r[3], r[4]
        ));
    }
    md
}

// The server's allocator, as in `litek8s`: this process's own work (the client, or the
// server's code run in-process) is measured on it.
litek8s::use_server_allocator!();

fn main() {
    let out_path = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "bench/LB.md".to_string());
    let programs = Programs {
        litek8s: std::env::var("LITEK8S_BIN").expect("set LITEK8S_BIN to the litek8s binary"),
        // `LB_BENCH_HAPROXY=` (empty) leaves the reference out.
        haproxy: match std::env::var("LB_BENCH_HAPROXY") {
            Ok(path) if path.is_empty() => None,
            Ok(path) => Some(path),
            Err(_) => {
                Some("/usr/sbin/haproxy".to_string()).filter(|p| std::path::Path::new(p).exists())
            }
        },
    };
    let cores = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1);
    let rounds = std::env::var("LB_BENCH_ROUNDS")
        .ok()
        .and_then(|r| r.parse().ok())
        .unwrap_or(ROUNDS)
        .max(1);
    // `LB_BENCH_LAYOUTS=dedicated` (or a comma-separated subset) runs fewer layouts.
    let wanted =
        std::env::var("LB_BENCH_LAYOUTS").unwrap_or_else(|_| "shared,client-side,dedicated".into());
    let layouts: Vec<Layout> = [Layout::Shared, Layout::ClientSide, Layout::Dedicated]
        .into_iter()
        .filter(|l| wanted.split(',').any(|w| w.trim() == l.name()))
        .filter(|l| *l == Layout::Shared || cores >= 2)
        .collect();
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    let load = load.split_whitespace().next().unwrap_or("?").to_string();
    println!("litek8s lb benchmark on {cores} cores (load average {load} at the start)");
    let results: Vec<(Layout, Vec<[String; 5]>)> = layouts
        .into_iter()
        .map(|layout| (layout, run_layout(&programs, layout, cores, rounds)))
        .collect();

    let haproxy_version = programs.haproxy.as_deref().map_or_else(
        || "(not installed in this run)".to_string(),
        |bin| {
            Command::new(bin)
                .arg("-v")
                .output()
                .ok()
                .and_then(|o| String::from_utf8(o.stdout).ok())
                .and_then(|v| v.split_whitespace().nth(2).map(str::to_string))
                .unwrap_or_default()
        },
    );
    let mut md = String::new();
    md.push_str("# Load balancer benchmark (`bench/lb.sh`)\n\n");
    md.push_str(&format!(
        "Machine: {cores} cores, load average {load} when the run started. Direct = client → \
         backend; via litek8s lb = client → release `litek8s lb` (copy for short messages, splice for bulk) → backend; via \
         haproxy = the same through HAProxy {haproxy} in TCP mode with `option splice-auto` and \
         as many threads as the balancer has (the reference for what an L4 relay costs here), \
         all on 127.0.0.1. Two backends: the real `litek8s apiserver` \
         (short = GET of a 1 KiB ConfigMap over TLS; stream = lists of {LIST_OBJECTS} ConfigMaps \
         on one connection until 100 MiB have passed), and a minimal in-process HTTP/1.1 server \
         (2-byte answers; one 100 MiB answer) that costs about as little per request as the \
         balancer itself. {rounds} rounds per layout, direct and via lb alternated; the figure \
         is the median, the range in parentheses is min–max over the rounds. A relay's \
         CPU time comes from /proc/<pid>/stat over its runs.\n\n",
        haproxy = haproxy_version
    ));
    for (layout, rows) in &results {
        md.push_str(&layout.describe(cores));
        md.push('\n');
        md.push_str(&table(rows));
        md.push('\n');
    }
    md.push_str(
        "## Reading the numbers\n\n\
         A relay doubles the TCP hops of every request: client → relay → server instead of \
         client → server. On loopback the kernel runs the receiver's TCP processing in the \
         sender's context, so the extra hops cost CPU on the cores the relay runs on, and a \
         short request through a relay costs it a few system calls and two TCP sends each \
         way (the CPU row). The HAProxy column is the reference: the same work through the \
         most used L4 relay, set up the same way (TCP mode, splice for bulk transfers, as many \
         threads). Where both lose about the same share, the loss is what the extra hop \
         costs on this machine, not what litek8s lb's code costs. In the shared and \
         client-side layouts the relay's CPU is taken from a saturated client or server, and \
         the 64-connection throughput falls by that share. In the dedicated layout nothing \
         competes with the relay, but every hop wakes the relay's idle CPU: the 1-connection \
         row shows what those wake-ups add here.\n",
    );
    println!("{md}");
    std::fs::write(&out_path, &md).expect("write the report");
    println!("written to {out_path}");
}
