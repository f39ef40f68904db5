//! A node as the scheduler sees it: a compact summary kept current from the informers
//! (kube-scheduler's `framework.NodeInfo`) — allocatable, taints, the unschedulable flag and the
//! labels (the store's own), plus what the pods on it add up to: requested resources (as
//! asked, and with the scoring defaults), host ports in use, and the pods themselves for the
//! filters that look at other pods (inter-pod affinity, topology spreading).

use std::collections::BTreeMap;
use std::sync::Arc;

use serde::Deserialize;
use serde_json::Value;

use super::pod::{HostPort, PodInfo};
use super::resources::Resources;
use super::terms::Taint;
use crate::kube::labels::Labels;
use crate::kube::object::ObjectRef;

/// What the scheduler reads from a Node object.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NodeSpec {
    pub allocatable: Resources,
    pub taints: Vec<Taint>,
    pub unschedulable: bool,
}

#[derive(Default, Deserialize)]
#[serde(default)]
struct RawNode {
    spec: RawNodeSpec,
    status: RawNodeStatus,
}

#[derive(Default, Deserialize)]
#[serde(default)]
struct RawNodeSpec {
    unschedulable: Option<bool>,
    taints: Option<Vec<Taint>>,
}

#[derive(Default, Deserialize)]
#[serde(default)]
struct RawNodeStatus {
    allocatable: Option<BTreeMap<String, Value>>,
}

impl NodeSpec {
    /// Reads a Node's JSON; an unreadable node offers nothing (no allocatable, no pods).
    pub fn parse(object: &ObjectRef) -> NodeSpec {
        let raw: RawNode = serde_json::from_slice(&object.json).unwrap_or_default();
        let allocatable = raw.status.allocatable.unwrap_or_default();
        let text = |v: &Value| match v {
            Value::String(s) => s.clone(),
            other => other.to_string(),
        };
        let pairs: Vec<(String, String)> = allocatable
            .iter()
            .map(|(k, v)| (k.clone(), text(v)))
            .collect();
        NodeSpec {
            allocatable: Resources::from_list(pairs.iter().map(|(k, v)| (k.as_str(), v.as_str()))),
            taints: raw.spec.taints.unwrap_or_default(),
            unschedulable: raw.spec.unschedulable.unwrap_or(false),
        }
    }
}

/// One node and the pods the scheduler counts on it (bound, and assumed while their binding
/// is on its way).
#[derive(Debug, Clone)]
pub struct NodeInfo {
    pub name: Arc<str>,
    /// The Node object; `None` while pods still name a node that was deleted (such a node is
    /// no candidate, but its pods keep counting for affinity until they go).
    pub object: Option<ObjectRef>,
    pub spec: NodeSpec,
    pub pods: Vec<PodInfo>,
    /// Sum of the pods' requests.
    pub requested: Resources,
    /// Sum of the pods' cpu and memory with the scoring defaults for containers naming none.
    pub non_zero_milli_cpu: i64,
    pub non_zero_memory: i64,
    /// Host ports in use, with how many pods use each.
    pub ports: BTreeMap<HostPort, u32>,
    /// Pods with any inter-pod affinity term, and with a required anti-affinity term.
    pub with_affinity: usize,
    pub with_required_anti_affinity: usize,
}

impl NodeInfo {
    pub fn new(name: Arc<str>) -> NodeInfo {
        NodeInfo {
            name,
            object: None,
            spec: NodeSpec::default(),
            pods: Vec::new(),
            requested: Resources::default(),
            non_zero_milli_cpu: 0,
            non_zero_memory: 0,
            ports: BTreeMap::new(),
            with_affinity: 0,
            with_required_anti_affinity: 0,
        }
    }

    /// The node's labels (none while the Node object is missing).
    pub fn labels(&self) -> &Labels {
        static NONE: std::sync::OnceLock<Labels> = std::sync::OnceLock::new();
        match &self.object {
            Some(o) => &o.labels,
            None => NONE.get_or_init(Labels::default),
        }
    }

    pub fn add_pod(&mut self, pod: PodInfo) {
        self.account(&pod, 1);
        self.pods.push(pod);
    }

    /// Removes the pod with `uid`; returns it.
    pub fn remove_pod(&mut self, uid: &str) -> Option<PodInfo> {
        let i = self.pods.iter().position(|p| p.uid() == uid)?;
        let pod = self.pods.swap_remove(i);
        self.account(&pod, -1);
        Some(pod)
    }

    /// Replaces the pod with the same uid by `pod` (a newer version of it).
    pub fn replace_pod(&mut self, pod: PodInfo) {
        match self.pods.iter().position(|p| p.uid() == pod.uid()) {
            Some(i) => {
                let old = std::mem::replace(&mut self.pods[i], pod.clone());
                self.account(&old, -1);
                self.account(&pod, 1);
            }
            None => self.add_pod(pod),
        }
    }

