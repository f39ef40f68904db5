//! objects.wal benchmark: write throughput with 1, 16 and 64 concurrent writers of 1 KiB
//! ConfigMap creates (one fdatasync per group-committed batch), and replay time and peak RSS
//! of opening a log that holds 100,000 such Mutations. Prints a Markdown table and, with
//! `--out FILE`, writes it there. Run through `bench/wal.sh`.
//!
//! The replay is measured in a fresh child process (this program re-executed with `replay`)
//! so its peak RSS is the replay's alone.

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use litek8s::kube::mutation::Mutation;
use litek8s::kube::object::ObjectKey;
use litek8s::kube::store::{Store, StoreConfig};
use litek8s::kube::wal::{WalConfig, WalWriter};
use litek8s::kube::writer::Writer;
use serde_json::json;

const REPLAY_MUTATIONS: usize = 100_000;
const WRITE_SECONDS: f64 = 4.0;

fn config() -> WalConfig {
    WalConfig {
        // Keep every Mutation in the log so the replay measures 100,000 of them.
        checkpoint_every: 10_000_000,
        ..WalConfig::default()
    }
}

fn configmap(name: &str) -> Mutation {
    // About 1 KiB of JSON once encoded.
    Mutation::Create {
        key: ObjectKey::new("configmaps", "bench", name),
        object: json!({"apiVersion":"v1","kind":"ConfigMap",
                       "metadata":{"name":name,"namespace":"bench","labels":{"app":"wal-bench"}},
                       "data":{"payload":"x".repeat(880)}}),
        requires_open_namespace: false,
    }
}

struct WriteRow {
    writers: usize,
    writes: usize,
    seconds: f64,
    p50: Duration,
    p99: Duration,
}

/// Writes from `writers` tasks for `seconds` (or until `limit` writes in total).
async fn write_load(dir: &Path, writers: usize, seconds: f64, limit: usize) -> WriteRow {
    let store = Arc::new(Store::new(StoreConfig::default()));
    let (wal, _) = WalWriter::open(dir, store, config()).expect("open");
    let wal = Arc::new(wal);
    let start = Instant::now();
    let deadline = start + Duration::from_secs_f64(seconds);
    let per_writer = limit.div_ceil(writers);
    let mut tasks = Vec::new();
    for w in 0..writers {
        let wal = wal.clone();
        tasks.push(tokio::spawn(async move {
            let mut latencies = Vec::new();
            for i in 0..per_writer {
                if Instant::now() >= deadline {
                    break;
                }
                let t = Instant::now();
                wal.write(configmap(&format!("w{w}-{i}")))
                    .await
                    .expect("write");
                latencies.push(t.elapsed());
            }
            latencies
        }));
    }
    let mut latencies = Vec::new();
    for task in tasks {
        latencies.extend(task.await.expect("writer task"));
    }
    let seconds = start.elapsed().as_secs_f64();
    latencies.sort();
    let at = |q: f64| latencies[((latencies.len() as f64 * q) as usize).min(latencies.len() - 1)];
    WriteRow {
        writers,
        writes: latencies.len(),
        seconds,
        p50: at(0.50),
        p99: at(0.99),
    }
}

/// The child: open the log, report time, object count and peak RSS on stdout.
fn replay(dir: &Path) {
    let store = Arc::new(Store::new(StoreConfig::default()));
    let start = Instant::now();
    let (_wal, report) = WalWriter::open(dir, store.clone(), config()).expect("open");
    let seconds = start.elapsed().as_secs_f64();
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let kib = |field: &str| {
        status
            .lines()
            .find(|l| l.starts_with(field))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|v| v.parse::<u64>().ok())
            .unwrap_or(0)
    };
    println!(
        "{seconds} {} {} {} {}",
        report.replayed_mutations,
        store.snapshot().len(),
        kib("VmHWM:"),
        kib("VmRSS:")
    );
}

// The server's allocator, as in `litek8s`: this process's own work (the client, or the
// server's code run in-process) is measured on it.
litek8s::use_server_allocator!();

