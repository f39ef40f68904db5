//! Benchmark of the Raft log engine (run through bench/log.sh): the disk's raw fdatasync rate,
//! a single-node openraft cluster over the log with 1, 16 and 256 concurrent proposers of
//! 1 KiB Mutations through the batcher, and replay of 100,000 entries (in a child process, so
//! its peak RSS is its own). Prints a table and writes it to the file given as `--out`.

use std::collections::BTreeMap;
use std::fs::OpenOptions;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use litek8s::kube::mutation::{Mutation, Precondition};
use litek8s::kube::object::ObjectKey;
use litek8s::kube::store::{Store, StoreConfig};
use litek8s::raft::batcher::{BatchLimits, Batcher};
use litek8s::raft::log::{LogConfig, LogStore};
use litek8s::raft::state_machine::StateMachine;
use litek8s::raft::types::{Batch, Entry, NodeId, Proposal, TypeConfig};
use openraft::error::{InstallSnapshotError, RPCError, RaftError, Unreachable};
use openraft::network::{RPCOption, RaftNetwork, RaftNetworkFactory};
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, InstallSnapshotRequest, InstallSnapshotResponse,
    VoteRequest, VoteResponse,
};
use openraft::{BasicNode, CommittedLeaderId, EntryPayload, LogId, ServerState};

type RpcErr<E = RaftError<NodeId>> = RPCError<NodeId, BasicNode, E>;

/// A single node never sends RPCs.
struct NoNet;

impl RaftNetworkFactory<TypeConfig> for NoNet {
    type Network = NoNet;
    async fn new_client(&mut self, _target: NodeId, _node: &BasicNode) -> NoNet {
        NoNet
    }
}

fn unreachable<E: std::error::Error>() -> RpcErr<E> {
    RPCError::Unreachable(Unreachable::new(&std::io::Error::other("single node")))
}

impl RaftNetwork<TypeConfig> for NoNet {
    async fn append_entries(
        &mut self,
        _rpc: AppendEntriesRequest<TypeConfig>,
        _option: RPCOption,
    ) -> Result<AppendEntriesResponse<NodeId>, RpcErr> {
        Err(unreachable())
    }
    async fn install_snapshot(
        &mut self,
        _rpc: InstallSnapshotRequest<TypeConfig>,
        _option: RPCOption,
    ) -> Result<InstallSnapshotResponse<NodeId>, RpcErr<RaftError<NodeId, InstallSnapshotError>>>
    {
        Err(unreachable())
    }
    async fn vote(
        &mut self,
        _rpc: VoteRequest<NodeId>,
        _option: RPCOption,
    ) -> Result<VoteResponse<NodeId>, RpcErr> {
        Err(unreachable())
    }
}

/// Writes 4 KiB and fdatasyncs it, in a preallocated zero-filled file, for `secs`.
fn raw_fdatasync_rate(dir: &Path, secs: f64) -> f64 {
    let path = dir.join("raw.bin");
    let size: u64 = 64 << 20;
    let file = OpenOptions::new()
        .create(true)
        .truncate(true)
        .read(true)
        .write(true)
        .open(&path)
        .expect("raw file");
    let zeros = vec![0u8; 1 << 20];
    for i in 0..(size >> 20) {
        file.write_all_at(&zeros, i << 20).expect("prefill");
    }
    file.sync_all().expect("sync");
    let block = vec![7u8; 4096];
    let start = Instant::now();
    let mut n = 0u64;
    while start.elapsed().as_secs_f64() < secs {
        file.write_all_at(&block, (n * 4096) % size).expect("write");
        file.sync_data().expect("fdatasync");
        n += 1;
    }
    n as f64 / start.elapsed().as_secs_f64()
}

fn object(name: &str) -> serde_json::Value {
    serde_json::json!({"apiVersion":"v1","kind":"ConfigMap",
        "metadata":{"name":name,"namespace":"bench"},"data":{"v":"x".repeat(900)}})
}

struct EngineResult {
    ops_per_sec: f64,
    p50_ms: f64,
    p99_ms: f64,
    entries: u64,
}

