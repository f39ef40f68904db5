# The scheduler: pods without a node get one of the fake kubelet's nodes (n1, n2, n3: 4 cpus
# each) as kube-scheduler would choose it, and pods no node takes say why in kube-scheduler's
# words (PodScheduled=False and a FailedScheduling event), then get a node once one helps.
#
# Shared nodes are changed (a label on n2, a taint on n1) and put back; a node of this
# scenario's own is created for room and deleted again. Pods ask for cpu, so the scenario
# expects the three nodes otherwise free of cpu requests.

NODES=$(k get nodes -o name | wc -l | tr -d ' ')

node_of() { k get pod "$1" -n "$NS" -o jsonpath='{.spec.nodeName}'; }
scheduled_message() {
    k get pod "$1" -n "$NS" -o jsonpath='{.status.conditions[?(@.type=="PodScheduled")].message}'
}
scheduled_reason() {
    k get pod "$1" -n "$NS" -o jsonpath='{.status.conditions[?(@.type=="PodScheduled")].reason}'
}
# nodes_of APP: the nodes of the pods labelled app=APP, sorted, on one line.
nodes_of() {
    k get pods -n "$NS" -l "app=$1" -o jsonpath='{.items[*].spec.nodeName}' | tr ' ' '\n' |
        grep . | sort | tr '\n' ' ' | sed 's/ $//'
}
bound_count() { nodes_of "$1" | wc -w | tr -d ' '; }
is_bound() { [ -n "$(node_of "$1")" ]; }
# event_of POD REASON: "type|component|message" of the pod's first event with REASON.
event_of() {
    k get events -n "$NS" --field-selector "involvedObject.name=$1,reason=$2" \
        -o jsonpath='{.items[0].type}|{.items[0].source.component}|{.items[0].message}'
}
scheduled_event() {
    event_of spread-0 Scheduled |
        grep -Eq "^Normal\|default-scheduler\|Successfully assigned $NS/spread-0 to n[123]\$"
}

# run_pod NAME CPU [SPEC-JSON-FIELDS]: a pod asking CPU, with extra fields merged into spec.
run_pod() {
    local name=$1 cpu=$2 extra=${3:-}
    k apply -n "$NS" -f - >/dev/null <<EOF
{"apiVersion": "v1", "kind": "Pod",
 "metadata": {"name": "$name", "labels": {"app": "${name%%-*}"}},
 "spec": {${extra:+$extra,}
          "containers": [{"name": "c", "image": "nginx",
                          "resources": {"requests": {"cpu": "$cpu"}}}]}}
EOF
}

# --- spreading: three pods of one Service over the three nodes
k create service clusterip spread -n "$NS" --tcp=80 >/dev/null
for i in 0 1 2; do run_pod "spread-$i" 1500m; done
wait_until "$T scheduler: three pending pods are bound" 20 equals 3 bound_count spread
expect_grep "$T scheduler: spread over n1, n2, n3" '^n1 n2 n3$' "$(nodes_of spread)"
expect_grep "$T scheduler: PodScheduled=True" '^True$' \
    "$(k get pod spread-0 -n "$NS" -o jsonpath='{.status.conditions[?(@.type=="PodScheduled")].status}')"
wait_until "$T scheduler: Scheduled event from default-scheduler" 10 scheduled_event
wait_until "$T scheduler: the kubelet runs them" 20 \
    equals "Running Running Running" k get pods -n "$NS" -l app=spread -o jsonpath='{.items[*].status.phase}'

# --- insufficient cpu: no node has 3 cpus left; a node with room takes the pod
run_pod big 3
big_message="0/$NODES nodes are available: $NODES Insufficient cpu. preemption: 0/$NODES nodes are available: $NODES No preemption victims found for incoming pod."
wait_until "$T scheduler: insufficient cpu gives kube-scheduler's message" 15 \
    equals "$big_message" scheduled_message big
expect_grep "$T scheduler: reason Unschedulable" '^Unschedulable$' "$(scheduled_reason big)"
wait_until "$T scheduler: FailedScheduling event with the message" 10 \
    equals "Warning|default-scheduler|$big_message" event_of big FailedScheduling
expect_grep "$T scheduler: describe shows FailedScheduling" "FailedScheduling +.*default-scheduler +0/$NODES nodes are available" \
    "$(k describe pod big -n "$NS")"
roomy="$NS-roomy"
k create -f - >/dev/null <<EOF
{"apiVersion": "v1", "kind": "Node",
 "metadata": {"name": "$roomy", "labels": {"kubernetes.io/hostname": "$roomy"}}}
