//! The work queue between informers and a controller's workers, with client-go's workqueue
//! semantics:
//! - a key is queued at most once however often it is added (`dirty`), so a burst of events
//!   for one object costs one reconcile;
//! - a key being processed is never handed to a second worker: added again meanwhile, it is
//!   queued once its worker calls `done`;
//! - a failed key comes back after a per-key exponential delay (`add_rate_limited`: 5 ms
//!   doubling up to a cap), reset by `forget` after a success;
//! - `add_after` queues a key once a delay has passed (a Job's deadline, a CronJob's next
//!   time, a Deployment's progress deadline).
//!
//! The queue's memory is bounded by the number of distinct keys: the delayed set keeps one
//! entry per key (the earliest time asked for).

use std::collections::{BTreeSet, HashMap, HashSet, VecDeque};
use std::hash::Hash;
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use tokio::sync::Notify;
use tokio::time::Instant;

/// Delay of the first retry of a failed key.
pub const RETRY_BASE: Duration = Duration::from_millis(5);
/// The longest delay between retries of a key that keeps failing.
pub const RETRY_CAP: Duration = Duration::from_secs(300);

/// A deduplicating, rate-limited queue of keys. Cheap to clone (shared).
pub struct WorkQueue<K> {
    inner: Arc<Inner<K>>,
}

impl<K> Clone for WorkQueue<K> {
    fn clone(&self) -> Self {
        WorkQueue {
            inner: self.inner.clone(),
        }
    }
}

struct Inner<K> {
    state: Mutex<State<K>>,
    /// State a controller's `register` hands to its `new` (both get this queue).
    context: std::sync::OnceLock<Arc<dyn std::any::Any + Send + Sync>>,
    /// Woken when a key becomes ready or the queue shuts down.
    ready: Notify,
    /// Woken when a delayed key is added earlier than the current earliest one.
    delayed_changed: Notify,
    retry_cap: Duration,
}

struct State<K> {
    queue: VecDeque<K>,
    /// Keys waiting in `queue` or to be queued once their processing is done.
    dirty: HashSet<K>,
    processing: HashSet<K>,
    failures: HashMap<K, u32>,
    /// Keys to add later, ordered by time; `due` holds each key's time in `delayed`.
    delayed: BTreeSet<(Instant, u64, K)>,
    due: HashMap<K, (Instant, u64)>,
    /// Tie-breaker for `delayed` entries with the same instant.
    sequence: u64,
    shut_down: bool,
}

