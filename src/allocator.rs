//! The process allocator, chosen per executable: the API server's (`litek8s`) is mimalloc,
//! tuned for a long-running server whose idle footprint matters, with transparent huge pages
//! switched on only once the heap is big enough for them to pay off; the node agent's own
//! executable (`litek8s-agent`) keeps glibc malloc, with one arena and its free pages trimmed
//! when it goes idle. Each executable declares its `#[global_allocator]` (or none, for glibc's)
//! and names it to [`tune_allocator`] first thing in `main`; the library declares none, except
//! for its own unit tests, which run on mimalloc as the server does.
//!
//! Why mimalloc: the store and the WAL replay allocate many small, short-lived values (keys,
//! JSON nodes), where it is measurably faster than glibc malloc (docs/performance-notes.md,
//! "mimalloc, and huge pages only once the heap has grown": restart with 100,000 mutations
//! 2.27 s → 0.96 s, watch event p99 70 → 39 ms at 1,000 watchers).
//!
//! Why huge pages late: mimalloc asks for transparent huge pages on its arenas, and each
//! thread's heap segment then faults in whole 2 MiB pages — about 10 MiB of a 20 MiB idle
//! server is huge-page padding. Under load the same huge pages are worth ~12 % of create
//! throughput (fewer TLB misses over a heap of tens of MiB). So the process starts with THP
//! disabled (`PR_SET_THP_DISABLE`) and [`tune_for_load_when_heap_grows`] lifts that once
//! the anonymous resident memory passes [`HUGE_PAGE_HEAP_THRESHOLD`]: an idle server stays
//! small, a loaded one gets the speed. Once on, they stay on.
//!
//! Why the purge delay changes with them: a small server gives freed memory back to the OS at
//! once (purge delay 0), which keeps it small. Under load that is costly: request buffers come
//! and go many thousand times a second, and each one given back is an `madvise` call, then a
//! page fault (with huge pages on, sometimes a whole 2 MiB page zeroed) when it is used again.
//! So the loaded profile also keeps freed memory [`LOADED_PURGE_DELAY_MS`] before giving it
//! back (docs/performance-notes.md, "Freed memory kept 100 ms once the heap has grown": in the
//! 3-member create benchmark, 4–5 times fewer `madvise` calls and 3–4 times fewer page faults,
//! and about 8 % less server CPU per create over 14 alternating pairs).
//!
//! Why the agent gives memory back when its workers go idle ([`release_when_parked`]): the
//! node agent does its file and namespace work on tokio's blocking threads, which come and go
//! with pod churn, and holds a pod's objects only while the pod exists. With mimalloc, a thread
//! that ends leaves its pages that still hold blocks "abandoned" (blocks other threads free
//! later are not given back until some thread visits them), and a worker's own pages freed
//! from other threads stay with it until it allocates that size again; a forced collect on an
//! idle worker settles both, yet after pods came and went mimalloc still held 12–13 MiB for
//! 0.8 MiB of live data: its 64 KiB pages of one size class each kept a few long-lived blocks
//! among freed ones (docs/performance-notes.md, "After pod churn the agent's extra memory is
//! the allocator's"). glibc malloc gives back the free pages inside its heaps at 4 KiB
//! granularity (`malloc_trim`), so the agent executable uses it: one arena (not one per
//! thread: the agent's threads are few and its allocations are not what limits it) and a trim
//! on an idle worker. `litek8s-agent.service` also switches off glibc's per-thread cache
//! (`GLIBC_TUNABLES`, which only the environment of a starting process can set): its few free
//! blocks per size class kept about 2 MiB of heap pages resident after pod churn.

use std::sync::atomic::{AtomicU8, Ordering};
use std::time::Duration;

/// The server's allocator type, for an executable's `#[global_allocator]` declaration.
pub use mimalloc::MiMalloc;

/// Declares the server's allocator (mimalloc) as the executable's global allocator: in
/// `litek8s` and in the benchmarks that run the server's code in their own process. Pair it
/// with `tune_allocator(Allocator::Mimalloc)` first thing in `main`.
#[macro_export]
macro_rules! use_server_allocator {
    () => {
        #[global_allocator]
        static GLOBAL_ALLOCATOR: $crate::allocator::MiMalloc = $crate::allocator::MiMalloc;
    };
}

// The library's unit tests run on the server's allocator (the tests below need it).
#[cfg(test)]
#[global_allocator]
static TEST_ALLOCATOR: MiMalloc = MiMalloc;

/// The allocator an executable declared as its global one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Allocator {
    /// `#[global_allocator] static A: MiMalloc = MiMalloc;` — the API server's.
    Mimalloc = 1,
    /// No declaration: the system's (glibc) malloc — the agent executable's.
    Glibc = 2,
}

