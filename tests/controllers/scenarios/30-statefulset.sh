# StatefulSets with kubectl: ordered creation (each pod made only once the one before is Ready,
# read from a watch), stable identity (names, hostname, subdomain, labels), claims from
# volumeClaimTemplates, scale-down from the highest ordinal one at a time, a partitioned
# rolling update from the top down, `rollout status|history|undo`, Parallel management, the
# claim retention policy; in a cluster, the leader killed in the middle of a rollout.
#
# The pods have no nodeName: the scheduler binds them and the fake kubelet makes them Ready a
# second after they start, so the order is visible.

sts() { # NAME REPLICAS [EXTRA SPEC (yaml, 2-space indent)] [IMAGE] [READY-AFTER-SECONDS]
    k apply -n "$NS" -f - <<YAML
apiVersion: v1
kind: Service
metadata: {name: $1}
spec: {clusterIP: None, selector: {app: $1}, ports: [{port: 80}]}
---
apiVersion: apps/v1
kind: StatefulSet
metadata: {name: $1}
spec:
  serviceName: $1
  replicas: $2
  selector: {matchLabels: {app: $1}}
${3:-}
  template:
    metadata:
      labels: {app: $1}
      annotations: {test.litek8s.dev/ready-after-seconds: "${5:-1}"}
    spec:
      containers: [{name: c, image: ${4:-nginx:1}}]
  volumeClaimTemplates:
  - metadata: {name: data}
    spec: {accessModes: [ReadWriteOnce], resources: {requests: {storage: 1Gi}}}
YAML
}

sts_watch() { # NAME FILE: the set's pods as a watch sees them, in the background
    "$KUBECTL_BIN" --kubeconfig "$KC" get pods -n "$NS" -l "app=$1" -w --output-watch-events \
        -o json >"$2" 2>/dev/null &
    STS_WATCHES+=($!)
}
STS_WATCHES=()

sts_rollout_ok() { # LABEL NAME EXPECTED-TEXT
    local out
    out=$(k rollout status "statefulset/$2" -n "$NS" --timeout=90s)
    expect_grep "$1" "$3" "$out"
}

# images NAME: "pod=image" of the set's pods not being deleted, by name.
images() {
    jq_of pods -n "$NS" -l "app=$1" -- '[.items[] | select(.metadata.deletionTimestamp == null) | "\(.metadata.name)=\(.spec.containers[0].image)"] | sort | join(" ")'
}
status_of() { # NAME: replicas ready available current updated, and whether the revisions agree
    jq_of sts "$1" -n "$NS" -- '"\(.status.replicas) \(.status.readyReplicas // 0) \(.status.availableReplicas // 0) \(.status.currentReplicas // 0) \(.status.updatedReplicas // 0) \(.status.currentRevision == .status.updateRevision)"'
}

# --- ordered creation, identity, claims
sts_watch web "$WORK/sts-web.watch"
sleep 1
sts web 3 >/dev/null
sts_rollout_ok "$T sts: rollout status reports web complete" web 'partitioned roll out complete: 3 new pods have been updated'
sleep 1
kill "${STS_WATCHES[@]}" 2>/dev/null
# Each pod's first appearance, and whether the pod before it was Ready by then.
order=$(jq -s -r 'reduce .[] as $e ({ready: {}, order: [], early: []};
      $e.object.metadata.name as $n
      | ($n | ltrimstr("web-") | tonumber) as $i
      | (if $e.type == "ADDED" then
            .order += [$n]
            | if $i > 0 and .ready["web-\($i - 1)"] != true then .early += [$n] else . end
         else . end)
      | .ready[$n] = ($e.type != "DELETED"
          and ([$e.object.status.conditions[]? | select(.type == "Ready" and .status == "True")] | length > 0)))
    | "\(.order | join(",")) early:\(.early | join(","))"' "$WORK/sts-web.watch")
expect_grep "$T sts: pods made in order 0, 1, 2, each after the one before was Ready (watch)" \
    '^web-0,web-1,web-2 early:$' "$order"
expect_grep "$T sts: stable identity (hostname, subdomain, pod-name and pod-index labels, owner)" \
    '^web-1 web web-1 1 StatefulSet true$' \
    "$(jq_of pod web-1 -n "$NS" -- '"\(.spec.hostname) \(.spec.subdomain) \(.metadata.labels["statefulset.kubernetes.io/pod-name"]) \(.metadata.labels["apps.kubernetes.io/pod-index"]) \(.metadata.ownerReferences[0].kind) \(.metadata.ownerReferences[0].controller)"')"
