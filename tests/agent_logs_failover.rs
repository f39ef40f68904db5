//! `kubectl logs -f` while the agent's tunnel moves: three servers, the agent `n1` with a pod
//! printing a line every 0.2 s, kubectl (1.27, then 1.33) following it through another server
//! than the tunnel's. The tunnel's server is SIGKILLed: kubectl sees its stream end (the relay
//! to the dead server is gone), the agent dials the next server and names it on its Node, and a
//! new `logs -f` through the same kubectl server prints a line within 3 s of the end. Printed:
//! the time from the kill to the end and from the end to the first new line. Real pods, as in
//! tests/agent_pods.rs (`LITEK8S_SKIP_CONTAINERS=1` skips when the tools are missing).

mod agent_support;
mod cluster_support;
mod support;

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use agent_support::{missing_pod_tools, Agent, PodCleanup, KUBECTLS};
use cluster_support::Cluster;
use serde_json::json;
use support::{runtime, Api};

const IMAGE: &str = "litek8s.test/busybox:1";
/// What the test asserts: a new `logs -f` prints within this of the old one's end.
const RESUME: Duration = Duration::from_secs(3);
/// Hang guards, not performance assertions.
const GUARD: Duration = Duration::from_secs(60);

/// The server the Node's annotation names as its tunnel's.
async fn tunnel_server(api: &Api) -> Option<String> {
    agent_support::node(api, "n1").await.and_then(|n| {
        n["metadata"]["annotations"]["litek8s.io/tunnel-server"]
            .as_str()
            .map(str::to_string)
    })
}

/// `kubectl logs -f ticker` with `kubeconfig`; its lines (with when they came) on a channel.
fn follow(kubectl: &str, kubeconfig: &Path) -> (Child, mpsc::Receiver<(Instant, String)>) {
    let mut child = Command::new(kubectl)
        .arg("--kubeconfig")
        .arg(kubeconfig)
        .args(["logs", "-f", "--tail", "1", "ticker"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("kubectl logs -f");
    let stdout = child.stdout.take().expect("stdout");
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            if tx.send((Instant::now(), line)).is_err() {
                break;
            }
        }
    });
    (child, rx)
}

#[test]
fn logs_follow_ends_when_the_tunnel_moves_and_a_new_one_works_within_3s() {
    let missing = missing_pod_tools();
    if !agent_support::tools_present_or_skip(&missing, "this test needs") {
        return;
    }
    let pid = std::process::id();
    let bridge = format!("lk8f{}", pid % 1_000_000);
    let cidr = format!("10.{}.{}.0/24", 210 + (pid % 10), pid % 250);
    let mut cluster = Cluster::start_with(0, 100);
    for _ in 0..3 {
        let i = cluster.add_stopped_member();
        let mut cmd = cluster.command(i);
        cmd.arg("--cluster-cidr").arg(&cidr);
        cluster.spawn_command(i, cmd);
        cluster.wait_ready(i);
    }
    let mut agent = Agent::new(
        "n1",
        &cluster.url(1),
        Some(&cluster.token()),
        &["--cni-bridge", &bridge],
    );
    let _cleanup = PodCleanup {
        node_dir: agent.node_dir.clone(),
        root: agent.root.clone(),
        bridge,
    };
    agent_support::place_test_image(&agent.node_dir, IMAGE);
    agent.start();
    let rt = runtime();
    rt.block_on(async {
        let api = cluster.api(0);
        let pod = agent_support::pod(
            "ticker",
            IMAGE,
            &["sh", "-c", "while true; do echo tick; sleep 0.2; done"],
            0,
            json!({"nodeName": "n1"}),
        );
        let resp = api
            .post_json("/api/v1/namespaces/default/pods", &pod)
            .await
            .expect("POST");
        assert_eq!(resp.status, 201, "{}", resp.text());
    });

    for kubectl in KUBECTLS {
        // The tunnel's server (once named) and another one for kubectl.
        let deadline = Instant::now() + GUARD;
        let b = loop {
            // Every server is up at the start of a round.
            let named = rt.block_on(tunnel_server(&cluster.api(0)));
            if let Some(i) = named.and_then(|n| cluster.members.iter().position(|m| m.name == n)) {
                break i;
            }
            assert!(
                Instant::now() < deadline,
                "no tunnel named:\n{}",
                agent.logs()
            );
            std::thread::sleep(Duration::from_millis(100));
        };
        let c = (b + 1) % 3;
        let kubeconfig = cluster.members[c].data_dir.join("kubeconfig.yaml");
        // Following (retried until the pod runs and prints).
        let (mut child, rx) = loop {
            let (mut child, rx) = follow(kubectl, &kubeconfig);
            if rx.recv_timeout(Duration::from_secs(3)).is_ok() {
                break (child, rx);
            }
            let _ = child.kill();
            let _ = child.wait();
            assert!(
                Instant::now() < deadline,
                "{kubectl}: logs -f never printed"
            );
        };
        let killed = Instant::now();
        cluster.kill(b);
        // kubectl's stream ends: its lines stop and it exits.
        let ended = loop {
            match rx.recv_timeout(Duration::from_secs(20)) {
                Ok(_) => continue,
                Err(mpsc::RecvTimeoutError::Disconnected) => break Instant::now(),
                Err(mpsc::RecvTimeoutError::Timeout) => {
                    panic!("{kubectl}: logs -f went on 20 s after its tunnel's server died")
                }
            }
        };
        let _ = child.wait();
        // A new one, through the same server, until it prints.
        let first_line = loop {
            let (mut child, rx) = follow(kubectl, &kubeconfig);
            let got = rx.recv_timeout(Duration::from_secs(2));
            let _ = child.kill();
            let _ = child.wait();
            if let Ok((at, _)) = got {
                break at;
            }
            assert!(
                ended.elapsed() < RESUME + Duration::from_secs(10),
                "{kubectl}: no new logs -f worked:\n{}",
                agent.logs()
            );
        };
        let resumed = first_line.saturating_duration_since(ended);
        println!(
            "{kubectl}: the stream ended {:.2} s after the kill; a new logs -f printed {:.2} s after the end",
            (ended - killed).as_secs_f64(),
            resumed.as_secs_f64()
        );
        assert!(
            resumed < RESUME,
            "{kubectl}: a new logs -f took {resumed:?}"
        );
        // The dead server back, for the next round.
        cluster.restart(b);
        cluster.wait_ready(b);
    }
}
