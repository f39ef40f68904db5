//! When a request passes the read barrier: decided once per request, by [`decide`].
//!
//! The barrier (`ApiContext::reads`: a ReadIndex round on a cluster member, nothing on a single
//! server) makes the local store hold every write acknowledged before the request arrived, so
//! that a read of the latest state, or a write decided on the current object, never starts from
//! a copy that lags behind a write a client has already seen acknowledged: a deposed leader cut
//! off from the others never answers from stale state (docs/guarantees.md, Reads). The router
//! passes it before the handler when the answer is [`Barrier::Now`]; the create path
//! (`write::create`) handles [`Barrier::CommitFirst`].

use http::Method;

use super::kind_rules;
use super::request::ApiRequest;
use super::status::ApiError;
use crate::kube::writer::BarrierError;

/// When a request passes the read barrier.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Barrier {
    /// Before its handler runs: a read of the latest state (`resourceVersion` unset), and every
    /// write, since it decides on the current object (or, for a create that is a dry run or of
    /// a kind whose preparation reads the store, on what the store holds).
    Now,
    /// Only when the local store refuses it: a create that reads nothing of the store but its
    /// namespace proposes at once with `requires_open_namespace`, so the state machine checks
    /// the name and the namespace against the state the entry commits into, and the commit, in
    /// the term of the leader that proposed it, proves that answer current. A refusal read from
    /// the local copy (the namespace missing or terminating) may be stale: the create then
    /// passes the barrier and is decided again.
    CommitFirst,
    /// Never: a read at a resourceVersion the client gave (`"0"` reads locally, N waits until
    /// the store has reached N).
    None,
}

/// When `req` passes the read barrier. Keep every store read of the create path in step with
/// [`Barrier::CommitFirst`]: a create may skip the barrier only while the namespace is all it
/// reads (`kind_rules::create_reads_store` names the kinds whose preparation reads more).
pub fn decide(req: &ApiRequest) -> Barrier {
    let t = &req.target;
    if req.method == Method::GET {
        let latest = req
            .query
            .resource_version
            .as_deref()
            .unwrap_or("")
            .is_empty();
        return if latest { Barrier::Now } else { Barrier::None };
    }
    let in_namespace = !t.info.namespaced || t.namespace.is_some();
    let create =
        req.method == Method::POST && t.name.is_none() && t.subresource.is_none() && in_namespace;
    if create && !req.query.dry_run && !kind_rules::create_reads_store(t.info) {
        Barrier::CommitFirst
    } else {
        Barrier::Now
    }
}

/// Passes the read barrier: afterwards the local store holds every write acknowledged before
/// the request arrived.
pub async fn pass(req: &ApiRequest) -> Result<(), ApiError> {
    req.ctx.reads.linearize().await.map_err(|e| match e {
        BarrierError::Timeout(reason) => ApiError::Timeout(reason),
        BarrierError::Unavailable(reason) => ApiError::ServiceUnavailable(reason),
    })
}
