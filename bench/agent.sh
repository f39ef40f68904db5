#!/usr/bin/env bash
# Node agent benchmark: builds the release binary and bench/agent_bench.rs, runs a release
# server and a release agent on 127.0.0.1 with real containers (runc under conmon, the CNI
# bridge), prints the table (with the machine's core count) and writes it to bench/AGENT.md.
# Needs root, runc (or crun), conmon, containernetworking-plugins and busybox-static (as
# tests/run-all.sh installs them). Takes about four minutes on 2 cores.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
cargo build --release -p litek8s --bin litek8s && cargo build --release -p litek8s-bench --bin agent_bench
TARGET_DIR=$(cargo metadata --format-version 1 --no-deps | jq -r .target_directory)
export LITEK8S_BIN=$TARGET_DIR/release/litek8s
echo "cores: $(nproc)"
# Into bench/AGENT.md (keeping its "## Notes") unless given another file.
if [ $# -gt 0 ]; then
    "$TARGET_DIR/release/agent_bench" "$1"
else
    bench/keep-notes.sh --run bench/AGENT.md "$TARGET_DIR/release/agent_bench"
fi
