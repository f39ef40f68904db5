#!/bin/sh
# objects.wal benchmark: write throughput (1/16/64 writers) and replay of 100,000 Mutations.
# Writes the table to bench/WAL.md. Temporary logs go under $WAL_BENCH_DIR (default: a temp
# dir on the same disk as the target directory, so fdatasync costs what it costs there).
set -eu
cd "$(dirname "$0")/.."
: "${WAL_BENCH_DIR:=$(mktemp -d "${TMPDIR:-/tmp}/wal-bench.XXXXXX")}"
export WAL_BENCH_DIR
cargo build --release --example wal_bench
"${CARGO_TARGET_DIR:-target}/release/examples/wal_bench" --out bench/WAL.md
{
  echo
  echo "Machine: $(nproc) cores, $(uname -sr), filesystem of the logs: $(df -T "$WAL_BENCH_DIR" | awk 'NR==2 {print $2}'), $(date -u +%Y-%m-%d)."
} >> bench/WAL.md
rm -rf "$WAL_BENCH_DIR"
