//! The Raft listener (`--raft-port`, API port + 1 by default): HTTPS with the serving
//! certificate, every request authenticated with the cluster secret, served on the Raft
//! runtime. It carries openraft's RPCs and the cluster endpoints of `protocol::paths`.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use bytes::{Buf, Bytes};
use http::{header, Method, Request, Response, StatusCode};
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use openraft::raft::{AppendEntriesRequest, AppendEntriesResponse, InstallSnapshotRequest};
use serde::de::DeserializeOwned;
use serde::Serialize;
use tokio::net::TcpListener;
use tokio_rustls::TlsAcceptor;
use tokio_util::sync::CancellationToken;

use super::handoff;
use super::membership;
use super::network::paths as raft_paths;
use super::node::{ClusterNode, Leadership};
use super::protocol::{
    paths, JoinRequest, MembershipReply, ProposeReply, ProposeRequest, ReadIndexReply,
    RemoveRequest,
};
use crate::raft::batcher::ProposeError;
use crate::raft::types::{Proposal, TypeConfig};

/// The largest request body (a snapshot chunk is 1 MiB, AppendEntries 512 KiB).
const MAX_REQUEST: usize = 8 << 20;

/// Serves the Raft listener until `shutdown`. Spawn it on the Raft runtime.
pub async fn serve(
    node: Arc<ClusterNode>,
    tcp: TcpListener,
    tls: TlsAcceptor,
    shutdown: CancellationToken,
) {
    loop {
        let (stream, peer) = tokio::select! {
            _ = shutdown.cancelled() => return,
            accepted = tcp.accept() => match accepted {
                Ok(pair) => pair,
                Err(e) => {
                    tracing::warn!("raft listener: accept: {e}");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
        };
        let _ = stream.set_nodelay(true);
        let (node, tls, shutdown) = (node.clone(), tls.clone(), shutdown.clone());
        tokio::spawn(async move {
            let stream =
                match tokio::time::timeout(Duration::from_secs(5), tls.accept(stream)).await {
                    Ok(Ok(stream)) => stream,
                    Ok(Err(e)) => {
                        tracing::debug!(%peer, "raft listener: TLS handshake: {e}");
                        return;
                    }
                    Err(_) => return,
                };
            let service = service_fn(move |req| handle(node.clone(), req));
            let builder = auto::Builder::new(TokioExecutor::new());
            let conn = builder.serve_connection(TokioIo::new(stream), service);
            tokio::select! {
                _ = conn => {}
                _ = shutdown.cancelled() => {}
            }
        });
    }
}

fn reply(status: StatusCode, body: impl Into<Bytes>) -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(body.into()));
    *response.status_mut() = status;
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        header::HeaderValue::from_static("application/json"),
    );
    response
}

fn json<T: Serialize>(value: &T) -> Response<Full<Bytes>> {
    match serde_json::to_vec(value) {
        Ok(bytes) => reply(StatusCode::OK, bytes),
        Err(e) => reply(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()),
    }
}

fn bad_request(reason: String) -> Response<Full<Bytes>> {
    reply(StatusCode::BAD_REQUEST, reason)
}

async fn body_of<T: DeserializeOwned>(req: Request<Incoming>) -> Result<T, Response<Full<Bytes>>> {
    let body = Limited::new(req.into_body(), MAX_REQUEST)
        .collect()
        .await
        .map_err(|e| bad_request(format!("reading the body: {e}")))?;
    decode_chunks(body.aggregate()).map_err(|e| bad_request(format!("decoding the body: {e}")))
}

/// The most scratch memory a thread keeps between requests for joining a body's chunks.
const SCRATCH_KEPT: usize = 1 << 20;

