//! The openraft type configuration of litek8s: what a log entry carries (a `Batch` of
//! Mutations) and what applying it returns (one result per Mutation).

use std::io::Cursor;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::kube::mutation::{ApplyError, Mutation};
use crate::kube::object::ObjectRef;
use crate::kube::prepared_object::{PreparedCache, PreparedObject};

/// Raft node ids.
pub type NodeId = u64;

openraft::declare_raft_types!(
    /// The type configuration every Raft component of litek8s is built on.
    pub TypeConfig:
        D = Batch,
        R = BatchResponse,
        NodeId = NodeId,
        Node = openraft::BasicNode,
        Entry = openraft::Entry<TypeConfig>,
        SnapshotData = Cursor<Vec<u8>>,
        Responder = openraft::impls::OneshotResponder<TypeConfig>,
        AsyncRuntime = openraft::TokioRuntime,
);

/// A log id of this configuration.
pub type LogId = openraft::LogId<NodeId>;
/// A vote of this configuration.
pub type Vote = openraft::Vote<NodeId>;
/// A log entry of this configuration.
pub type Entry = openraft::Entry<TypeConfig>;
/// The storage error openraft expects from storage.
pub type StorageError = openraft::StorageError<NodeId>;

/// The payload of one Raft log entry: Mutations coalesced by the proposer, applied in order.
///
/// The proposals are shared, so cloning an entry is cheap: openraft's log reader hands out
/// owned entries, and the leader reads every cached entry once per follower it replicates to,
/// only to encode it. The state machine takes the proposals back by value when it holds the
/// last reference (`into_proposals`), which on the leader is the usual case: replication has
/// dropped its copies by the time the entry commits.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Batch {
    pub proposals: Arc<Vec<Proposal>>,
}

/// One Mutation as proposed. A follower's own writes carry its client session, so that a
/// retried copy applies once (`raft::sessions`); the leader's own writes carry none.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Proposal {
    pub mutation: Mutation,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seq: Option<u64>,
    /// The proposer has the answers of every seq up to this one: they may be forgotten.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub acked: Option<u64>,
    /// The Mutation's object prepared by `prepare_object` (the batcher does, on the caller's
    /// thread), or by a follower for the entries it receives (`Batch::prepare_objects`); empty
    /// in entries replayed from the log. Never serialized, ignored by `==`.
    #[serde(skip)]
    pub prepared: PreparedCache,
}

impl Batch {
    pub fn new(proposals: Vec<Proposal>) -> Self {
        Batch {
            proposals: Arc::new(proposals),
        }
    }

    /// Prepares every proposal's object (`Proposal::prepare_object`) when this is the only
    /// reference to the proposals. A follower does it to the entries it receives before
    /// appending them: the log entry then copies the object's JSON and the store splices the
    /// resourceVersion into it, instead of each encoding the decoded object again.
    pub fn prepare_objects(&mut self) {
        if let Some(proposals) = Arc::get_mut(&mut self.proposals) {
            for proposal in proposals {
                proposal.prepare_object();
            }
        }
    }

    /// The proposals by value: taken over when this is the last reference, cloned otherwise.
    pub fn into_proposals(self) -> Vec<Proposal> {
        Arc::try_unwrap(self.proposals).unwrap_or_else(|shared| (*shared).clone())
    }

