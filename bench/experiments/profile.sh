#!/usr/bin/env bash
# A DWARF profile of the three members of a 3-member cluster during ha_bench's all-members
# create phase (64 connections): 2 s of `perf record` starting 2.5 s after the members are
# up, then the share of each thread and the top symbols over all of them.
#   bench/experiments/profile.sh BINARY [PERF_DATA]
# The fourteenth-session HA.md figures (clear_page_erms, _mi_page_malloc, memcmp, the share
# of each member's threads) come from this. Needs perf and target/release/ha_bench; keep the
# host otherwise idle.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
bin=$1
data=${2:-/tmp/litek8s-profile.data}
out=$(mktemp /tmp/litek8s-profile.XXXXXX.md)
LITEK8S_BIN="$bin" HA_MEMBERS=3 HA_CONNS=64 HA_READS=0 HA_KILLS=0 HA_TERMS=0 \
    HA_SIDE_ROUNDS=0 timeout 300 "$ROOT/target/release/ha_bench" "$out" >/dev/null 2>&1 &
bench=$!
for _ in $(seq 1 100); do
    [ "$(pgrep -f "^$bin apiserver" | wc -l)" -ge 3 ] && break
    sleep 0.1
done
sleep 2.5
pids=$(pgrep -f "^$bin apiserver" | paste -sd,)
for p in ${pids//,/ }; do
    echo "pid $p: $(tr '\0' ' ' <"/proc/$p/cmdline" | grep -o -- '--name [^ ]*')"
done
perf record -o "$data" -F 499 --call-graph dwarf,16384 -p "$pids" -- sleep 2 2>&1 | tail -1
wait $bench || true
grep -E '^\| 3 \|' "$out"
rm -f "$out"
echo "== share of each thread"
perf report -i "$data" --no-children --sort pid,comm -g none --stdio 2>/dev/null |
    grep -v '^#' | grep -v '^$' | head -15
echo "== top symbols, all threads"
perf report -i "$data" --no-children --sort sym -g none --stdio 2>/dev/null |
    grep -v '^#' | grep -v '^$' | head -25
echo "(callers of a symbol: perf report -i $data --no-children -G --symbols=<name>)"
