//! The leader-gated runner in a cluster of real processes (docs/guarantees.md, Leader-only
//! loops): the control plane's Leases name the Raft leader, move to the new leader when the
//! old one is killed, and a leader that was stopped and comes back deposed does not take them
//! back (its controllers' writes fail instead of being forwarded).

mod cluster_support;
mod support;

use std::time::{Duration, Instant};

use cluster_support::Cluster;
use serde_json::{json, Value};

const LEASE: &str =
    "/apis/coordination.k8s.io/v1/namespaces/kube-system/leases/kube-controller-manager";

/// The kube-controller-manager Lease as member `i` holds it (a local read).
async fn lease(cluster: &Cluster, i: usize) -> Option<Value> {
    let resp = cluster
        .api(i)
        .get(&format!("{LEASE}?resourceVersion=0"))
        .await
        .ok()?;
    (resp.status == 200).then(|| resp.json())
}

fn holder_name(lease: &Value) -> String {
    lease["spec"]["holderIdentity"]
        .as_str()
        .and_then(|h| h.split_once('_'))
        .map(|(name, _)| name.to_string())
        .unwrap_or_default()
}

/// Waits (hang guard 60 s) until member `ask` shows the Lease held by member `holder`.
async fn wait_holder(cluster: &Cluster, ask: usize, holder: usize) -> (Value, Duration) {
    let start = Instant::now();
    loop {
        if let Some(l) = lease(cluster, ask).await {
            if holder_name(&l) == cluster.members[holder].name {
                return (l, start.elapsed());
            }
        }
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "the lease did not move to {}",
            cluster.members[holder].name
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_control_plane_leases_follow_the_raft_leader() {
    support::install_crypto_provider();
    let mut cluster = Cluster::start(3);
    let leader = cluster.wait_leader().await;
    let other = (leader + 1) % 3;
    let (first, _) = wait_holder(&cluster, other, leader).await;
    let transitions = first["spec"]["leaseTransitions"].as_i64().unwrap();

    cluster.kill(leader);
    let killed_at = Instant::now();
    let new_leader = cluster.wait_leader().await;
    let (moved, _) = wait_holder(&cluster, other, new_leader).await;
    eprintln!(
        "kube-controller-manager Lease moved from {} to {} {:?} after the kill",
        cluster.members[leader].name,
        cluster.members[new_leader].name,
        killed_at.elapsed()
    );
    assert_eq!(
        moved["spec"]["leaseTransitions"].as_i64().unwrap(),
        transitions + 1
    );
    assert_ne!(moved["spec"]["acquireTime"], first["spec"]["acquireTime"]);

    // The new leader's controllers act: a new namespace gets its `default` ServiceAccount.
    let resp = cluster
        .api(other)
        .post_json(
            "/api/v1/namespaces",
            &json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "after-kill"}}),
        )
        .await
        .unwrap();
    assert_eq!(resp.status, 201, "{}", resp.text());
    let start = Instant::now();
    loop {
        let resp = cluster
            .api(other)
            .get("/api/v1/namespaces/after-kill/serviceaccounts/default")
            .await
            .unwrap();
        if resp.status == 200 {
            break;
        }
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "no default ServiceAccount"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deposed_leader_does_not_take_the_leases_back() {
    support::install_crypto_provider();
    let mut cluster = Cluster::start(3);
    let leader = cluster.wait_leader().await;
    let other = (leader + 1) % 3;
    wait_holder(&cluster, other, leader).await;

    // Stopped long enough to be replaced, then resumed: it still believes it leads until it
    // hears from the new leader, and its lease loop and controllers are still running.
    cluster.pause(leader);
    let new_leader = loop {
        if let Some(l) = cluster.leader(other).await {
            if l != leader {
                break l;
            }
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    wait_holder(&cluster, other, new_leader).await;
    cluster.resume(leader);

    // For the next 6 s (three renewal periods of 2 s) the members keep showing the new
    // leader as the holder: the old leader's renewals were refused, not forwarded. The old
    // leader's own local reads may show its stale state for a moment after it resumes; once
    // it has caught up (1 s on), it shows the new holder too.
    let resumed = Instant::now();
    let until = resumed + Duration::from_secs(6);
    while Instant::now() < until {
        for i in 0..3 {
            if i == leader && resumed.elapsed() < Duration::from_secs(1) {
                continue;
            }
            if let Some(l) = lease(&cluster, i).await {
                assert_eq!(
                    holder_name(&l),
                    cluster.members[new_leader].name,
                    "member {} shows the lease taken back by the deposed leader",
                    cluster.members[i].name
                );
            }
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}
