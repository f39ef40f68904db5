# Shared start of the kubectl scripts that drive one fresh single server (workloads.sh,
# apply.sh): checks the kubectl binary, starts `litek8s apiserver` in a temporary directory,
# removes it on exit (kept when a check failed or KEEP_WORK=1), and defines `k` (kubectl
# against that server, stderr included) and `T` (the label prefix of every check).
#
# Usage (after sourcing tests/lib.sh):  kubectl_suite_start KUBECTL WHAT
# Sets KUBECTL_BIN, LABEL, WORK, DATA, PORT, KC; exits with a failed check when the server
# does not start.

kubectl_suite_cleanup() {
    stop_server >/dev/null 2>&1 || true
    if [ "${KEEP_WORK:-0}" = 1 ] || [ "$FAILED" -gt 0 ]; then
        echo "($LABEL: work directory kept: $WORK)"
    else
        rm -rf "$WORK"
    fi
}

kubectl_suite_start() {
    KUBECTL_BIN=$1
    local what=$2 version
    if ! command -v "$KUBECTL_BIN" >/dev/null 2>&1; then
        echo "FAIL kubectl not found: $KUBECTL_BIN"
        echo "0 passed, 1 failed"
        exit 1
    fi
    version=$("$KUBECTL_BIN" version --client -o json 2>/dev/null | jq -r '.clientVersion.gitVersion' 2>/dev/null)
    LABEL="kubectl ${version:-$KUBECTL_BIN} $what"
    WORK=$(mktemp -d "/tmp/litek8s-${what//[^a-z]/}.XXXXXX")
    DATA=$WORK/data
    PORT=$(free_port)
    trap kubectl_suite_cleanup EXIT

    echo "== $LABEL against litek8s on 127.0.0.1:$PORT"
    if ! start_server "$DATA" "$PORT"; then
        fail "$LABEL: server starts"
        summary "$LABEL"
        exit 1
    fi
    pass "$LABEL: server starts"
    KC=$DATA/kubeconfig.yaml
    T="$LABEL:"
}

k() { "$KUBECTL_BIN" --kubeconfig "$KC" --request-timeout=30s "$@" 2>&1; }
