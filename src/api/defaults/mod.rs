//! Defaults as kube-apiserver applies them when it decodes an object (the `SetDefaults_*`
//! functions of each API group), for the fields kubectl and controllers read. Applied to every
//! create and update body before validation, so a PUT that drops a defaulted field gets it back.
//!
//! - `pod`: pod specs (pods and every pod template) and pod-only fields (status, QoS class).
//! - `apps`: deployments, replicasets, daemonsets, statefulsets, replicationcontrollers.
//! - `batch`: jobs (including the generated selector) and cronjobs.
//! - `service`: Services (their ClusterIP and NodePorts are allocated by `api::service`).
//! - `other`: autoscaling, storage, scheduling, networking and RBAC kinds.

mod apps;
mod batch;
mod other;
pub(crate) mod pod;
pub(crate) mod service;

use serde_json::{json, Map, Value};

use crate::kube::resources::ResourceInfo;

/// Fills in the defaults of `info`'s kind in `object` (a full object, metadata already set).
pub fn apply(info: &ResourceInfo, object: &mut Value) {
    match (info.group, info.kind) {
        ("", "Pod") => pod::pod(object),
        ("", "Service") => service::defaults(object),
        ("", "ReplicationController") => apps::replication_controller(object),
        ("", "PersistentVolume") => other::persistent_volume(object),
        ("", "PersistentVolumeClaim") => other::persistent_volume_claim(object),
        ("", "LimitRange") => other::limit_range(object),
        ("apps", "Deployment") => apps::deployment(object),
        ("apps", "ReplicaSet") => apps::replica_set(object),
        ("apps", "DaemonSet") => apps::daemon_set(object),
        ("apps", "StatefulSet") => apps::stateful_set(object),
        ("batch", "Job") => batch::job(object),
        ("batch", "CronJob") => batch::cron_job(object),
        ("autoscaling", "HorizontalPodAutoscaler") => other::horizontal_pod_autoscaler(object),
        ("storage.k8s.io", "StorageClass") => other::storage_class(object),
        ("scheduling.k8s.io", "PriorityClass") => other::priority_class(object),
        ("networking.k8s.io", "NetworkPolicy") => other::network_policy(object),
        (
            "admissionregistration.k8s.io",
            kind @ ("MutatingWebhookConfiguration" | "ValidatingWebhookConfiguration"),
        ) => crate::api::write::admission::webhook::config::apply_defaults(
            object,
            kind == "MutatingWebhookConfiguration",
        ),
        (
            "admissionregistration.k8s.io",
            kind @ ("ValidatingAdmissionPolicy" | "ValidatingAdmissionPolicyBinding"),
        ) => crate::api::write::admission::policy::config::apply_defaults(object, kind),
        ("apiregistration.k8s.io", "APIService") => {
            crate::api::aggregation::apiservice::apply_defaults(object)
        }
        ("rbac.authorization.k8s.io", "RoleBinding" | "ClusterRoleBinding") => {
            other::role_binding(object)
        }
        _ => {}
    }
}

/// The object at `key` of `parent`, created (replacing null or a non-object) if needed.
pub(crate) fn child<'v>(parent: &'v mut Value, key: &str) -> &'v mut Value {
    if !parent.is_object() {
        *parent = json!({});
    }
    let map = match parent {
        Value::Object(m) => m,
        _ => unreachable!("just made an object"),
    };
    let slot = map.entry(key.to_string()).or_insert_with(|| json!({}));
    if !slot.is_object() {
        *slot = json!({});
    }
    slot
}

/// Sets `key` to `value` unless it holds something other than null.
pub(crate) fn default(object: &mut Value, key: &str, value: Value) {
    if let Value::Object(map) = object {
        set_if_missing(map, key, value);
    }
}

fn set_if_missing(map: &mut Map<String, Value>, key: &str, value: Value) {
    match map.get(key) {
        Some(v) if !v.is_null() => {}
        _ => {
            map.insert(key.to_string(), value);
        }
    }
}

/// Calls `f` on each object element of the array at `key` (if it is an array).
pub(crate) fn each(object: &mut Value, key: &str, mut f: impl FnMut(&mut Value)) {
    if let Some(items) = object.get_mut(key).and_then(Value::as_array_mut) {
        items.iter_mut().filter(|v| v.is_object()).for_each(&mut f);
    }
}

#[cfg(test)]
mod tests;
