#!/usr/bin/env bash
# kubectl end-to-end scenario against one fresh litek8s server.
#
# Usage: tests/kubectl/scenario.sh [KUBECTL]   (default: kubectl on PATH)
# Starts `litek8s apiserver` in a temporary directory, drives it with the given kubectl through
# create, apply (twice: create, then strategic merge patch), get in every output format, label,
# annotate, describe, patch, get -w, wait --for=delete, delete, discovery and error cases, and
# asserts the printed output. Prints PASS/FAIL lines and `N passed, N failed`.
set -uo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=../lib.sh
source "$HERE/../lib.sh"

KUBECTL_BIN=${1:-kubectl}
if ! command -v "$KUBECTL_BIN" >/dev/null 2>&1; then
    echo "FAIL kubectl not found: $KUBECTL_BIN"
    echo "0 passed, 1 failed"
    exit 1
fi
KVER=$("$KUBECTL_BIN" version --client -o json 2>/dev/null | jq -r '.clientVersion.gitVersion' 2>/dev/null)
LABEL="kubectl ${KVER:-$KUBECTL_BIN}"

WORK=$(mktemp -d /tmp/litek8s-kubectl.XXXXXX)
DATA=$WORK/data
PORT=$(free_port)
BG_PIDS=()
CLUSTER_PIDS=()
cleanup() {
    for pid in "${BG_PIDS[@]}" "${CLUSTER_PIDS[@]}"; do kill "$pid" 2>/dev/null || true; done
    stop_server >/dev/null 2>&1 || true
    if [ "${KEEP_WORK:-0}" = 1 ] || [ "$FAILED" -gt 0 ]; then
        echo "($LABEL: work directory kept: $WORK)"
    else
        rm -rf "$WORK"
    fi
}
trap cleanup EXIT

# SCENARIO_HA=1: the same scenario against a follower of a 3-server cluster: its writes are
# forwarded to the leader, its reads pass the ReadIndex barrier (docs/guarantees.md, Writes;
# Reads).
EXTRA_ARGS=()
if [ "${SCENARIO_HA:-0}" = 1 ]; then
    LABEL="$LABEL (HA follower)"
    export LITEK8S_RAFT_HEARTBEAT_MS=100
    P1=$(free_port)
    "$(litek8s_bin)" apiserver --data-dir "$WORK/lk1" --listen "127.0.0.1:$P1" \
        --raft-port "$(free_port)" --name lk1 --cluster-init >>"$WORK/lk1.log" 2>&1 </dev/null &
    CLUSTER_PIDS+=($!)
    if ! wait_ready "$P1" 60; then
        sed 's/^/    | /' "$WORK/lk1.log" | tail -40
        fail "$LABEL: first server starts"
        summary "$LABEL"
        exit 1
    fi
    export LITEK8S_TOKEN
    LITEK8S_TOKEN=$(cat "$WORK/lk1/join-token")
    P3=$(free_port)
    "$(litek8s_bin)" apiserver --data-dir "$WORK/lk3" --listen "127.0.0.1:$P3" \
        --raft-port "$(free_port)" --name lk3 --server "https://127.0.0.1:$P1" \
        >>"$WORK/lk3.log" 2>&1 </dev/null &
    CLUSTER_PIDS+=($!)
    wait_ready "$P3" 60 || true
    EXTRA_ARGS=(--raft-port "$(free_port)" --server "https://127.0.0.1:$P1")
fi

echo "== $LABEL against litek8s on 127.0.0.1:$PORT"
if ! start_server "$DATA" "$PORT" "${EXTRA_ARGS[@]}"; then
    fail "$LABEL: server starts"
    summary "$LABEL"
    exit 1
fi
pass "$LABEL: server starts"

