#!/usr/bin/env bash
# Alternating before/after runs of ha_bench's 3-member create cases (64 connections), the way
# docs/performance-notes.md compares two builds on a noisy host.
#   bench/experiments/ab.sh ROUNDS LABEL=BINARY[,ENV=VALUE...] ...
# e.g. bench/experiments/ab.sh 3 before=/tmp/lk-before after=/tmp/lk-after
# Each line: round, label, the host's steal time during the run (jiffies, from /proc/stat),
# then creates/s, p50 and server CPU per create for writes over all members and to the leader.
# MEMBERS and CONNS override 3 and 64. Needs target/release/ha_bench.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
rounds=$1
shift
for r in $(seq 1 "$rounds"); do
    for spec in "$@"; do
        label=${spec%%=*}
        rest=${spec#*=}
        IFS=, read -r bin envs <<<"$rest"
        steal_before=$(awk '/^cpu /{print $9}' /proc/stat)
        # shellcheck disable=SC2086
        env ${envs//,/ } LITEK8S_BIN="$bin" HA_MEMBERS="${MEMBERS:-3}" HA_CONNS="${CONNS:-64}" \
            HA_READS=0 HA_KILLS=0 HA_TERMS=0 HA_SIDE_ROUNDS=0 \
            timeout 300 "$ROOT/target/release/ha_bench" "/tmp/ab-$label.md" >/dev/null 2>&1
        steal_after=$(awk '/^cpu /{print $9}' /proc/stat)
        echo "$r $label steal=$((steal_after - steal_before)) $(grep -E '^\| 3 \|' "/tmp/ab-$label.md" |
            awk -F'|' '{printf "%s:%s p50%s cpu%s  ", $3, $5, $6, $8}')"
    done
done
