#!/usr/bin/env bash
# Cluster DNS benchmark: builds bench/dns_bench.rs (release), runs the agent's responder on one
# core against UDP clients on the other, prints the table and writes it as the "## DNS" section
# of bench/NET.md (the other sections of that file are left as they are). Needs 2 cores; no
# root, no network beyond loopback. Takes about 10 s once built.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
PROFILE=${DNS_BENCH_PROFILE:-release}
if [ "$PROFILE" = release ]; then
    cargo build --release -p litek8s-bench --bin dns_bench
else
    cargo build -p litek8s-bench --bin dns_bench
    PROFILE=debug
fi
TARGET_DIR=$(cargo metadata --format-version 1 --no-deps | jq -r .target_directory)
echo "cores: $(nproc)"
report=$(mktemp)
"$TARGET_DIR/$PROFILE/dns_bench" "$report"
# Splice the section into bench/NET.md: from its "## DNS" heading to the next "## " heading.
out=bench/NET.md
[ -f "$out" ] || printf '# Networking benchmarks\n\n' > "$out"
python3 - "$out" "$report" <<'PY'
import re, sys
path, report = sys.argv[1], open(sys.argv[2]).read().rstrip("\n") + "\n"
text = open(path).read()
m = re.search(r"^## DNS\n(?:(?!^## ).*\n?)*", text, flags=re.M)
if m:
    keep = text[m.start():m.end()]
    notes = re.search(r"^### Notes\n(?:.*\n?)*", keep, flags=re.M)
    section = report + ("\n" + notes.group(0) if notes else "")
    text = text[:m.start()] + section + ("\n" if text[m.end():] else "") + text[m.end():]
else:
    text = text.rstrip("\n") + "\n\n" + report
open(path, "w").write(text)
PY
rm -f "$report"
