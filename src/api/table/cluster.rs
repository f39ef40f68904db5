//! Printers for storage, networking, policy and RBAC kinds: persistentvolumes,
//! persistentvolumeclaims, storageclasses, resourcequotas, priorityclasses, ingresses,
//! ingressclasses, networkpolicies, rolebindings, clusterrolebindings and
//! certificatesigningrequests, validatingadmissionpolicies and their bindings, and apiservices. Roles, clusterroles
//! and limitranges have no printer upstream and get the default table.

use chrono::{DateTime, Utc};
use serde_json::{json, Value};

use super::format::{age, array, count, label_selector, name, text, At};
use super::{col, typed, wide, Column, Printer, AGE, NAME};

pub(super) static PRINTERS: &[Printer] = &[
    Printer {
        group: "admissionregistration.k8s.io",
        kind: "ValidatingAdmissionPolicy",
        columns: ADMISSION_POLICY,
        cells: admission_policy,
    },
    Printer {
        group: "admissionregistration.k8s.io",
        kind: "ValidatingAdmissionPolicyBinding",
        columns: ADMISSION_POLICY_BINDING,
        cells: admission_policy_binding,
    },
    Printer {
        group: "",
        kind: "PersistentVolume",
        columns: PV,
        cells: persistent_volume,
    },
    Printer {
        group: "",
        kind: "PersistentVolumeClaim",
        columns: PVC,
        cells: persistent_volume_claim,
    },
    Printer {
        group: "",
        kind: "ResourceQuota",
        columns: RESOURCEQUOTA,
        cells: resource_quota,
    },
    Printer {
        group: "storage.k8s.io",
        kind: "StorageClass",
        columns: STORAGECLASS,
        cells: storage_class,
    },
    Printer {
        group: "scheduling.k8s.io",
        kind: "PriorityClass",
        columns: PRIORITYCLASS,
        cells: priority_class,
    },
    Printer {
        group: "apiregistration.k8s.io",
        kind: "APIService",
        columns: APISERVICE,
        cells: api_service,
    },
    Printer {
        group: "certificates.k8s.io",
        kind: "CertificateSigningRequest",
        columns: CSR,
        cells: certificate_signing_request,
    },
    Printer {
        group: "networking.k8s.io",
        kind: "Ingress",
        columns: INGRESS,
        cells: ingress,
    },
    Printer {
        group: "networking.k8s.io",
        kind: "IngressClass",
        columns: INGRESSCLASS,
        cells: ingress_class,
    },
    Printer {
        group: "networking.k8s.io",
        kind: "NetworkPolicy",
        columns: NETWORKPOLICY,
        cells: network_policy,
    },
    Printer {
        group: "rbac.authorization.k8s.io",
        kind: "RoleBinding",
        columns: ROLEBINDING,
        cells: binding,
    },
    Printer {
        group: "rbac.authorization.k8s.io",
        kind: "ClusterRoleBinding",
        columns: CLUSTERROLEBINDING,
        cells: binding,
    },
];

/// The annotation that used to name a storage class (still read first by the printers).
const BETA_STORAGE_CLASS: &str = "volume.beta.kubernetes.io/storage-class";

/// `GetAccessModesAsString`: RWO, ROX, RWX, RWOP in that order, each at most once.
fn access_modes(obj: &Value, pointer: &str) -> String {
    let modes: Vec<&str> = array(obj, pointer)
        .iter()
        .filter_map(Value::as_str)
        .collect();
    [
        ("ReadWriteOnce", "RWO"),
        ("ReadOnlyMany", "ROX"),
        ("ReadWriteMany", "RWX"),
        ("ReadWriteOncePod", "RWOP"),
    ]
    .iter()
    .filter(|(mode, _)| modes.contains(mode))
    .map(|(_, short)| *short)
    .collect::<Vec<_>>()
    .join(",")
}

/// The storage quantity at `pointer` ("0" when unset, like a zero `Quantity`).
fn storage(obj: &Value, pointer: &str) -> String {
    match obj.at(pointer) {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Number(n)) => n.to_string(),
        _ => "0".into(),
    }
}

