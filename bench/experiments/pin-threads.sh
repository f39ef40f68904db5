#!/bin/bash
# Runs log_bench's one-proposer case once with the threads whose name matches a pattern moved
# to one CPU as they appear (taskset -p), and prints the raw fdatasync and engine rates.
# Usage: bench/experiments/pin-threads.sh <thread-name regex> <cpu>
#   bench/experiments/pin-threads.sh 'litek8s-raft' 1
#   bench/experiments/pin-threads.sh 'litek8s-raft|tokio-rt-worker' 1
#   bench/experiments/pin-threads.sh 'none' 1        # pins nothing: the unpinned baseline
# Needs target/release/log_bench (cargo build --release -p litek8s-bench --bin log_bench).
set -eu
cd "$(dirname "$0")/../.."
pattern=$1
cpu=$2
out=$(mktemp)
LOG_BENCH_ONLY=1 LOG_BENCH_ROUNDS=1 LOG_BENCH_SECS=3 target/release/log_bench --out "$out.md" >"$out" 2>&1 &
pid=$!
pinned=""
# The threads start at once; keep looking for 4 s in case one starts late.
for _ in $(seq 1 200); do
  for task in /proc/$pid/task/*; do
    name=$(cat "$task/comm" 2>/dev/null) || continue
    tid=${task##*/}
    if [[ "$name" =~ ^($pattern)$ ]] && [[ " $pinned " != *" $tid "* ]]; then
      taskset -p -c "$cpu" "$tid" >/dev/null && pinned="$pinned $tid"
    fi
  done
  sleep 0.02
done
wait $pid
echo "threads [$pattern] on CPU $cpu ($(echo $pinned | wc -w) pinned): $(grep '^round' "$out" | sed 's/round 0: //' | tr '\n' ' ')"
rm -f "$out" "$out.md"
