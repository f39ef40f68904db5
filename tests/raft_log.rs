//! The Raft log engine and state machine: openraft's storage suite, torn tails, corruption,
//! fault injection, purge/truncate across segments, snapshots.

use std::path::Path;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use litek8s::kube::mutation::Mutation;
use litek8s::kube::object::ObjectKey;
use litek8s::kube::store::{Store, StoreConfig};
use litek8s::raft::log::{LogConfig, LogError, LogStore};
use litek8s::raft::state_machine::StateMachine;
use litek8s::raft::types::{Batch, Entry, LogId, Proposal, StorageError, TypeConfig, Vote};
use litek8s::storage::io::{DelayedIo, FaultyIo};
use openraft::storage::{RaftLogStorage, RaftStateMachine};
use openraft::testing::{StoreBuilder, Suite};
use openraft::{CommittedLeaderId, EntryPayload, RaftLogReader, RaftSnapshotBuilder};
use serde_json::json;
use tempfile::TempDir;

fn small() -> LogConfig {
    LogConfig {
        segment_size: 64 << 10,
        cache_bytes: 16 << 10,
        ..LogConfig::default()
    }
}

struct Builder;

impl StoreBuilder<TypeConfig, LogStore, StateMachine, TempDir> for Builder {
    async fn build(&self) -> Result<(TempDir, LogStore, StateMachine), StorageError> {
        let dir = tempfile::tempdir().expect("tempdir");
        let log = LogStore::open(&dir.path().join("log"), small()).expect("open log");
        let store = Arc::new(Store::new(StoreConfig::default()));
        let sm = StateMachine::open(&dir.path().join("sm"), store).expect("open sm");
        Ok((dir, log, sm))
    }
}

#[test]
fn openraft_storage_suite() {
    Suite::test_all(Builder).expect("suite");
}

fn log_id(term: u64, index: u64) -> LogId {
    LogId::new(CommittedLeaderId::new(term, 1), index)
}

fn mutation(i: u64, size: usize) -> Mutation {
    Mutation::Create {
        key: ObjectKey::new("configmaps", "default", format!("c{i}")),
        object: json!({"apiVersion":"v1","kind":"ConfigMap",
            "metadata":{"name":format!("c{i}"),"namespace":"default"},
            "data":{"v":"x".repeat(size)}}),
        requires_open_namespace: false,
    }
}

fn entry(term: u64, index: u64) -> Entry {
    Entry {
        log_id: log_id(term, index),
        payload: EntryPayload::Normal(Batch::new(vec![Proposal::new(mutation(index, 200))])),
    }
}

fn open(dir: &Path) -> LogStore {
    LogStore::open(dir, small()).expect("open")
}

/// Appends and waits for durability.
async fn append(log: &LogStore, entries: Vec<Entry>) -> Result<(), String> {
    let (tx, rx) = tokio::sync::oneshot::channel();
    log.append_with(entries, move |r| drop(tx.send(r)))
        .map_err(|e| e.to_string())?;
    rx.await
        .map_err(|e| e.to_string())?
        .map_err(|e| e.to_string())
}

async fn indexes(log: &LogStore) -> Vec<u64> {
    let mut reader = log.reader();
    reader
        .try_get_log_entries(0..)
        .await
        .expect("read")
        .iter()
        .map(|e| e.log_id.index)
        .collect()
}

#[tokio::test]
async fn entries_vote_and_committed_survive_reopen_across_segments() {
    let dir = tempfile::tempdir().unwrap();
    {
        let log = open(dir.path());
        for i in 1..=300 {
            append(&log, vec![entry(1, i)]).await.unwrap();
        }
        log.save_vote_durably(&Vote::new(3, 1)).await.unwrap();
        log.set_committed(Some(log_id(1, 250))).unwrap();
        append(&log, vec![entry(1, 301)]).await.unwrap();
        assert!(log.segments().len() > 2, "expected several segments");
    }
    let mut log = open(dir.path());
    assert_eq!(indexes(&log).await, (1..=301).collect::<Vec<_>>());
    assert_eq!(log.read_vote().await.unwrap(), Some(Vote::new(3, 1)));
    assert_eq!(log.read_committed().await.unwrap(), Some(log_id(1, 250)));
    // Entries read back from disk are whole.
    let e = log.reader().read(5, 6, usize::MAX).unwrap();
    assert_eq!(e[0].payload, entry(1, 5).payload);
}

