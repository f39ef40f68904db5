//! The shape every controller has, and the loop its workers run: take a key from the work
//! queue, reconcile it, and on failure put it back with the queue's growing delay (on success
//! its failure count is forgotten). A key is never reconciled by two workers at once, so a
//! controller reasons about one object at a time, as kube-controller-manager's do.

use std::fmt::Display;
use std::future::Future;
use std::hash::Hash;
use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use super::informer::{Informers, InformersBuilder};
use super::queue::WorkQueue;
use super::Shared;
use crate::client::ClientError;

/// What a reconcile asks for next.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// Nothing until the next change.
    Done,
    /// Look again after this long (a deadline, a schedule, a pending condition).
    RequeueAfter(Duration),
}

/// Why a reconcile failed; the key is retried with backoff.
#[derive(Debug, thiserror::Error)]
pub enum ReconcileError {
    #[error(transparent)]
    Api(#[from] ClientError),
    /// The object is not usable as it is (a selector that does not parse …): retried, since a
    /// later change may fix it, with the queue's growing delay.
    #[error("{0}")]
    Invalid(String),
}

/// One controller: which changes queue which keys, and what a key's reconcile does.
pub trait Controller: Sized + Send + Sync + 'static {
    type Key: Clone + Eq + Hash + Ord + Send + Sync + Display + 'static;
    /// The name in logs (kube-controller-manager's controller name where there is one).
    const NAME: &'static str;
    /// Keys reconciled at once.
    const WORKERS: usize;

    /// Registers the handlers that map changes to keys in `queue` (and any cache indexes).
    fn register(builder: &mut InformersBuilder, queue: &WorkQueue<Self::Key>);

    /// The controller, once the caches are synced.
    fn new(shared: &Shared, informers: &Arc<Informers>, queue: WorkQueue<Self::Key>) -> Self;

    fn reconcile(
        &self,
        key: &Self::Key,
    ) -> impl Future<Output = Result<Outcome, ReconcileError>> + Send;
}

/// Runs `workers` reconcile loops and the queue's delay timer until `stop`.
pub async fn run<C: Controller>(
    controller: Arc<C>,
    queue: WorkQueue<C::Key>,
    stop: CancellationToken,
) {
    let mut tasks = tokio::task::JoinSet::new();
    {
        let queue = queue.clone();
        tasks.spawn(async move { queue.run_delays().await });
    }
    for _ in 0..C::WORKERS.max(1) {
        let (controller, queue) = (controller.clone(), queue.clone());
        tasks.spawn(async move { work(controller, queue).await });
    }
    stop.cancelled().await;
    queue.shut_down();
    while tasks.join_next().await.is_some() {}
}

async fn work<C: Controller>(controller: Arc<C>, queue: WorkQueue<C::Key>) {
    while let Some(key) = queue.get().await {
        match controller.reconcile(&key).await {
            Ok(Outcome::Done) => queue.forget(&key),
            Ok(Outcome::RequeueAfter(delay)) => {
                queue.forget(&key);
                queue.add_after(key.clone(), delay);
            }
            Err(e) => {
                let failures = queue.failures(&key);
                // The first failure and then every tenth: a key that keeps failing is
                // visible without flooding the journal.
                if failures % 10 == 0 {
                    tracing::info!(
                        component = "controllers",
                        controller = C::NAME,
                        key = %key,
                        failures = failures + 1,
                        error = %e,
                        "reconcile failed; retrying"
                    );
                }
                queue.add_rate_limited(key.clone());
            }
        }
        queue.done(&key);
    }
}