fn storage_class_of(obj: &Value) -> String {
    if let Some(class) = obj
        .at("/metadata/annotations")
        .and_then(|a| a.get(BETA_STORAGE_CLASS))
        .and_then(Value::as_str)
    {
        return class.to_string();
    }
    text(obj, "/spec/storageClassName").to_string()
}

fn unset_or(obj: &Value, pointer: &str) -> String {
    obj.at(pointer)
        .and_then(Value::as_str)
        .unwrap_or("<unset>")
        .to_string()
}

const PV: &[Column] = &[
    NAME,
    col("Capacity", "capacity is the description of the persistent volume's resources and capacity. More info: https://kubernetes.io/docs/concepts/storage/persistent-volumes#capacity"),
    col("Access Modes", "accessModes contains all ways the volume can be mounted. More info: https://kubernetes.io/docs/concepts/storage/persistent-volumes#access-modes"),
    col("Reclaim Policy", "persistentVolumeReclaimPolicy defines what happens to a persistent volume when released from its claim. Valid options are Retain (default for manually created PersistentVolumes), Delete (default for dynamically provisioned PersistentVolumes), and Recycle (deprecated). Recycle must be supported by the volume plugin underlying this PersistentVolume. More info: https://kubernetes.io/docs/concepts/storage/persistent-volumes#reclaiming"),
    col("Status", "phase indicates if a volume is available, bound to a claim, or released by a claim. More info: https://kubernetes.io/docs/concepts/storage/persistent-volumes#phase"),
    col("Claim", "claimRef is part of a bi-directional binding between PersistentVolume and PersistentVolumeClaim. Expected to be non-nil when bound. claim.VolumeName is the authoritative bind between PV and PVC. More info: https://kubernetes.io/docs/concepts/storage/persistent-volumes#binding"),
    col("StorageClass", "StorageClass of the pv"),
    col("VolumeAttributesClass", "VolumeAttributesClass of the pv"),
    col("Reason", "reason is a brief CamelCase string that describes any failure and is meant for machine parsing and tidy display in the CLI."),
    AGE,
    wide("VolumeMode", "volumeMode defines if a volume is intended to be used with a formatted filesystem or to remain in raw block state. Value of Filesystem is implied when not included in spec."),
];

fn persistent_volume(obj: &Value, now: DateTime<Utc>) -> Vec<Value> {
    let claim = match obj.at("/spec/claimRef") {
        Some(r) if r.is_object() => {
            format!("{}/{}", text(r, "/namespace"), text(r, "/name"))
        }
        _ => String::new(),
    };
    let phase = if crate::api::meta::is_deleting(obj) {
        "Terminating"
    } else {
        text(obj, "/status/phase")
    };
    vec![
        json!(name(obj)),
        json!(storage(obj, "/spec/capacity/storage")),
        json!(access_modes(obj, "/spec/accessModes")),
        json!(text(obj, "/spec/persistentVolumeReclaimPolicy")),
        json!(phase),
        json!(claim),
        json!(storage_class_of(obj)),
        json!(unset_or(obj, "/spec/volumeAttributesClassName")),
        json!(text(obj, "/status/reason")),
        json!(age(obj, now)),
        json!(unset_or(obj, "/spec/volumeMode")),
    ]
}

const PVC: &[Column] = &[
    NAME,
    col("Status", "phase represents the current phase of PersistentVolumeClaim."),
    col("Volume", "volumeName is the binding reference to the PersistentVolume backing this claim."),
    col("Capacity", "capacity represents the actual resources of the underlying volume."),
    col("Access Modes", "accessModes contains the actual access modes the volume backing the PVC has. More info: https://kubernetes.io/docs/concepts/storage/persistent-volumes#access-modes-1"),
    col("StorageClass", "StorageClass of the pvc"),
    col("VolumeAttributesClass", "VolumeAttributesClass of the pvc"),
    AGE,
    wide("VolumeMode", "volumeMode defines what type of volume is required by the claim. Value of Filesystem is implied when not included in claim spec."),
];

