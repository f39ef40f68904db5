//! The scheduler's cache (kube-scheduler's `internal/cache`): every node's summary with the
//! pods counted on it, kept current by the informer handlers, plus the pods the scheduler
//! *assumed* bound — counted on their node from the moment the binding is sent, so the next
//! decision sees their resources — until the informer shows them bound (confirmed) or the
//! binding fails (forgotten).
//!
//! It also keeps what default topology spreading reads about other kinds: each namespace's
//! labels, the selectors of Services, and of ReplicaSets, ReplicationControllers and
//! StatefulSets (read when they change, not per decision).

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use super::hints::{self, Hints};
use super::node::{NodeInfo, NodeSpec};
use super::pod::PodInfo;
use crate::kube::labels::Labels;
use crate::kube::object::ObjectRef;
use crate::kube::selectors::{LabelRequirement, LabelSelector};

/// Where a pod in the cache is counted.
#[derive(Debug, Clone)]
struct Placement {
    node: Arc<str>,
    /// Counted from a binding this scheduler sent, not yet seen bound by the informer.
    assumed: bool,
}

/// A controller of pods whose selector default spreading uses: (kind, namespace, name).
pub type OwnerKey = (String, String, String);

#[derive(Default)]
pub struct Cache {
    /// Nodes by name, in name order (the order decisions walk them in).
    nodes: BTreeMap<Arc<str>, NodeInfo>,
    /// Nodes with a Node object (the candidates).
    live_nodes: usize,
    pods: HashMap<String, Placement>,
    namespaces: HashMap<String, Labels>,
    /// Services' selectors, by namespace and name.
    services: HashMap<String, BTreeMap<String, Vec<(String, String)>>>,
    /// Controllers' selectors (`None`: a selector that selects nothing or does not parse).
    owners: HashMap<OwnerKey, Option<LabelSelector>>,
}

impl Cache {
    pub fn new() -> Cache {
        Cache::default()
    }

    /// The candidate nodes (those with a Node object), in name order.
    pub fn nodes(&self) -> impl Iterator<Item = &NodeInfo> {
        self.nodes.values().filter(|n| n.object.is_some())
    }

    #[cfg(test)]
    pub fn node(&self, name: &str) -> Option<&NodeInfo> {
        self.nodes.get(name).filter(|n| n.object.is_some())
    }

    /// The pods counted on node `name` (also while its Node object is missing).
    pub fn node_pods(&self, name: &str) -> Option<&[PodInfo]> {
        self.nodes.get(name).map(|n| n.pods.as_slice())
    }

    pub fn node_count(&self) -> usize {
        self.live_nodes
    }

    /// The labels of namespace `name`, when it is known.
    pub fn namespace_labels(&self, name: &str) -> Option<&Labels> {
        self.namespaces.get(name)
    }

    /// Adds or updates a Node; returns what the change may help pods waiting on.
    pub fn upsert_node(&mut self, object: &ObjectRef) -> Hints {
        let spec = NodeSpec::parse(object);
        let name: Arc<str> = object.key.name.as_str().into();
        let node = self
            .nodes
            .entry(name.clone())
            .or_insert_with(|| NodeInfo::new(name));
        let hints = match &node.object {
            None => {
                self.live_nodes += 1;
                hints::ALL
            }
            Some(old) => {
                let mut h = 0;
                if old.labels != object.labels {
                    h |= hints::NODE_AFFINITY | hints::SPREAD | hints::INTER_POD_AFFINITY;
                }
                if node.spec.taints != spec.taints {
                    h |= hints::TAINTS | hints::SPREAD;
                }
                if node.spec.unschedulable != spec.unschedulable {
                    h |= hints::NODE_UNSCHEDULABLE;
                }
                if node.spec.allocatable != spec.allocatable {
                    h |= hints::RESOURCES;
                }
                h
            }
        };
        node.object = Some(object.clone());
        node.spec = spec;
        hints
    }

    /// Removes a Node; its pods stay counted (for affinity) until they go.
    pub fn remove_node(&mut self, name: &str) {
        let Some(node) = self.nodes.get_mut(name) else {
            return;
        };
        if node.object.take().is_some() {
            self.live_nodes -= 1;
        }
        if node.pods.is_empty() {
            self.nodes.remove(name);
        }
    }

