//! SPEC H1/H2/H4: a cluster of real processes loses its leader to SIGKILL during continuous
//! writes from clients spread over every member. Every acknowledged write must be on every
//! surviving member, writes must resume, and after the cluster settles (the killed member
//! restarted) every member must hold identical objects and resourceVersions.

mod cluster_support;
mod support;

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use cluster_support::Cluster;
use serde_json::json;

/// Writers per member.
const WRITERS_PER_MEMBER: usize = 2;

async fn writer_loop(
    api: support::Api,
    prefix: String,
    stop: Arc<AtomicBool>,
    acked: Arc<Mutex<BTreeSet<String>>>,
    acked_after_kill: Arc<AtomicUsize>,
    killed: Arc<AtomicBool>,
) {
    let mut n = 0u64;
    while !stop.load(Ordering::Relaxed) {
        n += 1;
        let name = format!("{prefix}-{n}");
        let body = json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": name}, "data": {"n": n.to_string()}});
        match api
            .post_json("/api/v1/namespaces/default/configmaps", &body)
            .await
        {
            Ok(resp) if resp.status == 201 => {
                acked.lock().unwrap().insert(format!("default/{name}"));
                if killed.load(Ordering::Relaxed) {
                    acked_after_kill.fetch_add(1, Ordering::Relaxed);
                }
            }
            // Refused, timed out or connection lost: not acknowledged, so not checked. A
            // write that failed with 504 may still exist; that is allowed (SPEC H11).
            _ => tokio::time::sleep(Duration::from_millis(20)).await,
        }
    }
}

async fn kill_leader_during_writes(members: usize) {
    let mut cluster = Cluster::start(members);
    let leader = cluster.wait_leader().await;
    let stop = Arc::new(AtomicBool::new(false));
    let killed = Arc::new(AtomicBool::new(false));
    let acked = Arc::new(Mutex::new(BTreeSet::new()));
    let after_kill = Arc::new(AtomicUsize::new(0));
    let mut tasks = Vec::new();
    for i in 0..members {
        for w in 0..WRITERS_PER_MEMBER {
            tasks.push(tokio::spawn(writer_loop(
                cluster.api(i),
                format!("m{i}w{w}"),
                stop.clone(),
                acked.clone(),
                after_kill.clone(),
                killed.clone(),
            )));
        }
    }
    tokio::time::sleep(Duration::from_secs(2)).await;
    let before_kill = acked.lock().unwrap().len();
    assert!(before_kill > 0, "no write succeeded before the kill");
    cluster.kill(leader);
    killed.store(true, Ordering::Relaxed);
    // Writes must resume: wait (bounded) for acknowledgements after the kill.
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while after_kill.load(Ordering::Relaxed) < 20 {
        assert!(
            std::time::Instant::now() < deadline,
            "writes did not resume after killing the leader"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    stop.store(true, Ordering::Relaxed);
    for t in tasks {
        let _ = t.await;
    }
    let acked = acked.lock().unwrap().clone();
    let new_leader = cluster.wait_leader().await;
    assert_ne!(new_leader, leader);

    let (rv, items) = cluster.converged().await;
    let present: BTreeSet<String> = items.iter().map(|(k, _)| k.clone()).collect();
    let missing: Vec<&String> = acked.difference(&present).collect();
    assert!(
        missing.is_empty(),
        "{} acknowledged writes missing on the survivors (of {}): {:?}",
        missing.len(),
        acked.len(),
        &missing[..missing.len().min(10)]
    );
    // resourceVersions are unique per object and never above the store's.
    let rvs: BTreeSet<u64> = items.iter().map(|(_, rv)| *rv).collect();
    assert_eq!(
        rvs.len(),
        items.len(),
        "two objects share a resourceVersion"
    );
    assert!(items.iter().all(|(_, r)| *r <= rv));

    // The killed member comes back on its data and converges too.
    cluster.restart(leader);
    let (_, settled) = cluster.converged().await;
    for (key, _) in &items {
        assert!(
            settled.iter().any(|(k, _)| k == key),
            "{key} lost after the restart"
        );
    }
    eprintln!(
        "{members} members: {} writes acknowledged ({before_kill} before the kill), all present on every member",
        acked.len()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_members_survive_a_leader_kill() {
    kill_leader_during_writes(3).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn five_members_survive_a_leader_kill() {
    kill_leader_during_writes(5).await;
}
