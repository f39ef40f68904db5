#!/usr/bin/env bash
# Node agent benchmark: builds the release binaries and bench/agent_bench.rs, runs a release
# server (`litek8s apiserver`) and a release agent (`litek8s-agent`) on 127.0.0.1 with real
# containers (runc under conmon, the CNI bridge), prints the table (with the machine's core
# count) and writes it to bench/AGENT.md.
# Needs root, runc (or crun), conmon, containernetworking-plugins and busybox-static (as
# tests/run-all.sh installs them). Takes about four minutes on 2 cores.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
# One cargo run: the server, the agent's own executable and the benchmark share one release
# build of the library.
cargo build --release -p litek8s -p litek8s-bench --bin litek8s --bin litek8s-agent --bin agent_bench
TARGET_DIR=$(cargo metadata --format-version 1 --no-deps | jq -r .target_directory)
# The server runs from litek8s; the agent measured is litek8s-agent, what
# litek8s-agent.service runs (the same agent without the API server's code).
export LITEK8S_BIN=$TARGET_DIR/release/litek8s
export LITEK8S_AGENT_BIN=$TARGET_DIR/release/litek8s-agent
echo "cores: $(nproc)"
echo "agent: $LITEK8S_AGENT_BIN ($(size -A "$LITEK8S_AGENT_BIN" | awk '$1 == ".text" { printf "%.1f MiB of code", $2 / 1048576 }'))"
# Into bench/AGENT.md (keeping its "## Notes") unless given another file.
if [ $# -gt 0 ]; then
    "$TARGET_DIR/release/agent_bench" "$1"
else
    bench/keep-notes.sh --run bench/AGENT.md "$TARGET_DIR/release/agent_bench"
fi
