//! The store's apply path alone, as every member's Raft thread runs it: 1 KiB ConfigMap
//! creates, prepared off-thread as a leader's proposals are, applied in batches of 32 under
//! one lock (`Store::apply_prepared_batch`) to a store that already holds many objects in an
//! open namespace. No disk, no network: what one create costs the state machine, which the
//! HA benchmark cannot separate from the host's noise. Prints a Markdown table and, with
//! `--out FILE`, writes it there.
//!
//! `STORE_BENCH_ROUNDS` (default 5) rounds of `STORE_BENCH_CREATES` (default 50,000) creates
//! each, into stores preloaded with 0 and 50,000 objects; each row gives the median round and
//! the range.

use std::time::Instant;

use litek8s::kube::mutation::Mutation;
use litek8s::kube::object::ObjectKey;
use litek8s::kube::prepared_object::{PreparedCache, PreparedObject};
use litek8s::kube::store::{Store, StoreConfig};
use serde_json::{json, Value};

const BATCH: usize = 32;

fn env_usize(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn configmap(name: &str) -> Value {
    json!({"apiVersion":"v1","kind":"ConfigMap",
           "metadata":{"name":name,"namespace":"bench","uid":format!("uid-{name}"),
                       "labels":{"app":"store-bench"}},
           "data":{"payload":"x".repeat(880)}})
}

fn create(name: &str) -> (Mutation, PreparedCache) {
    let object = configmap(name);
    let prepared = PreparedCache::new(PreparedObject::prepare("configmaps", &object));
    let mutation = Mutation::Create {
        key: ObjectKey::new("configmaps", "bench", name),
        object,
        requires_open_namespace: true,
    };
    (mutation, prepared)
}

/// A store holding the namespace and `preload` ConfigMaps.
fn store_with(preload: usize) -> Store {
    let store = Store::new(StoreConfig::default());
    let namespace = Mutation::Create {
        key: ObjectKey::new("namespaces", "", "bench"),
        object: json!({"apiVersion":"v1","kind":"Namespace",
                       "metadata":{"name":"bench","uid":"ns-bench"}}),
        requires_open_namespace: false,
    };
    store.apply(namespace).expect("namespace");
    for chunk in (0..preload).collect::<Vec<_>>().chunks(BATCH) {
        let batch: Vec<_> = chunk.iter().map(|i| create(&format!("pre-{i}"))).collect();
        for result in store.apply_prepared_batch(batch) {
            result.expect("preload");
        }
    }
    store
}

/// Seconds to apply `creates` creates to a store preloaded with `preload` objects.
fn round(preload: usize, creates: usize, round: usize) -> f64 {
    let store = store_with(preload);
    let batches: Vec<Vec<_>> = (0..creates)
        .collect::<Vec<_>>()
        .chunks(BATCH)
        .map(|chunk| {
            chunk
                .iter()
                .map(|i| create(&format!("r{round}-{i:07}")))
                .collect()
        })
        .collect();
    let start = Instant::now();
    for batch in batches {
        for result in store.apply_prepared_batch(batch) {
            result.expect("create");
        }
    }
    start.elapsed().as_secs_f64()
}

/// The length of one stored create's JSON.
fn stored_json_len() -> usize {
    let store = store_with(0);
    let mut results = store.apply_prepared_batch([create("probe")]);
    results
        .pop()
        .and_then(Result::ok)
        .map_or(0, |stored| stored.json.len())
}

/// The process's resident memory in bytes (`/proc/self/statm`).
fn resident_bytes() -> u64 {
    std::fs::read_to_string("/proc/self/statm")
        .ok()
        .and_then(|statm| statm.split_whitespace().nth(1)?.parse::<u64>().ok())
        .map_or(0, |pages| pages * 4096)
}

/// Resident bytes per stored object: the growth of this process while a store takes `count`
/// creates (the store kept alive until measured).
fn bytes_per_object(count: usize) -> f64 {
    let before = resident_bytes();
    let store = store_with(count);
    let after = resident_bytes();
    std::hint::black_box(&store);
    after.saturating_sub(before) as f64 / count as f64
}

fn main() {
    let mut out = None;
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--out" => out = args.next(),
            other => {
                eprintln!("store_bench: unknown argument {other}");
                std::process::exit(2);
            }
        }
    }
    // First, while this process's heap is fresh: memory freed by the rounds below would be
    // reused by a later store.
    let per_object = bytes_per_object(100_000);
    let rounds = env_usize("STORE_BENCH_ROUNDS", 5).max(1);
    let creates = env_usize("STORE_BENCH_CREATES", 50_000).max(BATCH);
    let mut md = format!(
        "| objects already stored | creates applied | creates/s (median of {rounds}) | range | µs per create |\n|---|---|---|---|---|\n"
    );
    for preload in [0, 50_000] {
        let mut rates: Vec<f64> = (0..rounds)
            .map(|r| creates as f64 / round(preload, creates, r))
            .collect();
        rates.sort_by(f64::total_cmp);
        let median = rates[rates.len() / 2];
        let line = format!(
            "| {preload} | {creates} | {median:.0} | {:.0}–{:.0} | {:.2} |\n",
            rates[0],
            rates[rates.len() - 1],
            1e6 / median
        );
        print!("{line}");
        md.push_str(&line);
    }
    let line = format!(
        "\nResident memory per stored object (100,000 creates into a fresh store, its namespace \
         open): {per_object:.0} bytes; the stored JSON of one is {} bytes.\n",
        stored_json_len()
    );
    print!("{line}");
    md.push_str(&line);
    if let Some(path) = out {
        if let Err(e) = std::fs::write(&path, &md) {
            eprintln!("store_bench: cannot write {path}: {e}");
            std::process::exit(1);
        }
    }
}
