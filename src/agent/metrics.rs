//! The agent's `/metrics`: Prometheus text with the names kubelet and kube-proxy give the same
//! measurements, so dashboards and alerts written for them read the agent unchanged.
//!
//! - Scraped, not recorded: `kubelet_node_name`, `kubelet_running_pods` (pods with a
//!   sandbox on this node) and `kubelet_running_containers` by `container_state` (the
//!   runtime's list), read when `/metrics` is asked for.
//! - Recorded as they happen, in the process-wide [`METRICS`] (atomics: a recording never
//!   locks): the duration of each pod worker's sync pass
//!   (`kubelet_pod_worker_duration_seconds{operation_type="sync"}`), runtime operations and
//!   their errors by `operation_type` (`kubelet_runtime_operations_total`,
//!   `kubelet_runtime_operations_errors_total`), image pulls
//!   (`kubelet_image_pull_duration_seconds`, and `litek8s_agent_image_pulls_total` by
//!   `result`), the Service proxy's nftables syncs (kube-proxy's
//!   `kubeproxy_sync_proxy_rules_duration_seconds`,
//!   `kubeproxy_sync_proxy_rules_last_timestamp_seconds`, and
//!   `litek8s_agent_proxy_sync_failures_total`), and the network policy table's syncs
//!   (`litek8s_agent_network_policy_sync_duration_seconds`,
//!   `litek8s_agent_network_policy_sync_failures_total`).
//!
//! Served on the node's endpoints (`/api/v1/nodes/<node>/proxy/metrics` through the server,
//! authorized there as `get nodes/proxy`), like kubelet's `/metrics`.

use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::agent::runtime::{ContainerState, Runtime};
use crate::agent::sandbox::Sandboxes;
use crate::metrics::{write_histogram, Counter, Histogram};

/// kubelet's buckets for pod worker durations (Prometheus' default buckets).
const POD_SYNC_BUCKETS: [f64; 11] = [
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
];
/// kube-proxy's buckets for rule syncs: 1 ms doubling to about 16 s.
const RULE_SYNC_BUCKETS: [f64; 15] = [
    0.001, 0.002, 0.004, 0.008, 0.016, 0.032, 0.064, 0.128, 0.256, 0.512, 1.024, 2.048, 4.096,
    8.192, 16.384,
];
/// kubelet's buckets for image pulls, in seconds.
const IMAGE_PULL_BUCKETS: [f64; 19] = [
    0.5, 1.0, 5.0, 10.0, 20.0, 30.0, 60.0, 120.0, 180.0, 240.0, 300.0, 360.0, 480.0, 600.0, 900.0,
    1200.0, 1800.0, 2700.0, 3600.0,
];

/// The runtime operations counted, as kubelet's `operation_type` label names them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RuntimeOp {
    CreateContainer,
    StartContainer,
    StopContainer,
    RemoveContainer,
}

impl RuntimeOp {
    const ALL: [RuntimeOp; 4] = [
        RuntimeOp::CreateContainer,
        RuntimeOp::StartContainer,
        RuntimeOp::StopContainer,
        RuntimeOp::RemoveContainer,
    ];

    fn label(self) -> &'static str {
        match self {
            RuntimeOp::CreateContainer => "create_container",
            RuntimeOp::StartContainer => "start_container",
            RuntimeOp::StopContainer => "stop_container",
            RuntimeOp::RemoveContainer => "remove_container",
        }
    }
}

/// What the agent records as it works (module doc).
pub struct AgentMetrics {
    pod_sync: Histogram,
    runtime_ops: [Counter; 4],
    runtime_errors: [Counter; 4],
    image_pull: Histogram,
    image_pulls_ok: Counter,
    image_pulls_failed: Counter,
    proxy_sync: Histogram,
    proxy_failures: Counter,
    proxy_last_sync_ms: AtomicU64,
    netpol_sync: Histogram,
    netpol_failures: Counter,
}

const fn counter() -> Counter {
    Counter(AtomicU64::new(0))
}

/// The agent process's metrics.
pub static METRICS: AgentMetrics = AgentMetrics::new();

fn add(counter: &Counter) {
    counter.0.fetch_add(1, Ordering::Relaxed);
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
        .unwrap_or(0)
}

impl Default for AgentMetrics {
    fn default() -> Self {
        AgentMetrics::new()
    }
}

