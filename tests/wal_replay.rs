//! objects.wal replay: a restart (with or without checkpoints in between) gives back the same
//! objects, resourceVersions and watch history; concurrent writers get distinct versions.

use std::collections::BTreeSet;
use std::path::Path;
use std::sync::Arc;

use litek8s::kube::mutation::{Mutation, Precondition};
use litek8s::kube::object::ObjectKey;
use litek8s::kube::store::{Store, StoreConfig};
use litek8s::kube::wal::{WalConfig, WalWriter};
use litek8s::kube::writer::{WriteError, Writer};
use serde_json::{json, Value};

fn key(name: &str) -> ObjectKey {
    ObjectKey::new("configmaps", "default", name)
}

fn cm(name: &str, data: &str) -> Value {
    json!({"apiVersion":"v1","kind":"ConfigMap",
           "metadata":{"name":name,"namespace":"default","uid":format!("uid-{name}"),
                       "labels":{"app":"wal"}},
           "data":{"d":data}})
}

fn store(history_window: usize) -> Arc<Store> {
    Arc::new(Store::new(StoreConfig {
        history_window,
        live_buffer: 1024,
    }))
}

fn config(checkpoint_every: u64) -> WalConfig {
    WalConfig {
        checkpoint_every,
        preallocate_bytes: 8192,
        ..WalConfig::default()
    }
}

/// Every object as (key, stored JSON), plus the store's resourceVersion.
fn state(store: &Store) -> (Vec<(ObjectKey, bytes::Bytes)>, u64) {
    let objects = store
        .snapshot()
        .iter()
        .map(|o| (o.key.clone(), o.json.clone()))
        .collect();
    (objects, store.resource_version())
}

/// The watch history after `rv` as (kind, key, resourceVersion).
fn history(store: &Store, rv: u64) -> Vec<(&'static str, ObjectKey, u64)> {
    store
        .subscribe(rv)
        .expect("history still holds this version")
        .backlog
        .iter()
        .map(|e| (e.kind.as_str(), e.object.key.clone(), e.resource_version()))
        .collect()
}

/// A deterministic mix of creates, updates (some with stale preconditions), deletes and
/// duplicate creates; returns each outcome as Ok(rv) or the error text.
async fn write_mix(wal: &WalWriter, round: usize, n: usize) -> Vec<Result<u64, String>> {
    let mut outcomes = Vec::new();
    for i in 0..n {
        let name = format!("r{round}-o{}", i % 17);
        let mutation = match i % 5 {
            0 | 1 => Mutation::Create {
                key: key(&name),
                object: cm(&name, &format!("{i}")),
                requires_open_namespace: false,
            },
            2 => Mutation::Update {
                key: key(&name),
                object: cm(&name, &format!("updated {i}")),
                precondition: Precondition::none(),
            },
            3 => Mutation::Update {
                key: key(&name),
                object: cm(&name, "stale"),
                precondition: Precondition::at(1),
            },
            _ => Mutation::Delete {
                key: key(&name),
                precondition: Precondition::none(),
            },
        };
        let outcome = match wal.write(mutation).await {
            Ok(object) => Ok(object.resource_version),
            Err(WriteError::Rejected(e)) => Err(e.to_string()),
            Err(e) => panic!("write failed: {e}"),
        };
        outcomes.push(outcome);
    }
    outcomes
}

fn reopen(dir: &Path, history_window: usize, every: u64) -> (WalWriter, Arc<Store>) {
    let store = store(history_window);
    let (wal, _) = WalWriter::open(dir, store.clone(), config(every)).expect("reopen");
    (wal, store)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replay_gives_identical_state_versions_and_history() {
    let dir = tempfile::tempdir().unwrap();
    let live = store(10_000);
    let (wal, report) = WalWriter::open(dir.path(), live.clone(), config(1_000_000)).unwrap();
    assert_eq!(report.replayed_mutations, 0);
    let outcomes = write_mix(&wal, 0, 120).await;
    assert!(
        outcomes.iter().any(|o| o.is_err()),
        "the mix has rejections"
    );
    let before = state(&live);
    let events = history(&live, 0);
    drop(wal);

    let (wal, replayed) = reopen(dir.path(), 10_000, 1_000_000);
    assert_eq!(state(&replayed), before);
    assert_eq!(history(&replayed, 0), events, "watch history rebuilt");
    // A watch from the middle resumes after the restart.
    assert_eq!(history(&replayed, 40), history(&live, 40));

    // Writing continues at the next resourceVersion, and survives another restart.
    let next = wal
        .write(Mutation::Create {
            key: key("after"),
            object: cm("after", "x"),
            requires_open_namespace: false,
        })
        .await
        .unwrap();
    assert_eq!(next.resource_version, before.1 + 1);
    let after = state(&replayed);
    drop(wal);
    let (_wal, again) = reopen(dir.path(), 10_000, 1_000_000);
    assert_eq!(state(&again), after);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn checkpoints_and_restarts_keep_everything() {
    let dir = tempfile::tempdir().unwrap();
    let (every, window) = (40, 30);
    let mut expected = None;
    for round in 0..6 {
        let (wal, live) = reopen(dir.path(), window, every);
        if let Some(expected) = &expected {
            assert_eq!(
                &state(&live),
                expected,
                "round {round}: state after restart"
            );
        }
        write_mix(&wal, round, 70).await;
        expected = Some(state(&live));
        let rv = live.resource_version();
        let recent = history(&live, rv - 8);
        drop(wal);

        let (_wal, replayed) = reopen(dir.path(), window, every);
        assert_eq!(Some(state(&replayed)), expected);
        // Watches from the last few versions resume across the restart and the checkpoint.
        assert_eq!(history(&replayed, rv - 8), recent);
    }
    let (_wal, report) = {
        let store = store(window);
        WalWriter::open(dir.path(), store, config(every)).unwrap()
    };
    // The log was rewritten: it holds a checkpoint and a bounded number of records.
    assert!(report.checkpoint_objects > 0, "{report:?}");
    assert!(report.replayed_mutations <= 2 * every, "{report:?}");
    assert!(!dir.path().join("objects.wal.tmp").exists());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_writers_get_distinct_versions() {
    let dir = tempfile::tempdir().unwrap();
    let live = store(100);
    let (wal, _) = WalWriter::open(dir.path(), live.clone(), config(100)).unwrap();
    let wal = Arc::new(wal);
    let (writers, each) = (64, 15);
    let mut tasks = Vec::new();
    for w in 0..writers {
        let wal = wal.clone();
        tasks.push(tokio::spawn(async move {
            let mut acked = Vec::new();
            for i in 0..each {
                let name = format!("w{w}-{i}");
                let object = wal
                    .write(Mutation::Create {
                        key: key(&name),
                        object: cm(&name, "x"),
                        requires_open_namespace: false,
                    })
                    .await
                    .expect("write");
                acked.push((key(&name), object.resource_version));
            }
            acked
        }));
    }
    let mut acked = Vec::new();
    for task in tasks {
        acked.extend(task.await.unwrap());
    }
    let versions: BTreeSet<u64> = acked.iter().map(|(_, rv)| *rv).collect();
    let total = (writers * each) as u64;
    assert_eq!(versions, (1..=total).collect::<BTreeSet<u64>>());
    for (k, rv) in &acked {
        assert_eq!(live.get(k).map(|o| o.resource_version), Some(*rv));
    }
    let before = state(&live);
    drop(wal);
    let (_wal, replayed) = reopen(dir.path(), 100, 100);
    assert_eq!(state(&replayed), before);
}
