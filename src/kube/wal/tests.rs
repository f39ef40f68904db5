//! Fault injection: a failed write or fdatasync poisons the WAL for good, and nothing that
//! failed is acknowledged.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use serde_json::json;

use super::{WalConfig, WalWriter};
use crate::kube::mutation::Mutation;
use crate::kube::object::ObjectKey;
use crate::kube::store::{Store, StoreConfig};
use crate::kube::writer::{WriteError, Writer};
use crate::storage::io::FaultyIo;

/// The defaults, but the file grows by 1 MiB instead of 64 MiB: opening a log reads its whole
/// preallocated tail, which in an unoptimized test build takes seconds for 64 MiB.
fn small_chunks() -> WalConfig {
    WalConfig {
        preallocate_bytes: 1 << 20,
        ..WalConfig::default()
    }
}

fn create(name: &str) -> Mutation {
    Mutation::Create {
        key: ObjectKey::new("configmaps", "default", name),
        object: json!({"metadata":{"name":name,"namespace":"default"}}),
        requires_open_namespace: false,
    }
}

fn poisons_on(fault: fn(&FaultyIo)) {
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(Store::new(StoreConfig::default()));
    let faulty = Arc::new(FaultyIo::default());
    let (wal, _) =
        WalWriter::open_with_io(dir.path(), store.clone(), small_chunks(), faulty.clone()).unwrap();
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    rt.block_on(async {
        assert_eq!(wal.write(create("a")).await.unwrap().resource_version, 1);
        fault(&faulty);
        assert!(matches!(
            wal.write(create("b")).await,
            Err(WriteError::Unavailable(_))
        ));
        assert!(wal.is_poisoned());
        // Healthy I/O again, but the WAL never retries: every later write fails too.
        faulty.fail_writes.store(false, Ordering::SeqCst);
        faulty.fail_syncs.store(false, Ordering::SeqCst);
        match wal.write(create("c")).await {
            Err(WriteError::Unavailable(reason)) => assert!(reason.contains("injected")),
            other => panic!("write after poisoning: {other:?}"),
        }
    });
    // Nothing failed was applied.
    assert_eq!(store.resource_version(), 1);
    drop(wal);
    // After a restart, the acknowledged write is there. (The failed one may or may not be:
    // it was never acknowledged.)
    let store = Arc::new(Store::new(StoreConfig::default()));
    let (_wal, _) = WalWriter::open(dir.path(), store.clone(), small_chunks()).unwrap();
    assert!(store
        .get(&ObjectKey::new("configmaps", "default", "a"))
        .is_some());
    assert!(store
        .get(&ObjectKey::new("configmaps", "default", "c"))
        .is_none());
}

#[test]
fn failed_fdatasync_poisons_the_wal() {
    poisons_on(|f| f.fail_syncs.store(true, Ordering::SeqCst));
}

#[test]
fn failed_write_poisons_the_wal() {
    poisons_on(|f| f.fail_writes.store(true, Ordering::SeqCst));
}
