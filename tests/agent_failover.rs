//! The node agent through a server failure (docs/agent.md, Staying joined): with 3 servers,
//! the one the agent's requests go to is SIGKILLed; the agent must move to a live server and
//! keep renewing its Lease, so the Node never turns NotReady or Unknown. The Lease duration
//! (8 s, renewed every 2 s) and the servers' `--node-monitor-grace-period` (8 s) are a fifth
//! of the defaults (40 s, 10 s, 40 s), keeping the defaults' proportions in a short test.
//! Then the leader is killed too (after the first victim is back), whichever server the agent
//! uses. Printed: the time from each kill to the agent's first request to another server, and
//! to its first Lease renewal after the kill.

mod agent_support;
mod cluster_support;
mod support;

use std::time::{Duration, Instant};

use agent_support::{condition, lease, node, Agent};
use cluster_support::Cluster;
use support::runtime;

/// The servers' grace period: a node silent this long turns Unknown.
const GRACE: Duration = Duration::from_secs(8);
/// Hang guard of the switch: one check interval (2 s) plus a check's timeout (1 s) by design,
/// with room for a loaded machine.
const SWITCH_GUARD: Duration = Duration::from_secs(6);

/// What one kill did to the agent.
struct Outcome {
    victim: String,
    was_leader: bool,
    /// From the kill to the agent's first request to another server (`None`: it stayed).
    switched: Option<(Duration, String)>,
    /// From the kill to the first Lease renewal written after it.
    first_renewal: Duration,
}

/// SIGKILLs member `victim`, then watches the agent's log, the Lease and the Node (through
/// member `survivor`) until a grace period and 4 s more passed, asserting that the Node
/// stays Ready and untainted all along.
fn kill_and_watch(
    cluster: &mut Cluster,
    agent: &Agent,
    victim: usize,
    survivor: usize,
    rt: &tokio::runtime::Runtime,
) -> Outcome {
    let victim_addr = cluster.members[victim].api.to_string();
    let in_use = agent.server_in_use().expect("the agent names its server");
    let leader = rt.block_on(cluster.wait_leader());
    let log_before = agent.last_log().len();
    let killed_at_wall = chrono::Utc::now();
    let killed_at = Instant::now();
    cluster.kill(victim);
    let mut switched = None;
    let mut first_renewal = None;
    let mut reads = 0;
    rt.block_on(async {
        while killed_at.elapsed() < GRACE + Duration::from_secs(4) {
            let since_kill = agent.last_log().get(log_before..).unwrap_or("").to_string();
            if switched.is_none() && since_kill.contains(&format!("(was {in_use})")) {
                switched = Some((killed_at.elapsed(), agent.server_in_use().unwrap()));
            }
            let api = cluster.api(survivor);
            if first_renewal.is_none() {
                if let Some(l) = lease(&api, "n1").await {
                    let renewed = l["spec"]["renewTime"]
                        .as_str()
                        .and_then(|t| chrono::DateTime::parse_from_rfc3339(t).ok())
                        .map(|t| t.with_timezone(&chrono::Utc));
                    if renewed.is_some_and(|t| t > killed_at_wall) {
                        first_renewal = Some(killed_at.elapsed());
                    }
                }
            }
            if let Ok(Some(n)) =
                tokio::time::timeout(Duration::from_secs(2), node(&api, "n1")).await
            {
                reads += 1;
                assert_eq!(
                    condition(&n, "Ready"),
                    Some("True"),
                    "the Node left Ready {:?} after the kill: {n:#}",
                    killed_at.elapsed()
                );
                let taints = n["spec"]["taints"].to_string();
                assert!(
                    !taints.contains("unreachable") && !taints.contains("not-ready"),
                    "{taints}"
                );
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    });
    assert!(reads > 0, "the Node was never read after the kill");
    if victim_addr == in_use {
        let (after, _) = switched
            .as_ref()
            .unwrap_or_else(|| panic!("no switch away from {in_use}:\n{}", agent.logs()));
        assert!(*after < SWITCH_GUARD, "switched only after {after:?}");
    }
    let first_renewal = first_renewal.expect("the Lease was renewed after the kill");
    assert!(
        first_renewal < GRACE,
        "the Lease went unrenewed for {first_renewal:?}"
    );
    Outcome {
        victim: victim_addr,
        was_leader: victim == leader,
        switched,
        first_renewal,
    }
}

fn report(what: &str, o: &Outcome) {
    let switch = match &o.switched {
        Some((after, to)) => format!("the agent moved to {to} after {:.2} s", after.as_secs_f64()),
        None => "the agent stayed on its server".to_string(),
    };
    println!(
        "{what}: killed {} ({}); {switch}; first Lease renewal after the kill at {:.2} s; the Node stayed Ready for {} s",
        o.victim,
        if o.was_leader { "the leader" } else { "a follower" },
        o.first_renewal.as_secs_f64(),
        (GRACE + Duration::from_secs(4)).as_secs()
    );
}

#[test]
fn the_agent_moves_to_a_live_server_and_the_node_stays_ready() {
    let mut cluster = Cluster::start_with(0, 100);
    for _ in 0..3 {
        let i = cluster.add_stopped_member();
        let mut cmd = cluster.command(i);
        cmd.arg("--node-monitor-grace-period")
            .arg(format!("{}s", GRACE.as_secs()));
        cluster.spawn_command(i, cmd);
        cluster.wait_ready(i);
    }
    let rt = runtime();
    let mut agent = Agent::new(
        "n1",
        &cluster.url(0),
        Some(&cluster.token()),
        &["--node-lease-duration-seconds", "8"],
    );
    agent.start();
    rt.block_on(async {
        let n = node(&cluster.api(0), "n1").await.expect("registered");
        assert_eq!(condition(&n, "Ready"), Some("True"));
    });

    // 1. The server the agent uses dies.
    let in_use = agent.server_in_use().expect("the agent names its server");
    let victim = cluster
        .members
        .iter()
        .position(|m| m.api.to_string() == in_use)
        .unwrap_or_else(|| panic!("{in_use} is not a member"));
    let survivor = (0..3).find(|&i| i != victim).unwrap();
    let first = kill_and_watch(&mut cluster, &agent, victim, survivor, &rt);
    report("server in use", &first);
    assert!(first.switched.is_some());

    // 2. It comes back; then the leader dies (whichever server the agent uses).
    cluster.restart(victim);
    let leader = rt.block_on(cluster.wait_leader());
    let survivor = (0..3).find(|&i| i != leader).unwrap();
    let second = kill_and_watch(&mut cluster, &agent, leader, survivor, &rt);
    report("leader", &second);
    let logs = agent.logs();
    let moves: Vec<&str> = logs
        .lines()
        .filter(|l| l.contains("requests go to") || l.contains(" -> "))
        .collect::<Vec<_>>();
    println!(
        "the agent's server list over the test:\n{}",
        moves.join("\n")
    );
}
