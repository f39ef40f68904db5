# The environment of the controller scenarios (sourced by run.sh after tests/lib.sh): a single
# server or a 3-server cluster, three Node objects kept alive by the fake kubelet, and the
# helpers scenarios use.
#
# Scenarios (tests/controllers/scenarios/NAME.sh) are sourced in a subshell-free block with:
#   NS       a fresh namespace for the scenario (created before, deleted after)
#   k ...    kubectl against the server under test (stderr included)
#   T        the label prefix of every check ("kubectl v1.33.0 single:")
#   HA       1 when running against a cluster follower
# and may call the functions below.

CONTROL=
KUBELET_PID=
CLUSTER_PIDS=()
CLUSTER_NAMES=()
# Per member (same index): its API port and the arguments it was started with, so that a
# member a scenario killed can be started again on its data directory (revive_killed).
CLUSTER_PORTS=()
CLUSTER_ARGS=()

controllers_env_cleanup() {
    stop_kubelet
    for pid in "${CLUSTER_PIDS[@]}"; do kill "$pid" 2>/dev/null || true; done
    stop_server >/dev/null 2>&1 || true
    if [ "${KEEP_WORK:-0}" = 1 ] || [ "$FAILED" -gt 0 ]; then
        echo "($LABEL: work directory kept: $WORK)"
    else
        rm -rf "$WORK"
    fi
}

# controllers_env_start KUBECTL HA
controllers_env_start() {
    KUBECTL_BIN=$1
    HA=$2
    local version mode
    if ! command -v "$KUBECTL_BIN" >/dev/null 2>&1; then
        echo "FAIL kubectl not found: $KUBECTL_BIN"
        echo "0 passed, 1 failed"
        exit 1
    fi
    version=$("$KUBECTL_BIN" version --client -o json 2>/dev/null | jq -r '.clientVersion.gitVersion' 2>/dev/null)
    mode=single
    [ "$HA" = 1 ] && mode="HA follower"
    LABEL="controllers kubectl ${version:-$KUBECTL_BIN} $mode"
    T="$LABEL:"
    WORK=$(mktemp -d /tmp/litek8s-controllers.XXXXXX)
    CONTROL=$WORK/kubelet
    mkdir -p "$CONTROL"
    trap controllers_env_cleanup EXIT
    # Node silence is noticed after 8 s instead of 40 (the fake kubelet renews every 2 s).
    local common=(--node-monitor-grace-period 8s)
    local extra=("${common[@]}")
    if [ "$HA" = 1 ]; then
        export LITEK8S_RAFT_HEARTBEAT_MS=100
        local p1 p2
        p1=$(free_port)
        CLUSTER_ARGS+=("--data-dir $WORK/lk1 --listen 127.0.0.1:$p1 --raft-port $(free_port) --name lk1 ${common[*]}")
        # shellcheck disable=SC2086
        "$(litek8s_bin)" apiserver ${CLUSTER_ARGS[0]} --cluster-init >>"$WORK/lk1.log" 2>&1 </dev/null &
        CLUSTER_PIDS+=($!)
        CLUSTER_NAMES+=(lk1)
        CLUSTER_PORTS+=("$p1")
        if ! wait_ready "$p1" 60; then
            sed 's/^/    | /' "$WORK/lk1.log" | tail -40
            fail "$T first server starts"
            summary "$LABEL"
            exit 1
        fi
        export LITEK8S_TOKEN
        LITEK8S_TOKEN=$(cat "$WORK/lk1/join-token")
        p2=$(free_port)
        CLUSTER_ARGS+=("--data-dir $WORK/lk2 --listen 127.0.0.1:$p2 --raft-port $(free_port) --name lk2 ${common[*]}")
        # shellcheck disable=SC2086
        "$(litek8s_bin)" apiserver ${CLUSTER_ARGS[1]} --server "https://127.0.0.1:$p1" \
            >>"$WORK/lk2.log" 2>&1 </dev/null &
        CLUSTER_PIDS+=($!)
        CLUSTER_NAMES+=(lk2)
        CLUSTER_PORTS+=("$p2")
        wait_ready "$p2" 60 || true
        extra+=(--raft-port "$(free_port)" --server "https://127.0.0.1:$p1")
    fi
    PORT=$(free_port)
    if ! start_server "$WORK/lk3" "$PORT" "${extra[@]}"; then
        fail "$T server starts"
        summary "$LABEL"
        exit 1
    fi
    # start_server names the server `test`; in a cluster it is the third member.
    CLUSTER_PIDS+=("$SERVER_PID")
    CLUSTER_NAMES+=(test)
    CLUSTER_PORTS+=("$PORT")
    CLUSTER_ARGS+=("--data-dir $WORK/lk3 --listen 127.0.0.1:$PORT --name test ${extra[*]}")
    # The tests' own copy: a server writes its kubeconfig again when it starts, and a revived
    # member would point kubectl back at itself while the fake kubelet still used the URL
    # kill_leader moved it to.
    KC=$WORK/kubeconfig.yaml
    cp "$WORK/lk3/kubeconfig.yaml" "$KC"
    pass "$T server starts"
    start_kubelet
}

k() { "$KUBECTL_BIN" --kubeconfig "$KC" --request-timeout=30s "$@" 2>&1; }

