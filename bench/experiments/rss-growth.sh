#!/usr/bin/env bash
# Resident memory of each member of a 3-member cluster, once a second, during ha_bench's
# all-members create phase (64 connections), then the run's result rows: how fast the members
# grow while the store takes new objects.
#   bench/experiments/rss-growth.sh BINARY
# Needs target/release/ha_bench; keep the host otherwise idle.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
bin=$1
out=$(mktemp /tmp/litek8s-rss-growth.XXXXXX.md)
LITEK8S_BIN="$bin" HA_MEMBERS=3 HA_CONNS=64 HA_READS=0 HA_KILLS=0 HA_TERMS=0 \
    HA_SIDE_ROUNDS=0 timeout 300 "$ROOT/target/release/ha_bench" "$out" >/dev/null 2>&1 &
bench=$!
for _ in $(seq 1 100); do
    [ "$(pgrep -f "^$bin apiserver" | wc -l)" -ge 3 ] && break
    sleep 0.1
done
echo "second  VmRSS of each member (KiB)"
for s in $(seq 1 9); do
    sleep 1
    line=""
    for p in $(pgrep -f "^$bin apiserver"); do
        line="$line $(awk '/^VmRSS/{print $2}' "/proc/$p/status" 2>/dev/null || echo -)"
    done
    echo "$s $line"
done
wait $bench || true
grep -E '^\| 3 \|' "$out"
rm -f "$out"
