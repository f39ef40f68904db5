//! The roles and bindings every cluster has, as kube-apiserver 1.33 bootstraps them
//! (plugin/pkg/auth/authorizer/rbac/bootstrappolicy): `cluster-admin`, the aggregated
//! `admin`/`edit`/`view` with the `system:aggregate-to-*` roles they gather, `system:basic-user`,
//! `system:discovery`, `system:public-info-viewer`, the control-plane components' roles, the
//! node and proxy roles, and the `kube-system`/`kube-public` leader-locking and signer roles.
//! Every object carries the label `kubernetes.io/bootstrapping: rbac-defaults` and the annotation
//! `rbac.authorization.kubernetes.io/autoupdate: "true"`; the leader reconciles them at start
//! (`controllers::rbac_defaults`).
//!
//! Differences from kube-apiserver, and why:
//! - `system:node` is bound to the group `system:nodes`: the Node authorizer, which upstream
//!   grants nodes their access instead (and narrows it to what their pods use), is not built.
//! - The per-controller roles (`system:controller:*` ClusterRoles) are not created: the
//!   in-process controllers act as one identity (`client::identities::controller_manager`).

use serde_json::{json, Value};

use super::rbac::rule::PolicyRule;

/// The label on every default object.
pub const BOOTSTRAP_LABEL: (&str, &str) = ("kubernetes.io/bootstrapping", "rbac-defaults");
/// The annotation that lets the reconcile at start update an object (`"false"` keeps a user's
/// edits).
pub const AUTOUPDATE: &str = "rbac.authorization.kubernetes.io/autoupdate";
/// The aggregation labels of `admin`, `edit` and `view`.
pub const AGGREGATE_TO_ADMIN: &str = "rbac.authorization.k8s.io/aggregate-to-admin";
pub const AGGREGATE_TO_EDIT: &str = "rbac.authorization.k8s.io/aggregate-to-edit";
pub const AGGREGATE_TO_VIEW: &str = "rbac.authorization.k8s.io/aggregate-to-view";

const READ: &[&str] = &["get", "list", "watch"];
const WRITE: &[&str] = &["create", "delete", "deletecollection", "patch", "update"];
const READ_WRITE: &[&str] = &[
    "create",
    "delete",
    "deletecollection",
    "get",
    "list",
    "patch",
    "update",
    "watch",
];
const EVENTS_WRITE: &[&str] = &["create", "patch", "update"];

fn r(verbs: &[&str], groups: &[&str], resources: &[&str]) -> PolicyRule {
    PolicyRule::resource(verbs, groups, resources)
}

fn events_rule() -> PolicyRule {
    r(EVENTS_WRITE, &["", "events.k8s.io"], &["events"])
}

/// A default object: kind-specific body plus the bootstrap metadata.
fn object(
    kind: &str,
    namespace: Option<&str>,
    name: &str,
    labels: &[(&str, &str)],
    body: Value,
) -> Value {
    let mut label_map = serde_json::Map::new();
    label_map.insert(BOOTSTRAP_LABEL.0.into(), BOOTSTRAP_LABEL.1.into());
    for (k, v) in labels {
        label_map.insert((*k).into(), (*v).into());
    }
    let mut metadata = json!({
        "name": name,
        "labels": label_map,
        "annotations": {AUTOUPDATE: "true"},
    });
    if let Some(ns) = namespace {
        metadata["namespace"] = ns.into();
    }
    let mut out = json!({
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": kind,
        "metadata": metadata,
    });
    if let (Value::Object(out_map), Value::Object(body)) = (&mut out, body) {
        out_map.extend(body);
    }
    out
}

fn role_body(rules: Vec<PolicyRule>) -> Value {
    json!({"rules": rules})
}

fn cluster_role(name: &str, labels: &[(&str, &str)], rules: Vec<PolicyRule>) -> Value {
    object("ClusterRole", None, name, labels, role_body(rules))
}

/// A ClusterRole whose rules the aggregation controller gathers from those labelled `label`.
fn aggregated(name: &str, labels: &[(&str, &str)], label: &str) -> Value {
    object(
        "ClusterRole",
        None,
        name,
        labels,
        json!({
            "aggregationRule": {"clusterRoleSelectors": [{"matchLabels": {label: "true"}}]},
        }),
    )
}

