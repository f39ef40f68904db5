# DaemonSets with kubectl: a pod on each of n1, n2, n3 (created unbound with an affinity for its
# node, bound by the scheduler), a node tainted NoSchedule skipped unless tolerated, a
# nodeSelector followed as labels change, a node that joins gets its pod and a node tainted
# NoExecute loses it, rolling updates within maxUnavailable and with maxSurge (bounds read from
# a watch), `rollout status|history|undo`, OnDelete.
# shellcheck source=../pod_watch.sh
source "$HERE/pod_watch.sh"

ds() { # NAME UPDATE-STRATEGY(flow) [EXTRA POD SPEC MEMBERS (flow)] [IMAGE]
    k apply -n "$NS" -f - <<YAML
apiVersion: apps/v1
kind: DaemonSet
metadata: {name: $1}
spec:
  selector: {matchLabels: {app: $1}}
  updateStrategy: $2
  template:
    metadata: {labels: {app: $1}, annotations: {test.litek8s.dev/ready-after-seconds: "1"}}
    spec: {containers: [{name: c, image: ${4:-agent:1}}]${3:+, $3}}
YAML
}
ROLLING='{type: RollingUpdate, rollingUpdate: {maxUnavailable: 1}}'

# nodes_of NAME: the nodes of the set's pods not being deleted, sorted ("-" for unbound).
nodes_of() {
    jq_of pods -n "$NS" -l "app=$1" -- '[.items[] | select(.metadata.deletionTimestamp == null) | .spec.nodeName // "-"] | sort | join(",")'
}
# ds_status NAME: desired current ready updated available misscheduled
ds_status() {
    jq_of ds "$1" -n "$NS" -- '"\(.status.desiredNumberScheduled) \(.status.currentNumberScheduled) \(.status.numberReady) \(.status.updatedNumberScheduled // 0) \(.status.numberAvailable // 0) \(.status.numberMisscheduled)"'
}
ds_rollout_ok() { # LABEL NAME
    local out
    out=$(k rollout status "daemonset/$2" -n "$NS" --timeout=60s)
    expect_grep "$1" "daemon set \"$2\" successfully rolled out" "$out"
}
images() { # NAME: "node=image" of the set's pods not being deleted
    jq_of pods -n "$NS" -l "app=$1" -- '[.items[] | select(.metadata.deletionTimestamp == null) | "\(.spec.nodeName)=\(.spec.containers[0].image)"] | sort | join(" ")'
}

# --- a pod per node
start_pod_watch agent app=agent
ds agent "$ROLLING" >/dev/null
ds_rollout_ok "$T ds: rollout status reports agent rolled out" agent
expect_grep "$T ds: one pod on each of n1, n2, n3" '^n1,n2,n3$' "$(nodes_of agent)"
expect_grep "$T ds: status desired/current/ready/updated/available 3, none misscheduled" \
    '^3 3 3 3 3 0$' "$(ds_status agent)"
expect_grep "$T ds: each pod asks for its node by a metadata.name affinity and the scheduler bound it there" \
    '^3$' "$(jq_of pods -n "$NS" -l app=agent -- '[.items[] | select(.spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[0].matchFields[0] | .key == "metadata.name" and .operator == "In") | select(.spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[0].matchFields[0].values[0] == .spec.nodeName)] | length')"
expect_grep "$T ds: the daemon tolerations (not-ready and unreachable NoExecute without a limit, pressure and unschedulable NoSchedule)" \
    '^6 0$' "$(jq_of pod "$(jq_of pods -n "$NS" -l app=agent -- '.items[0].metadata.name')" -n "$NS" -- '"\([.spec.tolerations[] | select(.operator == "Exists" and (.key | startswith("node.kubernetes.io/")))] | length) \([.spec.tolerations[] | select(.tolerationSeconds != null)] | length)"')"
hash=$(jq_of controllerrevisions -n "$NS" -l app=agent -- '.items[0].metadata.labels["controller-revision-hash"]')
expect_grep "$T ds: pods controlled by the set, labelled with its revision's hash" "^$hash DaemonSet\$" \
    "$(jq_of pods -n "$NS" -l app=agent -- '[.items[] | "\(.metadata.labels["controller-revision-hash"]) \(.metadata.ownerReferences[0].kind)"] | unique | join(",")')"
wait_until "$T ds: SuccessfulCreate events from daemonset-controller" 10 \
    equals 3 jq_of events -n "$NS" -- '[.items[] | select(.source.component == "daemonset-controller" and .reason == "SuccessfulCreate" and .involvedObject.name == "agent")] | length'

# --- taints: a NoSchedule node is skipped unless tolerated; a pod already there stays
k taint node n3 dedicated=db:NoSchedule >/dev/null
ds plain "$ROLLING" >/dev/null
ds tolerant "$ROLLING" 'tolerations: [{key: dedicated, operator: Exists}]' >/dev/null
ds_rollout_ok "$T taints: plain rolled out" plain
ds_rollout_ok "$T taints: tolerant rolled out" tolerant
expect_grep "$T taints: without a toleration the tainted n3 is skipped" '^n1,n2 2 2 2 2 2 0$' \
    "$(nodes_of plain) $(ds_status plain)"
expect_grep "$T taints: with one, n3 gets a pod" '^n1,n2,n3$' "$(nodes_of tolerant)"
agent_state() { echo "$(nodes_of agent) $(ds_status agent)"; }
wait_until "$T taints: agent's pod on n3 stays (NoSchedule) and counts as misscheduled" 10 \
    equals "n1,n2,n3 2 2 2 2 2 1" agent_state