/// The allocator named to [`tune_allocator`] (0: none yet, nothing is tuned or given back).
static CHOSEN: AtomicU8 = AtomicU8::new(0);

fn chosen() -> Option<Allocator> {
    match CHOSEN.load(Ordering::Relaxed) {
        1 => Some(Allocator::Mimalloc),
        2 => Some(Allocator::Glibc),
        _ => None,
    }
}

/// glibc malloc arenas for the agent (glibc's default is 8 per core). One: 35 s after 100 pods
/// came and went the agent held 5.3 MiB of anonymous memory with one, 6.8 with two
/// (bench/AGENT.md, notes).
pub const AGENT_MALLOC_ARENAS: std::ffi::c_int = 1;

/// Anonymous resident memory above which transparent huge pages are allowed.
pub const HUGE_PAGE_HEAP_THRESHOLD: u64 = 32 * 1024 * 1024;

/// How long freed memory stays with the allocator before it goes back to the OS, once the
/// heap has grown past [`HUGE_PAGE_HEAP_THRESHOLD`] (mimalloc's own default is 10 ms).
pub const LOADED_PURGE_DELAY_MS: std::ffi::c_long = 100;

/// How often, at most, an idle async worker thread gives its freed memory back
/// ([`release_when_parked`]).
pub const IDLE_COLLECT_INTERVAL: Duration = Duration::from_secs(5);

/// How often the heap size is sampled (one read of `/proc/self/statm`).
const HEAP_SAMPLE_INTERVAL: Duration = Duration::from_secs(1);

// mimalloc's option numbers (mimalloc.h): 4 arena_eager_commit, 15 purge_delay.
const ARENA_EAGER_COMMIT: libmimalloc_sys::mi_option_t = 4;
const PURGE_DELAY: libmimalloc_sys::mi_option_t = 15;

/// Tunes `allocator`, the executable's global one, and remembers it for
/// [`release_when_parked`]. Huge pages are off until the heap grows (mimalloc) or for good
/// (glibc). mimalloc: freed memory goes back to the OS at once (purge delay 0), arenas are not
/// committed ahead of use. glibc: at most [`AGENT_MALLOC_ARENAS`] arenas, unless
/// `GLIBC_TUNABLES` is set (an operator's own tuning wins). Call first thing in `main`, before
/// threads start.
pub fn tune_allocator(allocator: Allocator) {
    CHOSEN.store(allocator as u8, Ordering::Relaxed);
    match allocator {
        // SAFETY: plain option setters of the C allocator; any value is valid.
        Allocator::Mimalloc => unsafe {
            libmimalloc_sys::mi_option_set(ARENA_EAGER_COMMIT, 0);
            libmimalloc_sys::mi_option_set(PURGE_DELAY, 0);
        },
        Allocator::Glibc => {
            if std::env::var_os("GLIBC_TUNABLES").is_none() {
                // SAFETY: mallopt only sets a parameter of glibc's allocator; called before
                // other threads exist.
                unsafe { libc::mallopt(libc::M_ARENA_MAX, AGENT_MALLOC_ARENAS) };
            }
        }
    }
    // Failure only means the kernel has no THP control: nothing to save then.
    let _ = nix::sys::prctl::set_thp_disable(true);
}

/// Switches to the loaded profile once the process's anonymous resident memory passes
/// [`HUGE_PAGE_HEAP_THRESHOLD`]: transparent huge pages allowed, freed memory kept
/// [`LOADED_PURGE_DELAY_MS`]. Returns then (or at once when the allocator is not mimalloc, THP
/// was never disabled, or `/proc` cannot be read). Run it as a background task of the server.
pub async fn tune_for_load_when_heap_grows() {
    if chosen() != Some(Allocator::Mimalloc)
        || !matches!(nix::sys::prctl::get_thp_disable(), Ok(true))
    {
        return;
    }
    let mut ticker = tokio::time::interval(HEAP_SAMPLE_INTERVAL);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        ticker.tick().await;
        let Some(anon) = anonymous_resident_bytes() else {
            return;
        };
        if anon >= HUGE_PAGE_HEAP_THRESHOLD {
            match nix::sys::prctl::set_thp_disable(false) {
                Ok(()) => {
                    // SAFETY: a plain option setter of the C allocator; mimalloc reads the
                    // purge delay afresh each time it schedules a purge.
                    unsafe { libmimalloc_sys::mi_option_set(PURGE_DELAY, LOADED_PURGE_DELAY_MS) };
                    tracing::debug!(
                        anon_resident_bytes = anon,
                        purge_delay_ms = LOADED_PURGE_DELAY_MS,
                        "heap grew: transparent huge pages enabled, freed memory kept a while"
                    )
                }
                Err(e) => tracing::debug!("could not enable transparent huge pages: {e}"),
            }
            return;
        }
    }
}