impl<K: Clone + Eq + Hash + Ord + Send + 'static> WorkQueue<K> {
    pub fn new() -> WorkQueue<K> {
        WorkQueue::with_retry_cap(RETRY_CAP)
    }

    pub fn with_retry_cap(retry_cap: Duration) -> WorkQueue<K> {
        WorkQueue {
            inner: Arc::new(Inner {
                state: Mutex::new(State {
                    queue: VecDeque::new(),
                    dirty: HashSet::new(),
                    processing: HashSet::new(),
                    failures: HashMap::new(),
                    delayed: BTreeSet::new(),
                    due: HashMap::new(),
                    sequence: 0,
                    shut_down: false,
                }),
                ready: Notify::new(),
                delayed_changed: Notify::new(),
                retry_cap,
                context: std::sync::OnceLock::new(),
            }),
        }
    }

    /// Attaches state built while registering handlers (which must already feed it) for the
    /// controller's construction to take with [`WorkQueue::context`]; set once.
    pub fn set_context<T: std::any::Any + Send + Sync>(&self, value: Arc<T>) {
        let _ = self.inner.context.set(value);
    }

    /// The state attached with [`WorkQueue::set_context`], if it is a `T`.
    pub fn context<T: std::any::Any + Send + Sync>(&self) -> Option<Arc<T>> {
        self.inner.context.get()?.clone().downcast::<T>().ok()
    }

    /// Queues `key` unless it is already waiting.
    pub fn add(&self, key: K) {
        let mut state = self.inner.state.lock();
        if state.shut_down || state.dirty.contains(&key) {
            return;
        }
        state.dirty.insert(key.clone());
        if !state.processing.contains(&key) {
            state.queue.push_back(key);
            drop(state);
            self.inner.ready.notify_one();
        }
    }

    /// Queues `key` once `delay` has passed (at the earliest time asked for, if asked twice).
    pub fn add_after(&self, key: K, delay: Duration) {
        if delay.is_zero() {
            return self.add(key);
        }
        let at = Instant::now() + delay;
        let mut state = self.inner.state.lock();
        if state.shut_down {
            return;
        }
        if let Some(&(existing, seq)) = state.due.get(&key) {
            if existing <= at {
                return;
            }
            state.delayed.remove(&(existing, seq, key.clone()));
        }
        state.sequence += 1;
        let seq = state.sequence;
        let earliest = state.delayed.first().map(|(t, _, _)| *t);
        state.delayed.insert((at, seq, key.clone()));
        state.due.insert(key, (at, seq));
        drop(state);
        if earliest.is_none_or(|t| at < t) {
            self.inner.delayed_changed.notify_one();
        }
    }

    /// Queues `key` after its next retry delay (5 ms, doubling per failure up to the cap).
    pub fn add_rate_limited(&self, key: K) {
        let failures = {
            let mut state = self.inner.state.lock();
            let n = state.failures.entry(key.clone()).or_insert(0);
            *n = n.saturating_add(1);
            *n
        };
        self.add_after(key, retry_delay(failures, self.inner.retry_cap));
    }

    /// How many times `key` failed since its last `forget`.
    pub fn failures(&self, key: &K) -> u32 {
        self.inner
            .state
            .lock()
            .failures
            .get(key)
            .copied()
            .unwrap_or(0)
    }

    /// Clears `key`'s failure count (after a successful reconcile).
    pub fn forget(&self, key: &K) {
        self.inner.state.lock().failures.remove(key);
    }

    /// The next key to process, once one is ready; `None` after `shut_down`. The caller must
    /// call `done` with it when finished.
    pub async fn get(&self) -> Option<K> {
        loop {
            let notified = self.inner.ready.notified();
            {
                let mut state = self.inner.state.lock();
                if state.shut_down {
                    return None;
                }
                if let Some(key) = state.queue.pop_front() {
                    state.dirty.remove(&key);
                    state.processing.insert(key.clone());
                    // Another worker may be waiting and more keys may be queued.
                    if !state.queue.is_empty() {
                        self.inner.ready.notify_one();
                    }
                    return Some(key);
                }
            }
            notified.await;
        }
    }

    /// Marks `key` processed; it is queued again if it was added meanwhile.
    pub fn done(&self, key: &K) {
        let mut state = self.inner.state.lock();
        state.processing.remove(key);
        if state.dirty.contains(key) && !state.shut_down {
            state.queue.push_back(key.clone());
            drop(state);
            self.inner.ready.notify_one();
        }
    }

    #[cfg(test)]
    /// Keys waiting or being processed (for tests and status).
    pub fn len(&self) -> usize {
        let state = self.inner.state.lock();
        state.queue.len() + state.processing.len()
    }

    #[cfg(test)]
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Wakes every waiting worker with `None`; later adds are ignored.
    pub fn shut_down(&self) {
        self.inner.state.lock().shut_down = true;
        self.inner.ready.notify_waiters();
        self.inner.delayed_changed.notify_waiters();
    }

    /// Moves delayed keys into the queue when their time comes, until `shut_down`. One task
    /// per queue runs this; it sleeps until the earliest delayed key is due.
    pub async fn run_delays(&self) {
        loop {
            let changed = self.inner.delayed_changed.notified();
            let next = {
                let mut state = self.inner.state.lock();
                if state.shut_down {
                    return;
                }
                let now = Instant::now();
                let mut due = Vec::new();
                while let Some((at, _, _)) = state.delayed.first() {
                    if *at > now {
                        break;
                    }
                    if let Some((_, _, key)) = state.delayed.pop_first() {
                        state.due.remove(&key);
                        due.push(key);
                    }
                }
                let next = state.delayed.first().map(|(at, _, _)| *at);
                drop(state);
                for key in due {
                    self.add(key);
                }
                next
            };
            match next {
                Some(at) => {
                    tokio::select! {
                        _ = tokio::time::sleep_until(at) => {}
                        _ = changed => {}
                    }
                }
                None => changed.await,
            }
        }
    }
}