/// A subject: `("Group", "system:masters")`, `("User", …)`, or `("ServiceAccount",
/// "ns/name")`.
fn subjects(list: &[(&str, &str)]) -> Value {
    list.iter()
        .map(|(kind, name)| match *kind {
            "ServiceAccount" => {
                let (ns, sa) = name.split_once('/').unwrap_or(("", name));
                json!({"kind": kind, "name": sa, "namespace": ns})
            }
            _ => json!({"apiGroup": "rbac.authorization.k8s.io", "kind": kind, "name": name}),
        })
        .collect()
}

fn binding(
    kind: &str,
    namespace: Option<&str>,
    name: &str,
    role_kind: &str,
    role: &str,
    who: &[(&str, &str)],
) -> Value {
    object(
        kind,
        namespace,
        name,
        &[],
        json!({
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": role_kind, "name": role},
            "subjects": subjects(who),
        }),
    )
}

fn node_rules() -> Vec<PolicyRule> {
    vec![
        r(&["create"], &["authentication.k8s.io"], &["tokenreviews"]),
        r(
            &["create"],
            &["authorization.k8s.io"],
            &["localsubjectaccessreviews", "subjectaccessreviews"],
        ),
        r(READ, &[""], &["services"]),
        // The agent's cluster DNS and Service proxy follow every Service's endpoints.
        r(READ, &["discovery.k8s.io"], &["endpointslices"]),
        r(&["create", "get", "list", "watch"], &[""], &["nodes"]),
        r(&["patch", "update"], &[""], &["nodes/status"]),
        r(&["patch", "update"], &[""], &["nodes"]),
        r(EVENTS_WRITE, &[""], &["events"]),
        r(READ, &[""], &["pods"]),
        // The agent enforces NetworkPolicy: the policies, and the namespaces' labels their
        // namespaceSelectors match (upstream, kube-router or a CNI has its own account).
        r(READ, &["networking.k8s.io"], &["networkpolicies"]),
        r(READ, &[""], &["namespaces"]),
        r(&["create", "delete"], &[""], &["pods"]),
        r(&["patch", "update"], &[""], &["pods/status"]),
        r(&["create"], &[""], &["pods/eviction"]),
        r(READ, &[""], &["configmaps", "secrets"]),
        r(
            &["get"],
            &[""],
            &["persistentvolumeclaims", "persistentvolumes"],
        ),
        r(&["get"], &[""], &["endpoints"]),
        r(
            &["create", "get", "list", "watch"],
            &["certificates.k8s.io"],
            &["certificatesigningrequests"],
        ),
        r(
            &["create", "delete", "get", "patch", "update"],
            &["coordination.k8s.io"],
            &["leases"],
        ),
        r(&["get"], &["storage.k8s.io"], &["volumeattachments"]),
        r(&["create"], &[""], &["serviceaccounts/token"]),
        r(
            &["get", "patch", "update"],
            &[""],
            &["persistentvolumeclaims/status"],
        ),
        r(READ, &["storage.k8s.io"], &["csidrivers"]),
        r(
            &["create", "delete", "get", "patch", "update"],
            &["storage.k8s.io"],
            &["csinodes"],
        ),
        r(READ, &["node.k8s.io"], &["runtimeclasses"]),
    ]
}