k taint node n3 dedicated- >/dev/null
wait_until "$T taints: the taint removed, plain gets its pod on n3" 20 equals "n1,n2,n3" nodes_of plain

# --- nodeSelector follows node labels
ds picky "$ROLLING" 'nodeSelector: {role: edge}' >/dev/null
wait_until "$T selector: no node labelled, no pod, desired 0" 10 equals "0" \
    jq_of ds picky -n "$NS" -- '"\(.status.desiredNumberScheduled)"'
k label node n2 role=edge >/dev/null
wait_until "$T selector: n2 labelled role=edge gets a pod" 20 equals "n2" nodes_of picky
k label node n2 role- >/dev/null
wait_until "$T selector: the label removed, the pod goes" 20 equals "" nodes_of picky

# --- a node joins, then is tainted NoExecute and leaves
mkdir -p "$WORK/kubelet-n4"
"$ROOT/.venv/bin/python" "$ROOT/tests/controllers/fake_kubelet.py" --kubeconfig "$KC" \
    --nodes n4 --control "$WORK/kubelet-n4" >>"$WORK/kubelet-n4.log" 2>&1 </dev/null &
N4_KUBELET=$!
wait_until "$T nodes: n4 joins and gets an agent pod, Ready" 30 equals "4 4 4 4 4 0" ds_status agent
expect_grep "$T nodes: n4's pod is bound to n4" '^n1,n2,n3,n4$' "$(nodes_of agent)"
k taint node n4 gone=yes:NoExecute >/dev/null
node_state() { echo "$(nodes_of agent) $(nodes_of tolerant) $(ds_status agent)"; }
wait_until "$T nodes: n4 tainted NoExecute loses its daemon pods, desired back to 3" 30 \
    equals "n1,n2,n3 n1,n2,n3 3 3 3 3 3 0" node_state
kill "$N4_KUBELET" 2>/dev/null
k delete node n4 >/dev/null

# --- a rolling update within maxUnavailable 1 (watch: at most 3 pods, at least 2 available)
watch_until agent 10 '.active == 3 and .available == 3' || true
mark=$(watch_mark agent)
k set image ds/agent c=agent:2 -n "$NS" >/dev/null
ds_rollout_ok "$T rolling: agent:2 rolled out" agent
expect_grep "$T rolling: every node runs agent:2" '^n1=agent:2 n2=agent:2 n3=agent:2$' "$(images agent)"
watch_until agent 10 '.all == 3 and .available == 3' || true
check_bounds "$T rolling: maxUnavailable 1 held across the update" agent "$mark" 3 2

# --- history and undo
expect_grep "$T history: revisions 1 and 2" '^1,2$' \
    "$(k rollout history ds/agent -n "$NS" | awk 'NR > 1 && $1 ~ /^[0-9]+$/ {print $1}' | paste -sd,)"
expect_grep "$T history: --revision=2 shows agent:2" 'Image:[[:space:]]*agent:2' \
    "$(k rollout history ds/agent -n "$NS" --revision=2)"
expect_grep "$T undo: rolled back" 'rolled back' "$(k rollout undo ds/agent -n "$NS")"
ds_rollout_ok "$T undo: rolled out" agent
wait_until "$T undo: every node back on agent:1" 30 equals "n1=agent:1 n2=agent:1 n3=agent:1" images agent
expect_grep "$T undo: the first revision came back as revision 3 (no copy)" '^2,3$' \
    "$(jq_of controllerrevisions -n "$NS" -l app=agent -- '[.items[].revision] | sort | map(tostring) | join(",")')"

# --- surge: a new pod beside the old one, the old one deleted once the new is available
start_pod_watch surge app=surge
ds surge '{type: RollingUpdate, rollingUpdate: {maxSurge: 1, maxUnavailable: 0}}' >/dev/null
ds_rollout_ok "$T surge: created" surge
watch_until surge 10 '.all == 3 and .available == 3' || true
mark=$(watch_mark surge)
k set image ds/surge c=agent:2 -n "$NS" >/dev/null
ds_rollout_ok "$T surge: agent:2 rolled out" surge
wait_until "$T surge: every node runs agent:2" 20 equals "n1=agent:2 n2=agent:2 n3=agent:2" images surge
watch_until surge 10 '.all == 3 and .available == 3' || true
check_bounds "$T surge: never fewer than 3 available nor more than 4 pods" surge "$mark" 4 3
expect_grep "$T surge: a node had two pods at once (watch)" '^true$' \
    "$(watch_range surge "$mark" 'map(.active) | max > 3')"
stop_pod_watches

# --- OnDelete: nothing changes until a pod is deleted
ds od '{type: OnDelete}' >/dev/null
wait_until "$T ondelete: created" 20 equals "3 3 3 3 3 0" ds_status od
k set image ds/od c=agent:2 -n "$NS" >/dev/null
sleep 2
expect_grep "$T ondelete: a new template replaces no pod by itself" \
    '^n1=agent:1 n2=agent:1 n3=agent:1 0$' \
    "$(images od) $(jq_of ds od -n "$NS" -- '.status.updatedNumberScheduled // 0')"
k delete pod -n "$NS" "$(jq_of pods -n "$NS" -l app=od -- '.items[] | select(.spec.nodeName == "n2") | .metadata.name')" >/dev/null
wait_until "$T ondelete: the deleted pod's replacement runs the new template" 20 \
    equals "n1=agent:1 n2=agent:2 n3=agent:1" images od
expect_grep "$T ondelete: rollout status refuses OnDelete as upstream does" \
    'rollout status is only available for RollingUpdate strategy type' \
    "$(k rollout status ds/od -n "$NS" --timeout=5s)"