thread_local! {
    /// When this thread last gave memory back in [`release_when_parked`] (or first parked).
    static LAST_COLLECT: std::cell::Cell<Option<std::time::Instant>> =
        const { std::cell::Cell::new(None) };
}

/// For `tokio::runtime::Builder::on_thread_park`: when this worker thread runs out of work
/// and has not done so for [`IDLE_COLLECT_INTERVAL`], gives the allocator's free memory back
/// to the OS. mimalloc: the thread's pages emptied by other threads' frees, and the pages of
/// ended threads that have emptied since (a forced `mi_collect` on this thread's heap, which
/// also visits the abandoned segments of all threads). glibc: `malloc_trim(0)`, every free
/// page inside every arena. Parking means nothing is waiting to run, so the cost (1–3 ms on
/// average in the agent benchmark with mimalloc, more while the machine is busy) lands where
/// it delays nothing that was ready; at most once per interval per worker.
pub fn release_when_parked() {
    let now = std::time::Instant::now();
    let due = LAST_COLLECT.with(|last| {
        let due = collect_due(last.get(), now);
        // The first park only starts the clock: a starting process has nothing to give back.
        if due || last.get().is_none() {
            last.set(Some(now));
        }
        due
    });
    if let (true, Some(allocator)) = (due, chosen()) {
        release_free_memory(allocator);
    }
}

/// Gives `allocator`'s free memory back to the OS (see [`release_when_parked`]).
fn release_free_memory(allocator: Allocator) {
    match allocator {
        // SAFETY: a plain call into the C allocator; it touches this thread's heap and the
        // allocator's shared lists under their own locks.
        Allocator::Mimalloc => unsafe { libmimalloc_sys::mi_collect(true) },
        // SAFETY: malloc_trim locks each arena while it walks it; safe from any thread.
        Allocator::Glibc => unsafe {
            libc::malloc_trim(0);
        },
    }
}

/// Whether a thread that last collected at `last` (never: `None`) collects again at `now`.
fn collect_due(last: Option<std::time::Instant>, now: std::time::Instant) -> bool {
    last.is_some_and(|at| now.duration_since(at) >= IDLE_COLLECT_INTERVAL)
}

/// Resident memory not backed by a file or shared mapping, from `/proc/self/statm`
/// (resident − shared pages).
fn anonymous_resident_bytes() -> Option<u64> {
    let statm = std::fs::read_to_string("/proc/self/statm").ok()?;
    parse_statm_anonymous_pages(&statm).map(|pages| pages * page_size())
}

/// `resident − shared` from the fields of `/proc/<pid>/statm`.
fn parse_statm_anonymous_pages(statm: &str) -> Option<u64> {
    let mut fields = statm.split_ascii_whitespace().skip(1);
    let resident: u64 = fields.next()?.parse().ok()?;
    let shared: u64 = fields.next()?.parse().ok()?;
    Some(resident.saturating_sub(shared))
}