/// The default ClusterRoles.
pub fn cluster_roles() -> Vec<Value> {
    let signer_approver = |name: &str, signer: &str| {
        cluster_role(
            name,
            &[],
            vec![r(&["approve"], &["certificates.k8s.io"], &["signers"]).named(&[signer])],
        )
    };
    vec![
        aggregated("admin", &[], AGGREGATE_TO_ADMIN),
        cluster_role(
            "cluster-admin",
            &[],
            vec![r(&["*"], &["*"], &["*"]), PolicyRule::urls(&["*"], &["*"])],
        ),
        aggregated("edit", &[(AGGREGATE_TO_ADMIN, "true")], AGGREGATE_TO_EDIT),
        cluster_role(
            "system:aggregate-to-admin",
            &[(AGGREGATE_TO_ADMIN, "true")],
            vec![
                r(
                    &["create"],
                    &["authorization.k8s.io"],
                    &["localsubjectaccessreviews"],
                ),
                r(
                    READ_WRITE,
                    &["rbac.authorization.k8s.io"],
                    &["rolebindings", "roles"],
                ),
            ],
        ),
        cluster_role(
            "system:aggregate-to-edit",
            &[(AGGREGATE_TO_EDIT, "true")],
            vec![
                r(
                    READ,
                    &[""],
                    &[
                        "pods/attach",
                        "pods/exec",
                        "pods/portforward",
                        "pods/proxy",
                        "secrets",
                        "services/proxy",
                    ],
                ),
                r(&["impersonate"], &[""], &["serviceaccounts"]),
                r(
                    WRITE,
                    &[""],
                    &[
                        "pods",
                        "pods/attach",
                        "pods/exec",
                        "pods/portforward",
                        "pods/proxy",
                    ],
                ),
                r(&["create"], &[""], &["pods/eviction"]),
                r(
                    WRITE,
                    &[""],
                    &[
                        "configmaps",
                        "events",
                        "persistentvolumeclaims",
                        "replicationcontrollers",
                        "replicationcontrollers/scale",
                        "secrets",
                        "serviceaccounts",
                        "services",
                        "services/proxy",
                    ],
                ),
                r(&["create"], &[""], &["serviceaccounts/token"]),
                r(
                    WRITE,
                    &["apps"],
                    &[
                        "daemonsets",
                        "deployments",
                        "deployments/rollback",
                        "deployments/scale",
                        "replicasets",
                        "replicasets/scale",
                        "statefulsets",
                        "statefulsets/scale",
                    ],
                ),
                r(WRITE, &["autoscaling"], &["horizontalpodautoscalers"]),
                r(WRITE, &["batch"], &["cronjobs", "jobs"]),
                r(
                    WRITE,
                    &["extensions"],
                    &[
                        "daemonsets",
                        "deployments",
                        "deployments/rollback",
                        "deployments/scale",
                        "ingresses",
                        "networkpolicies",
                        "replicasets",
                        "replicasets/scale",
                        "replicationcontrollers/scale",
                    ],
                ),
                r(WRITE, &["policy"], &["poddisruptionbudgets"]),
                r(
                    WRITE,
                    &["networking.k8s.io"],
                    &["ingresses", "networkpolicies"],
                ),
                r(READ_WRITE, &["coordination.k8s.io"], &["leases"]),
            ],
        ),
        cluster_role(
            "system:aggregate-to-view",
            &[(AGGREGATE_TO_VIEW, "true")],
            vec![
                r(
                    READ,
                    &[""],
                    &[
                        "configmaps",
                        "endpoints",
                        "persistentvolumeclaims",
                        "persistentvolumeclaims/status",
                        "pods",
                        "replicationcontrollers",
                        "replicationcontrollers/scale",
                        "serviceaccounts",
                        "services",
                        "services/status",
                    ],
                ),
                r(
                    READ,
                    &[""],
                    &[
                        "bindings",
                        "events",
                        "limitranges",
                        "namespaces/status",
                        "pods/log",
                        "pods/status",
                        "replicationcontrollers/status",
                        "resourcequotas",
                        "resourcequotas/status",
                    ],
                ),
                r(READ, &[""], &["namespaces"]),
                r(READ, &["discovery.k8s.io"], &["endpointslices"]),
                r(
                    READ,
                    &["apps"],
                    &[
                        "controllerrevisions",
                        "daemonsets",
                        "daemonsets/status",
                        "deployments",
                        "deployments/scale",
                        "deployments/status",
                        "replicasets",
                        "replicasets/scale",
                        "replicasets/status",
                        "statefulsets",
                        "statefulsets/scale",
                        "statefulsets/status",
                    ],
                ),
                r(
                    READ,
                    &["autoscaling"],
                    &[
                        "horizontalpodautoscalers",
                        "horizontalpodautoscalers/status",
                    ],
                ),
                r(
                    READ,
                    &["batch"],
                    &["cronjobs", "cronjobs/status", "jobs", "jobs/status"],
                ),
                r(
                    READ,
                    &["extensions"],
                    &[
                        "daemonsets",
                        "daemonsets/status",
                        "deployments",
                        "deployments/scale",
                        "deployments/status",
                        "ingresses",
                        "ingresses/status",
                        "networkpolicies",
                        "replicasets",
                        "replicasets/scale",
                        "replicasets/status",
                        "replicationcontrollers/scale",
                    ],
                ),
                r(
                    READ,
                    &["policy"],
                    &["poddisruptionbudgets", "poddisruptionbudgets/status"],
                ),
                r(
                    READ,
                    &["networking.k8s.io"],
                    &["ingresses", "ingresses/status", "networkpolicies"],
                ),
            ],
        ),
        cluster_role(
            "system:auth-delegator",
            &[],
            vec![
                r(&["create"], &["authentication.k8s.io"], &["tokenreviews"]),
                r(
                    &["create"],
                    &["authorization.k8s.io"],
                    &["subjectaccessreviews"],
                ),
            ],
        ),
        cluster_role(
            "system:basic-user",
            &[],
            vec![
                r(
                    &["create"],
                    &["authorization.k8s.io"],
                    &["selfsubjectaccessreviews", "selfsubjectrulesreviews"],
                ),
                r(
                    &["create"],
                    &["authentication.k8s.io"],
                    &["selfsubjectreviews"],
                ),
            ],
        ),
        cluster_role(
            "system:certificates.k8s.io:certificatesigningrequests:nodeclient",
            &[],
            vec![r(
                &["create"],
                &["certificates.k8s.io"],
                &["certificatesigningrequests/nodeclient"],
            )],
        ),
        cluster_role(
            "system:certificates.k8s.io:certificatesigningrequests:selfnodeclient",
            &[],
            vec![r(
                &["create"],
                &["certificates.k8s.io"],
                &["certificatesigningrequests/selfnodeclient"],
            )],
        ),
        signer_approver(
            "system:certificates.k8s.io:kube-apiserver-client-approver",
            "kubernetes.io/kube-apiserver-client",
        ),
        signer_approver(
            "system:certificates.k8s.io:kube-apiserver-client-kubelet-approver",
            "kubernetes.io/kube-apiserver-client-kubelet",
        ),
        signer_approver(
            "system:certificates.k8s.io:kubelet-serving-approver",
            "kubernetes.io/kubelet-serving",
        ),
        signer_approver(
            "system:certificates.k8s.io:legacy-unknown-approver",
            "kubernetes.io/legacy-unknown",
        ),
        cluster_role(
            "system:discovery",
            &[],
            vec![PolicyRule::urls(
                &["get"],
                &[
                    "/api",
                    "/api/*",
                    "/apis",
                    "/apis/*",
                    "/healthz",
                    "/livez",
                    "/openapi",
                    "/openapi/*",
                    "/readyz",
                    "/version",
                    "/version/",
                ],
            )],
        ),
        cluster_role(
            "system:heapster",
            &[],
            vec![
                r(READ, &[""], &["events", "namespaces", "nodes", "pods"]),
                r(READ, &["extensions"], &["deployments"]),
            ],
        ),
        cluster_role(
            "system:kube-aggregator",
            &[],
            vec![r(READ, &[""], &["endpoints", "services"])],
        ),
        cluster_role(
            "system:kube-controller-manager",
            &[],
            vec![
                events_rule(),
                r(&["create"], &["coordination.k8s.io"], &["leases"]),
                r(&["get", "update"], &["coordination.k8s.io"], &["leases"])
                    .named(&["kube-controller-manager"]),
                r(&["create"], &[""], &["secrets", "serviceaccounts"]),
                r(&["delete"], &[""], &["secrets"]),
                r(
                    &["get"],
                    &[""],
                    &["configmaps", "namespaces", "secrets", "serviceaccounts"],
                ),
                r(&["update"], &[""], &["secrets", "serviceaccounts"]),
                r(&["create"], &["authentication.k8s.io"], &["tokenreviews"]),
                r(
                    &["create"],
                    &["authorization.k8s.io"],
                    &["subjectaccessreviews"],
                ),
                r(&["list", "watch"], &["*"], &["*"]),
                r(&["create"], &[""], &["serviceaccounts/token"]),
            ],
        ),
        cluster_role(
            "system:kube-dns",
            &[],
            vec![r(&["list", "watch"], &[""], &["endpoints", "services"])],
        ),
        cluster_role(
            "system:kube-scheduler",
            &[],
            vec![
                events_rule(),
                r(&["create"], &["coordination.k8s.io"], &["leases"]),
                r(&["get", "update"], &["coordination.k8s.io"], &["leases"])
                    .named(&["kube-scheduler"]),
                r(READ, &[""], &["nodes"]),
                r(&["delete", "get", "list", "watch"], &[""], &["pods"]),
                r(&["create"], &[""], &["bindings", "pods/binding"]),
                r(&["patch", "update"], &[""], &["pods/status"]),
                r(READ, &[""], &["replicationcontrollers", "services"]),
                r(READ, &["apps", "extensions"], &["replicasets"]),
                r(READ, &["apps"], &["statefulsets"]),
                r(READ, &["policy"], &["poddisruptionbudgets"]),
                r(
                    READ,
                    &[""],
                    &["persistentvolumeclaims", "persistentvolumes"],
                ),
                r(&["create"], &["authentication.k8s.io"], &["tokenreviews"]),
                r(
                    &["create"],
                    &["authorization.k8s.io"],
                    &["subjectaccessreviews"],
                ),
                r(READ, &["storage.k8s.io"], &["csinodes"]),
                r(READ, &[""], &["namespaces"]),
                r(READ, &["storage.k8s.io"], &["csidrivers"]),
                r(READ, &["storage.k8s.io"], &["csistoragecapacities"]),
            ],
        ),
        cluster_role(
            "system:kubelet-api-admin",
            &[],
            vec![
                r(READ, &[""], &["nodes"]),
                r(&["proxy"], &[""], &["nodes"]),
                r(
                    &["*"],
                    &[""],
                    &["nodes/log", "nodes/metrics", "nodes/proxy", "nodes/stats"],
                ),
            ],
        ),
        cluster_role(
            "system:monitoring",
            &[],
            vec![PolicyRule::urls(
                &["get"],
                &[
                    "/healthz",
                    "/healthz/*",
                    "/livez",
                    "/livez/*",
                    "/metrics",
                    "/metrics/slis",
                    "/readyz",
                    "/readyz/*",
                ],
            )],
        ),
        cluster_role("system:node", &[], node_rules()),
        cluster_role(
            "system:node-bootstrapper",
            &[],
            vec![r(
                &["create", "get", "list", "watch"],
                &["certificates.k8s.io"],
                &["certificatesigningrequests"],
            )],
        ),
        cluster_role(
            "system:node-problem-detector",
            &[],
            vec![
                r(&["get"], &[""], &["nodes"]),
                r(&["patch"], &[""], &["nodes/status"]),
                events_rule(),
            ],
        ),
        cluster_role(
            "system:node-proxier",
            &[],
            vec![
                r(&["list", "watch"], &[""], &["endpoints", "services"]),
                r(READ, &[""], &["nodes"]),
                events_rule(),
                r(
                    &["list", "watch"],
                    &["discovery.k8s.io"],
                    &["endpointslices"],
                ),
            ],
        ),
        cluster_role(
            "system:persistent-volume-provisioner",
            &[],
            vec![
                r(
                    &["create", "delete", "get", "list", "watch"],
                    &[""],
                    &["persistentvolumes"],
                ),
                r(
                    &["get", "list", "update", "watch"],
                    &[""],
                    &["persistentvolumeclaims"],
                ),
                r(READ, &["storage.k8s.io"], &["storageclasses"]),
                r(&["watch"], &[""], &["events"]),
                events_rule(),
            ],
        ),
        cluster_role(
            "system:public-info-viewer",
            &[],
            vec![PolicyRule::urls(
                &["get"],
                &["/healthz", "/livez", "/readyz", "/version", "/version/"],
            )],
        ),
        cluster_role(
            "system:service-account-issuer-discovery",
            &[],
            vec![PolicyRule::urls(
                &["get"],
                &["/.well-known/openid-configuration", "/openid/v1/jwks"],
            )],
        ),
        cluster_role(
            "system:volume-scheduler",
            &[],
            vec![
                r(
                    &["get", "list", "patch", "update", "watch"],
                    &[""],
                    &["persistentvolumes"],
                ),
                r(READ, &["storage.k8s.io"], &["storageclasses"]),
                r(
                    &["get", "list", "patch", "update", "watch"],
                    &[""],
                    &["persistentvolumeclaims"],
                ),
            ],
        ),
        aggregated("view", &[(AGGREGATE_TO_EDIT, "true")], AGGREGATE_TO_VIEW),
    ]
}

