//! Frees values on a background thread instead of the caller's.
//!
//! The Raft thread applies every write of the cluster one after another, and freeing a
//! write's object (a tree of maps and strings allocated by the API thread that parsed it) is a
//! measurable part of that. Objects the store no longer needs are queued here and freed by a
//! thread of their own. If that thread cannot be started, values are freed in place.
//!
//! Handing garbage over costs the caller no system call while the freeing thread is awake:
//! that thread drains the queue, sleeps [`COLLECT_EVERY`] and drains again, and only once it
//! finds the queue empty does it wait to be woken. So under a steady stream of writes the Raft
//! thread never wakes another thread to free memory (a futex wake and, on a virtual machine, an
//! interrupt to another CPU per write); at most one collection period of garbage waits.

use std::sync::{Condvar, Mutex, MutexGuard, OnceLock};
use std::time::Duration;

type Garbage = Box<dyn Send>;

/// How long the freeing thread sleeps between two collections while garbage keeps coming.
const COLLECT_EVERY: Duration = Duration::from_millis(1);

#[derive(Default)]
struct Queue {
    items: Vec<Garbage>,
    /// The freeing thread found the queue empty and waits on the condition variable: the next
    /// value must wake it.
    collector_waiting: bool,
}

struct Collector {
    queue: Mutex<Queue>,
    wake: Condvar,
}

impl Collector {
    /// A poisoned lock still guards a usable queue: nothing is dropped while it is held, and a
    /// push or a take leaves the queue whole.
    fn lock(&self) -> MutexGuard<'_, Queue> {
        self.queue
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn run(&self) {
        loop {
            let items = {
                let mut queue = self.lock();
                while queue.items.is_empty() {
                    queue.collector_waiting = true;
                    queue = self
                        .wake
                        .wait(queue)
                        .unwrap_or_else(|poisoned| poisoned.into_inner());
                }
                queue.collector_waiting = false;
                std::mem::take(&mut queue.items)
            };
            // A panicking destructor must not stop the thread, or garbage would pile up.
            let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| drop(items)));
            std::thread::sleep(COLLECT_EVERY);
        }
    }

    /// Starts a freeing thread; `None` if the thread cannot be started.
    fn start() -> Option<&'static Collector> {
        let collector: &'static Collector = Box::leak(Box::new(Collector {
            queue: Mutex::new(Queue::default()),
            wake: Condvar::new(),
        }));
        std::thread::Builder::new()
            .name("litek8s-free".into())
            .spawn(move || collector.run())
            .ok()
            .map(|_| collector)
    }

    /// Queues `garbage` for the freeing thread; wakes it only if it waits for work. Returns
    /// whether it did.
    fn hand_over(&self, garbage: Garbage) -> bool {
        let wake = {
            let mut queue = self.lock();
            queue.items.push(garbage);
            std::mem::take(&mut queue.collector_waiting)
        };
        if wake {
            self.wake.notify_one();
        }
        wake
    }
}

/// Frees `value` on the background thread (or here, if there is none).
pub fn drop_later<T: Send + 'static>(value: T) {
    static COLLECTOR: OnceLock<Option<&'static Collector>> = OnceLock::new();
    match COLLECTOR.get_or_init(Collector::start) {
        Some(collector) => {
            collector.hand_over(Box::new(value));
        }
        None => drop(value),
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;
    use std::time::{Duration, Instant};

    use super::*;

    /// Counts its drops, and those that happened on the thread that created it.
    struct Counted {
        dropped: Arc<AtomicUsize>,
        on_creator: Arc<AtomicUsize>,
        creator: std::thread::ThreadId,
    }

    impl Drop for Counted {
        fn drop(&mut self) {
            self.dropped.fetch_add(1, Ordering::SeqCst);
            if std::thread::current().id() == self.creator {
                self.on_creator.fetch_add(1, Ordering::SeqCst);
            }
        }
    }

    #[test]
    fn every_value_is_dropped_off_the_calling_thread() {
        let dropped = Arc::new(AtomicUsize::new(0));
        let on_creator = Arc::new(AtomicUsize::new(0));
        let counted = || Counted {
            dropped: dropped.clone(),
            on_creator: on_creator.clone(),
            creator: std::thread::current().id(),
        };
        for _ in 0..100 {
            drop_later(vec![counted(), counted()]);
        }
        assert_eq!(wait_for(&dropped, 200), 200);
        assert_eq!(
            on_creator.load(Ordering::SeqCst),
            0,
            "freed on the caller's thread"
        );
    }

    /// Waits up to 10 s for `counter` to reach `expected`.
    fn wait_for(counter: &AtomicUsize, expected: usize) -> usize {
        let deadline = Instant::now() + Duration::from_secs(10);
        while counter.load(Ordering::SeqCst) < expected && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(1));
        }
        counter.load(Ordering::SeqCst)
    }

    #[test]
    fn a_value_handed_over_while_the_thread_waits_wakes_it() {
        let collector = Collector::start().expect("freeing thread");
        let dropped = Arc::new(AtomicUsize::new(0));
        let counted = || Counted {
            dropped: dropped.clone(),
            on_creator: Arc::new(AtomicUsize::new(0)),
            creator: std::thread::current().id(),
        };
        for round in 1..=3 {
            let deadline = Instant::now() + Duration::from_secs(10);
            while !collector.lock().collector_waiting && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(1));
            }
            assert!(
                collector.lock().collector_waiting,
                "the thread never waited"
            );
            assert!(collector.hand_over(Box::new(counted())), "no wake-up");
            assert_eq!(
                wait_for(&dropped, round),
                round,
                "not freed after a wake-up"
            );
        }
    }

    #[test]
    fn a_steady_stream_of_values_costs_few_wake_ups() {
        let collector = Collector::start().expect("freeing thread");
        let dropped = Arc::new(AtomicUsize::new(0));
        let values = 1_000;
        let wakes = (0..values)
            .filter(|_| {
                collector.hand_over(Box::new(Counted {
                    dropped: dropped.clone(),
                    on_creator: Arc::new(AtomicUsize::new(0)),
                    creator: std::thread::current().id(),
                }))
            })
            .count();
        // The thread sleeps a collection period between two looks at the queue: only a
        // value handed over while it waits wakes it, not one per value.
        assert!(wakes < values / 2, "{wakes} wake-ups for {values} values");
        assert_eq!(wait_for(&dropped, values), values);
    }
}
