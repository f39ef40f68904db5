//! The node lifecycle controller (kube-controller-manager's `node-lifecycle-controller`):
//! notices nodes whose kubelet stopped reporting and marks them, and keeps the taints that
//! follow from a node's conditions.
//!
//! - A node is heard from through its Lease (`kube-node-lease/<node>`, renewed every 10 s by
//!   its agent) and its Ready condition's heartbeat. When neither is newer than
//!   `--node-monitor-grace-period` (40 s), its Ready, MemoryPressure, DiskPressure and
//!   PIDPressure conditions become `Unknown` (reason `NodeStatusUnknown`, "Kubelet stopped
//!   posting node status."), as upstream does. Each node is checked again when its grace
//!   period would run out (a work-queue delay), never by polling.
//! - Taints from conditions: Ready False → `node.kubernetes.io/not-ready`, Unknown →
//!   `node.kubernetes.io/unreachable` (both NoSchedule and NoExecute, the NoExecute one with
//!   `timeAdded`); MemoryPressure/DiskPressure/PIDPressure True and NetworkUnavailable True →
//!   their NoSchedule taints; `spec.unschedulable` → `node.kubernetes.io/unschedulable`. Taints
//!   with other keys are the user's and left alone. Evicting the pods of a tainted node is the
//!   taint eviction controller's job (`taint_eviction`).

use std::sync::Arc;
use std::time::Duration;

use chrono::Utc;
use serde_json::{json, Value};

use super::informer::{Change, Informers, InformersBuilder, KindCache};
use super::objects::condition;
use super::queue::WorkQueue;
use super::taints::{keys, node_taints, Effect, Taint};
use super::worker::{Controller, Outcome, ReconcileError};
use super::Shared;
use crate::api::meta::format_time;
use crate::client::Client;
use crate::kube::resources::{self, ResourceInfo};

/// The conditions a silent node's kubelet can no longer vouch for.
const KUBELET_CONDITIONS: [&str; 4] = ["Ready", "MemoryPressure", "DiskPressure", "PIDPressure"];
/// Taint keys this controller owns.
const MANAGED: [&str; 7] = [
    keys::NOT_READY,
    keys::UNREACHABLE,
    keys::UNSCHEDULABLE,
    keys::MEMORY_PRESSURE,
    keys::DISK_PRESSURE,
    keys::PID_PRESSURE,
    keys::NETWORK_UNAVAILABLE,
];

pub struct NodeLifecycle {
    client: Client,
    grace: Duration,
    /// Per node: the last (Lease renewTime, Ready heartbeat) seen and when this server saw it
    /// change. Silence is measured on this server's clock from that moment, as upstream's
    /// probe timestamps are: a new leader gives every node a whole grace period, and clock
    /// skew between a node and the servers does not matter.
    heard: parking_lot::Mutex<std::collections::HashMap<String, (String, tokio::time::Instant)>>,
    nodes: Arc<KindCache>,
    leases: Arc<KindCache>,
}

fn nodes() -> &'static ResourceInfo {
    resources::find("", "v1", "nodes")
        .unwrap_or_else(|| panic!("built-in kind nodes is not registered"))
}

impl Controller for NodeLifecycle {
    /// The node's name.
    type Key = String;
    const NAME: &'static str = "node-lifecycle-controller";
    const WORKERS: usize = 2;

    fn register(builder: &mut InformersBuilder, queue: &WorkQueue<String>) {
        let q = queue.clone();
        builder.on_change(
            "nodes",
            Arc::new(move |change: Change<'_>| {
                if !matches!(change, Change::Deleted(_)) {
                    q.add(change.object().key.name.clone());
                }
            }),
        );
        let q = queue.clone();
        builder.on_change(
            "coordination.k8s.io/leases",
            Arc::new(move |change: Change<'_>| {
                let lease = change.object();
                if lease.key.namespace == "kube-node-lease" && !matches!(change, Change::Deleted(_))
                {
                    q.add(lease.key.name.clone());
                }
            }),
        );
    }

    fn new(shared: &Shared, informers: &Arc<Informers>, _queue: WorkQueue<String>) -> Self {
        NodeLifecycle {
            client: shared.controller_manager.clone(),
            grace: shared.settings.node_monitor_grace_period,
            heard: Default::default(),
            nodes: informers.cache("nodes").expect("registered in `register`"),
            leases: informers
                .cache("coordination.k8s.io/leases")
                .expect("registered in `register`"),
        }
    }

    async fn reconcile(&self, name: &String) -> Result<Outcome, ReconcileError> {
        let Some(stored) = self.nodes.get("", name) else {
            self.heard.lock().remove(name);
            return Ok(Outcome::Done);
        };
        let mut node = stored.value();
        let now = Utc::now();
        let silence = self.silence(&node, name);
        let silent = silence >= self.grace;
        if silent && mark_unknown(&mut node, &format_time(now)) {
            tracing::info!(component = "controllers", node = %name, "node stopped posting status: conditions Unknown");
            self.client.update_status(nodes(), "", name, &node).await?;
            // The status change comes back as an event and brings the taints along.
            return Ok(Outcome::Done);
        }
        let desired = desired_taints(&node, &format_time(now));
        if let Some(taints) = merged_taints(&node, &desired) {
            if let Some(spec) = node
                .as_object_mut()
                .map(|o| o.entry("spec").or_insert_with(|| json!({})))
                .and_then(Value::as_object_mut)
            {
                spec.insert("taints".into(), Value::Array(taints));
            }
            self.client.update(nodes(), "", name, &node).await?;
        }
        if silent {
            return Ok(Outcome::Done);
        }
        // Look again when the grace period would run out without news.
        Ok(Outcome::RequeueAfter(
            self.grace - silence + Duration::from_millis(100),
        ))
    }
}

