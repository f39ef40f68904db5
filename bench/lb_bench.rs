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

use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

#[path = "../tests/support/mod.rs"]
mod support;

const CONNECTIONS: usize = 64;
const SHORT_SECONDS: f64 = 4.0;
const STREAM_BYTES: usize = 100 << 20;
const CONNECT_CLIENTS: usize = 16;
const CONNECT_SECONDS: f64 = 3.0;
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

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    sorted[(((sorted.len() - 1) as f64) * p).round() as usize]
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

/// A running `litek8s lb`, killed and reaped when dropped (also when the benchmark panics).
struct LbProcess(Child);

impl LbProcess {
    fn id(&self) -> u32 {
        self.0.id()
    }
}

impl Drop for LbProcess {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A `litek8s lb` for `backend`, ready once it reports an active server.
fn start_lb(bin: &str, backend: SocketAddr, tcp_check: bool) -> (LbProcess, SocketAddr) {
    let (listen, status) = (free_addr(), free_addr());
    let mut cmd = Command::new(bin);
    cmd.args([
        "lb",
        "--listen",
        &listen.to_string(),
        "--status-listen",
        &status.to_string(),
    ])
    .args(["--server", &format!("https://{backend}")])
    .env("RUST_LOG", "warn")
    .stdin(Stdio::null());
    if tcp_check {
        cmd.arg("--tcp-check");
    }
    let child = LbProcess(cmd.spawn().expect("spawn litek8s lb"));
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

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
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

/// Per-round figures of one backend, direct and through the balancer.
#[derive(Default)]
struct Samples {
    direct_rps: Vec<f64>,
    lb_rps: Vec<f64>,
    direct_p50: Vec<f64>,
    lb_p50: Vec<f64>,
    direct_p99: Vec<f64>,
    lb_p99: Vec<f64>,
    direct_mib: Vec<f64>,
    lb_mib: Vec<f64>,
    /// The balancer's CPU time per short request (µs) and per streamed MiB (ms).
    lb_cpu_per_request: Vec<f64>,
    lb_cpu_per_mib: Vec<f64>,
    /// p50 (ms) of short requests on one connection, where measured.
    direct_single_p50: Vec<f64>,
    lb_single_p50: Vec<f64>,
}

impl Samples {
    fn short(
        &mut self,
        direct: (f64, Duration, Duration),
        via: (f64, Duration, Duration),
        cpu: Duration,
    ) {
        self.direct_rps.push(direct.0);
        self.direct_p50.push(direct.1.as_secs_f64() * 1e3);
        self.direct_p99.push(direct.2.as_secs_f64() * 1e3);
        self.lb_rps.push(via.0);
        self.lb_p50.push(via.1.as_secs_f64() * 1e3);
        self.lb_p99.push(via.2.as_secs_f64() * 1e3);
        let requests = via.0 * SHORT_SECONDS;
        self.lb_cpu_per_request
            .push(cpu.as_secs_f64() * 1e6 / requests.max(1.0));
    }

    fn stream(&mut self, direct: f64, via: f64, cpu: Duration, mib: f64) {
        self.direct_mib.push(direct);
        self.lb_mib.push(via);
        self.lb_cpu_per_mib.push(cpu.as_secs_f64() * 1e3 / mib);
    }

    /// The table rows of this backend, the targets judged on the medians.
    fn rows(&self, what: &str, rows: &mut Vec<[String; 4]>) {
        let (drps, lrps) = (median(self.direct_rps.clone()), median(self.lb_rps.clone()));
        let loss = 100.0 * (1.0 - lrps / drps);
        let added_p50 = median(self.lb_p50.clone()) - median(self.direct_p50.clone());
        let stream_ratio = 100.0 * median(self.lb_mib.clone()) / median(self.direct_mib.clone());
        rows.push([
            format!("{what}: short requests, {CONNECTIONS} keep-alive connections (req/s)"),
            format!("{drps:.0} ({})", spread(&self.direct_rps)),
            format!("{lrps:.0} ({})", spread(&self.lb_rps)),
            format!("loss {loss:.1}% (target ≤ 10%: {})", verdict(loss <= 10.0)),
        ]);
        rows.push([
            format!("{what}: short requests p50 (ms)"),
            format!("{:.3}", median(self.direct_p50.clone())),
            format!("{:.3}", median(self.lb_p50.clone())),
            format!(
                "added {added_p50:.3} ms (target ≤ 0.2 ms: {})",
                verdict(added_p50 <= 0.2)
            ),
        ]);
        if !self.lb_single_p50.is_empty() {
            let (direct, via) = (
                median(self.direct_single_p50.clone()),
                median(self.lb_single_p50.clone()),
            );
            rows.push([
                format!("{what}: short requests p50 on 1 connection (ms)"),
                format!("{direct:.3}"),
                format!("{via:.3}"),
                format!("added {:.3} ms", via - direct),
            ]);
        }
        rows.push([
            format!("{what}: short requests p99 (ms)"),
            format!("{:.3}", median(self.direct_p99.clone())),
            format!("{:.3}", median(self.lb_p99.clone())),
            format!(
                "added {:.3} ms",
                median(self.lb_p99.clone()) - median(self.direct_p99.clone())
            ),
        ]);
        rows.push([
            format!("{what}: 100 MiB stream (MiB/s)"),
            format!(
                "{:.0} ({})",
                median(self.direct_mib.clone()),
                spread(&self.direct_mib)
            ),
            format!(
                "{:.0} ({})",
                median(self.lb_mib.clone()),
                spread(&self.lb_mib)
            ),
            format!(
                "{stream_ratio:.0}% of direct (target ≥ 90%: {})",
                verdict(stream_ratio >= 90.0)
            ),
        ]);
        rows.push([
            format!("{what}: balancer CPU per short request / per MiB streamed"),
            String::new(),
            format!(
                "{:.1} µs / {:.2} ms",
                median(self.lb_cpu_per_request.clone()),
                median(self.lb_cpu_per_mib.clone())
            ),
            String::new(),
        ]);
    }
}

fn main() {
    let out_path = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "bench/LB.md".to_string());
    let bin = std::env::var("LITEK8S_BIN").expect("set LITEK8S_BIN to the litek8s binary");
    let cores = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1);
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    let load = load.split_whitespace().next().unwrap_or("?").to_string();
    println!("litek8s lb benchmark on {cores} cores (load average {load} at the start)");
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let mut rows: Vec<[String; 4]> = Vec::new();

