//! The Raft state machine: applies committed Batches to the `kube::store::Store`, builds
//! snapshots from an O(1) frozen view of the store (so building never blocks applying), and
//! installs snapshots from the leader by replacing the store atomically. Proposals carrying a
//! client session pass `raft::sessions` first, so a retried copy applies once.

use std::io::Cursor;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use openraft::storage::{RaftStateMachine, Snapshot};
use openraft::{
    AnyError, EntryPayload, ErrorSubject, ErrorVerb, OptionalSend, RaftSnapshotBuilder,
    StorageIOError, StoredMembership,
};
use parking_lot::Mutex;

use crate::kube::mutation::ApplyError;
use crate::kube::object::ObjectRef;
use crate::kube::store::{Store, StoreSnapshot};
use crate::raft::sessions::{Decision, Sessions};
use crate::raft::snapshot::{self, SnapshotError, SnapshotFile, SnapshotMeta};
use crate::raft::types::{
    Applied, Batch, BatchResponse, Entry, LogId, NodeId, StorageError, TypeConfig,
};

type Membership = StoredMembership<NodeId, openraft::BasicNode>;

/// The latest snapshot, in memory and on disk.
struct Current {
    meta: SnapshotMeta,
    data: Arc<Vec<u8>>,
}

struct Shared {
    file: SnapshotFile,
    current: Mutex<Option<Current>>,
    next_id: AtomicU64,
}

/// The state machine over a store. Openraft owns it; the store is shared with readers.
pub struct StateMachine {
    store: Arc<Store>,
    last_applied: Option<LogId>,
    membership: Membership,
    sessions: Sessions,
    shared: Arc<Shared>,
}

fn snapshot_error(verb: ErrorVerb, e: impl std::error::Error + 'static) -> StorageError {
    StorageError::IO {
        source: StorageIOError::new(ErrorSubject::Snapshot(None), verb, AnyError::new(&e)),
    }
}

impl StateMachine {
    /// Opens the state machine, restoring `store` from the snapshot kept in `dir` if there is
    /// one (openraft then re-applies the committed entries after it).
    pub fn open(dir: &Path, store: Arc<Store>) -> Result<StateMachine, SnapshotError> {
        std::fs::create_dir_all(dir).map_err(|e| SnapshotError::Io {
            path: dir.to_path_buf(),
            message: e.to_string(),
        })?;
        let file = SnapshotFile::new(dir);
        let mut sm = StateMachine {
            store,
            last_applied: None,
            membership: Membership::default(),
            sessions: Sessions::default(),
            shared: Arc::new(Shared {
                file: file.clone(),
                current: Mutex::new(None),
                next_id: AtomicU64::new(1),
            }),
        };
        if let Some(bytes) = file.load()? {
            let snapshot::Decoded {
                meta,
                sessions,
                checkpoint,
            } = snapshot::decode(&bytes)?;
            sm.store
                .restore(checkpoint.resource_version, checkpoint.objects);
            sm.sessions = sessions;
            sm.last_applied = meta.last_log_id;
            sm.membership = meta.last_membership.clone();
            *sm.shared.current.lock() = Some(Current {
                meta,
                data: Arc::new(bytes),
            });
        }
        Ok(sm)
    }

    pub fn store(&self) -> &Arc<Store> {
        &self.store
    }

    fn apply_one(&mut self, entry: Entry) -> BatchResponse {
        self.last_applied = Some(entry.log_id);
        match entry.payload {
            EntryPayload::Blank => BatchResponse::default(),
            EntryPayload::Normal(batch) => self.apply_batch(entry.log_id.index, batch),
            EntryPayload::Membership(membership) => {
                self.membership = Membership::new(Some(entry.log_id), membership);
                BatchResponse::default()
            }
        }
    }
}

impl StateMachine {
    /// Applies a batch: proposals a session already had applied are answered from the session
    /// table, the others go to the store in one locked pass.
    fn apply_batch(&mut self, index: u64, batch: Batch) -> BatchResponse {
        let has_sessions = batch.proposals.iter().any(|p| p.session.is_some());
        if !has_sessions {
            let results = self
                .store
                .apply_prepared_batch(
                    batch
                        .into_proposals()
                        .into_iter()
                        .map(|p| (p.mutation, p.prepared)),
                )
                .into_iter()
                .map(applied)
                .collect();
            return BatchResponse { results };
        }
        let mut results: Vec<Option<Result<Applied, ApplyError>>> =
            Vec::with_capacity(batch.proposals.len());
        let mut to_apply = Vec::new();
        for proposal in batch.proposals.iter() {
            match self.sessions.decide(index, proposal) {
                Decision::Answer(result) => results.push(Some(result)),
                Decision::Apply => {
                    results.push(None);
                    to_apply.push((proposal.mutation.clone(), proposal.prepared.clone()));
                }
            }
        }
        let mut fresh = self
            .store
            .apply_prepared_batch(to_apply)
            .into_iter()
            .map(applied);
        let results = batch
            .proposals
            .iter()
            .zip(results)
            .map(|(proposal, decided)| match decided {
                Some(result) => result,
                None => {
                    let result = fresh.next().unwrap_or_else(|| {
                        Err(ApplyError::Invalid {
                            key: proposal.mutation.key().clone(),
                            reason: "the store returned fewer results than mutations".into(),
                        })
                    });
                    self.sessions.remember(proposal, &result);
                    result
                }
            })
            .collect();
        BatchResponse { results }
    }
}