impl NodeLifecycle {
    /// How long this server has seen no news from the node's agent: no new Lease renewTime
    /// and no new Ready heartbeat.
    fn silence(&self, node: &Value, name: &str) -> Duration {
        let renew = self
            .leases
            .get("kube-node-lease", name)
            .and_then(|l| {
                l.value()
                    .pointer("/spec/renewTime")
                    .and_then(Value::as_str)
                    .map(str::to_string)
            })
            .unwrap_or_default();
        let heartbeat = condition(node, "Ready")
            .and_then(|c| c.get("lastHeartbeatTime"))
            .and_then(Value::as_str)
            .unwrap_or("");
        let news = format!("{renew}|{heartbeat}");
        let now = tokio::time::Instant::now();
        let mut heard = self.heard.lock();
        let entry = heard.entry(name.to_string()).or_insert((news.clone(), now));
        if entry.0 != news {
            *entry = (news, now);
        }
        now.duration_since(entry.1)
    }
}

/// Sets the kubelet's conditions to Unknown; whether anything changed.
fn mark_unknown(node: &mut Value, now: &str) -> bool {
    let Some(conditions) = node
        .pointer_mut("/status/conditions")
        .and_then(Value::as_array_mut)
    else {
        // A node that never reported: it gets a Ready condition of Unknown.
        if let Some(obj) = node.as_object_mut() {
            let status = obj.entry("status").or_insert_with(|| json!({}));
            if let Some(status) = status.as_object_mut() {
                status.insert(
                    "conditions".into(),
                    json!([unknown_condition("Ready", None, now)]),
                );
                return true;
            }
        }
        return false;
    };
    let mut changed = false;
    for kind in KUBELET_CONDITIONS {
        let existing = conditions
            .iter_mut()
            .find(|c| c.get("type").and_then(Value::as_str) == Some(kind));
        match existing {
            Some(c) if c.get("status").and_then(Value::as_str) == Some("Unknown") => {}
            Some(c) => {
                let heartbeat = c.get("lastHeartbeatTime").cloned();
                *c = unknown_condition(kind, heartbeat, now);
                changed = true;
            }
            None if kind == "Ready" => {
                conditions.push(unknown_condition(kind, None, now));
                changed = true;
            }
            None => {}
        }
    }
    changed
}

fn unknown_condition(kind: &str, heartbeat: Option<Value>, now: &str) -> Value {
    json!({
        "type": kind,
        "status": "Unknown",
        "reason": "NodeStatusUnknown",
        "message": "Kubelet stopped posting node status.",
        "lastHeartbeatTime": heartbeat.unwrap_or_else(|| json!(now)),
        "lastTransitionTime": now,
    })
}

fn condition_status<'a>(node: &'a Value, kind: &str) -> Option<&'a str> {
    condition(node, kind)
        .and_then(|c| c.get("status"))
        .and_then(Value::as_str)
}

/// The taints this controller wants on `node`, from its conditions and `spec.unschedulable`.
fn desired_taints(node: &Value, now: &str) -> Vec<Taint> {
    let mut taints = Vec::new();
    let mut both = |key: &str| {
        taints.push(Taint::new(key, Effect::NoSchedule));
        let mut execute = Taint::new(key, Effect::NoExecute);
        execute.time_added = Some(now.to_string());
        taints.push(execute);
    };
    match condition_status(node, "Ready") {
        Some("False") => both(keys::NOT_READY),
        Some("Unknown") | None => both(keys::UNREACHABLE),
        _ => {}
    }
    for (kind, key) in [
        ("MemoryPressure", keys::MEMORY_PRESSURE),
        ("DiskPressure", keys::DISK_PRESSURE),
        ("PIDPressure", keys::PID_PRESSURE),
        ("NetworkUnavailable", keys::NETWORK_UNAVAILABLE),
    ] {
        if condition_status(node, kind) == Some("True") {
            taints.push(Taint::new(key, Effect::NoSchedule));
        }
    }
    if node.pointer("/spec/unschedulable").and_then(Value::as_bool) == Some(true) {
        taints.push(Taint::new(keys::UNSCHEDULABLE, Effect::NoSchedule));
    }
    taints
}

