//! The proposer's batcher: coalesces concurrent Mutations into one Raft entry.
//!
//! openraft 0.9 waits for each append's fsync before it handles its next message, so one
//! `client_write` per Mutation means one fsync per Mutation. Instead every caller queues its
//! Proposal here; one task takes everything waiting (bounded by count and by bytes, under the
//! 512 KiB AppendEntries cap), proposes it as one `Batch` and hands each caller its own result.
//! While that entry commits, the next batch gathers. Two batches may be in flight: openraft
//! appends entries one at a time and waits for each flush, so with the next batch already
//! queued the Raft core appends it as soon as the previous flush completes, while the state
//! machine applies the previous one and its callers prepare their next writes.
//!
//! The answer of each batch comes back from the Raft thread through a [`WakeRelay`], which
//! wakes this task as I/O readiness rather than as a wake-up from another thread (see that
//! module for why that saves a worker wake-up per write).

use std::future::Future;
use std::io::Write;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use tokio::sync::{mpsc, oneshot};

use crate::kube::mutation::{ApplyError, Mutation};
use crate::raft::types::{Applied, Batch, BatchResponse, Proposal, TypeConfig};
use crate::raft::wake_relay::WakeRelay;

/// Why a proposal did not apply.
#[derive(Debug, Clone, thiserror::Error)]
pub enum ProposeError {
    /// Committed and applied, and the store refused it (conflict, not found…).
    #[error(transparent)]
    Rejected(#[from] ApplyError),
    /// This node does not lead: nothing was appended, a retry elsewhere is safe.
    #[error("this server is not the Raft leader")]
    NotLeader,
    /// Raft did not commit the batch (leadership lost after appending, shutting down,
    /// storage failed): it may or may not apply later.
    #[error("raft: {0}")]
    Raft(String),
    /// The batcher has stopped.
    #[error("the proposer has stopped")]
    Stopped,
}

/// Something that commits a Batch and returns its per-Mutation results: the Raft node, or a
/// stand-in in tests.
pub trait Propose: Send + Sync + 'static {
    fn propose(
        &self,
        batch: Batch,
    ) -> Pin<Box<dyn Future<Output = Result<BatchResponse, ProposeError>> + Send + '_>>;
}

impl Propose for openraft::Raft<TypeConfig> {
    fn propose(
        &self,
        batch: Batch,
    ) -> Pin<Box<dyn Future<Output = Result<BatchResponse, ProposeError>> + Send + '_>> {
        Box::pin(async move {
            self.client_write(batch)
                .await
                .map(|response| response.data)
                .map_err(|e| match e.forward_to_leader::<openraft::BasicNode>() {
                    Some(_) => ProposeError::NotLeader,
                    None => ProposeError::Raft(e.to_string()),
                })
        })
    }
}

/// Bounds of one batch and of the queue in front of it.
#[derive(Debug, Clone)]
pub struct BatchLimits {
    pub max_count: usize,
    /// Encoded bytes of the Proposals in one entry; leaves room under the 512 KiB
    /// AppendEntries cap for the entry's own framing.
    pub max_bytes: usize,
    /// Proposals that may wait; callers beyond this wait to enqueue.
    pub queue: usize,
    /// Batches proposed and not yet answered; the next batch waits for one of them.
    pub in_flight: usize,
}

impl Default for BatchLimits {
    fn default() -> Self {
        BatchLimits {
            max_count: 4096,
            max_bytes: (512 << 10) - (8 << 10),
            queue: 16_384,
            in_flight: 2,
        }
    }
}

struct Request {
    proposal: Proposal,
    size: usize,
    reply: oneshot::Sender<Result<Applied, ProposeError>>,
}

/// The handle callers submit through; cheap to clone.
#[derive(Clone)]
pub struct Batcher {
    tx: mpsc::Sender<Request>,
}

/// Counts bytes without keeping them.
struct Counter(usize);

