#!/usr/bin/env python3
"""The functions of BINARY that ran an instruction in callgrind outputs of it, in BINARY's
address order: the list bench/startup-order.sh writes to src/startup.order. With --summary,
how that code lies in .text instead: the functions' size together, and the distinct 4 KiB pages
and 64 KiB windows (the kernel maps a file 64 KiB around a fault) their instructions lie in
(`STARTUP_ORDER_KEEP=1 bash bench/startup-order.sh` keeps the profiled copy and its outputs).

    bench/startup_functions.py [--summary] BINARY CALLGRIND_OUT...
"""
import bisect
import subprocess
import sys

args = sys.argv[1:]
summary = args[:1] == ["--summary"]
if summary:
    args = args[1:]
binary, outputs = args[0], args[1:]
functions = []
for line in subprocess.run(["nm", "-S", "--defined-only", binary], check=True,
                           capture_output=True, text=True).stdout.splitlines():
    fields = line.split()
    if len(fields) == 4 and fields[2] in "tTwW":
        functions.append((int(fields[0], 16), max(int(fields[1], 16), 1), fields[3]))
functions.sort()
starts = [f[0] for f in functions]
ran, pages = {}, set()
for output in outputs:
    in_binary = False
    for line in open(output):
        if line.startswith("ob="):
            in_binary = line[3:].strip() == binary
        elif in_binary and line.startswith("0x"):
            address = int(line.split()[0], 16)
            pages.add(address >> 12)
            i = bisect.bisect_right(starts, address) - 1
            if i >= 0 and address < functions[i][0] + functions[i][1]:
                ran[functions[i][2]] = functions[i]
if not summary:
    for name in sorted(ran, key=lambda n: ran[n][0]):
        print(name)
    sys.exit(0)
windows = {page >> 4 for page in pages}
print(f"{len(ran)} functions ran, {sum(f[1] for f in ran.values()) / 1048576:.2f} MiB of code together; "
      f"their instructions lie in {len(pages)} pages of 4 KiB and {len(windows)} windows of "
      f"64 KiB ({len(windows) * 64 / 1024:.1f} MiB)")
