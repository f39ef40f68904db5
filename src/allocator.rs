//! The process allocator: mimalloc, tuned for a long-running server whose idle footprint
//! matters, with transparent huge pages and a purge delay switched on only once the heap is big
//! enough for them to pay off.
//!
//! Why mimalloc: the store and the WAL replay allocate many small, short-lived values (keys,
//! JSON nodes), where it is measurably faster than glibc malloc (bench/WAL.md, bench/API.md:
//! restart with 100,000 mutations 2.27 s → ~0.8 s, watch event p99 70 → ~45 ms at 1,000
//! watchers).
//!
//! Why huge pages late: mimalloc asks for transparent huge pages on its arenas, and each
//! thread's heap segment then faults in whole 2 MiB pages — about 10 MiB of a 20 MiB idle
//! server is huge-page padding. Under load the same huge pages are worth ~12 % of create
//! throughput (fewer TLB misses over a heap of tens of MiB). So the process starts with THP
//! disabled (`PR_SET_THP_DISABLE`) and [`adapt_allocator_when_heap_grows`] lifts that once
//! the anonymous resident memory passes [`HUGE_PAGE_HEAP_THRESHOLD`]: an idle server stays
//! small, a loaded one gets the speed. The same moment switches the purge delay from 0 to
//! [`LARGE_HEAP_PURGE_DELAY_MS`] (see [`adapt_allocator_when_heap_grows`]). Once on, both stay
//! on.

use std::time::Duration;

#[global_allocator]
static GLOBAL_ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Anonymous resident memory above which transparent huge pages are allowed.
pub const HUGE_PAGE_HEAP_THRESHOLD: u64 = 32 * 1024 * 1024;

/// How often the heap size is sampled (one read of `/proc/self/statm`).
const HEAP_SAMPLE_INTERVAL: Duration = Duration::from_secs(1);

/// Tunes the allocator: freed memory goes back to the OS at once (purge delay 0), arenas are
/// not committed ahead of use, and huge pages are off until the heap grows. Call first thing in
/// `main`, before threads start.
pub fn tune_allocator() {
    // mimalloc's option number (mimalloc.h) for arena_eager_commit.
    const ARENA_EAGER_COMMIT: libmimalloc_sys::mi_option_t = 4;
    // SAFETY: a plain option setter of the C allocator; any value is valid.
    unsafe { libmimalloc_sys::mi_option_set(ARENA_EAGER_COMMIT, 0) };
    set_purge_delay_ms(0);
    // Failure only means the kernel has no THP control: nothing to save then.
    let _ = nix::sys::prctl::set_thp_disable(true);
}

/// Switches the allocator to its large-heap settings once the process's anonymous resident
/// memory passes [`HUGE_PAGE_HEAP_THRESHOLD`]: transparent huge pages allowed, and freed memory
/// kept for [`LARGE_HEAP_PURGE_DELAY_MS`] before it goes back to the OS. Returns then (or when
/// `/proc` cannot be read). Run it as a background task of the server.
///
/// Why the purge delay: with a delay of 0 every large answer (a 10 MiB Table of 10,000 pods, a
/// big list) faults its buffers in afresh, zeroing each page — a third of the Table list's time
/// (bench/API.md: 10,000-pod Table ~140 ms with delay 0, ~90 ms with 100 ms). An idle server
/// keeps delay 0 and its small footprint.
pub async fn adapt_allocator_when_heap_grows() {
    let mut ticker = tokio::time::interval(HEAP_SAMPLE_INTERVAL);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        ticker.tick().await;
        let Some(anon) = anonymous_resident_bytes() else {
            return;
        };
        if anon >= HUGE_PAGE_HEAP_THRESHOLD {
            set_purge_delay_ms(LARGE_HEAP_PURGE_DELAY_MS);
            if matches!(nix::sys::prctl::get_thp_disable(), Ok(true)) {
                if let Err(e) = nix::sys::prctl::set_thp_disable(false) {
                    tracing::debug!("could not enable transparent huge pages: {e}");
                }
            }
            tracing::debug!(
                anon_resident_bytes = anon,
                "heap grew: transparent huge pages allowed, purge delay {LARGE_HEAP_PURGE_DELAY_MS} ms"
            );
            return;
        }
    }
}

/// How long freed memory stays with the allocator, once the heap is large, before it is
/// returned to the OS (mimalloc's own default is 10 ms; 100 ms covers the gap between two
/// large requests of a client paging or re-listing).
pub const LARGE_HEAP_PURGE_DELAY_MS: i64 = 100;

/// mimalloc's option number (mimalloc.h) for the purge delay in milliseconds.
const PURGE_DELAY: libmimalloc_sys::mi_option_t = 15;

fn set_purge_delay_ms(ms: i64) {
    // SAFETY: a plain option setter of the C allocator; mimalloc reads the option each time it
    // schedules a purge, so it may change while threads run.
    unsafe { libmimalloc_sys::mi_option_set(PURGE_DELAY, ms as std::os::raw::c_long) };
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

    #[test]
    fn this_process_has_anonymous_memory() {
        assert!(anonymous_resident_bytes().is_some_and(|bytes| bytes > 0));
    }
}
