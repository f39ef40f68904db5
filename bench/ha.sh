#!/usr/bin/env bash
# HA benchmark: builds the release binary and bench/ha_bench.rs, runs clusters on loopback,
# prints the table (with the machine's core count) and writes it to bench/HA.md.
# HA_KILLS (default 20) and HA_TERMS (default 10) set the number of leader stops per case.
# Takes about 10 minutes on 2 cores.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
cargo build --release -p litek8s --bin litek8s && cargo build --release -p litek8s-bench --bin ha_bench
TARGET_DIR=$(cargo metadata --format-version 1 --no-deps | jq -r .target_directory)
export LITEK8S_BIN=$TARGET_DIR/release/litek8s
echo "cores: $(nproc)"
"$TARGET_DIR/release/ha_bench" "${1:-$ROOT/bench/HA.md}"