fn main() {
    // The server's allocator settings (`litek8s` calls this first thing in `main`, so its
    // replay at start runs with them): with mimalloc's defaults the replay faults in huge
    // pages, which on a VM that hands free memory back to its host cost ~25 ms each
    // (docs/performance-notes.md, "The benchmark with the server's allocator").
    litek8s::tune_allocator(litek8s::Allocator::Mimalloc);
    let args: Vec<String> = std::env::args().collect();
    if args.get(1).map(String::as_str) == Some("replay") {
        replay(Path::new(&args[2]));
        return;
    }
    let out = args
        .iter()
        .position(|a| a == "--out")
        .and_then(|i| args.get(i + 1))
        .cloned();
    let base = std::env::var("WAL_BENCH_DIR").unwrap_or_else(|_| ".".into());
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("runtime");

    let mut table = String::new();
    table.push_str("| writers | writes | writes/s | MiB/s | p50 latency | p99 latency |\n");
    table.push_str("|--------:|-------:|---------:|------:|------------:|------------:|\n");
    for writers in [1, 16, 64] {
        let dir = tempfile::tempdir_in(&base).expect("temp dir");
        let row = rt.block_on(write_load(dir.path(), writers, WRITE_SECONDS, usize::MAX));
        let rate = row.writes as f64 / row.seconds;
        let line = format!(
            "| {} | {} | {:.0} | {:.1} | {:.2} ms | {:.2} ms |\n",
            row.writers,
            row.writes,
            rate,
            rate * 1024.0 / (1 << 20) as f64,
            row.p50.as_secs_f64() * 1e3,
            row.p99.as_secs_f64() * 1e3
        );
        eprint!("{line}");
        table.push_str(&line);
    }

    let replay_dir = tempfile::tempdir_in(&base).expect("temp dir");
    // WAL_BENCH_KEEP=1 keeps the replayed log and prints its directory, to profile the replay
    // alone (`wal_bench replay DIR`).
    let (dir, _removed_on_exit) = if std::env::var_os("WAL_BENCH_KEEP").is_some() {
        let kept = replay_dir.keep();
        eprintln!("replay log kept in {}", kept.display());
        (kept, None)
    } else {
        (replay_dir.path().to_path_buf(), Some(replay_dir))
    };
    let fill = rt.block_on(write_load(&dir, 64, 1e9, REPLAY_MUTATIONS));
    let wal_bytes = std::fs::metadata(dir.join("objects.wal"))
        .map(|m| m.len())
        .unwrap_or(0);
    let child = std::process::Command::new(std::env::current_exe().expect("exe"))
        .arg("replay")
        .arg(&dir)
        .output()
        .expect("replay child");
    let text = String::from_utf8_lossy(&child.stdout);
    let f: Vec<&str> = text.split_whitespace().collect();
    let replay_line = format!(
        "| {} | {:.0} MiB | {} s | {} | {} | {:.0} MiB | {:.0} MiB |\n",
        fill.writes,
        wal_bytes as f64 / (1 << 20) as f64,
        f.first()
            .map(|s| format!("{:.2}", s.parse::<f64>().unwrap_or(0.0)))
            .unwrap_or_default(),
        f.get(1).unwrap_or(&"?"),
        f.get(2).unwrap_or(&"?"),
        f.get(3).and_then(|s| s.parse::<f64>().ok()).unwrap_or(0.0) / 1024.0,
        f.get(4).and_then(|s| s.parse::<f64>().ok()).unwrap_or(0.0) / 1024.0,
    );
    eprint!("{replay_line}");
    table.push_str("\n| Mutations written | objects.wal size | replay time | replayed | objects | peak RSS | RSS after |\n");
    table.push_str("|------:|------:|------:|------:|------:|------:|------:|\n");
    table.push_str(&replay_line);

    print!("{table}");
    if let Some(out) = out {
        let doc = format!(
            "# objects.wal benchmark\n\nProduced by `bench/wal.sh` (release build, `cargo run \
             --release --example wal_bench`). Each write is a ~1 KiB ConfigMap create; a write \
             returns after its group-committed batch is written, fdatasync'ed and applied. \
             Write runs last {WRITE_SECONDS} s each. The replay opens a log of \
             {REPLAY_MUTATIONS} Mutations (no checkpoint) in a fresh process; peak RSS is that \
             process's VmHWM (target: replay under 2 s).\n\n{table}\n"
        );
        std::fs::write(&out, doc).expect("write the table");
    }
}