fn persistent_volume_claim(obj: &Value, now: DateTime<Utc>) -> Vec<Value> {
    let phase = if crate::api::meta::is_deleting(obj) {
        "Terminating"
    } else {
        text(obj, "/status/phase")
    };
    let bound = !text(obj, "/spec/volumeName").is_empty();
    let (capacity, modes) = if bound {
        (
            storage(obj, "/status/capacity/storage"),
            access_modes(obj, "/status/accessModes"),
        )
    } else {
        (String::new(), String::new())
    };
    vec![
        json!(name(obj)),
        json!(phase),
        json!(text(obj, "/spec/volumeName")),
        json!(capacity),
        json!(modes),
        json!(storage_class_of(obj)),
        json!(unset_or(obj, "/spec/volumeAttributesClassName")),
        json!(age(obj, now)),
        json!(unset_or(obj, "/spec/volumeMode")),
    ]
}

const RESOURCEQUOTA: &[Column] = &[
    NAME,
    col("Request", "Request represents a minimum amount of cpu/memory that a container may consume."),
    col("Limit", "Limits control the maximum amount of cpu/memory that a container may use independent of contention on the node."),
    AGE,
];

fn resource_quota(obj: &Value, now: DateTime<Utc>) -> Vec<Value> {
    let mut resources: Vec<&String> = obj
        .at("/status/hard")
        .and_then(Value::as_object)
        .map(|m| m.keys().collect())
        .unwrap_or_default();
    resources.sort();
    let mut requests = Vec::new();
    let mut limits = Vec::new();
    for resource in resources {
        let used = storage(obj, &format!("/status/used/{}", escape(resource)));
        let hard = storage(obj, &format!("/status/hard/{}", escape(resource)));
        let entry = format!("{resource}: {used}/{hard}");
        if resource.split('.').count() > 1 && resource.split('.').next() == Some("limits") {
            limits.push(entry);
        } else {
            requests.push(entry);
        }
    }
    vec![
        json!(name(obj)),
        json!(requests.join(", ")),
        json!(limits.join(", ")),
        json!(age(obj, now)),
    ]
}

/// Escapes a map key for a JSON pointer.
fn escape(key: &str) -> String {
    key.replace('~', "~0").replace('/', "~1")
}

const STORAGECLASS: &[Column] = &[
    NAME,
    col("Provisioner", "provisioner indicates the type of the provisioner."),
    col("ReclaimPolicy", "reclaimPolicy controls the reclaimPolicy for dynamically provisioned PersistentVolumes of this storage class. Defaults to Delete."),
    col("VolumeBindingMode", "volumeBindingMode indicates how PersistentVolumeClaims should be provisioned and bound.  When unset, VolumeBindingImmediate is used. This field is only honored by servers that enable the VolumeScheduling feature."),
    col("AllowVolumeExpansion", "allowVolumeExpansion shows whether the storage class allow volume expand."),
    AGE,
];

/// `storageutil.IsDefaultAnnotation`: the GA or beta default-class annotation set to "true".
fn is_default_class(obj: &Value) -> bool {
    let annotations = obj.at("/metadata/annotations");
    [
        "storageclass.kubernetes.io/is-default-class",
        "storageclass.beta.kubernetes.io/is-default-class",
    ]
    .iter()
    .any(|k| annotations.and_then(|a| a.get(*k)).and_then(Value::as_str) == Some("true"))
}

fn storage_class(obj: &Value, now: DateTime<Utc>) -> Vec<Value> {
    let mut shown = name(obj).to_string();
    if is_default_class(obj) {
        shown.push_str(" (default)");
    }
    let reclaim = obj
        .get("reclaimPolicy")
        .and_then(Value::as_str)
        .unwrap_or("Delete");
    let binding = obj
        .get("volumeBindingMode")
        .and_then(Value::as_str)
        .unwrap_or("Immediate");
    let expansion = obj
        .get("allowVolumeExpansion")
        .and_then(Value::as_bool)
        .unwrap_or(false);
    vec![
        json!(shown),
        json!(text(obj, "/provisioner")),
        json!(reclaim),
        json!(binding),
        json!(expansion),
        json!(age(obj, now)),
    ]
}