    /// A bound pod, new or changed (`pod.spec.node_name` set). Confirms an assumed pod;
    /// returns what the change may help pods waiting on.
    pub fn upsert_pod(&mut self, pod: PodInfo) -> Hints {
        let uid = pod.uid().to_string();
        let node: Arc<str> = pod.spec.node_name.as_str().into();
        match self.pods.get(&uid).cloned() {
            Some(placed) if placed.node == node => {
                let entry = self.node_entry(&node);
                let labels_changed = entry
                    .pods
                    .iter()
                    .find(|p| p.uid() == uid)
                    .is_some_and(|old| old.labels() != pod.labels());
                entry.replace_pod(pod);
                self.pods.insert(
                    uid,
                    Placement {
                        node,
                        assumed: false,
                    },
                );
                if labels_changed || placed.assumed {
                    hints::SPREAD | hints::INTER_POD_AFFINITY
                } else {
                    0
                }
            }
            Some(placed) => {
                // Bound elsewhere than assumed (another scheduler won), or moved.
                self.remove_from_node(&placed.node, &uid);
                self.node_entry(&node).add_pod(pod);
                self.pods.insert(
                    uid,
                    Placement {
                        node,
                        assumed: false,
                    },
                );
                hints::ALL_POD_EVENTS
            }
            None => {
                self.node_entry(&node).add_pod(pod);
                self.pods.insert(
                    uid,
                    Placement {
                        node,
                        assumed: false,
                    },
                );
                hints::SPREAD | hints::INTER_POD_AFFINITY
            }
        }
    }

    /// A pod that no longer counts (deleted, or terminated); returns what its going may help.
    pub fn remove_pod(&mut self, uid: &str) -> Hints {
        match self.pods.remove(uid) {
            Some(placed) => {
                self.remove_from_node(&placed.node, uid);
                hints::ASSIGNED_POD_GONE
            }
            None => 0,
        }
    }

    /// Counts `pod` on `node` before its binding is confirmed.
    pub fn assume(&mut self, pod: PodInfo, node: &Arc<str>) {
        let uid = pod.uid().to_string();
        if let Some(placed) = self.pods.get(&uid).cloned() {
            self.remove_from_node(&placed.node, &uid);
        }
        self.node_entry(node).add_pod(pod);
        self.pods.insert(
            uid,
            Placement {
                node: node.clone(),
                assumed: true,
            },
        );
    }

    /// Stops counting an assumed pod whose binding failed; `true` if it was assumed.
    pub fn forget(&mut self, uid: &str) -> bool {
        match self.pods.get(uid) {
            Some(placed) if placed.assumed => {
                let node = placed.node.clone();
                self.pods.remove(uid);
                self.remove_from_node(&node, uid);
                true
            }
            _ => false,
        }
    }

    /// Whether the pod with `uid` is counted as assumed.
    pub fn is_assumed(&self, uid: &str) -> bool {
        self.pods.get(uid).is_some_and(|p| p.assumed)
    }

    /// Pods counted on nodes (bound and assumed).
    pub fn pod_count(&self) -> usize {
        self.pods.len()
    }

    fn node_entry(&mut self, name: &Arc<str>) -> &mut NodeInfo {
        self.nodes
            .entry(name.clone())
            .or_insert_with(|| NodeInfo::new(name.clone()))
    }

    fn remove_from_node(&mut self, node: &str, uid: &str) {
        if let Some(n) = self.nodes.get_mut(node) {
            n.remove_pod(uid);
            if n.object.is_none() && n.pods.is_empty() {
                self.nodes.remove(node);
            }
        }
    }

    pub fn set_namespace(&mut self, object: &ObjectRef) {
        self.namespaces
            .insert(object.key.name.clone(), object.labels.clone());
    }

    pub fn remove_namespace(&mut self, name: &str) {
        self.namespaces.remove(name);
    }

    /// A Service's `spec.selector` (empty: it selects nothing for spreading).
    pub fn set_service(&mut self, namespace: &str, name: &str, selector: Vec<(String, String)>) {
        let services = self.services.entry(namespace.to_string()).or_default();
        if selector.is_empty() {
            services.remove(name);
        } else {
            services.insert(name.to_string(), selector);
        }
        if services.is_empty() {
            self.services.remove(namespace);
        }
    }

    pub fn remove_service(&mut self, namespace: &str, name: &str) {
        self.set_service(namespace, name, Vec::new());
    }

    pub fn set_owner(&mut self, key: OwnerKey, selector: Option<LabelSelector>) {
        self.owners.insert(key, selector);
    }

    pub fn remove_owner(&mut self, key: &OwnerKey) {
        self.owners.remove(key);
    }