# start_kubelet: the fake kubelet of nodes n1, n2, n3 (4 CPUs, 8Gi, 110 pods each).
start_kubelet() {
    rm -f "$CONTROL/ready"
    "$ROOT/.venv/bin/python" "$ROOT/tests/controllers/fake_kubelet.py" --kubeconfig "$KC" \
        --nodes n1,n2,n3 --control "$CONTROL" >>"$WORK/kubelet.log" 2>&1 </dev/null &
    KUBELET_PID=$!
    local i
    for ((i = 0; i < 300; i++)); do
        [ -f "$CONTROL/ready" ] && break
        sleep 0.1
    done
    if [ -f "$CONTROL/ready" ]; then
        pass "$T fake kubelet registered n1, n2, n3"
    else
        fail "$T fake kubelet registered n1, n2, n3"
        sed 's/^/    | /' "$WORK/kubelet.log" | tail -20
    fi
}

# stop_kubelet: stops the fake kubelet and waits until it is gone, so that the next one does
# not race it.
stop_kubelet() {
    [ -n "$KUBELET_PID" ] || return 0
    kill "$KUBELET_PID" 2>/dev/null
    wait "$KUBELET_PID" 2>/dev/null
    KUBELET_PID=
}

# stop_node NODE / resume_node NODE: the fake kubelet stops (resumes) renewing the node's
# Lease and status.
stop_node() { touch "$CONTROL/stop-$1"; }
resume_node() { rm -f "$CONTROL/stop-$1"; }

# run_scenario NAME: sources scenarios/NAME.sh with a fresh namespace $NS.
run_scenario() {
    local name=$1
    NS="s-${name//[^a-z0-9]/-}"
    echo "== scenario $name (namespace $NS)"
    if ! k create namespace "$NS" >/dev/null; then
        fail "$T $name: namespace created"
        return
    fi
    # shellcheck disable=SC1090
    source "$HERE/scenarios/$name.sh"
    k delete namespace "$NS" --wait=false >/dev/null 2>&1 || true
    [ "$HA" = 1 ] && revive_killed
    return 0
}

# wait_until NAME SECONDS CMD...: passes once CMD succeeds, fails after SECONDS (a hang guard).
wait_until() {
    local name=$1 limit=$2 i
    shift 2
    for ((i = 0; i < limit * 5; i++)); do
        if "$@" >/dev/null 2>&1; then
            pass "$name"
            return 0
        fi
        sleep 0.2
    done
    fail "$name (not within ${limit}s)"
    return 1
}

# jq_of ARGS... -- FILTER: `kubectl get ARGS -o json | jq -r FILTER`.
jq_of() {
    local args=() filter
    while [ "$1" != -- ]; do
        args+=("$1")
        shift
    done
    filter=$2
    k get "${args[@]}" -o json | jq -r "$filter"
}

# equals EXPECTED CMD...: CMD's output (trimmed) is EXPECTED (for wait_until).
equals() {
    local expected=$1 got
    shift
    got=$("$@" 2>/dev/null)
    [ "$got" = "$expected" ]
}

# leader_name: the server running the controllers (the holder of the
# kube-controller-manager Lease, up to its `_`).
leader_name() {
    jq_of lease kube-controller-manager -n kube-system -- '.spec.holderIdentity' | cut -d_ -f1
}

# kill_leader: SIGKILL the server that leads (HA only) and set KILLED to its name. When kubectl
# and the fake kubelet were using it, they move to a live member. It must run in the scenario's
# shell, not in `$(...)`: it replaces KUBELET_PID, and a kubelet started in a subshell would
# outlive the test and race the next one on the node Leases. run_scenario starts killed members
# again after each scenario (revive_killed), so every scenario begins with three.
kill_leader() {
    local leader i j url
    KILLED=
    leader=$(leader_name)
    for i in "${!CLUSTER_NAMES[@]}"; do
        if [ "${CLUSTER_NAMES[$i]}" = "$leader" ]; then
            kill -9 "${CLUSTER_PIDS[$i]}"
            [ "$leader" = test ] && SERVER_PID=
            if grep -q "https://127.0.0.1:${CLUSTER_PORTS[$i]}\$" "$KC" ||
                grep -q "https://127.0.0.1:${CLUSTER_PORTS[$i]}\"" "$KC"; then
                for j in "${!CLUSTER_NAMES[@]}"; do
                    [ "$j" = "$i" ] && continue
                    kill -0 "${CLUSTER_PIDS[$j]}" 2>/dev/null || continue
                    url="https://127.0.0.1:${CLUSTER_PORTS[$j]}"
                    sed -i "s#https://127.0.0.1:${CLUSTER_PORTS[$i]}#$url#" "$KC"
                    stop_kubelet
                    start_kubelet
                    break
                done
            fi
            KILLED=$leader
            return 0
        fi
    done
    return 1
}

# revive_killed: starts again, on its data directory, every member that is no longer running
# and waits until it is ready (HA only).
revive_killed() {
    local i
    for i in "${!CLUSTER_NAMES[@]}"; do
        kill -0 "${CLUSTER_PIDS[$i]}" 2>/dev/null && continue
        # shellcheck disable=SC2086
        "$(litek8s_bin)" apiserver ${CLUSTER_ARGS[$i]} \
            >>"$WORK/${CLUSTER_NAMES[$i]}.revived.log" 2>&1 </dev/null &
        CLUSTER_PIDS[i]=$!
        [ "${CLUSTER_NAMES[$i]}" = test ] && SERVER_PID=$!
        if wait_ready "${CLUSTER_PORTS[$i]}" 60; then
            pass "$T member ${CLUSTER_NAMES[$i]} started again after the scenario killed it"
        else
            fail "$T member ${CLUSTER_NAMES[$i]} started again after the scenario killed it"
            sed 's/^/    | /' "$WORK/${CLUSTER_NAMES[$i]}.revived.log" | tail -20
        fi
    done
}
