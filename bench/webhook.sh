#!/usr/bin/env bash
# Admission webhook benchmark: ConfigMap creates with no webhook and with a no-op validating
# webhook, and the webhook's own time (bench/webhook_bench.rs). Writes its section,
# "## Admission webhooks", into bench/API.md: replaced in place, or added at the end (after
# "## Notes", which bench/api.sh keeps). `--debug` uses debug builds (a loaded machine).
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
PROFILE=release
FLAG=--release
if [ "${1:-}" = --debug ]; then
    PROFILE=debug
    FLAG=
    export WEBHOOK_BENCH_BUILD="debug build: the machine was too loaded for a release build"
else
    export WEBHOOK_BENCH_BUILD="release build"
fi
cargo build $FLAG -p litek8s --bin litek8s && cargo build $FLAG -p litek8s-bench --bin webhook_bench
TARGET_DIR=$(cargo metadata --format-version 1 --no-deps | jq -r .target_directory)
export LITEK8S_BIN=$TARGET_DIR/$PROFILE/litek8s
echo "cores: $(nproc)"
section=$(mktemp)
"$TARGET_DIR/$PROFILE/webhook_bench" "$section"
python3 - "$section" bench/API.md <<'PY'
import re, sys
section = open(sys.argv[1]).read()
path = sys.argv[2]
text = open(path).read()
pattern = re.compile(r"^## Admission webhooks\n.*?(?=^## |\Z)", re.S | re.M)
if pattern.search(text):
    text = pattern.sub(lambda _: section + "\n", text, count=1)
else:
    text = text.rstrip("\n") + "\n\n" + section
open(path, "w").write(text.rstrip("\n") + "\n")
PY
rm -f "$section"