    /// `helper.DefaultSelector`: the selectors of the Services selecting the pod merged with
    /// its controller's (ReplicaSet, ReplicationController or StatefulSet); `None` when that
    /// is empty (the pod gets no default spreading).
    pub fn default_selector(&self, pod: &PodInfo) -> Option<LabelSelector> {
        let mut merged: BTreeMap<String, String> = BTreeMap::new();
        if let Some(services) = self.services.get(pod.namespace()) {
            for selector in services.values() {
                if selector
                    .iter()
                    .all(|(k, v)| pod.labels().get(k) == Some(v.as_str()))
                {
                    merged.extend(selector.iter().cloned());
                }
            }
        }
        let mut requirements: Vec<LabelRequirement> = merged
            .into_iter()
            .map(|(k, v)| LabelRequirement::Equals(k, v))
            .collect();
        if let Some((kind, name)) = &pod.spec.controller {
            if matches!(
                kind.as_str(),
                "ReplicaSet" | "ReplicationController" | "StatefulSet"
            ) {
                let key = (kind.clone(), pod.namespace().to_string(), name.clone());
                if let Some(Some(owner)) = self.owners.get(&key) {
                    requirements.extend(owner.requirements.iter().cloned());
                }
            }
        }
        (!requirements.is_empty()).then_some(LabelSelector { requirements })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::controllers::scheduler::testing::{pod, stored};
    use serde_json::json;

    fn node(name: &str, cpu: &str) -> ObjectRef {
        stored(
            "nodes",
            &json!({"metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}},
                    "status": {"allocatable": {"cpu": cpu, "memory": "8Gi", "pods": "110"}}}),
            1,
        )
    }

    fn bound(name: &str, node: &str, cpu: &str) -> PodInfo {
        pod(name, cpu, json!({"spec": {"nodeName": node}}))
    }

    #[test]
    fn assumed_pods_count_until_confirmed_or_forgotten() {
        let mut cache = Cache::new();
        assert_eq!(cache.upsert_node(&node("n1", "4")), hints::ALL);
        cache.upsert_node(&node("n2", "4"));
        let n1: Arc<str> = "n1".into();
        let p = pod("p", "1", json!({}));
        cache.assume(p.clone(), &n1);
        assert!(cache.is_assumed(p.uid()));
        assert_eq!(cache.node("n1").unwrap().requested.milli_cpu, 1000);
        // The informer shows it bound where assumed: confirmed, counted once.
        cache.upsert_pod(bound("p", "n1", "1"));
        assert!(!cache.is_assumed(p.uid()));
        assert_eq!(cache.node("n1").unwrap().requested.milli_cpu, 1000);
        assert_eq!(cache.node("n1").unwrap().pods.len(), 1);
        // Forgetting a confirmed pod does nothing.
        assert!(!cache.forget(p.uid()));
        // An assumed pod that another scheduler bound elsewhere moves.
        let q = pod("q", "2", json!({}));
        cache.assume(q.clone(), &n1);
        cache.upsert_pod(bound("q", "n2", "2"));
        assert_eq!(cache.node("n1").unwrap().requested.milli_cpu, 1000);
        assert_eq!(cache.node("n2").unwrap().requested.milli_cpu, 2000);
        // A failed binding is forgotten.
        let r = pod("r", "1", json!({}));
        cache.assume(r.clone(), &n1);
        assert!(cache.forget(r.uid()));
        assert_eq!(cache.node("n1").unwrap().requested.milli_cpu, 1000);
        assert_eq!(cache.remove_pod(p.uid()), hints::ASSIGNED_POD_GONE);
        assert!(cache.node("n1").unwrap().requested.is_zero());
        assert_eq!(cache.pod_count(), 1);
    }

    #[test]
    fn node_changes_say_what_they_may_help() {
        let mut cache = Cache::new();
        cache.upsert_node(&node("n1", "4"));
        assert_eq!(cache.upsert_node(&node("n1", "4")), 0);
        assert_eq!(cache.upsert_node(&node("n1", "8")), hints::RESOURCES);
        let tainted = stored(
            "nodes",
            &json!({"metadata": {"name": "n1", "labels": {"kubernetes.io/hostname": "n1"}},
                    "spec": {"taints": [{"key": "k", "effect": "NoSchedule"}], "unschedulable": true},
                    "status": {"allocatable": {"cpu": "8", "memory": "8Gi", "pods": "110"}}}),
            2,
        );
        assert_eq!(
            cache.upsert_node(&tainted),
            hints::TAINTS | hints::SPREAD | hints::NODE_UNSCHEDULABLE
        );
        // A deleted node with pods stays for them, but is no candidate.
        cache.upsert_pod(bound("p", "n1", "1"));
        cache.remove_node("n1");
        assert_eq!(cache.node_count(), 0);
        assert!(cache.node("n1").is_none());
        assert_eq!(cache.nodes().count(), 0);
        cache.remove_pod("uid-p");
        assert!(cache.nodes.is_empty());
    }

    #[test]
    fn the_default_selector_merges_services_and_the_controller() {
        let mut cache = Cache::new();
        let web = pod(
            "w",
            "1",
            json!({"metadata": {"labels": {"app": "web", "tier": "front"},
                                "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet",
                                                     "name": "web-1", "uid": "u", "controller": true}]}}),
        );
        assert_eq!(cache.default_selector(&web), None);
        cache.set_service("ns", "web", vec![("app".into(), "web".into())]);
        cache.set_service("ns", "db", vec![("app".into(), "db".into())]);
        let selector = cache.default_selector(&web).unwrap();
        assert_eq!(
            selector.requirements,
            [LabelRequirement::Equals("app".into(), "web".into())]
        );
        cache.set_owner(
            ("ReplicaSet".into(), "ns".into(), "web-1".into()),
            Some(LabelSelector {
                requirements: vec![LabelRequirement::Equals("tier".into(), "front".into())],
            }),
        );
        let selector = cache.default_selector(&web).unwrap();
        assert_eq!(selector.requirements.len(), 2);
        let bare = pod("b", "1", json!({}));
        assert_eq!(cache.default_selector(&bare), None);
    }
}
