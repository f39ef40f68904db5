//! objects.wal recovery: torn tails are cut back to the last whole record (and the log can be
//! appended to again), damage in the middle or in the checkpoint refuses to start and names
//! the offset.

use std::fs;
use std::path::Path;
use std::sync::Arc;

use litek8s::kube::checkpoint::MUTATION;
use litek8s::kube::mutation::Mutation;
use litek8s::kube::object::ObjectKey;
use litek8s::kube::store::{Store, StoreConfig};
use litek8s::kube::wal::{WalConfig, WalError, WalWriter};
use litek8s::kube::writer::Writer;
use litek8s::storage::record::{self, Decoded};
use serde_json::json;

const CHUNK: u64 = 4096;

fn config() -> WalConfig {
    WalConfig {
        checkpoint_every: 1_000_000,
        preallocate_bytes: CHUNK,
        ..WalConfig::default()
    }
}

fn create(name: &str) -> Mutation {
    Mutation::Create {
        key: ObjectKey::new("configmaps", "default", name),
        object: json!({"apiVersion":"v1","kind":"ConfigMap",
                       "metadata":{"name":name,"namespace":"default"},"data":{"k":name}}),
        requires_open_namespace: false,
    }
}

fn open(dir: &Path) -> Result<(WalWriter, Arc<Store>, u64), WalError> {
    let store = Arc::new(Store::new(StoreConfig::default()));
    let (wal, report) = WalWriter::open(dir, store.clone(), config())?;
    Ok((wal, store, report.truncated_tail_at.unwrap_or(u64::MAX)))
}

/// A log holding a checkpoint (of `seed` objects) and then `n` Create records.
fn build_log(dir: &Path, seed: usize, n: usize) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    rt.block_on(async {
        // Seed objects land in the checkpoint of the newly created file.
        let store = Arc::new(Store::new(StoreConfig::default()));
        for i in 0..seed {
            store.apply(create(&format!("seed{i}"))).unwrap();
        }
        let (wal, _) = WalWriter::open(dir, store, config()).unwrap();
        for i in 0..n {
            wal.write(create(&format!("o{i}"))).await.unwrap();
        }
    });
}

/// (start, end of header and payload, next) of every Mutation record in the file. Bytes
/// between the payload and `next` are padding, which the checksum does not cover.
fn mutation_records(bytes: &[u8]) -> Vec<(usize, usize, usize)> {
    let mut out = Vec::new();
    let mut offset = 0;
    while let Decoded::Record {
        record_type,
        payload,
        next,
    } = record::decode_at(bytes, offset)
    {
        if record_type == MUTATION {
            out.push((offset, offset + record::HEADER_LEN + payload.len(), next));
        }
        offset = next;
    }
    out
}

fn copy_log(from: &Path, to: &Path, edit: impl FnOnce(&mut Vec<u8>)) {
    let mut bytes = fs::read(from.join("objects.wal")).unwrap();
    edit(&mut bytes);
    fs::write(to.join("objects.wal"), bytes).unwrap();
}

#[test]
fn torn_tail_at_every_offset_recovers_and_appends() {
    let base = tempfile::tempdir().unwrap();
    build_log(base.path(), 3, 8);
    let bytes = fs::read(base.path().join("objects.wal")).unwrap();
    let records = mutation_records(&bytes);
    assert_eq!(records.len(), 8);
    let first_cut = records[records.len() - 3].0;
    let end = records[records.len() - 1].2;
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    for cut in first_cut..end {
        // Records whose header and payload lie wholly before the cut survive.
        let surviving: Vec<_> = records.iter().filter(|r| r.1 <= cut).collect();
        let whole = surviving.len() as u64;
        let last_whole_end = surviving.last().map(|r| r.2).unwrap_or(0);
        for garbage in [0x00u8, 0xA5] {
            let dir = tempfile::tempdir().unwrap();
            let mut torn = false;
            copy_log(base.path(), dir.path(), |b| {
                b[cut..end].iter_mut().for_each(|x| *x = garbage);
                torn = b[last_whole_end..end].iter().any(|x| *x != 0);
            });
            let (wal, store, truncated_at) = open(dir.path())
                .unwrap_or_else(|e| panic!("cut at {cut} (fill {garbage:#x}): {e}"));
            assert_eq!(store.resource_version(), 3 + whole, "cut at {cut}");
            let expected_cut = if torn {
                last_whole_end as u64
            } else {
                u64::MAX
            };
            assert_eq!(
                truncated_at, expected_cut,
                "cut at {cut} (fill {garbage:#x})"
            );
            // Appending and reopening costs syncs; do it for a spread of cuts and the
            // record boundaries.
            if cut % 5 != 0 && !records.iter().any(|r| r.0 == cut) {
                continue;
            }
            let object = rt.block_on(wal.write(create("again"))).unwrap();
            assert_eq!(object.resource_version, 4 + whole);
            drop(wal);
            let (_wal, store, truncated_at) = open(dir.path()).unwrap();
            assert_eq!(
                store.resource_version(),
                4 + whole,
                "cut at {cut}, reopened"
            );
            assert_eq!(truncated_at, u64::MAX, "the repaired log is clean");
        }
    }
}

