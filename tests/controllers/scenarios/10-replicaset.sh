# ReplicaSets and ReplicationControllers: pods to spec.replicas (never more, checked from a
# watch), status, events, deletion cost, a deleted pod replaced, release and adoption by
# labels, two owners whose selectors overlap keeping their own pods, minReadySeconds.
# shellcheck source=../pod_watch.sh
source "$HERE/pod_watch.sh"

replicaset() { # NAME REPLICAS LABELS(json) [EXTRA SPEC YAML LINES]
    k apply -n "$NS" -f - <<YAML
apiVersion: apps/v1
kind: ReplicaSet
metadata: {name: $1}
spec:
  replicas: $2
  selector: {matchLabels: {app: $1}}
  ${4:-}
  template:
    metadata: {labels: $3}
    spec:
      nodeName: n2
      containers: [{name: c, image: nginx}]
YAML
}

# --- create, status, events; never more pods than replicas
start_pod_watch rs1 app=rs1
replicaset rs1 3 '{app: rs1}' >/dev/null
wait_until "$T rs: 3 pods Running and Ready" 20 \
    equals 3 jq_of pods -n "$NS" -l app=rs1 -- '[.items[] | select(.status.conditions[]? | .type == "Ready" and .status == "True")] | length'
wait_until "$T rs: status replicas/fullyLabeled/ready/available 3, observedGeneration 1" 10 \
    equals "3 3 3 3 1" jq_of rs rs1 -n "$NS" -- '"\(.status.replicas) \(.status.fullyLabeledReplicas) \(.status.readyReplicas) \(.status.availableReplicas) \(.status.observedGeneration)"'
expect_grep "$T rs: pods named <rs>-<suffix>, controlled by the ReplicaSet" '^3$' \
    "$(jq_of pods -n "$NS" -l app=rs1 -- '[.items[] | select((.metadata.name | test("^rs1-[a-z0-9]{5}$")) and .metadata.ownerReferences[0].kind == "ReplicaSet" and .metadata.ownerReferences[0].controller)] | length')"
wait_until "$T rs: SuccessfulCreate events from replicaset-controller" 10 \
    equals 3 jq_of events -n "$NS" -- '[.items[] | select(.reason == "SuccessfulCreate" and .involvedObject.name == "rs1" and .source.component == "replicaset-controller" and (.message | startswith("Created pod: rs1-")))] | length'

k scale rs rs1 -n "$NS" --replicas=5 >/dev/null
wait_until "$T rs: scaled to 5" 20 watch_last_is rs1 '.active == 5 and .available == 5'
k scale rs rs1 -n "$NS" --replicas=2 >/dev/null
wait_until "$T rs: scaled to 2" 20 watch_last_is rs1 '.all == 2 and .active == 2'
check_bounds "$T rs: never more than the replicas asked for" rs1 0 5 0

# --- a deleted pod is replaced
victim=$(jq_of pods -n "$NS" -l app=rs1 -- '.items[0].metadata.name')
k delete pod "$victim" -n "$NS" --wait=false >/dev/null
wait_until "$T rs: a deleted pod is replaced" 20 \
    equals "2 false" jq_of pods -n "$NS" -l app=rs1 -- "\"\([.items[] | select(.metadata.deletionTimestamp == null)] | length) \([.items[].metadata.name] | index(\"$victim\") != null)\""

# --- deletion cost: the costly pod survives a scale-down
k scale rs rs1 -n "$NS" --replicas=3 >/dev/null
wait_until "$T rs: back to 3" 20 watch_last_is rs1 '.all == 3 and .available == 3'
keep=$(jq_of pods -n "$NS" -l app=rs1 -- '[.items[].metadata.name] | sort | .[1]')
k annotate pod "$keep" -n "$NS" controller.kubernetes.io/pod-deletion-cost=100 >/dev/null
k scale rs rs1 -n "$NS" --replicas=1 >/dev/null
wait_until "$T rs: the pod with the highest deletion cost is the one left" 20 \
    equals "$keep" jq_of pods -n "$NS" -l app=rs1 -- '[.items[] | select(.metadata.deletionTimestamp == null) | .metadata.name] | join(",")'