/// The node's new `spec.taints` when the managed ones differ from `desired` (existing managed
/// taints keep their `timeAdded`); `None` when nothing changes.
fn merged_taints(node: &Value, desired: &[Taint]) -> Option<Vec<Value>> {
    let current = node_taints(node);
    let managed = |t: &Taint| MANAGED.contains(&t.key.as_str());
    let same = |a: &Taint, b: &Taint| a.key == b.key && a.effect == b.effect;
    let current_managed: Vec<&Taint> = current.iter().filter(|t| managed(t)).collect();
    let unchanged = current_managed.len() == desired.len()
        && desired
            .iter()
            .all(|d| current_managed.iter().any(|c| same(c, d)));
    if unchanged {
        return None;
    }
    let raw = node
        .pointer("/spec/taints")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    // The user's taints as written, then the managed ones.
    let mut out: Vec<Value> = raw
        .into_iter()
        .filter(|t| {
            t.get("key")
                .and_then(Value::as_str)
                .is_none_or(|k| !MANAGED.contains(&k))
        })
        .collect();
    for d in desired {
        let kept = current.iter().find(|c| same(c, d));
        out.push(kept.unwrap_or(d).to_value());
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(ready: &str, extra: Value) -> Value {
        let mut n = json!({"metadata": {"name": "n1"}, "spec": {}, "status": {"conditions": [
            {"type": "Ready", "status": ready, "lastHeartbeatTime": "2026-01-01T00:00:00Z",
             "lastTransitionTime": "2026-01-01T00:00:00Z"},
            {"type": "MemoryPressure", "status": "False"},
        ]}});
        if let (Some(spec), Some(extra)) = (n["spec"].as_object_mut(), extra.as_object()) {
            spec.extend(extra.clone());
        }
        n
    }

    #[test]
    fn a_silent_node_gets_unknown_conditions_keeping_its_last_heartbeat() {
        let mut n = node("True", json!({}));
        assert!(mark_unknown(&mut n, "2026-01-01T01:00:00Z"));
        let ready = condition(&n, "Ready").unwrap();
        assert_eq!(ready["status"], "Unknown");
        assert_eq!(ready["reason"], "NodeStatusUnknown");
        assert_eq!(ready["lastHeartbeatTime"], "2026-01-01T00:00:00Z");
        assert_eq!(ready["lastTransitionTime"], "2026-01-01T01:00:00Z");
        assert_eq!(condition_status(&n, "MemoryPressure"), Some("Unknown"));
        assert!(
            !mark_unknown(&mut n, "2026-01-01T02:00:00Z"),
            "already Unknown"
        );
    }

    #[test]
    fn taints_follow_conditions_and_keep_the_users_own() {
        let now = "2026-01-01T01:00:00Z";
        let mut n = node(
            "Unknown",
            json!({"taints": [{"key": "gpu", "effect": "NoSchedule"}]}),
        );
        let desired = desired_taints(&n, now);
        let taints = merged_taints(&n, &desired).unwrap();
        let keys: Vec<(&str, &str)> = taints
            .iter()
            .map(|t| (t["key"].as_str().unwrap(), t["effect"].as_str().unwrap()))
            .collect();
        assert_eq!(
            keys,
            [
                ("gpu", "NoSchedule"),
                (keys::UNREACHABLE, "NoSchedule"),
                (keys::UNREACHABLE, "NoExecute")
            ]
        );
        assert_eq!(taints[2]["timeAdded"], now);
        n["spec"]["taints"] = Value::Array(taints);
        // Applied: nothing more to do, and the timeAdded stays.
        assert!(merged_taints(&n, &desired_taints(&n, "2026-01-01T02:00:00Z")).is_none());
        // Ready again: only the user's taint is left.
        n["status"]["conditions"][0]["status"] = json!("True");
        let back = merged_taints(&n, &desired_taints(&n, now)).unwrap();
        assert_eq!(back, vec![json!({"key": "gpu", "effect": "NoSchedule"})]);
        // Cordoned.
        n["spec"]["unschedulable"] = json!(true);
        n["spec"]["taints"] = Value::Array(back);
        let cordoned = merged_taints(&n, &desired_taints(&n, now)).unwrap();
        assert_eq!(cordoned[1]["key"], keys::UNSCHEDULABLE);
    }
}
