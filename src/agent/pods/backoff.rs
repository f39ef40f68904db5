//! kubelet's back-off (client-go's `flowcontrol.Backoff`), used twice: restarting a
//! container that keeps exiting (CrashLoopBackOff) and pulling an image that keeps failing
//! (ImagePullBackOff). Both start at 10 s and double up to 5 min.
//!
//! Per key, an entry holds the current delay and when it was last updated:
//! - [`Backoff::next`] at an event: a key seen for the first time, or not updated for twice
//!   the maximum (10 min: a container that ran that long before it exited again), starts at
//!   the initial delay; otherwise the delay doubles, up to the maximum.
//! - a container restart waits while `now - finished_at < delay`
//!   ([`Backoff::remaining_since`] with the container's exit time); an image pull while
//!   `now - last update < delay` ([`Backoff::remaining_since_update`]).
//!
//! So a crashing container restarts at once the first time, then after 10 s, 20 s, 40 s …
//! 300 s, as kubelet restarts it. Each pod worker keeps its own, so a pod's entries go with
//! it.

use std::collections::HashMap;
use std::hash::Hash;
use std::time::{Duration, Instant};

/// kubelet's initial restart and pull back-off.
pub const INITIAL: Duration = Duration::from_secs(10);
/// kubelet's `MaxContainerBackOff` (and image pull maximum).
pub const MAX: Duration = Duration::from_secs(300);

#[derive(Debug, Clone, Copy)]
struct Entry {
    delay: Duration,
    updated: Instant,
}

/// Back-off delays by key.
#[derive(Debug)]
pub struct Backoff<K> {
    initial: Duration,
    max: Duration,
    entries: HashMap<K, Entry>,
}

impl<K: Eq + Hash + Clone> Backoff<K> {
    pub fn new(initial: Duration, max: Duration) -> Self {
        Backoff {
            initial,
            max,
            entries: HashMap::new(),
        }
    }

    /// kubelet's delays.
    pub fn kubelet() -> Self {
        Backoff::new(INITIAL, MAX)
    }

    fn expired(&self, entry: &Entry, at: Instant) -> bool {
        at.saturating_duration_since(entry.updated) > self.max * 2
    }

    /// Records an event at `at` and returns the delay now in force for `key`.
    pub fn next(&mut self, key: &K, at: Instant) -> Duration {
        let delay = match self.entries.get(key) {
            Some(e) if !self.expired(e, at) => (e.delay * 2).min(self.max),
            _ => self.initial,
        };
        self.entries
            .insert(key.clone(), Entry { delay, updated: at });
        delay
    }

    /// The delay in force for `key`, if any.
    pub fn delay(&self, key: &K) -> Option<Duration> {
        self.entries.get(key).map(|e| e.delay)
    }

    /// How long is left of `key`'s delay counted from `since` (a container's exit), at
    /// `now`; `None` when the delay has passed or there is none.
    pub fn remaining_since(&self, key: &K, since: Instant, now: Instant) -> Option<Duration> {
        let e = self.entries.get(key)?;
        if self.expired(e, now) {
            return None;
        }
        let passed = now.saturating_duration_since(since);
        (passed < e.delay).then(|| e.delay - passed)
    }

    /// How long is left of `key`'s delay counted from its last update, at `now`.
    pub fn remaining_since_update(&self, key: &K, now: Instant) -> Option<Duration> {
        let updated = self.entries.get(key)?.updated;
        self.remaining_since(key, updated, now)
    }

    /// Forgets `key` (the image was pulled).
    pub fn reset(&mut self, key: &K) {
        self.entries.remove(key);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn delays_double_to_the_maximum_and_reset_after_a_long_run() {
        let mut b: Backoff<&str> = Backoff::kubelet();
        let t0 = Instant::now();
        let s = Duration::from_secs;
        // First exit: no entry, so no wait; the event starts the delay at 10 s.
        assert_eq!(b.remaining_since(&"c", t0, t0), None);
        assert_eq!(b.next(&"c", t0), s(10));
        // Exits again 1 s later: waits 10 s from that exit.
        let t1 = t0 + s(1);
        assert_eq!(b.remaining_since(&"c", t1, t1 + s(3)), Some(s(7)));
        assert_eq!(b.remaining_since(&"c", t1, t1 + s(10)), None);
        let mut at = t1 + s(10);
        let mut delays = vec![];
        for _ in 0..7 {
            delays.push(b.next(&"c", at).as_secs());
            at += s(1);
        }
        assert_eq!(delays, [20, 40, 80, 160, 300, 300, 300]);
        // A run longer than twice the maximum starts over.
        let late = at + s(601);
        assert_eq!(b.remaining_since(&"c", late, late), None);
        assert_eq!(b.next(&"c", late), s(10));
    }

    #[test]
    fn pull_backoff_counts_from_the_last_failure() {
        let mut b: Backoff<String> = Backoff::kubelet();
        let t0 = Instant::now();
        let key = "uid_busybox".to_string();
        assert_eq!(b.remaining_since_update(&key, t0), None);
        b.next(&key, t0);
        assert_eq!(
            b.remaining_since_update(&key, t0 + Duration::from_secs(4)),
            Some(Duration::from_secs(6))
        );
        assert_eq!(
            b.remaining_since_update(&key, t0 + Duration::from_secs(10)),
            None
        );
        b.reset(&key);
        assert_eq!(b.delay(&key), None);
    }
}