/// A log with the default configuration holding entries 1..=`count` of term 1, all flushed.
async fn log_with_entries(count: u64) -> (TempDir, LogStore) {
    let dir = tempfile::tempdir().unwrap();
    let log = LogStore::open(dir.path(), LogConfig::default()).expect("open");
    append(&log, (1..=count).map(|i| entry(1, i)).collect())
        .await
        .unwrap();
    (dir, log)
}

/// The state machine's read hands committed entries over instead of cloning them; every
/// later read (for replication, or the same range again) still returns them whole, from disk.
#[tokio::test]
async fn committed_entries_read_for_applying_stay_readable() {
    let (_dir, log) = log_with_entries(4).await;
    log.set_committed(Some(log_id(1, 2))).unwrap();
    let expected: Vec<_> = (1..=4).map(|i| entry(1, i).payload).collect();
    let payloads =
        |entries: Vec<Entry>| -> Vec<_> { entries.into_iter().map(|e| e.payload).collect() };
    let mut reader = log.reader();
    for _ in 0..2 {
        let applied = reader.try_get_log_entries(1..5).await.expect("apply read");
        assert_eq!(payloads(applied), expected);
        let replicated = reader.limited_get_log_entries(1, 5).await.expect("read");
        assert_eq!(payloads(replicated), expected);
        assert_eq!(
            payloads(log.reader().read(1, 5, usize::MAX).unwrap()),
            expected
        );
    }
}

/// Replication reads cached entries once per follower only to encode them: the copies it
/// gets share the cached proposals instead of cloning every Mutation.
#[tokio::test]
async fn cached_entries_read_for_replication_share_their_proposals() {
    let (_dir, log) = log_with_entries(3).await;
    let proposals = |entries: Vec<Entry>| -> Vec<Arc<Vec<Proposal>>> {
        entries
            .into_iter()
            .map(|e| match e.payload {
                EntryPayload::Normal(batch) => batch.proposals,
                other => panic!("expected a normal entry, got {other:?}"),
            })
            .collect()
    };
    let first = proposals(log.reader().read(1, 4, usize::MAX).unwrap());
    let second = proposals(log.reader().read(1, 4, usize::MAX).unwrap());
    assert_eq!(first.len(), 3);
    for (a, b) in first.iter().zip(&second) {
        assert!(Arc::ptr_eq(a, b), "both reads share the cached proposals");
    }
}

#[tokio::test]
async fn purge_and_truncate_across_segments_survive_restart() {
    let dir = tempfile::tempdir().unwrap();
    {
        let log = open(dir.path());
        for i in 1..=400 {
            append(&log, vec![entry(1, i)]).await.unwrap();
        }
        let before = log.segments();
        log.purge_upto(log_id(1, 200)).unwrap();
        // Truncate across a segment boundary and re-append at the same index.
        log.truncate_from(150 + 200).unwrap();
        append(&log, vec![entry(2, 350), entry(2, 351)])
            .await
            .unwrap();
        let after = log.segments();
        assert!(
            after[0] > before[0],
            "whole segments below the purge point are deleted"
        );
        log.save_vote_durably(&Vote::new(2, 1)).await.unwrap();
    }
    let mut log = open(dir.path());
    assert_eq!(indexes(&log).await, (201..=351).collect::<Vec<_>>());
    let state = log.get_log_state().await.unwrap();
    assert_eq!(state.last_purged_log_id, Some(log_id(1, 200)));
    assert_eq!(state.last_log_id, Some(log_id(2, 351)));
    let e = log.reader().read(350, 351, usize::MAX).unwrap();
    assert_eq!(e[0].log_id, log_id(2, 350));
    // Purge past the last entry: the purged id becomes the last one, also after restart.
    log.purge_upto(log_id(3, 500)).unwrap();
    drop(log);
    let mut log = open(dir.path());
    let state = log.get_log_state().await.unwrap();
    assert_eq!(state.last_purged_log_id, Some(log_id(3, 500)));
    assert_eq!(state.last_log_id, Some(log_id(3, 500)));
    assert_eq!(log.read_vote().await.unwrap(), Some(Vote::new(2, 1)));
    append(&log, vec![entry(3, 501)]).await.unwrap();
    assert_eq!(indexes(&log).await, vec![501]);
}

