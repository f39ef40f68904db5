//! Cluster DNS benchmark: the agent's responder (`litek8s::agent::dns`) answering
//! cluster.local names over UDP on one core. Run through `bench/dns.sh`; writes its Markdown
//! section (`## DNS`) to the path given as the first argument (default: stdout only).
//!
//! The zone: 1,000 ClusterIP Services and 100 headless Services of 3 ready endpoints each,
//! built from a hand-made cache as the watches would fill it (no API server: this measures
//! the responder, not the feed). The responder runs on a single-threaded tokio runtime
//! pinned to CPU 0; the load generator runs on the other CPU: 4 threads, each one UDP
//! socket keeping 16 queries in flight (closed loop), for 5 s after a 1 s warm-up. The
//! queries: 80% A of a ClusterIP Service, 10% A of a headless one (3 answers), 10% an
//! unknown name (NXDOMAIN with the SOA). Every answer is checked for the query's id.
//! Latency is from a query's send to its answer's receipt, loopback included.

use std::collections::HashMap;
use std::net::{SocketAddr, UdpSocket};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use litek8s::agent::dns::cache::{Cache, Kind};
use litek8s::agent::dns::wire::{build_query, TYPE_A};
use litek8s::agent::dns::{serve, Zone, ZoneHandle, ZoneSettings};
use serde_json::json;
use tokio_util::sync::CancellationToken;

const SERVICES: usize = 1000;
const HEADLESS: usize = 100;
const THREADS: usize = 4;
/// Queries in flight per client thread: saturation, then a light load for latency.
const WINDOWS: [usize; 2] = [16, 1];
const WARMUP: Duration = Duration::from_secs(1);
const MEASURE: Duration = Duration::from_secs(5);

fn zone() -> Zone {
    let mut cache = Cache::default();
    let services: Vec<_> = (0..SERVICES)
        .map(|i| {
            json!({"metadata": {"namespace": "bench", "name": format!("svc-{i}")},
                   "spec": {"clusterIP": format!("10.43.{}.{}", 1 + i / 250, 1 + i % 250),
                            "ports": [{"name": "http", "port": 80}]}})
        })
        .chain((0..HEADLESS).map(|i| {
            json!({"metadata": {"namespace": "bench", "name": format!("hl-{i}")},
                   "spec": {"clusterIP": "None", "ports": [{"name": "http", "port": 80}]}})
        }))
        .collect();
    cache.replace(Kind::Services, &services);
    let slices: Vec<_> = (0..HEADLESS)
        .map(|i| {
            let endpoints: Vec<_> = (0..3)
                .map(|e| json!({"addresses": [format!("10.42.{}.{}", 1 + i / 80, 1 + (i % 80) * 3 + e)]}))
                .collect();
            json!({"metadata": {"namespace": "bench", "name": format!("hl-{i}-x"),
                                "labels": {"kubernetes.io/service-name": format!("hl-{i}")}},
                   "endpoints": endpoints, "ports": [{"name": "http", "port": 80}]})
        })
        .collect();
    cache.replace(Kind::EndpointSlices, &slices);
    let settings = ZoneSettings {
        domain: "cluster.local".into(),
        dns_ip: Some("10.43.0.10".parse().expect("literal")),
    };
    Zone::build(&cache, &settings, 1)
}

fn pin(cpu: usize) {
    let mut set = nix::sched::CpuSet::new();
    if set.set(cpu).is_ok() {
        let _ = nix::sched::sched_setaffinity(nix::unistd::Pid::from_raw(0), &set);
    }
}

fn name(n: u64) -> String {
    match n % 10 {
        0 => format!("hl-{}.bench.svc.cluster.local", n % HEADLESS as u64),
        1 => format!("missing-{}.bench.svc.cluster.local", n % 1000),
        _ => format!("svc-{}.bench.svc.cluster.local", n % SERVICES as u64),
    }
}

