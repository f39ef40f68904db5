#!/usr/bin/env bash
# Soak of the HA linearizability test: many more randomized runs than CI's 20.
#   LIN_RUNS (default 200), LIN_RUN_MS (default 4000), LIN_SEED (default: random, printed).
# LIN_STALE_READS=1 makes reads use resourceVersion=0 (may be stale): the run must then FAIL,
# which shows the checker catches stale reads.
set -euo pipefail
cd "$(dirname "$0")/.."
export LIN_RUNS="${LIN_RUNS:-200}"
export LIN_RUN_MS="${LIN_RUN_MS:-4000}"
log="$(mktemp -t litek8s-ha-soak.XXXXXX)"
echo "ha_soak: LIN_RUNS=$LIN_RUNS LIN_RUN_MS=$LIN_RUN_MS log=$log"
start=$(date +%s)
set +e
cargo test --test ha_linearizability histories_under_kills_and_pauses_are_linearizable \
    -- --nocapture 2>&1 | tee "$log" | grep --line-buffered -E '^(run |linearizability:|test |thread )'
status=${PIPESTATUS[0]}
set -e
end=$(date +%s)
echo
echo "| runs | ops | wall s | result |"
echo "|-----:|----:|-------:|--------|"
ops=$(grep -oE '^linearizability: [0-9]+ runs, [0-9]+ ops' "$log" | grep -oE '[0-9]+ ops' | cut -d' ' -f1 || true)
result=$([ "$status" -eq 0 ] && echo "0 anomalies" || echo "FAILED (see $log)")
echo "| $LIN_RUNS | ${ops:-?} | $((end - start)) | $result |"
exit "$status"
