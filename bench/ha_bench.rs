//! HA benchmark against clusters of the real (release) binary on loopback. Run through
//! `bench/ha.sh`, which builds the release binary and passes it in `LITEK8S_BIN`.
//!
//! Measures (docs/guarantees.md, Timers; the targets are in the table it writes):
//! - failover: the window in which no write succeeds after the leader is SIGKILLed (or, a
//!   planned stop, SIGTERMed), with default timers and with `LITEK8S_RAFT_HEARTBEAT_MS=100`;
//!   min / p50 / max over repeated kills (the killed member restarts between kills);
//! - ConfigMap creates (1 KiB) at 1, 16 and 64 connections against 1, 3 and 5 members, spread
//!   over all members and all to the leader;
//! - a linearizable GET (resourceVersion unset) against rv="0";
//! - side by side, in the same run: 3-member litek8s creates against 1 KiB puts into a
//!   3-member etcd (Debian's `etcd-server`, when installed), alternating, `HA_SIDE_ROUNDS`
//!   rounds (default 3, 0 skips it; `etcd_cluster.rs`).
//!
//! Knobs for focused runs: `HA_MEMBERS` (default 1,3,5), `HA_CONNS` (default 1,16,64),
//! `HA_READS=0` skips the read phase, `HA_KILLS` and `HA_TERMS` (0 skips failover).
//!
//! Writes the table to the path given as the first argument (default bench/HA.md).

#[path = "../tests/support/mod.rs"]
mod support;

#[path = "../tests/cluster_support/mod.rs"]
mod cluster_support;

mod etcd_cluster;

mod report;

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use cluster_support::Cluster;
use report::percentile;
use serde_json::json;
use support::Api;

const LOAD_SECONDS: u64 = 5;

fn ms(d: Duration) -> String {
    format!("{:.1} ms", d.as_secs_f64() * 1000.0)
}

