//! Defaults of the smaller kinds: autoscaling/v2 HPAs, persistent volumes and claims, storage
//! classes, priority classes, network policies and RBAC bindings.

use serde_json::{json, Value};

use super::{child, default, each};

/// `SetDefaults_HorizontalPodAutoscaler` (v2): minReplicas 1 and, without metrics, 80% CPU.
/// Behavior is only completed when given; that part is left to the HPA controller here.
pub fn horizontal_pod_autoscaler(object: &mut Value) {
    let spec = child(object, "spec");
    default(spec, "minReplicas", json!(1));
    if spec
        .get("metrics")
        .and_then(Value::as_array)
        .is_none_or(Vec::is_empty)
    {
        spec["metrics"] = json!([{"type": "Resource", "resource": {"name": "cpu",
            "target": {"type": "Utilization", "averageUtilization": 80}}}]);
    }
}

pub fn persistent_volume(object: &mut Value) {
    let spec = child(object, "spec");
    default(spec, "persistentVolumeReclaimPolicy", json!("Retain"));
    default(spec, "volumeMode", json!("Filesystem"));
    default(child(object, "status"), "phase", json!("Pending"));
}

pub fn persistent_volume_claim(object: &mut Value) {
    default(child(object, "spec"), "volumeMode", json!("Filesystem"));
    default(child(object, "status"), "phase", json!("Pending"));
}

pub fn storage_class(object: &mut Value) {
    default(object, "reclaimPolicy", json!("Delete"));
    default(object, "volumeBindingMode", json!("Immediate"));
}

pub fn priority_class(object: &mut Value) {
    default(object, "preemptionPolicy", json!("PreemptLowerPriority"));
}

/// A LimitRange's Container items: the default limit is the max, the default request the
/// default limit, else the min, where the item leaves them out.
pub fn limit_range(object: &mut Value) {
    let Some(limits) = object
        .pointer_mut("/spec/limits")
        .and_then(Value::as_array_mut)
    else {
        return;
    };
    for item in limits {
        if item.get("type").and_then(Value::as_str) != Some("Container") {
            continue;
        }
        for (from, to) in [
            ("max", "default"),
            ("default", "defaultRequest"),
            ("min", "defaultRequest"),
        ] {
            let Some(source) = item.get(from).and_then(Value::as_object).cloned() else {
                continue;
            };
            let target = child(item, to);
            for (resource, value) in source {
                if target.get(&resource).is_none() {
                    target[resource] = value;
                }
            }
        }
    }
}

/// Ports default to TCP; policyTypes is Ingress, plus Egress when egress rules exist.
pub fn network_policy(object: &mut Value) {
    let spec = child(object, "spec");
    default(spec, "podSelector", json!({}));
    for direction in ["ingress", "egress"] {
        each(spec, direction, |rule| {
            each(rule, "ports", |p| default(p, "protocol", json!("TCP")));
        });
    }
    if spec
        .get("policyTypes")
        .and_then(Value::as_array)
        .is_none_or(Vec::is_empty)
    {
        let has_egress = spec
            .get("egress")
            .and_then(Value::as_array)
            .is_some_and(|e| !e.is_empty());
        spec["policyTypes"] = if has_egress {
            json!(["Ingress", "Egress"])
        } else {
            json!(["Ingress"])
        };
    }
}

/// `SetDefaults_Subject`: users and groups are in the RBAC API group.
pub fn role_binding(object: &mut Value) {
    each(object, "subjects", |s| {
        match s.get("kind").and_then(Value::as_str) {
            Some("User") | Some("Group") => {
                default(s, "apiGroup", json!("rbac.authorization.k8s.io"))
            }
            Some("ServiceAccount") => default(s, "apiGroup", json!("")),
            _ => {}
        }
    });
}
