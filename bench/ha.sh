#!/usr/bin/env bash
# HA benchmark: builds the release binary and bench/ha_bench.rs, runs clusters on loopback,
# prints the table (with the machine's core count) and writes it to bench/HA.md, keeping its
# "## Notes" (bench/keep-notes.sh), or to the file given as the first argument.
# HA_KILLS (default 20) and HA_TERMS (default 10) set the number of leader stops per case.
# HA_SIDE_ROUNDS (default 3, 0 skips) sets the rounds of the side-by-side table against a
# 3-member etcd, measured when Debian's etcd-server and etcd-client are installed (the script does
# not install them: the package starts a system etcd service).
# Takes about 13 minutes on 2 cores.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
cargo build --release -p litek8s --bin litek8s && cargo build --release -p litek8s-bench --bin ha_bench
TARGET_DIR=$(cargo metadata --format-version 1 --no-deps | jq -r .target_directory)
export LITEK8S_BIN=$TARGET_DIR/release/litek8s
echo "cores: $(nproc)"
if [ $# -gt 0 ]; then
    "$TARGET_DIR/release/ha_bench" "$1"
else
    bench/keep-notes.sh --run bench/HA.md "$TARGET_DIR/release/ha_bench"
fi