expect_grep "$T sts: claims data-web-0..2 made from the template, Pending, labelled app=web" \
    '^data-web-0,data-web-1,data-web-2 Pending 1Gi$' \
    "$(jq_of pvc -n "$NS" -l app=web -- '"\([.items[].metadata.name] | sort | join(",")) \([.items[].status.phase] | unique | join(",")) \([.items[].spec.resources.requests.storage] | unique | join(","))"')"
expect_grep "$T sts: each pod mounts its own claim" '^data-web-2$' \
    "$(jq_of pod web-2 -n "$NS" -- '.spec.volumes[] | select(.name == "data") | .persistentVolumeClaim.claimName')"
expect_grep "$T sts: status replicas/ready/available/current/updated 3, one revision" '^3 3 3 3 3 true$' \
    "$(status_of web)"
expect_grep "$T sts: observedGeneration, collisionCount 0, one revision web-<hash> numbered 1" \
    '^true 0 true 1$' \
    "$(jq_of sts web -n "$NS" -- '"\(.status.observedGeneration == .metadata.generation) \(.status.collisionCount) \(.status.updateRevision | startswith("web-"))"') $(jq_of controllerrevisions -n "$NS" -l app=web -- '[.items[].revision] | join(",")')"
expect_grep "$T sts: events from statefulset-controller for pods and claims" '^true true$' \
    "$(jq_of events -n "$NS" -- '"\([.items[] | select(.source.component == "statefulset-controller" and .reason == "SuccessfulCreate" and .message == "create Pod web-0 in StatefulSet web successful")] | length > 0) \([.items[] | select(.message == "create Claim data-web-0 Pod web-0 in StatefulSet web success")] | length > 0)"')"
claim_uid=$(jq_of pvc data-web-2 -n "$NS" -- '.metadata.uid')

# --- scale down: the highest first, each gone before the next goes
sts_watch web "$WORK/sts-down.watch"
sleep 1
k scale sts web -n "$NS" --replicas=1 >/dev/null
wait_until "$T sts: scaled down to web-0" 30 equals "web-0=nginx:1" images web
sleep 1
kill "${STS_WATCHES[@]}" 2>/dev/null
steps=$(jq -s -r 'reduce .[] as $e ({seen: {}, steps: []};
      $e.object.metadata.name as $n
      | if $e.type == "DELETED" then .steps += ["gone \($n)"]
        elif $e.object.metadata.deletionTimestamp != null and .seen[$n] != true
        then .seen[$n] = true | .steps += ["delete \($n)"] else . end)
    | .steps | join(", ")' "$WORK/sts-down.watch")
expect_grep "$T sts: web-2 deleted and gone before web-1 is deleted (watch)" \
    '^delete web-2, gone web-2, delete web-1, gone web-1$' "$steps"
k scale sts web -n "$NS" --replicas=3 >/dev/null
sts_rollout_ok "$T sts: scaled back to 3" web 'partitioned roll out complete: 3 new pods'
expect_grep "$T sts: web-2 comes back with its claim (Retain: the same claim)" "^$claim_uid 3\$" \
    "$(jq_of pvc data-web-2 -n "$NS" -- '.metadata.uid') $(jq_of pvc -n "$NS" -l app=web -- '.items | length')"

# --- a partitioned rolling update, from the top down
k patch sts web -n "$NS" -p '{"spec": {"updateStrategy": {"rollingUpdate": {"partition": 2}}}}' >/dev/null
k set image sts/web c=nginx:2 -n "$NS" >/dev/null
sts_rollout_ok "$T sts: partition 2: rollout status waits for web-2 only" web 'partitioned roll out complete: 1 new pods have been updated'
wait_until "$T sts: only web-2 runs the new image" 20 \
    equals "web-0=nginx:1 web-1=nginx:1 web-2=nginx:2" images web
expect_grep "$T sts: status: 1 updated, 2 current, the revisions differ" '^3 3 3 2 1 false$' "$(status_of web)"
sts_watch web "$WORK/sts-roll.watch"
sleep 1
k patch sts web -n "$NS" -p '{"spec": {"updateStrategy": {"rollingUpdate": {"partition": 0}}}}' >/dev/null
sts_rollout_ok "$T sts: partition 0: every pod updated" web 'partitioned roll out complete: 3 new pods have been updated'
wait_until "$T sts: the update revision became the current one" 20 equals "3 3 3 3 3 true" status_of web
kill "${STS_WATCHES[@]}" 2>/dev/null
expect_grep "$T sts: web-1 replaced before web-0 (watch)" '^web-1,web-0$' \
    "$(jq -s -r '[.[] | select(.object.metadata.deletionTimestamp != null) | .object.metadata.name]
        | reduce .[] as $n ([]; if any(.[]; . == $n) then . else . + [$n] end) | join(",")' "$WORK/sts-roll.watch")"

