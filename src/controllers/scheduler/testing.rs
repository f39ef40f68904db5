//! Pods, nodes and caches for the scheduler's tests, built as the store holds objects.

use std::sync::Arc;

use serde_json::{json, Value};

use super::cache::Cache;
use super::pod::PodInfo;
use crate::kube::object::{ObjectFacts, ObjectKey, ObjectRef, StoredObject};

/// A stored object of `resource` from `value` (its namespace and name from metadata).
pub fn stored(resource: &str, value: &Value, resource_version: u64) -> ObjectRef {
    let facts = ObjectFacts::of(resource, value);
    Arc::new(StoredObject {
        key: ObjectKey::new(
            resource,
            value["metadata"]["namespace"].as_str().unwrap_or_default(),
            value["metadata"]["name"].as_str().unwrap_or_default(),
        ),
        resource_version,
        uid: facts.uid,
        labels: facts.labels,
        fields: facts.fields,
        json: serde_json::to_vec(value).unwrap_or_default().into(),
    })
}

/// A pending pod `name` in namespace `ns` asking `cpu` in one container, with `extra` merged
/// over it.
pub fn pod(name: &str, cpu: &str, extra: Value) -> PodInfo {
    let mut value = json!({
        "metadata": {"name": name, "namespace": "ns", "uid": format!("uid-{name}")},
        "spec": {"schedulerName": "default-scheduler",
                 "containers": [{"name": "c", "image": "i",
                                 "resources": {"requests": {"cpu": cpu}}}]},
        "status": {"phase": "Pending"},
    });
    merge(&mut value, &extra);
    PodInfo::new(stored("pods", &value, 1))
}

/// A pod like [`pod`] bound to `node`.
pub fn bound(name: &str, node: &str, cpu: &str, extra: Value) -> PodInfo {
    let mut extra = extra;
    merge(&mut extra, &json!({"spec": {"nodeName": node}}));
    pod(name, cpu, extra)
}

/// A Node `name` with 4 cpus, 8Gi, 110 pods and the hostname label, `extra` merged over it.
pub fn node(name: &str, extra: Value) -> ObjectRef {
    let mut value = json!({
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}},
        "spec": {},
        "status": {"allocatable": {"cpu": "4", "memory": "8Gi", "pods": "110",
                                   "ephemeral-storage": "100Gi"}},
    });
    merge(&mut value, &extra);
    stored("nodes", &value, 1)
}

/// A cache holding `nodes` and the bound `pods`.
pub fn cache(nodes: &[ObjectRef], pods: &[PodInfo]) -> Cache {
    let mut cache = Cache::new();
    for n in nodes {
        cache.upsert_node(n);
    }
    for p in pods {
        cache.upsert_pod(p.clone());
    }
    cache
}

/// `patch` merged into `value` (objects merge, anything else replaces).
pub fn merge(value: &mut Value, patch: &Value) {
    match (value, patch) {
        (Value::Object(v), Value::Object(p)) => {
            for (k, pv) in p {
                merge(v.entry(k.clone()).or_insert(Value::Null), pv);
            }
        }
        (v, p) => *v = p.clone(),
    }
}
