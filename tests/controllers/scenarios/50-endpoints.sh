# Endpoints and EndpointSlices follow the pods a Service selects: ready pods in `addresses`,
# not-ready ones in `notReadyAddresses`, named target ports resolved per pod, deleted pods
# removed, Services without a selector left alone.

k apply -n "$NS" -f - >/dev/null <<'YAML'
{"apiVersion": "v1", "kind": "List", "items": [
 {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "web"},
  "spec": {"selector": {"app": "web"}, "ports": [
   {"name": "http", "port": 80, "targetPort": "http"},
   {"name": "metrics", "port": 81, "targetPort": 9000}]}},
 {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "web-all"},
  "spec": {"selector": {"app": "web"}, "publishNotReadyAddresses": true,
   "ports": [{"port": 80, "targetPort": 9000}]}},
 {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "manual"},
  "spec": {"ports": [{"port": 80}]}},
 {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "web-1", "labels": {"app": "web"}},
  "spec": {"nodeName": "n1", "containers": [{"name": "c", "image": "busybox",
   "ports": [{"name": "http", "containerPort": 8080}]}]}},
 {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "web-2", "labels": {"app": "web"},
   "annotations": {"test.litek8s.dev/ready": "false"}},
  "spec": {"nodeName": "n2", "containers": [{"name": "c", "image": "busybox",
   "ports": [{"name": "http", "containerPort": 8081}]}]}},
 {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "web-3", "labels": {"app": "web"}},
  "spec": {"nodeName": "n3", "containers": [{"name": "c", "image": "busybox"}]}},
 {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "other", "labels": {"app": "db"}},
  "spec": {"nodeName": "n1", "containers": [{"name": "c", "image": "busybox"}]}}
]}
YAML
ip_of() { jq_of pod "$1" -n "$NS" -- '.status.podIP'; }
wait_until "$T endpoints: pods running with IPs" 20 equals "4" \
    jq_of pods -n "$NS" -- '[.items[] | select(.status.podIP)] | length'
IP1=$(ip_of web-1)
IP2=$(ip_of web-2)
IP3=$(ip_of web-3)
# web-1 serves both ports; web-2 both but is not ready; web-3 lacks the named port.
want="$IP1:8080,9000 $IP3:9000 | $IP2:8081,9000"
got() {
    k get endpoints web -n "$NS" -o json | jq -r '
      [.subsets[]? | (.addresses[]?.ip) as $ip | "\($ip):\([.ports[].port] | sort | map(tostring) | join(","))"] | sort | join(" ")' |
        tr '\n' ' '
    printf '| '
    k get endpoints web -n "$NS" -o json | jq -r '
      [.subsets[]? | (.notReadyAddresses[]?.ip) as $ip | "\($ip):\([.ports[].port] | sort | map(tostring) | join(","))"] | sort | join(" ")'
}
wait_until "$T endpoints: ready, not ready and per-pod ports" 20 equals "$want" got
slices() {
    k get endpointslices -n "$NS" -l kubernetes.io/service-name=web -o json | jq -r '
      [.items[] | .ports as $p | .endpoints[] |
        "\(.addresses[0]) ready=\(.conditions.ready) ports=\([$p[].port] | sort | map(tostring) | join(","))"] | sort | join("; ")'
}
want_slices=$(printf '%s\n' "$IP1 ready=true ports=8080,9000" "$IP2 ready=false ports=8081,9000" "$IP3 ready=true ports=9000" | sort | paste -sd';' | sed 's/;/; /g')
wait_until "$T endpoints: slices grouped by port set, with conditions" 20 equals "$want_slices" slices
expect_grep "$T endpoints: slices are owned by the Service and managed by the controller" \
    '^Service endpointslice-controller.k8s.io$' \
    "$(k get endpointslices -n "$NS" -l kubernetes.io/service-name=web -o json |
        jq -r '[.items[] | "\(.metadata.ownerReferences[0].kind) \(.metadata.labels["endpointslice.kubernetes.io/managed-by"])"] | unique | .[]')"
wait_until "$T endpoints: publishNotReadyAddresses lists the not-ready pod as ready" 20 equals "3" \
    jq_of endpoints web-all -n "$NS" -- '[.subsets[].addresses[]?] | length'
expect_grep "$T endpoints: a Service without a selector gets no endpoints from the controller" 'NotFound' \
    "$(k get endpoints manual -n "$NS")"

k delete pod web-1 -n "$NS" --wait=false >/dev/null
wait_until "$T endpoints: a deleted pod leaves the endpoints" 20 \
    bash -c "! $KUBECTL_BIN --kubeconfig $KC get endpoints web -n $NS -o json | grep -q '\"$IP1\"'"
k label pod web-3 -n "$NS" app=other --overwrite >/dev/null
wait_until "$T endpoints: a pod relabelled out of the selector leaves too" 20 \
    bash -c "! $KUBECTL_BIN --kubeconfig $KC get endpointslices -n $NS -l kubernetes.io/service-name=web -o json | grep -q '\"$IP3\"'"
k delete service web -n "$NS" >/dev/null
wait_until "$T endpoints: the Service's Endpoints and slices go with it" 20 equals "0" \
    bash -c "echo \$(( \$($KUBECTL_BIN --kubeconfig $KC get endpoints,endpointslices -n $NS -l kubernetes.io/service-name=web -o name | wc -l) + \$($KUBECTL_BIN --kubeconfig $KC get endpoints web -n $NS -o name 2>/dev/null | wc -l) ))"
