//! `--cluster-init`: the cluster's first snapshot, at openraft's initial log id, holding this
//! member as the only voter and the objects of a single server's `objects.wal` with their
//! resourceVersions, so that every joiner starts from it; afterwards `objects.wal` is kept
//! as `objects.wal.imported` (a backup, never read again).

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::sync::Arc;

use openraft::{LogId, Membership, StoredMembership};

use super::error::ClusterError;
use super::member::{ClusterDir, Member};
use crate::kube::store::{Store, StoreConfig};
use crate::kube::wal::{WalConfig, WalWriter};
use crate::raft::log::{LogConfig, LogStore};
use crate::raft::snapshot::{self, SnapshotFile, SnapshotMeta};
use crate::storage::fsutil::remove_dir_if_present;

/// `--cluster-init`: the first snapshot (this member as the only voter, plus the objects of a
/// single server's objects.wal with their resourceVersions) at openraft's initial log id, and
/// the log purged up to it, so that every joiner starts from that snapshot.
pub(super) fn write_first_snapshot(
    data_dir: &Path,
    dir: &ClusterDir,
    node_id: u64,
    me: &Member,
    store_config: StoreConfig,
) -> Result<u64, ClusterError> {
    remove_dir_if_present(&dir.raft()).map_err(ClusterError::io(dir.raft()))?;
    let imported = Arc::new(Store::new(store_config));
    if data_dir.join("objects.wal").exists() {
        let (writer, report) = WalWriter::open(data_dir, imported.clone(), WalConfig::default())?;
        drop(writer);
        tracing::info!(
            objects = imported.snapshot().len(),
            resource_version = imported.resource_version(),
            replayed = report.replayed_mutations,
            "moving the single server's objects into the cluster's first snapshot"
        );
    }
    let first = LogId::default();
    let membership = Membership::new(
        vec![BTreeSet::from([node_id])],
        BTreeMap::from([(node_id, me.to_node())]),
    );
    let meta = SnapshotMeta {
        last_log_id: Some(first),
        last_membership: StoredMembership::new(Some(first), membership),
        snapshot_id: format!("cluster-init-{node_id}"),
    };
    let bytes = snapshot::encode(
        &meta,
        &crate::raft::sessions::Sessions::default(),
        &imported.snapshot(),
    );
    std::fs::create_dir_all(dir.snapshot()).map_err(ClusterError::io(dir.snapshot()))?;
    SnapshotFile::new(&dir.snapshot())
        .save(&bytes)
        .map_err(|e| ClusterError::raft("writing the first snapshot", e))?;
    let log = LogStore::open(&dir.log(), LogConfig::default())
        .map_err(|e| ClusterError::raft(dir.log().display().to_string(), e))?;
    log.purge_upto(first)
        .map_err(|e| ClusterError::raft(dir.log().display().to_string(), e))?;
    drop(log);
    Ok(imported.resource_version())
}

/// Renames objects.wal once its objects live in the cluster's snapshot.
pub(super) fn retire_single_server_wal(data_dir: &Path) -> Result<(), ClusterError> {
    let wal = data_dir.join("objects.wal");
    if wal.exists() {
        let retired = data_dir.join("objects.wal.imported");
        std::fs::rename(&wal, &retired).map_err(ClusterError::io(&wal))?;
        tracing::info!(path = %retired.display(), "objects.wal moved into the cluster; kept as a backup");
    }
    Ok(())
}