impl AgentMetrics {
    /// Nothing recorded yet; usable in a `static`.
    pub const fn new() -> Self {
        AgentMetrics {
            pod_sync: Histogram::with_bounds(&POD_SYNC_BUCKETS),
            runtime_ops: [counter(), counter(), counter(), counter()],
            runtime_errors: [counter(), counter(), counter(), counter()],
            image_pull: Histogram::with_bounds(&IMAGE_PULL_BUCKETS),
            image_pulls_ok: counter(),
            image_pulls_failed: counter(),
            proxy_sync: Histogram::with_bounds(&RULE_SYNC_BUCKETS),
            proxy_failures: counter(),
            proxy_last_sync_ms: AtomicU64::new(0),
            netpol_sync: Histogram::with_bounds(&RULE_SYNC_BUCKETS),
            netpol_failures: counter(),
        }
    }

    /// One pod worker's sync pass took `elapsed`.
    pub fn pod_synced(&self, elapsed: Duration) {
        self.pod_sync.observe(elapsed);
    }

    /// A runtime operation ended, well (`ok`) or not.
    pub fn runtime_op(&self, op: RuntimeOp, ok: bool) {
        let i = RuntimeOp::ALL.iter().position(|o| *o == op).unwrap_or(0);
        add(&self.runtime_ops[i]);
        if !ok {
            add(&self.runtime_errors[i]);
        }
    }

    /// An image pull ended after `elapsed`.
    pub fn image_pulled(&self, elapsed: Duration, ok: bool) {
        if ok {
            self.image_pull.observe(elapsed);
            add(&self.image_pulls_ok);
        } else {
            add(&self.image_pulls_failed);
        }
    }

    /// A sync of the Service proxy's table ended after `elapsed`.
    pub fn proxy_synced(&self, elapsed: Duration, ok: bool) {
        if ok {
            self.proxy_sync.observe(elapsed);
            self.proxy_last_sync_ms.store(now_ms(), Ordering::Relaxed);
        } else {
            add(&self.proxy_failures);
        }
    }

    /// A sync of the network policy table ended after `elapsed`.
    pub fn netpol_synced(&self, elapsed: Duration, ok: bool) {
        if ok {
            self.netpol_sync.observe(elapsed);
        } else {
            add(&self.netpol_failures);
        }
    }
}

/// What a scrape reads besides the recorded values.
pub struct Scraped<'a> {
    pub node_name: &'a str,
    pub runtime: &'a Runtime,
    pub sandboxes: &'a Sandboxes,
}

