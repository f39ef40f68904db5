//! Fault injection: a failed write or fdatasync poisons the WAL for good, and nothing that
//! failed is acknowledged.

use std::fs::File;
use std::io;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use serde_json::json;

use super::file::{FileIo, RealIo};
use super::{WalConfig, WalWriter};
use crate::kube::mutation::Mutation;
use crate::kube::object::ObjectKey;
use crate::kube::store::{Store, StoreConfig};
use crate::kube::writer::{WriteError, Writer};

/// Real I/O until told to fail writes or syncs.
#[derive(Default)]
struct Faulty {
    fail_write: AtomicBool,
    fail_sync: AtomicBool,
}

impl FileIo for Faulty {
    fn write_at(&self, file: &File, buf: &[u8], offset: u64) -> io::Result<()> {
        if self.fail_write.load(Ordering::SeqCst) {
            return Err(io::Error::other("injected write failure"));
        }
        RealIo.write_at(file, buf, offset)
    }

    fn sync_data(&self, file: &File) -> io::Result<()> {
        if self.fail_sync.load(Ordering::SeqCst) {
            // Like a real failed fsync, the data may well be in the page cache.
            return Err(io::Error::other("injected fdatasync failure"));
        }
        RealIo.sync_data(file)
    }
}

fn create(name: &str) -> Mutation {
    Mutation::Create {
        key: ObjectKey::new("configmaps", "default", name),
        object: json!({"metadata":{"name":name,"namespace":"default"}}),
        requires_open_namespace: false,
    }
}

fn poisons_on(fault: fn(&Faulty)) {
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(Store::new(StoreConfig::default()));
    let faulty = Arc::new(Faulty::default());
    let (wal, _) = WalWriter::open_with_io(
        dir.path(),
        store.clone(),
        WalConfig::default(),
        faulty.clone(),
    )
    .unwrap();
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
        faulty.fail_write.store(false, Ordering::SeqCst);
        faulty.fail_sync.store(false, Ordering::SeqCst);
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
    let (_wal, _) = WalWriter::open(dir.path(), store.clone(), WalConfig::default()).unwrap();
    assert!(store
        .get(&ObjectKey::new("configmaps", "default", "a"))
        .is_some());
    assert!(store
        .get(&ObjectKey::new("configmaps", "default", "c"))
        .is_none());
}

#[test]
fn failed_fdatasync_poisons_the_wal() {
    poisons_on(|f| f.fail_sync.store(true, Ordering::SeqCst));
}

#[test]
fn failed_write_poisons_the_wal() {
    poisons_on(|f| f.fail_write.store(true, Ordering::SeqCst));
}
