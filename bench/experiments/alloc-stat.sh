#!/usr/bin/env bash
# What the allocator asks of the kernel during ha_bench's 3-member all-members create phase
# (64 connections): madvise calls and page faults of the three members over 2 s (from
# `perf stat`), and the huge pages faulted in system-wide meanwhile (/proc/vmstat
# thp_fault_alloc), then the run's result rows.
#   bench/experiments/alloc-stat.sh BINARY [ENV=VALUE...]
# Needs perf and target/release/ha_bench; keep the host otherwise idle.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
bin=$1
shift
# shellcheck source=bench/experiments/members-phase.sh
. "$ROOT/bench/experiments/members-phase.sh"
start_members_phase "$bin" "$@"
sleep 2.5
pids=$(pgrep -f "^$bin apiserver" | paste -sd,)
thp() { awk '/^thp_fault_alloc /{print $2}' /proc/vmstat; }
before=$(thp)
perf stat -e 'syscalls:sys_enter_madvise,page-faults' -p "$pids" -- sleep 2 2>&1 |
    grep -E 'madvise|page-faults'
echo "huge pages faulted in (system-wide): $(($(thp) - before))"
finish_members_phase
