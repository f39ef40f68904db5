# Garbage collection of dependents in the three propagation modes, dangling owners, an owner
# cycle, and a namespace deletion that waits for a finalizer.

owned_by() { # NAME OWNER-NAME OWNER-UID BLOCK
    k apply -n "$NS" -f - >/dev/null <<YAML
{"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "$1", "ownerReferences": [
  {"apiVersion": "v1", "kind": "ConfigMap", "name": "$2", "uid": "$3", "blockOwnerDeletion": $4}]}}
YAML
}
uid_of() { jq_of configmap "$1" -n "$NS" -- '.metadata.uid'; }
gone() { ! "$KUBECTL_BIN" --kubeconfig "$KC" get configmap "$1" -n "$NS" >/dev/null 2>&1; }
exists() { "$KUBECTL_BIN" --kubeconfig "$KC" get configmap "$1" -n "$NS" >/dev/null 2>&1; }

# Background (kubectl's default): the owner goes at once, its dependents after it.
k create configmap bg -n "$NS" >/dev/null
owned_by bg-child bg "$(uid_of bg)" true
k delete configmap bg -n "$NS" >/dev/null
wait_until "$T gc: background: the dependent follows its owner" 20 gone bg-child

# Foreground: the owner waits behind foregroundDeletion until its blocking dependents are
# gone; a dependent held by a finalizer holds the owner too.
k create configmap fg -n "$NS" >/dev/null
FG=$(uid_of fg)
owned_by fg-child fg "$FG" true
owned_by fg-held fg "$FG" true
k patch configmap fg-held -n "$NS" --type=merge -p '{"metadata":{"finalizers":["test.litek8s.dev/hold"]}}' >/dev/null
k delete configmap fg -n "$NS" --cascade=foreground --wait=false >/dev/null
wait_until "$T gc: foreground: the unheld dependent is deleted" 20 gone fg-child
expect_grep "$T gc: foreground: the owner waits with foregroundDeletion" 'foregroundDeletion' \
    "$(jq_of configmap fg -n "$NS" -- '.metadata.finalizers | join(",")')"
k patch configmap fg-held -n "$NS" --type=merge -p '{"metadata":{"finalizers":null}}' >/dev/null
wait_until "$T gc: foreground: once the held dependent is gone, the owner goes" 20 gone fg

# Orphan: the dependents stay, without the reference.
k create configmap or -n "$NS" >/dev/null
owned_by or-child or "$(uid_of or)" true
k delete configmap or -n "$NS" --cascade=orphan >/dev/null
wait_until "$T gc: orphan: the owner goes" 20 gone or
wait_until "$T gc: orphan: the dependent stays, its reference removed" 20 equals "0" \
    jq_of configmap or-child -n "$NS" -- '.metadata.ownerReferences // [] | length'

# A dependent of an owner that never existed is collected.
owned_by dangling ghost 00000000-0000-0000-0000-000000000000 false
wait_until "$T gc: a dangling owner reference gets its dependent deleted" 20 gone dangling

# An owner cycle deleted in foreground finishes (no hot loop, no deadlock).
k create configmap cyc-a -n "$NS" >/dev/null
owned_by cyc-b cyc-a "$(uid_of cyc-a)" true
k patch configmap cyc-a -n "$NS" --type=merge -p "{\"metadata\":{\"ownerReferences\":[{\"apiVersion\":\"v1\",\"kind\":\"ConfigMap\",\"name\":\"cyc-b\",\"uid\":\"$(uid_of cyc-b)\",\"blockOwnerDeletion\":true}]}}" >/dev/null
k delete configmap cyc-a -n "$NS" --cascade=foreground --wait=false >/dev/null
wait_until "$T gc: a foreground owner cycle is collected" 30 bash -c "! $KUBECTL_BIN --kubeconfig $KC get configmap cyc-a cyc-b -n $NS -o name 2>/dev/null | grep -q ."

# A namespace waits for content held by a finalizer, says so, then goes.
k create namespace "$NS-doomed" >/dev/null
k create configmap held -n "$NS-doomed" >/dev/null
k create configmap free -n "$NS-doomed" >/dev/null
k patch configmap held -n "$NS-doomed" --type=merge -p '{"metadata":{"finalizers":["test.litek8s.dev/hold"]}}' >/dev/null
k delete namespace "$NS-doomed" --wait=false >/dev/null
wait_until "$T namespace: the condition names the finalizer holding content" 20 \
    bash -c "$KUBECTL_BIN --kubeconfig $KC get namespace $NS-doomed -o json | jq -r '.status.conditions[] | select(.type==\"NamespaceFinalizersRemaining\") | .message' | grep -q 'test.litek8s.dev/hold in 1 resource instances'"
expect_grep "$T namespace: the free content is gone, the held remains" '^held$' \
    "$(k get configmaps -n "$NS-doomed" -o json | jq -r '.items[].metadata.name' | grep -v kube-root-ca.crt)"
k patch configmap held -n "$NS-doomed" --type=merge -p '{"metadata":{"finalizers":null}}' >/dev/null
wait_until "$T namespace: once the finalizer is gone the namespace goes" 30 \
    bash -c "! $KUBECTL_BIN --kubeconfig $KC get namespace $NS-doomed >/dev/null 2>&1"
