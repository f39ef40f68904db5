//! docs/guarantees.md, Writes: a follower's own writes go to the leader as proposals carrying
//! (session, seq), and a retried proposal applies once. The leader here loses the answers of the
//! first forwarded proposals after applying them (the fail point
//! `cluster_rpc::lose_propose_reply`); the followers' first writes (creating their Leases) are
//! sent again, and the copies must be answered with the first result instead of applying a
//! second time (which would answer "already exists").

mod cluster_support;
mod support;

use std::time::{Duration, Instant};

use cluster_support::Cluster;

const LOST_REPLIES: &str = "4";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_proposal_sent_again_after_a_lost_answer_applies_once() {
    let mut cluster = Cluster::start(0);
    let first = cluster.add_stopped_member();
    let mut cmd = cluster.command(first);
    support::arm_failpoint(&mut cmd, "cluster_rpc::lose_propose_reply", LOST_REPLIES);
    cluster.spawn_command(first, cmd);
    cluster.wait_ready(first);
    cluster.add_member();
    cluster.add_member();

    // Each follower creates its own Lease through the leader as its first write.
    let deadline = Instant::now() + Duration::from_secs(30);
    for (i, name) in [(1, "lk2"), (2, "lk3")] {
        let path = format!(
            "/apis/coordination.k8s.io/v1/namespaces/kube-system/leases/litek8s-apiserver-{name}"
        );
        loop {
            let resp = cluster.api(0).get(&path).await;
            if matches!(&resp, Ok(r) if r.status == 200) {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "lease of {name} never appeared: {resp:?}\n{}",
                cluster.logs(i)
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    let leader_log = cluster.logs(0);
    let lost = leader_log
        .matches("fail point cluster_rpc::lose_propose_reply: losing an answer")
        .count();
    assert!(
        lost >= 2,
        "the fail point never fired ({lost} times):\n{leader_log}"
    );
    let follower_logs = cluster.logs(1) + &cluster.logs(2);
    assert!(
        follower_logs.contains("sending it again"),
        "no follower retried a proposal:\n{follower_logs}"
    );
    assert!(
        !follower_logs.contains("lease failed"),
        "a retried proposal applied twice (its copy was refused):\n{follower_logs}"
    );
    let digest = cluster.converged().await;
    assert!(digest.0 > 0);
}
