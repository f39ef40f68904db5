#!/usr/bin/env python3
"""Live heap bytes by allocation site at one moment, from heaptrack, grouped by the nearest
frame in litek8s's own source (`src/`).

heaptrack sees glibc malloc only, so this needs a temporary build whose global allocator is
the system one (the `#[global_allocator]` of src/allocator.rs left out). Then:

  # run the process with heaptrack's preload, the raw stream into a file (same pid: exec)
  LD_PRELOAD=/usr/lib/heaptrack/libheaptrack_preload.so DUMP_HEAPTRACK_OUTPUT=/tmp/h.raw \
      target/release/litek8s apiserver ... &
  # at the moment of interest, copy the stream so far: what it allocated and has not freed
  cp /tmp/h.raw /tmp/h.at-idle
  # (cut a torn last line), interpret, and write the live bytes' stacks
  /usr/lib/heaptrack/libexec/heaptrack_interpret < /tmp/h.at-idle | zstd > /tmp/h.zst
  heaptrack_print -f /tmp/h.zst -l 0 -p 0 -a 0 -T 0 --flamegraph-cost-type leaked -F /tmp/h.stacks
  bench/experiments/heap-sites.py /tmp/h.stacks [FRAMES [ROWS]]

For the agent, `AGENT_BENCH_PROBE` can take the copy at each of agent_bench's readings.
"""
import collections
import os
import re
import sys

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "src")
ours = {f for _, _, files in os.walk(ROOT) for f in files if f.endswith(".rs")}
# Too common a name to say the frame is ours; the allocator's frames are in every stack.
ours -= {"allocator.rs", "mod.rs", "lib.rs", "main.rs"}
frames_shown = int(sys.argv[2]) if len(sys.argv) > 2 else 2
rows = int(sys.argv[3]) if len(sys.argv) > 3 else 40

by_site = collections.Counter()
total = 0
for line in open(sys.argv[1]):
    stack, _, count = line.rstrip("\n").rpartition(" ")
    total += int(count)
    frames = stack.split(";")  # outermost first
    own = [i for i, f in enumerate(frames)
           if (m := re.search(r"\(([^()]+\.rs)\)$", f)) and m.group(1) in ours]
    if own:
        i = own[-1]
        site = " <- ".join(reversed(frames[max(0, i - frames_shown + 1):i + 1]))
    else:
        site = "(no litek8s frame) " + " <- ".join(reversed(frames[-3:]))
    by_site[site] += int(count)
print(f"live: {total / 1048576:.2f} MiB")
for site, count in by_site.most_common(rows):
    print(f"{count / 1024:9.1f} KiB  {site[:240]}")