KC=$DATA/kubeconfig.yaml
k() { "$KUBECTL_BIN" --kubeconfig "$KC" --request-timeout=30s "$@" 2>&1; }
M=$HERE/manifests
T="$LABEL:"
# Creates a ConfigMap through `create -f -` (kubectl's JSON path), so that checks about watch
# and wait do not depend on the typed `kubectl create configmap` (protobuf from kubectl 1.30 on).
mkcm() { # NAMESPACE NAME KEY=VALUE
    printf 'apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: %s\n  namespace: %s\ndata:\n  %s: "%s"\n' \
        "$2" "$1" "${3%%=*}" "${3#*=}" | k create -f -
}

# --- discovery and bootstrap objects
out=$(k version)
expect_grep "$T version shows the server version" 'Server Version: (v?[0-9]|version.Info\{Major:"1")' "$out"
out=$(k api-versions)
expect_grep "$T api-versions lists v1" '^v1$' "$out"
expect_grep "$T api-versions lists coordination.k8s.io/v1" '^coordination\.k8s\.io/v1$' "$out"
out=$(k api-resources)
expect_grep "$T api-resources lists configmaps with short name cm" '^configmaps +cm +v1 +true +ConfigMap' "$out"
expect_grep "$T api-resources lists leases" '^leases +coordination\.k8s\.io/v1 +true +Lease' "$out"
expect_grep "$T api-resources lists namespaces as cluster-scoped" '^namespaces +ns +v1 +false +Namespace' "$out"
out=$(k get ns)
for ns in default kube-system kube-public kube-node-lease; do
    expect_grep "$T get ns shows $ns" "^$ns +Active" "$out"
done
out=$(k get leases -A)
expect_grep "$T get leases -A shows the server's own lease" '^kube-system +litek8s-apiserver-test ' "$out"

# --- create -f, and the AlreadyExists error
out=$(k create -f "$M/created.yaml")
expect_grep "$T create -f creates the first object" '^configmap/created-cm created' "$out"
expect_grep "$T create -f creates the second object" '^configmap/created-cm-2 created' "$out"
out=$(k create -f "$M/created.yaml")
expect_grep "$T create twice says AlreadyExists" 'Error from server \(AlreadyExists\).*configmaps "created-cm" already exists' "$out"
# The typed `kubectl create <kind>` commands (protobuf bodies from kubectl 1.30 on).
out=$(k create namespace kube-system)
expect_grep "$T create namespace (typed) of an existing one says AlreadyExists" 'Error from server \(AlreadyExists\): namespaces "kube-system" already exists' "$out"
out=$(k create configmap literal-cm --from-literal=a=b)
expect_grep "$T create configmap --from-literal (typed)" '^configmap/literal-cm created' "$out"
out=$(k create namespace typed-ns)
expect_grep "$T create namespace (typed)" '^namespace/typed-ns created' "$out"

# --- apply -f (create), then apply a changed file (strategic merge patch)
out=$(k apply -f "$M/demo.yaml")
for obj in namespace/demo configmap/app-config configmap/other-config secret/app-secret \
    service/app-svc pod/demo-pod lease.coordination.k8s.io/demo-lease serviceaccount/demo-sa; do
    expect_grep "$T apply creates $obj" "^$obj created" "$out"
done
out=$(k get secret app-secret -n demo -o jsonpath='{.data.password}')
expect_grep "$T secret stringData became base64 data" "^$(printf s3cret | base64)$" "$out"
out=$(k apply -f "$M/demo.yaml")
expect_grep "$T re-apply of the same file is unchanged" '^configmap/app-config unchanged' "$out"
out=$(k apply -f "$M/demo-v2.yaml")
expect_grep "$T apply v2 configures the changed configmap" '^configmap/app-config configured' "$out"
expect_grep "$T apply v2 configures the changed lease" '^lease.coordination.k8s.io/demo-lease configured' "$out"
expect_grep "$T apply v2 leaves the others unchanged" '^configmap/other-config unchanged' "$out"
out=$(k get cm app-config -n demo -o json)
expect_grep "$T apply v2 changed a value" '"mode": "prod"' "$out"
expect_grep "$T apply v2 added a key" '"added": "yes"' "$out"
expect_no_grep "$T apply v2 removed the dropped key" 'remove-me' "$out"
expect_grep "$T apply v2 added a label" '"version": "v2"' "$out"
expect_grep "$T apply keeps last-applied-configuration" 'kubectl.kubernetes.io/last-applied-configuration' "$out"
out=$(k get lease demo-lease -n demo -o jsonpath='{.spec.holderIdentity}')
expect_grep "$T apply v2 changed the lease holder" '^someone-else$' "$out"

