//! Crash safety of objects.wal: a child process (this test binary, re-executed) writes through
//! `WalWriter` from 16 tasks and prints every acknowledged write; the parent kills it with
//! SIGKILL at a random moment, reopens the log, and checks that every acknowledged write is
//! there with the resourceVersion it was acknowledged with. Checkpoints are frequent, so kills
//! land in the middle of them too.

use std::collections::{BTreeMap, BTreeSet};
use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::{mpsc, Arc};
use std::time::Duration;

use litek8s::kube::mutation::{Mutation, Precondition};
use litek8s::kube::object::ObjectKey;
use litek8s::kube::store::{Store, StoreConfig};
use litek8s::kube::wal::{WalConfig, WalWriter};
use litek8s::kube::writer::Writer;
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use rand::Rng;
use serde_json::json;

const CHILD_DIR: &str = "LITEK8S_WAL_CRASH_DIR";
const CHILD_CYCLE: &str = "LITEK8S_WAL_CRASH_CYCLE";
const CYCLES: usize = 20;
const TASKS: usize = 16;

fn config() -> WalConfig {
    WalConfig {
        checkpoint_every: 300,
        preallocate_bytes: 64 << 10,
        ..WalConfig::default()
    }
}

fn store() -> Arc<Store> {
    Arc::new(Store::new(StoreConfig {
        history_window: 100,
        live_buffer: 64,
    }))
}

fn key(name: &str) -> ObjectKey {
    ObjectKey::new("configmaps", "default", name)
}

fn object(name: &str, i: usize) -> serde_json::Value {
    json!({"apiVersion":"v1","kind":"ConfigMap",
           "metadata":{"name":name,"namespace":"default"},
           "data":{"i":i.to_string(),"pad":"x".repeat(i % 300)}})
}

/// The child's job: write until killed. Each task creates new objects and updates a counter
/// object of its own; every acknowledged write is printed as `ACK <c|u> <name> <rv>`.
async fn child(dir: &Path, cycle: usize) {
    let (wal, _) = WalWriter::open(dir, store(), config()).expect("child: open");
    let wal = Arc::new(wal);
    let mut tasks = Vec::new();
    for task in 0..TASKS {
        let wal = wal.clone();
        tasks.push(tokio::spawn(async move {
            let counter = format!("counter-{task}");
            for i in 0.. {
                let (kind, name, mutation) = if i % 3 == 2 {
                    let m = Mutation::Update {
                        key: key(&counter),
                        object: object(&counter, i),
                        precondition: Precondition::none(),
                    };
                    ("u", counter.clone(), m)
                } else {
                    let name = format!("c{cycle}-t{task}-{i}");
                    let m = Mutation::Create {
                        key: key(&name),
                        object: object(&name, i),
                        requires_open_namespace: false,
                    };
                    ("c", name, m)
                };
                match wal.write(mutation).await {
                    Ok(stored) => {
                        let mut out = std::io::stdout().lock();
                        let _ = writeln!(out, "ACK {kind} {name} {}", stored.resource_version);
                        let _ = out.flush();
                    }
                    // The counter does not exist until the first cycle's first create of it.
                    Err(_) if kind == "u" => {
                        let m = Mutation::Create {
                            key: key(&counter),
                            object: object(&counter, i),
                            requires_open_namespace: false,
                        };
                        let _ = wal.write(m).await;
                    }
                    Err(e) => panic!("child: write failed: {e}"),
                }
            }
        }));
    }
    for task in tasks {
        let _ = task.await;
    }
}

/// Runs as a no-op in the normal test run; it is the child when the environment says so.
#[test]
fn crash_child() {
    let (Ok(dir), Ok(cycle)) = (std::env::var(CHILD_DIR), std::env::var(CHILD_CYCLE)) else {
        return;
    };
    let cycle: usize = cycle.parse().expect("cycle number");
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
        .block_on(child(Path::new(&dir), cycle));
}

#[test]
fn acknowledged_writes_survive_sigkill() {
    let dir = tempfile::tempdir().unwrap();
    let exe = std::env::current_exe().unwrap();
    let mut rng = rand::thread_rng();
    // Creates: name → acknowledged rv. Updates: name → highest acknowledged rv.
    let mut created: BTreeMap<String, u64> = BTreeMap::new();
    let mut updated: BTreeMap<String, u64> = BTreeMap::new();
    let mut all_versions = BTreeSet::new();
    let mut last_rv = 0;
    for cycle in 0..CYCLES {
        let mut child = Command::new(&exe)
            .args(["crash_child", "--exact", "--nocapture", "--test-threads=1"])
            .env(CHILD_DIR, dir.path())
            .env(CHILD_CYCLE, cycle.to_string())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let stdout = child.stdout.take().unwrap();
        let (tx, rx) = mpsc::channel::<String>();
        let reader = std::thread::spawn(move || {
            let mut reader = BufReader::new(stdout);
            let mut line = String::new();
            while reader.read_line(&mut line).unwrap_or(0) > 0 {
                // A line cut by the kill has no newline and was never fully printed.
                if line.ends_with('\n') && line.starts_with("ACK ") {
                    let _ = tx.send(line.trim_end().to_string());
                }
                line.clear();
            }
        });
        let mut lines = Vec::new();
        // Kill after a random number of acknowledgements, once writing is under way.
        let wait_for = rng.gen_range(1..600);
        while lines.len() < wait_for {
            match rx.recv_timeout(Duration::from_secs(30)) {
                Ok(line) => lines.push(line),
                Err(e) => panic!("cycle {cycle}: child stopped acknowledging writes: {e}"),
            }
        }
        std::thread::sleep(Duration::from_micros(rng.gen_range(0..20_000)));
        kill(Pid::from_raw(child.id() as i32), Signal::SIGKILL).unwrap();
        child.wait().unwrap();
        reader.join().unwrap();
        lines.extend(rx.try_iter());

        for line in &lines {
            let parts: Vec<&str> = line.split(' ').collect();
            let (kind, name, rv) = match parts.as_slice() {
                ["ACK", kind, name, rv] => (*kind, name.to_string(), rv.parse::<u64>().unwrap()),
                _ => panic!("bad line {line:?}"),
            };
            assert!(
                all_versions.insert(rv),
                "resourceVersion {rv} acknowledged twice"
            );
            assert!(
                rv > last_rv,
                "cycle {cycle}: rv {rv} not above the last run's {last_rv}"
            );
            if kind == "c" {
                created.insert(name, rv);
            } else {
                let entry = updated.entry(name).or_insert(0);
                *entry = (*entry).max(rv);
            }
        }

        let store = store();
        let (wal, report) = WalWriter::open(dir.path(), store.clone(), config())
            .unwrap_or_else(|e| panic!("cycle {cycle}: reopen failed: {e}"));
        for (name, rv) in &created {
            let found = store.get(&key(name)).map(|o| o.resource_version);
            assert_eq!(
                found,
                Some(*rv),
                "cycle {cycle}: acknowledged create of {name} ({report:?})"
            );
        }
        for (name, rv) in &updated {
            let found = store
                .get(&key(name))
                .map(|o| o.resource_version)
                .unwrap_or(0);
            assert!(
                found >= *rv,
                "cycle {cycle}: {name} at {found}, acknowledged {rv}"
            );
        }
        last_rv = store.resource_version();
        drop(wal);
    }
    assert!(created.len() > CYCLES, "the children wrote something");
}