fn applied(result: Result<ObjectRef, ApplyError>) -> Result<Applied, ApplyError> {
    result.map(|object| Applied {
        resource_version: object.resource_version,
        object: Some(object),
    })
}

/// Builds one snapshot from the frozen view taken when it was created.
pub struct SnapshotBuilder {
    view: StoreSnapshot,
    sessions: Sessions,
    last_applied: Option<LogId>,
    membership: Membership,
    shared: Arc<Shared>,
}

impl RaftSnapshotBuilder<TypeConfig> for SnapshotBuilder {
    async fn build_snapshot(&mut self) -> Result<Snapshot<TypeConfig>, StorageError> {
        let id = self.shared.next_id.fetch_add(1, Ordering::Relaxed);
        let snapshot_id = match &self.last_applied {
            Some(l) => format!(
                "{}-{}-{}-{id}",
                l.leader_id.term, l.leader_id.node_id, l.index
            ),
            None => format!("none-{id}"),
        };
        let meta = SnapshotMeta {
            last_log_id: self.last_applied,
            last_membership: self.membership.clone(),
            snapshot_id,
        };
        let view = self.view.clone();
        let sessions = self.sessions.clone();
        let shared = self.shared.clone();
        let task_meta = meta.clone();
        // Encoding and writing a large store is blocking work; it runs on a blocking thread
        // while the state machine keeps applying.
        let data = tokio::task::spawn_blocking(move || -> Result<Vec<u8>, SnapshotError> {
            let data = snapshot::encode(&task_meta, &sessions, &view);
            let mut current = shared.current.lock();
            // A snapshot installed or built meanwhile may be newer: never go backwards.
            if current
                .as_ref()
                .is_some_and(|c| c.meta.last_log_id > task_meta.last_log_id)
            {
                return Ok(data);
            }
            shared.file.save(&data)?;
            *current = Some(Current {
                meta: task_meta,
                data: Arc::new(data.clone()),
            });
            Ok(data)
        })
        .await
        .map_err(|e| snapshot_error(ErrorVerb::Write, e))?
        .map_err(|e| snapshot_error(ErrorVerb::Write, e))?;
        Ok(Snapshot {
            meta,
            snapshot: Box::new(Cursor::new(data)),
        })
    }
}

impl RaftStateMachine<TypeConfig> for StateMachine {
    type SnapshotBuilder = SnapshotBuilder;

    async fn applied_state(&mut self) -> Result<(Option<LogId>, Membership), StorageError> {
        Ok((self.last_applied, self.membership.clone()))
    }

    async fn apply<I>(&mut self, entries: I) -> Result<Vec<BatchResponse>, StorageError>
    where
        I: IntoIterator<Item = Entry> + OptionalSend,
        I::IntoIter: OptionalSend,
    {
        Ok(entries.into_iter().map(|e| self.apply_one(e)).collect())
    }

    async fn get_snapshot_builder(&mut self) -> SnapshotBuilder {
        // O(1): the store's maps are persistent, so this view stays frozen while new
        // entries apply.
        SnapshotBuilder {
            view: self.store.snapshot(),
            sessions: self.sessions.clone(),
            last_applied: self.last_applied,
            membership: self.membership.clone(),
            shared: self.shared.clone(),
        }
    }

    async fn begin_receiving_snapshot(&mut self) -> Result<Box<Cursor<Vec<u8>>>, StorageError> {
        Ok(Box::new(Cursor::new(Vec::new())))
    }

    async fn install_snapshot(
        &mut self,
        meta: &SnapshotMeta,
        snapshot: Box<Cursor<Vec<u8>>>,
    ) -> Result<(), StorageError> {
        let data = snapshot.into_inner();
        let snapshot::Decoded {
            meta: embedded,
            sessions,
            checkpoint,
        } = snapshot::decode(&data).map_err(|e| snapshot_error(ErrorVerb::Read, e))?;
        if embedded.last_log_id != meta.last_log_id {
            let e = SnapshotError::Corrupt {
                offset: 0,
                reason: format!(
                    "snapshot holds {:?} but was sent as {:?}",
                    embedded.last_log_id, meta.last_log_id
                ),
            };
            return Err(snapshot_error(ErrorVerb::Read, e));
        }
        {
            // Durable first: openraft purges the log up to this snapshot right after.
            let mut current = self.shared.current.lock();
            self.shared
                .file
                .save(&data)
                .map_err(|e| snapshot_error(ErrorVerb::Write, e))?;
            *current = Some(Current {
                meta: meta.clone(),
                data: Arc::new(data),
            });
        }
        self.store
            .restore(checkpoint.resource_version, checkpoint.objects);
        self.sessions = sessions;
        self.last_applied = meta.last_log_id;
        self.membership = meta.last_membership.clone();
        Ok(())
    }

    async fn get_current_snapshot(&mut self) -> Result<Option<Snapshot<TypeConfig>>, StorageError> {
        Ok(self.shared.current.lock().as_ref().map(|c| Snapshot {
            meta: c.meta.clone(),
            snapshot: Box::new(Cursor::new((*c.data).clone())),
        }))
    }
}