thread_local! {
    /// Where a body that arrived in several chunks (HTTP/2 frames are 16 KiB) is joined
    /// before it is parsed. Kept between requests: an AppendEntries body is hundreds of KiB,
    /// and a fresh buffer of that size each time costs page faults on fresh memory.
    static SCRATCH: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// Decodes the JSON in `chunks`: in place when it is one chunk, otherwise joined in this
/// thread's scratch buffer.
fn decode_chunks<T: DeserializeOwned>(mut chunks: impl Buf) -> Result<T, serde_json::Error> {
    if chunks.chunk().len() == chunks.remaining() {
        return serde_json::from_slice(chunks.chunk());
    }
    SCRATCH.with(|scratch| {
        // Never borrowed twice: nothing below awaits or decodes another body.
        let mut joined = scratch.borrow_mut();
        joined.clear();
        while chunks.has_remaining() {
            let chunk = chunks.chunk();
            joined.extend_from_slice(chunk);
            let read = chunk.len();
            chunks.advance(read);
        }
        let decoded = serde_json::from_slice(&joined);
        if joined.capacity() > SCRATCH_KEPT {
            *joined = Vec::new();
        }
        decoded
    })
}

/// Whether the request carries the cluster secret as its bearer token.
fn authorized(node: &ClusterNode, req: &Request<Incoming>) -> bool {
    req.headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.as_bytes().strip_prefix(b"Bearer "))
        .is_some_and(|token| node.secret.matches(token))
}

async fn handle(
    node: Arc<ClusterNode>,
    req: Request<Incoming>,
) -> Result<Response<Full<Bytes>>, Infallible> {
    if !authorized(&node, &req) {
        return Ok(reply(
            StatusCode::UNAUTHORIZED,
            "the cluster secret is required",
        ));
    }
    if req.method() != Method::POST {
        return Ok(reply(StatusCode::METHOD_NOT_ALLOWED, "POST only"));
    }
    let path = req.uri().path().to_string();
    if path.starts_with("/raft/") && !addressed_to(&node, &req) {
        return Ok(reply(
            StatusCode::MISDIRECTED_REQUEST,
            "this Raft RPC is addressed to another node id (a former member at this address)",
        ));
    }
    let response = match path.as_str() {
        raft_paths::APPEND => match body_of::<AppendEntriesRequest<TypeConfig>>(req).await {
            Ok(mut rpc) => {
                for entry in &mut rpc.entries {
                    if let openraft::EntryPayload::Normal(batch) = &mut entry.payload {
                        batch.prepare_objects();
                    }
                }
                let leader_commit = rpc.leader_commit.map(|l| l.index);
                let result = node.raft.append_entries(rpc).await;
                if matches!(
                    result,
                    Ok(AppendEntriesResponse::Success | AppendEntriesResponse::PartialSuccess(_))
                ) {
                    node.heard_from_leader(leader_commit);
                }
                json(&result)
            }
            Err(bad) => bad,
        },
        raft_paths::VOTE => match body_of(req).await {
            Ok(rpc) => json(&node.vote(rpc).await),
            Err(bad) => bad,
        },
        raft_paths::SNAPSHOT => match body_of::<InstallSnapshotRequest<TypeConfig>>(req).await {
            Ok(rpc) => {
                let (end, done) = (rpc.offset + rpc.data.len() as u64, rpc.done);
                let result = node.raft.install_snapshot(rpc).await;
                node.snapshot_chunk(end, done || result.is_err());
                json(&result)
            }
            Err(bad) => bad,
        },
        paths::PROPOSE => match body_of::<ProposeRequest>(req).await {
            Ok(request) => json(&propose(&node, request).await),
            Err(bad) => bad,
        },
        paths::READ_INDEX => json(&read_index(&node).await),
        paths::JOIN => match body_of::<JoinRequest>(req).await {
            Ok(request) => json(
                &leader_only(&node, || async {
                    membership::admit(&node, request.node_id, request.member).await
                })
                .await,
            ),
            Err(bad) => bad,
        },
        paths::MEMBERS => json(&MembershipReply::Done(membership::view(&node))),
        paths::REMOVE => match body_of::<RemoveRequest>(req).await {
            Ok(request) => json(
                &leader_only(&node, || async {
                    membership::remove(&node, &request.name).await
                })
                .await,
            ),
            Err(bad) => bad,
        },
        paths::LEADER_LEAVING => {
            tokio::spawn(handoff::campaign_after_lease(node.clone()));
            json(&())
        }
        _ => reply(StatusCode::NOT_FOUND, "no such endpoint"),
    };
    Ok(response)
}

/// Whether a Raft RPC's `target` query names this node.
fn addressed_to(node: &ClusterNode, req: &Request<Incoming>) -> bool {
    let target = req
        .uri()
        .query()
        .and_then(|q| q.split('&').find_map(|kv| kv.strip_prefix("target=")))
        .and_then(|id| id.parse::<u64>().ok());
    target == Some(node.id)
}