const APISERVICE: &[Column] = &[
    NAME,
    col(
        "Service",
        "The reference to the service that hosts this API endpoint.",
    ),
    col("Available", "Whether this service is available."),
    AGE,
];

/// kube-aggregator's cells: `Local` or the Service; the Available condition's status, with
/// its reason when not True, `Unknown` without one.
fn api_service(obj: &Value, now: DateTime<Utc>) -> Vec<Value> {
    let service = match obj.at("/spec/service") {
        Some(s) if s.is_object() => format!("{}/{}", text(s, "/namespace"), text(s, "/name")),
        _ => "Local".into(),
    };
    let available = obj
        .at("/status/conditions")
        .and_then(Value::as_array)
        .and_then(|list| list.iter().find(|c| c["type"] == "Available"))
        .map(|c| {
            let (status, reason) = (text(c, "/status"), text(c, "/reason"));
            if status == "True" || reason.is_empty() {
                status.to_string()
            } else {
                format!("{status} ({reason})")
            }
        })
        .unwrap_or_else(|| "Unknown".into());
    vec![
        json!(name(obj)),
        json!(service),
        json!(available),
        json!(age(obj, now)),
    ]
}

const PRIORITYCLASS: &[Column] = &[
    NAME,
    typed("Value", "integer", "value represents the integer value of this priority class. This is the actual priority that pods receive when they have the name of this class in their pod spec."),
    typed("Global-Default", "boolean", "globalDefault specifies whether this PriorityClass should be considered as the default priority for pods that do not have any priority class. Only one PriorityClass can be marked as `globalDefault`. However, if more than one PriorityClasses exists with their `globalDefault` field set to true, the smallest value of such global default PriorityClasses will be used as the default priority."),
    AGE,
    wide("PreemptionPolicy", "preemptionPolicy is the Policy for preempting pods with lower priority. One of Never, PreemptLowerPriority. Defaults to PreemptLowerPriority if unset."),
];

fn priority_class(obj: &Value, now: DateTime<Utc>) -> Vec<Value> {
    vec![
        json!(name(obj)),
        json!(obj.get("value").and_then(Value::as_i64).unwrap_or(0)),
        json!(obj
            .get("globalDefault")
            .and_then(Value::as_bool)
            .unwrap_or(false)),
        json!(age(obj, now)),
        json!(text(obj, "/preemptionPolicy")),
    ]
}

const CSR: &[Column] = &[
    NAME,
    AGE,
    col(
        "SignerName",
        "signerName indicates the requested signer, and is a qualified name.",
    ),
    col("Requestor", "Name of the user which made this request."),
    col(
        "RequestedDuration",
        "expirationSeconds is the requested duration of validity of the issued certificate.",
    ),
    col(
        "Condition",
        "Condition indicates if the request was approved, denied, or has failed.",
    ),
];

fn certificate_signing_request(obj: &Value, now: DateTime<Utc>) -> Vec<Value> {
    let signer = match text(obj, "/spec/signerName") {
        "" => "<none>",
        s => s,
    };
    let duration = obj
        .pointer("/spec/expirationSeconds")
        .and_then(Value::as_i64)
        .map(|s| super::format::human_duration(chrono::Duration::seconds(s)))
        .unwrap_or_else(|| "<none>".into());
    let has = |kind: &str| {
        array(obj, "/status/conditions")
            .iter()
            .any(|c| c.get("type").and_then(Value::as_str) == Some(kind))
    };
    // Denied before Approved, as kubectl ranks them.
    let mut condition = if has("Denied") {
        "Denied".to_string()
    } else if has("Approved") {
        "Approved".to_string()
    } else {
        "Pending".to_string()
    };
    if has("Failed") {
        condition.push_str(",Failed");
    }
    if !text(obj, "/status/certificate").is_empty() {
        condition.push_str(",Issued");
    }
    vec![
        json!(name(obj)),
        json!(age(obj, now)),
        json!(signer),
        json!(text(obj, "/spec/username")),
        json!(duration),
        json!(condition),
    ]
}

