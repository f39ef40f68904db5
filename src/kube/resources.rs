//! The registry of built-in kinds the API server serves: group, version, kind, plural and
//! singular names, short names, categories, scope, verbs, subresources and the per-kind
//! selectable fields. Discovery, routing, OpenAPI and tables all read this one table; the
//! custom kinds CustomResourceDefinitions add at run time are `api::crd`'s registry, whose
//! served versions are described by the same `ResourceInfo`.

use std::collections::HashMap;
use std::sync::LazyLock;

use serde_json::Value;

/// Static description of one served resource.
#[derive(Debug)]
pub struct ResourceInfo {
    /// API group; "" for the core group.
    pub group: &'static str,
    pub version: &'static str,
    pub kind: &'static str,
    /// Plural resource name used in URLs.
    pub plural: &'static str,
    pub singular: &'static str,
    pub short_names: &'static [&'static str],
    pub categories: &'static [&'static str],
    pub namespaced: bool,
    /// Whether the kind has a `status` subresource.
    pub has_status: bool,
    /// Whether `metadata.generation` is tracked (bumped on spec changes).
    pub tracks_generation: bool,
    /// Fields usable in fieldSelector besides metadata.name and metadata.namespace.
    pub selectable_fields: &'static [&'static str],
    /// Whether the kind has a `scale` subresource besides the built-in ones in [`SCALABLE`]
    /// (a custom kind whose definition asks for one).
    pub has_scale: bool,
}

impl ResourceInfo {
    /// The store's resource key: `plural` for the core group, `group/plural` otherwise.
    pub fn store_key(&self) -> String {
        if self.group.is_empty() {
            self.plural.to_string()
        } else {
            format!("{}/{}", self.group, self.plural)
        }
    }

    /// `v1` or `group/version`.
    pub fn api_version(&self) -> String {
        if self.group.is_empty() {
            self.version.to_string()
        } else {
            format!("{}/{}", self.group, self.version)
        }
    }

    /// `plural` or `plural.group`, as Kubernetes names resources in error messages.
    pub fn qualified_plural(&self) -> String {
        if self.group.is_empty() {
            self.plural.to_string()
        } else {
            format!("{}.{}", self.plural, self.group)
        }
    }

    /// The verbs discovery advertises. Namespaces have no `deletecollection` upstream; the
    /// legacy `bindings` collection only takes creates.
    pub fn verbs(&self) -> &'static [&'static str] {
        if self.is_create_only() {
            &["create"]
        } else if WITHOUT_DELETECOLLECTION.contains(&(self.group, self.plural)) {
            &[
                "create", "delete", "get", "list", "patch", "update", "watch",
            ]
        } else {
            &[
                "create",
                "delete",
                "deletecollection",
                "get",
                "list",
                "patch",
                "update",
                "watch",
            ]
        }
    }

    /// Whether the resource is never stored, only posted to (`bindings`): discovery lists it
    /// with the one verb `create` and no storage version hash.
    pub fn is_create_only(&self) -> bool {
        CREATE_ONLY.contains(&(self.group, self.plural))
    }

    /// apiserver's storageVersionHash: base64 of the first 8 bytes of sha256("group/version/kind").
    /// Clients only compare it for equality (to invalidate caches).
    pub fn storage_version_hash(&self) -> String {
        use base64::Engine;
        use sha2::Digest;
        let digest = sha2::Sha256::digest(format!("{}/{}/{}", self.group, self.version, self.kind));
        base64::engine::general_purpose::STANDARD.encode(&digest[..8])
    }

    /// Subresources discovery advertises: `status` for kinds with one, `binding` and
    /// `eviction` for pods, `token` for service accounts, `scale` for the kinds listed in
    /// [`SCALABLE`].
    pub fn subresources(&self) -> Vec<Subresource> {
        let mut out = Vec::new();
        if self.group.is_empty() && self.plural == "pods" {
            out.push(Subresource {
                name: "binding",
                group: "",
                version: "v1",
                kind: "Binding",
                verbs: &["create"],
            });
        }
        if self.has_status {
            out.push(Subresource {
                name: "status",
                group: self.group,
                version: self.version,
                kind: self.kind,
                verbs: &["get", "patch", "update"],
            });
        }
        if self.group.is_empty() && self.plural == "pods" {
            out.push(Subresource {
                name: "eviction",
                group: "policy",
                version: "v1",
                kind: "Eviction",
                verbs: &["create"],
            });
        }
        if self.group == "certificates.k8s.io" && self.plural == "certificatesigningrequests" {
            out.push(Subresource {
                name: "approval",
                group: self.group,
                version: self.version,
                kind: self.kind,
                verbs: &["get", "patch", "update"],
            });
        }
        if self.group.is_empty() && self.plural == "serviceaccounts" {
            out.push(Subresource {
                name: "token",
                group: "authentication.k8s.io",
                version: "v1",
                kind: "TokenRequest",
                verbs: &["create"],
            });
        }
        if self.has_scale || SCALABLE.contains(&(self.group, self.plural)) {
            out.push(Subresource {
                name: "scale",
                group: "autoscaling",
                version: "v1",
                kind: "Scale",
                verbs: &["get", "patch", "update"],
            });
        }
        // Discovery lists them by name, as kube-apiserver does.
        out.sort_by_key(|s| s.name);
        out
    }
}

