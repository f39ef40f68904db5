//! What an object counts against a ResourceQuota, as kube-apiserver's quota evaluators count
//! it, shared by the admission plugin and the quota controller:
//!
//! - every object: `count/<resource>` (core) or `count/<resource>.<group>`;
//! - pods that have not ended (phase Succeeded or Failed): `pods`, and their totals
//!   (`pod_resources`) as `requests.<r>` and `<r>` for requests, `limits.<r>` for limits;
//! - Services: `services`, `services.nodeports` (ports of NodePort and LoadBalancer Services),
//!   `services.loadbalancers`; ConfigMaps, Secrets, ReplicationControllers and ResourceQuotas
//!   their plural; PersistentVolumeClaims `persistentvolumeclaims` and `requests.storage`.
//!
//! A quota's scopes (`spec.scopes`, `spec.scopeSelector`) narrow it to the pods they select:
//! Terminating (an `activeDeadlineSeconds`), NotTerminating, BestEffort (no request or limit in
//! any container), NotBestEffort, and PriorityClass by In/NotIn/Exists/DoesNotExist. A scoped
//! quota counts nothing but pods.

use serde_json::Value;

use super::super::pod_resources::{self, Amount, Resources};
use crate::kube::resources::{self as registry};
use crate::kube::store::StoreSnapshot;

/// The compute resources a quota makes every container state (kube-apiserver's backward
/// compatible rule: quota on cpu or memory requires each container to request it).
const REQUIRED_PER_CONTAINER: [&str; 6] = [
    "cpu",
    "memory",
    "requests.cpu",
    "requests.memory",
    "limits.cpu",
    "limits.memory",
];

fn one() -> Amount {
    Amount {
        milli: 1000,
        binary: false,
    }
}

fn count_key(group: &str, plural: &str) -> String {
    if group.is_empty() {
        format!("count/{plural}")
    } else {
        format!("count/{plural}.{group}")
    }
}

fn text<'a>(object: &'a Value, pointer: &str) -> &'a str {
    object
        .pointer(pointer)
        .and_then(Value::as_str)
        .unwrap_or("")
}

/// Whether a pod has ended: it no longer counts.
fn pod_ended(pod: &Value) -> bool {
    matches!(text(pod, "/status/phase"), "Succeeded" | "Failed")
}

/// What `object` of `group`/`plural` uses.
pub fn usage(group: &str, plural: &str, object: &Value) -> Resources {
    let mut used = Resources::new();
    if group.is_empty() && plural == "pods" && pod_ended(object) {
        return used;
    }
    used.insert(count_key(group, plural), one());
    if !group.is_empty() {
        return used;
    }
    match plural {
        "pods" => {
            used.insert("pods".into(), one());
            let empty = Value::Null;
            let (requests, limits) = pod_resources::pod(object.get("spec").unwrap_or(&empty));
            for (resource, amount) in requests {
                used.insert(format!("requests.{resource}"), amount);
                used.insert(resource, amount);
            }
            for (resource, amount) in limits {
                used.insert(format!("limits.{resource}"), amount);
            }
        }
        "services" => {
            used.insert("services".into(), one());
            let kind = text(object, "/spec/type");
            if matches!(kind, "NodePort" | "LoadBalancer") {
                let ports = object
                    .pointer("/spec/ports")
                    .and_then(Value::as_array)
                    .map_or(0, Vec::len);
                used.insert(
                    "services.nodeports".into(),
                    Amount {
                        milli: ports as i64 * 1000,
                        binary: false,
                    },
                );
            }
            if kind == "LoadBalancer" {
                used.insert("services.loadbalancers".into(), one());
            }
        }
        "persistentvolumeclaims" => {
            used.insert(plural.into(), one());
            if let Some(storage) = pod_resources::read(object, "/spec/resources/requests")
                .get("storage")
                .copied()
            {
                used.insert("requests.storage".into(), storage);
            }
        }
        "configmaps" | "secrets" | "replicationcontrollers" | "resourcequotas" => {
            used.insert(plural.into(), one());
        }
        _ => {}
    }
    used
}