/// One load thread keeping `window` queries in flight: latencies (µs) of the answers
/// received while measuring.
fn load(
    server: SocketAddr,
    seed: u64,
    window: usize,
    stop: Arc<AtomicBool>,
    measuring: Arc<AtomicBool>,
) -> Vec<u32> {
    let socket = UdpSocket::bind("127.0.0.1:0").expect("bind");
    socket.connect(server).expect("connect");
    socket
        .set_read_timeout(Some(Duration::from_millis(200)))
        .expect("timeout");
    let mut sent: HashMap<u16, Instant> = HashMap::new();
    let mut next_id: u16 = (seed as u16).wrapping_mul(4099);
    let mut n = seed * 7919;
    let mut latencies = Vec::with_capacity(1 << 20);
    let send = |sent: &mut HashMap<u16, Instant>, next_id: &mut u16, n: &mut u64| {
        *next_id = next_id.wrapping_add(1);
        *n += 1;
        let query = build_query(*next_id, &name(*n), TYPE_A, None);
        if socket.send(&query).is_ok() {
            sent.insert(*next_id, Instant::now());
        }
    };
    for _ in 0..window {
        send(&mut sent, &mut next_id, &mut n);
    }
    let mut buf = [0u8; 4096];
    while !stop.load(Ordering::Relaxed) {
        match socket.recv(&mut buf) {
            Ok(len) if len >= 12 => {
                let id = u16::from_be_bytes([buf[0], buf[1]]);
                if let Some(at) = sent.remove(&id) {
                    if measuring.load(Ordering::Relaxed) {
                        latencies.push(at.elapsed().as_micros() as u32);
                    }
                }
                send(&mut sent, &mut next_id, &mut n);
            }
            _ => {
                // A lost answer: its slot is refilled so the window stays full.
                sent.clear();
                for _ in 0..window {
                    send(&mut sent, &mut next_id, &mut n);
                }
            }
        }
    }
    latencies
}

/// One measured run with `window` queries in flight per thread: queries/s and latencies.
fn phase(addr: SocketAddr, window: usize) -> (f64, Vec<u32>) {
    let stop = Arc::new(AtomicBool::new(false));
    let measuring = Arc::new(AtomicBool::new(false));
    let threads: Vec<_> = (0..THREADS as u64)
        .map(|seed| {
            let (stop, measuring) = (stop.clone(), measuring.clone());
            std::thread::spawn(move || {
                pin(1);
                load(addr, seed + 1, window, stop, measuring)
            })
        })
        .collect();
    std::thread::sleep(WARMUP);
    measuring.store(true, Ordering::Relaxed);
    let started = Instant::now();
    std::thread::sleep(MEASURE);
    measuring.store(false, Ordering::Relaxed);
    let elapsed = started.elapsed();
    stop.store(true, Ordering::Relaxed);
    let all: Vec<u32> = threads
        .into_iter()
        .flat_map(|t| t.join().expect("load thread"))
        .collect();
    (all.len() as f64 / elapsed.as_secs_f64(), all)
}

// The server's allocator, as in `litek8s`: this process's own work (the client, or the
// server's code run in-process) is measured on it.
litek8s::use_server_allocator!();

fn main() {
    let out = std::env::args().nth(1);
    let zone: ZoneHandle = Arc::new(parking_lot::RwLock::new(Arc::new(zone())));
    let stop_server = CancellationToken::new();
    let (addr_tx, addr_rx) = std::sync::mpsc::channel();
    let server_stop = stop_server.clone();
    let server = std::thread::spawn(move || {
        pin(0);
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        rt.block_on(async move {
            let addr = serve(
                zone,
                "127.0.0.1:0".parse().expect("literal"),
                vec![],
                server_stop.clone(),
            )
            .expect("listen");
            addr_tx.send(addr).expect("send");
            server_stop.cancelled().await;
        });
    });
    let addr = addr_rx.recv().expect("the server's address");
    let phases: Vec<(usize, f64, Vec<u32>)> = WINDOWS
        .iter()
        .map(|&window| {
            let (qps, latencies) = phase(addr, window);
            (window, qps, latencies)
        })
        .collect();
    stop_server.cancel();
    let _ = server.join();
    let profile = if cfg!(debug_assertions) {
        "debug (dev profile)"
    } else {
        "release"
    };
    let mut report = format!(
        "## DNS\n\n\
         Written by `bench/dns.sh` (bench/dns_bench.rs, {profile} build, {cores} cores): the \
         agent's responder on one core (a current-thread runtime pinned to CPU 0), {SERVICES} \
         ClusterIP and {HEADLESS} headless Services; {THREADS} UDP client threads on CPU 1, each \
         keeping N queries in flight; 80% ClusterIP A / 10% headless A (3 records) / 10% \
         NXDOMAIN; {secs} s measured per row. Targets: ≥ 20,000 queries/s on one core, p99 ≤ 1 ms.\n\n\
         | in flight | queries/s | p50 | p99 | p99.9 | answers |\n|---|---|---|---|---|---|\n",
        cores = std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(1),
        secs = MEASURE.as_secs(),
    );
    for (window, qps, mut all) in phases {
        all.sort_unstable();
        let pct = |p: f64| {
            all.get(((all.len() as f64 * p) as usize).min(all.len().saturating_sub(1)))
                .copied()
                .unwrap_or(0)
        };
        report.push_str(&format!(
            "| {} | {qps:.0} | {} µs | {} µs | {} µs | {} |\n",
            window * THREADS,
            pct(0.50),
            pct(0.99),
            pct(0.999),
            all.len()
        ));
    }
    print!("{report}");
    if let Some(path) = out {
        std::fs::write(&path, report).expect("write the report");
    }
}
