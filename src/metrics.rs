//! Metric values made of atomics — counters, gauges, histograms — and a fixed-capacity,
//! lock-free map from a packed label key to such a value (the API server's request series). Recording a request is a few atomic operations:
//! find the key's slot (claimed once with a compare-and-swap), then add to its counters.
//! Nothing is ever removed, so a slot once claimed keeps its key for the life of the process;
//! label combinations are bounded (verbs × resources × scopes × codes), and when the table
//! is full an observation is counted as dropped instead of growing anything.

use std::fmt::Write as _;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::OnceLock;

/// kube-apiserver's buckets of `apiserver_request_duration_seconds`, in seconds (also the
/// most a histogram has).
pub const DURATION_BUCKETS: [f64; 23] = [
    0.005, 0.025, 0.05, 0.1, 0.2, 0.4, 0.6, 0.8, 1.0, 1.25, 1.5, 2.0, 3.0, 4.0, 5.0, 6.0, 8.0,
    10.0, 15.0, 20.0, 30.0, 45.0, 60.0,
];

/// Keys are packed labels plus one, so 0 marks a free slot.
pub struct Table<V> {
    keys: Box<[AtomicU64]>,
    /// A claimed slot's value, made when the slot is first recorded to: the tables are sized
    /// for every label combination a busy server may see, and an idle one uses a few dozen
    /// slots (the 1,024 request-duration histograms of 216 bytes each made inline were a
    /// tenth of an idle server's heap).
    values: Box<[OnceLock<Box<V>>]>,
    dropped: AtomicU64,
}

impl<V: Default> Table<V> {
    /// A table of `capacity` slots (rounded up to a power of two).
    pub fn new(capacity: usize) -> Self {
        let capacity = capacity.next_power_of_two();
        Table {
            keys: (0..capacity).map(|_| AtomicU64::new(0)).collect(),
            values: (0..capacity).map(|_| OnceLock::new()).collect(),
            dropped: AtomicU64::new(0),
        }
    }

    /// The value of `key` (which must not be 0), claiming a slot on first use; `None` when the
    /// table is full.
    pub fn slot(&self, key: u64) -> Option<&V> {
        let mask = self.keys.len() - 1;
        let start = (key.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 32) as usize;
        for probe in 0..self.keys.len() {
            let i = (start + probe) & mask;
            let current = self.keys[i].load(Ordering::Acquire);
            if current == key {
                return Some(self.value(i));
            }
            if current == 0 {
                match self.keys[i].compare_exchange(0, key, Ordering::AcqRel, Ordering::Acquire) {
                    Ok(_) => return Some(self.value(i)),
                    Err(won) if won == key => return Some(self.value(i)),
                    Err(_) => continue,
                }
            }
        }
        self.dropped.fetch_add(1, Ordering::Relaxed);
        None
    }

    fn value(&self, slot: usize) -> &V {
        self.values[slot].get_or_init(Box::default)
    }
}

impl<V> Table<V> {
    /// Every claimed key and its value, in slot order.
    pub fn iter(&self) -> impl Iterator<Item = (u64, &V)> {
        self.keys
            .iter()
            .zip(self.values.iter())
            .filter_map(|(k, v)| {
                let key = k.load(Ordering::Acquire);
                // A slot just claimed may not have its value yet: it has nothing recorded.
                Some((key, &**v.get()?)).filter(|_| key != 0)
            })
    }

    /// Observations lost because the table was full.
    pub fn dropped(&self) -> u64 {
        self.dropped.load(Ordering::Relaxed)
    }
}

/// A counter.
#[derive(Default)]
pub struct Counter(pub AtomicU64);

/// A gauge that goes up and down (open watches).
#[derive(Default)]
pub struct Gauge(pub AtomicI64);

/// etcd's buckets of `etcd_disk_wal_fsync_duration_seconds`: 1 ms doubling to 8.192 s.
pub const FSYNC_BUCKETS: [f64; 14] = [
    0.001, 0.002, 0.004, 0.008, 0.016, 0.032, 0.064, 0.128, 0.256, 0.512, 1.024, 2.048, 4.096,
    8.192,
];

/// A histogram of durations over `bounds` (at most as many as [`DURATION_BUCKETS`]): one
/// count per bucket (not cumulative: a recording touches one bucket), the total count and
/// the sum in nanoseconds.
pub struct Histogram {
    bounds: &'static [f64],
    buckets: [AtomicU64; DURATION_BUCKETS.len()],
    count: AtomicU64,
    sum_nanos: AtomicU64,
}