/// A subresource (`<plural>/<name>`) as discovery describes it: the kind it returns and its verbs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Subresource {
    pub name: &'static str,
    pub group: &'static str,
    pub version: &'static str,
    pub kind: &'static str,
    pub verbs: &'static [&'static str],
}

/// (group, plural) of kinds whose discovery verbs lack `deletecollection`.
const WITHOUT_DELETECOLLECTION: &[(&str, &str)] = &[("", "namespaces")];

/// (group, plural) of resources that only take creates and store nothing: the legacy
/// `bindings` and the access reviews (`api::access_review`).
const CREATE_ONLY: &[(&str, &str)] = &[
    ("", "bindings"),
    ("authorization.k8s.io", "selfsubjectaccessreviews"),
    ("authorization.k8s.io", "subjectaccessreviews"),
    ("authorization.k8s.io", "localsubjectaccessreviews"),
    ("authorization.k8s.io", "selfsubjectrulesreviews"),
    ("authentication.k8s.io", "selfsubjectreviews"),
    ("authentication.k8s.io", "tokenreviews"),
];

/// (group, plural) of kinds with a `scale` subresource (autoscaling/v1 Scale).
const SCALABLE: &[(&str, &str)] = &[
    ("apps", "deployments"),
    ("apps", "replicasets"),
    ("apps", "statefulsets"),
    ("", "replicationcontrollers"),
];

const NO_NAMES: &[&str] = &[];
const ALL: &[&str] = &["all"];

macro_rules! resource {
    ($group:expr, $version:expr, $kind:expr, $plural:expr, $singular:expr, $short:expr, $cats:expr,
     namespaced: $ns:expr, status: $status:expr, generation: $gen:expr, fields: $fields:expr) => {
        ResourceInfo {
            group: $group,
            version: $version,
            kind: $kind,
            plural: $plural,
            singular: $singular,
            short_names: $short,
            categories: $cats,
            namespaced: $ns,
            has_status: $status,
            tracks_generation: $gen,
            selectable_fields: $fields,
            has_scale: false,
        }
    };
}

