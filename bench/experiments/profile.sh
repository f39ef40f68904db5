#!/usr/bin/env bash
# A DWARF profile of the three members of a 3-member cluster during ha_bench's all-members
# create phase (64 connections): 2 s of `perf record` starting 2.5 s after the members are
# up, then the share of each thread and the top symbols over all of them.
#   bench/experiments/profile.sh BINARY [PERF_DATA]
# The profiles of docs/performance-notes.md's last two HA entries (clear_page_erms,
# _mi_page_malloc, memcmp, the share of each member's threads) come from this. Needs perf and
# target/release/ha_bench; keep the host otherwise idle.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
bin=$1
data=${2:-/tmp/litek8s-profile.data}
# shellcheck source=bench/experiments/members-phase.sh
. "$ROOT/bench/experiments/members-phase.sh"
start_members_phase "$bin"
sleep 2.5
pids=$(pgrep -f "^$bin apiserver" | paste -sd,)
for p in ${pids//,/ }; do
    echo "pid $p: $(tr '\0' ' ' <"/proc/$p/cmdline" | grep -o -- '--name [^ ]*')"
done
perf record -o "$data" -F 499 --call-graph dwarf,16384 -p "$pids" -- sleep 2 2>&1 | tail -1
finish_members_phase
echo "== share of each thread"
perf report -i "$data" --no-children --sort pid,comm -g none --stdio 2>/dev/null |
    grep -v '^#' | grep -v '^$' | head -15
echo "== top symbols, all threads"
perf report -i "$data" --no-children --sort sym -g none --stdio 2>/dev/null |
    grep -v '^#' | grep -v '^$' | head -25
echo "(callers of a symbol: perf report -i $data --no-children -G --symbols=<name>)"