# --- get in every output format
out=$(k get pods -n demo -o wide)
expect_grep "$T get -o wide has the wide columns" '^NAME +READY +STATUS +RESTARTS +AGE +IP +NODE' "$out"
expect_grep "$T get -o wide shows the pod" '^demo-pod +0/1 +Pending' "$out"
out=$(k get cm app-config -n demo -o yaml)
expect_grep "$T get -o yaml shows kind" '^kind: ConfigMap' "$out"
expect_grep "$T get -o yaml shows data" '^  mode: prod' "$out"
expect_grep "$T get -o yaml shows resourceVersion" '^  resourceVersion: "[0-9]+"' "$out"
expect_grep "$T get -o yaml shows uid" '^  uid: [0-9a-f-]{36}' "$out"
out=$(k get cm app-config -n demo -o json | jq -r '.metadata.name + " " + .data.mode + " " + .metadata.namespace')
expect_grep "$T get -o json parses with jq" '^app-config prod demo$' "$out"
out=$(k get cm -n demo -o jsonpath='{range .items[*]}{.metadata.name}{"\n"}{end}')
expect_grep "$T get -o jsonpath lists app-config" '^app-config$' "$out"
expect_grep "$T get -o jsonpath lists other-config" '^other-config$' "$out"
out=$(k get cm -n demo -l tier=backend -o name)
expect_grep "$T get -l selects the labelled object" '^configmap/app-config$' "$out"
expect_no_grep "$T get -l excludes the others" 'other-config' "$out"
out=$(k get cm -n demo -l 'tier in (frontend)' -o name)
expect_grep "$T get -l with a set selector" '^configmap/other-config$' "$out"
out=$(k get cm -n demo -l tier!=backend,tier -o name)
expect_grep "$T get -l with != selector" '^configmap/other-config$' "$out"
out=$(k get cm -n demo --field-selector metadata.name=other-config)
expect_grep "$T get --field-selector selects by name" '^other-config +1 ' "$out"
expect_no_grep "$T get --field-selector excludes others" '^app-config' "$out"
out=$(k get pods -A --field-selector status.phase=Pending)
expect_grep "$T get --field-selector status.phase across namespaces" '^demo +demo-pod ' "$out"
out=$(k get cm -n demo --field-selector spec.nothing=x)
expect_grep "$T unsupported field selector is rejected" 'field label not supported: spec.nothing' "$out"
out=$(k get cm -A)
expect_grep "$T get -A has a NAMESPACE column" '^NAMESPACE +NAME +DATA +AGE' "$out"
expect_grep "$T get -A shows demo objects" '^demo +app-config +2 ' "$out"
expect_grep "$T get -A shows default objects" '^default +created-cm ' "$out"
out=$(k get cm -n demo --show-labels)
expect_grep "$T get --show-labels has a LABELS column" '^NAME +DATA +AGE +LABELS' "$out"
expect_grep "$T get --show-labels shows labels" '^app-config .*tier=backend' "$out"
out=$(k get cm,secret,svc -n demo -o name)
expect_grep "$T get several kinds at once" '^secret/app-secret$' "$out"
expect_grep "$T get several kinds shows the service" '^service/app-svc$' "$out"
out=$(k get po,sa -n demo)
expect_grep "$T get by short names" 'demo-pod' "$out"