fn env_usize(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// Writes from several clients that try the members in turn; records (issued, completed) of
/// every success.
async fn failover_writers(
    apis: Vec<Api>,
    stop: Arc<std::sync::atomic::AtomicBool>,
    successes: Arc<Mutex<Vec<(Instant, Instant)>>>,
) {
    let mut tasks = Vec::new();
    for w in 0..8usize {
        let (apis, stop, successes) = (apis.clone(), stop.clone(), successes.clone());
        tasks.push(tokio::spawn(async move {
            let mut n = 0usize;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                n += 1;
                let api = &apis[(w + n) % apis.len()];
                let body = json!({"apiVersion": "v1", "kind": "ConfigMap",
                    "metadata": {"name": format!("f{w}-{n}")}});
                let issued = Instant::now();
                let ok = tokio::time::timeout(
                    Duration::from_secs(20),
                    api.post_json("/api/v1/namespaces/default/configmaps", &body),
                )
                .await
                .is_ok_and(|r| r.is_ok_and(|r| r.status == 201));
                if ok {
                    successes.lock().unwrap().push((issued, Instant::now()));
                } else {
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
            }
        }));
    }
    for t in tasks {
        let _ = t.await;
    }
}

#[derive(Clone, Copy, PartialEq)]
enum Stop {
    Kill,
    Term,
}

/// Stops the leader `rounds` times; returns the no-write windows.
async fn failovers(heartbeat_ms: u64, stop_kind: Stop, rounds: usize) -> Vec<Duration> {
    let mut cluster = Cluster::start_with(3, heartbeat_ms);
    let apis: Vec<Api> = (0..3).map(|i| cluster.api(i)).collect();
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let successes = Arc::new(Mutex::new(Vec::new()));
    let writers = tokio::spawn(failover_writers(apis, stop.clone(), successes.clone()));
    let mut windows = Vec::new();
    for round in 0..rounds {
        tokio::time::sleep(Duration::from_millis(1500)).await;
        let leader = cluster.wait_leader().await;
        let t0 = Instant::now();
        match stop_kind {
            Stop::Kill => cluster.kill(leader),
            Stop::Term => {
                cluster.terminate(leader);
            }
        }
        // The first write issued after the stop that succeeded ends the window.
        let deadline = Instant::now() + Duration::from_secs(60);
        let window = loop {
            let first = successes
                .lock()
                .unwrap()
                .iter()
                .filter(|(issued, _)| *issued >= t0)
                .map(|(_, done)| *done)
                .min();
            if let Some(done) = first {
                break done - t0;
            }
            assert!(Instant::now() < deadline, "writes never resumed");
            tokio::time::sleep(Duration::from_millis(10)).await;
        };
        println!(
            "  heartbeat {heartbeat_ms} ms, {} #{round}: no write for {}",
            if stop_kind == Stop::Kill {
                "SIGKILL"
            } else {
                "SIGTERM"
            },
            ms(window)
        );
        windows.push(window);
        cluster.restart(leader);
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let _ = writers.await;
    windows.sort();
    windows
}

/// Creates from `conns` keep-alive connections spread over `targets` for LOAD_SECONDS.
async fn create_load(targets: &[Api], conns: usize, tag: &str) -> (f64, Duration, Duration) {
    let data = "x".repeat(1024);
    let start = Instant::now();
    let deadline = start + Duration::from_secs(LOAD_SECONDS);
    let mut tasks = Vec::new();
    for c in 0..conns {
        let api = targets[c % targets.len()].clone();
        let (data, tag) = (data.clone(), tag.to_string());
        tasks.push(tokio::spawn(async move {
            let mut conn = api.connect().await.expect("connect");
            let mut lat = Vec::new();
            let mut i = 0;
            while Instant::now() < deadline {
                let body = serde_json::to_vec(&json!({"apiVersion": "v1", "kind": "ConfigMap",
                    "metadata": {"name": format!("{tag}-{c}-{i}")}, "data": {"v": data}}))
                .expect("json");
                let t = Instant::now();
                match conn
                    .request(
                        "POST",
                        "/api/v1/namespaces/default/configmaps",
                        Some("application/json"),
                        body,
                    )
                    .await
                {
                    Ok(r) if r.status == 201 => lat.push(t.elapsed()),
                    Ok(_) => {}
                    Err(_) => conn = api.connect().await.expect("reconnect"),
                }
                i += 1;
            }
            lat
        }));
    }
    let mut all = Vec::new();
    for t in tasks {
        all.extend(t.await.expect("task"));
    }
    let elapsed = start.elapsed();
    all.sort();
    (
        all.len() as f64 / elapsed.as_secs_f64(),
        percentile(&all, 0.5),
        percentile(&all, 0.99),
    )
}

/// GETs of one object from `conns` connections to `api` for LOAD_SECONDS.
async fn read_load(api: &Api, conns: usize, query: &str) -> (f64, Duration) {
    let start = Instant::now();
    let deadline = start + Duration::from_secs(LOAD_SECONDS);
    let mut tasks = Vec::new();
    for _ in 0..conns {
        let api = api.clone();
        let path = format!("/api/v1/namespaces/default/configmaps/read-target{query}");
        tasks.push(tokio::spawn(async move {
            let mut conn = api.connect().await.expect("connect");
            let mut lat = Vec::new();
            while Instant::now() < deadline {
                let t = Instant::now();
                if let Ok(r) = conn.request("GET", &path, None, bytes::Bytes::new()).await {
                    if r.status == 200 {
                        lat.push(t.elapsed());
                    }
                }
            }
            lat
        }));
    }
    let mut all = Vec::new();
    for t in tasks {
        all.extend(t.await.expect("task"));
    }
    let elapsed = start.elapsed();
    all.sort();
    (
        all.len() as f64 / elapsed.as_secs_f64(),
        percentile(&all, 0.5),
    )
}

/// The side-by-side table: a 3-member litek8s cluster (ConfigMap creates) and a 3-member etcd
/// (raw 1 KiB puts), both running, measured alternately — litek8s, then etcd, case by case —
/// for `rounds` rounds at 1, 16 and 64 clients, spread over all members and all to the leader.
/// Alternating keeps a noisy host's slow moments from landing on one system only.
async fn side_by_side(rounds: usize) -> String {
    let mut md = String::from(
        "\n## Side by side: 3-member litek8s against 3-member etcd (same machine, same run)\n\n",
    );
    let Some(version) = etcd_cluster::installed_version() else {
        md.push_str("etcd is not installed here (`apt install etcd-server etcd-client`).\n");
        println!("{md}");
        return md;
    };
    let etcd = match etcd_cluster::EtcdCluster::start(3).await {
        Ok(c) => c,
        Err(e) => {
            md.push_str(&format!("etcd did not start: {e}\n"));
            println!("{md}");
            return md;
        }
    };
    let etcd_leader = match etcd.leader() {
        Ok(l) => l,
        Err(e) => {
            md.push_str(&format!("no etcd leader found: {e}\n"));
            println!("{md}");
            return md;
        }
    };
    let mut cluster = Cluster::start_with(3, 300);
    let leader = cluster.wait_leader().await;
    md.push_str(&format!(
        "litek8s: ConfigMap creates over HTTPS as in the tables above. etcd: {version}, default \
         timers, raw puts of 1 KiB values under new keys `/registry/configmaps/default/<unique>` \
         from gRPC clients (one HTTP/2 connection over plain TCP and one put in flight each, as \
         etcd's own `benchmark put` sends them; `bench/etcd_cluster.rs`). Both clusters run at \
         once; each case is measured {rounds} times, alternating litek8s and etcd, \
         {LOAD_SECONDS} s each. Writes/s is the median round (min–max in parentheses); p50 and \
         p99 are from the median round.\n\n\
         | system | writes go to | clients | writes/s | p50 | p99 |\n|---|---|---|---|---|---|\n"
    ));
    let lite_all: Vec<Api> = (0..3).map(|i| cluster.api(i)).collect();
    let lite_leader = vec![cluster.api(leader)];
    let etcd_all = etcd.client_addrs.clone();
    let etcd_to_leader = vec![etcd.client_addrs[etcd_leader]];
    for (label, lite_targets, etcd_targets) in [
        ("all members", &lite_all, &etcd_all),
        ("the leader", &lite_leader, &etcd_to_leader),
    ] {
        for clients in [1usize, 16, 64] {
            let mut lite = Vec::new();
            let mut etc = Vec::new();
            for round in 0..rounds {
                let tag = format!("side-{}-{clients}-{round}", label.len());
                lite.push(create_load(lite_targets, clients, &tag).await);
                etc.push(etcd_cluster::put_load(etcd_targets, clients, &tag, LOAD_SECONDS).await);
            }
            for (system, mut results) in [("litek8s", lite), ("etcd", etc)] {
                results.sort_by(|a, b| a.0.total_cmp(&b.0));
                let (rate, p50, p99) = results[results.len() / 2];
                let line = format!(
                    "| {system} | {label} | {clients} | {rate:.0} ({:.0}–{:.0}) | {} | {} |\n",
                    results[0].0,
                    results[results.len() - 1].0,
                    ms(p50),
                    ms(p99)
                );
                print!("{line}");
                md.push_str(&line);
            }
        }
    }
    drop(cluster);
    md
}

/// User plus system CPU time, in seconds, of the processes `pids` (fields 14 and 15 of
/// `/proc/<pid>/stat`, in clock ticks); a process that is gone counts 0.
fn cpu_seconds(pids: &[u32]) -> f64 {
    let ticks_per_second = nix::unistd::sysconf(nix::unistd::SysconfVar::CLK_TCK)
        .ok()
        .flatten()
        .unwrap_or(100) as f64;
    let ticks: u64 = pids
        .iter()
        .filter_map(|pid| std::fs::read_to_string(format!("/proc/{pid}/stat")).ok())
        .filter_map(|stat| {
            // The command name may hold spaces and parentheses: fields start after the last ')'.
            let fields: Vec<&str> = stat.rsplit_once(')')?.1.split_whitespace().collect();
            let utime: u64 = fields.get(11)?.parse().ok()?;
            let stime: u64 = fields.get(12)?.parse().ok()?;
            Some(utime + stime)
        })
        .sum();
    ticks as f64 / ticks_per_second
}

fn summary(windows: &[Duration]) -> String {
    format!(
        "min {:.2} s, p50 {:.2} s, max {:.2} s ({} runs)",
        windows.first().copied().unwrap_or_default().as_secs_f64(),
        percentile(windows, 0.5).as_secs_f64(),
        windows.last().copied().unwrap_or_default().as_secs_f64(),
        windows.len()
    )
}

// The server's allocator, as in `litek8s`: this process's own work (the client, or the
// server's code run in-process) is measured on it.
litek8s::use_server_allocator!();

fn main() {
    let out_path = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "bench/HA.md".to_string());
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    // Sized explicitly, so that TOKIO_WORKER_THREADS given to the members (an experiment in
    // docs/performance-notes.md) leaves the client as it is.
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(cores)
        .enable_all()
        .build()
        .expect("runtime");
    let kills = env_usize("HA_KILLS", 20);
    let terms = env_usize("HA_TERMS", 10);
    let mut md = format!(
        "# HA benchmark\n\nMachine: {cores} cores. Clusters of the release binary on loopback, \
         data on local disk; clients on the same machine. Produced by `bench/ha.sh`.\n\n"
    );

    md.push_str("## Failover: the window in which no write succeeds\n\n");
    md.push_str("| stop | timers | window | target |\n|---|---|---|---|\n");
    let cases = [
        (Stop::Kill, 300u64, kills, "p50 ≤ 5 s"),
        (Stop::Kill, 100, kills, "p50 ≤ 1.5 s"),
        (Stop::Term, 300, terms, "as short as openraft 0.9 allows"),
        (Stop::Term, 100, terms, "as short as openraft 0.9 allows"),
    ];
    for (kind, hb, rounds, target) in cases {
        if rounds == 0 {
            continue;
        }
        let windows = rt.block_on(failovers(hb, kind, rounds));
        let line = format!(
            "| {} of the leader | heartbeat {hb} ms | {} | {target} |\n",
            if kind == Stop::Kill {
                "SIGKILL"
            } else {
                "SIGTERM"
            },
            summary(&windows)
        );
        print!("{line}");
        md.push_str(&line);
    }

    md.push_str(
        "\n## ConfigMap creates (1 KiB)\n\nServer CPU per create: the user and system CPU time of all members (`/proc/<pid>/stat`) over the run, divided by the creates; less sensitive than creates/s to a busy host.\n\n| members | writes go to | connections | creates/s | p50 | p99 | server CPU per create |\n|---|---|---|---|---|---|---|\n",
    );
    let sizes: Vec<usize> = std::env::var("HA_MEMBERS")
        .ok()
        .map(|v| v.split(',').filter_map(|n| n.trim().parse().ok()).collect())
        .unwrap_or_else(|| vec![1, 3, 5]);
    let load_heartbeat = env_usize("HA_LOAD_HEARTBEAT_MS", 300) as u64;
    let conn_counts: Vec<usize> = std::env::var("HA_CONNS")
        .ok()
        .map(|v| v.split(',').filter_map(|n| n.trim().parse().ok()).collect())
        .unwrap_or_else(|| vec![1, 16, 64]);
    let read_phase = env_usize("HA_READS", 1) > 0;
    for members in sizes {
        let mut cluster = Cluster::start_with(members, load_heartbeat);
        let leader = rt.block_on(cluster.wait_leader());
        let all: Vec<Api> = (0..members).map(|i| cluster.api(i)).collect();
        let to_leader = vec![cluster.api(leader)];
        for (label, targets) in [("all members", &all), ("the leader", &to_leader)] {
            if members == 1 && label == "the leader" {
                continue;
            }
            for &conns in &conn_counts {
                let tag = format!("m{members}-{}-{conns}", label.len());
                let pids: Vec<u32> = cluster.members.iter().filter_map(|m| m.pid()).collect();
                let cpu_before = cpu_seconds(&pids);
                let (rate, p50, p99) = rt.block_on(create_load(targets, conns, &tag));
                let cpu = cpu_seconds(&pids) - cpu_before;
                let creates = rate * LOAD_SECONDS as f64;
                let line = format!(
                    "| {members} | {label} | {conns} | {rate:.0} | {} | {} | {:.0} µs |\n",
                    ms(p50),
                    ms(p99),
                    cpu / creates.max(1.0) * 1e6
                );
                print!("{line}");
                md.push_str(&line);
            }
        }
        if members == 3 && read_phase {
            rt.block_on(async {
                let body = json!({"apiVersion": "v1", "kind": "ConfigMap",
                    "metadata": {"name": "read-target"}, "data": {"v": "x"}});
                let r = cluster
                    .api(leader)
                    .post_json("/api/v1/namespaces/default/configmaps", &body)
                    .await
                    .expect("create read target");
                assert_eq!(r.status, 201);
            });
            let follower = (0..members).find(|&i| i != leader).unwrap_or(0);
            let mut reads = String::from(
                "\n## Reads: linearizable (resourceVersion unset) against rv=\"0\", 16 connections, 3 members\n\n| server | resourceVersion | GETs/s | p50 |\n|---|---|---|---|\n",
            );
            for (who, i) in [("leader", leader), ("follower", follower)] {
                for (label, query) in [
                    ("unset (ReadIndex)", ""),
                    ("\"0\" (local)", "?resourceVersion=0"),
                ] {
                    let (rate, p50) = rt.block_on(read_load(&cluster.api(i), 16, query));
                    let line = format!("| {who} | {label} | {rate:.0} | {} |\n", ms(p50));
                    print!("{line}");
                    reads.push_str(&line);
                }
            }
            md.push_str(&reads);
            md.push_str(
                "\n| members | writes go to | connections | creates/s | p50 | p99 | server CPU per create |\n|---|---|---|---|---|---|---|\n",
            );
        }
        drop(cluster);
    }
    let side_rounds = env_usize("HA_SIDE_ROUNDS", 3);
    if side_rounds > 0 {
        md.push_str(&rt.block_on(side_by_side(side_rounds)));
    }
    md.push_str(
        "\nTargets: 3 members ≥ 5,000 creates/s at 64 connections. Failover windows are measured \
         from the signal to the completion of the first write issued after it (8 writers \
         rotating over the members; the stopped member restarts between rounds).\n",
    );
    println!("\n{md}");
    if let Err(e) = std::fs::write(&out_path, &md) {
        eprintln!("cannot write {out_path}: {e}");
        std::process::exit(1);
    }
    println!("written to {out_path}");
}