/// Every served resource.
pub static RESOURCES: &[ResourceInfo] = &[
    resource!("", "v1", "Namespace", "namespaces", "namespace", &["ns"], NO_NAMES,
        namespaced: false, status: true, generation: false, fields: &["status.phase"]),
    resource!("", "v1", "Node", "nodes", "node", &["no"], NO_NAMES,
        namespaced: false, status: true, generation: false, fields: &["spec.unschedulable"]),
    resource!("", "v1", "Pod", "pods", "pod", &["po"], ALL,
        namespaced: true, status: true, generation: false,
        fields: &["spec.nodeName", "spec.restartPolicy", "spec.schedulerName",
                  "spec.serviceAccountName", "spec.hostNetwork", "status.phase",
                  "status.podIP", "status.nominatedNodeName"]),
    resource!("", "v1", "Binding", "bindings", "binding", NO_NAMES, NO_NAMES,
        namespaced: true, status: false, generation: false, fields: &[]),
    resource!("", "v1", "Service", "services", "service", &["svc"], ALL,
        namespaced: true, status: true, generation: false, fields: &["spec.clusterIP", "spec.type"]),
    resource!("", "v1", "Endpoints", "endpoints", "endpoints", &["ep"], NO_NAMES,
        namespaced: true, status: false, generation: false, fields: &[]),
    resource!("", "v1", "ConfigMap", "configmaps", "configmap", &["cm"], NO_NAMES,
        namespaced: true, status: false, generation: false, fields: &[]),
    resource!("", "v1", "Secret", "secrets", "secret", NO_NAMES, NO_NAMES,
        namespaced: true, status: false, generation: false, fields: &["type"]),
    resource!("", "v1", "ServiceAccount", "serviceaccounts", "serviceaccount", &["sa"], NO_NAMES,
        namespaced: true, status: false, generation: false, fields: &[]),
    resource!("", "v1", "Event", "events", "event", &["ev"], NO_NAMES,
        namespaced: true, status: false, generation: false,
        fields: &["involvedObject.kind", "involvedObject.namespace", "involvedObject.name",
                  "involvedObject.uid", "involvedObject.apiVersion",
                  "involvedObject.resourceVersion", "involvedObject.fieldPath",
                  "reason", "reportingComponent", "source", "type"]),
    resource!("events.k8s.io", "v1", "Event", "events", "event", &["ev"], NO_NAMES,
        namespaced: true, status: false, generation: false,
        fields: &["regarding.kind", "regarding.namespace", "regarding.name", "regarding.uid",
                  "reason", "reportingController", "type"]),
    resource!("discovery.k8s.io", "v1", "EndpointSlice", "endpointslices", "endpointslice", NO_NAMES, NO_NAMES,
        namespaced: true, status: false, generation: true, fields: &["addressType"]),
    resource!("coordination.k8s.io", "v1", "Lease", "leases", "lease", NO_NAMES, NO_NAMES,
        namespaced: true, status: false, generation: false, fields: &[]),
    resource!("", "v1", "ReplicationController", "replicationcontrollers", "replicationcontroller", &["rc"], ALL,
        namespaced: true, status: true, generation: true, fields: &[]),
    resource!("", "v1", "PersistentVolume", "persistentvolumes", "persistentvolume", &["pv"], NO_NAMES,
        namespaced: false, status: true, generation: false, fields: &[]),
    resource!("", "v1", "PersistentVolumeClaim", "persistentvolumeclaims", "persistentvolumeclaim", &["pvc"], NO_NAMES,
        namespaced: true, status: true, generation: false, fields: &[]),
    resource!("", "v1", "ResourceQuota", "resourcequotas", "resourcequota", &["quota"], NO_NAMES,
        namespaced: true, status: true, generation: false, fields: &[]),
    resource!("", "v1", "LimitRange", "limitranges", "limitrange", &["limits"], NO_NAMES,
        namespaced: true, status: false, generation: false, fields: &[]),
    resource!("apps", "v1", "Deployment", "deployments", "deployment", &["deploy"], ALL,
        namespaced: true, status: true, generation: true, fields: &[]),
    resource!("apps", "v1", "ReplicaSet", "replicasets", "replicaset", &["rs"], ALL,
        namespaced: true, status: true, generation: true, fields: &[]),
    resource!("apps", "v1", "DaemonSet", "daemonsets", "daemonset", &["ds"], ALL,
        namespaced: true, status: true, generation: true, fields: &[]),
    resource!("apps", "v1", "StatefulSet", "statefulsets", "statefulset", &["sts"], ALL,
        namespaced: true, status: true, generation: true, fields: &[]),
    resource!("apps", "v1", "ControllerRevision", "controllerrevisions", "controllerrevision", NO_NAMES, NO_NAMES,
        namespaced: true, status: false, generation: false, fields: &[]),
    resource!("batch", "v1", "Job", "jobs", "job", NO_NAMES, ALL,
        namespaced: true, status: true, generation: true, fields: &[]),
    resource!("batch", "v1", "CronJob", "cronjobs", "cronjob", &["cj"], ALL,
        namespaced: true, status: true, generation: true, fields: &[]),
    resource!("autoscaling", "v2", "HorizontalPodAutoscaler", "horizontalpodautoscalers", "horizontalpodautoscaler", &["hpa"], ALL,
        namespaced: true, status: true, generation: false, fields: &[]),
    resource!("policy", "v1", "PodDisruptionBudget", "poddisruptionbudgets", "poddisruptionbudget", &["pdb"], NO_NAMES,
        namespaced: true, status: true, generation: true, fields: &[]),
    resource!("scheduling.k8s.io", "v1", "PriorityClass", "priorityclasses", "priorityclass", &["pc"], NO_NAMES,
        namespaced: false, status: false, generation: false, fields: &[]),
    resource!("networking.k8s.io", "v1", "Ingress", "ingresses", "ingress", &["ing"], NO_NAMES,
        namespaced: true, status: true, generation: true, fields: &[]),
    resource!("networking.k8s.io", "v1", "IngressClass", "ingressclasses", "ingressclass", NO_NAMES, NO_NAMES,
        namespaced: false, status: false, generation: true, fields: &[]),
    resource!("networking.k8s.io", "v1", "NetworkPolicy", "networkpolicies", "networkpolicy", &["netpol"], NO_NAMES,
        namespaced: true, status: false, generation: true, fields: &[]),
    resource!("rbac.authorization.k8s.io", "v1", "Role", "roles", "role", NO_NAMES, NO_NAMES,
        namespaced: true, status: false, generation: false, fields: &[]),
    resource!("rbac.authorization.k8s.io", "v1", "RoleBinding", "rolebindings", "rolebinding", NO_NAMES, NO_NAMES,
        namespaced: true, status: false, generation: false, fields: &[]),
    resource!("rbac.authorization.k8s.io", "v1", "ClusterRole", "clusterroles", "clusterrole", NO_NAMES, NO_NAMES,
        namespaced: false, status: false, generation: false, fields: &[]),
    resource!("rbac.authorization.k8s.io", "v1", "ClusterRoleBinding", "clusterrolebindings", "clusterrolebinding", NO_NAMES, NO_NAMES,
        namespaced: false, status: false, generation: false, fields: &[]),
    resource!("storage.k8s.io", "v1", "StorageClass", "storageclasses", "storageclass", &["sc"], NO_NAMES,
        namespaced: false, status: false, generation: false, fields: &[]),
    resource!("admissionregistration.k8s.io", "v1", "MutatingWebhookConfiguration", "mutatingwebhookconfigurations", "mutatingwebhookconfiguration", NO_NAMES, &["api-extensions"],
        namespaced: false, status: false, generation: true, fields: &[]),
    resource!("admissionregistration.k8s.io", "v1", "ValidatingWebhookConfiguration", "validatingwebhookconfigurations", "validatingwebhookconfiguration", NO_NAMES, &["api-extensions"],
        namespaced: false, status: false, generation: true, fields: &[]),
    resource!("admissionregistration.k8s.io", "v1", "ValidatingAdmissionPolicy", "validatingadmissionpolicies", "validatingadmissionpolicy", NO_NAMES, &["api-extensions"],
        namespaced: false, status: true, generation: true, fields: &[]),
    resource!("admissionregistration.k8s.io", "v1", "ValidatingAdmissionPolicyBinding", "validatingadmissionpolicybindings", "validatingadmissionpolicybinding", NO_NAMES, &["api-extensions"],
        namespaced: false, status: false, generation: true, fields: &[]),
    resource!("apiextensions.k8s.io", "v1", "CustomResourceDefinition", "customresourcedefinitions", "customresourcedefinition", &["crd", "crds"], &["api-extensions"],
        namespaced: false, status: true, generation: true, fields: &[]),
    resource!("apiregistration.k8s.io", "v1", "APIService", "apiservices", "apiservice", NO_NAMES, &["api-extensions"],
        namespaced: false, status: true, generation: false, fields: &[]),
    resource!("certificates.k8s.io", "v1", "CertificateSigningRequest", "certificatesigningrequests", "certificatesigningrequest", &["csr"], NO_NAMES,
        namespaced: false, status: true, generation: false, fields: &["spec.signerName"]),
    resource!("authorization.k8s.io", "v1", "SelfSubjectAccessReview", "selfsubjectaccessreviews", "selfsubjectaccessreview", NO_NAMES, NO_NAMES,
        namespaced: false, status: false, generation: false, fields: &[]),
    resource!("authorization.k8s.io", "v1", "SubjectAccessReview", "subjectaccessreviews", "subjectaccessreview", NO_NAMES, NO_NAMES,
        namespaced: false, status: false, generation: false, fields: &[]),
    resource!("authorization.k8s.io", "v1", "LocalSubjectAccessReview", "localsubjectaccessreviews", "localsubjectaccessreview", NO_NAMES, NO_NAMES,
        namespaced: true, status: false, generation: false, fields: &[]),
    resource!("authorization.k8s.io", "v1", "SelfSubjectRulesReview", "selfsubjectrulesreviews", "selfsubjectrulesreview", NO_NAMES, NO_NAMES,
        namespaced: false, status: false, generation: false, fields: &[]),
    resource!("authentication.k8s.io", "v1", "SelfSubjectReview", "selfsubjectreviews", "selfsubjectreview", NO_NAMES, NO_NAMES,
        namespaced: false, status: false, generation: false, fields: &[]),
    resource!("authentication.k8s.io", "v1", "TokenReview", "tokenreviews", "tokenreview", NO_NAMES, NO_NAMES,
        namespaced: false, status: false, generation: false, fields: &[]),
];

