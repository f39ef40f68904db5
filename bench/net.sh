#!/usr/bin/env bash
# Service proxy benchmark: the time of a sync of 1,000 Services x 10 endpoints (rules
# generated, then applied by `nft -f -` in a scratch network namespace), from
# tests/agent_proxy.rs's a_thousand_services_are_accepted_by_the_kernel, run three times.
# Each run prints its first sync (the whole table written) and two later syncs (only changed
# chains and the maps); this script prints their medians as a markdown table.
# Needs root, nft, ip and busybox. PROFILE=debug uses the debug build (no release build).
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
PROFILE=${PROFILE:-release}
flag=()
[ "$PROFILE" = release ] && flag=(--release)
out=$(mktemp)
trap 'rm -f "$out"' EXIT
if [ "${LATENCY_ONLY:-0}" != 1 ]; then
    for run in 1 2 3; do
        cargo test "${flag[@]}" -q --test agent_proxy a_thousand_services_are_accepted_by_the_kernel \
            -- --nocapture 2>&1 | grep '^sync ' | sed "s/^/run $run /" >>"$out"
    done
    # "run R sync N: ... generate G, nft A, total T": durations as Rust's Debug prints them.
    ms() { awk '{ v=$1; if (v ~ /ms$/) { sub(/ms$/,"",v); print v } else if (v ~ /µs$/) { sub(/µs$/,"",v); print v/1000 } else { sub(/s$/,"",v); print v*1000 } }'; }
    median() { sort -n | awk '{ a[NR]=$1 } END { printf "%.0f ms", a[int((NR+1)/2)] }'; }
    field() { # $1: sync selector regex, $2: field name
        grep -E "sync $1:" "$out" | sed -E "s/.*$2 ([0-9.]+[µm]?s).*/\1/" | ms | median
    }
    echo "cores: $(nproc); profile: $PROFILE; load average: $(cut -d' ' -f1-3 /proc/loadavg)"
    echo
    echo "| sync of 1,000 Services x 10 endpoints | target | generate | nft -f - | total (median of 3 runs) |"
    echo "|---|---|---|---|---|"
    echo "| first (whole table) | ≤ 1 s | $(field 0 generate) | $(field 0 nft) | $(field 0 total) |"
    echo "| later (changed chains, maps refilled) | ≤ 1 s | $(field '[12]' generate) | $(field '[12]' nft) | $(field '[12]' total) |"
fi

# ClusterIP against the pod's own address: tests/agent_proxy.rs's ignored
# cluster_ip_latency_against_the_pod_address (requests from one pod to another, alternated
# between the two addresses, on new connections and on kept ones, three rounds of
# LITEK8S_LATENCY_N each, client and server on one CPU). The build profile does not matter to it (Python client and
# server, the kernel's rules); LATENCY_ONLY=1 skips the sync runs.
lat=$(mktemp)
trap 'rm -f "$out" "$lat"' EXIT
LITEK8S_LATENCY_N=${LITEK8S_LATENCY_N:-10000} cargo test "${flag[@]}" -q --test agent_proxy \
    cluster_ip_latency_against_the_pod_address -- --ignored --nocapture 2>&1 | grep '^latency round' >"$lat" || true
pick() { # round, mode, target, p50|p99
    awk -v r="$1" -v m="$2" -v t="$3" -v f="$4" '$3 == r && $4 == m && $5 == t { for (i = 6; i <= NF; i++) if ($i == f) print $(i + 1) }' "$lat"
}
for mode in new keepalive; do
    echo
    case $mode in
    new) echo "| new connection, pod to pod (1,000 other Services in the table) | pod IP p50 | ClusterIP p50 | added | pod IP p99 | ClusterIP p99 |" ;;
    keepalive) echo "| request on a kept connection, pod to pod | pod IP p50 | ClusterIP p50 | added | pod IP p99 | ClusterIP p99 |" ;;
    esac
    echo "|---|---|---|---|---|---|"
    for r in 0 1 2; do
        a=$(pick $r $mode pod-ip p50); b=$(pick $r $mode cluster-ip p50)
        [ -n "$a" ] && [ -n "$b" ] || continue
        echo "| round $((r + 1)) | $a µs | $b µs | $(awk -v a="$a" -v b="$b" 'BEGIN { printf "%+.1f %%", (b - a) * 100 / a }') | $(pick $r $mode pod-ip p99) µs | $(pick $r $mode cluster-ip p99) µs |"
    done
done