/// A single-node Raft over the log; `proposers` tasks each update their own 1 KiB object
/// through the batcher for `secs`.
async fn engine(dir: &Path, proposers: usize, secs: f64) -> EngineResult {
    let log = LogStore::open(&dir.join("log"), LogConfig::default()).expect("log");
    let store = Arc::new(Store::new(StoreConfig::default()));
    let sm = StateMachine::open(&dir.join("sm"), store.clone()).expect("sm");
    let mut config = openraft::Config {
        heartbeat_interval: 250,
        election_timeout_min: 1000,
        election_timeout_max: 2000,
        ..Default::default()
    };
    litek8s::raft::snapshot::apply_policy(&mut config);
    let config = Arc::new(config.validate().expect("config"));
    // As in the server (cluster::node): the Raft core and state machine worker run on a
    // runtime of their own with one worker thread; the proposers run on the caller's runtime.
    let raft_runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .thread_name("litek8s-raft")
        .enable_all()
        .build()
        .expect("raft runtime");
    let raft_log = log.clone();
    let raft = raft_runtime
        .spawn(async move { openraft::Raft::new(1, config, NoNet, raft_log, sm).await })
        .await
        .expect("raft task")
        .expect("raft");
    raft.initialize(BTreeMap::from([(1, BasicNode::default())]))
        .await
        .expect("initialize");
    raft.wait(Some(Duration::from_secs(10)))
        .state(ServerState::Leader, "leader")
        .await
        .expect("leader");
    let raft = Arc::new(raft);
    // LOG_BENCH_IN_FLIGHT overrides the batches in flight (2 by default) for comparisons.
    let mut limits = BatchLimits::default();
    if let Some(n) = std::env::var("LOG_BENCH_IN_FLIGHT")
        .ok()
        .and_then(|v| v.parse().ok())
    {
        limits.in_flight = n;
    }
    let batcher = Batcher::start(raft.clone(), limits);
    let deadline = Instant::now() + Duration::from_secs_f64(secs);
    let mut tasks = Vec::new();
    let start = Instant::now();
    for p in 0..proposers {
        let batcher = batcher.clone();
        tasks.push(tokio::spawn(async move {
            let name = format!("p{p}");
            let key = ObjectKey::new("configmaps", "bench", &name);
            let create = Mutation::Create {
                key: key.clone(),
                object: object(&name),
                requires_open_namespace: false,
            };
            batcher.submit(Proposal::new(create)).await.expect("create");
            // Every update carries its own copy of the whole 1 KiB object; cloning a prepared
            // one keeps the client's cost of building it out of the measurement.
            let prepared = object(&name);
            let mut latencies = Vec::new();
            while Instant::now() < deadline {
                let update = Mutation::Update {
                    key: key.clone(),
                    object: prepared.clone(),
                    precondition: Precondition::none(),
                };
                let t = Instant::now();
                batcher.submit(Proposal::new(update)).await.expect("update");
                latencies.push(t.elapsed());
            }
            latencies
        }));
    }
    let mut all = Vec::new();
    for t in tasks {
        all.extend(t.await.expect("task"));
    }
    let elapsed = start.elapsed().as_secs_f64();
    all.sort();
    let pct = |q: f64| all.get(((all.len() as f64 * q) as usize).min(all.len().saturating_sub(1)));
    let ms = |d: Option<&Duration>| d.map_or(0.0, |d| d.as_secs_f64() * 1000.0);
    let entries = log.log_state().expect("state").1.map_or(0, |l| l.index);
    let _ = raft.shutdown().await;
    raft_runtime.shutdown_background();
    EngineResult {
        ops_per_sec: all.len() as f64 / elapsed,
        p50_ms: ms(pct(0.50)),
        p99_ms: ms(pct(0.99)),
        entries,
    }
}

fn median(values: &[f64]) -> f64 {
    let mut sorted = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    sorted.get(sorted.len() / 2).copied().unwrap_or(f64::NAN)
}

/// The round with the median rate (its latencies and entry count go with it).
fn median_by_rate(results: &[EngineResult]) -> &EngineResult {
    let mut sorted: Vec<&EngineResult> = results.iter().collect();
    sorted.sort_by(|a, b| a.ops_per_sec.total_cmp(&b.ops_per_sec));
    sorted[sorted.len() / 2]
}

