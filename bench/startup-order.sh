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
trap 'rm -rf "$WORK"' EXIT
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
        if curl -sk -m 2 "https://127.0.0.1:$port/readyz" 2>/dev/null | grep -q ok; then
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

python3 - "$BIN" "$WORK/full.out" "$WORK/api-only.out" >"$WORK/startup.order" <<'EOF'
"""Functions of BIN that ran an instruction in the callgrind outputs, in BIN's address order."""
import bisect, subprocess, sys

binary, outputs = sys.argv[1], sys.argv[2:]
functions = []
for line in subprocess.run(["nm", "-S", "--defined-only", binary], check=True,
                           capture_output=True, text=True).stdout.splitlines():
    fields = line.split()
    if len(fields) == 4 and fields[2] in "tTwW":
        functions.append((int(fields[0], 16), max(int(fields[1], 16), 1), fields[3]))
functions.sort()
starts = [f[0] for f in functions]
ran = {}
for output in outputs:
    in_binary = False
    for line in open(output):
        if line.startswith("ob="):
            in_binary = line[3:].strip() == binary
        elif in_binary and line.startswith("0x"):
            address = int(line.split()[0], 16)
            i = bisect.bisect_right(starts, address) - 1
            if i >= 0 and address < functions[i][0] + functions[i][1]:
                ran[functions[i][2]] = functions[i][0]
for name in sorted(ran, key=ran.get):
    print(name)
EOF

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