impl Default for Histogram {
    fn default() -> Self {
        Histogram::with_bounds(&DURATION_BUCKETS)
    }
}

impl Histogram {
    /// A histogram over `bounds` (ascending, in seconds); usable in a `static`.
    pub const fn with_bounds(bounds: &'static [f64]) -> Self {
        Histogram {
            bounds,
            buckets: [const { AtomicU64::new(0) }; DURATION_BUCKETS.len()],
            count: AtomicU64::new(0),
            sum_nanos: AtomicU64::new(0),
        }
    }

    /// The bucket bounds, in seconds.
    pub fn bounds(&self) -> &'static [f64] {
        self.bounds
    }

    pub fn observe(&self, elapsed: std::time::Duration) {
        let seconds = elapsed.as_secs_f64();
        if let Some(i) = self.bounds.iter().position(|&b| seconds <= b) {
            self.buckets[i].fetch_add(1, Ordering::Relaxed);
        }
        self.count.fetch_add(1, Ordering::Relaxed);
        let nanos = u64::try_from(elapsed.as_nanos()).unwrap_or(u64::MAX);
        self.sum_nanos.fetch_add(nanos, Ordering::Relaxed);
    }

    /// The cumulative bucket counts (`le` each bound), the count (`le="+Inf"`) and the sum in
    /// seconds. Read without a lock, so a scrape racing a recording may see the count one
    /// ahead of the buckets; Prometheus tolerates that.
    pub fn read(&self) -> (Vec<u64>, u64, f64) {
        let mut running = 0;
        let cumulative = self.buckets[..self.bounds.len()]
            .iter()
            .map(|b| {
                running += b.load(Ordering::Relaxed);
                running
            })
            .collect();
        let count = self.count.load(Ordering::Relaxed);
        let sum = self.sum_nanos.load(Ordering::Relaxed) as f64 / 1e9;
        (cumulative, count, sum)
    }
}

/// The `_bucket`, `_sum` and `_count` lines of one histogram series (`labels` without braces,
/// empty for none), as [`Histogram::read`] returns them.
pub fn write_histogram(
    out: &mut String,
    name: &str,
    labels: &str,
    bounds: &[f64],
    (buckets, count, sum): (Vec<u64>, u64, f64),
) {
    let sep = if labels.is_empty() { "" } else { "," };
    for (bound, n) in bounds.iter().zip(buckets) {
        let _ = writeln!(out, "{name}_bucket{{{labels}{sep}le=\"{bound}\"}} {n}");
    }
    let braces = if labels.is_empty() {
        String::new()
    } else {
        format!("{{{labels}}}")
    };
    let _ = writeln!(
        out,
        "{name}_bucket{{{labels}{sep}le=\"+Inf\"}} {count}\n{name}_sum{braces} {sum}\n{name}_count{braces} {count}"
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_are_claimed_once_and_a_full_table_drops() {
        let table: Table<Counter> = Table::new(4);
        for key in 1..=4u64 {
            table.slot(key).unwrap().0.fetch_add(key, Ordering::Relaxed);
        }
        table.slot(3).unwrap().0.fetch_add(10, Ordering::Relaxed);
        assert!(table.slot(5).is_none());
        assert_eq!(table.dropped(), 1);
        let mut seen: Vec<(u64, u64)> = table
            .iter()
            .map(|(k, v)| (k, v.0.load(Ordering::Relaxed)))
            .collect();
        seen.sort();
        assert_eq!(seen, [(1, 1), (2, 2), (3, 13), (4, 4)]);
    }

    #[test]
    fn histogram_buckets_are_cumulative() {
        let h = Histogram::default();
        h.observe(std::time::Duration::from_millis(1));
        h.observe(std::time::Duration::from_millis(30));
        h.observe(std::time::Duration::from_secs(100));
        let (buckets, count, sum) = h.read();
        assert_eq!(buckets[0], 1);
        assert_eq!(buckets[1], 1);
        assert_eq!(buckets[2], 2);
        assert_eq!(buckets[22], 2);
        assert_eq!(count, 3);
        assert!((sum - 100.031).abs() < 1e-6);
    }
}
