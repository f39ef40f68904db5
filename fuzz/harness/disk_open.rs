//! The on-disk file check, shared by the `disk_open` fuzz target and `tests/fuzz_corpus.rs`:
//! opening a single server's `objects.wal` or the Raft log's segment files, whatever their
//! bytes, either succeeds or fails with an error; it never panics. When it succeeds, the file
//! takes one more write, and opening it again gives exactly what it held then (recovery that
//! cut a torn tail must leave a file that appends land in correctly, and must not find anything
//! different the second time).
//!
//! Input: byte 0 picks the file (even: `objects.wal`, odd: Raft log segments, numbered from
//! 1 + byte 0 / 2); the rest is the file's contents. For the Raft log, `\n--SEG--\n` splits
//! the rest into up to 5 consecutive segment files.

use std::path::Path;
use std::sync::{Arc, OnceLock};

use litek8s::kube::mutation::Mutation;
use litek8s::kube::object::ObjectKey;
use litek8s::kube::store::{Store, StoreConfig};
use litek8s::kube::wal::{WalConfig, WalWriter};
use litek8s::kube::writer::{WriteError, Writer};
use litek8s::raft::log::{LogConfig, LogStore};
use litek8s::raft::types::{Batch, Entry, LogId, Proposal, Vote};
use openraft::{CommittedLeaderId, EntryPayload};
use serde_json::json;

use crate::scratch::scratch_dir;

const SEGMENT_SEPARATOR: &[u8] = b"\n--SEG--\n";
const SEGMENT_SIZE: u64 = 64 << 10;

fn runtime() -> &'static tokio::runtime::Runtime {
    static RUNTIME: OnceLock<tokio::runtime::Runtime> = OnceLock::new();
    RUNTIME.get_or_init(|| {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("a tokio runtime")
    })
}

fn wal_config() -> WalConfig {
    WalConfig {
        preallocate_bytes: 64 << 10,
        ..WalConfig::default()
    }
}

fn log_config() -> LogConfig {
    LogConfig {
        segment_size: SEGMENT_SIZE,
        cache_bytes: 16 << 10,
        ..LogConfig::default()
    }
}

/// Shows why a file did not open, with `LITEK8S_FUZZ_VERBOSE` set.
fn verbose(error: &dyn std::fmt::Display) {
    if std::env::var_os("LITEK8S_FUZZ_VERBOSE").is_some() {
        eprintln!("open failed: {error}");
    }
}

/// What a WAL holds: the store's resourceVersion and every object's key, version and JSON.
type WalContents = (u64, Vec<(ObjectKey, u64, bytes::Bytes)>);

fn wal_contents(store: &Store) -> WalContents {
    let snapshot = store.snapshot();
    let objects = snapshot
        .iter()
        .map(|o| (o.key.clone(), o.resource_version, o.json.clone()))
        .collect();
    (snapshot.resource_version, objects)
}

fn open_wal(dir: &Path) -> Option<(Arc<Store>, WalWriter)> {
    let store = Arc::new(Store::new(StoreConfig::default()));
    let (writer, _) = WalWriter::open(dir, store.clone(), wal_config())
        .map_err(|e| verbose(&e))
        .ok()?;
    Some((store, writer))
}

/// A WAL that opened takes a new write, and opens again with exactly what it held then.
fn check_wal(bytes: &[u8]) {
    let dir = scratch_dir();
    std::fs::write(dir.path().join("objects.wal"), bytes).expect("write objects.wal");
    let Some((store, writer)) = open_wal(dir.path()) else {
        return;
    };
    let written = runtime().block_on(writer.write(Mutation::Create {
        key: ObjectKey::new("namespaces", "", "appended-after-open"),
        object: json!({"apiVersion": "v1", "kind": "Namespace",
            "metadata": {"name": "appended-after-open"}}),
        requires_open_namespace: false,
    }));
    match written {
        Ok(_) | Err(WriteError::Rejected(_)) => {}
        Err(e) => panic!("a write to a WAL that opened failed: {e}"),
    }
    let before = wal_contents(&store);
    drop(writer);
    let (store, _writer) = open_wal(dir.path()).expect("a WAL that opened once opens again");
    assert_eq!(
        before,
        wal_contents(&store),
        "a second open found different objects"
    );
}

/// Everything a reopened Raft log must reproduce, as JSON for comparison.
fn log_contents(log: &LogStore) -> String {
    let state = log.log_state().expect("the state of a log that opened");
    let first = state.0.map_or(0, |id| id.index + 1);
    let entries = match state.1 {
        Some(last) if last.index >= first => log
            .reader()
            .read(first, last.index + 1, usize::MAX)
            .map_err(|e| e.to_string()),
        _ => Ok(Vec::new()),
    };
    json!({
        "state": [state.0, state.1],
        "vote": log.vote(),
        "committed": log.committed(),
        "entries": entries.map(|e| serde_json::to_value(e).expect("entries encode")),
        "failure": log.failure(),
    })
    .to_string()
}