#[tokio::test]
async fn vote_survives_purging_every_segment_that_held_it() {
    let dir = tempfile::tempdir().unwrap();
    {
        let log = open(dir.path());
        log.save_vote_durably(&Vote::new(7, 1)).await.unwrap();
        for i in 1..=600 {
            append(&log, vec![entry(7, i)]).await.unwrap();
        }
        log.purge_upto(log_id(7, 590)).unwrap();
        append(&log, vec![entry(7, 601)]).await.unwrap();
        assert!(log.segments()[0] > 1);
    }
    assert!(!dir.path().join("0000000000000001.seg").exists());
    let mut log = open(dir.path());
    assert_eq!(log.read_vote().await.unwrap(), Some(Vote::new(7, 1)));
    assert_eq!(indexes(&log).await, (591..=601).collect::<Vec<_>>());
}

#[tokio::test]
async fn appending_with_a_gap_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let log = open(dir.path());
    append(&log, vec![entry(1, 1)]).await.unwrap();
    assert!(matches!(
        log.append_with(vec![entry(1, 3)], |_| {}),
        Err(LogError::Invalid(_))
    ));
}

async fn fault_case(fail_sync: bool) {
    let dir = tempfile::tempdir().unwrap();
    let io = Arc::new(FaultyIo::default());
    let config = LogConfig {
        io: io.clone(),
        ..small()
    };
    let mut log = LogStore::open(dir.path(), config).unwrap();
    append(&log, vec![entry(1, 1)]).await.unwrap();
    if fail_sync {
        io.fail_syncs.store(true, Ordering::SeqCst);
    } else {
        io.fail_writes.store(true, Ordering::SeqCst);
    }
    let err = append(&log, vec![entry(1, 2)]).await.unwrap_err();
    assert!(err.contains("injected"), "{err}");
    // Healing the disk does not help: the log stays failed.
    io.fail_syncs.store(false, Ordering::SeqCst);
    io.fail_writes.store(false, Ordering::SeqCst);
    assert!(log.failure().is_some());
    assert!(append(&log, vec![entry(1, 3)]).await.is_err());
    assert!(log.save_vote(&Vote::new(1, 1)).await.is_err());
    assert!(log.get_log_state().await.is_err());
    assert!(log.truncate(log_id(1, 1)).await.is_err());
    assert!(log.purge(log_id(1, 1)).await.is_err());
}

/// A COMMITTED record waits for the next flush; there it and the entry appended after it
/// continue each other in the segment and go out in one pwrite, and both survive a reopen.
#[tokio::test]
async fn a_committed_record_and_the_next_entry_share_one_write() {
    let dir = tempfile::tempdir().unwrap();
    let io = Arc::new(FaultyIo::default());
    let config = LogConfig {
        io: io.clone(),
        ..small()
    };
    {
        let log = LogStore::open(dir.path(), config).unwrap();
        append(&log, vec![entry(1, 1)]).await.unwrap();
        for i in 2..=20 {
            log.set_committed(Some(log_id(1, i - 1))).unwrap();
            let before = io.writes.load(Ordering::SeqCst);
            append(&log, vec![entry(1, i)]).await.unwrap();
            assert_eq!(io.writes.load(Ordering::SeqCst) - before, 1, "entry {i}");
        }
    }
    let log = open(dir.path());
    assert_eq!(indexes(&log).await, (1..=20).collect::<Vec<_>>());
    assert_eq!(log.committed(), Some(log_id(1, 19)));
}

