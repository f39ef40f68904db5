#!/usr/bin/env bash
# Control plane benchmark (the scheduler): builds the release binary and bench/control_bench.rs,
# runs it (in-process measures, then the real server on 127.0.0.1), prints the table (with the
# machine's core count) and writes it to bench/CONTROL.md. Takes about five minutes on 2 cores.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
cargo build --release -p litek8s --bin litek8s && cargo build --release -p litek8s-bench --bin control_bench
TARGET_DIR=$(cargo metadata --format-version 1 --no-deps | jq -r .target_directory)
export LITEK8S_BIN=$TARGET_DIR/release/litek8s
echo "cores: $(nproc)"
# Into bench/CONTROL.md (keeping its "## Notes") unless given another file.
if [ $# -gt 0 ]; then
    "$TARGET_DIR/release/control_bench" "$1"
else
    bench/keep-notes.sh --run bench/CONTROL.md "$TARGET_DIR/release/control_bench"
fi
