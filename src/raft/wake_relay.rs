//! Wake-ups from the Raft thread delivered to the API runtime as I/O readiness.
//!
//! A proposal's answer is produced on the Raft runtime's thread and awaited by a task on the
//! API runtime (tokio multi-thread, one worker per core). A waker called from a thread outside
//! that runtime queues the task globally and unparks one worker, which starts out "searching";
//! when it finds the task it is the last searching worker, and tokio then wakes a second worker
//! in case more work follows (`transition_worker_from_searching`). For a lone writer that second
//! wake-up costs a system call on the path of every write, and the second worker's brief run
//! lands on the CPU the Raft thread is about to use.
//!
//! Readiness of a file descriptor reaches a runtime differently: the worker parked on the I/O
//! driver returns from `epoll_wait` and schedules the waiting task on its own queue, without
//! searching and without waking anyone else. So the wakers handed to the Raft side here
//! ([`WakeRelay::relayed`]) do not wake their task directly: they queue its waker and write to
//! an eventfd that a relay task on the API runtime waits on; that task, woken by the driver,
//! calls the queued wakers from inside the runtime. A write to the eventfd is one system call,
//! as the direct wake-up's own unpark was. When every worker is busy, the answer is seen at a
//! worker's next turn of the reactor, as a socket's data would be.
//!
//! The relay needs a runtime with its I/O driver enabled, as sockets do (every runtime litek8s
//! builds has it). If the eventfd cannot be made or registered, callers get no relay and their
//! futures wake their tasks directly. Once the relay stops, its wakers wake directly too, so no
//! wake-up is ever lost.

use std::future::Future;
use std::os::fd::{AsRawFd, RawFd};
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll, Wake, Waker};

use nix::sys::eventfd::{EfdFlags, EventFd};
use parking_lot::Mutex;
use tokio::io::unix::AsyncFd;
use tokio::io::Interest;
use tokio::sync::oneshot;

/// What the relay task and its wakers share.
struct Shared {
    /// Wakers called from outside the runtime, waiting for the relay task.
    queued: Mutex<Vec<Waker>>,
    /// The eventfd has been written since the relay task last emptied `queued`.
    rung: AtomicBool,
    /// False once the relay task has stopped: wakers then wake their tasks directly.
    running: AtomicBool,
    /// Wakers the relay task has called (read by the tests).
    relayed: AtomicU64,
    doorbell: EventFd,
}

impl AsRawFd for Shared {
    fn as_raw_fd(&self) -> RawFd {
        self.doorbell.as_raw_fd()
    }
}

impl Shared {
    /// Wakes every queued waker; returns how many there were.
    fn wake_queued(&self) -> usize {
        let queued = std::mem::take(&mut *self.queued.lock());
        let count = queued.len();
        for waker in queued {
            waker.wake();
        }
        count
    }
}

/// The handle that wraps futures; dropping it stops the relay task.
pub struct WakeRelay {
    shared: Arc<Shared>,
    _stop: oneshot::Sender<()>,
}

impl WakeRelay {
    /// Starts the relay task on the current tokio runtime, which must have its I/O driver
    /// enabled. `None` when the eventfd cannot be made or registered: then wake-ups go direct.
    pub fn start() -> Option<WakeRelay> {
        let doorbell = match EventFd::from_flags(EfdFlags::EFD_NONBLOCK | EfdFlags::EFD_CLOEXEC) {
            Ok(fd) => fd,
            Err(e) => {
                tracing::warn!("no wake relay (eventfd: {e}); waking tasks directly");
                return None;
            }
        };
        let shared = Arc::new(Shared {
            queued: Mutex::new(Vec::new()),
            rung: AtomicBool::new(false),
            running: AtomicBool::new(true),
            relayed: AtomicU64::new(0),
            doorbell,
        });
        // SAFETY: the descriptor is `doorbell`'s, an `OwnedFd` inside `Shared` that the Arc held
        // by the AsyncFd keeps open, and `as_raw_fd` always returns that same descriptor.
        let registered =
            unsafe { AsyncFd::register_with_interest(shared.clone(), Interest::READABLE) };
        let readiness = match registered {
            Ok(readiness) => readiness,
            Err(e) => {
                tracing::warn!(
                    "no wake relay (registering its eventfd: {e}); waking tasks directly"
                );
                return None;
            }
        };
        let (stop, stopped) = oneshot::channel();
        tokio::spawn(relay(readiness, stopped));
        Some(WakeRelay {
            shared,
            _stop: stop,
        })
    }