const INGRESS: &[Column] = &[
    NAME,
    col(
        "Class",
        "The name of the IngressClass resource that should be used for additional configuration",
    ),
    col(
        "Hosts",
        "Hosts that incoming requests are matched against before the ingress rule",
    ),
    col(
        "Address",
        "Address is a list containing ingress points for the load-balancer",
    ),
    col("Ports", "Ports of TLS configurations that open"),
    AGE,
];

fn ingress(obj: &Value, now: DateTime<Utc>) -> Vec<Value> {
    let class = obj
        .at("/spec/ingressClassName")
        .and_then(Value::as_str)
        .unwrap_or("<none>");
    let rules = array(obj, "/spec/rules");
    // `formatHosts`: hosts of the first rules until three are listed; a rule after that makes
    // the rest "+ N more..." (N counts rules, not hosts).
    const MAX: usize = 3;
    let mut hosts: Vec<&str> = Vec::new();
    let mut more = false;
    for rule in rules {
        if hosts.len() == MAX {
            more = true;
        }
        let host = text(rule, "/host");
        if !more && !host.is_empty() {
            hosts.push(host);
        }
    }
    let hosts = if hosts.is_empty() {
        "*".to_string()
    } else if more {
        format!("{} + {} more...", hosts.join(","), rules.len() - MAX)
    } else {
        hosts.join(",")
    };
    let mut addresses: Vec<&str> = array(obj, "/status/loadBalancer/ingress")
        .iter()
        .map(|i| match text(i, "/ip") {
            "" => text(i, "/hostname"),
            ip => ip,
        })
        .filter(|a| !a.is_empty())
        .collect();
    addresses.sort_unstable();
    addresses.dedup();
    let ports = if array(obj, "/spec/tls").is_empty() {
        "80"
    } else {
        "80, 443"
    };
    vec![
        json!(name(obj)),
        json!(class),
        json!(hosts),
        json!(addresses.join(",")),
        json!(ports),
        json!(age(obj, now)),
    ]
}

const INGRESSCLASS: &[Column] = &[
    NAME,
    col(
        "Controller",
        "Controller that is responsible for handling this class",
    ),
    col(
        "Parameters",
        "A reference to a resource with additional parameters",
    ),
    AGE,
];

fn ingress_class(obj: &Value, now: DateTime<Utc>) -> Vec<Value> {
    let parameters = match obj.at("/spec/parameters") {
        Some(p) if p.is_object() => {
            let mut s = text(p, "/kind").to_string();
            if let Some(group) = p.get("apiGroup").and_then(Value::as_str) {
                s = format!("{s}.{group}");
            }
            format!("{s}/{}", text(p, "/name"))
        }
        _ => "<none>".into(),
    };
    vec![
        json!(name(obj)),
        json!(text(obj, "/spec/controller")),
        json!(parameters),
        json!(age(obj, now)),
    ]
}

const NETWORKPOLICY: &[Column] = &[
    NAME,
    col("Pod-Selector", "podSelector selects the pods to which this NetworkPolicy object applies. The array of rules is applied to any pods selected by this field. An empty selector matches all pods in the policy's namespace. Multiple network policies can select the same set of pods. In this case, the ingress rules for each are combined additively. This field is optional. If it is not specified, it defaults to an empty selector."),
    AGE,
];

fn network_policy(obj: &Value, now: DateTime<Utc>) -> Vec<Value> {
    // podSelector is a value, not a pointer, upstream: a missing one is the empty selector.
    let selector = obj
        .at("/spec/podSelector")
        .cloned()
        .unwrap_or_else(|| json!({}));
    vec![
        json!(name(obj)),
        json!(label_selector(Some(&selector))),
        json!(age(obj, now)),
    ]
}

