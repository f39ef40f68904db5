#!/usr/bin/env bash
# Runs one test binary (with optional test-name filter) RUNS times while BUSY busy loops
# (default 2) take the CPUs, stopping at the first failure; prints run:exit-code for each.
# The flake counts of ha_failover in docs/performance-notes.md ("Freed memory kept 100 ms once
# the heap has grown") came from this, e.g.
#   cargo test --test ha_failover --no-run
#   bench/experiments/repeat-busy.sh 40 target/debug/deps/ha_failover-<hash>
# Logs of each run: /tmp/litek8s-repeat-<n>.log.
set -uo pipefail
runs=$1
shift
busy=()
for _ in $(seq 1 "${BUSY:-2}"); do
    sh -c 'while :; do :; done' &
    busy+=($!)
done
trap 'kill "${busy[@]}" 2>/dev/null' EXIT
for i in $(seq 1 "$runs"); do
    timeout 300 "$@" >"/tmp/litek8s-repeat-$i.log" 2>&1
    rc=$?
    echo -n "$i:$rc "
    if [ "$rc" != 0 ]; then
        echo
        echo "run $i failed: /tmp/litek8s-repeat-$i.log"
        exit 1
    fi
done
echo