EOF
k patch node "$roomy" --subresource=status --type=merge -p "{\"status\": {
    \"capacity\": {\"cpu\": \"8\", \"memory\": \"16Gi\", \"pods\": \"110\"},
    \"allocatable\": {\"cpu\": \"8\", \"memory\": \"16Gi\", \"pods\": \"110\"},
    \"conditions\": [{\"type\": \"Ready\", \"status\": \"True\", \"reason\": \"KubeletReady\",
                      \"lastHeartbeatTime\": \"$(date -u +%Y-%m-%dT%H:%M:%SZ)\",
                      \"lastTransitionTime\": \"$(date -u +%Y-%m-%dT%H:%M:%SZ)\"}]}}" >/dev/null
wait_until "$T scheduler: a node with room takes the waiting pod" 15 equals "$roomy" node_of big
k delete pod big -n "$NS" --grace-period=0 --force >/dev/null 2>&1
k delete node "$roomy" >/dev/null

# --- nodeSelector: a label only n2 has
k label node n2 "scheduling.test/$NS=yes" >/dev/null
run_pod selected-0 100m "\"nodeSelector\": {\"scheduling.test/$NS\": \"yes\"}"
wait_until "$T scheduler: nodeSelector picks n2" 15 equals n2 node_of selected-0

# --- host ports: the second pod asking 8080 on n2 finds it taken
on_n2='"nodeSelector": {"kubernetes.io/hostname": "n2"}'
k apply -n "$NS" -f - >/dev/null <<EOF
{"apiVersion": "v1", "kind": "List", "items": [
  {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "port-a"},
   "spec": {$on_n2, "containers": [{"name": "c", "image": "nginx",
            "ports": [{"containerPort": 80, "hostPort": 8080}]}]}}]}
EOF
wait_until "$T scheduler: the first pod with host port 8080 is on n2" 15 equals n2 node_of port-a
k apply -n "$NS" -f - >/dev/null <<EOF
{"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "port-b"},
 "spec": {$on_n2, "containers": [{"name": "c", "image": "nginx",
          "ports": [{"containerPort": 80, "hostPort": 8080}]}]}}
EOF
others=$((NODES - 1))
wait_until "$T scheduler: the second waits: host port taken" 15 \
    equals "0/$NODES nodes are available: 1 node(s) didn't have free ports for the requested pod ports, $others node(s) didn't match Pod's node affinity/selector. preemption: 0/$NODES nodes are available: 1 No preemption victims found for incoming pod, $others Preemption is not helpful for scheduling." \
    scheduled_message port-b
k delete pod port-a -n "$NS" --wait=false >/dev/null
wait_until "$T scheduler: the port freed, the second pod gets n2" 20 equals n2 node_of port-b

# --- taints and tolerations on n1
k taint node n1 "dedicated=$NS:NoSchedule" >/dev/null
on_n1='"nodeSelector": {"kubernetes.io/hostname": "n1"}'
run_pod tolerant-0 100m "$on_n1, \"tolerations\": [{\"key\": \"dedicated\", \"operator\": \"Equal\", \"value\": \"$NS\", \"effect\": \"NoSchedule\"}]"
run_pod intolerant-0 100m "$on_n1"
wait_until "$T scheduler: a tolerating pod goes to the tainted node" 15 equals n1 node_of tolerant-0
wait_until "$T scheduler: an intolerant one waits, with the taint in the message" 15 \
    equals "0/$NODES nodes are available: 1 node(s) had untolerated taint {dedicated: $NS}, $others node(s) didn't match Pod's node affinity/selector. preemption: 0/$NODES nodes are available: $NODES Preemption is not helpful for scheduling." \
    scheduled_message intolerant-0
k taint node n1 "dedicated=$NS:NoSchedule-" >/dev/null
wait_until "$T scheduler: the taint removed, it gets n1" 20 equals n1 node_of intolerant-0
k label node n2 "scheduling.test/$NS-" >/dev/null

# --- required anti-affinity: one per node, the fourth waits
anti='"affinity": {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [{"labelSelector": {"matchLabels": {"app": "anti"}}, "topologyKey": "kubernetes.io/hostname"}]}}'
for i in 0 1 2 3; do run_pod "anti-$i" 100m "$anti"; done
wait_until "$T scheduler: anti-affinity puts three on three nodes" 20 equals "n1 n2 n3" nodes_of anti
waiting=
for i in 0 1 2 3; do [ -z "$(node_of "anti-$i")" ] && waiting=anti-$i; done
wait_until "$T scheduler: the fourth waits with the anti-affinity message" 15 \
    equals "0/$NODES nodes are available: $NODES node(s) didn't match pod anti-affinity rules. preemption: 0/$NODES nodes are available: $NODES No preemption victims found for incoming pod." \
    scheduled_message "$waiting"

# --- a new leader schedules (HA): the controllers' session moves, pending pods follow
if [ "$HA" = 1 ]; then
    kill_leader
    pass "$T scheduler: leader $KILLED killed"
    run_pod after-0 100m
    wait_until "$T scheduler: the new leader binds a new pod" 30 is_bound after-0
fi

k delete pods --all -n "$NS" --wait=false >/dev/null 2>&1