/// An append that finds nobody flushing flushes on the caller's thread: it is durable, its
/// callback run, when `append_with` returns. An append made while a flush runs (held up here
/// by the write-delay failpoint on another thread) queues and returns at once; the flush
/// thread completes it after the running flush, in log order, and both survive a reopen.
#[test]
fn an_idle_append_flushes_on_its_thread_and_a_busy_one_queues_in_order() {
    let dir = tempfile::tempdir().unwrap();
    let control = dir.path().join("delay-ms");
    let config = LogConfig {
        io: Arc::new(DelayedIo {
            control: control.clone(),
        }),
        ..small()
    };
    let log_dir = dir.path().join("log");
    let completed = Arc::new(std::sync::Mutex::new(Vec::new()));
    let record = |i: u64| {
        let completed = completed.clone();
        move |r: std::io::Result<()>| {
            r.expect("flush");
            completed.lock().unwrap().push(i);
        }
    };
    {
        let log = LogStore::open(&log_dir, config).unwrap();
        log.append_with(vec![entry(1, 1)], record(1)).unwrap();
        assert_eq!(*completed.lock().unwrap(), vec![1], "not flushed inline");

        std::fs::write(&control, "2000").unwrap();
        let slow = {
            let (log, done) = (log.clone(), record(2));
            std::thread::spawn(move || log.append_with(vec![entry(1, 2)], done).unwrap())
        };
        // The slow append holds the path (it waits before its write); wait until it does.
        while log.log_state().unwrap().1.map(|l| l.index) != Some(2) {
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        log.append_with(vec![entry(1, 3)], record(3)).unwrap();
        assert_eq!(
            *completed.lock().unwrap(),
            vec![1],
            "an append behind a running flush waited for it"
        );
        std::fs::remove_file(&control).unwrap();
        slow.join().unwrap();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while completed.lock().unwrap().len() < 3 {
            assert!(
                std::time::Instant::now() < deadline,
                "the queued append never completed"
            );
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        assert_eq!(*completed.lock().unwrap(), vec![1, 2, 3]);
    }
    let log = LogStore::open(&log_dir, small()).unwrap();
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    assert_eq!(rt.block_on(indexes(&log)), vec![1, 2, 3]);
}

#[tokio::test]
async fn injected_write_failure_fails_the_log_for_good() {
    fault_case(false).await;
}

#[tokio::test]
async fn injected_fdatasync_failure_fails_the_log_for_good() {
    fault_case(true).await;
}

/// The last segment file and its valid length.
fn last_segment(dir: &Path) -> std::path::PathBuf {
    let mut names: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "seg"))
        .collect();
    names.sort();
    // The newest file may be an unused preallocated one; pick the last one with data.
    names
        .into_iter()
        .rev()
        .find(|p| std::fs::read(p).unwrap()[..16].iter().any(|b| *b != 0))
        .unwrap()
}

/// Writes `count` entries (no vote) and returns the byte offsets where each ENTRY record
/// starts in the last segment plus the end offset of the data.
async fn write_entries(dir: &Path, count: u64) {
    let log = open(dir);
    for i in 1..=count {
        append(&log, vec![entry(1, i)]).await.unwrap();
    }
}

fn data_end(bytes: &[u8]) -> usize {
    use litek8s::storage::record::{decode_at, Decoded};
    let mut offset = 0;
    while let Decoded::Record { next, .. } = decode_at(bytes, offset) {
        offset = next;
    }
    offset
}

fn record_starts(bytes: &[u8]) -> Vec<usize> {
    use litek8s::storage::record::{decode_at, Decoded};
    let mut offset = 0;
    let mut starts = Vec::new();
    while let Decoded::Record { next, .. } = decode_at(bytes, offset) {
        starts.push(offset);
        offset = next;
    }
    starts
}