const ROLEBINDING: &[Column] = &[
    NAME,
    col("Role", "roleRef can reference a Role in the current namespace or a ClusterRole in the global namespace. If the RoleRef cannot be resolved, the Authorizer must return an error. This field is immutable."),
    AGE,
    wide("Users", "Users in the roleBinding"),
    wide("Groups", "Groups in the roleBinding"),
    wide("ServiceAccounts", "ServiceAccounts in the roleBinding"),
];

const CLUSTERROLEBINDING: &[Column] = &[
    NAME,
    col("Role", "roleRef can only reference a ClusterRole in the global namespace. If the RoleRef cannot be resolved, the Authorizer must return an error. This field is immutable."),
    AGE,
    wide("Users", "Users in the clusterRoleBinding"),
    wide("Groups", "Groups in the clusterRoleBinding"),
    wide("ServiceAccounts", "ServiceAccounts in the clusterRoleBinding"),
];

/// RoleBinding and ClusterRoleBinding: `Kind/name` of the role, then the subjects by kind
/// (`rbac.SubjectsStrings`).
fn binding(obj: &Value, now: DateTime<Utc>) -> Vec<Value> {
    let role = format!(
        "{}/{}",
        text(obj, "/roleRef/kind"),
        text(obj, "/roleRef/name")
    );
    let (mut users, mut groups, mut sas) = (Vec::new(), Vec::new(), Vec::new());
    for s in array(obj, "/subjects") {
        match text(s, "/kind") {
            "User" => users.push(text(s, "/name").to_string()),
            "Group" => groups.push(text(s, "/name").to_string()),
            "ServiceAccount" => sas.push(format!("{}/{}", text(s, "/namespace"), text(s, "/name"))),
            _ => {}
        }
    }
    vec![
        json!(name(obj)),
        json!(role),
        json!(age(obj, now)),
        json!(users.join(", ")),
        json!(groups.join(", ")),
        json!(sas.join(", ")),
    ]
}

const ADMISSION_POLICY: &[Column] = &[
    NAME,
    typed(
        "Validations",
        "integer",
        "Validations indicates the number of validation rules defined in this configuration",
    ),
    col(
        "ParamKind",
        "ParamKind specifies the kind of resources used to parameterize this policy",
    ),
    AGE,
];

fn admission_policy(obj: &Value, now: DateTime<Utc>) -> Vec<Value> {
    let param_kind = match obj.pointer("/spec/paramKind").filter(|v| !v.is_null()) {
        None => "<unset>".to_string(),
        Some(k) => format!("{}/{}", text(k, "/apiVersion"), text(k, "/kind")),
    };
    vec![
        json!(name(obj)),
        json!(count(obj, "/spec/validations")),
        json!(param_kind),
        json!(age(obj, now)),
    ]
}

const ADMISSION_POLICY_BINDING: &[Column] = &[
    NAME,
    col(
        "PolicyName",
        "PolicyName indicates the policy definition which the policy binding binded to",
    ),
    col(
        "ParamRef",
        "ParamRef indicates the param resource which sets the configration param",
    ),
    AGE,
];

fn admission_policy_binding(obj: &Value, now: DateTime<Utc>) -> Vec<Value> {
    let param_ref = match obj.pointer("/spec/paramRef").filter(|v| !v.is_null()) {
        None => "<unset>".to_string(),
        Some(p) => match (text(p, "/name"), text(p, "/namespace")) {
            ("", _) => {
                crate::kube::selectors::label_selector_string(p.get("selector")).unwrap_or_default()
            }
            (name, "") => format!("*/{name}"),
            (name, namespace) => format!("{namespace}/{name}"),
        },
    };
    vec![
        json!(name(obj)),
        json!(text(obj, "/spec/policyName")),
        json!(param_ref),
        json!(age(obj, now)),
    ]
}
