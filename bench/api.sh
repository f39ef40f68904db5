#!/usr/bin/env bash
# API server benchmark: builds the release binary and bench/api_bench.rs, runs it against the
# real server on 127.0.0.1, prints the table (with the machine's core count) and writes it to
# bench/API.md. Takes a few minutes on 2 cores.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
cargo build --release -p litek8s --bin litek8s && cargo build --release -p litek8s-bench --bin api_bench
TARGET_DIR=$(cargo metadata --format-version 1 --no-deps | jq -r .target_directory)
export LITEK8S_BIN=$TARGET_DIR/release/litek8s
# How much of the start-up order (build.rs) this binary has: the idle RSS depends on it.
listed=$(grep -v '^#' src/startup.order | sort -u)
found=$(comm -12 <(echo "$listed") <(nm "$LITEK8S_BIN" | awk '{print $NF}' | sort -u) | wc -l)
export STARTUP_ORDER_FOUND="$found of $(echo "$listed" | wc -l)"
echo "start-up order: $STARTUP_ORDER_FOUND functions found (bench/startup-order.sh writes it afresh)"
echo "cores: $(nproc)"
# Into bench/API.md (keeping its "## Notes") unless given another file.
if [ $# -gt 0 ]; then
    "$TARGET_DIR/release/api_bench" "$1"
else
    bench/keep-notes.sh --run bench/API.md "$TARGET_DIR/release/api_bench"
fi
