#!/usr/bin/env bash
# kubectl against the workload kinds on one fresh litek8s server.
#
# Usage: tests/kubectl/workloads.sh [KUBECTL]   (default: kubectl on PATH)
# Starts `litek8s apiserver` in a temporary directory and drives it with the given kubectl:
# api-resources for the new kinds, `create deployment` (server defaults read back),
# `get deploy -o wide`, `create service clusterip`, `expose deployment` (NodePort), `scale`
# (merge patch on /scale), `get all`, `explain deployment.spec.strategy`, a selector that does
# not match the template (422), the immutable selector, and `rollout history`. Prints PASS/FAIL
# lines and `N passed, N failed`.
set -uo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=../lib.sh
source "$HERE/../lib.sh"
# shellcheck source=common.sh
source "$HERE/common.sh"

kubectl_suite_start "${1:-kubectl}" "workloads"

# --- discovery: names, short names and scope as a real cluster lists them
out=$(k api-resources)
for row in 'deployments +deploy +apps/v1 +true +Deployment' \
    'replicasets +rs +apps/v1 +true +ReplicaSet' \
    'daemonsets +ds +apps/v1 +true +DaemonSet' \
    'statefulsets +sts +apps/v1 +true +StatefulSet' \
    'controllerrevisions +apps/v1 +true +ControllerRevision' \
    'jobs +batch/v1 +true +Job' \
    'cronjobs +cj +batch/v1 +true +CronJob' \
    'horizontalpodautoscalers +hpa +autoscaling/v2 +true +HorizontalPodAutoscaler' \
    'poddisruptionbudgets +pdb +policy/v1 +true +PodDisruptionBudget' \
    'priorityclasses +pc +scheduling.k8s.io/v1 +false +PriorityClass' \
    'ingresses +ing +networking.k8s.io/v1 +true +Ingress' \
    'ingressclasses +networking.k8s.io/v1 +false +IngressClass' \
    'networkpolicies +netpol +networking.k8s.io/v1 +true +NetworkPolicy' \
    'clusterrolebindings +rbac.authorization.k8s.io/v1 +false +ClusterRoleBinding' \
    'roles +rbac.authorization.k8s.io/v1 +true +Role' \
    'storageclasses +sc +storage.k8s.io/v1 +false +StorageClass' \
    'persistentvolumes +pv +v1 +false +PersistentVolume' \
    'persistentvolumeclaims +pvc +v1 +true +PersistentVolumeClaim' \
    'resourcequotas +quota +v1 +true +ResourceQuota' \
    'limitranges +limits +v1 +true +LimitRange' \
    'replicationcontrollers +rc +v1 +true +ReplicationController'; do
    expect_grep "$T api-resources: ${row%% *}" "^$row\$" "$out"
done
out=$(k api-resources --categories=all -o name)
for r in pods services replicationcontrollers deployments.apps replicasets.apps daemonsets.apps \
    statefulsets.apps jobs.batch cronjobs.batch horizontalpodautoscalers.autoscaling; do
    expect_grep "$T category all has $r" "^$r\$" "$out"
done

# --- create deployment: defaults come back from the server
out=$(k create deployment web --image=nginx:1.25 --replicas=2)
expect_grep "$T create deployment" '^deployment.apps/web created' "$out"
out=$(k get deploy web -o jsonpath='{.spec.strategy.type} {.spec.strategy.rollingUpdate.maxSurge} {.spec.strategy.rollingUpdate.maxUnavailable} {.spec.revisionHistoryLimit} {.spec.progressDeadlineSeconds} {.spec.template.spec.restartPolicy} {.spec.template.spec.containers[0].imagePullPolicy} {.metadata.generation}')
expect_grep "$T deployment defaults" '^RollingUpdate 25% 25% 10 600 Always IfNotPresent 1$' "$out"
out=$(k get deploy -o wide)
expect_grep "$T get deploy -o wide header" '^NAME +READY +UP-TO-DATE +AVAILABLE +AGE +CONTAINERS +IMAGES +SELECTOR$' "$out"
# UP-TO-DATE counts the pods the controllers create (0 or 2 by now); none is Ready without
# nodes.
expect_grep "$T get deploy -o wide row" '^web +0/2 +[02] +0 +[0-9]+s +nginx +nginx:1\.25 +app=web$' "$out"
out=$(k get deploy)
expect_grep "$T get deploy header" '^NAME +READY +UP-TO-DATE +AVAILABLE +AGE$' "$out"

# --- services: create service clusterip, expose (NodePort)
out=$(k create service clusterip web-svc --tcp=80:8080)
expect_grep "$T create service clusterip" '^service/web-svc created' "$out"
out=$(k get svc web-svc -o jsonpath='{.spec.clusterIP} {.spec.type} {.spec.sessionAffinity} {.spec.ipFamilies[0]} {.spec.ipFamilyPolicy} {.spec.ports[0].protocol} {.spec.ports[0].targetPort}')
expect_grep "$T service clusterip defaults" '^10\.43\.[0-9]+\.[0-9]+ ClusterIP None IPv4 SingleStack TCP 8080$' "$out"
out=$(k expose deployment web --name=web-np --port=80 --target-port=8080 --type=NodePort)
expect_grep "$T expose deployment" '^service/web-np exposed' "$out"
out=$(k get svc web-np)
expect_grep "$T exposed NodePort service row" '^web-np +NodePort +10\.43\.[0-9]+\.[0-9]+ +<none> +80:3[0-9]{4}/TCP +[0-9]+s$' "$out"
out=$(k get svc web-np -o wide)
expect_grep "$T exposed service selects the deployment's pods" ' app=web$' "$out"

