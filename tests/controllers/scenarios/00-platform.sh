# The platform every controller stands on: the runner holds the control plane's Leases, the
# ServiceAccount controller gives the scenario's namespace its `default` account, the fake
# kubelet's nodes are Ready.

wait_until "$T platform: default ServiceAccount in $NS" 10 k get serviceaccount default -n "$NS"
holder=$(jq_of lease kube-scheduler -n kube-system -- '.spec.holderIdentity')
expect_grep "$T platform: kube-scheduler Lease held as <server>_<uuid>" \
    '^[a-z0-9-]+_[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$' "$holder"
expect_grep "$T platform: three Ready nodes" '^3$' \
    "$(jq_of nodes -- '[.items[] | select(.status.conditions[] | select(.type=="Ready" and .status=="True"))] | length')"
