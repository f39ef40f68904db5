#!/usr/bin/env bash
# Resident memory of each member of a 3-member cluster, once a second, during ha_bench's
# all-members create phase (64 connections), then `vmstat 1` over the same seconds (how busy
# the CPUs were) and the run's result rows: how fast the members grow while the store takes
# new objects.
#   bench/experiments/rss-growth.sh BINARY
# Needs target/release/ha_bench; keep the host otherwise idle.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
bin=$1
# shellcheck source=bench/experiments/members-phase.sh
. "$ROOT/bench/experiments/members-phase.sh"
start_members_phase "$bin"
vmstat 1 10 >"$out.vmstat" &
vmstat=$!
echo "second  VmRSS of each member (KiB)"
for s in $(seq 1 9); do
    sleep 1
    line=""
    for p in $(pgrep -f "^$bin apiserver"); do
        line="$line $(awk '/^VmRSS/{print $2}' "/proc/$p/status" 2>/dev/null || echo -)"
    done
    echo "$s $line"
done
wait $vmstat
cat "$out.vmstat"
rm -f "$out.vmstat"
finish_members_phase
