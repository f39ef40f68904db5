//! The store's apply path alone, as every member's Raft thread runs it: 1 KiB ConfigMap
//! creates, prepared off-thread as a leader's proposals are, applied in batches of 32 under
//! one lock (`Store::apply_prepared_batch`) to a store that already holds many objects in an
//! open namespace. No disk, no network: what one create costs the state machine, which the
//! HA benchmark cannot separate from the host's noise. Prints a Markdown table and, with
//! `--out FILE`, writes it there.
//!
//! `STORE_BENCH_ROUNDS` (default 5) rounds of `STORE_BENCH_CREATES` (default 50,000) creates
//! each, into stores preloaded with 0 and 50,000 objects; each row gives the median round and
//! the range. Then the resident memory a stored object costs with a label all objects share,
//! with a label value of its own, and without labels, each measured in a fresh child process
//! (this program re-executed with `memory`).

use std::time::Instant;

use litek8s::kube::mutation::Mutation;
use litek8s::kube::object::ObjectKey;
use litek8s::kube::prepared_object::{PreparedCache, PreparedObject};
use litek8s::kube::store::{Store, StoreConfig};
use serde_json::{json, Value};

const BATCH: usize = 32;
/// Creates stored by the memory measurement.
const MEMORY_OBJECTS: usize = 100_000;

fn env_usize(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// The labels of the benchmark's ConfigMaps.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Labels {
    /// `app: store-bench` on every object.
    Shared,
    /// `app: <the object's name>`: a value no other object carries.
    Own,
    None,
}

impl Labels {
    const ALL: [Labels; 3] = [Labels::Shared, Labels::Own, Labels::None];

    fn arg(self) -> &'static str {
        match self {
            Labels::Shared => "shared",
            Labels::Own => "own",
            Labels::None => "none",
        }
    }
}

fn configmap(name: &str, labels: Labels) -> Value {
    let mut object = json!({"apiVersion":"v1","kind":"ConfigMap",
           "metadata":{"name":name,"namespace":"bench","uid":format!("uid-{name}")},
           "data":{"payload":"x".repeat(880)}});
    match labels {
        Labels::Shared => object["metadata"]["labels"] = json!({"app": "store-bench"}),
        Labels::Own => object["metadata"]["labels"] = json!({"app": name}),
        Labels::None => {}
    }
    object
}

fn create(name: &str, labels: Labels) -> (Mutation, PreparedCache) {
    let object = configmap(name, labels);
    let prepared = PreparedCache::new(PreparedObject::prepare("configmaps", &object));
    let mutation = Mutation::Create {
        key: ObjectKey::new("configmaps", "bench", name),
        object,
        requires_open_namespace: true,
    };
    (mutation, prepared)
}

/// A store holding the namespace and `preload` ConfigMaps labelled with `labels`.
fn store_with(preload: usize, labels: Labels) -> Store {
    let store = Store::new(StoreConfig::default());
    let namespace = Mutation::Create {
        key: ObjectKey::new("namespaces", "", "bench"),
        object: json!({"apiVersion":"v1","kind":"Namespace",
                       "metadata":{"name":"bench","uid":"ns-bench"}}),
        requires_open_namespace: false,
    };
    store.apply(namespace).expect("namespace");
    for chunk in (0..preload).collect::<Vec<_>>().chunks(BATCH) {
        let batch: Vec<_> = chunk
            .iter()
            .map(|i| create(&format!("pre-{i}"), labels))
            .collect();
        for result in store.apply_prepared_batch(batch) {
            result.expect("preload");
        }
    }
    store
}

/// Seconds to apply `creates` creates to a store preloaded with `preload` objects.
fn round(preload: usize, creates: usize, round: usize) -> f64 {
    let store = store_with(preload, Labels::Shared);
    let batches: Vec<Vec<_>> = (0..creates)
        .collect::<Vec<_>>()
        .chunks(BATCH)
        .map(|chunk| {
            chunk
                .iter()
                .map(|i| create(&format!("r{round}-{i:07}"), Labels::Shared))
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
    let store = store_with(0, Labels::Shared);
    let mut results = store.apply_prepared_batch([create("probe", Labels::Shared)]);
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

/// The child (`store_bench memory shared|own|none`): prints the resident bytes per stored
/// object, the growth of this fresh process while a store takes `MEMORY_OBJECTS` creates.
fn memory_child(labels: Labels) {
    let before = resident_bytes();
    let store = store_with(MEMORY_OBJECTS, labels);
    let after = resident_bytes();
    std::hint::black_box(&store);
    println!(
        "{}",
        after.saturating_sub(before) as f64 / MEMORY_OBJECTS as f64
    );
}

/// Runs `memory_child` in a fresh process, so that no memory freed earlier is reused.
fn bytes_per_object(labels: Labels) -> f64 {
    let output = std::env::current_exe()
        .and_then(|exe| {
            std::process::Command::new(exe)
                .args(["memory", labels.arg()])
                .output()
        })
        .unwrap_or_else(|e| {
            eprintln!("store_bench: cannot run the memory child: {e}");
            std::process::exit(1);
        });
    String::from_utf8_lossy(&output.stdout)
        .trim()
        .parse()
        .unwrap_or_else(|_| {
            eprintln!(
                "store_bench: the memory child failed: {}",
                String::from_utf8_lossy(&output.stderr)
            );
            std::process::exit(1);
        })
}

// The server's allocator, as in `litek8s`: this process's own work (the client, or the
// server's code run in-process) is measured on it.
litek8s::use_server_allocator!();

fn main() {
    let mut out = None;
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "memory" => {
                let kind = args.next();
                let Some(labels) = Labels::ALL
                    .into_iter()
                    .find(|l| Some(l.arg()) == kind.as_deref())
                else {
                    eprintln!("store_bench: memory takes shared, own or none");
                    std::process::exit(2);
                };
                memory_child(labels);
                return;
            }
            "--out" => out = args.next(),
            other => {
                eprintln!("store_bench: unknown argument {other}");
                std::process::exit(2);
            }
        }
    }
    let [shared, own, none] = Labels::ALL.map(bytes_per_object);
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
        "\nResident memory per stored object ({MEMORY_OBJECTS} creates into a fresh store in a \
         fresh process): {shared:.0} bytes with one label all objects share, {own:.0} bytes \
         with a label value of its own, {none:.0} bytes without labels; the stored JSON of one \
         is {} bytes with the shared label.\n",
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