impl Write for Counter {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0 += buf.len();
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Prepares `proposal`'s object once (`Proposal::prepare_object`: the log entry and the
/// store reuse its JSON) and returns the exact length of the proposal's compact JSON, what
/// the log entry holds of it.
fn prepare_and_measure(proposal: &mut Proposal) -> usize {
    proposal.prepare_object();
    let object = match &mut proposal.mutation {
        Mutation::Create { object, .. } | Mutation::Update { object, .. } => {
            Some(std::mem::take(object))
        }
        Mutation::Delete { .. } => None,
    };
    let mut counter = Counter(0);
    // Serializing plain data cannot fail; the size only bounds batches.
    let _ = serde_json::to_writer(&mut counter, &*proposal);
    let Some(object) = object else {
        return counter.0;
    };
    // The object was counted as `null`. Objects the store would refuse have no encoding.
    let object_len = match proposal.prepared.get() {
        Some(json) => json.as_bytes().len(),
        None => crate::kube::json_writer::to_vec(&object).len(),
    };
    if let Mutation::Create { object: slot, .. } | Mutation::Update { object: slot, .. } =
        &mut proposal.mutation
    {
        *slot = object;
    }
    counter.0 - 4 + object_len
}

impl Batcher {
    /// Starts the batching task on the current tokio runtime.
    pub fn start<P: Propose>(proposer: Arc<P>, limits: BatchLimits) -> Batcher {
        let (tx, rx) = mpsc::channel(limits.queue.max(1));
        tokio::spawn(run(proposer, rx, limits));
        Batcher { tx }
    }

    /// Proposes one Mutation; returns once it is committed and applied (or failed).
    pub async fn submit(&self, mut proposal: Proposal) -> Result<Applied, ProposeError> {
        let size = prepare_and_measure(&mut proposal) + 1;
        let (reply, rx) = oneshot::channel();
        let request = Request {
            proposal,
            size,
            reply,
        };
        self.tx
            .send(request)
            .await
            .map_err(|_| ProposeError::Stopped)?;
        rx.await.map_err(|_| ProposeError::Stopped)?
    }
}

async fn run<P: Propose>(proposer: Arc<P>, mut rx: mpsc::Receiver<Request>, limits: BatchLimits) {
    let relay = WakeRelay::start();
    let max_in_flight = limits.in_flight.max(1);
    let mut in_flight = InFlight::default();
    let mut carry: Option<Request> = None;
    let mut open = true;
    loop {
        // Completions first: a new batch's future is polled (and so proposed) before the
        // next batch is gathered, which keeps batches in the order they were formed.
        let first = if in_flight.len() >= max_in_flight || (!open && carry.is_none()) {
            match in_flight.next().await {
                Some(()) => continue,
                None => return,
            }
        } else if let Some(request) = carry.take() {
            request
        } else {
            tokio::select! {
                biased;
                Some(()) = in_flight.next(), if !in_flight.is_empty() => continue,
                request = rx.recv() => match request {
                    Some(request) => request,
                    None => {
                        open = false;
                        continue;
                    }
                },
            }
        };
        if !in_flight.is_empty() {
            // A batch is already on its way: let the callers that are ready to run (those just
            // answered, typically) submit first, so that this batch takes all of them instead
            // of only the one whose send woke this task.
            tokio::task::yield_now().await;
        }
        let mut bytes = first.size;
        let mut requests = vec![first];
        while requests.len() < limits.max_count {
            match rx.try_recv() {
                Ok(request) if bytes + request.size > limits.max_bytes => {
                    carry = Some(request);
                    break;
                }
                Ok(request) => {
                    bytes += request.size;
                    requests.push(request);
                }
                Err(_) => break,
            }
        }
        in_flight.push(propose_and_answer(&*proposer, relay.as_ref(), requests));
    }
}

/// The batches proposed and not yet answered (at most `BatchLimits::in_flight`, a handful).
///
/// Not a `FuturesUnordered`: that one, having polled every future it holds and found them all
/// pending, wakes its own task to yield, and a task woken while it runs is queued as a yield,
/// which makes tokio wake a second worker. With one writer that was one needless wake-up (and
/// a futex call) per batch. Polling the few batches in flight on every wake-up costs less.
#[derive(Default)]
struct InFlight<'a> {
    batches: Vec<Pin<Box<dyn Future<Output = ()> + Send + 'a>>>,
}

impl<'a> InFlight<'a> {
    fn push(&mut self, batch: impl Future<Output = ()> + Send + 'a) {
        self.batches.push(Box::pin(batch));
    }

    fn len(&self) -> usize {
        self.batches.len()
    }

    fn is_empty(&self) -> bool {
        self.batches.is_empty()
    }

    /// Waits until at least one batch is answered; `None` when none is in flight.
    async fn next(&mut self) -> Option<()> {
        std::future::poll_fn(|cx| self.poll_answered(cx)).await
    }

