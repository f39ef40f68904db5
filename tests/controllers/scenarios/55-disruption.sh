# PodDisruptionBudget status: healthy pods against minAvailable (a number: the selected pods
# are expected) and maxUnavailable (the controllers' scale is expected).

k apply -n "$NS" -f - >/dev/null <<'YAML'
{"apiVersion": "v1", "kind": "List", "items": [
 {"apiVersion": "policy/v1", "kind": "PodDisruptionBudget", "metadata": {"name": "min2"},
  "spec": {"minAvailable": 2, "selector": {"matchLabels": {"app": "db"}}}},
 {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "db-1", "labels": {"app": "db"}},
  "spec": {"nodeName": "n1", "containers": [{"name": "c", "image": "busybox"}]}},
 {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "db-2", "labels": {"app": "db"}},
  "spec": {"nodeName": "n2", "containers": [{"name": "c", "image": "busybox"}]}},
 {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "db-3", "labels": {"app": "db"},
   "annotations": {"test.litek8s.dev/ready": "false"}},
  "spec": {"nodeName": "n3", "containers": [{"name": "c", "image": "busybox"}]}}
]}
YAML
status() { jq_of pdb min2 -n "$NS" -- '"\(.status.currentHealthy)/\(.status.desiredHealthy)/\(.status.expectedPods)/\(.status.disruptionsAllowed)"'; }
wait_until "$T disruption: 2 healthy of 3 expected, 2 desired, none allowed" 20 equals "2/2/3/0" status
expect_grep "$T disruption: DisruptionAllowed False (InsufficientPods)" '^False InsufficientPods$' \
    "$(jq_of pdb min2 -n "$NS" -- '.status.conditions[] | select(.type=="DisruptionAllowed") | "\(.status) \(.reason)"')"
k annotate pod db-3 -n "$NS" test.litek8s.dev/ready- >/dev/null
wait_until "$T disruption: the third pod Ready allows one disruption" 20 equals "3/2/3/1" status
expect_grep "$T disruption: DisruptionAllowed True (SufficientPods)" '^True SufficientPods$' \
    "$(jq_of pdb min2 -n "$NS" -- '.status.conditions[] | select(.type=="DisruptionAllowed") | "\(.status) \(.reason)"')"
k apply -n "$NS" -f - >/dev/null <<'YAML'
{"apiVersion": "policy/v1", "kind": "PodDisruptionBudget", "metadata": {"name": "bare"},
 "spec": {"maxUnavailable": 1, "selector": {"matchLabels": {"app": "db"}}}}
YAML
wait_until "$T disruption: maxUnavailable over pods without a controller fails to sync" 20 equals "False SyncFailed" \
    jq_of pdb bare -n "$NS" -- '.status.conditions[] | select(.type=="DisruptionAllowed") | "\(.status) \(.reason)"'

# kubectl drain evicts through pods/eviction: the first eviction uses the one allowed
# disruption, the next is refused with kube-apiserver's 429 text until the budget allows again.
k delete pdb bare -n "$NS" >/dev/null
out=$(k drain n1 --pod-selector app=db --force --timeout=20s --ignore-daemonsets --delete-emptydir-data)
expect_grep "$T eviction: drain of n1 evicts db-1" 'pod/db-1 evicted' "$out"
wait_until "$T eviction: the budget counts the evicted pod" 20 equals "2/2/2/0" status
out=$(k drain n2 --pod-selector app=db --force --timeout=4s --ignore-daemonsets --delete-emptydir-data)
expect_grep "$T eviction: drain of n2 is refused by the budget" \
    "Cannot evict pod as it would violate the pod's disruption budget" "$out"
expect_grep "$T eviction: db-2 is still there" '^db-2$' "$(k get pod db-2 -n "$NS" -o jsonpath='{.metadata.name}')"
k uncordon n1 >/dev/null
k uncordon n2 >/dev/null
