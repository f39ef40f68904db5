#!/usr/bin/env bash
# NetworkPolicy benchmark: the time of a sync of 200 policies over 1,000 pods (500 on the
# node) in 20 namespaces (rules generated, then applied by `nft -f -` in a scratch network
# namespace), from tests/agent_netpol.rs's two_hundred_policies_over_a_thousand_pods, run
# three times. Each run prints its first sync (no table yet) and two later ones (a pod's
# address changed: the table is generated and replaced again); this script prints their
# medians as a markdown table. Needs root, nft, ip and busybox. PROFILE=debug uses the debug
# build (no release build).
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
PROFILE=${PROFILE:-release}
flag=()
[ "$PROFILE" = release ] && flag=(--release)
out=$(mktemp)
trap 'rm -f "$out"' EXIT
for run in 1 2 3; do
    cargo test "${flag[@]}" -q --test agent_netpol two_hundred_policies_over_a_thousand_pods \
        -- --nocapture 2>&1 | grep '^sync ' | sed "s/^/run $run /" >>"$out"
done
# "run R sync N: ... generate G, nft A, total T": durations as Rust's Debug prints them.
ms() { awk '{ v=$1; if (v ~ /ms$/) { sub(/ms$/,"",v); print v } else if (v ~ /µs$/) { sub(/µs$/,"",v); print v/1000 } else { sub(/s$/,"",v); print v*1000 } }'; }
median() { sort -n | awk '{ a[NR]=$1 } END { printf "%.0f ms", a[int((NR+1)/2)] }'; }
field() { # $1: sync selector regex, $2: field name
    grep -E "sync $1:" "$out" | sed -E "s/.*$2 ([0-9.]+[µm]?s).*/\1/" | ms | median
}
shape=$(grep -m1 -E 'sync 0:' "$out" | sed -E 's/^run [0-9]+ sync 0: ([^;]*);.*/\1/')
echo "cores: $(nproc); profile: $PROFILE; load average: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "ruleset: $shape"
echo
echo "| sync of 200 NetworkPolicies over 1,000 pods | target | generate | nft -f - | total (median of 3 runs) |"
echo "|---|---|---|---|---|"
echo "| first (no table) | ≤ 1 s | $(field 0 generate) | $(field 0 nft) | $(field 0 total) |"
echo "| later (a pod's address changed, table replaced) | ≤ 1 s | $(field '[12]' generate) | $(field '[12]' nft) | $(field '[12]' total) |"
