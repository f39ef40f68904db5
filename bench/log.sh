#!/bin/sh
# Raft log benchmark: raw fdatasync rate, single-node Raft appends with 1/16/256 proposers,
# replay of 100,000 entries. Writes bench/LOG.md. LOG_BENCH_SECS (default 3) sets the length
# of each run, LOG_BENCH_ROUNDS (default 3) the rounds (cases alternate; the table gives the
# median round and the range); LOG_BENCH_DIR the directory (default: the system temp dir).
# For comparisons: LOG_BENCH_ONLY=1|16|256 runs one engine case, LOG_BENCH_IN_FLIGHT the
# batcher's batches in flight (default 2). The "## Notes" of bench/LOG.md are kept
# (bench/keep-notes.sh).
set -eu
cd "$(dirname "$0")/.."
cargo build --release -p litek8s-bench --bin log_bench
bench/keep-notes.sh --run bench/LOG.md "${CARGO_TARGET_DIR:-target}/release/log_bench" --out