    fn account(&mut self, pod: &PodInfo, sign: i64) {
        let r = &pod.spec.requests;
        if sign > 0 {
            self.requested.add(&r.resources);
        } else {
            self.requested.subtract(&r.resources);
        }
        self.non_zero_milli_cpu += sign * r.non_zero_milli_cpu;
        self.non_zero_memory += sign * r.non_zero_memory;
        for port in &pod.spec.host_ports {
            if sign > 0 {
                *self.ports.entry(port.clone()).or_insert(0) += 1;
            } else if let Some(n) = self.ports.get_mut(port) {
                *n -= 1;
                if *n == 0 {
                    self.ports.remove(port);
                }
            }
        }
        let affinity = pod.spec.pod_affinity();
        let delta = |n: &mut usize| {
            if sign > 0 {
                *n += 1
            } else {
                *n = n.saturating_sub(1)
            }
        };
        if pod.spec.affinity.is_some() {
            delta(&mut self.with_affinity);
        }
        if !affinity.required_anti_affinity.is_empty() {
            delta(&mut self.with_required_anti_affinity);
        }
    }

    /// `HostPortInfo.CheckConflict`: a wildcard address conflicts with the same protocol and
    /// port on any address; a specific one with itself and the wildcard.
    pub fn port_conflicts(&self, want: &HostPort) -> bool {
        const ANY: &str = "0.0.0.0";
        self.ports.keys().any(|used| {
            used.protocol == want.protocol
                && used.port == want.port
                && (want.ip == ANY || used.ip == ANY || used.ip == want.ip)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::controllers::scheduler::testing::{pod, stored};
    use serde_json::json;

    #[test]
    fn a_node_reads_allocatable_taints_and_the_unschedulable_flag() {
        let node = stored(
            "nodes",
            &json!({"metadata": {"name": "n1", "labels": {"zone": "a"}},
                    "spec": {"unschedulable": true,
                             "taints": [{"key": "k", "value": "v", "effect": "NoSchedule"}]},
                    "status": {"allocatable": {"cpu": "4", "memory": "8Gi", "pods": 110,
                                               "example.com/gpu": "2"}}}),
            1,
        );
        let spec = NodeSpec::parse(&node);
        assert!(spec.unschedulable);
        assert_eq!(spec.taints.len(), 1);
        assert_eq!(spec.allocatable.milli_cpu, 4000);
        assert_eq!(spec.allocatable.memory, 8 << 30);
        assert_eq!(spec.allocatable.pods, 110);
        assert_eq!(spec.allocatable.scalar("example.com/gpu"), 2);
    }

    #[test]
    fn pods_add_up_and_come_off_again() {
        let mut node = NodeInfo::new("n1".into());
        let web = pod(
            "web",
            "500m",
            json!({"spec": {"containers": [{"name": "c", "image": "i",
                "resources": {"requests": {"cpu": "500m"}},
                "ports": [{"containerPort": 80, "hostPort": 80}]}]}}),
        );
        let other = pod("other", "250m", json!({}));
        node.add_pod(web.clone());
        node.add_pod(other.clone());
        assert_eq!(node.requested.milli_cpu, 750);
        assert_eq!(node.non_zero_milli_cpu, 750);
        assert_eq!(node.non_zero_memory, 2 * 200 * 1024 * 1024);
        let tcp = |ip: &str, port| HostPort {
            ip: ip.into(),
            protocol: "TCP".into(),
            port,
        };
        assert!(node.port_conflicts(&tcp("0.0.0.0", 80)));
        assert!(node.port_conflicts(&tcp("10.0.0.1", 80)));
        assert!(!node.port_conflicts(&tcp("0.0.0.0", 81)));
        assert!(!node.port_conflicts(&HostPort {
            ip: "0.0.0.0".into(),
            protocol: "UDP".into(),
            port: 80
        }));
        node.remove_pod(web.uid()).unwrap();
        assert_eq!(node.requested.milli_cpu, 250);
        assert!(!node.port_conflicts(&tcp("0.0.0.0", 80)));
        node.replace_pod(other.clone());
        assert_eq!(node.pods.len(), 1);
        assert_eq!(node.requested.milli_cpu, 250);
        node.remove_pod(other.uid()).unwrap();
        assert!(node.requested.is_zero());
        assert_eq!(node.non_zero_milli_cpu, 0);

        let mut specific = NodeInfo::new("n2".into());
        specific.add_pod(pod(
            "s",
            "1",
            json!({"spec": {"containers": [{"name": "c", "image": "i",
                "ports": [{"containerPort": 80, "hostPort": 80, "hostIP": "10.0.0.1"}]}]}}),
        ));
        assert!(specific.port_conflicts(&tcp("0.0.0.0", 80)));
        assert!(specific.port_conflicts(&tcp("10.0.0.1", 80)));
        assert!(!specific.port_conflicts(&tcp("10.0.0.2", 80)));
    }
}