#[test]
fn flipped_byte_in_the_middle_refuses_to_open() {
    let base = tempfile::tempdir().unwrap();
    build_log(base.path(), 2, 10);
    let bytes = fs::read(base.path().join("objects.wal")).unwrap();
    let records = mutation_records(&bytes);
    for victim in [0, 4, 8] {
        let (start, end, _) = records[victim];
        for at in [start, start + 4, start + 9, (start + end) / 2, end - 9] {
            let dir = tempfile::tempdir().unwrap();
            copy_log(base.path(), dir.path(), |b| b[at] ^= 0x10);
            match open(dir.path()) {
                Err(WalError::Corrupt { offset, .. }) if offset == start as u64 => {
                    let text = open(dir.path()).err().unwrap().to_string();
                    assert!(text.contains(&format!("offset {start}")), "{text}");
                    assert!(text.contains("objects.wal"), "{text}");
                }
                Err(e) => panic!("byte {at} of record at {start}: wrong error {e}"),
                Ok(_) => panic!("byte {at} of record at {start}: opened a damaged log"),
            }
        }
    }
    // A zeroed record header in the middle is damage too, not the end of the log.
    let dir = tempfile::tempdir().unwrap();
    let (start, _, _) = records[5];
    copy_log(base.path(), dir.path(), |b| {
        b[start..start + record::HEADER_LEN].fill(0)
    });
    assert!(
        matches!(open(dir.path()), Err(WalError::Corrupt { offset, .. }) if offset == start as u64)
    );
}

#[test]
fn corrupt_checkpoint_refuses_to_open() {
    let base = tempfile::tempdir().unwrap();
    build_log(base.path(), 5, 2);
    let bytes = fs::read(base.path().join("objects.wal")).unwrap();
    let first_mutation = mutation_records(&bytes)[0].0;
    for at in [0, 5, 13, first_mutation / 2, first_mutation - 20] {
        let dir = tempfile::tempdir().unwrap();
        copy_log(base.path(), dir.path(), |b| b[at] ^= 0x01);
        match open(dir.path()) {
            Err(WalError::Corrupt { reason, .. }) => assert!(reason.contains("checkpoint")),
            Err(e) => panic!("byte {at}: wrong error {e}"),
            Ok(_) => panic!("byte {at}: opened a log with a damaged checkpoint"),
        }
    }
    // A checkpoint cut short (no END record) is refused as well.
    let dir = tempfile::tempdir().unwrap();
    copy_log(base.path(), dir.path(), |b| b[first_mutation / 2..].fill(0));
    assert!(matches!(open(dir.path()), Err(WalError::Corrupt { .. })));
}

#[test]
fn leftover_checkpoint_file_is_ignored_and_the_directory_is_locked() {
    let dir = tempfile::tempdir().unwrap();
    build_log(dir.path(), 1, 3);
    fs::write(dir.path().join("objects.wal.tmp"), b"half a checkpoint").unwrap();
    let (wal, store, _) = open(dir.path()).unwrap();
    assert_eq!(store.resource_version(), 4);
    assert!(!dir.path().join("objects.wal.tmp").exists());
    // A second WAL on the same directory is refused while the first is open.
    assert!(matches!(open(dir.path()), Err(WalError::Io { .. })));
    drop(wal);
    assert!(open(dir.path()).is_ok());
}