    /// Appends the same JSON as serde's encoding of `self` (see `Mutation::write_json`).
    pub fn write_json(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(br#"{"proposals":["#);
        for (i, proposal) in self.proposals.iter().enumerate() {
            if i > 0 {
                out.push(b',');
            }
            proposal.write_json(out);
        }
        out.extend_from_slice(b"]}");
    }
}

impl Proposal {
    /// Appends the same JSON as serde's encoding of `self` (see `Mutation::write_json`).
    pub fn write_json(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(br#"{"mutation":"#);
        let object_json = self.prepared.get().map(PreparedObject::as_bytes);
        self.mutation.write_json_with(out, object_json);
        for (name, value) in [
            (&br#","session":"#[..], self.session),
            (&br#","seq":"#[..], self.seq),
            (&br#","acked":"#[..], self.acked),
        ] {
            if let Some(value) = value {
                out.extend_from_slice(name);
                out.extend_from_slice(value.to_string().as_bytes());
            }
        }
        out.push(b'}');
    }

    pub fn new(mutation: Mutation) -> Self {
        Proposal {
            mutation,
            session: None,
            seq: None,
            acked: None,
            prepared: PreparedCache::default(),
        }
    }

    /// Prepares the Mutation's object for the store, once (`kube::prepared_object`): the log
    /// entry then copies its JSON, and the store splices the resourceVersion into it. The
    /// Mutation must not change afterwards.
    pub fn prepare_object(&mut self) {
        let object = match &self.mutation {
            Mutation::Create { object, .. } | Mutation::Update { object, .. } => object,
            Mutation::Delete { .. } => return,
        };
        let resource = &self.mutation.key().resource;
        self.prepared = PreparedCache::new(PreparedObject::prepare(resource, object));
    }
}

/// The outcome of applying one entry: one result per Proposal, in order. Blank and
/// membership entries give an empty response.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct BatchResponse {
    pub results: Vec<Result<Applied, ApplyError>>,
}

/// A Mutation that applied.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Applied {
    /// The resourceVersion the store assigned.
    pub resource_version: u64,
    /// The stored object, on the server that applied it (never serialized: responses stay
    /// on the node that proposed them).
    #[serde(skip)]
    pub object: Option<ObjectRef>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kube::object::ObjectKey;

    fn batch_of(names: &[&str]) -> Batch {
        Batch::new(
            names
                .iter()
                .map(|name| {
                    Proposal::new(Mutation::Create {
                        key: ObjectKey::new("configmaps", "default", *name),
                        object: serde_json::json!({"metadata": {"name": name}}),
                        requires_open_namespace: true,
                    })
                })
                .collect(),
        )
    }

    #[test]
    fn a_cloned_batch_shares_its_proposals() {
        let batch = batch_of(&["a", "b"]);
        let copy = batch.clone();
        assert!(Arc::ptr_eq(&batch.proposals, &copy.proposals));
    }

    #[test]
    fn the_last_reference_hands_its_proposals_over_without_copying() {
        let batch = batch_of(&["a", "b"]);
        let buffer = batch.proposals.as_ptr();
        let copy = batch.clone();
        drop(copy);
        let proposals = batch.into_proposals();
        assert_eq!(proposals.as_ptr(), buffer, "taken over, not copied");
        assert_eq!(proposals.len(), 2);
    }

    #[test]
    fn a_shared_batch_gives_a_copy_and_leaves_the_other_intact() {
        let batch = batch_of(&["a", "b"]);
        let kept = batch.clone();
        let proposals = batch.into_proposals();
        assert_ne!(proposals.as_ptr(), kept.proposals.as_ptr());
        assert_eq!(&proposals, kept.proposals.as_ref());
    }

    #[test]
    fn a_received_batch_prepares_its_objects_and_encodes_the_same() {
        let mut received: Batch =
            serde_json::from_slice(&serde_json::to_vec(&batch_of(&["a", "b"])).expect("encode"))
                .expect("decode");
        let mut plain = Vec::new();
        received.write_json(&mut plain);
        assert!(received
            .proposals
            .iter()
            .all(|p| p.prepared.get().is_none()));
        received.prepare_objects();
        assert!(received
            .proposals
            .iter()
            .all(|p| p.prepared.get().is_some()));
        let mut prepared = Vec::new();
        received.write_json(&mut prepared);
        assert_eq!(
            String::from_utf8_lossy(&prepared),
            String::from_utf8_lossy(&plain)
        );
    }

    #[test]
    fn a_shared_batch_is_not_prepared_in_place() {
        let mut batch = batch_of(&["a"]);
        let _shared = batch.clone();
        batch.prepare_objects();
        assert!(batch.proposals[0].prepared.get().is_none());
    }

    #[test]
    fn sharing_does_not_change_the_encoding() {
        let batch = batch_of(&["a"]);
        let mut written = Vec::new();
        batch.write_json(&mut written);
        let serde = serde_json::to_vec(&batch).expect("encode");
        assert_eq!(
            String::from_utf8_lossy(&written),
            String::from_utf8_lossy(&serde)
        );
        assert!(serde.starts_with(br#"{"proposals":[{"mutation":"#));
        let decoded: Batch = serde_json::from_slice(&serde).expect("decode");
        assert_eq!(decoded, batch);
    }
}