/// The default ClusterRoleBindings.
pub fn cluster_role_bindings() -> Vec<Value> {
    let crb = |name: &str, who: &[(&str, &str)]| {
        binding("ClusterRoleBinding", None, name, "ClusterRole", name, who)
    };
    vec![
        crb("cluster-admin", &[("Group", "system:masters")]),
        crb("system:basic-user", &[("Group", "system:authenticated")]),
        crb("system:discovery", &[("Group", "system:authenticated")]),
        crb(
            "system:kube-controller-manager",
            &[("User", "system:kube-controller-manager")],
        ),
        crb(
            "system:kube-dns",
            &[("ServiceAccount", "kube-system/kube-dns")],
        ),
        crb(
            "system:kube-scheduler",
            &[("User", "system:kube-scheduler")],
        ),
        crb("system:monitoring", &[("Group", "system:monitoring")]),
        crb("system:node", &[("Group", "system:nodes")]),
        // Nodes renew their own client certificates (`controllers::csr_approving`); kubeadm
        // makes the same binding.
        crb(
            "system:certificates.k8s.io:certificatesigningrequests:selfnodeclient",
            &[("Group", "system:nodes")],
        ),
        crb("system:node-proxier", &[("User", "system:kube-proxy")]),
        crb(
            "system:public-info-viewer",
            &[
                ("Group", "system:authenticated"),
                ("Group", "system:unauthenticated"),
            ],
        ),
        crb(
            "system:service-account-issuer-discovery",
            &[("Group", "system:serviceaccounts")],
        ),
        binding(
            "ClusterRoleBinding",
            None,
            "system:volume-scheduler",
            "ClusterRole",
            "system:volume-scheduler",
            &[("User", "system:kube-scheduler")],
        ),
    ]
}

