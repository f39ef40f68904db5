#!/usr/bin/env bash
# kubectl's write paths on one fresh litek8s server: client-side apply and re-apply
# (strategic merge computed by kubectl), server-side apply by two managers with a conflict and
# --force-conflicts, diff, patch with each patch type, edit through KUBE_EDITOR, server dry-run
# leaving nothing behind, custom columns, namespace deletion removing its contents, and the
# system namespaces refusing deletion.
#
# Usage: tests/kubectl/apply.sh [KUBECTL]   (default: kubectl on PATH)
# Prints PASS/FAIL lines and `N passed, N failed`.
set -uo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=../lib.sh
source "$HERE/../lib.sh"
# shellcheck source=common.sh
source "$HERE/common.sh"

kubectl_suite_start "${1:-kubectl}" "apply/patch"

# A deployment manifest: deployment NAME IMAGE ENV... (each ENV as NAME=VALUE)
deployment() {
    local name=$1 image=$2
    shift 2
    printf 'apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: %s\n  labels: {app: %s}\nspec:\n  replicas: 2\n  selector:\n    matchLabels: {app: %s}\n  template:\n    metadata:\n      labels: {app: %s}\n    spec:\n      containers:\n      - name: web\n        image: %s\n        ports:\n        - containerPort: 80\n' \
        "$name" "$name" "$name" "$name" "$image"
    if [ $# -gt 0 ]; then
        printf '        env:\n'
        for kv in "$@"; do printf '        - {name: %s, value: "%s"}\n' "${kv%%=*}" "${kv#*=}"; done
    fi
}

# --- client-side apply, then re-apply with a new image and one env var removed
deployment web nginx:1.25 A=1 B=2 >"$WORK/web-1.yaml"
deployment web nginx:1.26 A=1 >"$WORK/web-2.yaml"
out=$(k apply -f "$WORK/web-1.yaml")
expect_grep "$T apply -f creates" '^deployment.apps/web created' "$out"
out=$(k get deploy web -o jsonpath='{.metadata.annotations.kubectl\.kubernetes\.io/last-applied-configuration}')
expect_grep "$T apply records last-applied-configuration" '"image":"nginx:1.25"' "$out"

# --- diff: what the re-apply would change, computed by a server-side dry run
out=$(k diff -f "$WORK/web-2.yaml")
rc=$?
check "$T diff exits 1 when there are differences" test "$rc" = 1
expect_grep "$T diff shows the old image" '^-.*image: nginx:1\.25' "$out"
expect_grep "$T diff shows the new image" '^\+.*image: nginx:1\.26' "$out"
expect_grep "$T diff shows the removed env var" '^-.*name: B' "$out"
out=$(k get deploy web -o jsonpath='{.spec.template.spec.containers[0].image}')
expect_grep "$T diff changed nothing" '^nginx:1\.25$' "$out"

out=$(k apply -f "$WORK/web-2.yaml")
expect_grep "$T re-apply configures" '^deployment.apps/web configured' "$out"
out=$(k get deploy web -o jsonpath='{.spec.template.spec.containers[0].image} {.spec.template.spec.containers[0].env[*].name} {.metadata.generation}')
expect_grep "$T re-apply changed the image and removed B" '^nginx:1\.26 A 2$' "$out"
out=$(k apply -f "$WORK/web-2.yaml")
expect_grep "$T re-applying the same file changes nothing" '^deployment.apps/web unchanged' "$out"
out=$(k diff -f "$WORK/web-2.yaml")
rc=$?
check "$T diff exits 0 without differences" test "$rc" = 0

# --- server-side apply by two managers
deployment ssa nginx:1.25 >"$WORK/ssa-alpha.yaml"
out=$(k apply --server-side --field-manager=alpha -f "$WORK/ssa-alpha.yaml")
expect_grep "$T server-side apply creates" '^deployment.apps/ssa serverside-applied' "$out"
out=$(k get deploy ssa -o jsonpath='{.metadata.managedFields[*].manager}')
expect_grep "$T managedFields names alpha" 'alpha' "$out"
sed 's/replicas: 2/replicas: 3/' "$WORK/ssa-alpha.yaml" >"$WORK/ssa-beta.yaml"
out=$(k apply --server-side --field-manager=beta -f "$WORK/ssa-beta.yaml")
expect_grep "$T a second manager changing an owned field conflicts" 'conflict with "alpha"' "$out"
expect_grep "$T the conflict names the field" '\.spec\.replicas' "$out"
out=$(k get deploy ssa -o jsonpath='{.spec.replicas}')
expect_grep "$T the conflicting apply changed nothing" '^2$' "$out"
out=$(k apply --server-side --field-manager=beta --force-conflicts -f "$WORK/ssa-beta.yaml")
expect_grep "$T --force-conflicts applies" '^deployment.apps/ssa serverside-applied' "$out"
out=$(k get deploy ssa -o json --show-managed-fields | jq -r '.spec.replicas as $r | [.metadata.managedFields[] | select(.fieldsV1."f:spec"."f:replicas" != null) | .manager] | "\($r) \(join(","))"')
expect_grep "$T ownership of spec.replicas moved to beta" '^3 beta$' "$out"

# --- patch with each patch type
out=$(k patch deploy web --type=strategic -p '{"spec":{"template":{"spec":{"containers":[{"name":"web","image":"nginx:1.27"}]}}}}')
expect_grep "$T strategic merge patch" '^deployment.apps/web patched' "$out"
out=$(k get deploy web -o jsonpath='{.spec.template.spec.containers[0].image} {.spec.template.spec.containers[0].env[0].name}')
expect_grep "$T strategic patch merged the container by name" '^nginx:1\.27 A$' "$out"
out=$(k patch deploy web --type=merge -p '{"metadata":{"labels":{"tier":"front"}}}')
expect_grep "$T merge patch" '^deployment.apps/web patched' "$out"
out=$(k patch deploy web --type=json -p '[{"op":"replace","path":"/spec/replicas","value":4}]')
expect_grep "$T JSON patch" '^deployment.apps/web patched' "$out"
out=$(k get deploy web -o jsonpath='{.metadata.labels.tier} {.spec.replicas}')
expect_grep "$T merge and JSON patches applied" '^front 4$' "$out"
out=$(k patch deploy web --type=json -p '[{"op":"test","path":"/spec/replicas","value":9},{"op":"replace","path":"/spec/replicas","value":1}]')
expect_grep "$T a failing JSON patch test op is refused" 'error|Error' "$out"
out=$(k get deploy web -o jsonpath='{.spec.replicas}')
expect_grep "$T the refused JSON patch changed nothing" '^4$' "$out"

# --- edit through KUBE_EDITOR (non-interactive)
out=$(KUBE_EDITOR="sed -i s/nginx:1.27/nginx:1.28/" k edit deploy web)
expect_grep "$T edit" '^deployment.apps/web edited' "$out"
out=$(k get deploy web -o jsonpath='{.spec.template.spec.containers[0].image}')
expect_grep "$T edit changed the image" '^nginx:1\.28$' "$out"

# --- server dry run leaves nothing behind
out=$(k create deployment dry --image=nginx --dry-run=server -o jsonpath='{.spec.replicas} {.spec.strategy.type}')
expect_grep "$T create --dry-run=server answers with defaults" '^1 RollingUpdate$' "$out"
out=$(k get deploy dry)
expect_grep "$T the dry-run object does not exist" 'NotFound|not found' "$out"
out=$(k delete deploy web --dry-run=server)
expect_grep "$T delete --dry-run=server" 'deleted \(server dry run\)' "$out"
out=$(k get deploy web -o name)
expect_grep "$T the dry-run delete deleted nothing" '^deployment.apps/web$' "$out"

# --- custom columns
out=$(k get deploy -o custom-columns='NAME:.metadata.name,IMAGE:.spec.template.spec.containers[0].image,REPLICAS:.spec.replicas' --sort-by=.metadata.name)
expect_grep "$T custom-columns header" '^NAME +IMAGE +REPLICAS$' "$out"
expect_grep "$T custom-columns row" '^web +nginx:1\.28 +4$' "$out"

# --- namespace deletion removes everything in it, then the namespace
k create namespace doomed >/dev/null
k -n doomed create deployment d --image=nginx >/dev/null
k -n doomed create configmap c --from-literal=a=b >/dev/null
k -n doomed create service clusterip s --tcp=80:80 >/dev/null
out=$(k delete namespace doomed --timeout=60s)
expect_grep "$T delete namespace" '^namespace "doomed" deleted' "$out"
out=$(k get namespace doomed)
expect_grep "$T the namespace is gone" 'NotFound|not found' "$out"
out=$(k get all,configmaps -n doomed -o name)
expect_no_grep "$T nothing is left in it" '.' "$(grep -v 'No resources' <<<"$out")"

# --- the system namespaces may not be deleted (kube-apiserver's NamespaceLifecycle admission)
for ns in default kube-system kube-public; do
  out=$(k delete namespace "$ns" --wait=false)
  expect_grep "$T delete namespace $ns is refused" \
    "Forbidden.*namespaces \"$ns\" is forbidden: this namespace may not be deleted" "$out"
done
out=$(k get namespaces default kube-system kube-public -o jsonpath='{.items[*].status.phase}')
expect_grep "$T the system namespaces stay Active" '^Active Active Active$' "$out"

if stop_server; then pass "$T SIGTERM exits 0"; else fail "$T SIGTERM exits 0"; fi
summary "$LABEL"