# --- describe
out=$(k describe pod demo-pod -n demo)
expect_grep "$T describe pod shows the name" '^Name: +demo-pod' "$out"
expect_grep "$T describe pod shows the namespace" '^Namespace: +demo' "$out"
expect_grep "$T describe pod shows containers" '^Containers:' "$out"
expect_grep "$T describe pod shows the image" 'Image: +busybox:1.36' "$out"
out=$(k describe cm app-config -n demo)
expect_grep "$T describe configmap shows data" '^Data' "$out"
expect_grep "$T describe configmap shows a key" '^mode:' "$out"
out=$(k describe ns demo)
expect_grep "$T describe namespace shows Active" '^Status: +Active' "$out"
expect_grep "$T describe namespace shows labels" 'purpose=e2e' "$out"

# --- label, annotate, patch
out=$(k label cm other-config -n demo color=blue)
expect_grep "$T label" '^configmap/other-config labeled' "$out"
out=$(k get cm other-config -n demo --show-labels)
expect_grep "$T label is visible" 'color=blue' "$out"
out=$(k label cm other-config -n demo color=red)
expect_grep "$T label without --overwrite refuses" "already has a value \(blue\)" "$out"
out=$(k label cm other-config -n demo color-)
expect_grep "$T label removal" '^configmap/other-config (un)?labeled' "$out"
out=$(k get cm other-config -n demo --show-labels)
expect_no_grep "$T removed label is gone" 'color=' "$out"
out=$(k annotate cm other-config -n demo note=hello)
# kubectl 1.27 prints "annotate", later ones "annotated".
expect_grep "$T annotate" '^configmap/other-config annotated?$' "$out"
out=$(k get cm other-config -n demo -o jsonpath='{.metadata.annotations.note}')
expect_grep "$T annotation is visible" '^hello$' "$out"
out=$(k patch cm other-config -n demo -p '{"data":{"greeting":"hi"}}')
expect_grep "$T patch (strategic)" '^configmap/other-config patched' "$out"
out=$(k patch cm other-config -n demo --type merge -p '{"data":{"extra":"1"}}')
expect_grep "$T patch --type merge" '^configmap/other-config patched' "$out"
out=$(k patch cm other-config -n demo --type json -p '[{"op":"replace","path":"/data/extra","value":"2"}]')
expect_grep "$T patch --type json" '^configmap/other-config patched' "$out"
out=$(k get cm other-config -n demo -o jsonpath='{.data.greeting}/{.data.extra}')
expect_grep "$T patches applied" '^hi/2$' "$out"

# --- get -w: ADDED, MODIFIED, DELETED
WATCH_JSON=$WORK/watch.json
WATCH_TABLE=$WORK/watch.table
"$KUBECTL_BIN" --kubeconfig "$KC" get cm -n demo -w --output-watch-events -o json >"$WATCH_JSON" 2>&1 &
BG_PIDS+=($!)
"$KUBECTL_BIN" --kubeconfig "$KC" get cm -n demo -w --output-watch-events >"$WATCH_TABLE" 2>&1 &
BG_PIDS+=($!)
# The watches start after their initial list: wait until both printed the existing objects.
for _ in $(seq 100); do
    grep -q other-config "$WATCH_JSON" && grep -q other-config "$WATCH_TABLE" && break
    sleep 0.1
done
sleep 1
mkcm demo watch-me a=1 >/dev/null
k patch cm watch-me -n demo --type merge -p '{"data":{"a":"2"}}' >/dev/null
k delete cm watch-me -n demo >/dev/null
# shellcheck disable=SC2016
count_events() { jq -r 'select(.object.metadata.name=="watch-me") | .type' "$WATCH_JSON" 2>/dev/null | tr '\n' ' '; }
for _ in $(seq 150); do
    case "$(count_events)" in *DELETED*) break ;; esac
    sleep 0.1
