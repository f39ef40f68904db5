//! The values (ClusterIPs, NodePorts) held by writes in flight, shared by the allocators.
//!
//! An allocator checks a candidate against two records: the store (what applied Services
//! use, computed by the caller from a snapshot) and this set (what writes not yet applied
//! hold). A write releases its value once it is applied, and from then on the store is the
//! record. A caller's snapshot may predate that, so a value released after the caller's
//! snapshot is counted as taken as well. To know which ones those are, the caller takes an
//! [`AsOf`] mark before its snapshot, and this set remembers the release mark of recently
//! released values. Without this, two concurrent creates could be handed the same port.

use std::collections::{HashMap, HashSet, VecDeque};
use std::hash::Hash;

use parking_lot::{Mutex, MutexGuard};

/// Releases remembered; a caller whose snapshot is older than this many releases is told
/// to try again.
const REMEMBERED: usize = 4096;

/// A point in the release history, taken before the store snapshot it goes with.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct AsOf(u64);

/// Values held by writes in flight, and recent releases.
pub struct InFlight<T> {
    inner: Mutex<Inner<T>>,
}

struct Inner<T> {
    pending: HashSet<T>,
    /// Release count so far; each release gets the next number.
    releases: u64,
    /// The release number of each recently released value, and their order for forgetting.
    released_at: HashMap<T, u64>,
    order: VecDeque<(u64, T)>,
}

impl<T> Default for InFlight<T> {
    fn default() -> Self {
        InFlight {
            inner: Mutex::new(Inner {
                pending: HashSet::new(),
                releases: 0,
                released_at: HashMap::new(),
                order: VecDeque::new(),
            }),
        }
    }
}

/// The set locked for choosing values against one snapshot.
pub struct Choosing<'a, T> {
    inner: MutexGuard<'a, Inner<T>>,
    as_of: AsOf,
}

/// The snapshot is older than the releases remembered: take a new one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stale;

impl<T: Hash + Eq + Copy> InFlight<T> {
    /// The mark to take before reading the store for the values in use.
    pub fn as_of(&self) -> AsOf {
        AsOf(self.inner.lock().releases)
    }

    /// Locks the set for choosing against a snapshot taken after `as_of`.
    pub fn choose(&self, as_of: AsOf) -> Result<Choosing<'_, T>, Stale> {
        let inner = self.inner.lock();
        let oldest_known = inner.releases - inner.order.len() as u64;
        if as_of.0 < oldest_known {
            return Err(Stale);
        }
        Ok(Choosing { inner, as_of })
    }

    /// A write holding `value` is done (applied, or failed).
    pub fn release(&self, value: T) {
        let mut inner = self.inner.lock();
        if !inner.pending.remove(&value) {
            return;
        }
        inner.releases += 1;
        let at = inner.releases;
        inner.released_at.insert(value, at);
        inner.order.push_back((at, value));
        while inner.order.len() > REMEMBERED {
            if let Some((at, old)) = inner.order.pop_front() {
                if inner.released_at.get(&old) == Some(&at) {
                    inner.released_at.remove(&old);
                }
            }
        }
    }
}

impl<T: Hash + Eq + Copy> Choosing<'_, T> {
    /// Holds `value` unless the snapshot shows it in use (`used`), a write in flight holds
    /// it, or it was released after the snapshot was taken.
    pub fn hold(&mut self, value: T, used: &HashSet<T>) -> bool {
        let released_since = self
            .inner
            .released_at
            .get(&value)
            .is_some_and(|at| *at > self.as_of.0);
        if used.contains(&value) || released_since || self.inner.pending.contains(&value) {
            return false;
        }
        self.inner.pending.insert(value);
        true
    }

    /// Holds the first of `candidates` that [`hold`](Self::hold) accepts.
    pub fn hold_first(
        &mut self,
        candidates: impl IntoIterator<Item = T>,
        used: &HashSet<T>,
    ) -> Option<T> {
        candidates.into_iter().find(|value| self.hold(*value, used))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_value_released_after_the_snapshot_is_not_handed_out_again() {
        let set: InFlight<u16> = InFlight::default();
        let before = set.as_of();
        assert!(set.choose(before).unwrap().hold(30000, &HashSet::new()));
        // Another caller's snapshot predates the write's application and release.
        let stale_snapshot_mark = set.as_of();
        let used_in_stale_snapshot = HashSet::new();
        set.release(30000);
        assert!(!set
            .choose(stale_snapshot_mark)
            .unwrap()
            .hold(30000, &used_in_stale_snapshot));
        // A snapshot taken after the release shows the port in the store, or it is free.
        let fresh = set.as_of();
        assert!(set.choose(fresh).unwrap().hold(30000, &HashSet::new()));
        assert!(!set.choose(fresh).unwrap().hold(30000, &HashSet::new()));
    }

    #[test]
    fn in_use_and_in_flight_values_are_refused() {
        let set: InFlight<u16> = InFlight::default();
        let mark = set.as_of();
        let used: HashSet<u16> = [1].into();
        let mut choosing = set.choose(mark).unwrap();
        assert!(!choosing.hold(1, &used));
        assert!(choosing.hold(2, &used));
        assert!(!choosing.hold(2, &used));
    }

    #[test]
    fn a_snapshot_older_than_the_remembered_releases_is_stale() {
        let set: InFlight<u32> = InFlight::default();
        let old = set.as_of();
        for v in 0..(REMEMBERED as u32 + 1) {
            let mark = set.as_of();
            assert!(set.choose(mark).unwrap().hold(v, &HashSet::new()));
            set.release(v);
        }
        assert!(matches!(set.choose(old), Err(Stale)));
        assert!(set.choose(set.as_of()).is_ok());
    }
}