async fn leader_only<F, Fut>(node: &ClusterNode, change: F) -> MembershipReply
where
    F: FnOnce() -> Fut,
    Fut: std::future::Future<Output = Result<(), membership::MembershipError>>,
{
    if node.leadership() != Leadership::Me {
        return MembershipReply::NotLeader;
    }
    match change().await {
        Ok(()) => MembershipReply::Done(membership::view(node)),
        // Leadership moved mid-change: the caller asks the new leader, as for a request that
        // arrived at a follower.
        Err(membership::MembershipError::NotLeader { .. }) => MembershipReply::NotLeader,
        Err(refused) => MembershipReply::Refused(refused.to_string()),
    }
}

/// Applies a forwarded proposal if this member leads.
pub async fn propose(node: &ClusterNode, request: ProposeRequest) -> ProposeReply {
    if node.leadership() != Leadership::Me {
        return ProposeReply::NotLeader;
    }
    if crate::failpoints::lose_propose_reply() {
        // The proposal is committed and applied, but its answer is lost.
        let _ = node.propose_here(proposal_of(request)).await;
        return ProposeReply::Failed("answer lost (injected fault)".into());
    }
    match node.propose_here(proposal_of(request)).await {
        Ok(applied) => match applied.object {
            Some(object) => ProposeReply::Applied {
                resource_version: applied.resource_version,
                key: object.key.clone(),
                json: String::from_utf8_lossy(&object.json).into_owned(),
            },
            None => ProposeReply::Failed("applied without an object".into()),
        },
        Err(ProposeError::Rejected(e)) => ProposeReply::Rejected(e),
        Err(ProposeError::NotLeader) => ProposeReply::NotLeader,
        Err(e) => ProposeReply::Failed(e.to_string()),
    }
}

fn proposal_of(request: ProposeRequest) -> Proposal {
    Proposal {
        mutation: request.mutation,
        session: request.session,
        seq: request.seq,
        acked: request.acked,
        prepared: Default::default(),
    }
}

/// The leader's read index (docs/guarantees.md, Reads): confirms leadership with a heartbeat
/// round.
async fn read_index(node: &ClusterNode) -> ReadIndexReply {
    if node.leadership() != Leadership::Me {
        return ReadIndexReply::NotLeader;
    }
    match node.leader_read_index().await {
        Ok(index) => ReadIndexReply::Index(index),
        Err(e) => match e.forward_to_leader() {
            Some(_) => ReadIndexReply::NotLeader,
            None => ReadIndexReply::Failed(e.to_string()),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A body split over frames decodes like the whole body; the joining buffer is kept for
    /// the next request up to `SCRATCH_KEPT`, and let go when a body was larger.
    #[test]
    fn a_body_in_several_chunks_decodes_through_the_kept_scratch_buffer() {
        let value = serde_json::json!({"entries": ["a".repeat(40_000), "b"], "n": 7});
        let bytes = serde_json::to_vec(&value).unwrap();
        let whole: serde_json::Value = decode_chunks(Bytes::from(bytes.clone())).unwrap();
        assert_eq!(whole, value);
        let (head, tail) = bytes.split_at(10_000);
        let chunks = Bytes::copy_from_slice(head).chain(Bytes::copy_from_slice(tail));
        let joined: serde_json::Value = decode_chunks(chunks).unwrap();
        assert_eq!(joined, value);
        let kept = SCRATCH.with(|s| s.borrow().capacity());
        assert!(kept >= bytes.len(), "the scratch buffer is kept");

        let big = vec![b' '; SCRATCH_KEPT + 1];
        let chunks = Bytes::from(big).chain(Bytes::from_static(b"[1]"));
        let decoded: Vec<u8> = decode_chunks(chunks).unwrap();
        assert_eq!(decoded, vec![1]);
        assert_eq!(
            SCRATCH.with(|s| s.borrow().capacity()),
            0,
            "too big to keep"
        );

        let broken = Bytes::from_static(b"{\"a\":").chain(Bytes::from_static(b"]"));
        assert!(decode_chunks::<serde_json::Value>(broken).is_err());
    }
}
