//! Three servers A, B, C and one agent `n1` whose tunnel goes to B, with real pods (runc,
//! conmon, CNI, the busybox test image imported): the setup of the tests that reach a node's
//! pods from a server the agent is not connected to (streams relayed C → B → agent in
//! tests/agent_streams.rs; a server's own calls to webhooks and aggregated API servers in pods
//! in tests/agent_webhook_pods.rs). A test crate using it also declares `agent_support` and
//! `cluster_support`.

use crate::agent_support::{self, Agent, PodCleanup};
use crate::cluster_support::Cluster;

/// The test image every pod runs.
pub const IMAGE: &str = "litek8s.test/busybox:1";

/// The running cluster and agent; dropping it stops them and cleans the host up.
pub struct Setup {
    pub cluster: Cluster,
    pub agent: Agent,
    _cleanup: Cleanup,
}

/// The agent's pods, mounts and bridge removed ([`PodCleanup`]), then the host's IP
/// forwarding setting, which the agent turns on, put back.
struct Cleanup {
    _pods: PodCleanup,
    ip_forward: Option<String>,
}

impl Drop for Cleanup {
    fn drop(&mut self) {
        if let Some(v) = &self.ip_forward {
            let _ = std::fs::write("/proc/sys/net/ipv4/ip_forward", v);
        }
    }
}

/// Starts the three servers and the agent on B. `missing`: what the calling tests need and
/// this machine lacks (`None` is returned with [`agent_support::SKIP_CONTAINERS_ENV`]`=1`, otherwise the test fails
/// naming it). `bridge_prefix` (4 characters) and `subnet_base` keep the bridge name and pod
/// range apart from other test files running at the same time.
pub fn start(missing: Vec<String>, bridge_prefix: &str, subnet_base: u32) -> Option<Setup> {
    if !agent_support::tools_present_or_skip(&missing, "pod tests need") {
        return None;
    }
    let pid = std::process::id();
    let bridge = format!("{bridge_prefix}{}", pid % 1_000_000);
    let cidr = format!("10.{}.{}.0/24", subnet_base + (pid % 10), pid % 250);
    let mut cluster = Cluster::start_with(0, 100);
    for _ in 0..3 {
        let i = cluster.add_stopped_member();
        let mut cmd = cluster.command(i);
        cmd.arg("--cluster-cidr").arg(&cidr);
        cluster.spawn_command(i, cmd);
        cluster.wait_ready(i);
    }
    let agent = Agent::new(
        "n1",
        &cluster.url(1),
        Some(&cluster.token()),
        &["--cni-bridge", &bridge],
    );
    let cleanup = Cleanup {
        _pods: PodCleanup {
            node_dir: agent.node_dir.clone(),
            root: agent.root.clone(),
            bridge,
        },
        ip_forward: std::fs::read_to_string("/proc/sys/net/ipv4/ip_forward").ok(),
    };
    agent_support::place_test_image(&agent.node_dir, IMAGE);
    let mut agent = agent;
    agent.start();
    Some(Setup {
        cluster,
        agent,
        _cleanup: cleanup,
    })
}