/// Whether `quota` (its scopes) applies to `object` of `group`/`plural`.
pub fn in_scope(quota: &Value, group: &str, plural: &str, object: &Value) -> bool {
    let scopes: Vec<&str> = quota
        .pointer("/spec/scopes")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .collect();
    let selector: Vec<&Value> = quota
        .pointer("/spec/scopeSelector/matchExpressions")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .collect();
    if scopes.is_empty() && selector.is_empty() {
        return true;
    }
    if !(group.is_empty() && plural == "pods") {
        return false;
    }
    let terminating = object.pointer("/spec/activeDeadlineSeconds").is_some();
    let best_effort = {
        let (requests, limits) = pod_resources::pod(object.get("spec").unwrap_or(&Value::Null));
        requests.is_empty() && limits.is_empty()
    };
    let class = text(object, "/spec/priorityClassName");
    let scope_matches = |scope: &str| match scope {
        "Terminating" => terminating,
        "NotTerminating" => !terminating,
        "BestEffort" => best_effort,
        "NotBestEffort" => !best_effort,
        // Scopes this server does not know select nothing.
        _ => false,
    };
    scopes.iter().all(|s| scope_matches(s))
        && selector.iter().all(|expression| {
            let scope = text(expression, "/scopeName");
            let operator = text(expression, "/operator");
            let values: Vec<&str> = expression
                .get("values")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .filter_map(Value::as_str)
                .collect();
            if scope != "PriorityClass" {
                return scope_matches(scope) == (operator != "DoesNotExist");
            }
            match operator {
                "In" => values.contains(&class),
                "NotIn" => !values.contains(&class),
                "Exists" => !class.is_empty(),
                "DoesNotExist" => class.is_empty(),
                _ => false,
            }
        })
}

/// The names of the compute resources `quota` limits that `pod`'s containers leave out, as
/// kube-apiserver's refusal words them (`limits.cpu for: a,b; requests.memory for: a`).
pub fn missing(hard: &Resources, pod: &Value) -> Option<String> {
    let required: Vec<&str> = REQUIRED_PER_CONTAINER
        .iter()
        .copied()
        .filter(|r| hard.contains_key(*r))
        .collect();
    if required.is_empty() {
        return None;
    }
    let mut missing: std::collections::BTreeMap<&str, Vec<String>> = Default::default();
    for group in ["containers", "initContainers"] {
        let list = pod
            .pointer(&format!("/spec/{group}"))
            .and_then(Value::as_array);
        for c in list.into_iter().flatten() {
            let (requests, limits) = pod_resources::container(c);
            for resource in &required {
                let given = match resource.split_once('.') {
                    Some(("limits", r)) => limits.contains_key(r),
                    Some((_, r)) => requests.contains_key(r),
                    None => requests.contains_key(*resource),
                };
                if !given {
                    missing
                        .entry(resource)
                        .or_default()
                        .push(text(c, "/name").to_string());
                }
            }
        }
    }
    if missing.is_empty() {
        return None;
    }
    let parts: Vec<String> = missing
        .into_iter()
        .map(|(resource, mut names)| {
            names.sort();
            names.dedup();
            format!("{resource} for: {}", names.join(","))
        })
        .collect();
    Some(parts.join("; "))
}

