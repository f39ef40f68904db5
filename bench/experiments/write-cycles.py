#!/usr/bin/env python3
"""One-proposer write cycles from a scheduler trace (docs/performance-notes.md, "Two wake-ups of a
second API worker per write removed").

A cycle is the time between two successive wake-ups of a proposer-runtime thread
(tokio-rt-worker) by the Raft thread (litek8s-raft): one write, answer to answer.

    LOG_BENCH_ONLY=1 LOG_BENCH_ROUNDS=1 LOG_BENCH_SECS=5 target/release/log_bench --out /tmp/x.md &
    sleep 7.5   # past the raw fdatasync loop
    perf sched record -a -o /tmp/sched.data -- sleep 0.5
    perf script -i /tmp/sched.data -F time,cpu,comm,tid,event,trace > /tmp/sched.txt
    python3 bench/experiments/write-cycles.py /tmp/sched.txt

Prints the count, mean and percentiles of the cycles in µs, and the slowest few with the line
numbers of /tmp/sched.txt where they start, to read what happened in them.
"""
import re
import statistics
import sys

WAKE = re.compile(r"^\s*litek8s-raft\s+\d+\s+\[\d+\]\s+([\d.]+):\s+sched:sched_waking: comm=tokio-rt-worker")


def main(path):
    starts = []
    with open(path) as trace:
        for number, line in enumerate(trace, 1):
            m = WAKE.match(line)
            if m:
                starts.append((float(m.group(1)), number))
    cycles = [((b[0] - a[0]) * 1e6, a[1]) for a, b in zip(starts, starts[1:])]
    if not cycles:
        sys.exit(f"{path}: no wake-ups of tokio-rt-worker by litek8s-raft")
    us = sorted(c for c, _ in cycles)
    pct = lambda q: us[min(len(us) - 1, int(len(us) * q))]
    print(f"cycles {len(us)}  mean {statistics.mean(us):.0f} µs  p10 {pct(.1):.0f}  "
          f"p50 {pct(.5):.0f}  p90 {pct(.9):.0f}  p99 {pct(.99):.0f}  max {us[-1]:.0f}")
    for c, line in sorted(cycles, reverse=True)[:5]:
        print(f"  {c:.0f} µs from line {line}")


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: write-cycles.py <perf script output>")
    main(sys.argv[1])