# --- history and undo
expect_grep "$T sts: rollout history lists revisions 1 and 2" '^1,2$' \
    "$(k rollout history sts/web -n "$NS" | awk 'NR > 1 && $1 ~ /^[0-9]+$/ {print $1}' | paste -sd,)"
expect_grep "$T sts: rollout history --revision=2 shows the new image" 'Image:[[:space:]]*nginx:2' \
    "$(k rollout history sts/web -n "$NS" --revision=2)"
expect_grep "$T sts: rollout undo" 'rolled back' "$(k rollout undo sts/web -n "$NS")"
# In a cluster the leader dies in the middle of the undo, if all three servers still run: after
# an earlier scenario's kill, a second one would leave no quorum.
servers_alive() {
    local pid n=0
    for pid in "${CLUSTER_PIDS[@]}"; do
        if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then n=$((n + 1)); fi
    done
    echo "$n"
}
if [ "$HA" = 1 ] && [ "$(servers_alive)" = 3 ]; then
    sleep 1
    kill_leader
    pass "$T sts: leader $KILLED killed in the middle of the undo"
fi
sts_rollout_ok "$T sts: the undo rolled out" web 'partitioned roll out complete: 3 new pods have been updated'
undo_state() { echo "$(images web) $(status_of web)"; }
wait_until "$T sts: every pod back on nginx:1, the revisions agree" 60 \
    equals "web-0=nginx:1 web-1=nginx:1 web-2=nginx:1 3 3 3 3 3 true" undo_state
expect_grep "$T sts: the first revision came back as revision 3 (two revisions, no copy)" '^2,3$' \
    "$(jq_of controllerrevisions -n "$NS" -l app=web -- '[.items[].revision] | sort | map(tostring) | join(",")')"
expect_grep "$T sts: exactly three pods, one per ordinal" '^web-0,web-1,web-2$' \
    "$(jq_of pods -n "$NS" -l app=web -- '[.items[].metadata.name] | sort | join(",")')"

# --- Parallel: every pod made at once, before any is Ready
sts_watch par "$WORK/sts-par.watch"
sleep 1
sts par 3 '  podManagementPolicy: Parallel' nginx:1 2 >/dev/null
sts_rollout_ok "$T sts: parallel set rolled out" par 'partitioned roll out complete: 3 new pods'
kill "${STS_WATCHES[@]}" 2>/dev/null
expect_grep "$T sts: Parallel made all three pods before the first was Ready (watch)" '^3$' \
    "$(jq -s -r 'reduce .[] as $e ({added: 0, at: null};
        (if $e.type == "ADDED" then .added += 1 else . end)
        | if .at == null and ([$e.object.status.conditions[]? | select(.type == "Ready" and .status == "True")] | length > 0)
          then .at = .added else . end) | .at' "$WORK/sts-par.watch")"

# --- persistentVolumeClaimRetentionPolicy Delete/Delete: claims follow their pods and the set
sts gone 2 '  podManagementPolicy: Parallel
  persistentVolumeClaimRetentionPolicy: {whenDeleted: Delete, whenScaled: Delete}' >/dev/null
sts_rollout_ok "$T retention: set rolled out" gone 'partitioned roll out complete: 2 new pods'
expect_grep "$T retention: the claims are owned by the set" '^StatefulSet,StatefulSet$' \
    "$(jq_of pvc -n "$NS" -l app=gone -- '[.items[].metadata.ownerReferences[0].kind] | join(",")')"
k scale sts gone -n "$NS" --replicas=1 >/dev/null
wait_until "$T retention: scaled down, the claim of gone-1 is deleted with its pod" 30 \
    equals "data-gone-0" jq_of pvc -n "$NS" -l app=gone -- '[.items[].metadata.name] | join(",")'
k delete sts gone -n "$NS" >/dev/null
left_of_gone() {
    echo "$(jq_of pvc -n "$NS" -l app=gone -- '.items | length') $(jq_of pods -n "$NS" -l app=gone -- '.items | length')"
}
wait_until "$T retention: the set deleted, its pods and claims go too" 30 equals "0 0" left_of_gone
k delete sts web par -n "$NS" >/dev/null
expect_grep "$T retention: Retain (the default) keeps web's claims after the set is gone" '^3$' \
    "$(jq_of pvc -n "$NS" -l app=web -- '.items | length')"
