//! The guarantees table of docs/guarantees.md: reads with resourceVersion unset, unconditional
//! writes and compare-and-swap writes on a few ConfigMaps, and creates racing on ConfigMaps that
//! start absent (a create is a compare-and-swap from "absent"; a create skips the ReadIndex round
//! when its namespace is known, `api::create`), issued concurrently through every member of a
//! 3-member cluster while the leader is SIGKILLed (and restarted) or a member is SIGSTOPped (hung,
//! not dead), must form a linearizable history. Each run records invoke/complete times and results
//! and checks every key with the register checker of `lincheck`.
//!
//! Register values are tokens the writers put in `data.v`, unique per write, so a read names
//! the write it saw even when that write timed out for its client; the resourceVersion each
//! token was stored under is cross-checked (one resourceVersion per token and vice versa).
//! `LIN_RUNS` (default 20), `LIN_RUN_MS` (default 4000) and `LIN_SEED` tune a run;
//! `bench/ha_soak.sh` runs many more.

mod cluster_support;
mod lincheck;
mod support;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use cluster_support::Cluster;
use lincheck::{Call, Op, Outcome, Value};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde_json::json;

const MEMBERS: usize = 3;
const CLIENTS_PER_MEMBER: usize = 2;
const KEYS: usize = 3;
/// Keys that start absent: clients race to create them (POST), a create being a
/// compare-and-swap from "absent" (201 took effect, 409 AlreadyExists found a value).
const CREATE_KEYS: usize = 2;
const ALL_KEYS: usize = KEYS + CREATE_KEYS;
/// A client gives up on a request after this long; the operation is then indeterminate.
const OP_TIMEOUT: Duration = Duration::from_secs(3);