    /// Polls every batch in the order proposed (a new one is thereby proposed) and drops the
    /// answered ones.
    fn poll_answered(&mut self, cx: &mut Context<'_>) -> Poll<Option<()>> {
        if self.batches.is_empty() {
            return Poll::Ready(None);
        }
        let before = self.batches.len();
        self.batches
            .retain_mut(|batch| batch.as_mut().poll(cx).is_pending());
        if self.batches.len() < before {
            Poll::Ready(Some(()))
        } else {
            Poll::Pending
        }
    }
}

/// Proposes one batch and hands each caller its own result.
async fn propose_and_answer<P: Propose>(
    proposer: &P,
    relay: Option<&WakeRelay>,
    requests: Vec<Request>,
) {
    let mut replies = Vec::with_capacity(requests.len());
    let proposals = requests
        .into_iter()
        .map(|r| {
            replies.push(r.reply);
            r.proposal
        })
        .collect();
    let proposed = proposer.propose(Batch::new(proposals));
    let answer = match relay {
        Some(relay) => relay.relayed(proposed).await,
        None => proposed.await,
    };
    match answer {
        Ok(response) if response.results.len() == replies.len() => {
            for (reply, result) in replies.into_iter().zip(response.results) {
                let _ = reply.send(result.map_err(ProposeError::Rejected));
            }
        }
        Ok(response) => {
            let e = ProposeError::Raft(format!(
                "{} results for {} proposals",
                response.results.len(),
                replies.len()
            ));
            for reply in replies {
                let _ = reply.send(Err(e.clone()));
            }
        }
        Err(e) => {
            for reply in replies {
                let _ = reply.send(Err(e.clone()));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kube::mutation::Mutation;
    use crate::kube::object::ObjectKey;
    use crate::kube::store::{Store, StoreConfig};
    use parking_lot::Mutex;
    use std::sync::atomic::{AtomicUsize, Ordering};

    /// Applies batches straight to a store, recording batch sizes.
    struct Direct {
        store: Store,
        sizes: Mutex<Vec<usize>>,
        /// Batches being proposed now, and the most there ever were at once.
        active: AtomicUsize,
        peak: AtomicUsize,
    }

    impl Propose for Direct {
        fn propose(
            &self,
            batch: Batch,
        ) -> Pin<Box<dyn Future<Output = Result<BatchResponse, ProposeError>> + Send + '_>>
        {
            Box::pin(async move {
                self.sizes.lock().push(batch.proposals.len());
                let now = self.active.fetch_add(1, Ordering::SeqCst) + 1;
                self.peak.fetch_max(now, Ordering::SeqCst);
                tokio::time::sleep(std::time::Duration::from_millis(5)).await;
                self.active.fetch_sub(1, Ordering::SeqCst);
                let results = self
                    .store
                    .apply_batch(batch.into_proposals().into_iter().map(|p| p.mutation))
                    .into_iter()
                    .map(|r| {
                        r.map(|o| Applied {
                            resource_version: o.resource_version,
                            object: Some(o),
                        })
                    })
                    .collect();
                Ok(BatchResponse { results })
            })
        }
    }

    fn create(name: &str, size: usize) -> Proposal {
        Proposal::new(Mutation::Create {
            key: ObjectKey::new("configmaps", "default", name),
            object: serde_json::json!({"metadata":{"name":name,"namespace":"default"},"data":{"v":"x".repeat(size)}}),
            requires_open_namespace: false,
        })
    }

    #[test]
    fn measured_length_is_exact_and_the_object_is_prepared() {
        let objects = [
            serde_json::json!(null),
            serde_json::json!({"metadata":{"name":"n","resourceVersion":"4"},"data":{"k":"v\n"}}),
            serde_json::json!({"kind":"K","metadata":{"name":"n"}}),
            serde_json::json!({"a":[1,-2,3.5,1e300,true,false,null,[],{}],"b":"x"}),
            serde_json::json!({"esc":"quote\" back\\ nl\n tab\t bell\u{7} del\u{7f} é ☃ 🦀 \r\u{8}\u{c}\u{1f}",
                "k\"ey\n":{"nested":[{"deep":"v"}],"n":18446744073709551615u64,"m":-9223372036854775808i64,"f":0.1}}),
        ];
        for object in objects {
            let key = ObjectKey::new("configmaps", "n\"s", "na\u{1}me");
            for mutation in [
                Mutation::Create {
                    key: key.clone(),
                    object: object.clone(),
                    requires_open_namespace: false,
                },
                Mutation::Update {
                    key: key.clone(),
                    object: object.clone(),
                    precondition: crate::kube::mutation::Precondition::at(7),
                },
                Mutation::Delete {
                    key: key.clone(),
                    precondition: crate::kube::mutation::Precondition::none(),
                },
            ] {
                let mut proposal = Proposal::new(mutation);
                proposal.session = Some(3);
                let expected = serde_json::to_vec(&proposal).unwrap().len();
                let before = proposal.clone();
                assert_eq!(prepare_and_measure(&mut proposal), expected, "{proposal:?}");
                assert_eq!(proposal, before, "the proposal must come back unchanged");
                let mut written = Vec::new();
                proposal.write_json(&mut written);
                assert_eq!(written.len(), expected, "{proposal:?}");
                assert_eq!(
                    written,
                    serde_json::to_vec(&proposal).unwrap(),
                    "the prepared JSON in the entry must be serde's, byte for byte"
                );
            }
        }
    }

    /// Counts wake-ups of a task.
    struct CountingWaker(AtomicUsize);

    impl std::task::Wake for CountingWaker {
        fn wake(self: Arc<Self>) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    #[test]
    fn batches_in_flight_do_not_wake_their_own_task() {
        let counter = Arc::new(CountingWaker(AtomicUsize::new(0)));
        let waker = std::task::Waker::from(counter.clone());
        let mut cx = Context::from_waker(&waker);
        let (answer, answered) = oneshot::channel::<()>();
        let mut in_flight = InFlight::default();
        assert_eq!(in_flight.poll_answered(&mut cx), Poll::Ready(None));
        in_flight.push(async move {
            let _ = answered.await;
        });
        in_flight.push(std::future::pending());
        // Everything pending: no self-wake (a FuturesUnordered wakes its task here).
        assert_eq!(in_flight.poll_answered(&mut cx), Poll::Pending);
        assert_eq!(counter.0.load(Ordering::SeqCst), 0);
        // The answer wakes the task once; the next poll drops the answered batch.
        answer.send(()).unwrap();
        assert_eq!(counter.0.load(Ordering::SeqCst), 1);
        assert_eq!(in_flight.poll_answered(&mut cx), Poll::Ready(Some(())));
        assert_eq!(in_flight.len(), 1);
        assert_eq!(in_flight.poll_answered(&mut cx), Poll::Pending);
        assert_eq!(counter.0.load(Ordering::SeqCst), 1);
    }

    /// Time is paused: each proposal "takes" 5 ms of virtual time, so the callers queue
    /// behind the batches in flight however slow the machine is.
    #[tokio::test(start_paused = true)]
    async fn coalesces_and_answers_each_caller() {
        let direct = Arc::new(Direct {
            store: Store::new(StoreConfig::default()),
            sizes: Mutex::new(Vec::new()),
            active: AtomicUsize::new(0),
            peak: AtomicUsize::new(0),
        });
        let limits = BatchLimits {
            max_count: 64,
            max_bytes: 40 << 10,
            queue: 1024,
            in_flight: 2,
        };
        let batcher = Batcher::start(direct.clone(), limits);
        let mut tasks = Vec::new();
        for i in 0..200 {
            let b = batcher.clone();
            // Every name twice: exactly one of each pair is rejected as AlreadyExists.
            tasks.push(tokio::spawn(async move {
                b.submit(create(&format!("c{}", i / 2), 1000)).await
            }));
        }
        let mut ok = 0;
        let mut rejected = 0;
        for t in tasks {
            match t.await.unwrap() {
                Ok(applied) => {
                    ok += 1;
                    assert_eq!(
                        applied.object.unwrap().resource_version,
                        applied.resource_version
                    );
                }
                Err(ProposeError::Rejected(ApplyError::AlreadyExists(_))) => rejected += 1,
                Err(e) => panic!("{e}"),
            }
        }
        assert_eq!((ok, rejected), (100, 100));
        let sizes = direct.sizes.lock().clone();
        assert!(sizes.len() < 200, "no batching happened: {sizes:?}");
        // ~1 KiB each: the byte bound keeps batches under 40.
        assert!(sizes.iter().all(|n| *n <= 40), "{sizes:?}");
        // At least five batches: the second is proposed while the first is still out, and
        // never more than the limit at once.
        assert_eq!(direct.peak.load(Ordering::SeqCst), 2);
    }
}
