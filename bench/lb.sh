#!/usr/bin/env bash
# Load balancer benchmark: builds the release binary and bench/lb_bench.rs, runs the same work
# directly and through `litek8s lb` on 127.0.0.1, prints the table (with the machine's core
# count) and writes it to bench/LB.md. Takes about a minute.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
cargo build --release -p litek8s --bin litek8s && cargo build --release -p litek8s-bench --bin lb_bench
TARGET_DIR=$(cargo metadata --format-version 1 --no-deps | jq -r .target_directory)
export LITEK8S_BIN=$TARGET_DIR/release/litek8s
echo "cores: $(nproc)"
"$TARGET_DIR/release/lb_bench" "${1:-$ROOT/bench/LB.md}"
