//! What a server's backend adds to `/metrics`: a cluster member's Raft state (term, log and
//! applied indexes, role, leader changes, the size of its latest snapshot file, read when
//! scraped). A single server adds nothing here; its requests and objects are reported by
//! `api::metrics` like a member's.

use std::fmt::Write as _;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use tokio_util::sync::CancellationToken;

use super::backend::Backend;
use crate::api::metrics::Section;
use crate::cluster::member::ClusterDir;
use crate::cluster::node::ClusterNode;
use crate::raft::snapshot::SnapshotFile;

/// The backend's sections, starting what they need (a watch of the Raft leader) until
/// `shutdown`.
pub fn sections(backend: &Backend, data_dir: &Path, shutdown: CancellationToken) -> Vec<Section> {
    let Backend::Member(member) = backend else {
        return Vec::new();
    };
    let snapshot = SnapshotFile::new(&ClusterDir::new(data_dir).snapshot())
        .path()
        .to_path_buf();
    let node = member.node.clone();
    let leader_changes = Arc::new(AtomicU64::new(0));
    tokio::spawn(count_leader_changes(
        node.clone(),
        leader_changes.clone(),
        shutdown,
    ));
    vec![Box::new(move |out: &mut String| {
        // No snapshot yet (or unreadable): 0, like the snapshot index.
        let snapshot_bytes = std::fs::metadata(&snapshot).map_or(0, |m| m.len());
        raft_section(
            out,
            &node,
            leader_changes.load(Ordering::Relaxed),
            snapshot_bytes,
        )
    })]
}

/// Counts every change of the leader this member sees (etcd's leader_changes_seen).
async fn count_leader_changes(
    node: Arc<ClusterNode>,
    changes: Arc<AtomicU64>,
    shutdown: CancellationToken,
) {
    let mut metrics = node.raft.metrics();
    // The first leader known counts as a change, as etcd counts its first election.
    let mut leader = None;
    loop {
        let now = metrics.borrow_and_update().current_leader;
        if now != leader && now.is_some() {
            changes.fetch_add(1, Ordering::Relaxed);
        }
        leader = now;
        tokio::select! {
            _ = shutdown.cancelled() => return,
            changed = metrics.changed() => if changed.is_err() { return },
        }
    }
}

fn raft_section(out: &mut String, node: &ClusterNode, leader_changes: u64, snapshot_bytes: u64) {
    let m = node.metrics();
    let is_leader = m.current_leader == Some(m.id);
    let mut gauge = |name: &str, help: &str, kind: &str, value: u64| {
        let _ = writeln!(
            out,
            "# HELP {name} {help}\n# TYPE {name} {kind}\n{name} {value}"
        );
    };
    gauge(
        "litek8s_raft_term",
        "The Raft term this member is in.",
        "gauge",
        m.current_term,
    );
    gauge(
        "litek8s_raft_last_log_index",
        "Index of the last entry of this member's Raft log.",
        "gauge",
        m.last_log_index.unwrap_or(0),
    );
    gauge(
        "litek8s_raft_applied_index",
        "Index of the last Raft entry applied to this member's store (committed entries only).",
        "gauge",
        m.last_applied.map_or(0, |l| l.index),
    );
    gauge(
        "litek8s_raft_snapshot_index",
        "Index of the last entry in this member's latest snapshot.",
        "gauge",
        m.snapshot.map_or(0, |l| l.index),
    );
    gauge(
        "litek8s_raft_snapshot_size_bytes",
        "Size of this member's latest snapshot file, in bytes.",
        "gauge",
        snapshot_bytes,
    );
    gauge(
        "litek8s_raft_has_leader",
        "1 if this member knows a leader.",
        "gauge",
        u64::from(m.current_leader.is_some()),
    );
    gauge(
        "litek8s_raft_is_leader",
        "1 if this member is the leader.",
        "gauge",
        u64::from(is_leader),
    );
    gauge(
        "litek8s_raft_leader_changes_seen_total",
        "Leader changes this member has seen since it started.",
        "counter",
        leader_changes,
    );
}