# --- scale (a merge patch on deployments/scale)
out=$(k scale deployment web --replicas=5)
expect_grep "$T scale deployment" '^deployment.apps/web scaled' "$out"
out=$(k get deploy web -o jsonpath='{.spec.replicas} {.metadata.generation}')
expect_grep "$T scale changed spec.replicas and generation" '^5 2$' "$out"
out=$(k scale deployment web --replicas=3 --current-replicas=4)
expect_grep "$T scale with a wrong --current-replicas is refused" 'error|expected' "$out"
out=$(k get --raw /apis/apps/v1/namespaces/default/deployments/web/scale)
expect_grep "$T GET scale is an autoscaling/v1 Scale" '"kind":"Scale","apiVersion":"autoscaling/v1"' "$out"
expect_grep "$T GET scale carries the selector" '"selector":"app=web"' "$out"

# --- get all: the kinds of the `all` category
out=$(k get all)
expect_grep "$T get all lists the services" '^service/web-np +NodePort' "$out"
expect_grep "$T get all lists the deployment" '^deployment.apps/web +0/5 +[0-9]+ +0 ' "$out"

# --- explain reads the OpenAPI schemas
out=$(k explain deployment.spec.strategy)
expect_grep "$T explain shows the kind" 'KIND: +Deployment' "$out"
expect_grep "$T explain shows rollingUpdate" 'rollingUpdate' "$out"
expect_grep "$T explain shows the field description" 'replace existing pods with new ones' "$out"

# --- validation answers kubectl prints
out=$(printf 'apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: bad\nspec:\n  selector:\n    matchLabels: {app: a}\n  template:\n    metadata:\n      labels: {app: b}\n    spec:\n      containers: [{name: c, image: nginx}]\n' | k create -f -)
expect_grep "$T selector mismatch is Invalid" 'The Deployment "bad" is invalid: spec.template.metadata.labels: Invalid value: map\[string\]string\{"app":"b"\}: `selector` does not match template `labels`' "$out"
out=$(k patch deployment web --type=merge -p '{"spec":{"selector":{"matchLabels":{"app":"z"}},"template":{"metadata":{"labels":{"app":"z"}}}}}')
expect_grep "$T the selector is immutable" 'spec.selector: Invalid value: .*field is immutable' "$out"
out=$(printf 'apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: typo\nspec:\n  replica: 2\n  selector:\n    matchLabels: {app: a}\n  template:\n    metadata:\n      labels: {app: a}\n    spec:\n      containers: [{name: c, image: nginx}]\n' | k create -f -)
expect_grep "$T an unknown field is refused (strict field validation)" 'unknown field "spec.replica"' "$out"
out=$(k create job j --image=busybox)
expect_grep "$T create job" '^job.batch/j created' "$out"
out=$(k get job j -o jsonpath='{.spec.completions} {.spec.parallelism} {.spec.backoffLimit} {.spec.template.metadata.labels.job-name}')
expect_grep "$T job defaults and generated labels" '^1 1 6 j$' "$out"

# --- rollout history: lists the ReplicaSets the deployment owns
out=$(k rollout history deployment/web)
expect_grep "$T rollout history without ReplicaSets" 'deployment.apps/web' "$out"
expect_no_grep "$T rollout history does not error" '^error' "$out"
uid=$(k get deploy web -o jsonpath='{.metadata.uid}')
out=$(printf 'apiVersion: apps/v1\nkind: ReplicaSet\nmetadata:\n  name: web-abc\n  annotations: {deployment.kubernetes.io/revision: "1"}\n  labels: {app: web, pod-template-hash: abc}\n  ownerReferences:\n  - {apiVersion: apps/v1, kind: Deployment, name: web, uid: %s, controller: true}\nspec:\n  selector:\n    matchLabels: {app: web, pod-template-hash: abc}\n  template:\n    metadata:\n      labels: {app: web, pod-template-hash: abc}\n    spec:\n      containers: [{name: nginx, image: "nginx:1.25"}]\n' "$uid" | k create -f -)
expect_grep "$T create an owned ReplicaSet" '^replicaset.apps/web-abc created' "$out"
out=$(k rollout history deployment/web)
expect_grep "$T rollout history lists revision 1" '^1 +<none>' "$out"
out=$(k get rs -o wide)
# The ReplicaSet controller may have made its pod, the Deployment controller scaled it down.
expect_grep "$T get rs -o wide" '^web-abc +[01] +[01] +0 +[0-9]+s +nginx +nginx:1\.25 +app=web,pod-template-hash=abc$' "$out"

if stop_server; then pass "$T SIGTERM exits 0"; else fail "$T SIGTERM exits 0"; fi

summary "$LABEL"