    // --- the real API server behind the balancer
    let server = support::Server::start(&[]);
    let direct_api = server.api();
    rt.block_on(fill_api(&direct_api));
    let (lb_api, via_api_addr) = start_lb(&bin, server.addr, false);
    let lb_api_pid = lb_api.id();
    let mut via_api = server.api();
    via_api.addr = via_api_addr;
    let mut api = Samples::default();
    for round in 0..ROUNDS {
        rt.block_on(async {
            let direct = api_short_requests(&direct_api, CONNECTIONS).await;
            let before = cpu_time(lb_api_pid);
            let via = api_short_requests(&via_api, CONNECTIONS).await;
            api.short(direct, via, cpu_time(lb_api_pid) - before);
            // One connection: the added latency without queueing for a saturated CPU.
            api.direct_single_p50
                .push(api_short_requests(&direct_api, 1).await.1.as_secs_f64() * 1e3);
            api.lb_single_p50
                .push(api_short_requests(&via_api, 1).await.1.as_secs_f64() * 1e3);
            let direct = api_stream(&direct_api).await;
            let before = cpu_time(lb_api_pid);
            let started = Instant::now();
            let via = api_stream(&via_api).await;
            let mib = via * started.elapsed().as_secs_f64();
            api.stream(direct, via, cpu_time(lb_api_pid) - before, mib);
        });
        println!(
            "API server round {round}: short {:.0} vs {:.0} req/s, p50 {:.3} vs {:.3} ms; stream {:.0} vs {:.0} MiB/s",
            api.direct_rps[round], api.lb_rps[round], api.direct_p50[round], api.lb_p50[round],
            api.direct_mib[round], api.lb_mib[round]
        );
    }
    drop(lb_api);
    drop(server);
    api.rows("litek8s apiserver (TLS)", &mut rows);

