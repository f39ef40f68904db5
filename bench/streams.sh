#!/usr/bin/env bash
# Streams benchmark: builds the release binary and bench/streams_bench.rs, runs three release
# servers and a release agent on loopback with real pods, drives kubectl 1.33 exec,
# port-forward and logs -f through one and two server relays, prints the table and writes it
# to bench/STREAMS.md (keeping its "## Notes"). Needs root, runc (or crun), conmon,
# containernetworking-plugins, busybox-static and kubectl 1.33 (as tests/run-all.sh installs
# them). STREAMS_BENCH_MIB sets the size of each transfer (default 1024), STREAMS_BENCH_ONLY
# a comma-separated subset of exec,forward,logs,sessions. About ten minutes on 2 cores.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
cargo build --release -p litek8s --bin litek8s --bin litek8s-agent && cargo build --release -p litek8s-bench --bin streams_bench
TARGET_DIR=$(cargo metadata --format-version 1 --no-deps | jq -r .target_directory)
export LITEK8S_BIN=$TARGET_DIR/release/litek8s
export LITEK8S_AGENT_BIN=$TARGET_DIR/release/litek8s-agent
echo "cores: $(nproc)"
if [ $# -gt 0 ]; then
    "$TARGET_DIR/release/streams_bench" "$1"
else
    bench/keep-notes.sh --run bench/STREAMS.md "$TARGET_DIR/release/streams_bench"
fi
