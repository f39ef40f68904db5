//! Load balancer benchmark: the same work directly against a backend and through the real
//! (release) `litek8s lb`, alternated and repeated so the machine's noise shows as spread.
//! Run through `bench/lb.sh`, which builds the release binary and passes it in `LITEK8S_BIN`.
//!
//! The backend is a minimal HTTP/1.1 server in this process (keep-alive, a 2-byte answer to
//! every request, 100 MiB for `/stream`), so the numbers are the balancer's cost, not an API
//! server's. Measures: short requests on 64 keep-alive connections (throughput, p50, p99);
//! one 100 MiB stream (MiB/s); new connections per second (connect, one request, close) from
//! 16 clients. Prints a table with the core count and writes it as Markdown to the path given
//! as the first argument (default bench/LB.md).

use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

const CONNECTIONS: usize = 64;
const SHORT_SECONDS: f64 = 4.0;
const STREAM_BYTES: usize = 100 << 20;
const CONNECT_CLIENTS: usize = 16;
const CONNECT_SECONDS: f64 = 3.0;
const ROUNDS: usize = 3;
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

fn free_addr() -> SocketAddr {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("free port")
}

/// A `litek8s lb` for `backend`, ready once it reports an active server.
// The child is handed to the caller, which kills and waits for it when the run ends.
#[allow(clippy::zombie_processes)]
fn start_lb(bin: &str, backend: SocketAddr, tcp_check: bool) -> (Child, SocketAddr) {
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
    let child = cmd.spawn().expect("spawn litek8s lb");
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
    let (mut lb_short, via_short) = start_lb(&bin, short_addr, false);
    // The stream backend answers every request with 100 MiB: check it with TCP only.
    let (mut lb_stream, via_stream) = start_lb(&bin, stream_addr, true);

    let mut rows: Vec<[String; 4]> = Vec::new();
    let (mut d_rps, mut l_rps, mut d_p50, mut l_p50, mut d_p99, mut l_p99) =
        (vec![], vec![], vec![], vec![], vec![], vec![]);
    let (mut d_mib, mut l_mib, mut d_cps, mut l_cps) = (vec![], vec![], vec![], vec![]);
    for round in 0..ROUNDS {
        rt.block_on(async {
            let (rps, p50, p99) = short_requests(short_addr).await;
            d_rps.push(rps);
            d_p50.push(p50.as_secs_f64() * 1e3);
            d_p99.push(p99.as_secs_f64() * 1e3);
            let (rps, p50, p99) = short_requests(via_short).await;
            l_rps.push(rps);
            l_p50.push(p50.as_secs_f64() * 1e3);
            l_p99.push(p99.as_secs_f64() * 1e3);
            d_mib.push(stream(stream_addr).await);
            l_mib.push(stream(via_stream).await);
            d_cps.push(connections(short_addr).await);
            l_cps.push(connections(via_short).await);
        });
        println!(
            "round {round}: short {:.0} vs {:.0} req/s, p50 {:.3} vs {:.3} ms; stream {:.0} vs {:.0} MiB/s; {:.0} vs {:.0} conn/s",
            d_rps[round], l_rps[round], d_p50[round], l_p50[round], d_mib[round], l_mib[round], d_cps[round], l_cps[round]
        );
    }
    let _ = lb_short.kill();
    let _ = lb_short.wait();
    let _ = lb_stream.kill();
    let _ = lb_stream.wait();

    let (drps, lrps) = (median(d_rps.clone()), median(l_rps.clone()));
    let loss = 100.0 * (1.0 - lrps / drps);
    let added_p50 = median(l_p50.clone()) - median(d_p50.clone());
    let stream_ratio = 100.0 * median(l_mib.clone()) / median(d_mib.clone());
    let verdict = |ok: bool| if ok { "met" } else { "NOT met" }.to_string();
    rows.push([
        format!("short requests, {CONNECTIONS} keep-alive connections (req/s)"),
        format!("{drps:.0} ({})", spread(&d_rps)),
        format!("{lrps:.0} ({})", spread(&l_rps)),
        format!("loss {loss:.1}% (target ≤ 10%: {})", verdict(loss <= 10.0)),
    ]);
    rows.push([
        "short requests p50 (ms)".into(),
        format!("{:.3}", median(d_p50.clone())),
        format!("{:.3}", median(l_p50.clone())),
        format!(
            "added {added_p50:.3} ms (target ≤ 0.2 ms: {})",
            verdict(added_p50 <= 0.2)
        ),
    ]);
    rows.push([
        "short requests p99 (ms)".into(),
        format!("{:.3}", median(d_p99.clone())),
        format!("{:.3}", median(l_p99.clone())),
        format!(
            "added {:.3} ms",
            median(l_p99.clone()) - median(d_p99.clone())
        ),
    ]);
    rows.push([
        "one 100 MiB stream (MiB/s)".into(),
        format!("{:.0} ({})", median(d_mib.clone()), spread(&d_mib)),
        format!("{:.0} ({})", median(l_mib.clone()), spread(&l_mib)),
        format!(
            "{stream_ratio:.0}% of direct (target ≥ 90%: {})",
            verdict(stream_ratio >= 90.0)
        ),
    ]);
    rows.push([
        format!("new connections/s ({CONNECT_CLIENTS} clients, one request each)"),
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
        "Machine: {cores} cores, load average {load} when the run started (other builds share it). \
         Direct = client → backend; via lb = client → release `litek8s lb` → backend, all on \
         127.0.0.1. The backend is a minimal keep-alive HTTP/1.1 server in the benchmark process, \
         so the difference is the balancer's cost. {ROUNDS} rounds, direct and via lb alternated; \
         the figure is the median, the range in parentheses is min–max over the rounds.\n\n"
    ));
    md.push_str("| metric | direct | via lb | result |\n|---|---|---|---|\n");
    for r in &rows {
        md.push_str(&format!("| {} | {} | {} | {} |\n", r[0], r[1], r[2], r[3]));
    }
    println!("{md}");
    std::fs::write(&out_path, &md).expect("write the report");
    println!("written to {out_path}");
}