/// The default Roles of `kube-system` and `kube-public`.
pub fn roles() -> Vec<Value> {
    let role = |ns: &str, name: &str, rules: Vec<PolicyRule>| {
        object("Role", Some(ns), name, &[], role_body(rules))
    };
    let leader_locking = || {
        vec![
            r(
                &["create", "get", "list", "update", "watch"],
                &["coordination.k8s.io"],
                &["leases"],
            ),
            r(
                &["create", "get", "list", "update", "watch"],
                &["coordination.k8s.io"],
                &["leasecandidates"],
            ),
        ]
    };
    vec![
        role(
            "kube-public",
            "system:controller:bootstrap-signer",
            vec![
                r(READ, &[""], &["configmaps"]),
                r(&["update"], &[""], &["configmaps"]).named(&["cluster-info"]),
                events_rule(),
            ],
        ),
        role(
            "kube-system",
            "extension-apiserver-authentication-reader",
            vec![r(READ, &[""], &["configmaps"]).named(&["extension-apiserver-authentication"])],
        ),
        role(
            "kube-system",
            "system::leader-locking-kube-controller-manager",
            leader_locking(),
        ),
        role(
            "kube-system",
            "system::leader-locking-kube-scheduler",
            leader_locking(),
        ),
        role(
            "kube-system",
            "system:controller:bootstrap-signer",
            vec![r(READ, &[""], &["secrets"])],
        ),
        role(
            "kube-system",
            "system:controller:cloud-provider",
            vec![r(
                &["create", "get", "list", "watch"],
                &[""],
                &["configmaps"],
            )],
        ),
        role(
            "kube-system",
            "system:controller:token-cleaner",
            vec![
                r(&["delete", "get", "list", "watch"], &[""], &["secrets"]),
                events_rule(),
            ],
        ),
    ]
}

