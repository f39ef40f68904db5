# Node lifecycle and taint-based eviction: when n3's agent goes silent, n3 turns Ready=Unknown
# and gets the unreachable taints; a pod tolerating them for 3 s is marked for deletion after
# that, one tolerating them forever stays; when the agent is back the taints go.

pod_on_n3() { # NAME TOLERATION-SECONDS-or-empty
    local seconds=""
    [ -n "$2" ] && seconds=", \"tolerationSeconds\": $2"
    k apply -n "$NS" -f - >/dev/null <<YAML
{"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "$1"},
 "spec": {"nodeName": "n3", "containers": [{"name": "c", "image": "busybox"}],
  "tolerations": [{"key": "node.kubernetes.io/unreachable", "operator": "Exists",
                   "effect": "NoExecute"$seconds}]}}
YAML
}
pod_on_n3 short 3
pod_on_n3 forever ""
wait_until "$T lifecycle: pods on n3 running" 20 equals "Running Running" \
    jq_of pods -n "$NS" -- '[.items[].status.phase] | join(" ")'

stop_node n3
wait_until "$T lifecycle: silent n3 turns Ready=Unknown (NodeStatusUnknown)" 30 equals "Unknown NodeStatusUnknown" \
    jq_of node n3 -- '.status.conditions[] | select(.type=="Ready") | "\(.status) \(.reason)"'
wait_until "$T lifecycle: n3 gets the unreachable NoExecute taint" 10 equals "NoExecute" \
    jq_of node n3 -- '.spec.taints[] | select(.key=="node.kubernetes.io/unreachable" and .effect=="NoExecute") | .effect'
wait_until "$T lifecycle: the pod tolerating 3 s is marked for deletion" 20 \
    bash -c "[ -n \"\$($KUBECTL_BIN --kubeconfig $KC get pod short -n $NS -o jsonpath='{.metadata.deletionTimestamp}')\" ]"
expect_grep "$T lifecycle: it carries DisruptionTarget (DeletionByTaintManager)" 'DeletionByTaintManager' \
    "$(jq_of pod short -n "$NS" -- '.status.conditions[]? | select(.type=="DisruptionTarget") | .reason')"
expect_grep "$T lifecycle: the pod tolerating forever is not" '^$' \
    "$(jq_of pod forever -n "$NS" -- '.metadata.deletionTimestamp // ""')"
expect_grep "$T lifecycle: a TaintManagerEviction event" 'TaintManagerEviction' \
    "$(k get events -n "$NS" -o json | jq -r '.items[].reason')"

resume_node n3
wait_until "$T lifecycle: n3 Ready again" 20 equals "True" \
    jq_of node n3 -- '.status.conditions[] | select(.type=="Ready") | .status'
wait_until "$T lifecycle: the unreachable taints are removed" 20 equals "0" \
    jq_of node n3 -- '[.spec.taints[]? | select(.key=="node.kubernetes.io/unreachable")] | length'
wait_until "$T lifecycle: the agent finishes the evicted pod" 20 \
    bash -c "! $KUBECTL_BIN --kubeconfig $KC get pod short -n $NS >/dev/null 2>&1"
