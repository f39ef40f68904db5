# Deployments with kubectl: create, scale, rollout (bounds checked at every step from a pod
# watch: never more than replicas + maxSurge pods, never fewer than replicas - maxUnavailable
# available), history, undo, pause/resume, restart, revisionHistoryLimit, Recreate, a
# selector that matches another controller's pods, a rollout that never becomes Ready
# (progress deadline), and in a cluster the leader killed in the middle of a rollout.
# shellcheck source=../pod_watch.sh
source "$HERE/pod_watch.sh"

deployment() { # NAME REPLICAS STRATEGY(yaml flow) [NODE] [POD ANNOTATIONS(flow)] [EXTRA SPEC]
    k apply -n "$NS" -f - <<YAML
apiVersion: apps/v1
kind: Deployment
metadata: {name: $1}
spec:
  replicas: $2
  selector: {matchLabels: {app: $1}}
  strategy: $3
  ${6:-}
  template:
    metadata: {labels: {app: $1}, annotations: ${5:-{\}}}
    spec:
      nodeName: ${4:-n1}
      containers: [{name: c, image: nginx}]
YAML
}

rollout_ok() { # LABEL NAME
    local out
    out=$(k rollout status "deployment/$2" -n "$NS" --timeout=60s)
    expect_grep "$1" "deployment \"$2\" successfully rolled out" "$out"
}

# hashes NAME: the pod-template-hash labels of the deployment's active pods, sorted, unique.
hashes() { jq_of pods -n "$NS" -l "app=$1" -- '[.items[] | select(.metadata.deletionTimestamp == null) | .metadata.labels["pod-template-hash"]] | unique | join(",")'; }
# new_rs NAME: the deployment's ReplicaSets with replicas (after a rollout: the new one).
new_rs() { jq_of rs -n "$NS" -l "app=$1" -- "[.items[] | select(.spec.replicas > 0) | .metadata.name] | join(\",\")"; }
rs_count() { jq_of rs -n "$NS" -l "app=$1" -- '.items | length'; }
condition() { jq_of deployment "$1" -n "$NS" -- ".status.conditions[] | select(.type == \"$2\") | \"\(.status) \(.reason)\""; }

