#!/usr/bin/env bash
# Authorization benchmark: builds the release binary and bench/auth_bench.rs, runs it against two
# real servers on 127.0.0.1 (one with 1,000 Roles and RoleBindings more than the defaults),
# prints the table and writes it to bench/AUTH.md, keeping its "## Notes". Takes a few minutes
# on 2 cores.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
cargo build --release -p litek8s --bin litek8s && cargo build --release -p litek8s-bench --bin auth_bench
TARGET_DIR=$(cargo metadata --format-version 1 --no-deps | jq -r .target_directory)
export LITEK8S_BIN=$TARGET_DIR/release/litek8s
echo "cores: $(nproc), load average: $(cut -d' ' -f1-3 /proc/loadavg)"
if [ $# -gt 0 ]; then
    "$TARGET_DIR/release/auth_bench" "$1"
else
    bench/keep-notes.sh --run bench/AUTH.md "$TARGET_DIR/release/auth_bench"
fi
