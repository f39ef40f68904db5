//! Crash test of the Raft log: a child process (this test binary re-executed) appends under
//! load from many tasks and prints each index once its flush callback has fired; the parent
//! SIGKILLs it at random moments, reopens the log and checks that every reported index is
//! present and intact, that there are no holes, and that the last reported vote is there.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use litek8s::kube::mutation::Mutation;
use litek8s::kube::object::ObjectKey;
use litek8s::raft::log::{LogConfig, LogStore};
use litek8s::raft::types::{Batch, Entry, LogId, Proposal, Vote};
use openraft::{CommittedLeaderId, EntryPayload};
use rand::Rng;

const CHILD_ENV: &str = "LITEK8S_RAFT_CRASH_CHILD";
const CYCLE_ENV: &str = "LITEK8S_RAFT_CRASH_CYCLE";
const CYCLES_ENV: &str = "LITEK8S_RAFT_CRASH_CYCLES";

fn config() -> LogConfig {
    LogConfig {
        segment_size: 256 << 10,
        ..LogConfig::default()
    }
}

fn log_id(index: u64) -> LogId {
    LogId::new(CommittedLeaderId::new(1, 1), index)
}

/// The entry at `index`, the same every time (so the parent can check it is intact).
fn entry(index: u64) -> Entry {
    let size = 100 + (index * 7919) % 3000;
    Entry {
        log_id: log_id(index),
        payload: EntryPayload::Normal(Batch::new(vec![Proposal::new(Mutation::Create {
            key: ObjectKey::new("configmaps", "default", format!("c{index}")),
            object: serde_json::json!({"metadata":{"name":format!("c{index}")},
                    "data":{"v":"y".repeat(size as usize)}}),
            requires_open_namespace: false,
        })])),
    }
}

/// The child: appends forever until killed.
#[test]
fn crash_child() {
    let Ok(dir) = std::env::var(CHILD_ENV) else {
        return; // only runs when re-executed by the parent
    };
    let cycle: u64 = std::env::var(CYCLE_ENV)
        .ok()
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async move {
        let log = LogStore::open(Path::new(&dir), config()).unwrap();
        let term = (cycle + 1) * 1000;
        log.save_vote_durably(&Vote::new(term, 1)).await.unwrap();
        println!("VOTE {term}");
        let next = log.log_state().unwrap().1.map_or(1, |l| l.index + 1);
        let next = Arc::new(tokio::sync::Mutex::new(next));
        let mut tasks = Vec::new();
        for task in 0..32u64 {
            let (log, next) = (log.clone(), next.clone());
            tasks.push(tokio::spawn(async move {
                for round in 0u64.. {
                    let rx = {
                        let mut next = next.lock().await;
                        let index = *next;
                        *next += 1;
                        let (tx, rx) = tokio::sync::oneshot::channel();
                        log.append_with(vec![entry(index)], move |r| {
                            if r.is_ok() {
                                println!("OK {index}");
                            }
                            let _ = tx.send(r);
                        })
                        .unwrap();
                        if task == 0 && round % 200 == 199 && index > 500 {
                            log.purge_upto(log_id(index - 400)).unwrap();
                        }
                        rx
                    };
                    rx.await.unwrap().unwrap();
                    if task == 1 && round % 50 == 49 {
                        let vote = Vote::new(term + round, 1);
                        log.save_vote_durably(&vote).await.unwrap();
                        println!("VOTE {}", vote.leader_id.term);
                    }
                }
            }));
        }
        for t in tasks {
            let _ = t.await;
        }
    });
}

fn check(dir: &Path, reported: &[u64], vote_term: Option<u64>) -> (u64, u64) {
    let log = LogStore::open(dir, config()).expect("reopen after kill");
    let (purged, last) = log.log_state().unwrap();
    let first = purged.map_or(1, |p| p.index + 1);
    let last = last.map_or(0, |l| l.index);
    let entries = log.reader().read(0, u64::MAX, usize::MAX).unwrap();
    let got: Vec<u64> = entries.iter().map(|e| e.log_id.index).collect();
    assert_eq!(got, (first..=last).collect::<Vec<_>>(), "holes in the log");
    for e in &entries {
        assert_eq!(
            e.payload,
            entry(e.log_id.index).payload,
            "entry {} damaged",
            e.log_id.index
        );
    }
    for index in reported {
        assert!(
            *index < first || *index <= last,
            "acknowledged entry {index} lost (log ends at {last})"
        );
    }
    if let Some(term) = vote_term {
        let vote = log.vote().expect("vote lost");
        assert!(
            vote.leader_id.term >= term,
            "vote went back from {term} to {vote:?}"
        );
    }
    (first, last)
}

#[test]
fn acknowledged_entries_survive_sigkill() {
    let cycles: usize = std::env::var(CYCLES_ENV)
        .ok()
        .and_then(|c| c.parse().ok())
        .unwrap_or(50);
    let dir = tempfile::tempdir().unwrap();
    let exe = std::env::current_exe().unwrap();
    let mut rng = rand::thread_rng();
    let mut total_acked = 0usize;
    for cycle in 0..cycles {
        let mut child = Command::new(&exe)
            .args([
                "--exact",
                "crash_child",
                "--nocapture",
                "--test-threads",
                "1",
            ])
            .env(CHILD_ENV, dir.path())
            .env(CYCLE_ENV, cycle.to_string())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let stdout = child.stdout.take().unwrap();
        let reader = std::thread::spawn(move || {
            let mut acked = Vec::new();
            let mut vote = None;
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if let Some(i) = line.strip_prefix("OK ") {
                    acked.push(i.trim().parse::<u64>().unwrap());
                } else if let Some(t) = line.strip_prefix("VOTE ") {
                    vote = Some(t.trim().parse::<u64>().unwrap());
                }
            }
            (acked, vote)
        });
        std::thread::sleep(Duration::from_millis(rng.gen_range(30..250)));
        child.kill().unwrap(); // SIGKILL
        let status = child.wait().unwrap();
        assert!(!status.success(), "the child must have been killed");
        let (acked, vote) = reader.join().unwrap();
        total_acked += acked.len();
        check(dir.path(), &acked, vote);
    }
    assert!(total_acked > 0, "the child never acknowledged anything");
    println!("{cycles} kill/reopen cycles, {total_acked} acknowledged appends checked");
}
