#!/usr/bin/env bash
# Page faults per second and resident memory of each member of a 3-member cluster while
# ha_bench creates ConfigMaps over 64 connections (one line per second, 6 s from the start of
# the first case), then the run's result rows.
#   bench/experiments/faults.sh BINARY [ENV=VALUE...]
# e.g. with a build that reads LK_PURGE_DELAY (git show e2f9cc2:bench/experiments/purge-delay.patch):
#   bench/experiments/faults.sh target/release/litek8s LK_PURGE_DELAY=1000
# Needs target/release/ha_bench.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
bin=$1
shift
out=$(mktemp /tmp/litek8s-faults.XXXXXX.md)
env "$@" LITEK8S_BIN="$bin" HA_MEMBERS=3 HA_CONNS=64 HA_READS=0 HA_KILLS=0 HA_TERMS=0 \
    HA_SIDE_ROUNDS=0 timeout 300 "$ROOT/target/release/ha_bench" "$out" >/dev/null 2>&1 &
bench=$!
sleep 2
pids=$(pgrep -f "^$bin apiserver" | head -3)
declare -A last
for t in 1 2 3 4 5 6; do
    line="t=$t"
    for p in $pids; do
        faults=$(awk '{print $10}' "/proc/$p/stat" 2>/dev/null || echo 0)
        rss=$(awk '/^VmRSS/{print $2}' "/proc/$p/status" 2>/dev/null || echo 0)
        line="$line | pid $p faults/s $((faults - ${last[$p]:-$faults})) rss ${rss} kB"
        last[$p]=$faults
    done
    echo "$line"
    sleep 1
done
wait $bench || true
grep -E '^\| 3 \|' "$out"
rm -f "$out"