# --- create: 4 replicas, surge 1, unavailable 1
start_pod_watch web app=web
deployment web 4 '{type: RollingUpdate, rollingUpdate: {maxSurge: 1, maxUnavailable: 1}}' >/dev/null
rollout_ok "$T deploy: created and rolled out" web
watch_until web 20 '.all == 4 and .available == 4' || true
first=$(new_rs web)
hash1=${first#web-}
expect_grep "$T deploy: one ReplicaSet web-<hash> with the pod-template-hash label and selector" '^true$' \
    "$(jq_of rs "$first" -n "$NS" -- "(.metadata.labels[\"pod-template-hash\"] == \"$hash1\") and (.spec.selector.matchLabels[\"pod-template-hash\"] == \"$hash1\") and (.spec.template.metadata.labels[\"pod-template-hash\"] == \"$hash1\") and (.metadata.ownerReferences[0].kind == \"Deployment\")")"
expect_grep "$T deploy: revision 1, desired 4, max 5" '^1 1 4 5$' \
    "$(jq_of rs "$first" -n "$NS" -- '.metadata.annotations as $a | "\($a["deployment.kubernetes.io/revision"]) "')$(jq_of deployment web -n "$NS" -- '.metadata.annotations["deployment.kubernetes.io/revision"]') $(jq_of rs "$first" -n "$NS" -- '.metadata.annotations as $a | "\($a["deployment.kubernetes.io/desired-replicas"]) \($a["deployment.kubernetes.io/max-replicas"])"')"
wait_until "$T deploy: status 4 replicas, 4 updated, 4 ready, 4 available, generation observed" 10 \
    equals "4 4 4 4 true" jq_of deployment web -n "$NS" -- '"\(.status.replicas) \(.status.updatedReplicas) \(.status.readyReplicas) \(.status.availableReplicas) \(.status.observedGeneration == .metadata.generation)"'
expect_grep "$T deploy: Available MinimumReplicasAvailable, Progressing NewReplicaSetAvailable" \
    '^True MinimumReplicasAvailable True NewReplicaSetAvailable$' "$(condition web Available) $(condition web Progressing)"
wait_until "$T deploy: ScalingReplicaSet event" 10 \
    equals 1 jq_of events -n "$NS" -- "[.items[] | select(.reason == \"ScalingReplicaSet\" and .message == \"Scaled up replica set $first from 0 to 4\" and .source.component == \"deployment-controller\")] | length"

# --- scale
k scale deployment web -n "$NS" --replicas=6 >/dev/null
scaled() { echo "$(active_pods app=web) $(new_rs web) $(jq_of rs "$first" -n "$NS" -- '.metadata.annotations["deployment.kubernetes.io/desired-replicas"]')"; }
wait_until "$T deploy: scaled to 6 (same ReplicaSet, desired-replicas 6)" 20 equals "6 $first 6" scaled
k scale deployment web -n "$NS" --replicas=4 >/dev/null
wait_until "$T deploy: scaled back to 4" 20 watch_last_is web '.all == 4 and .active == 4'

# --- rolling update with a change cause
mark=$(watch_mark web)
k set image deployment/web c=nginx:2 -n "$NS" >/dev/null
# The cause goes to the new ReplicaSet only (the old one is no longer the Deployment's template).
k annotate deployment web -n "$NS" kubernetes.io/change-cause="image nginx:2" >/dev/null
rollout_ok "$T rollout: new image rolled out" web
watch_until web 20 '.all == 4 and .available == 4' || true
check_bounds "$T rollout: bounds held at every step" web "$mark" 5 3
second=$(new_rs web)
expect_grep "$T rollout: exactly 4 pods, all of the new ReplicaSet" "^${second#web-} 4$" "$(hashes web) $(active_pods app=web)"
expect_grep "$T rollout: two ReplicaSets, the new one revision 2" '^2 2$' \
    "$(rs_count web) $(jq_of rs "$second" -n "$NS" -- '.metadata.annotations["deployment.kubernetes.io/revision"]')"
history=$(k rollout history deployment/web -n "$NS")
expect_grep "$T history: revisions 1 and 2 with the change cause" '^2 +image nginx:2' "$history"
expect_grep "$T history: revision 1" '^1 +<none>' "$history"
expect_grep "$T history --revision=2 shows the template" 'nginx:2' "$(k rollout history deployment/web -n "$NS" --revision=2)"

# --- undo: back to the first ReplicaSet, which becomes revision 3
mark=$(watch_mark web)
expect_grep "$T undo: rolled back" 'rolled back' "$(k rollout undo deployment/web -n "$NS")"
rollout_ok "$T undo: rolled out" web
watch_until web 20 '.all == 4 and .available == 4' || true
check_bounds "$T undo: bounds held at every step" web "$mark" 5 3
expect_grep "$T undo: the first ReplicaSet again (reused, revision 3, history 1)" "^$first 2 3 1 $hash1$" \
    "$(new_rs web) $(rs_count web) $(jq_of rs "$first" -n "$NS" -- '.metadata.annotations as $a | "\($a["deployment.kubernetes.io/revision"]) \($a["deployment.kubernetes.io/revision-history"])"') $(hashes web)"
expect_grep "$T undo --to-revision=2" 'rolled back' "$(k rollout undo deployment/web -n "$NS" --to-revision=2)"
rollout_ok "$T undo --to-revision=2: rolled out" web
expect_grep "$T undo --to-revision=2: the second ReplicaSet, revision 4" "^$second 4$" \
    "$(new_rs web) $(jq_of rs "$second" -n "$NS" -- '.metadata.annotations["deployment.kubernetes.io/revision"]')"

# --- pause: changes wait; resume: they roll out
k rollout pause deployment/web -n "$NS" >/dev/null
k set image deployment/web c=nginx:3 -n "$NS" >/dev/null
wait_until "$T pause: Progressing Unknown DeploymentPaused" 10 equals "Unknown DeploymentPaused" condition web Progressing
sleep 1
expect_grep "$T pause: no new ReplicaSet while paused" "^2 $second$" "$(rs_count web) $(new_rs web)"
mark=$(watch_mark web)
k rollout resume deployment/web -n "$NS" >/dev/null
rollout_ok "$T resume: rolled out" web
watch_until web 20 '.all == 4 and .available == 4' || true
check_bounds "$T resume: bounds held at every step" web "$mark" 5 3
expect_grep "$T resume: a third ReplicaSet, revision 5" '^3 5$' \
    "$(rs_count web) $(jq_of deployment web -n "$NS" -- '.metadata.annotations["deployment.kubernetes.io/revision"]')"

# --- restart: a template annotation, a new ReplicaSet
third=$(new_rs web)
mark=$(watch_mark web)
k rollout restart deployment/web -n "$NS" >/dev/null
rollout_ok "$T restart: rolled out" web
watch_until web 20 '.all == 4 and .available == 4' || true
check_bounds "$T restart: bounds held at every step" web "$mark" 5 3
restarted=$(new_rs web)
expect_grep "$T restart: new ReplicaSet with restartedAt in its template" '^true$' \
    "$([ "$restarted" != "$third" ] && jq_of rs "$restarted" -n "$NS" -- '.spec.template.metadata.annotations | has("kubectl.kubernetes.io/restartedAt")')"

# --- settled: the controllers write nothing more (no reconcile loop)
versions() { echo "$(jq_of deployment web -n "$NS" -- '.metadata.resourceVersion') $(jq_of rs -n "$NS" -l app=web -- '[.items[].metadata.resourceVersion] | join(",")')"; }
before=$(versions)
sleep 2
expect_grep "$T settled: no writes to the Deployment or its ReplicaSets for 2 s" "^$before$" "$(versions)"

# --- revisionHistoryLimit: old empty ReplicaSets beyond it are deleted
k patch deployment web -n "$NS" -p '{"spec":{"revisionHistoryLimit":1}}' >/dev/null
wait_until "$T revisionHistoryLimit 1: one old ReplicaSet kept" 20 equals 2 rs_count web
stop_pod_watches

# --- Recreate: every old pod gone before the first new one
start_pod_watch rec app=rec
deployment rec 3 '{type: Recreate}' n2 >/dev/null
rollout_ok "$T recreate: created" rec
watch_until rec 20 '.all == 3 and .available == 3' || true
mark=$(watch_mark rec)
k set image deployment/rec c=nginx:2 -n "$NS" >/dev/null
rollout_ok "$T recreate: rolled out" rec
watch_until rec 20 '.all == 3 and .available == 3' || true
check_bounds "$T recreate: never more than 3 pods" rec "$mark" 3 0
expect_grep "$T recreate: never old and new pods at once (terminating ones included)" '^0$' \
    "$(watch_range rec "$mark" '[.[] | select([.hashes[] | select(.[1] > 0)] | length > 1)] | length')"
stop_pod_watches

# --- a selector matching another controller's pods: no fight, no adoption of owned pods
k apply -n "$NS" -f - >/dev/null <<YAML
apiVersion: v1
kind: ReplicationController
metadata: {name: mixed-rc}
spec:
  replicas: 2
  selector: {app: mixed}
  template:
    metadata: {labels: {app: mixed, owner: rc}}
    spec: {nodeName: n3, containers: [{name: c, image: nginx}]}
YAML
deployment mixed 2 '{type: RollingUpdate}' n3 >/dev/null
rollout_ok "$T overlap: deployment rolled out beside the ReplicationController" mixed
owners() { jq_of pods -n "$NS" -l app=mixed -- '[.items[] | select(.metadata.deletionTimestamp == null) | .metadata.ownerReferences[0].kind] | sort | join(",")'; }
wait_until "$T overlap: 2 pods each, each with its own controller" 20 equals "ReplicaSet,ReplicaSet,ReplicationController,ReplicationController" owners
sleep 2
expect_grep "$T overlap: still so, nothing deleted" '^ReplicaSet,ReplicaSet,ReplicationController,ReplicationController 0$' \
    "$(owners) $(jq_of events -n "$NS" -- '[.items[] | select(.reason == "SuccessfulDelete" and (.involvedObject.name | startswith("mixed")))] | length')"

# --- pods that never become Ready: the progress deadline passes
deployment stuck 2 '{type: RollingUpdate}' n1 '{test.litek8s.dev/ready: "false"}' 'progressDeadlineSeconds: 3' >/dev/null
wait_until "$T stuck: Progressing False ProgressDeadlineExceeded" 20 equals "False ProgressDeadlineExceeded" condition stuck Progressing
expect_grep "$T stuck: Available False MinimumReplicasUnavailable" '^False MinimumReplicasUnavailable$' "$(condition stuck Available)"
expect_grep "$T stuck: kubectl rollout status fails on the deadline" 'exceeded its progress deadline' \
    "$(k rollout status deployment/stuck -n "$NS" --timeout=20s)"

# --- a cluster: the leader killed in the middle of a rollout
if [ "$HA" = 1 ]; then
    start_pod_watch ha app=ha
    deployment ha 6 '{type: RollingUpdate, rollingUpdate: {maxSurge: 1, maxUnavailable: 0}}' n2 \
        '{test.litek8s.dev/ready-after-seconds: "1"}' >/dev/null
    rollout_ok "$T failover: created" ha
    watch_until ha 20 '.all == 6 and .available == 6' || true
    mark=$(watch_mark ha)
    k set image deployment/ha c=nginx:2 -n "$NS" >/dev/null
    wait_until "$T failover: rollout under way" 20 equals 2 rs_count ha
    sleep 1.5
    kill_leader
    pass "$T failover: leader $KILLED killed mid-rollout (at $(jq_of deployment ha -n "$NS" -- '.status.updatedReplicas') of 6 updated)"
    rollout_ok "$T failover: the rollout finished on the new leader" ha
    watch_until ha 30 '.all == 6 and .available == 6' || true
    check_bounds "$T failover: never more than 7 pods nor fewer than 6 available, across the failover" ha "$mark" 7 6
    expect_grep "$T failover: 6 pods, all of the new ReplicaSet" "^1 6$" \
        "$(hashes ha | tr ',' '\n' | wc -l) $(active_pods app=ha)"
    holder=$(leader_name)
    expect_grep "$T failover: kube-controller-manager Lease held by a survivor" "^[a-z0-9-]+$" \
        "$([ "$holder" != "$KILLED" ] && echo "$holder")"
    stop_pod_watches
fi