/// "min–max" of rates, rounded.
fn range(values: impl Iterator<Item = f64>) -> String {
    let (lo, hi) = values.fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), v| {
        (lo.min(v), hi.max(v))
    });
    format!("{lo:.0}–{hi:.0}")
}

/// "min–max%" of ratios.
fn range_pct(ratios: &[f64]) -> String {
    format!("{}%", range(ratios.iter().map(|r| r * 100.0)))
}

fn proc_status(field: &str) -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find(|l| l.starts_with(field))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

/// Child mode: opens the log in `dir` and prints "REPLAY <secs> <entries> <hwm kB> <rss kB>".
fn replay_child(dir: &Path) {
    let start = Instant::now();
    let log = LogStore::open(dir, LogConfig::default()).expect("open");
    let secs = start.elapsed().as_secs_f64();
    let entries = log.log_state().expect("state").1.map_or(0, |l| l.index);
    println!(
        "REPLAY {secs} {entries} {} {}",
        proc_status("VmHWM:"),
        proc_status("VmRSS:")
    );
}

/// Writes `count` entries of one 1 KiB Mutation each.
async fn write_entries(dir: &Path, count: u64) {
    let log = LogStore::open(dir, LogConfig::default()).expect("open");
    let mut index = 1;
    while index <= count {
        let entries: Vec<Entry> = (index..(index + 500).min(count + 1))
            .map(|i| Entry {
                log_id: LogId::new(CommittedLeaderId::new(1, 1), i),
                payload: EntryPayload::Normal(Batch::new(vec![Proposal::new(Mutation::Create {
                    key: ObjectKey::new("configmaps", "bench", format!("c{i}")),
                    object: object(&format!("c{i}")),
                    requires_open_namespace: false,
                })])),
            })
            .collect();
        index += entries.len() as u64;
        let (tx, rx) = tokio::sync::oneshot::channel();
        log.append_with(entries, move |r| drop(tx.send(r)))
            .expect("append");
        rx.await.expect("flush").expect("flush ok");
    }
}

// The server's allocator, as in `litek8s`: this process's own work (the client, or the
// server's code run in-process) is measured on it.
litek8s::use_server_allocator!();

