# Shared helpers of the shell test scripts (sourced, not run): PASS/FAIL accounting, finding
# the litek8s binary, starting and stopping a server on a free loopback port.
#
# Every check prints one line, `PASS <what>` or `FAIL <what>`; `summary` prints the closing
# `N passed, N failed` line and returns non-zero if anything failed.

PASSED=${PASSED:-0}
FAILED=${FAILED:-0}
FAILED_NAMES=${FAILED_NAMES:-}

pass() {
    PASSED=$((PASSED + 1))
    echo "PASS $*"
}

fail() {
    FAILED=$((FAILED + 1))
    FAILED_NAMES="${FAILED_NAMES}${FAILED_NAMES:+; }$1"
    echo "FAIL $*"
}

# check NAME CMD...: runs CMD, passes if it exits 0.
check() {
    local name=$1
    shift
    if "$@"; then pass "$name"; else fail "$name"; fi
}

# expect_grep NAME PATTERN TEXT: passes if TEXT matches the extended regex PATTERN;
# on failure prints the text.
expect_grep() {
    local name=$1 pattern=$2 text=$3
    if grep -Eq -- "$pattern" <<<"$text"; then
        pass "$name"
    else
        fail "$name (no match for /$pattern/)"
        sed 's/^/    | /' <<<"$text" | head -40
    fi
}

# expect_no_grep NAME PATTERN TEXT: passes if TEXT does not match PATTERN.
expect_no_grep() {
    local name=$1 pattern=$2 text=$3
    if grep -Eq -- "$pattern" <<<"$text"; then
        fail "$name (unexpected match for /$pattern/)"
        sed 's/^/    | /' <<<"$text" | head -40
    else
        pass "$name"
    fi
}

summary() {
    local label=${1:-}
    echo "${label:+$label: }${PASSED} passed, ${FAILED} failed"
    [ "$FAILED" -eq 0 ]
}

# The repository root (parent of tests/).
repo_root() {
    cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd
}

# Path of the litek8s binary: $LITEK8S_BIN, else the debug build in the cargo target dir.
litek8s_bin() {
    if [ -n "${LITEK8S_BIN:-}" ]; then
        echo "$LITEK8S_BIN"
        return
    fi
    local root target
    root=$(repo_root)
    target=${CARGO_TARGET_DIR:-$root/target}
    echo "$target/debug/litek8s"
}

# A free TCP port on 127.0.0.1.
free_port() {
    python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1]); s.close()'
}

# wait_ready PORT [SECONDS]: waits for plain-HTTP /readyz to answer 200.
wait_ready() {
    local port=$1 limit=${2:-60} i
    for ((i = 0; i < limit * 10; i++)); do
        if [ "$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$port/readyz" 2>/dev/null)" = 200 ]; then
            return 0
        fi
        if [ -n "${SERVER_PID:-}" ] && ! kill -0 "$SERVER_PID" 2>/dev/null; then
            return 1
        fi
        sleep 0.1
    done
    return 1
}

# start_server DATA_DIR PORT [EXTRA ARGS...]: starts litek8s apiserver in the background,
# logging to DATA_DIR.log; sets SERVER_PID; waits for /readyz. Returns non-zero (and prints the
# log) if it does not become ready.
start_server() {
    local dir=$1 port=$2
    shift 2
    "$(litek8s_bin)" apiserver --data-dir "$dir" --listen "127.0.0.1:$port" --name test "$@" \
        >>"$dir.log" 2>&1 </dev/null &
    SERVER_PID=$!
    if ! wait_ready "$port" 60; then
        echo "litek8s did not become ready on port $port; log:"
        sed 's/^/    | /' "$dir.log" | tail -40
        return 1
    fi
}

# stop_server: SIGTERM, wait (up to 30 s, then SIGKILL). Returns the exit code.
stop_server() {
    [ -n "${SERVER_PID:-}" ] || return 0
    local pid=$SERVER_PID i rc=0
    SERVER_PID=
    kill -TERM "$pid" 2>/dev/null || true
    for ((i = 0; i < 300; i++)); do
        kill -0 "$pid" 2>/dev/null || break
        sleep 0.1
    done
    kill -KILL "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || rc=$?
    return $rc
}
