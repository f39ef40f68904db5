//! litek8s: a small, systemd-native Kubernetes distribution.
//!
//! # Layout
//! - [`cli`]: the `litek8s` command and its flags, resolved into settings.
//! - [`kube`]: the object model and the deterministic store that every write goes through
//!   (Mutation → Writer → store.apply), `objects.wal`, the resource registry, selectors.
//! - [`api`]: HTTP handlers for the Kubernetes API (discovery, CRUD, watch, tables, errors).
//! - [`server`]: assembles an API server process (TLS, certificates, tokens, listeners).
//! - [`raft`]: the Raft log engine and (later) replication for HA clusters.
//! - [`storage`]: the CRC-framed record format and durable-file helpers shared by all files.
//! - [`systemd`]: sd_notify, socket activation and journald.

pub mod api;
pub mod cli;
pub mod kube;
pub mod raft;
pub mod server;
pub mod storage;
pub mod systemd;

/// mimalloc instead of glibc malloc: the store and the WAL replay allocate many small, short-lived
/// values (keys, JSON nodes), where it is measurably faster (bench/WAL.md, bench/API.md: restart
/// with 100,000 mutations 2.27 s → ~1 s, watch event p99 70 → ~45 ms at 1,000 watchers).
/// Transparent huge pages stay allowed: they hold ~10 MiB of the ~20 MiB idle RSS (mimalloc's
/// `no_thp` feature brings idle RSS to 9.5 MiB) but are worth ~12 % of create throughput
/// (64 connections: 8,100–8,600/s with, 6,900–7,700/s without, measured on 2 cores).
#[global_allocator]
static GLOBAL_ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Tunes the allocator for a long-running server whose footprint matters more than the last
/// percent of speed: freed memory goes back to the OS at once (purge delay 0) and arenas are
/// not committed ahead of use. Call first thing in `main`.
pub fn tune_allocator() {
    // mimalloc's option numbers (mimalloc.h): 4 arena_eager_commit, 15 purge_delay.
    const ARENA_EAGER_COMMIT: libmimalloc_sys::mi_option_t = 4;
    const PURGE_DELAY: libmimalloc_sys::mi_option_t = 15;
    // SAFETY: plain option setters of the C allocator; any value is valid.
    unsafe {
        libmimalloc_sys::mi_option_set(ARENA_EAGER_COMMIT, 0);
        libmimalloc_sys::mi_option_set(PURGE_DELAY, 0);
    }
}
