#!/usr/bin/env bash
# Load balancer benchmark: builds the release binary and bench/lb_bench.rs, runs the same work
# directly and through `litek8s lb` on 127.0.0.1, prints the table (with the machine's core
# count) and writes it to bench/LB.md. HAProxy, the reference relay measured next to litek8s lb,
# is installed when missing (root with apt-get; else its column stays empty; Debian's packaged
# configuration has no frontend, so its enabled service listens on nothing). Three CPU layouts,
# three rounds each: about 8 minutes on 2 cores.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
cargo build --release -p litek8s --bin litek8s && cargo build --release -p litek8s-bench --bin lb_bench
TARGET_DIR=$(cargo metadata --format-version 1 --no-deps | jq -r .target_directory)
export LITEK8S_BIN=$TARGET_DIR/release/litek8s
if ! command -v haproxy >/dev/null && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends haproxy >/dev/null ||
        echo "haproxy could not be installed: the reference column stays empty"
fi
echo "cores: $(nproc)"
# Into bench/LB.md (keeping its "## Notes") unless given another file.
if [ $# -gt 0 ]; then
    "$TARGET_DIR/release/lb_bench" "$1"
else
    bench/keep-notes.sh --run bench/LB.md "$TARGET_DIR/release/lb_bench"
fi
