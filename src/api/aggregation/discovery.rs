//! The aggregated group versions in `/apis`: every Available Service-backed APIService, its
//! resources from the discovery document its server answered (kept by the [`Aggregator`]),
//! in the legacy APIGroupList and in the aggregated (v2) form.

use serde_json::{json, Map, Value};

use super::apiservice;
use super::Aggregator;
use crate::kube::store::Store;

/// Groups with their Available aggregated versions, by group then version name.
pub fn groups(store: &Store) -> Vec<(String, Vec<String>)> {
    let mut out: Vec<(String, Vec<String>)> = Vec::new();
    for backend in apiservice::backends(store)
        .into_iter()
        .filter(|b| b.available && !b.group.is_empty())
    {
        match out.iter_mut().find(|(g, _)| *g == backend.group) {
            Some((_, versions)) => versions.push(backend.version),
            None => out.push((backend.group, vec![backend.version])),
        }
    }
    out.sort_by(|a, b| a.0.cmp(&b.0));
    out
}

/// One version of an APIGroupDiscovery: the kept resources converted, or none and `Stale`
/// while this server has not read them.
pub fn aggregated_version(aggregator: &Aggregator, group: &str, version: &str) -> Value {
    let Some(list) = aggregator.resources(&format!("{group}/{version}")) else {
        return json!({"version": version, "resources": [], "freshness": "Stale"});
    };
    let listed = list["resources"].as_array().cloned().unwrap_or_default();
    let mut resources: Vec<Map<String, Value>> = Vec::new();
    for r in listed.iter().filter(|r| !name(r).contains('/')) {
        let mut entry = Map::new();
        entry.insert("resource".into(), name(r).into());
        entry.insert("responseKind".into(), kind_of(r, group, version));
        let scope = if r["namespaced"].as_bool().unwrap_or(false) {
            "Namespaced"
        } else {
            "Cluster"
        };
        entry.insert("scope".into(), scope.into());
        let singular = match r["singularName"].as_str() {
            Some(s) if !s.is_empty() => s.to_string(),
            _ => r["kind"].as_str().unwrap_or("").to_ascii_lowercase(),
        };
        entry.insert("singularResource".into(), singular.into());
        entry.insert("verbs".into(), r["verbs"].clone());
        for key in ["shortNames", "categories"] {
            if r[key].as_array().is_some_and(|a| !a.is_empty()) {
                entry.insert(key.into(), r[key].clone());
            }
        }
        resources.push(entry);
    }
    for r in listed.iter().filter(|r| name(r).contains('/')) {
        let Some((parent, sub)) = name(r).split_once('/') else {
            continue;
        };
        if let Some(entry) = resources.iter_mut().find(|e| e["resource"] == parent) {
            let subresource = json!({
                "subresource": sub,
                "responseKind": kind_of(r, group, version),
                "verbs": r["verbs"],
            });
            match entry.get_mut("subresources").and_then(Value::as_array_mut) {
                Some(list) => list.push(subresource),
                None => {
                    entry.insert("subresources".into(), json!([subresource]));
                }
            }
        }
    }
    let resources: Vec<Value> = resources.into_iter().map(Value::Object).collect();
    json!({"version": version, "resources": resources, "freshness": "Current"})
}

fn name(r: &Value) -> &str {
    r["name"].as_str().unwrap_or("")
}

fn kind_of(r: &Value, group: &str, version: &str) -> Value {
    json!({
        "group": r["group"].as_str().unwrap_or(group),
        "version": r["version"].as_str().unwrap_or(version),
        "kind": r["kind"],
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Instant;

    #[test]
    fn a_resource_list_becomes_an_aggregated_version() {
        let aggregator = Aggregator::default();
        assert_eq!(
            aggregated_version(&aggregator, "metrics.k8s.io", "v1beta1")["freshness"],
            "Stale"
        );
        aggregator.discovery.lock().insert(
            "metrics.k8s.io/v1beta1".into(),
            (
                Instant::now(),
                json!({"resources": [
                    {"name": "pods", "singularName": "", "namespaced": true, "kind": "PodMetrics",
                     "verbs": ["get", "list"]},
                    {"name": "pods/status", "namespaced": true, "kind": "PodMetrics", "verbs": ["get"]},
                    {"name": "nodes", "singularName": "node", "namespaced": false,
                     "kind": "NodeMetrics", "verbs": ["get", "list"], "shortNames": ["nm"]},
                ]}),
            ),
        );
        let v = aggregated_version(&aggregator, "metrics.k8s.io", "v1beta1");
        assert_eq!(v["freshness"], "Current");
        assert_eq!(
            v["resources"][0],
            json!({"resource": "pods", "scope": "Namespaced", "singularResource": "podmetrics",
                   "responseKind": {"group": "metrics.k8s.io", "version": "v1beta1", "kind": "PodMetrics"},
                   "verbs": ["get", "list"],
                   "subresources": [{"subresource": "status", "verbs": ["get"],
                       "responseKind": {"group": "metrics.k8s.io", "version": "v1beta1", "kind": "PodMetrics"}}]})
        );
        assert_eq!(v["resources"][1]["shortNames"], json!(["nm"]));
        assert_eq!(v["resources"][1]["scope"], "Cluster");
    }
}
