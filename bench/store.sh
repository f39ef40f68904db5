#!/bin/sh
# The store's apply path alone (what every member's Raft thread runs for each committed
# create): creates/s into stores holding 0 and 50,000 objects, and resident memory per stored
# object. Writes the table to bench/STORE.md, keeping its "## Notes" (bench/keep-notes.sh).
set -eu
cd "$(dirname "$0")/.."
cargo build --release -p litek8s-bench --bin store_bench
out=$(mktemp)
"${CARGO_TARGET_DIR:-target}/release/store_bench" --out "$out"
table=$(mktemp)
{
  echo "# Store apply benchmark"
  echo
  echo "Produced by \`bench/store.sh\` (\`bench/store_bench.rs\`): 1 KiB ConfigMap creates, prepared as a leader's proposals are, applied in batches of 32 (\`Store::apply_prepared_batch\`), one thread, no disk or network."
  echo
  cat "$out"
  echo
  echo "Machine: $(nproc) cores, $(uname -sr), $(date -u +%Y-%m-%d)."
} > "$table"
bench/keep-notes.sh "$table" bench/STORE.md
rm -f "$out" "$table"
