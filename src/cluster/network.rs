//! openraft's network: `RaftNetworkFactory`/`RaftNetwork` over `PeerClient`, posting Raft RPCs
//! as JSON to the peer's Raft listener (`rpc`). AppendEntries bodies are capped at 512 KiB
//! (openraft 0.9 gives each AppendEntries one heartbeat interval to complete, so large objects
//! travel a few at a time): a larger request is refused locally with a hint so openraft sends
//! fewer entries.

use std::time::Duration;

use openraft::error::{
    InstallSnapshotError, NetworkError, PayloadTooLarge, RPCError, RaftError, RemoteError,
    Unreachable,
};
use openraft::network::{RPCOption, RaftNetwork, RaftNetworkFactory};
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, InstallSnapshotRequest, InstallSnapshotResponse,
    VoteRequest, VoteResponse,
};
use openraft::BasicNode;
use serde::de::DeserializeOwned;
use serde::Serialize;

use super::member::Member;
use super::peer::{PeerClient, PeerError};
use crate::raft::types::{NodeId, TypeConfig};

/// The status of a Raft RPC that reached a server with another node id.
pub const MISDIRECTED: u16 = 421;

/// The most bytes one AppendEntries request may carry.
pub const APPEND_ENTRIES_CAP: usize = 512 << 10;

/// Paths of the Raft listener.
pub mod paths {
    pub const APPEND: &str = "/raft/append";
    pub const VOTE: &str = "/raft/vote";
    pub const SNAPSHOT: &str = "/raft/snapshot";
}

/// Makes one `Peer` per target; all share the pooled client.
pub struct Network {
    pub client: PeerClient,
}

impl RaftNetworkFactory<TypeConfig> for Network {
    type Network = Peer;

    async fn new_client(&mut self, target: NodeId, node: &BasicNode) -> Peer {
        Peer {
            target,
            node: node.clone(),
            addr: Member::from_node(node).raft,
            client: self.client.clone(),
            last_append: None,
        }
    }
}

/// The connection to one peer's Raft listener.
pub struct Peer {
    target: NodeId,
    node: BasicNode,
    addr: String,
    client: PeerClient,
    /// The last AppendEntries body sent, taken back for the next one once the connection has
    /// let go of it (see [`reclaim`]).
    last_append: Option<bytes::Bytes>,
}

type RpcResult<T, E> = Result<T, RPCError<NodeId, BasicNode, RaftError<NodeId, E>>>;

impl Peer {
    async fn call<Resp, E>(
        &self,
        path: &str,
        body: bytes::Bytes,
        timeout: Duration,
    ) -> RpcResult<Resp, E>
    where
        Resp: DeserializeOwned,
        E: std::error::Error + DeserializeOwned,
    {
        // The target's node id travels with every RPC: a server that took over the address of
        // a removed member (a wiped server rejoining) refuses RPCs meant for the old identity,
        // instead of looking like that member with its log gone.
        let path = format!("{path}?target={}", self.target);
        let answer = self
            .client
            .send(&self.addr, http::Method::POST, &path, body, timeout)
            .await
            .map_err(|e| match e {
                PeerError::Unreachable { .. } => RPCError::Unreachable(Unreachable::new(&e)),
                PeerError::Status { status, .. } if status == MISDIRECTED => {
                    RPCError::Unreachable(Unreachable::new(&e))
                }
                other => RPCError::Network(NetworkError::new(&other)),
            })?;
        let decoded: Result<Resp, RaftError<NodeId, E>> = serde_json::from_slice(&answer)
            .map_err(|e| RPCError::Network(NetworkError::new(&e)))?;
        decoded.map_err(|remote| {
            RPCError::RemoteError(RemoteError::new_with_node(
                self.target,
                self.node.clone(),
                remote,
            ))
        })
    }
}

/// A buffer for the next AppendEntries body: the memory of `last`, the previous body, when
/// the connection no longer holds it (and it is no larger than two AppendEntries caps), else a
/// new one. Bodies are up to 512 KiB; a fresh allocation of that size lands on untouched
/// memory and costs page faults on the Raft thread each time.
fn reclaim(last: Option<bytes::Bytes>) -> Vec<u8> {
    let mut buffer = last
        .and_then(|last| last.try_into_mut().ok())
        .filter(|last| last.capacity() <= APPEND_ENTRIES_CAP * 2)
        .map(Vec::from)
        .unwrap_or_default();
    buffer.clear();
    buffer
}

fn encode<T: Serialize>(value: &T) -> Result<Vec<u8>, NetworkError> {
    serde_json::to_vec(value).map_err(|e| NetworkError::new(&e))
}

