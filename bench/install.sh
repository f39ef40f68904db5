#!/bin/bash
# `litek8s cluster apply` times on booted Debian containers: the apply scenario of
# tests/systemd/run.sh (3 servers + 1 agent over ssh), ROUNDS times (default 3), its TIMING
# lines as a table in bench/INSTALL.md (hand-written notes kept, bench/keep-notes.sh).
#
#   sudo bench/install.sh [ROUNDS]
#
# Targets: from nothing to all Ready <= 60 s; a second apply that changes nothing <= 5 s.
# The binary is LITEK8S_APPLY_BIN (default target/debug/litek8s), the agent machine's packages
# those in PACKAGES_DIR (default target/packages: build them first with
# packaging/build-packages.sh); the rootfs build is not timed (it is cached).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/.." && pwd)
debs=${PACKAGES_DIR:-$repo/target/packages}
ls "$debs"/litek8s-agent_*.deb >/dev/null 2>&1 || { echo "no packages in $debs (packaging/build-packages.sh $debs)" >&2; exit 1; }

report() {
    local out=$1 log i
    log=$(mktemp)
    for i in $(seq 1 "$rounds"); do
        "$repo/tests/systemd/run.sh" --debs "$debs" apply | tee -a "$log" | grep -E '^(TIMING|FAIL|systemd e2e)' >&2 \
            || { echo "round $i failed" >&2; rm -f "$log"; exit 1; }
    done
    {
        echo "# cluster apply: 3 servers + 1 agent over ssh"
        echo
        echo "\`sudo bench/install.sh $rounds\` on $(nproc) cores, $(date +%F): \`tests/systemd/run.sh apply\`"
        echo "($rounds rounds; Debian 12 containers booted with systemd-nspawn on a bridge, openssh-server"
        echo "in each; the servers get the binary $(basename "${LITEK8S_APPLY_BIN:-target/debug/litek8s}") copied by apply, the agent the"
        echo ".deb packages of ${debs#"$repo"/} (\`package: deb\`); the kubeconfig goes through \`litek8s lb\`)."
        echo "Targets: from nothing to all Ready <= 60 s, a no-op apply <= 5 s."
        echo "Load average at the end: $(cut -d' ' -f1-3 /proc/loadavg)."
        echo
        echo "| case | median ms | range ms |"
        echo "|---|---|---|"
        grep '^TIMING ' "$log" | sed 's/^TIMING //' | awk -F': ' '
            { sub(/ ms$/, "", $2); v[$1] = v[$1] " " $2; if (!($1 in seen)) { seen[$1] = 1; order[++n] = $1 } }
            END {
                for (i = 1; i <= n; i++) {
                    k = order[i]; m = split(substr(v[k], 2), a, " ")
                    for (x = 1; x <= m; x++) for (y = x + 1; y <= m; y++) if (a[y] + 0 < a[x] + 0) { t = a[x]; a[x] = a[y]; a[y] = t }
                    printf "| %s | %d | %d–%d |\n", k, a[int((m + 1) / 2)], a[1], a[m]
                }
            }'
    } >"$out"
    rm -f "$log"
}

# keep-notes.sh runs this script again as `install.sh --report FILE`.
if [ "${1:-}" = --report ]; then
    rounds=${INSTALL_BENCH_ROUNDS:-3}
    report "$2"
    exit 0
fi
export INSTALL_BENCH_ROUNDS=${1:-3}
"$here/keep-notes.sh" --run "$here/INSTALL.md" "$0" --report
