#!/usr/bin/env python3
"""Time faulting in fresh anonymous memory, with and without transparent huge pages.

Usage: python3 bench/experiments/huge-page-faults.py [MiB]  (default 128)

Prints the time to touch every 4 KiB page of an MADV_HUGEPAGE mapping and of an
MADV_NOHUGEPAGE one. Run it three times in a row: on a VM whose guest reports free memory to
its host, the first huge-page pass pays for the host populating that memory again
(docs/performance-notes.md, "The benchmark with the server's allocator").
"""
import mmap
import sys
import time

MIB = 1024 * 1024
size_mib = int(sys.argv[1]) if len(sys.argv) > 1 else 128
huge_pages = size_mib // 2
for mode, advice in (("huge", mmap.MADV_HUGEPAGE), ("small", mmap.MADV_NOHUGEPAGE)):
    # One spare huge page so that an aligned 2 MiB range fits whatever the start address.
    m = mmap.mmap(-1, (huge_pages + 1) * 2 * MIB, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    m.madvise(advice)
    start = time.perf_counter()
    for offset in range(0, huge_pages * 2 * MIB, 4096):
        m[offset] = 1
    seconds = time.perf_counter() - start
    print(f"{mode}: {seconds * 1000:.1f} ms for {huge_pages * 2} MiB, "
          f"{seconds / huge_pages * 1000:.2f} ms per 2 MiB")
    m.close()