done
sleep 0.5
events=$(count_events)
expect_grep "$T get -w -o json sees ADDED, MODIFIED, DELETED in order" '^ADDED MODIFIED DELETED $' "$events"
expect_grep "$T get -w -o json lists existing objects first" '"type": ?"ADDED"' "$(head -5 "$WATCH_JSON")"
table=$(cat "$WATCH_TABLE")
expect_grep "$T get -w (table) shows EVENT column" '^EVENT +NAME +DATA +AGE' "$table"
expect_grep "$T get -w (table) shows ADDED" '^ADDED +watch-me +1 ' "$table"
expect_grep "$T get -w (table) shows MODIFIED" '^MODIFIED +watch-me +1 ' "$table"
expect_grep "$T get -w (table) shows DELETED" '^DELETED +watch-me +1 ' "$table"
for pid in "${BG_PIDS[@]}"; do kill "$pid" 2>/dev/null || true; done
BG_PIDS=()

# get NAME -w on a single object gets the synthetic ADDED event and then the change.
WATCH_ONE=$WORK/watch.one
"$KUBECTL_BIN" --kubeconfig "$KC" get cm app-config -n demo -w -o jsonpath='{.data.mode}{"\n"}' >"$WATCH_ONE" 2>&1 &
BG_PIDS+=($!)
for _ in $(seq 100); do grep -q prod "$WATCH_ONE" && break; sleep 0.1; done
sleep 0.5
k patch cm app-config -n demo --type merge -p '{"data":{"mode":"staging"}}' >/dev/null
for _ in $(seq 100); do grep -q staging "$WATCH_ONE" && break; sleep 0.1; done
expect_grep "$T get NAME -w shows the current object" '^prod$' "$(cat "$WATCH_ONE")"
expect_grep "$T get NAME -w shows the change" '^staging$' "$(cat "$WATCH_ONE")"
for pid in "${BG_PIDS[@]}"; do kill "$pid" 2>/dev/null || true; done
BG_PIDS=()

# --- wait --for=delete
mkcm demo doomed x=y >/dev/null
WAIT_OUT=$WORK/wait.out
"$KUBECTL_BIN" --kubeconfig "$KC" wait --for=delete cm/doomed -n demo --timeout=60s >"$WAIT_OUT" 2>&1 &
wait_pid=$!
sleep 1
k delete cm doomed -n demo --wait=false >/dev/null
if wait "$wait_pid"; then pass "$T wait --for=delete returns 0"; else fail "$T wait --for=delete returns 0"; fi
expect_grep "$T wait --for=delete says condition met" 'configmap/doomed condition met' "$(cat "$WAIT_OUT")"

# --- delete and NotFound
out=$(k delete cm created-cm-2)
expect_grep "$T delete" 'configmap "created-cm-2" deleted' "$out"
out=$(k get cm created-cm-2)
expect_grep "$T get deleted says NotFound" 'Error from server \(NotFound\): configmaps "created-cm-2" not found' "$out"
out=$(k get cm no-such-thing -n demo)
expect_grep "$T get missing says NotFound" 'Error from server \(NotFound\): configmaps "no-such-thing" not found' "$out"
out=$(k delete cm no-such-thing -n demo)
expect_grep "$T delete missing says NotFound" 'Error from server \(NotFound\): configmaps "no-such-thing" not found' "$out"
out=$(k get widgets)
expect_grep "$T unknown resource type is an error" "the server doesn't have a resource type \"widgets\"" "$out"
out=$(k delete -f "$M/created.yaml" --ignore-not-found)
expect_grep "$T delete -f" 'configmap "created-cm" deleted' "$out"

# --- deleting a namespace removes what is in it
out=$(k delete ns demo --timeout=60s)
expect_grep "$T delete namespace" 'namespace "demo" deleted' "$out"
out=$(k get ns demo)
expect_grep "$T deleted namespace is gone" 'Error from server \(NotFound\): namespaces "demo" not found' "$out"
out=$(k get cm,lease,pods -n demo -o name)
expect_no_grep "$T namespace contents are gone" '/' "$out"

# --- the server stops cleanly
if stop_server; then pass "$T SIGTERM exits 0"; else fail "$T SIGTERM exits 0"; fi

summary "$LABEL"
