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
    /// Wakers the relay task has called (for tests and diagnosis).
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
    waker: Option<(Waker, Waker)>,
}

impl<F: Future + Unpin> Future for Relayed<F> {
    type Output = F::Output;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        let this = self.get_mut();
        let task = cx.waker();
        let relayed = match &this.waker {
            Some((for_task, relayed)) if for_task.will_wake(task) => relayed.clone(),
            _ => {
                let relayed = Waker::from(Arc::new(RelayedWaker {
                    task: task.clone(),
                    shared: this.shared.clone(),
                }));
                this.waker = Some((task.clone(), relayed.clone()));
                relayed
            }
        };
        Pin::new(&mut this.future).poll(&mut Context::from_waker(&relayed))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicUsize;
    use std::time::Duration;

    /// Completes a oneshot from a plain thread, as the Raft thread does.
    fn answer_from_another_thread(value: u32) -> oneshot::Receiver<u32> {
        let (tx, rx) = oneshot::channel();
        std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(5));
            let _ = tx.send(value);
        });
        rx
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_wake_up_from_another_thread_arrives_through_the_relay() {
        let relay = WakeRelay::start().expect("relay");
        for i in 0..200 {
            let (tx, rx) = oneshot::channel();
            let mut answer = relay.relayed(rx);
            // Polled once before the answer exists: the answer must wake the task.
            assert!(futures::poll!(&mut answer).is_pending());
            std::thread::spawn(move || tx.send(i));
            let got = tokio::time::timeout(Duration::from_secs(5), answer)
                .await
                .expect("the relayed wake-up was lost")
                .expect("answer");
            assert_eq!(got, i);
        }
        // Each wake-up went through the queue and the eventfd, not around them.
        assert_eq!(relay.shared.relayed.load(Ordering::Relaxed), 200);
        assert!(relay.shared.queued.lock().is_empty());
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn many_concurrent_waits_all_complete() {
        let relay = Arc::new(WakeRelay::start().expect("relay"));
        let done = Arc::new(AtomicUsize::new(0));
        let mut tasks = Vec::new();
        for i in 0..500u32 {
            let (relay, done) = (relay.clone(), done.clone());
            tasks.push(tokio::spawn(async move {
                let got = relay.relayed(answer_from_another_thread(i)).await;
                assert_eq!(got.expect("answer"), i);
                done.fetch_add(1, Ordering::SeqCst);
            }));
        }
        for task in tasks {
            tokio::time::timeout(Duration::from_secs(10), task)
                .await
                .expect("a relayed wake-up was lost")
                .expect("task");
        }
        assert_eq!(done.load(Ordering::SeqCst), 500);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn after_the_relay_stops_wakers_wake_directly() {
        let relay = WakeRelay::start().expect("relay");
        let shared = relay.shared.clone();
        let (tx, rx) = oneshot::channel::<u32>();
        let waiting = tokio::spawn(relay.relayed(rx));
        // Let the task poll once (and hand out its relayed waker), then stop the relay.
        tokio::time::sleep(Duration::from_millis(20)).await;
        drop(relay);
        tokio::time::timeout(Duration::from_secs(5), async {
            while shared.running.load(Ordering::SeqCst) {
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
        })
        .await
        .expect("the relay task did not stop");
        std::thread::spawn(move || tx.send(7))
            .join()
            .expect("thread")
            .expect("send");
        let got = tokio::time::timeout(Duration::from_secs(5), waiting)
            .await
            .expect("a wake-up after the relay stopped was lost")
            .expect("task");
        assert_eq!(got.expect("answer"), 7);
    }
}