/// The Prometheus text exposition.
pub fn render(metrics: &AgentMetrics, scraped: &Scraped) -> String {
    let mut out = String::with_capacity(8 * 1024);
    let _ = writeln!(
        out,
        "# HELP kubelet_node_name The node's name. The count is always 1.\n\
         # TYPE kubelet_node_name gauge\n\
         kubelet_node_name{{node=\"{}\"}} 1",
        label_value(scraped.node_name)
    );
    let pods = scraped
        .sandboxes
        .list()
        .into_iter()
        .filter(|(_, sandbox)| sandbox.is_ok())
        .count();
    let _ = writeln!(
        out,
        "# HELP kubelet_running_pods Number of pods that have a running pod sandbox\n\
         # TYPE kubelet_running_pods gauge\n\
         kubelet_running_pods {pods}"
    );
    let mut by_state = [0u64; 4];
    for container in scraped.runtime.list() {
        by_state[state_index(container.state)] += 1;
    }
    out.push_str(
        "# HELP kubelet_running_containers Number of containers currently running\n\
         # TYPE kubelet_running_containers gauge\n",
    );
    for (state, n) in ["created", "running", "exited", "unknown"]
        .iter()
        .zip(by_state)
    {
        let _ = writeln!(
            out,
            "kubelet_running_containers{{container_state=\"{state}\"}} {n}"
        );
    }

    out.push_str(
        "# HELP kubelet_pod_worker_duration_seconds Duration in seconds to sync a single pod. Broken down by operation type: create, update, or sync\n\
         # TYPE kubelet_pod_worker_duration_seconds histogram\n",
    );
    let h = &metrics.pod_sync;
    write_histogram(
        &mut out,
        "kubelet_pod_worker_duration_seconds",
        "operation_type=\"sync\"",
        h.bounds(),
        h.read(),
    );

    out.push_str(
        "# HELP kubelet_runtime_operations_total Cumulative number of runtime operations by operation type.\n\
         # TYPE kubelet_runtime_operations_total counter\n",
    );
    for (op, counter) in RuntimeOp::ALL.iter().zip(&metrics.runtime_ops) {
        let _ = writeln!(
            out,
            "kubelet_runtime_operations_total{{operation_type=\"{}\"}} {}",
            op.label(),
            counter.0.load(Ordering::Relaxed)
        );
    }
    out.push_str(
        "# HELP kubelet_runtime_operations_errors_total Cumulative number of runtime operation errors by operation type.\n\
         # TYPE kubelet_runtime_operations_errors_total counter\n",
    );
    for (op, counter) in RuntimeOp::ALL.iter().zip(&metrics.runtime_errors) {
        let _ = writeln!(
            out,
            "kubelet_runtime_operations_errors_total{{operation_type=\"{}\"}} {}",
            op.label(),
            counter.0.load(Ordering::Relaxed)
        );
    }

    out.push_str(
        "# HELP kubelet_image_pull_duration_seconds Duration in seconds to pull an image.\n\
         # TYPE kubelet_image_pull_duration_seconds histogram\n",
    );
    let h = &metrics.image_pull;
    write_histogram(
        &mut out,
        "kubelet_image_pull_duration_seconds",
        "",
        h.bounds(),
        h.read(),
    );
    let _ = writeln!(
        out,
        "# HELP litek8s_agent_image_pulls_total Image pulls by result.\n\
         # TYPE litek8s_agent_image_pulls_total counter\n\
         litek8s_agent_image_pulls_total{{result=\"success\"}} {}\n\
         litek8s_agent_image_pulls_total{{result=\"failure\"}} {}",
        metrics.image_pulls_ok.0.load(Ordering::Relaxed),
        metrics.image_pulls_failed.0.load(Ordering::Relaxed)
    );

    out.push_str(
        "# HELP kubeproxy_sync_proxy_rules_duration_seconds SyncProxyRules latency in seconds\n\
         # TYPE kubeproxy_sync_proxy_rules_duration_seconds histogram\n",
    );
    let h = &metrics.proxy_sync;
    write_histogram(
        &mut out,
        "kubeproxy_sync_proxy_rules_duration_seconds",
        "",
        h.bounds(),
        h.read(),
    );
    let last = metrics.proxy_last_sync_ms.load(Ordering::Relaxed) as f64 / 1000.0;
    let _ = writeln!(
        out,
        "# HELP kubeproxy_sync_proxy_rules_last_timestamp_seconds The last time proxy rules were successfully synced\n\
         # TYPE kubeproxy_sync_proxy_rules_last_timestamp_seconds gauge\n\
         kubeproxy_sync_proxy_rules_last_timestamp_seconds {last}\n\
         # HELP litek8s_agent_proxy_sync_failures_total Service proxy syncs that failed (the rules were not applied).\n\
         # TYPE litek8s_agent_proxy_sync_failures_total counter\n\
         litek8s_agent_proxy_sync_failures_total {}",
        metrics.proxy_failures.0.load(Ordering::Relaxed)
    );

    out.push_str(
        "# HELP litek8s_agent_network_policy_sync_duration_seconds Network policy table syncs, in seconds.\n\
         # TYPE litek8s_agent_network_policy_sync_duration_seconds histogram\n",
    );
    let h = &metrics.netpol_sync;
    write_histogram(
        &mut out,
        "litek8s_agent_network_policy_sync_duration_seconds",
        "",
        h.bounds(),
        h.read(),
    );
    let _ = writeln!(
        out,
        "# HELP litek8s_agent_network_policy_sync_failures_total Network policy syncs that failed (the rules were not applied).\n\
         # TYPE litek8s_agent_network_policy_sync_failures_total counter\n\
         litek8s_agent_network_policy_sync_failures_total {}",
        metrics.netpol_failures.0.load(Ordering::Relaxed)
    );
    out
}

fn state_index(state: ContainerState) -> usize {
    match state {
        ContainerState::Created => 0,
        ContainerState::Running => 1,
        ContainerState::Exited => 2,
        ContainerState::Unknown => 3,
    }
}

/// A label value escaped as the text format requires (backslash, quote, newline).
fn label_value(value: &str) -> String {
    value
        .replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn label_values_are_escaped() {
        assert_eq!(label_value("a\"b\\c\nd"), "a\\\"b\\\\c\\nd");
    }

    #[test]
    fn recordings_reach_their_series() {
        let m = AgentMetrics::new();
        m.runtime_op(RuntimeOp::StopContainer, false);
        m.runtime_op(RuntimeOp::StopContainer, true);
        m.proxy_synced(Duration::from_millis(3), true);
        m.proxy_synced(Duration::from_millis(3), false);
        m.image_pulled(Duration::from_secs(2), true);
        assert_eq!(m.runtime_ops[2].0.load(Ordering::Relaxed), 2);
        assert_eq!(m.runtime_errors[2].0.load(Ordering::Relaxed), 1);
        assert_eq!(m.proxy_sync.read().1, 1);
        assert_eq!(m.proxy_failures.0.load(Ordering::Relaxed), 1);
        assert!(m.proxy_last_sync_ms.load(Ordering::Relaxed) > 0);
        let (buckets, count, _) = m.image_pull.read();
        assert_eq!((buckets[0], buckets[2], count), (0, 1, 1));
    }
}