fn main() {
    // The server's allocator settings (`litek8s` calls this first thing in `main`, and the
    // server starts the tuner below): a benchmark that ran with mimalloc's defaults instead
    // would pay page faults the server does not (docs/performance-notes.md, "The benchmark with
    // the server's allocator").
    litek8s::tune_allocator(litek8s::Allocator::Mimalloc);
    let args: Vec<String> = std::env::args().collect();
    if let Some(pos) = args.iter().position(|a| a == "--replay") {
        replay_child(Path::new(&args[pos + 1]));
        return;
    }
    let out = args
        .iter()
        .position(|a| a == "--out")
        .map(|p| PathBuf::from(&args[p + 1]));
    let secs: f64 = std::env::var("LOG_BENCH_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(3.0);
    let base = std::env::var("LOG_BENCH_DIR").map_or_else(|_| std::env::temp_dir(), PathBuf::from);
    let tmp = tempfile::tempdir_in(base).expect("tempdir");
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    rt.spawn(litek8s::allocator::tune_for_load_when_heap_grows());

    // LOG_BENCH_ONLY=256 runs one engine case alone (for profiling); the table then has only it.
    let only: Option<usize> = std::env::var("LOG_BENCH_ONLY")
        .ok()
        .and_then(|s| s.parse().ok());
    // Rounds alternate the cases (raw, 1, 16, 256, raw, 1, …) so that a slow moment of a noisy
    // host lands on every case rather than on one; the table gives the median round and the
    // range. The 1-proposer ratio is taken against the raw rate of the same round.
    let rounds = std::env::var("LOG_BENCH_ROUNDS")
        .ok()
        .and_then(|s| s.parse::<usize>().ok())
        .unwrap_or(3)
        .max(1);
    let cases: Vec<usize> = [1usize, 16, 256]
        .into_iter()
        .filter(|p| only.is_none_or(|o| o == *p))
        .collect();
    let mut raws = Vec::new();
    let mut results: Vec<Vec<EngineResult>> = cases.iter().map(|_| Vec::new()).collect();
    let mut single_ratios = Vec::new();
    for round in 0..rounds {
        let raw = raw_fdatasync_rate(tmp.path(), secs);
        eprintln!("round {round}: raw fdatasync: {raw:.0}/s");
        raws.push(raw);
        for (case, &proposers) in cases.iter().enumerate() {
            let dir = tmp.path().join(format!("engine{proposers}-{round}"));
            let r = rt.block_on(engine(&dir, proposers, secs));
            eprintln!(
                "round {round}: {proposers} proposers: {:.0}/s (p50 {:.2} ms, {} entries)",
                r.ops_per_sec, r.p50_ms, r.entries
            );
            if proposers == 1 {
                single_ratios.push(r.ops_per_sec / raw);
            }
            results[case].push(r);
            let _ = std::fs::remove_dir_all(&dir);
        }
    }
    if only.is_some() {
        return;
    }
    let raw = median(&raws);
    let single_ratio = median(&single_ratios);
    let rows: Vec<(usize, Vec<EngineResult>)> = cases.into_iter().zip(results).collect();
    let replay_dir = tmp.path().join("replay");
    rt.block_on(write_entries(&replay_dir, 100_000));
    let child = std::process::Command::new(std::env::current_exe().expect("exe"))
        .args(["--replay", replay_dir.to_str().unwrap_or_default()])
        .output()
        .expect("replay child");
    let text = String::from_utf8_lossy(&child.stdout);
    let fields: Vec<f64> = text
        .lines()
        .find_map(|l| l.strip_prefix("REPLAY "))
        .map(|l| {
            l.split_whitespace()
                .filter_map(|v| v.parse().ok())
                .collect()
        })
        .unwrap_or_default();
    let (replay_secs, replayed, hwm, rss) = match fields.as_slice() {
        [a, b, c, d] => (*a, *b, *c, *d),
        _ => (f64::NAN, 0.0, 0.0, 0.0),
    };

    let mut table = String::new();
    table.push_str(&format!(
        "# Raft log benchmark\n\nCores: {cores}. Each engine run: {secs} s, single-node openraft 0.9 over the log, 1 KiB Mutations through the batcher. {rounds} rounds, the cases alternating within each round; each row is the median round, with the range over rounds.\n\n"
    ));
    table.push_str("| measurement | value | target | ratio / verdict |\n|---|---|---|---|\n");
    table.push_str(&format!(
        "| raw fdatasync (4 KiB write + fdatasync, preallocated) | {raw:.0}/s, range {} | | |\n",
        range(raws.iter().copied())
    ));
    let one_rate = rows
        .iter()
        .find(|(p, _)| *p == 1)
        .map_or(f64::NAN, |(_, rs)| median_by_rate(rs).ops_per_sec);
    for (proposers, rs) in &rows {
        let r = median_by_rate(rs);
        let (target, verdict) = match proposers {
            1 => (
                "≥ 80% of raw fdatasync".to_string(),
                format!(
                    "{:.0}% of raw (median of per-round ratios; {})",
                    100.0 * single_ratio,
                    range_pct(&single_ratios)
                ),
            ),
            256 => (
                "≥ 100,000/s".to_string(),
                format!("{:.2}× target", r.ops_per_sec / 100_000.0),
            ),
            _ => (
                String::new(),
                format!("{:.1}× one proposer", r.ops_per_sec / one_rate),
            ),
        };
        table.push_str(&format!(
            "| {proposers} proposer(s): Mutations/s (p50 / p99 latency; log entries) | {:.0}/s, range {} ({:.2} / {:.2} ms; {} entries) | {target} | {verdict} |\n",
            r.ops_per_sec, range(rs.iter().map(|r| r.ops_per_sec)), r.p50_ms, r.p99_ms, r.entries
        ));
    }
    table.push_str(&format!(
        "| replay of {replayed:.0} entries (open) | {:.3} s | < 1 s | {} |\n",
        replay_secs,
        if replay_secs < 1.0 { "met" } else { "missed" }
    ));
    table.push_str(&format!(
        "| RSS of the replaying process (VmHWM / VmRSS after open) | {:.1} / {:.1} MiB | | |\n",
        hwm / 1024.0,
        rss / 1024.0
    ));
    println!("{table}");
    if let Some(out) = out {
        if let Err(e) = std::fs::write(&out, &table) {
            eprintln!("writing {}: {e}", out.display());
        }
    }
}
