//! libFuzzer entry for the on-disk file check in `harness/disk_open.rs`.
//!
//! With `LITEK8S_FUZZ_MAKE_SEEDS=<dir>` set, the first input instead writes a starting corpus
//! into `<dir>` (WALs and Raft logs made by the real writers) and the process exits.

#![no_main]

use std::sync::OnceLock;

#[path = "../harness/disk_open.rs"]
mod harness;
#[path = "../harness/scratch.rs"]
mod scratch;

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    static SEEDS: OnceLock<()> = OnceLock::new();
    SEEDS.get_or_init(|| {
        if let Some(out) = std::env::var_os("LITEK8S_FUZZ_MAKE_SEEDS") {
            harness::make_seeds(std::path::Path::new(&out));
            std::process::exit(0);
        }
    });
    harness::run(data);
});