fn env_or<T: std::str::FromStr>(name: &str, default: T) -> T {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// What one run records, shared by its clients.
struct Recorder {
    start: Instant,
    /// Per key: the operations.
    ops: Mutex<Vec<Vec<Op>>>,
    /// (token, resourceVersion) pairs reported by the servers.
    stored: Mutex<Vec<(Value, u64)>>,
    /// Responses the test does not expect at all (a bug in the test or the server).
    unexpected: Mutex<Vec<String>>,
}

impl Recorder {
    fn now(&self) -> u64 {
        self.start.elapsed().as_nanos() as u64
    }

    fn push(&self, key: usize, op: Op) {
        self.ops.lock().unwrap()[key].push(op);
    }
}

fn path(key: &str) -> String {
    format!("/api/v1/namespaces/default/configmaps/{key}")
}

/// The path of a read: linearizable (resourceVersion unset), or with `LIN_STALE_READS=1`
/// the local rv=0 read that may be stale — a demonstration that the test catches stale reads.
fn read_path(key: &str) -> String {
    if std::env::var("LIN_STALE_READS").is_ok_and(|v| v == "1") {
        format!("{}?resourceVersion=0", path(key))
    } else {
        path(key)
    }
}

fn body(key: &str, token: Value, rv: Option<u64>) -> Vec<u8> {
    let mut meta = json!({"name": key, "namespace": "default"});
    if let Some(rv) = rv {
        meta["resourceVersion"] = json!(rv.to_string());
    }
    serde_json::to_vec(&json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": meta, "data": {"v": token.to_string()}}))
    .expect("serialize")
}

/// `(data.v, resourceVersion)` of a ConfigMap response.
fn token_and_rv(resp: &support::Resp) -> Option<(Value, u64)> {
    let object = resp.json();
    let token = object["data"]["v"].as_str()?.parse().ok()?;
    Some((token, support::rv_of(&object)?))
}

/// One client: random operations on random keys through one member until `until`.
async fn client(
    id: usize,
    api: support::Api,
    keys: Arc<Vec<String>>,
    rec: Arc<Recorder>,
    tokens: Arc<AtomicU64>,
    seed: u64,
    until: Instant,
) {
    let mut rng = StdRng::seed_from_u64(seed);
    let mut conn: Option<support::Conn> = None;
    // The last (token, resourceVersion) this client saw per key: what a CAS expects.
    let mut last: Vec<Option<(Value, u64)>> = vec![None; ALL_KEYS];
    while Instant::now() < until {
        tokio::time::sleep(Duration::from_millis(rng.gen_range(5..40))).await;
        let k = rng.gen_range(0..ALL_KEYS);
        let dice: u32 = rng.gen_range(0..10);
        // A key this client has not seen yet may not exist: it creates it, or reads.
        let creates = k >= KEYS && last[k].is_none();
        let call = match (dice, last[k]) {
            (4.., None) if creates => Call::Cas {
                expect: 0,
                new: tokens.fetch_add(1, Ordering::Relaxed),
            },
            (0..=3, _) | (7.., None) => Call::Read(0),
            (4..=6, _) => Call::Write(tokens.fetch_add(1, Ordering::Relaxed)),
            (_, Some((expect, _))) => Call::Cas {
                expect,
                new: tokens.fetch_add(1, Ordering::Relaxed),
            },
        };
        if conn.is_none() {
            // Nothing was sent if the connection cannot be made: no operation happened.
            match tokio::time::timeout(OP_TIMEOUT, api.connect()).await {
                Ok(Ok(c)) => conn = Some(c),
                _ => {
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            }
        }
        let Some(c) = conn.as_mut() else { continue };
        let key = &keys[k];
        let (method, payload) = match call {
            Call::Read(_) => ("GET", Vec::new()),
            Call::Cas { new, .. } if creates => ("POST", body(key, new, None)),
            Call::Write(token) => ("PUT", body(key, token, None)),
            Call::Cas { new, .. } => ("PUT", body(key, new, last[k].map(|(_, rv)| rv))),
        };
        let target = match call {
            Call::Read(_) => read_path(key),
            _ if creates => "/api/v1/namespaces/default/configmaps".to_string(),
            _ => path(key),
        };
        let content_type = (method != "GET").then_some("application/json");
        let invoke = rec.now();
        let result = tokio::time::timeout(
            OP_TIMEOUT,
            c.request(method, &target, content_type, payload),
        )
        .await;
        let complete = rec.now();
        let op = |call, outcome| Op {
            client: id,
            call,
            outcome,
            invoke,
            complete: (outcome != Outcome::Unknown).then_some(complete),
        };
        let resp = match result {
            Ok(Ok(resp)) => resp,
            // Sent, and no answer: it may or may not have taken effect.
            Ok(Err(_)) | Err(_) => {
                conn = None;
                if !matches!(call, Call::Read(_)) {
                    rec.push(k, op(call, Outcome::Unknown));
                }
                continue;
            }
        };
        let seen = token_and_rv(&resp);
        match (call, resp.status, seen) {
            (Call::Read(_), 200, Some((token, rv))) => {
                rec.stored.lock().unwrap().push((token, rv));
                last[k] = Some((token, rv));
                rec.push(k, op(Call::Read(token), Outcome::Ok));
            }
            (Call::Read(_), 404, _) => rec.push(k, op(Call::Read(0), Outcome::Ok)),
            (Call::Write(token) | Call::Cas { new: token, .. }, 200 | 201, Some((got, rv)))
                if got == token && (resp.status == 201) == creates =>
            {
                rec.stored.lock().unwrap().push((token, rv));
                last[k] = Some((token, rv));
                rec.push(k, op(call, Outcome::Ok));
            }
            (Call::Cas { .. }, 409, _) => rec.push(k, op(call, Outcome::CasFailed)),
            // An unconditional PUT that lost its internal retries: certainly no effect.
            (Call::Write(_), 409, _) => {}
            // Failed reads change nothing; failed writes may have happened.
            (Call::Read(_), 429 | 500.., _) => {}
            (_, 429 | 500.., _) => rec.push(k, op(call, Outcome::Unknown)),
            (call, status, _) => rec.unexpected.lock().unwrap().push(format!(
                "{call:?} on {key} via client {id}: {status} {}",
                resp.text()
            )),
        }
    }
}

#[derive(Debug, Clone, Copy)]
enum Fault {
    /// SIGKILL the leader, restart it after a pause.
    KillLeader,
    /// SIGSTOP the leader for a while, then SIGCONT.
    PauseLeader,
    /// SIGSTOP a member chosen at random (leader or follower).
    PauseMember,
}

/// The leader as any running member reports it.
async fn find_leader(cluster: &Cluster) -> Option<usize> {
    for ask in 0..cluster.members.len() {
        if let Some(l) = cluster.leader_within(ask, Duration::from_secs(2)).await {
            return Some(l);
        }
    }
    None
}

async fn inject(cluster: &mut Cluster, fault: Fault, rng: &mut StdRng) -> String {
    let target = match fault {
        Fault::PauseMember => Some(rng.gen_range(0..MEMBERS)),
        _ => find_leader(cluster).await,
    };
    let Some(target) = target else {
        return format!("{fault:?}: no leader found, nothing done");
    };
    // Some pauses outlast the clients' timeout, leaving indeterminate operations behind.
    let pause = Duration::from_millis(rng.gen_range(300..4000));
    match fault {
        Fault::KillLeader => {
            cluster.kill(target);
            tokio::time::sleep(pause).await;
            tokio::task::block_in_place(|| cluster.restart(target));
        }
        Fault::PauseLeader | Fault::PauseMember => {
            cluster.pause(target);
            tokio::time::sleep(pause).await;
            cluster.resume(target);
        }
    }
    format!("{fault:?} lk{} for {} ms", target + 1, pause.as_millis())
}

/// The resourceVersion ↔ token cross-check: each write got one resourceVersion, each
/// resourceVersion belongs to one write.
fn check_stored(stored: &[(Value, u64)]) -> Vec<String> {
    let mut by_token: BTreeMap<Value, u64> = BTreeMap::new();
    let mut by_rv: BTreeMap<u64, Value> = BTreeMap::new();
    let mut problems = Vec::new();
    for &(token, rv) in stored {
        if let Some(&other) = by_token.get(&token) {
            if other != rv {
                problems.push(format!("token {token} seen at rv {other} and {rv}"));
            }
        }
        if let Some(&other) = by_rv.get(&rv) {
            if other != token {
                problems.push(format!("rv {rv} holds token {other} and {token}"));
            }
        }
        by_token.insert(token, rv);
        by_rv.insert(rv, token);
    }
    problems
}

fn describe(ops: &[Op]) -> String {
    let mut sorted = ops.to_vec();
    sorted.sort_by_key(|o| o.invoke);
    sorted
        .iter()
        .map(|o| {
            format!(
                "  c{} {:>8.3}..{:>8} {:?} {:?}",
                o.client,
                o.invoke as f64 / 1e9,
                o.complete
                    .map(|t| format!("{:.3}", t as f64 / 1e9))
                    .unwrap_or_else(|| "?".into()),
                o.call,
                o.outcome
            )
        })
        .collect::<Vec<_>>()
        .join("\n")
}

#[derive(Default)]
struct Totals {
    ops: usize,
    unknown: usize,
    cas_ok: usize,
    cas_failed: usize,
    reads: usize,
    creates: usize,
    check: Duration,
    max_key_ops: usize,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn histories_under_kills_and_pauses_are_linearizable() {
    let runs: usize = env_or("LIN_RUNS", 20);
    let run_ms: u64 = env_or("LIN_RUN_MS", 4000);
    let seed: u64 = env_or(
        "LIN_SEED",
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(1),
    );
    eprintln!("linearizability: {runs} runs of {run_ms} ms, LIN_SEED={seed}");
    let started = Instant::now();
    let mut cluster = Cluster::start(MEMBERS);
    cluster.wait_leader().await;
    let tokens = Arc::new(AtomicU64::new(1));
    let mut totals = Totals::default();
    for run in 0..runs {
        let mut rng = StdRng::seed_from_u64(seed.wrapping_add(run as u64 * 7919));
        // Fresh keys per run: a late effect of an earlier run's timed-out write cannot leak
        // into this run's history.
        let keys: Arc<Vec<String>> = Arc::new(
            (0..ALL_KEYS)
                .map(|k| match k < KEYS {
                    true => format!("lin-{run}-k{k}"),
                    false => format!("lin-{run}-c{k}"),
                })
                .collect(),
        );
        let mut initial = Vec::new();
        for key in keys.iter().take(KEYS) {
            let token = tokens.fetch_add(1, Ordering::Relaxed);
            let api = cluster.api(rng.gen_range(0..MEMBERS));
            let resp = api
                .request(
                    "POST",
                    "/api/v1/namespaces/default/configmaps",
                    Some("application/json"),
                    body(key, token, None),
                )
                .await
                .expect("create key");
            assert_eq!(resp.status, 201, "create {key}: {}", resp.text());
            initial.push(token);
        }
        initial.resize(ALL_KEYS, 0);
        let rec = Arc::new(Recorder {
            start: Instant::now(),
            ops: Mutex::new(vec![Vec::new(); ALL_KEYS]),
            stored: Mutex::new(Vec::new()),
            unexpected: Mutex::new(Vec::new()),
        });
        let until = Instant::now() + Duration::from_millis(run_ms);
        let mut tasks = Vec::new();
        for m in 0..MEMBERS {
            for c in 0..CLIENTS_PER_MEMBER {
                let id = m * CLIENTS_PER_MEMBER + c;
                tasks.push(tokio::spawn(client(
                    id,
                    cluster.api(m),
                    keys.clone(),
                    rec.clone(),
                    tokens.clone(),
                    rng.gen(),
                    until,
                )));
            }
        }
        tokio::time::sleep(Duration::from_millis(rng.gen_range(300..1500))).await;
        let fault = match rng.gen_range(0..5) {
            0 | 1 => Fault::KillLeader,
            2 | 3 => Fault::PauseLeader,
            _ => Fault::PauseMember,
        };
        let what = inject(&mut cluster, fault, &mut rng).await;
        for t in tasks {
            t.await.expect("client task");
        }
        for i in 0..MEMBERS {
            tokio::task::block_in_place(|| cluster.wait_ready(i));
        }

        let unexpected = rec.unexpected.lock().unwrap().clone();
        assert!(
            unexpected.is_empty(),
            "LIN_SEED={seed} run {run}: unexpected responses: {unexpected:#?}"
        );
        let problems = check_stored(&rec.stored.lock().unwrap());
        assert!(
            problems.is_empty(),
            "LIN_SEED={seed} run {run}: resourceVersions disagree: {problems:?}"
        );
        let ops = rec.ops.lock().unwrap().clone();
        let checking = Instant::now();
        for (k, history) in ops.iter().enumerate() {
            if let Err(anomaly) = lincheck::check(initial[k], history) {
                panic!(
                    "LIN_SEED={seed} run {run} ({what}): {} is not linearizable: {anomaly:?}\n\
                     history (initial value {}):\n{}",
                    keys[k],
                    initial[k],
                    describe(history)
                );
            }
        }
        let check_time = checking.elapsed();
        let all: Vec<&Op> = ops.iter().flatten().collect();
        let count = |f: &dyn Fn(&Op) -> bool| all.iter().filter(|o| f(o)).count();
        let unknown = count(&|o| o.outcome == Outcome::Unknown);
        let cas_ok = count(&|o| matches!(o.call, Call::Cas { .. }) && o.outcome == Outcome::Ok);
        let cas_failed = count(&|o| o.outcome == Outcome::CasFailed);
        let reads = count(&|o| matches!(o.call, Call::Read(_)));
        let creates = count(&|o| matches!(o.call, Call::Cas { expect: 0, .. }));
        eprintln!(
            "run {run:>3}: {what}; {} ops ({reads} reads, {cas_ok} CAS ok, {cas_failed} CAS \
             conflicts, {unknown} indeterminate; {creates} of the CAS are creates); checked in \
             {check_time:?}",
            all.len()
        );
        totals.ops += all.len();
        totals.unknown += unknown;
        totals.cas_ok += cas_ok;
        totals.cas_failed += cas_failed;
        totals.reads += reads;
        totals.creates += creates;
        totals.check += check_time;
        totals.max_key_ops = totals
            .max_key_ops
            .max(ops.iter().map(Vec::len).max().unwrap_or(0));
    }
    eprintln!(
        "linearizability: {runs} runs, {} ops ({} reads, {} CAS ok, {} CAS conflicts, {} \
         indeterminate; {} creates), at most {} ops per key and run, checking took {:?}, all \
         in {:?}; LIN_SEED={seed}",
        totals.ops,
        totals.reads,
        totals.cas_ok,
        totals.cas_failed,
        totals.unknown,
        totals.creates,
        totals.max_key_ops,
        totals.check,
        started.elapsed()
    );
    // The history must exercise what it checks: not only reads, CAS both ways, and creates.
    assert!(totals.reads > 0 && totals.cas_ok > 0 && totals.cas_failed > 0);
    assert!(
        totals.creates >= runs,
        "too few creates: {}",
        totals.creates
    );
    assert!(
        totals.ops >= runs * 50,
        "too few operations: {}",
        totals.ops
    );
}
