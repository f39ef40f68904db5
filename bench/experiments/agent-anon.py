#!/usr/bin/env python3
"""Where a process's anonymous memory is, from /proc/PID/smaps: thread stacks (a read-write
anonymous mapping right above its guard page), the allocator's arenas (the large anonymous
mappings), the relocated data of the binary (its private file-backed pages), the rest; and its
threads by name. The probe of `AGENT_BENCH_MEMORY_ONLY=1 agent_bench` (bench/agent_bench.rs):
    AGENT_BENCH_PROBE=bench/experiments/agent-anon.py
    bench/experiments/agent-anon.py PID
"""
import collections, os, re, sys
pid = sys.argv[1]
status = open(f"/proc/{pid}/status").read()
def field(n):
    m = re.search(rf"^{n}:\s+(\d+)", status, re.M)
    return int(m.group(1)) if m else 0
maps = []
cur = None
for line in open(f"/proc/{pid}/smaps"):
    if re.match(r"^[0-9a-f]+-[0-9a-f]+ ", line):
        parts = line.split()
        lo, hi = (int(x, 16) for x in parts[0].split("-"))
        cur = {"lo": lo, "hi": hi, "perm": parts[1], "name": parts[5] if len(parts) > 5 else "", "Rss": 0, "Anonymous": 0}
        maps.append(cur)
    else:
        k, _, v = line.partition(":")
        if k in ("Rss", "Anonymous", "Private_Dirty"):
            cur[k] = int(v.split()[0])
buckets = {}
def add(k, m):
    b = buckets.setdefault(k, [0, 0, 0])
    b[0] += 1; b[1] += m["Anonymous"]; b[2] += (m["hi"] - m["lo"]) // 1024
stacks = []
for i, m in enumerate(maps):
    size = (m["hi"] - m["lo"]) // 1024
    if m["Anonymous"] == 0 and m["name"] == "":
        continue
    if m["name"] and not m["name"].startswith("["):
        add("file-backed private (relro/data)", m); continue
    if m["name"]:
        add(m["name"], m); continue
    prev = maps[i - 1] if i else None
    # a thread stack: rw anonymous right above a ---p guard page
    if prev and prev["perm"].startswith("---") and prev["hi"] == m["lo"] and size <= 8 * 1024 + 64 and (prev["hi"] - prev["lo"]) <= 64 * 1024:
        add("thread stacks", m); stacks.append(m["Anonymous"]); continue
    if size >= 30 * 1024:
        add("large anon (allocator arenas/segments)", m); continue
    add("small anon", m)
print(f"pid {pid}: VmRSS {field('VmRSS')/1024:.1f} MiB, RssAnon {field('RssAnon')/1024:.1f} MiB, RssFile {field('RssFile')/1024:.1f} MiB, Threads {field('Threads')}")
for k, (n, anon, size) in sorted(buckets.items(), key=lambda kv: -kv[1][1]):
    print(f"  {k:42s} {n:4d} maps  {anon/1024:7.2f} MiB anon  ({size/1024:.0f} MiB mapped)")
if stacks:
    print(f"  stack rss KiB each: {sorted(stacks, reverse=True)}")
names = collections.Counter()
for tid in os.listdir(f"/proc/{pid}/task"):
    try:
        names[open(f"/proc/{pid}/task/{tid}/comm").read().strip()] += 1
    except OSError:
        pass
print("  threads: " + ", ".join(f"{n} {name}" for name, n in names.most_common()))