    /// `future`, polled so that a wake-up from another thread reaches its task through the
    /// relay.
    pub fn relayed<F: Future + Unpin>(&self, future: F) -> Relayed<F> {
        Relayed {
            future,
            shared: self.shared.clone(),
            waker: None,
        }
    }
}

/// The relay task: waits for the eventfd, then wakes what was queued.
async fn relay(readiness: AsyncFd<Arc<Shared>>, mut stopped: oneshot::Receiver<()>) {
    loop {
        tokio::select! {
            biased;
            _ = &mut stopped => break,
            ready = readiness.readable() => match ready {
                Ok(mut guard) => {
                    let shared = readiness.get_ref();
                    // Resets the counter; EAGAIN (already zero) is harmless.
                    let _ = shared.doorbell.read();
                    guard.clear_ready();
                    // A waker queued from here on rings again; one queued before is taken
                    // below.
                    shared.rung.store(false, Ordering::SeqCst);
                    let woken = shared.wake_queued();
                    shared.relayed.fetch_add(woken as u64, Ordering::Relaxed);
                }
                Err(e) => {
                    tracing::warn!("wake relay stopped (waiting on its eventfd: {e}); waking tasks directly");
                    break;
                }
            },
        }
    }
    let shared = readiness.get_ref();
    shared.running.store(false, Ordering::SeqCst);
    let _ = shared.wake_queued();
}

/// A task's waker as handed to other threads: it queues the task's own waker and rings the
/// relay.
struct RelayedWaker {
    task: Waker,
    shared: Arc<Shared>,
}

impl Wake for RelayedWaker {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        let shared = &self.shared;
        if !shared.running.load(Ordering::SeqCst) {
            self.task.wake_by_ref();
            return;
        }
        shared.queued.lock().push(self.task.clone());
        if !shared.rung.swap(true, Ordering::SeqCst) && shared.doorbell.write(1).is_err() {
            // Only a counter at its maximum refuses a write, which one-at-a-time writes
            // cannot reach; wake directly all the same rather than lose the wake-up.
            let _ = shared.wake_queued();
        }
        // The relay may have stopped after the check above and emptied the queue before
        // this waker was in it.
        if !shared.running.load(Ordering::SeqCst) {
            let _ = shared.wake_queued();
        }
    }
}

/// A future whose wake-ups go through a [`WakeRelay`].
pub struct Relayed<F> {
    future: F,
    shared: Arc<Shared>,
    /// The relayed waker made for the task's current waker, reused while the task's waker
    /// stays the same.
    waker: Option<Arc<RelayedWaker>>,
}

