#!/usr/bin/env bash
# Custom resource benchmark: builds the binary and bench/crd_bench.rs, runs it against the real
# server (and a 3-server cluster) on 127.0.0.1, prints the table and writes it to bench/CRD.md
# (keeping its "## Notes"). Builds the debug profile unless CRD_BENCH_PROFILE=release: the
# ratio of custom object to ConfigMap creates is the figure that matters, and the table says
# which build it measured. Takes about two minutes.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
PROFILE=${CRD_BENCH_PROFILE:-debug}
if [ "$PROFILE" = release ]; then
    FLAG=(--release)
else
    FLAG=()
fi
cargo build "${FLAG[@]}" -p litek8s --bin litek8s && cargo build "${FLAG[@]}" -p litek8s-bench --bin crd_bench
TARGET_DIR=$(cargo metadata --format-version 1 --no-deps | jq -r .target_directory)
export LITEK8S_BIN=$TARGET_DIR/$PROFILE/litek8s
export CRD_BENCH_BUILD=$PROFILE
echo "cores: $(nproc)"
# Into bench/CRD.md (keeping its "## Notes") unless given another file.
if [ $# -gt 0 ]; then
    "$TARGET_DIR/$PROFILE/crd_bench" "$1"
else
    bench/keep-notes.sh --run bench/CRD.md "$TARGET_DIR/$PROFILE/crd_bench"
fi