/// Recomputes what `quota`'s objects in `namespace` use, for the resources it limits.
pub fn recompute(snapshot: &StoreSnapshot, namespace: &str, quota: &Value) -> Resources {
    let hard = pod_resources::read(quota, "/spec/hard");
    let mut kinds: Vec<(String, String)> = Vec::new();
    for resource in hard.keys() {
        let kind = match resource.as_str() {
            "pods" | "cpu" | "memory" | "ephemeral-storage" => ("", "pods"),
            r if r.starts_with("requests.") && r != "requests.storage" => ("", "pods"),
            r if r.starts_with("limits.") => ("", "pods"),
            "services" | "services.nodeports" | "services.loadbalancers" => ("", "services"),
            "persistentvolumeclaims" | "requests.storage" => ("", "persistentvolumeclaims"),
            "configmaps" | "secrets" | "replicationcontrollers" | "resourcequotas" => {
                ("", resource.as_str())
            }
            r => match r.strip_prefix("count/") {
                Some(name) => match name.split_once('.') {
                    Some((plural, group)) => (group, plural),
                    None => ("", name),
                },
                None => continue,
            },
        };
        let kind = (kind.0.to_string(), kind.1.to_string());
        if !kinds.contains(&kind) {
            kinds.push(kind);
        }
    }
    let mut used: Resources = hard
        .keys()
        .map(|k| (k.clone(), Amount::default()))
        .collect();
    for (group, plural) in kinds {
        let Some(info) = registry::RESOURCES
            .iter()
            .find(|r| r.group == group && r.plural == plural && r.namespaced)
        else {
            continue;
        };
        for object in snapshot.range(&info.store_key(), Some(namespace), None) {
            let value = object.value();
            if !in_scope(quota, &group, &plural, &value) {
                continue;
            }
            for (resource, amount) in usage(&group, &plural, &value) {
                if let Some(total) = used.get_mut(&resource) {
                    *total = total.add(amount);
                }
            }
        }
    }
    used
}

/// `resources` as kube-apiserver prints a ResourceList in quota messages: `a=1,b=2`.
pub fn pretty(resources: &Resources) -> String {
    resources
        .iter()
        .map(|(k, v)| format!("{k}={}", v.text()))
        .collect::<Vec<_>>()
        .join(",")
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_pod_counts_itself_and_its_totals_until_it_ends() {
        let pod = json!({"spec": {"containers": [{"name": "a", "resources": {
            "limits": {"cpu": "500m", "memory": "128Mi"}}}]}});
        let used = usage("", "pods", &pod);
        assert_eq!(
            pretty(&used),
            "count/pods=1,cpu=500m,limits.cpu=500m,limits.memory=128Mi,memory=128Mi,pods=1,requests.cpu=500m,requests.memory=128Mi"
        );
        let ended = json!({"spec": {}, "status": {"phase": "Succeeded"}});
        assert!(usage("", "pods", &ended).is_empty());
        let svc = json!({"spec": {"type": "NodePort", "ports": [{}, {}]}});
        assert_eq!(
            pretty(&usage("", "services", &svc)),
            "count/services=1,services=1,services.nodeports=2"
        );
        assert_eq!(
            pretty(&usage("apps", "deployments", &json!({}))),
            "count/deployments.apps=1"
        );
    }

    #[test]
    fn scopes_select_pods_only() {
        let scoped = json!({"spec": {"scopes": ["BestEffort"]}});
        let bare = json!({"spec": {"containers": [{"name": "a"}]}});
        let sized = json!({"spec": {"containers": [{"name": "a",
            "resources": {"requests": {"cpu": "1"}}}], "activeDeadlineSeconds": 5}});
        assert!(in_scope(&scoped, "", "pods", &bare));
        assert!(!in_scope(&scoped, "", "pods", &sized));
        assert!(!in_scope(&scoped, "", "configmaps", &json!({})));
        let terminating = json!({"spec": {"scopes": ["Terminating", "NotBestEffort"]}});
        assert!(in_scope(&terminating, "", "pods", &sized));
        let by_class = json!({"spec": {"scopeSelector": {"matchExpressions": [
            {"scopeName": "PriorityClass", "operator": "In", "values": ["high"]}]}}});
        let high = json!({"spec": {"priorityClassName": "high"}});
        assert!(in_scope(&by_class, "", "pods", &high));
        assert!(!in_scope(&by_class, "", "pods", &bare));
    }

    #[test]
    fn compute_quota_requires_every_container_to_state_it() {
        let hard = pod_resources::read(
            &json!({"hard": {"limits.cpu": "2", "requests.memory": "1Gi", "pods": "3"}}),
            "/hard",
        );
        let pod = json!({"spec": {"containers": [
            {"name": "b", "resources": {"requests": {"memory": "1Mi"}}},
            {"name": "a"}]}});
        assert_eq!(
            missing(&hard, &pod).unwrap(),
            "limits.cpu for: a,b; requests.memory for: a"
        );
    }
}
