# The platform every controller stands on: the runner holds the control plane's Leases, the
# ServiceAccount controller gives the scenario's namespace its `default` account, the fake
# kubelet's nodes are Ready.

wait_until "$T platform: default ServiceAccount in $NS" 10 k get serviceaccount default -n "$NS"
# The scheduler takes its Lease on its own schedule, possibly after the ServiceAccount appears.
wait_until "$T platform: kube-scheduler Lease held as <server>_<uuid>" 10 bash -c \
    "$KUBECTL_BIN --kubeconfig $KC get lease kube-scheduler -n kube-system -o jsonpath='{.spec.holderIdentity}' |
     grep -Eq '^[a-z0-9-]+_[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$'"
expect_grep "$T platform: three Ready nodes" '^3$' \
    "$(jq_of nodes -- '[.items[] | select(.status.conditions[] | select(.type=="Ready" and .status=="True"))] | length')"
# Pod CIDRs from --cluster-cidr (10.42.0.0/16): a distinct /24 for each node.
wait_until "$T platform: each node gets its own /24 pod CIDR" 10 equals "3 3" \
    bash -c "$KUBECTL_BIN --kubeconfig $KC get nodes -o json | jq -r '[.items[].spec.podCIDR | select(. != null) | select(test(\"^10\\\\.42\\\\.[0-9]+\\\\.0/24$\"))] | \"\(length) \(unique | length)\"'"