/// A log that opened takes the next entry, and opens again with exactly what it held then.
fn check_log(first_seq: u64, bytes: &[u8]) {
    let dir = scratch_dir();
    let mut rest = bytes;
    let mut seq = first_seq;
    loop {
        let (segment, next) = match rest
            .windows(SEGMENT_SEPARATOR.len())
            .position(|w| w == SEGMENT_SEPARATOR)
        {
            Some(at) => (&rest[..at], Some(&rest[at + SEGMENT_SEPARATOR.len()..])),
            None => (rest, None),
        };
        let path = dir.path().join(format!("{seq:016x}.seg"));
        std::fs::write(path, segment).expect("write a segment");
        match next {
            Some(next) if seq < first_seq + 4 => {
                rest = next;
                seq += 1;
            }
            _ => break,
        }
    }
    let Ok(log) = LogStore::open(dir.path(), log_config()).map_err(|e| verbose(&e)) else {
        return;
    };
    let last = log.log_state().expect("the state of a log that opened").1;
    let (term, index) = last.map_or((1, 1), |id| (id.leader_id.term, id.index + 1));
    runtime().block_on(append(&log, vec![entry(term, index)]));
    let before = log_contents(&log);
    drop(log);
    let log = LogStore::open(dir.path(), log_config()).expect("a log that opened once opens again");
    assert_eq!(
        before,
        log_contents(&log),
        "a second open found a different log"
    );
}

fn log_id(term: u64, index: u64) -> LogId {
    LogId::new(CommittedLeaderId::new(term, 1), index)
}

fn mutation(i: u64) -> Mutation {
    Mutation::Create {
        key: ObjectKey::new("configmaps", "default", format!("c{i}")),
        object: json!({"apiVersion":"v1","kind":"ConfigMap",
            "metadata":{"name":format!("c{i}"),"namespace":"default"},
            "data":{"v":"x".repeat(50)}}),
        requires_open_namespace: false,
    }
}

fn entry(term: u64, index: u64) -> Entry {
    Entry {
        log_id: log_id(term, index),
        payload: EntryPayload::Normal(Batch::new(vec![Proposal::new(mutation(index))])),
    }
}

async fn append(log: &LogStore, entries: Vec<Entry>) {
    let (tx, rx) = tokio::sync::oneshot::channel();
    log.append_with(entries, move |r| drop(tx.send(r)))
        .expect("append");
    rx.await.expect("flushed").expect("append is durable");
}

/// A corpus of real files: WALs after a few writes, and Raft logs with votes, truncations,
/// purges and more than one segment.
pub fn make_seeds(out: &Path) {
    std::fs::create_dir_all(out).expect("seed directory");
    runtime().block_on(async {
        for writes in [1u64, 5, 40] {
            let dir = scratch_dir();
            let store = Arc::new(Store::new(StoreConfig::default()));
            let (writer, _) = WalWriter::open(dir.path(), store, wal_config()).expect("wal");
            writer
                .write(Mutation::Create {
                    key: ObjectKey::new("namespaces", "", "default"),
                    object: json!({"apiVersion":"v1","kind":"Namespace","metadata":{"name":"default"}}),
                    requires_open_namespace: false,
                })
                .await
                .expect("namespace");
            for i in 0..writes {
                writer.write(mutation(i)).await.expect("write");
            }
            writer
                .write(Mutation::Delete {
                    key: ObjectKey::new("configmaps", "default", "c0"),
                    precondition: Default::default(),
                })
                .await
                .expect("delete");
            drop(writer);
            let mut seed = vec![0u8];
            seed.extend(std::fs::read(dir.path().join("objects.wal")).expect("wal file"));
            // The preallocated zeros say nothing; keep the seed small.
            while seed.len() > 8 && seed.ends_with(&[0; 8]) {
                seed.truncate(seed.len() - 8);
            }
            std::fs::write(out.join(format!("wal-{writes}")), seed).expect("write seed");
        }
        for (name, count, purge, truncate) in [
            ("log-small", 3u64, None, None),
            ("log-purged", 30, Some(10u64), None),
            ("log-truncated", 30, None, Some(20u64)),
            ("log-segments", 400, Some(150), Some(390)),
        ] {
            let dir = scratch_dir();
            let log = LogStore::open(dir.path(), log_config()).expect("log");
            log.save_vote_durably(&Vote::new(2, 1)).await.expect("vote");
            for i in 1..=count {
                append(&log, vec![entry(2, i)]).await;
            }
            log.set_committed(Some(log_id(2, count / 2))).expect("committed");
            if let Some(index) = purge {
                log.purge_upto(log_id(2, index)).expect("purge");
            }
            if let Some(index) = truncate {
                log.truncate_from(index).expect("truncate");
                append(&log, vec![entry(3, index)]).await;
            }
            let segments = log.segments();
            drop(log);
            let first_seq = segments.first().copied().unwrap_or(1);
            let mut seed = vec![1 | (u8::try_from(first_seq - 1).expect("few segments") << 1)];
            for (n, seq) in segments.iter().enumerate() {
                if n > 0 {
                    seed.extend_from_slice(SEGMENT_SEPARATOR);
                }
                let mut bytes = std::fs::read(dir.path().join(format!("{seq:016x}.seg")))
                    .expect("segment file");
                while bytes.len() > 8 && bytes.ends_with(&[0; 8]) {
                    bytes.truncate(bytes.len() - 8);
                }
                seed.extend(bytes);
            }
            std::fs::write(out.join(name), seed).expect("write seed");
        }
    });
}

/// Runs one input; panics when it shows a bug.
pub fn run(data: &[u8]) {
    let Some((&mode, bytes)) = data.split_first() else {
        return;
    };
    if mode % 2 == 0 {
        check_wal(bytes);
    } else {
        check_log(1 + u64::from(mode >> 1), bytes);
    }
}