/// Looks up a resource by group, version and plural name.
pub fn find(group: &str, version: &str, plural: &str) -> Option<&'static ResourceInfo> {
    RESOURCES
        .iter()
        .find(|r| r.group == group && r.version == version && r.plural == plural)
}

/// Looks up a resource by its store key (`plural` or `group/plural`). The store asks on
/// every write it applies, so this is a hash lookup rather than a scan of the table.
pub fn by_store_key(store_key: &str) -> Option<&'static ResourceInfo> {
    static BY_STORE_KEY: LazyLock<HashMap<String, &'static ResourceInfo>> = LazyLock::new(|| {
        let mut map = HashMap::new();
        for info in RESOURCES {
            // The first entry of a group and plural wins, as a scan would find it.
            map.entry(info.store_key()).or_insert(info);
        }
        map
    });
    BY_STORE_KEY.get(store_key).copied()
}

/// Values of the selectable fields of `object`, for the store to keep next to it.
/// Deterministic: it only reads the object.
pub fn selectable_fields(store_key: &str, object: &Value) -> Vec<(String, String)> {
    let Some(info) = by_store_key(store_key) else {
        return Vec::new();
    };
    info.selectable_fields
        .iter()
        .map(|field| {
            let pointer = format!("/{}", field.replace('.', "/"));
            let value = match object.pointer(&pointer) {
                Some(Value::String(s)) => s.clone(),
                Some(Value::Bool(b)) => b.to_string(),
                Some(Value::Number(n)) => n.to_string(),
                // Kubernetes matches a missing string field as "" (and a missing bool as false).
                _ if field.ends_with("unschedulable") || field.ends_with("hostNetwork") => {
                    "false".to_string()
                }
                _ => String::new(),
            };
            (field.to_string(), value)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_resource_is_found_by_its_store_key() {
        for info in RESOURCES {
            let found = by_store_key(&info.store_key()).expect("every resource has a store key");
            let first = RESOURCES
                .iter()
                .find(|r| r.group == info.group && r.plural == info.plural);
            assert!(
                first.is_some_and(|first| std::ptr::eq(first, found)),
                "{}",
                info.plural
            );
        }
        assert!(by_store_key("apps/deployments").is_some());
        for unknown in ["", "deployments", "apps/configmaps", "configmaps/", "x/y/z"] {
            assert!(by_store_key(unknown).is_none(), "{unknown}");
        }
    }
}
