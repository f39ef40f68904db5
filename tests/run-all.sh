#!/usr/bin/env bash
# The whole test suite, from a fresh Debian machine with Rust:
#   1. installs missing tools (Debian packages only when a tool is missing),
#   2. makes the Python virtualenv .venv (kubernetes==37.*, pytest), reused when present,
#   3. cargo test --all-targets --features failpoints (unit tests, integration tests against
#      the real binary, kube-rs, durability, WAL corruption, bad input; the feature compiles in
#      the fail points that some of those tests arm, see src/failpoints.rs),
#   4. the pytest suite in tests/python (leader election, watch resume, 410 relist),
#   5. the kubectl scenarios with kubectl 1.27 and 1.33: tests/kubectl/scenario.sh against a
#      single server and against a follower of a 3-server cluster, tests/kubectl/workloads.sh
#      (workload kinds) and tests/kubectl/apply.sh (apply, server-side apply, diff, patch, edit,
#      dry run, namespace deletion) against a single server, and tests/controllers/run.sh
#      (controllers and scheduler, with a fake kubelet) against a single server with the
#      first kubectl version and a follower of a 3-server cluster with the last,
#   6. the packaging hooks and `systemd-analyze verify`/`security` of the units,
#   7. the Debian and RPM packages (built once: tests/packaging_packages.sh) and the booted
#      Debian 12 tests with them (tests/systemd/run.sh: single server, golden image, 3-server
#      cluster in systemd-nspawn containers; the rootfs is cached in /var/cache/litek8s-test).
#      The packages' release build starts in the background at nice 19 once step 3 is done,
#      on the CPU steps 4–6 leave idle; step 7 waits for it.
# Prints PASS/FAIL per step and a final `N passed, N failed` line (counting individual tests);
# exits non-zero if anything failed.
#
# Environment: KUBECTL_VERSIONS (default "1.27 1.33"), SKIP_CARGO=1, SKIP_PYTHON=1,
# SKIP_KUBECTL=1, SKIP_PACKAGING=1 (steps 6 and 7), SKIP_PACKAGES=1 (step 7),
# SKIP_SYSTEMD_E2E=1 (the booted tests of step 7) to leave a step out while iterating.
set -uo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
# shellcheck source=lib.sh
source "$ROOT/tests/lib.sh"

OUT=$ROOT/target/test-logs
mkdir -p "$OUT"
TOTAL_PASSED=0
TOTAL_FAILED=0
TOTAL_SKIPPED=0
STEP_RESULTS=()
START=$(date +%s)

step_result() { # NAME PASSED FAILED [SKIPPED]
    TOTAL_PASSED=$((TOTAL_PASSED + $2))
    TOTAL_FAILED=$((TOTAL_FAILED + $3))
    TOTAL_SKIPPED=$((TOTAL_SKIPPED + ${4:-0}))
    local verdict=PASS
    [ "$3" -gt 0 ] && verdict=FAIL
    STEP_RESULTS+=("$verdict $1: $2 passed, $3 failed${4:+, $4 skipped}")
    echo "$verdict $1: $2 passed, $3 failed${4:+, $4 skipped}"
}

# The result of a script step from its log: its FAIL lines, and its last
# `N passed, N failed` line (none at all counts as one failure).
script_result() { # NAME LOG
    local last p f
    grep -E '^(FAIL|    \|)' "$2" | head -200
    last=$(grep -E '[0-9]+ passed, [0-9]+ failed' "$2" | tail -n 1)
    p=$(sed -nE 's/(^|.*[^0-9])([0-9]+) passed, ([0-9]+) failed.*/\2/p' <<<"$last")
    f=$(sed -nE 's/(^|.*[^0-9])([0-9]+) passed, ([0-9]+) failed.*/\3/p' <<<"$last")
    if [ -z "$p" ]; then
        p=0
        f=1
        tail -20 "$2"
    fi
    step_result "$1" "$p" "$f"
}

as_root() {
    if [ "$(id -u)" = 0 ]; then "$@"; elif command -v sudo >/dev/null; then sudo "$@"; else
        echo "need root to run: $*" >&2
        return 1
    fi
}