impl<K: Clone + Eq + Hash + Ord + Send + 'static> Default for WorkQueue<K> {
    fn default() -> Self {
        WorkQueue::new()
    }
}

/// The delay before retry number `failures` (1-based).
pub fn retry_delay(failures: u32, cap: Duration) -> Duration {
    let exponent = failures.saturating_sub(1).min(31);
    RETRY_BASE
        .checked_mul(1u32 << exponent)
        .unwrap_or(cap)
        .min(cap)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_key_added_twice_is_processed_once() {
        let q = WorkQueue::new();
        q.add("a".to_string());
        q.add("a".to_string());
        q.add("b".to_string());
        assert_eq!(q.get().await.as_deref(), Some("a"));
        assert_eq!(q.get().await.as_deref(), Some("b"));
        assert_eq!(q.inner.state.lock().queue.len(), 0);
    }

    #[tokio::test]
    async fn a_key_added_while_processing_waits_for_done() {
        let q = WorkQueue::new();
        q.add(1u32);
        let k = q.get().await.unwrap();
        q.add(1);
        // Not handed out again while it is processed.
        assert!(q.inner.state.lock().queue.is_empty());
        q.done(&k);
        assert_eq!(q.get().await, Some(1));
        q.done(&1);
        assert!(q.is_empty());
    }

    #[test]
    fn retry_delays_double_up_to_the_cap() {
        let cap = Duration::from_secs(300);
        assert_eq!(retry_delay(1, cap), Duration::from_millis(5));
        assert_eq!(retry_delay(2, cap), Duration::from_millis(10));
        assert_eq!(retry_delay(11, cap), Duration::from_millis(5120));
        assert_eq!(retry_delay(40, cap), cap);
    }

    #[tokio::test(start_paused = true)]
    async fn delayed_keys_arrive_when_due_earliest_first() {
        let q = WorkQueue::new();
        let runner = {
            let q = q.clone();
            tokio::spawn(async move { q.run_delays().await })
        };
        q.add_after("late".to_string(), Duration::from_secs(10));
        q.add_after("soon".to_string(), Duration::from_secs(1));
        // Asking again for a later time keeps the earlier one.
        q.add_after("soon".to_string(), Duration::from_secs(30));
        let start = Instant::now();
        assert_eq!(q.get().await.as_deref(), Some("soon"));
        assert_eq!(start.elapsed(), Duration::from_secs(1));
        assert_eq!(q.get().await.as_deref(), Some("late"));
        assert_eq!(start.elapsed(), Duration::from_secs(10));
        q.shut_down();
        runner.await.unwrap();
    }

    #[tokio::test(start_paused = true)]
    async fn failures_back_off_and_forget_resets() {
        let q = WorkQueue::new();
        let runner = {
            let q = q.clone();
            tokio::spawn(async move { q.run_delays().await })
        };
        for n in 1..=4u32 {
            let start = Instant::now();
            q.add_rate_limited(7u8);
            let k = q.get().await.unwrap();
            assert_eq!(start.elapsed(), retry_delay(n, RETRY_CAP));
            q.done(&k);
        }
        assert_eq!(q.failures(&7), 4);
        q.forget(&7);
        assert_eq!(q.failures(&7), 0);
        q.shut_down();
        assert_eq!(q.get().await, None);
        runner.await.unwrap();
    }
}