/// The same JSON as serde's encoding of `rpc`, with each entry written by
/// `format::write_entry_json` (the objects in it are most of the bytes).
fn encode_append_entries(
    rpc: &AppendEntriesRequest<TypeConfig>,
    mut out: Vec<u8>,
) -> Result<Vec<u8>, NetworkError> {
    let fail = |e: serde_json::Error| NetworkError::new(&e);
    out.clear();
    out.extend_from_slice(br#"{"vote":"#);
    serde_json::to_writer(&mut out, &rpc.vote).map_err(fail)?;
    out.extend_from_slice(br#","prev_log_id":"#);
    serde_json::to_writer(&mut out, &rpc.prev_log_id).map_err(fail)?;
    out.extend_from_slice(br#","entries":["#);
    for (i, entry) in rpc.entries.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        crate::raft::log::format::write_entry_json(&mut out, entry).map_err(fail)?;
    }
    out.extend_from_slice(br#"],"leader_commit":"#);
    serde_json::to_writer(&mut out, &rpc.leader_commit).map_err(fail)?;
    out.push(b'}');
    Ok(out)
}

impl RaftNetwork<TypeConfig> for Peer {
    async fn append_entries(
        &mut self,
        rpc: AppendEntriesRequest<TypeConfig>,
        option: RPCOption,
    ) -> RpcResult<AppendEntriesResponse<NodeId>, openraft::error::Infallible> {
        let buffer = reclaim(self.last_append.take());
        let body = encode_append_entries(&rpc, buffer).map_err(RPCError::Network)?;
        if body.len() > APPEND_ENTRIES_CAP && rpc.entries.len() > 1 {
            let hint = (rpc.entries.len() as u64 / 2).max(1);
            return Err(RPCError::PayloadTooLarge(
                PayloadTooLarge::new_entries_hint(hint),
            ));
        }
        // The entries share their proposals with the log's cache (`Batch`): let go of them
        // before waiting, so the state machine can take them over once they commit.
        drop(rpc);
        let body = bytes::Bytes::from(body);
        self.last_append = Some(body.clone());
        self.call(paths::APPEND, body, option.hard_ttl()).await
    }

    async fn install_snapshot(
        &mut self,
        rpc: InstallSnapshotRequest<TypeConfig>,
        option: RPCOption,
    ) -> RpcResult<InstallSnapshotResponse<NodeId>, InstallSnapshotError> {
        let body = encode(&rpc).map_err(RPCError::Network)?;
        self.call(paths::SNAPSHOT, body.into(), option.hard_ttl())
            .await
    }

    async fn vote(
        &mut self,
        rpc: VoteRequest<NodeId>,
        option: RPCOption,
    ) -> RpcResult<VoteResponse<NodeId>, openraft::error::Infallible> {
        let body = encode(&rpc).map_err(RPCError::Network)?;
        self.call(paths::VOTE, body.into(), option.hard_ttl()).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kube::mutation::Mutation;
    use crate::kube::object::ObjectKey;
    use crate::raft::types::{Batch, Entry, LogId, Proposal, Vote};
    use openraft::CommittedLeaderId;

    /// The next AppendEntries body reuses the last one's memory once nothing else holds it,
    /// and gets a buffer of its own while the last body is still being sent.
    #[test]
    fn an_append_buffer_is_the_last_body_once_the_connection_let_go_of_it() {
        assert_eq!(reclaim(None).capacity(), 0);
        let mut body = Vec::with_capacity(64 << 10);
        body.extend_from_slice(b"an earlier body");
        let sent = bytes::Bytes::from(body);
        let address = sent.as_ptr();
        let held_by_connection = sent.clone();
        let fresh = reclaim(Some(sent.clone()));
        assert_ne!(fresh.as_ptr(), address, "still held by the connection");
        drop(held_by_connection);
        let reused = reclaim(Some(sent));
        assert_eq!(reused.as_ptr(), address);
        assert!(reused.capacity() >= 64 << 10);
        assert!(reused.is_empty());
        let too_big = bytes::Bytes::from(Vec::<u8>::with_capacity(APPEND_ENTRIES_CAP * 2 + 1));
        assert_eq!(reclaim(Some(too_big)).capacity(), 0);
    }

    /// The receiving side decodes with serde, so the hand-written request must be exactly
    /// serde's bytes, whatever the entries are.
    #[test]
    fn append_entries_are_encoded_exactly_as_serde_encodes_them() {
        let normal = Entry {
            log_id: LogId::new(CommittedLeaderId::new(3, 1), 11),
            payload: openraft::EntryPayload::Normal(Batch::new(vec![Proposal::new(
                Mutation::Create {
                    key: ObjectKey::new("configmaps", "default", "a"),
                    object: serde_json::json!({"metadata": {"name": "a"}, "data": {"k": "v\n\"x\""}}),
                    requires_open_namespace: false,
                },
            )])),
        };
        let blank = Entry {
            log_id: LogId::new(CommittedLeaderId::new(3, 1), 10),
            payload: openraft::EntryPayload::Blank,
        };
        for (entries, prev, commit) in [
            (vec![], None, None),
            (
                vec![blank.clone(), normal.clone()],
                Some(LogId::new(CommittedLeaderId::new(2, 2), 9)),
                Some(LogId::new(CommittedLeaderId::new(3, 1), 10)),
            ),
            (vec![normal], None, Some(blank.log_id)),
        ] {
            let rpc = AppendEntriesRequest::<TypeConfig> {
                vote: Vote::new_committed(3, 1),
                prev_log_id: prev,
                entries,
                leader_commit: commit,
            };
            let ours = encode_append_entries(&rpc, b"left over".to_vec()).unwrap();
            assert_eq!(
                String::from_utf8_lossy(&ours),
                String::from_utf8_lossy(&serde_json::to_vec(&rpc).unwrap())
            );
        }
    }
}
