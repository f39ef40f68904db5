#!/usr/bin/env bash
# Writes src/startup.order: the functions the `litek8s` server runs while it starts and idles,
# which build.rs hands to the linker so that release builds place them together at the start of
# .text (docs/architecture.md, "Build"). Run it when `bash bench/api.sh` finds many of its names
# missing from the binary (after Cargo.lock, the Rust toolchain or much start-up code changed),
# then bench/api.sh again.
#
# How: a release build, then two starts under valgrind's callgrind (a server with its controllers
# and scheduler, as `litek8s server` runs by default, and one without, as bench/api_bench.rs
# measures the API server alone), each to /readyz and 10 s of idling; every function that ran an
# instruction is listed, in the order of the profiled binary. Needs valgrind (`apt install
# valgrind`); takes about 3 minutes plus the build.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
command -v valgrind >/dev/null || { echo "startup-order.sh: needs valgrind (apt install valgrind)" >&2; exit 1; }
cargo build --release -p litek8s --bin litek8s
TARGET_DIR=$(cargo metadata --format-version 1 --no-deps | jq -r .target_directory)
WORK=$(mktemp -d)
# STARTUP_ORDER_KEEP=1 keeps the profiled binary and the callgrind outputs (for
# bench/startup_functions.py --summary) and says where.
if [ -n "${STARTUP_ORDER_KEEP:-}" ]; then
    echo "profiles kept in $WORK"
else
    trap 'rm -rf "$WORK"' EXIT
fi
# A copy: the profile must come from one binary, and the next build may replace the original.
BIN=$WORK/litek8s
cp "$TARGET_DIR/release/litek8s" "$BIN"

# profile NAME PORT FLAGS…: one start to /readyz plus 10 s, under callgrind.
profile() {
    local name=$1 port=$2
    shift 2
    LITEK8S_LOG=info valgrind --tool=callgrind --callgrind-out-file="$WORK/$name.out" \
        --dump-instr=yes --compress-strings=no --compress-pos=no \
        "$BIN" apiserver --data-dir "$WORK/$name-data" --listen "127.0.0.1:$port" --name order "$@" \
        >"$WORK/$name.log" 2>&1 &
    local pid=$! ready=
    for _ in $(seq 300); do
        # Both ways a server is asked: plain HTTP, as the load balancer's and the tests' health
        # checks ask, and HTTPS, as kubectl does.
        if curl -s -m 2 "http://127.0.0.1:$port/readyz" 2>/dev/null | grep -q ok &&
            curl -sk -m 2 "https://127.0.0.1:$port/readyz" 2>/dev/null | grep -q ok; then
            ready=1
            break
        fi
        sleep 1
    done
    [ -n "$ready" ] || { echo "startup-order.sh: the $name server never got ready" >&2; tail "$WORK/$name.log" >&2; exit 1; }
    sleep 10
    kill -INT "$pid"
    wait "$pid" || true
}
port=$((20000 + RANDOM % 20000))
profile full "$port"
profile api-only "$((port + 1))" --disable-controller-manager --disable-scheduler

python3 bench/startup_functions.py "$BIN" "$WORK/full.out" "$WORK/api-only.out" >"$WORK/startup.order"

count=$(wc -l <"$WORK/startup.order")
{
    echo "# The functions the litek8s server runs while it starts and idles, for the linker's"
    echo "# --symbol-ordering-file (build.rs). Written by bench/startup-order.sh: do not edit."
    echo "# $(rustc -V), Cargo.lock $(sha256sum Cargo.lock | cut -c1-16)"
    cat "$WORK/startup.order"
} >src/startup.order
# Only the link reads the list: make cargo link again.
touch src/main.rs
echo "wrote src/startup.order: $count functions"