impl<F: Future + Unpin> Future for Relayed<F> {
    type Output = F::Output;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        let this = self.get_mut();
        let task = cx.waker();
        let relayed = match &this.waker {
            Some(relayed) if relayed.task.will_wake(task) => relayed.clone(),
            _ => {
                let relayed = Arc::new(RelayedWaker {
                    task: task.clone(),
                    shared: this.shared.clone(),
                });
                this.waker = Some(relayed.clone());
                relayed
            }
        };
        Pin::new(&mut this.future).poll(&mut Context::from_waker(&Waker::from(relayed)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicUsize;
    use std::time::{Duration, Instant};

    /// Counts wake-ups of a pretend task. The tests poll by hand with it rather than await in a
    /// task, because a timeout around an await would poll again when it fires and so hide a
    /// lost wake-up.
    struct CountingWaker(AtomicUsize);

    impl Wake for CountingWaker {
        fn wake(self: Arc<Self>) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    /// A relayed wait on a oneshot, polled once (so the sender holds a relayed waker).
    struct Waiting {
        woken: Arc<CountingWaker>,
        future: Relayed<oneshot::Receiver<u32>>,
    }

    impl Waiting {
        fn new(relay: &WakeRelay) -> (oneshot::Sender<u32>, Waiting) {
            let (tx, rx) = oneshot::channel();
            let mut waiting = Waiting {
                woken: Arc::new(CountingWaker(AtomicUsize::new(0))),
                future: relay.relayed(rx),
            };
            assert!(waiting.poll().is_pending());
            (tx, waiting)
        }

        fn poll(&mut self) -> Poll<Result<u32, oneshot::error::RecvError>> {
            let waker = Waker::from(self.woken.clone());
            Pin::new(&mut self.future).poll(&mut Context::from_waker(&waker))
        }

        fn wake_ups(&self) -> usize {
            self.woken.0.load(Ordering::SeqCst)
        }
    }

    /// Waits (without polling anything) until `done` holds. Yields first: polling a oneshot
    /// by hand spends the test task's tokio budget, which this renews.
    async fn until(what: &str, done: impl Fn() -> bool) {
        tokio::task::yield_now().await;
        let deadline = Instant::now() + Duration::from_secs(10);
        while !done() {
            assert!(Instant::now() < deadline, "{what}");
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_wake_up_from_another_thread_arrives_through_the_relay() {
        let relay = WakeRelay::start().expect("relay");
        for i in 0..200 {
            let (tx, mut waiting) = Waiting::new(&relay);
            std::thread::spawn(move || tx.send(i))
                .join()
                .expect("thread")
                .expect("send");
            until("the relayed wake-up was lost", || waiting.wake_ups() == 1).await;
            assert_eq!(waiting.poll(), Poll::Ready(Ok(i)));
        }
        // Each wake-up went through the queue and the eventfd, not around them.
        assert_eq!(relay.shared.relayed.load(Ordering::Relaxed), 200);
        assert!(relay.shared.queued.lock().is_empty());
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn many_concurrent_wake_ups_all_arrive() {
        let relay = WakeRelay::start().expect("relay");
        let (senders, mut waits): (Vec<_>, Vec<_>) = (0..500).map(|_| Waiting::new(&relay)).unzip();
        let threads: Vec<_> = senders
            .into_iter()
            .enumerate()
            .map(|(i, tx)| std::thread::spawn(move || tx.send(i as u32)))
            .collect();
        for thread in threads {
            thread.join().expect("thread").expect("send");
        }
        until("a relayed wake-up was lost", || {
            waits.iter().all(|w| w.wake_ups() == 1)
        })
        .await;
        for (i, waiting) in waits.iter_mut().enumerate() {
            tokio::task::yield_now().await;
            assert_eq!(waiting.poll(), Poll::Ready(Ok(i as u32)));
        }
        assert_eq!(relay.shared.relayed.load(Ordering::Relaxed), 500);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn after_the_relay_stops_wakers_wake_directly() {
        let relay = WakeRelay::start().expect("relay");
        let shared = relay.shared.clone();
        let (tx, mut waiting) = Waiting::new(&relay);
        drop(relay);
        until("the relay task did not stop", || {
            !shared.running.load(Ordering::SeqCst)
        })
        .await;
        std::thread::spawn(move || tx.send(7))
            .join()
            .expect("thread")
            .expect("send");
        // Woken by the sending thread itself, before it returned.
        assert_eq!(waiting.wake_ups(), 1);
        assert_eq!(waiting.poll(), Poll::Ready(Ok(7)));
        assert_eq!(shared.relayed.load(Ordering::Relaxed), 0);
    }
}
