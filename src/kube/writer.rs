//! The seam between API handlers and persistence. A handler builds a Mutation and hands it to
//! a `Writer`; the Writer makes it durable (single server: `objects.wal` with group commit;
//! HA: the Raft log) and applies it to the store, then returns the store's result. A 2xx is
//! only ever sent after `write` returns.

use std::future::Future;
use std::pin::Pin;

use super::mutation::{ApplyError, Mutation};
use super::object::ObjectRef;

/// Why a write did not produce an object.
#[derive(Debug, Clone, thiserror::Error)]
pub enum WriteError {
    /// The Mutation was durable and applied, and the store refused it (conflict, not found…).
    #[error(transparent)]
    Rejected(#[from] ApplyError),
    /// Persistence failed; the write may not be durable. The server stops accepting writes.
    #[error("storage unavailable: {0}")]
    Unavailable(String),
    /// No result within the deadline (HA: no leader); the write may or may not have applied.
    #[error("timed out waiting for the write to commit")]
    Timeout,
}

pub type WriteFuture<'a> = Pin<Box<dyn Future<Output = Result<ObjectRef, WriteError>> + Send + 'a>>;

/// Makes Mutations durable and applies them to the store, in order.
pub trait Writer: Send + Sync {
    fn write(&self, mutation: Mutation) -> WriteFuture<'_>;
}

/// Why a linearizable read could not be served.
#[derive(Debug, Clone, thiserror::Error)]
pub enum BarrierError {
    /// No leader answered in time, or this server is cut off from the majority.
    #[error("{0}")]
    Timeout(String),
    /// The server is stopping or its consensus module failed.
    #[error("{0}")]
    Unavailable(String),
}

pub type BarrierFuture<'a> = Pin<Box<dyn Future<Output = Result<(), BarrierError>> + Send + 'a>>;

/// The read barrier of `resourceVersion=""` reads and of write handlers (docs/guarantees.md,
/// Reads): once it returns, the local store holds every write acknowledged before it was called.
pub trait ReadBarrier: Send + Sync {
    fn linearize(&self) -> BarrierFuture<'_>;
}

/// A single server: its store is the only copy, so every read is already linearizable.
pub struct LocalReads;

impl ReadBarrier for LocalReads {
    fn linearize(&self) -> BarrierFuture<'_> {
        Box::pin(async { Ok(()) })
    }
}