# --- release and adoption by labels
k label pod "$keep" -n "$NS" app=elsewhere --overwrite >/dev/null
released() { echo "$(jq_of pod "$keep" -n "$NS" -- '.metadata.ownerReferences // [] | length') $(active_pods app=rs1)"; }
wait_until "$T rs: a relabelled pod is released and replaced" 20 equals "0 1" released
k label pod "$keep" -n "$NS" app=rs1 --overwrite >/dev/null
wait_until "$T rs: relabelled back, it is adopted and the surplus pod deleted" 20 \
    equals "1 1" jq_of pods -n "$NS" -l app=rs1 -- '"\([.items[] | select(.metadata.deletionTimestamp == null)] | length) \([.items[] | select(.metadata.deletionTimestamp == null and .metadata.ownerReferences[0].name == "rs1")] | length)"'

# --- two owners, overlapping selectors: each keeps its own pods, nobody adopts the other's
k apply -n "$NS" -f - >/dev/null <<YAML
apiVersion: apps/v1
kind: ReplicaSet
metadata: {name: shared-a}
spec:
  replicas: 2
  selector: {matchLabels: {app: shared}}
  template:
    metadata: {labels: {app: shared, owner: a}}
    spec: {nodeName: n1, containers: [{name: c, image: nginx}]}
---
apiVersion: v1
kind: ReplicationController
metadata: {name: shared-b}
spec:
  replicas: 3
  selector: {app: shared}
  template:
    metadata: {labels: {app: shared, owner: b}}
    spec: {nodeName: n3, containers: [{name: c, image: nginx}]}
YAML
wait_until "$T overlap: 5 pods, 2 owned by the ReplicaSet, 3 by the ReplicationController" 20 \
    equals "5 2 3" jq_of pods -n "$NS" -l app=shared -- '"\(.items | length) \([.items[] | select(.metadata.ownerReferences[0].name == "shared-a" and .metadata.labels.owner == "a")] | length) \([.items[] | select(.metadata.ownerReferences[0].name == "shared-b" and .metadata.labels.owner == "b")] | length)"'
sleep 2
expect_grep "$T overlap: no fight (each created its pods once, nothing deleted)" '^2 3 0$' \
    "$(jq_of events -n "$NS" -- '"\([.items[] | select(.reason == "SuccessfulCreate" and .involvedObject.name == "shared-a") | .count] | add) \([.items[] | select(.reason == "SuccessfulCreate" and .involvedObject.name == "shared-b") | .count] | add) \([.items[] | select(.reason == "SuccessfulDelete" and (.involvedObject.name | startswith("shared")))] | length)"')"
k scale rc shared-b -n "$NS" --replicas=1 >/dev/null
wait_until "$T rc: scaled to 1, the ReplicaSet's pods untouched" 20 \
    equals "1 2" jq_of pods -n "$NS" -l app=shared -- '"\([.items[] | select(.metadata.deletionTimestamp == null and .metadata.labels.owner == "b")] | length) \([.items[] | select(.metadata.deletionTimestamp == null and .metadata.labels.owner == "a")] | length)"'
rc_state() {
    echo "$(jq_of rc shared-b -n "$NS" -- '"\(.status.replicas) \(.status.readyReplicas) \(.status.observedGeneration)"')" \
        "$(jq_of events -n "$NS" -- '[.items[] | select(.source.component == "replication-controller")] | length > 0')"
}
wait_until "$T rc: status and events of replication-controller" 10 equals "1 1 2 true" rc_state

# --- minReadySeconds: Ready pods become available later
replicaset slow 2 '{app: slow}' 'minReadySeconds: 2' >/dev/null
wait_until "$T minReadySeconds: Ready but not yet available" 20 \
    equals "2 0" jq_of rs slow -n "$NS" -- '"\(.status.readyReplicas) \(.status.availableReplicas // 0)"'
wait_until "$T minReadySeconds: available after 2 s" 10 \
    equals "2 2" jq_of rs slow -n "$NS" -- '"\(.status.readyReplicas) \(.status.availableReplicas // 0)"'

stop_pod_watches