    // --- the minimal backend: the balancer's cost with nothing to hide it
    let (short_addr, stream_addr) = rt.block_on(async {
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
    let (lb_short, via_short) = start_lb(&bin, short_addr, false);
    // The stream backend answers every request with 100 MiB: check it with TCP only.
    let (lb_stream, via_stream) = start_lb(&bin, stream_addr, true);
    let (short_pid, stream_pid) = (lb_short.id(), lb_stream.id());
    let mut minimal = Samples::default();
    let (mut d_cps, mut l_cps) = (vec![], vec![]);
    for round in 0..ROUNDS {
        rt.block_on(async {
            let direct = short_requests(short_addr).await;
            let before = cpu_time(short_pid);
            let via = short_requests(via_short).await;
            minimal.short(direct, via, cpu_time(short_pid) - before);
            let direct = stream(stream_addr).await;
            let before = cpu_time(stream_pid);
            let via = stream(via_stream).await;
            minimal.stream(
                direct,
                via,
                cpu_time(stream_pid) - before,
                (STREAM_BYTES >> 20) as f64,
            );
            d_cps.push(connections(short_addr).await);
            l_cps.push(connections(via_short).await);
        });
        println!(
            "minimal backend round {round}: short {:.0} vs {:.0} req/s, p50 {:.3} vs {:.3} ms; stream {:.0} vs {:.0} MiB/s; {:.0} vs {:.0} conn/s",
            minimal.direct_rps[round], minimal.lb_rps[round], minimal.direct_p50[round], minimal.lb_p50[round],
            minimal.direct_mib[round], minimal.lb_mib[round], d_cps[round], l_cps[round]
        );
    }
    drop(lb_short);
    drop(lb_stream);
    minimal.rows("minimal backend", &mut rows);
    rows.push([
        format!("minimal backend: new connections/s ({CONNECT_CLIENTS} clients, one request each)"),
        format!("{:.0} ({})", median(d_cps.clone()), spread(&d_cps)),
        format!("{:.0} ({})", median(l_cps.clone()), spread(&l_cps)),
        format!(
            "{:.0}% of direct",
            100.0 * median(l_cps.clone()) / median(d_cps.clone())
        ),
    ]);

    let mut md = String::new();
    md.push_str("# Load balancer benchmark (`bench/lb.sh`)\n\n");
    md.push_str(&format!(
        "Machine: {cores} cores, load average {load} when the run started. Direct = client → \
         backend; via lb = client → release `litek8s lb` (splice relay) → backend, all on \
         127.0.0.1 and all sharing the {cores} cores. Two backends: the real `litek8s apiserver` \
         (short = GET of a 1 KiB ConfigMap over TLS; stream = lists of {LIST_OBJECTS} ConfigMaps \
         on one connection until 100 MiB have passed), and a minimal in-process HTTP/1.1 server \
         (2-byte answers; one 100 MiB answer) that costs about as little per request as the \
         balancer itself. {ROUNDS} rounds, direct and via lb alternated; the figure is the \
         median, the range in parentheses is min–max over the rounds. The balancer's CPU time \
         comes from /proc/<pid>/stat over the via-lb runs.\n\n"
    ));
    md.push_str("| metric | direct | via lb | result |\n|---|---|---|---|\n");
    for r in &rows {
        md.push_str(&format!("| {} | {} | {} | {} |\n", r[0], r[1], r[2], r[3]));
    }
    md.push_str(
        "\n## Reading the numbers\n\n\
         A relay on the same machine doubles the TCP hops of every request: client → lb → \
         server instead of client → server. On loopback the kernel runs the receiver's TCP \
         processing in the sender's context, so those extra hops are CPU taken from the same \
         cores the client and the server run on. `perf record -g -p <lb pid>` during the \
         64-connection run puts about 89% of the balancer's samples in the kernel (splice → \
         tcp_sendmsg → loopback transmit and receive) and about 9% in litek8s itself; \
         user-space copying (tokio's copy_bidirectional, the earlier relay) cost the same per \
         short request. When the server answers a GET in tens of microseconds of CPU, as \
         litek8s does, the balancer's per-request CPU (the row above) is a large share of the \
         total and the 64-connection throughput falls by that share; the 1-connection row \
         shows the latency the relay itself adds when no CPU is being queued for. The 10% and \
         0.2 ms targets assume the balancer does not share cores with a saturated client and \
         server; on a 2-core machine running all three they are not met, and this run does \
         not show what they are on separate machines.\n",
    );
    println!("{md}");
    std::fs::write(&out_path, &md).expect("write the report");
    println!("written to {out_path}");
}