fn page_size() -> u64 {
    nix::unistd::sysconf(nix::unistd::SysconfVar::PAGE_SIZE)
        .ok()
        .flatten()
        .and_then(|size| u64::try_from(size).ok())
        .unwrap_or(4096)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statm_anonymous_pages_is_resident_minus_shared() {
        assert_eq!(
            parse_statm_anonymous_pages("1000 500 120 10 0 300 0\n"),
            Some(380)
        );
        assert_eq!(
            parse_statm_anonymous_pages("1000 100 120 10 0 300 0"),
            Some(0)
        );
        assert_eq!(parse_statm_anonymous_pages("garbage"), None);
        assert_eq!(parse_statm_anonymous_pages(""), None);
    }

    /// Held by the tests that grow or measure the process's heap, so that they do not see each
    /// other's tens of MiB.
    static HEAP_TESTS: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

    /// The allocator's purge delay in milliseconds (mimalloc's `purge_delay` option).
    fn purge_delay_ms() -> std::ffi::c_long {
        // SAFETY: a plain option getter of the C allocator.
        unsafe { libmimalloc_sys::mi_option_get(PURGE_DELAY) }
    }

    /// The switch itself: the test process starts small (as `main` does), grows its heap past
    /// the threshold and must come out with huge pages allowed and the loaded purge delay.
    #[tokio::test]
    async fn a_heap_past_the_threshold_switches_to_the_loaded_profile() {
        let _alone = HEAP_TESTS.lock().await;
        tune_allocator(Allocator::Mimalloc);
        if !matches!(nix::sys::prctl::get_thp_disable(), Ok(true)) {
            // No THP control in this kernel: the switch has nothing to do.
            return;
        }
        assert_eq!(
            purge_delay_ms(),
            0,
            "a small process gives memory back at once"
        );
        let heap: Vec<u8> = vec![1; (HUGE_PAGE_HEAP_THRESHOLD + (16 << 20)) as usize];
        let switched =
            tokio::time::timeout(HEAP_SAMPLE_INTERVAL * 5, tune_for_load_when_heap_grows()).await;
        assert!(
            switched.is_ok(),
            "the heap passed the threshold but nothing switched"
        );
        std::hint::black_box(&heap);
        assert_eq!(purge_delay_ms(), LOADED_PURGE_DELAY_MS);
        assert!(matches!(nix::sys::prctl::get_thp_disable(), Ok(false)));
    }

    #[test]
    fn an_idle_worker_collects_at_most_once_per_interval() {
        let now = std::time::Instant::now();
        assert!(
            !collect_due(None, now),
            "the first park only starts the clock"
        );
        assert!(!collect_due(Some(now), now));
        assert!(!collect_due(
            Some(now),
            now + IDLE_COLLECT_INTERVAL - Duration::from_millis(1)
        ));
        assert!(collect_due(Some(now), now + IDLE_COLLECT_INTERVAL));
    }

    /// That at least half of the `freed` bytes left the anonymous resident memory between the
    /// readings `before` and `after`.
    fn assert_half_went_back(before: u64, after: u64, freed: u64) {
        assert!(
            before.saturating_sub(after) >= freed / 2,
            "of {} MiB freed only {} MiB went back ({} MiB → {} MiB)",
            freed >> 20,
            before.saturating_sub(after) >> 20,
            before >> 20,
            after >> 20
        );
    }

    /// The memory the agent kept: blocks one thread allocated and another freed stay with the
    /// first thread's pages until it collects. A parked worker past the interval gives them
    /// back.
    #[test]
    fn a_parked_thread_gives_back_what_other_threads_freed() {
        const BLOCKS: usize = 512 * 1024;
        const BLOCK: usize = 256;
        let _alone = HEAP_TESTS.blocking_lock();
        tune_allocator(Allocator::Mimalloc);
        let worker = std::thread::spawn(|| {
            let blocks: Vec<Box<[u8; BLOCK]>> = (0..BLOCKS).map(|_| Box::new([1; BLOCK])).collect();
            std::thread::spawn(move || drop(blocks))
                .join()
                .expect("the freeing thread");
            let before = anonymous_resident_bytes().unwrap_or(0);
            LAST_COLLECT.with(|last| {
                last.set(std::time::Instant::now().checked_sub(IDLE_COLLECT_INTERVAL))
            });
            release_when_parked();
            let after = anonymous_resident_bytes().unwrap_or(u64::MAX);
            (before, after)
        });
        let (before, after) = worker.join().expect("the worker thread");
        assert_half_went_back(before, after, (BLOCKS * BLOCK) as u64);
    }

    /// The agent executable's case: glibc keeps the pages of freed blocks that lie below a
    /// block still in use; the trim gives them back. (The test process's global allocator is
    /// mimalloc, so the blocks come from glibc's `malloc` directly.)
    #[test]
    fn a_glibc_trim_gives_back_freed_pages_below_a_live_block() {
        const BLOCKS: usize = 256 * 1024;
        const BLOCK: usize = 256;
        let _alone = HEAP_TESTS.blocking_lock();
        let (before, after) = std::thread::spawn(|| {
            // SAFETY: plain glibc allocations, each freed once below; the last one (the block
            // that keeps the heap's top in use) is freed after the measurement.
            unsafe {
                let blocks: Vec<usize> = (0..BLOCKS)
                    .map(|_| {
                        let block = libc::malloc(BLOCK);
                        assert!(!block.is_null());
                        std::ptr::write_bytes(block.cast::<u8>(), 1, BLOCK);
                        block as usize
                    })
                    .collect();
                let live = libc::malloc(BLOCK);
                for block in blocks {
                    libc::free(block as *mut libc::c_void);
                }
                let before = anonymous_resident_bytes().unwrap_or(0);
                release_free_memory(Allocator::Glibc);
                let after = anonymous_resident_bytes().unwrap_or(u64::MAX);
                libc::free(live);
                (before, after)
            }
        })
        .join()
        .expect("the allocating thread");
        assert_half_went_back(before, after, (BLOCKS * BLOCK) as u64);
    }

    #[test]
    fn this_process_has_anonymous_memory() {
        assert!(anonymous_resident_bytes().is_some_and(|bytes| bytes > 0));
    }
}
