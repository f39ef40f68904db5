#!/bin/sh
# objects.wal benchmark: write throughput (1/16/64 writers) and replay of 100,000 Mutations.
# Writes the table to bench/WAL.md, keeping its "## Notes" (bench/keep-notes.sh). Temporary logs go under $WAL_BENCH_DIR (default: a temp
# dir on the same disk as the target directory, so fdatasync costs what it costs there).
set -eu
cd "$(dirname "$0")/.."
: "${WAL_BENCH_DIR:=$(mktemp -d "${TMPDIR:-/tmp}/wal-bench.XXXXXX")}"
export WAL_BENCH_DIR
cargo build --release -p litek8s-bench --bin wal_bench
out=$(mktemp)
"${CARGO_TARGET_DIR:-target}/release/wal_bench" --out "$out"
{
  echo
  echo "Machine: $(nproc) cores, $(uname -sr), filesystem of the logs: $(df -T "$WAL_BENCH_DIR" | awk 'NR==2 {print $2}'), $(date -u +%Y-%m-%d)."
} >> "$out"
bench/keep-notes.sh "$out" bench/WAL.md
rm -rf "$WAL_BENCH_DIR" "$out"