/// The default RoleBindings of `kube-system` and `kube-public`.
pub fn role_bindings() -> Vec<Value> {
    let rb = |ns: &str, name: &str, role: &str, who: &[(&str, &str)]| {
        binding("RoleBinding", Some(ns), name, "Role", role, who)
    };
    vec![
        rb(
            "kube-public",
            "system:controller:bootstrap-signer",
            "system:controller:bootstrap-signer",
            &[("ServiceAccount", "kube-system/bootstrap-signer")],
        ),
        rb(
            "kube-system",
            "system::extension-apiserver-authentication-reader",
            "extension-apiserver-authentication-reader",
            &[
                ("User", "system:kube-controller-manager"),
                ("User", "system:kube-scheduler"),
            ],
        ),
        rb(
            "kube-system",
            "system::leader-locking-kube-controller-manager",
            "system::leader-locking-kube-controller-manager",
            &[
                ("User", "system:kube-controller-manager"),
                ("ServiceAccount", "kube-system/kube-controller-manager"),
            ],
        ),
        rb(
            "kube-system",
            "system::leader-locking-kube-scheduler",
            "system::leader-locking-kube-scheduler",
            &[
                ("User", "system:kube-scheduler"),
                ("ServiceAccount", "kube-system/kube-scheduler"),
            ],
        ),
        rb(
            "kube-system",
            "system:controller:bootstrap-signer",
            "system:controller:bootstrap-signer",
            &[("ServiceAccount", "kube-system/bootstrap-signer")],
        ),
        rb(
            "kube-system",
            "system:controller:cloud-provider",
            "system:controller:cloud-provider",
            &[("ServiceAccount", "kube-system/cloud-provider")],
        ),
        rb(
            "kube-system",
            "system:controller:token-cleaner",
            "system:controller:token-cleaner",
            &[("ServiceAccount", "kube-system/token-cleaner")],
        ),
    ]
}
