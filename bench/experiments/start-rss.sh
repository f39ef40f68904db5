#!/usr/bin/env bash
# Resident memory of an API server as bench/api_bench.rs starts it for "RSS idle" (fresh data
# directory, no controllers, no scheduler, info logging), WAIT seconds (default 2) after
# /readyz: VmRSS, RssAnon, RssFile, and how much of each section of the executable is resident.
#   bench/experiments/start-rss.sh BINARY [evict]
# With `evict`, the binary is dropped from the page cache first (as after a boot): the file-backed
# part depends on how the page cache got the file (docs/performance-notes.md, "The server's
# start-up code placed together").
set -euo pipefail
bin=$(realpath "$1")
dir=$(mktemp -d /tmp/litek8s-start-rss.XXXXXX)
port=$((20000 + RANDOM % 20000))
if [ "${2:-}" = evict ]; then
    sync "$bin"
    python3 -c 'import os, sys; fd = os.open(sys.argv[1], os.O_RDONLY); os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)' "$bin"
fi
LITEK8S_LOG=info "$bin" apiserver --data-dir "$dir/data" --listen 127.0.0.1:$port --name e2e \
    --disable-controller-manager --disable-scheduler >"$dir/log" 2>&1 &
pid=$!
trap 'kill $pid 2>/dev/null; wait $pid 2>/dev/null; rm -rf "$dir"' EXIT
for _ in $(seq 1 300); do
    curl -s -m 1 http://127.0.0.1:$port/readyz 2>/dev/null | grep -q ok && break
    sleep 0.1
done
sleep "${WAIT:-2}"
grep -E '^(VmRSS|RssAnon|RssFile)' /proc/$pid/status | tr -s ' \t' ' ' | tr '\n' ' '
echo
python3 - "$pid" "$bin" <<'PY'
"""Resident KiB of each allocated section of the executable, from /proc/PID/pagemap."""
import struct, subprocess, sys
pid, binary = int(sys.argv[1]), sys.argv[2]
sections = []
for line in subprocess.run(["readelf", "-SW", binary], check=True, capture_output=True,
                           text=True).stdout.splitlines():
    fields = line.replace("[ ", "[").split()
    if len(fields) > 6 and fields[0].startswith("[") and fields[0] != "[Nr]":
        try:
            sections.append((fields[1], int(fields[3], 16), int(fields[5], 16)))
        except ValueError:
            pass
maps = [l for l in open(f"/proc/{pid}/maps") if l.rstrip().endswith(binary)]
base = int(maps[0].split("-")[0], 16)  # the first segment maps address 0 of the file
pagemap = open(f"/proc/{pid}/pagemap", "rb")
for name, address, size in sections:
    if address == 0 or size < 64 * 1024:
        continue
    first, last = (base + address) >> 12, (base + address + size - 1) >> 12
    pagemap.seek(first * 8)
    entries = pagemap.read((last - first + 1) * 8)
    present = sum((struct.unpack_from("<Q", entries, i * 8)[0] >> 63) & 1
                  for i in range(last - first + 1))
    print(f"{name:20} {size // 1024:7} KiB, resident {present * 4:7} KiB")
PY