# The Debian tools the packages and the booted tests need (step 7).
install_packaging_tools() {
    need=()
    command -v dpkg-buildpackage >/dev/null || need+=(dpkg-dev)
    command -v dh >/dev/null || need+=(debhelper)
    command -v lintian >/dev/null || need+=(lintian)
    command -v rpmbuild >/dev/null || need+=(rpm)
    command -v fakeroot >/dev/null || need+=(fakeroot)
    command -v git >/dev/null || need+=(git)
    if [ "${SKIP_SYSTEMD_E2E:-0}" != 1 ]; then
        command -v debootstrap >/dev/null || need+=(debootstrap)
        command -v systemd-nspawn >/dev/null || need+=(systemd-container)
    fi
    if [ ${#need[@]} -gt 0 ]; then
        echo "installing Debian packages: ${need[*]}"
        as_root env DEBIAN_FRONTEND=noninteractive apt-get update -qq >/dev/null &&
            as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
                "${need[@]}" >/dev/null || echo "apt-get install failed for: ${need[*]}"
    fi
}

# --- 1. tools
echo "== tools"
missing=()
command -v curl >/dev/null || missing+=(curl)
command -v jq >/dev/null || missing+=(jq)
command -v python3 >/dev/null || missing+=(python3)
if command -v python3 >/dev/null && ! python3 -c 'import venv, ensurepip' 2>/dev/null; then
    missing+=(python3-venv)
fi
# The node agent's image tests: a static busybox for offline test images, a registry to push
# them to, htpasswd for its Basic-auth variant.
dpkg-query -W -f='${Status}' busybox-static 2>/dev/null | grep -q 'ok installed' || missing+=(busybox-static)
command -v docker-registry >/dev/null || missing+=(docker-registry)
command -v htpasswd >/dev/null || missing+=(apache2-utils)
command -v cargo >/dev/null || {
    echo "FAIL cargo not found: install Rust first"
    echo "0 passed, 1 failed"
    exit 1
}
# The container runtime and pod tests (tests/agent_runtime.rs, tests/agent_pods.rs): an OCI
# runtime, conmon, the CNI plugins, a static busybox for the test root filesystem, ip.
command -v runc >/dev/null || command -v crun >/dev/null || missing+=(runc)
command -v conmon >/dev/null || missing+=(conmon)
[ -x /usr/lib/cni/bridge ] || missing+=(containernetworking-plugins)
dpkg -s busybox-static >/dev/null 2>&1 || missing+=(busybox-static)
command -v ip >/dev/null || missing+=(iproute2)
# The Service proxy's and network policies' tests (tests/agent_proxy.rs, tests/agent_netpol.rs):
# nft for their rules, conntrack for UDP flushes.
command -v nft >/dev/null || missing+=(nftables)
command -v conntrack >/dev/null || missing+=(conntrack)
if [ ${#missing[@]} -gt 0 ]; then
    echo "installing Debian packages: ${missing[*]}"
    as_root env DEBIAN_FRONTEND=noninteractive apt-get update -qq >/dev/null &&
        as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
            "${missing[@]}" >/dev/null ||
        echo "apt-get install failed for: ${missing[*]}"
fi
echo "tools ready: $(python3 --version 2>&1), curl, jq, busybox, docker-registry, htpasswd, $(cargo --version)"

# --- 2. virtualenv
echo "== python virtualenv (.venv)"
VENV=$ROOT/.venv
if ! "$VENV/bin/python" -c 'import kubernetes, pytest, sys; sys.exit(0 if kubernetes.__version__.startswith("37.") else 1)' 2>/dev/null; then
    [ -x "$VENV/bin/python" ] || python3 -m venv "$VENV"
    "$VENV/bin/pip" install -q --disable-pip-version-check 'kubernetes==37.*' 'pytest>=8' ||
        echo "pip install failed"
fi
"$VENV/bin/python" -c 'import kubernetes, pytest; print("kubernetes", kubernetes.__version__, "pytest", pytest.__version__)' ||
    echo "virtualenv is not usable"

# --- 3. cargo test
TARGET_DIR=$(cargo metadata --format-version 1 --no-deps 2>/dev/null | jq -r .target_directory)
TARGET_DIR=${TARGET_DIR:-$ROOT/target}
export LITEK8S_BIN=$TARGET_DIR/debug/litek8s
if [ "${SKIP_CARGO:-0}" != 1 ]; then
    echo "== cargo test --all-targets --features failpoints (log: $OUT/cargo-test.log)"
    cargo test --all-targets --features failpoints --no-fail-fast >"$OUT/cargo-test.log" 2>&1
    cargo_rc=$?
    grep -E '^\s+Running |^test result:|^error(\[|:)|^test .* FAILED$' "$OUT/cargo-test.log"
    p=0 f=0
    while read -r a b; do
        p=$((p + a))
        f=$((f + b))
    done < <(sed -nE 's/^test result: [A-Za-z]+\. ([0-9]+) passed; ([0-9]+) failed.*/\1 \2/p' "$OUT/cargo-test.log")
    if [ "$cargo_rc" -ne 0 ]; then
        # Print what failed: the failures sections, or the build errors.
        awk '/^failures:$/{on=1} on{print} /^test result:/{on=0}' "$OUT/cargo-test.log" | head -300
        if [ "$f" -eq 0 ]; then
            grep -E -A12 '^error' "$OUT/cargo-test.log" | head -80
            f=1
        fi
    fi
    step_result "cargo test" "$p" "$f"
else
    echo "== cargo test skipped (SKIP_CARGO=1)"
    cargo build -q --features failpoints 2>&1 | tail -20
fi

if [ ! -x "$LITEK8S_BIN" ]; then
    cargo build -q --features failpoints 2>&1 | tail -20
fi

# The packages' release build (step 7), started now in the background at the lowest
# priority: it takes the CPU the Python and kubectl steps leave idle, and step 7 then finds it
# done (packaging/build-packages.sh --release-build-only).
prebuild_pid=
if [ "${SKIP_PACKAGING:-0}" != 1 ] && [ "${SKIP_PACKAGES:-0}" != 1 ] && [ -z "${PACKAGES_DIR:-}" ]; then
    install_packaging_tools
    CARGO_TARGET_DIR=$TARGET_DIR nice -n 19 sh "$ROOT/packaging/build-packages.sh" --release-build-only \
        >"$OUT/packages-release-build.log" 2>&1 &
    prebuild_pid=$!
fi

# --- 4. pytest
if [ "${SKIP_PYTHON:-0}" != 1 ]; then
    echo "== pytest tests/python (log: $OUT/pytest.log)"
    rm -rf "$OUT/python"
    "$VENV/bin/python" -m pytest -q -rA -p no:cacheprovider tests/python >"$OUT/pytest.log" 2>&1
    py_rc=$?
    grep -E '^(PASSED|FAILED|ERROR) ' "$OUT/pytest.log"
    last=$(tail -n 1 "$OUT/pytest.log")
    p=$(grep -oE '[0-9]+ passed' <<<"$last" | grep -oE '^[0-9]+' | head -n 1)
    p=${p:-0}
    f=0
    for n in $(grep -oE '[0-9]+ (failed|errors?)' <<<"$last" | grep -oE '^[0-9]+'); do
        f=$((f + n))
    done
    if [ "$py_rc" -ne 0 ]; then
        # 5 = no tests collected: that is a failure of the suite too.
        [ "$f" -eq 0 ] && f=1
        awk '/^=+ (FAILURES|ERRORS) =+$/{on=1} /^=+ short test summary/{on=0} on{print}' "$OUT/pytest.log" | head -300
        [ -d "$OUT/python" ] && echo "server logs of the failed tests: $OUT/python/"
    fi
    echo "$last"
    step_result "pytest" "$p" "$f"
fi

# --- 5. kubectl scenarios: against a single server, and against a follower of a 3-server
# cluster (SCENARIO_HA=1)
if [ "${SKIP_KUBECTL:-0}" != 1 ]; then
    read -ra versions <<<"${KUBECTL_VERSIONS:-1.27 1.33}"
    first_version=${versions[0]}
    last_version=${versions[${#versions[@]} - 1]}
    for v in "${versions[@]}"; do
        kc=/usr/lib/google-cloud-sdk/bin/kubectl.$v
        for ha in 0 1; do
            name="kubectl $v scenario"
            log=$OUT/kubectl-$v.log
            if [ "$ha" = 1 ]; then
                name="kubectl $v scenario (HA follower)"
                log=$OUT/kubectl-$v-ha.log
            fi
            if [ ! -x "$kc" ]; then
                echo "SKIP $name: $kc not installed"
                step_result "$name" 0 0 1
                continue
            fi
            echo "== $name (log: $log)"
            SCENARIO_HA=$ha bash "$ROOT/tests/kubectl/scenario.sh" "$kc" >"$log" 2>&1
            script_result "$name" "$log"
        done
        # The controllers and the scheduler with a fake kubelet (tests/controllers/run.sh):
        # the first kubectl version against a single server, the last against a follower of
        # a 3-server cluster (both when only one version is given). kubectl only drives these
        # scenarios, the behaviour under test is the server's, so running each topology once
        # keeps their ~3 minutes each out of the suite twice over; the kubectl versions
        # themselves are covered by every other step.
        ha_runs=()
        [ "$v" = "$first_version" ] && ha_runs+=(0)
        [ "$v" = "$last_version" ] && ha_runs+=(1)
        for ha in "${ha_runs[@]}"; do
            name="controllers kubectl $v"
            log=$OUT/controllers-$v.log
            flag=()
            if [ "$ha" = 1 ]; then
                name="controllers kubectl $v (HA follower)"
                log=$OUT/controllers-$v-ha.log
                flag=(--ha)
            fi
            if [ ! -x "$kc" ]; then
                echo "SKIP $name: $kc not installed"
                step_result "$name" 0 0 1
                continue
            fi
            echo "== $name (log: $log)"
            bash "$ROOT/tests/controllers/run.sh" "$kc" "${flag[@]}" >"$log" 2>&1
            script_result "$name" "$log"
        done
        # The workload kinds (workloads.sh) and the write paths (apply.sh), against a single
        # server each.
        for script in workloads apply; do
            name="kubectl $v $script"
            log=$OUT/kubectl-$v-$script.log
            if [ ! -x "$kc" ]; then
                echo "SKIP $name: $kc not installed"
                step_result "$name" 0 0 1
                continue
            fi
            echo "== $name (log: $log)"
            bash "$ROOT/tests/kubectl/$script.sh" "$kc" >"$log" 2>&1
            script_result "$name" "$log"
        done
    done
fi

# --- 6. packaging: the systemd hooks and units
if [ "${SKIP_PACKAGING:-0}" != 1 ]; then
    echo "== packaging hooks (log: $OUT/packaging-hooks.log)"
    if sh "$ROOT/tests/packaging_hooks.sh" >"$OUT/packaging-hooks.log" 2>&1; then hooks_failed=0; else hooks_failed=1; fi
    grep -E '^FAIL' "$OUT/packaging-hooks.log" | head -50
    last=$(grep -E '[0-9]+ passed, [0-9]+ failed' "$OUT/packaging-hooks.log" | tail -n 1)
    p=$(sed -nE 's/(^|.*[^0-9])([0-9]+) passed, ([0-9]+) failed.*/\2/p' <<<"$last")
    f=$(sed -nE 's/(^|.*[^0-9])([0-9]+) passed, ([0-9]+) failed.*/\3/p' <<<"$last")
    [ -n "$p" ] || { p=0; f=1; tail -20 "$OUT/packaging-hooks.log"; }
    [ "$hooks_failed" = 0 ] || [ "$f" != 0 ] || f=1
    step_result "packaging hooks" "$p" "$f"

    if ! command -v systemd-analyze >/dev/null 2>&1; then
        as_root apt-get install -y -qq systemd >/dev/null
    fi
    echo "== systemd units (log: $OUT/packaging-units.log)"
    if sh "$ROOT/tests/packaging_units.sh" >"$OUT/packaging-units.log" 2>&1; then
        step_result "systemd units" "$(grep -c '^ok' "$OUT/packaging-units.log")" 0
    else
        grep -E '^FAIL' "$OUT/packaging-units.log" | head -20
        step_result "systemd units" "$(grep -c '^ok' "$OUT/packaging-units.log")" "$(grep -c '^FAIL' "$OUT/packaging-units.log")"
    fi
fi

# --- 7. the packages (dpkg-buildpackage, lintian, rpmbuild; one release build for both) and
# the booted-Debian tests (tests/systemd/run.sh: single, golden, cluster, agent, install, network, apply) with those .debs.
# Needs root; installs its Debian tools; the debootstrapped rootfs is cached in
# /var/cache/litek8s-test (LITEK8S_TEST_CACHE). SKIP_PACKAGES=1 leaves out both,
# SKIP_SYSTEMD_E2E=1 only the booted tests; PACKAGES_DIR=DIR tests prebuilt packages instead
# of building them.
count_step() { # NAME LOG RC: sums the log's "N passed, M failed" line into the summary
    local last p f
    last=$(grep -E '[0-9]+ passed, [0-9]+ failed' "$2" | tail -n 1)
    p=$(sed -nE 's/(^|.*[^0-9])([0-9]+) passed, ([0-9]+) failed.*/\2/p' <<<"$last")
    f=$(sed -nE 's/(^|.*[^0-9])([0-9]+) passed, ([0-9]+) failed.*/\3/p' <<<"$last")
    [ -n "$p" ] || { p=0; f=1; tail -20 "$2"; }
    [ "$3" = 0 ] || [ "$f" != 0 ] || f=1
    step_result "$1" "$p" "$f"
}
if [ "${SKIP_PACKAGING:-0}" != 1 ] && [ "${SKIP_PACKAGES:-0}" != 1 ]; then
    install_packaging_tools
    if [ -n "$prebuild_pid" ]; then
        # The release build started after the cargo tests (below step 3): wait for it. Its
        # result does not matter: the packages' own build reports any error, and finds
        # nothing left to do when it succeeded.
        wait "$prebuild_pid" || true
        echo "(release build for the packages, started in the background: log $OUT/packages-release-build.log)"
    fi
    pkgdir=${PACKAGES_DIR:-$TARGET_DIR/packages}
    t0=$(date +%s)
    echo "== packages: build, lintian, rpm (log: $OUT/packaging-packages.log)"
    if [ -n "${PACKAGES_DIR:-}" ]; then
        sh "$ROOT/tests/packaging_packages.sh" "$pkgdir" >"$OUT/packaging-packages.log" 2>&1
    else
        CARGO_TARGET_DIR=$TARGET_DIR sh "$ROOT/tests/packaging_packages.sh" --build "$pkgdir" \
            >"$OUT/packaging-packages.log" 2>&1
    fi
    rc=$?
    grep -E '^FAIL|^build-packages:' "$OUT/packaging-packages.log" | head -30
    echo "packages took $(($(date +%s) - t0)) s"
    count_step "packages" "$OUT/packaging-packages.log" "$rc"

    if [ "${SKIP_SYSTEMD_E2E:-0}" != 1 ]; then
        t0=$(date +%s)
        echo "== booted Debian: single, golden, cluster, agent, install, network, apply (log: $OUT/systemd-e2e.log)"
        kc=$(command -v kubectl || ls /usr/lib/google-cloud-sdk/bin/kubectl.1.33 2>/dev/null || true)
        as_root env KUBECTL="$kc" bash "$ROOT/tests/systemd/run.sh" --debs "$pkgdir" all \
            >"$OUT/systemd-e2e.log" 2>&1
        rc=$?
        grep -E '^FAIL|^TIMING' "$OUT/systemd-e2e.log" | head -40
        echo "booted Debian tests took $(($(date +%s) - t0)) s"
        count_step "booted Debian (systemd-nspawn)" "$OUT/systemd-e2e.log" "$rc"
    fi
fi

echo
echo "== summary ($(($(date +%s) - START)) s; logs in $OUT)"
for line in "${STEP_RESULTS[@]}"; do echo "$line"; done
if [ "$TOTAL_SKIPPED" -gt 0 ]; then
    echo "${TOTAL_PASSED} passed, ${TOTAL_FAILED} failed, ${TOTAL_SKIPPED} skipped"
else
    echo "${TOTAL_PASSED} passed, ${TOTAL_FAILED} failed"
fi
[ "$TOTAL_FAILED" -eq 0 ] && [ "$TOTAL_PASSED" -gt 0 ]