#[tokio::test]
async fn torn_tail_at_every_offset_recovers_to_the_last_whole_record() {
    let base = tempfile::tempdir().unwrap();
    let pristine = base.path().join("pristine");
    write_entries(&pristine, 5).await;
    let seg = last_segment(&pristine);
    let name = seg.file_name().unwrap().to_owned();
    let bytes = std::fs::read(&seg).unwrap();
    let starts = record_starts(&bytes);
    let end = data_end(&bytes);
    // The last two records (entries 4 and 5).
    let from = starts[starts.len() - 2];
    for cut in from..end {
        let dir = base.path().join(format!("cut{cut}"));
        std::fs::create_dir(&dir).unwrap();
        let mut torn = bytes.clone();
        torn[cut..].iter_mut().for_each(|b| *b = 0);
        std::fs::write(dir.join(&name), &torn).unwrap();
        let log = open(&dir);
        let got = indexes(&log).await;
        let expect_last = if cut >= starts[starts.len() - 1] {
            4
        } else {
            3
        };
        assert_eq!(got, (1..=expect_last).collect::<Vec<_>>(), "cut at {cut}");
        // And the log goes on from there, also after another restart (sampled: each
        // round trip costs several fsyncs).
        if cut % 17 == 0 {
            append(&log, vec![entry(1, expect_last + 1)]).await.unwrap();
            drop(log);
            let log = open(&dir);
            assert_eq!(indexes(&log).await.last(), Some(&(expect_last + 1)));
        } else {
            // Joins the log's threads before the directory goes.
            drop(log);
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }
}

#[tokio::test]
async fn garbage_after_a_zeroed_length_and_bad_crc_at_the_tail_are_cut() {
    let dir = tempfile::tempdir().unwrap();
    write_entries(dir.path(), 5).await;
    let seg = last_segment(dir.path());
    let mut bytes = std::fs::read(&seg).unwrap();
    let end = data_end(&bytes);
    // Garbage after an all-zero header.
    for (i, b) in bytes[end + 16..end + 200].iter_mut().enumerate() {
        *b = (i as u8).wrapping_mul(31).wrapping_add(7);
    }
    std::fs::write(&seg, &bytes).unwrap();
    let log = open(dir.path());
    assert_eq!(indexes(&log).await, (1..=5).collect::<Vec<_>>());
    drop(log);
    // The tail was zeroed on disk.
    let after = std::fs::read(&seg).unwrap();
    assert!(after[end..].iter().all(|b| *b == 0));
    // A bad checksum in the last record with nothing after it is a torn tail too.
    let starts = record_starts(&after);
    let mut bytes = after.clone();
    bytes[starts[starts.len() - 1] + 20] ^= 0x40;
    std::fs::write(&seg, &bytes).unwrap();
    let log = open(dir.path());
    assert_eq!(indexes(&log).await, (1..=4).collect::<Vec<_>>());
}

#[tokio::test]
async fn flipped_bit_in_an_early_record_refuses_to_open() {
    let dir = tempfile::tempdir().unwrap();
    write_entries(dir.path(), 5).await;
    let seg = last_segment(dir.path());
    let mut bytes = std::fs::read(&seg).unwrap();
    let starts = record_starts(&bytes);
    let victim = starts[2];
    bytes[victim + 30] ^= 0x01;
    std::fs::write(&seg, &bytes).unwrap();
    let err = LogStore::open(dir.path(), small())
        .err()
        .expect("must refuse");
    let text = err.to_string();
    assert!(matches!(err, LogError::Corrupt { .. }), "{text}");
    assert!(text.contains(&format!("offset {victim}")), "{text}");
    assert!(
        text.contains(seg.file_name().unwrap().to_str().unwrap()),
        "{text}"
    );
}

#[tokio::test]
async fn flipped_bit_in_an_earlier_segment_refuses_to_open() {
    let dir = tempfile::tempdir().unwrap();
    write_entries(dir.path(), 400).await;
    let first = dir.path().join("0000000000000001.seg");
    let mut bytes = std::fs::read(&first).unwrap();
    let starts = record_starts(&bytes);
    let end = data_end(&bytes);
    // Even the very last record of a sealed segment is not a torn tail.
    let victim = *starts.last().unwrap();
    assert!(end > victim);
    bytes[victim + 14] ^= 0x80;
    std::fs::write(&first, &bytes).unwrap();
    let text = LogStore::open(dir.path(), small())
        .err()
        .expect("must refuse")
        .to_string();
    assert!(text.contains("0000000000000001.seg"), "{text}");
    assert!(text.contains(&format!("offset {victim}")), "{text}");
}

#[tokio::test]
async fn a_missing_segment_refuses_to_open() {
    let dir = tempfile::tempdir().unwrap();
    write_entries(dir.path(), 400).await;
    std::fs::remove_file(dir.path().join("0000000000000002.seg")).unwrap();
    let text = LogStore::open(dir.path(), small())
        .err()
        .expect("must refuse")
        .to_string();
    assert!(text.contains("0000000000000002.seg"), "{text}");
}

fn configmap_batch(from: u64, count: u64) -> Batch {
    Batch::new(
        (from..from + count)
            .map(|i| Proposal::new(mutation(i, 50)))
            .collect(),
    )
}

fn normal(index: u64, batch: Batch) -> Entry {
    Entry {
        log_id: log_id(1, index),
        payload: EntryPayload::Normal(batch),
    }
}

fn dump(store: &Store) -> Vec<(String, u64, Vec<u8>)> {
    store
        .snapshot()
        .iter()
        .map(|o| (o.key.to_string(), o.resource_version, o.json.to_vec()))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn snapshot_is_point_in_time_and_installs_identically() {
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(Store::new(StoreConfig::default()));
    let mut sm = StateMachine::open(&dir.path().join("a"), store.clone()).unwrap();
    let mut index = 1;
    for _ in 0..50 {
        sm.apply(vec![normal(index, configmap_batch(index * 10, 10))])
            .await
            .unwrap();
        index += 1;
    }
    let expected = dump(&store);
    let expected_rv = store.resource_version();
    let mut builder = sm.get_snapshot_builder().await;
    // Build while more entries apply concurrently.
    let build = tokio::spawn(async move { builder.build_snapshot().await });
    for _ in 0..50 {
        sm.apply(vec![normal(index, configmap_batch(index * 10, 10))])
            .await
            .unwrap();
        index += 1;
    }
    let snap = build.await.unwrap().unwrap();
    assert_eq!(snap.meta.last_log_id, Some(log_id(1, 50)));
    // Install on a fresh node: identical state at the snapshot's index.
    let store_b = Arc::new(Store::new(StoreConfig::default()));
    let mut sm_b = StateMachine::open(&dir.path().join("b"), store_b.clone()).unwrap();
    sm_b.install_snapshot(&snap.meta, snap.snapshot)
        .await
        .unwrap();
    assert_eq!(dump(&store_b), expected);
    assert_eq!(store_b.resource_version(), expected_rv);
    assert_eq!(sm_b.applied_state().await.unwrap().0, Some(log_id(1, 50)));
    // Applying the same later entries gives the same state as the first node.
    for i in 51..index {
        sm_b.apply(vec![normal(i, configmap_batch(i * 10, 10))])
            .await
            .unwrap();
    }
    assert_eq!(dump(&store_b), dump(&store));
    // The snapshot survives a restart of the follower.
    drop(sm_b);
    let store_c = Arc::new(Store::new(StoreConfig::default()));
    let mut sm_c = StateMachine::open(&dir.path().join("b"), store_c.clone()).unwrap();
    assert_eq!(dump(&store_c), expected);
    assert_eq!(sm_c.applied_state().await.unwrap().0, Some(log_id(1, 50)));
}

/// docs/guarantees.md, Writes: a proposal sent again under the same (session, seq) applies once, on
/// every member: the session table travels in snapshots, so a member that installs one answers a
/// late copy from it instead of applying it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_proposal_applies_once_even_across_a_snapshot() {
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(Store::new(StoreConfig::default()));
    let mut sm = StateMachine::open(&dir.path().join("a"), store.clone()).unwrap();
    let in_session = |seq: u64| Proposal {
        mutation: mutation(1000 + seq, 50),
        session: Some(77),
        seq: Some(seq),
        acked: Some(0),
        prepared: Default::default(),
    };
    let first = sm
        .apply(vec![normal(1, Batch::new(vec![in_session(1)]))])
        .await
        .unwrap();
    let rv = match &first[0].results[0] {
        Ok(applied) => applied.resource_version,
        Err(e) => panic!("first copy refused: {e}"),
    };
    // The copy (answer lost, sent again) is answered with the first result.
    let copy = sm
        .apply(vec![normal(2, Batch::new(vec![in_session(1)]))])
        .await
        .unwrap();
    match &copy[0].results[0] {
        Ok(applied) => assert_eq!(applied.resource_version, rv),
        Err(e) => panic!("copy answered with an error: {e}"),
    }
    assert_eq!(store.resource_version(), rv, "the copy must not apply");

    // A fresh member installing a snapshot taken now answers a later copy the same way.
    let mut builder = sm.get_snapshot_builder().await;
    let snap = builder.build_snapshot().await.unwrap();
    let store_b = Arc::new(Store::new(StoreConfig::default()));
    let mut sm_b = StateMachine::open(&dir.path().join("b"), store_b.clone()).unwrap();
    sm_b.install_snapshot(&snap.meta, snap.snapshot)
        .await
        .unwrap();
    for machine in [&mut sm, &mut sm_b] {
        let late = machine
            .apply(vec![normal(3, Batch::new(vec![in_session(1)]))])
            .await
            .unwrap();
        assert!(matches!(&late[0].results[0], Ok(a) if a.resource_version == rv));
    }
    assert_eq!(dump(&store_b), dump(&store));
    assert_eq!(store_b.resource_version(), rv);

    // Once acknowledged, the result is forgotten and a very late copy applies nothing.
    let next = Proposal {
        acked: Some(1),
        ..in_session(2)
    };
    sm.apply(vec![normal(4, Batch::new(vec![next]))])
        .await
        .unwrap();
    let before = store.resource_version();
    let stale = sm
        .apply(vec![normal(5, Batch::new(vec![in_session(1)]))])
        .await
        .unwrap();
    assert!(stale[0].results[0].is_err());
    assert_eq!(store.resource_version(), before);
}
