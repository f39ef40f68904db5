//! A pod as the scheduler holds it: read once from the store's JSON when the pod arrives or
//! its spec changes (kube-scheduler's `framework.PodInfo`), so that no decision parses a pod.
//! The store's object is kept beside the parsed parts (shared, not copied) for its name,
//! namespace, uid and labels.

use std::collections::BTreeMap;
use std::sync::Arc;

use serde::de::IgnoredAny;
use serde::Deserialize;
use serde_json::Value;

use super::quantity;
use super::resources::{ContainerRequests, PodRequests};
use super::terms::{
    AffinityTerm, NodeSelectorTerm, PreferredNodeTerm, RawAffinityTerm, RawNodeSelectorTerm,
    RequiredNodeAffinity, Toleration,
};
use crate::controllers::objects::label_selector;
use crate::kube::labels::Labels;
use crate::kube::object::ObjectRef;
use crate::kube::selectors::{LabelRequirement, LabelSelector};

/// The scheduler name pods get by default, and this scheduler's.
pub const DEFAULT_SCHEDULER: &str = "default-scheduler";

/// A pod: the store's object and what the scheduler read from it.
#[derive(Debug, Clone)]
pub struct PodInfo {
    pub object: ObjectRef,
    pub spec: Arc<PodSpec>,
}

impl PodInfo {
    /// Reads `object`; a spec the scheduler cannot use (a selector that does not parse) is
    /// kept with its reason in `spec.invalid`.
    pub fn new(object: ObjectRef) -> PodInfo {
        let spec = Arc::new(PodSpec::parse(&object));
        PodInfo { object, spec }
    }

    pub fn namespace(&self) -> &str {
        &self.object.key.namespace
    }

    pub fn name(&self) -> &str {
        &self.object.key.name
    }

    pub fn uid(&self) -> &str {
        &self.object.uid
    }

    pub fn labels(&self) -> &Labels {
        &self.object.labels
    }

    /// `namespace/name`.
    pub fn key(&self) -> String {
        format!("{}/{}", self.namespace(), self.name())
    }
}

/// What a pod's spec (and the few metadata and status fields the scheduler needs) say.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PodSpec {
    pub node_name: String,
    pub scheduler_name: String,
    pub priority: i64,
    /// `preemptionPolicy: Never`.
    pub never_preempts: bool,
    pub requests: PodRequests,
    pub host_ports: Vec<HostPort>,
    pub tolerations: Vec<Toleration>,
    pub required_node_affinity: RequiredNodeAffinity,
    pub preferred_node_terms: Vec<PreferredNodeTerm>,
    /// Inter-pod affinity terms; `None` when the pod has none (most pods).
    pub affinity: Option<Box<PodAffinity>>,
    pub spread: Vec<SpreadConstraint>,
    /// `spec.schedulingGates` is not empty: the pod waits.
    pub gated: bool,
    /// `metadata.deletionTimestamp` is set.
    pub deleting: bool,
    /// `status.phase` is Succeeded or Failed: the pod holds no resources.
    pub terminal: bool,
    /// The controller owner (kind, name) of the pod, for default spreading.
    pub controller: Option<(String, String)>,
    /// The pod's `PodScheduled` condition (status, reason, message), when it has one.
    pub scheduled_condition: Option<(String, String, String)>,
    /// Why the scheduler cannot use this spec, if it cannot.
    pub invalid: Option<String>,
}

/// A host port a pod's container binds.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct HostPort {
    /// The host IP; `0.0.0.0` when unset.
    pub ip: String,
    /// `TCP` when unset.
    pub protocol: String,
    pub port: i64,
}

/// A pod's inter-pod affinity and anti-affinity terms.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PodAffinity {
    pub required_affinity: Vec<AffinityTerm>,
    pub required_anti_affinity: Vec<AffinityTerm>,
    pub preferred_affinity: Vec<AffinityTerm>,
    pub preferred_anti_affinity: Vec<AffinityTerm>,
}

/// `whenUnsatisfiable` of a topology spread constraint.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unsatisfiable {
    DoNotSchedule,
    ScheduleAnyway,
}

/// A topology spread constraint with its selector resolved (`matchLabelKeys` merged).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SpreadConstraint {
    pub max_skew: i64,
    pub topology_key: String,
    pub when_unsatisfiable: Unsatisfiable,
    /// `None`: no selector (counts no pod).
    pub selector: Option<LabelSelector>,
    pub min_domains: i64,
    /// `nodeAffinityPolicy: Honor` (the default): only nodes the pod may go to count.
    pub honor_node_affinity: bool,
    /// `nodeTaintsPolicy: Honor`: only nodes whose taints the pod tolerates count.
    pub honor_node_taints: bool,
}

#[derive(Default, Deserialize)]
#[serde(default)]
struct RawPod {
    metadata: RawMetadata,
    spec: RawSpec,
    status: RawStatus,
}

#[derive(Default, Deserialize)]
#[serde(default, rename_all = "camelCase")]
struct RawMetadata {
    deletion_timestamp: Option<IgnoredAny>,
    owner_references: Vec<RawOwnerReference>,
}

#[derive(Default, Deserialize)]
#[serde(default, rename_all = "camelCase")]
struct RawOwnerReference {
    kind: String,
    name: String,
    controller: Option<bool>,
}

#[derive(Default, Deserialize)]
#[serde(default, rename_all = "camelCase")]
struct RawSpec {
    node_name: Option<String>,
    scheduler_name: Option<String>,
    priority: Option<i64>,
    preemption_policy: Option<String>,
    node_selector: Option<BTreeMap<String, String>>,
    affinity: Option<RawAffinity>,
    tolerations: Option<Vec<Toleration>>,
    containers: Vec<RawContainer>,
    init_containers: Option<Vec<RawContainer>>,
    overhead: Option<BTreeMap<String, Value>>,
    topology_spread_constraints: Option<Vec<RawSpreadConstraint>>,
    scheduling_gates: Option<Vec<IgnoredAny>>,
}

#[derive(Default, Deserialize)]
#[serde(default, rename_all = "camelCase")]
struct RawContainer {
    resources: Option<RawResources>,
    ports: Option<Vec<RawPort>>,
    restart_policy: Option<String>,
}

#[derive(Default, Deserialize)]
#[serde(default)]
struct RawResources {
    requests: Option<BTreeMap<String, Value>>,
    limits: Option<BTreeMap<String, Value>>,
}

#[derive(Default, Deserialize)]
#[serde(default, rename_all = "camelCase")]
struct RawPort {
    host_port: Option<i64>,
    #[serde(rename = "hostIP")]
    host_ip: Option<String>,
    protocol: Option<String>,
}

#[derive(Default, Deserialize)]
#[serde(default, rename_all = "camelCase")]
struct RawAffinity {
    node_affinity: Option<RawNodeAffinity>,
    pod_affinity: Option<RawPodAffinity>,
    pod_anti_affinity: Option<RawPodAffinity>,
}

#[derive(Default, Deserialize)]
#[serde(default, rename_all = "camelCase")]
struct RawNodeAffinity {
    required_during_scheduling_ignored_during_execution: Option<RawNodeSelector>,
    preferred_during_scheduling_ignored_during_execution: Option<Vec<RawPreferredNodeTerm>>,
}

#[derive(Default, Deserialize)]
#[serde(default, rename_all = "camelCase")]
struct RawNodeSelector {
    node_selector_terms: Vec<RawNodeSelectorTerm>,
}

#[derive(Default, Deserialize)]
#[serde(default)]
struct RawPreferredNodeTerm {
    weight: i64,
    preference: RawNodeSelectorTerm,
}

#[derive(Default, Deserialize)]
#[serde(default, rename_all = "camelCase")]
struct RawPodAffinity {
    required_during_scheduling_ignored_during_execution: Option<Vec<RawAffinityTerm>>,
    preferred_during_scheduling_ignored_during_execution: Option<Vec<RawWeightedAffinityTerm>>,
}

#[derive(Default, Deserialize)]
#[serde(default, rename_all = "camelCase")]
struct RawWeightedAffinityTerm {
    weight: i64,
    pod_affinity_term: RawAffinityTerm,
}

#[derive(Default, Deserialize)]
#[serde(default, rename_all = "camelCase")]
struct RawSpreadConstraint {
    max_skew: i64,
    topology_key: String,
    when_unsatisfiable: String,
    label_selector: Option<Value>,
    min_domains: Option<i64>,
    node_affinity_policy: Option<String>,
    node_taints_policy: Option<String>,
    match_label_keys: Option<Vec<String>>,
}

#[derive(Default, Deserialize)]
#[serde(default)]
struct RawStatus {
    phase: Option<String>,
    conditions: Option<Vec<RawCondition>>,
}

#[derive(Default, Deserialize)]
#[serde(default)]
struct RawCondition {
    #[serde(rename = "type")]
    kind: String,
    status: String,
    reason: Option<String>,
    message: Option<String>,
}

/// A quantity as JSON carries it: normally a string, a number when a client sent one.
fn quantity_text(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// The requests of a container, with a limit standing in for a missing request (kube-apiserver
/// defaults a pod's requests to its limits).
fn container_requests(c: &RawContainer) -> ContainerRequests {
    let mut requests = BTreeMap::new();
    if let Some(r) = &c.resources {
        for (name, q) in r.limits.iter().flatten() {
            requests.insert(name.clone(), quantity::amount(name, &quantity_text(q)));
        }
        for (name, q) in r.requests.iter().flatten() {
            requests.insert(name.clone(), quantity::amount(name, &quantity_text(q)));
        }
    }
    ContainerRequests {
        requests,
        sidecar: c.restart_policy.as_deref() == Some("Always"),
    }
}

impl PodSpec {
    /// Reads what the scheduler needs from the pod's JSON.
    pub fn parse(object: &ObjectRef) -> PodSpec {
        let raw: RawPod = match serde_json::from_slice(&object.json) {
            Ok(raw) => raw,
            Err(e) => {
                return PodSpec {
                    invalid: Some(format!("the pod could not be read: {e}")),
                    ..PodSpec::default()
                }
            }
        };
        let mut invalid = None;
        let RawPod {
            metadata,
            spec,
            status,
        } = raw;
        let init = spec.init_containers.unwrap_or_default();
        let containers: Vec<ContainerRequests> =
            spec.containers.iter().map(container_requests).collect();
        let init_requests: Vec<ContainerRequests> = init.iter().map(container_requests).collect();
        let overhead: BTreeMap<String, i64> = spec
            .overhead
            .unwrap_or_default()
            .iter()
            .map(|(n, q)| (n.clone(), quantity::amount(n, &quantity_text(q))))
            .collect();
        // Host ports of the containers and of the init containers that keep running.
        let mut host_ports = Vec::new();
        let running = init
            .iter()
            .filter(|c| c.restart_policy.as_deref() == Some("Always"))
            .chain(spec.containers.iter());
        for c in running {
            for p in c.ports.iter().flatten() {
                let Some(port) = p.host_port.filter(|p| *p > 0) else {
                    continue;
                };
                host_ports.push(HostPort {
                    ip: p
                        .host_ip
                        .clone()
                        .filter(|ip| !ip.is_empty())
                        .unwrap_or_else(|| "0.0.0.0".into()),
                    protocol: p
                        .protocol
                        .clone()
                        .filter(|p| !p.is_empty())
                        .unwrap_or_else(|| "TCP".into()),
                    port,
                });
            }
        }
        let affinity = spec.affinity.unwrap_or_default();
        let node_affinity = affinity.node_affinity.unwrap_or_default();
        let required_node_affinity = RequiredNodeAffinity {
            node_selector: spec.node_selector.unwrap_or_default().into_iter().collect(),
            terms: node_affinity
                .required_during_scheduling_ignored_during_execution
                .map(|s| {
                    s.node_selector_terms
                        .iter()
                        .filter_map(NodeSelectorTerm::parse)
                        .collect()
                }),
        };
        let preferred_node_terms = node_affinity
            .preferred_during_scheduling_ignored_during_execution
            .unwrap_or_default()
            .iter()
            .filter(|p| p.weight != 0)
            .filter_map(|p| {
                NodeSelectorTerm::parse(&p.preference).map(|term| PreferredNodeTerm {
                    weight: p.weight,
                    term,
                })
            })
            .collect();
        let namespace = &object.key.namespace;
        let labels = &object.labels;
        let mut terms = |raw: Option<RawPodAffinity>| -> (Vec<AffinityTerm>, Vec<AffinityTerm>) {
            let raw = raw.unwrap_or_default();
            let mut parse = |t: &RawAffinityTerm, weight: i64| match AffinityTerm::parse(
                t, namespace, labels, weight,
            ) {
                Ok(t) => Some(t),
                Err(e) => {
                    invalid.get_or_insert(e);
                    None
                }
            };
            let required = raw
                .required_during_scheduling_ignored_during_execution
                .unwrap_or_default()
                .iter()
                .filter_map(|t| parse(t, 0))
                .collect();
            let preferred = raw
                .preferred_during_scheduling_ignored_during_execution
                .unwrap_or_default()
                .iter()
                .filter_map(|t| parse(&t.pod_affinity_term, t.weight))
                .collect();
            (required, preferred)
        };
        let (required_affinity, preferred_affinity) = terms(affinity.pod_affinity);
        let (required_anti_affinity, preferred_anti_affinity) = terms(affinity.pod_anti_affinity);
        let pod_affinity = PodAffinity {
            required_affinity,
            required_anti_affinity,
            preferred_affinity,
            preferred_anti_affinity,
        };
        let affinity = (pod_affinity != PodAffinity::default()).then(|| Box::new(pod_affinity));
        let mut spread = Vec::new();
        for c in spec.topology_spread_constraints.unwrap_or_default() {
            match spread_constraint(&c, labels) {
                Ok(c) => spread.push(c),
                Err(e) => {
                    invalid.get_or_insert(e);
                }
            }
        }
        let controller = metadata
            .owner_references
            .iter()
            .find(|r| r.controller == Some(true))
            .map(|r| (r.kind.clone(), r.name.clone()));
        let scheduled_condition = status
            .conditions
            .unwrap_or_default()
            .into_iter()
            .find(|c| c.kind == "PodScheduled")
            .map(|c| {
                (
                    c.status,
                    c.reason.unwrap_or_default(),
                    c.message.unwrap_or_default(),
                )
            });
        PodSpec {
            node_name: spec.node_name.unwrap_or_default(),
            scheduler_name: spec.scheduler_name.unwrap_or_default(),
            priority: spec.priority.unwrap_or(0),
            never_preempts: spec.preemption_policy.as_deref() == Some("Never"),
            requests: PodRequests::of(&containers, &init_requests, &overhead),
            host_ports,
            tolerations: spec.tolerations.unwrap_or_default(),
            required_node_affinity,
            preferred_node_terms,
            affinity,
            spread,
            gated: spec.scheduling_gates.is_some_and(|g| !g.is_empty()),
            deleting: metadata.deletion_timestamp.is_some(),
            terminal: matches!(status.phase.as_deref(), Some("Succeeded" | "Failed")),
            controller,
            scheduled_condition,
            invalid,
        }
    }

    #[cfg(test)]
    /// Whether this scheduler is the pod's (`default-scheduler`, or none named).
    pub fn is_ours(&self) -> bool {
        self.scheduler_name.is_empty() || self.scheduler_name == DEFAULT_SCHEDULER
    }

    /// Whether `other` differs in anything scheduling reads (kube-scheduler requeues an
    /// unschedulable pod whose spec changed, not one whose status did).
    pub fn same_for_scheduling(&self, other: &PodSpec) -> bool {
        PodSpec {
            scheduled_condition: None,
            ..self.clone()
        } == PodSpec {
            scheduled_condition: None,
            ..other.clone()
        }
    }

    /// The pod's inter-pod affinity, or an empty one.
    pub fn pod_affinity(&self) -> &PodAffinity {
        static NONE: PodAffinity = PodAffinity {
            required_affinity: Vec::new(),
            required_anti_affinity: Vec::new(),
            preferred_affinity: Vec::new(),
            preferred_anti_affinity: Vec::new(),
        };
        self.affinity.as_deref().unwrap_or(&NONE)
    }
}

/// A constraint as `filterTopologySpreadConstraints` reads it: `matchLabelKeys` of the pod's
/// own labels join the selector; the node inclusion policies default to Honor (affinity) and
/// Ignore (taints); `minDomains` to 1.
fn spread_constraint(
    raw: &RawSpreadConstraint,
    labels: &Labels,
) -> Result<SpreadConstraint, String> {
    let mut selector = label_selector(raw.label_selector.as_ref())?;
    if let Some(selector) = selector.as_mut() {
        for key in raw.match_label_keys.iter().flatten() {
            if let Some(v) = labels.get(key) {
                selector
                    .requirements
                    .push(LabelRequirement::In(key.clone(), vec![v.to_string()]));
            }
        }
    }
    Ok(SpreadConstraint {
        max_skew: raw.max_skew,
        topology_key: raw.topology_key.clone(),
        when_unsatisfiable: if raw.when_unsatisfiable == "ScheduleAnyway" {
            Unsatisfiable::ScheduleAnyway
        } else {
            Unsatisfiable::DoNotSchedule
        },
        selector,
        min_domains: raw.min_domains.unwrap_or(1),
        honor_node_affinity: raw.node_affinity_policy.as_deref() != Some("Ignore"),
        honor_node_taints: raw.node_taints_policy.as_deref() == Some("Honor"),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::controllers::scheduler::testing::pod;
    use serde_json::json;

    #[test]
    fn a_pod_is_read_once_into_what_scheduling_needs() {
        let p = pod(
            "p",
            "500m",
            json!({
                "metadata": {"labels": {"app": "web"},
                             "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet",
                                                  "name": "web-1", "uid": "u", "controller": true}]},
                "spec": {
                    "priority": 10,
                    "preemptionPolicy": "Never",
                    "nodeSelector": {"disk": "ssd"},
                    "tolerations": [{"key": "k", "operator": "Exists", "effect": "NoSchedule"}],
                    "containers": [{"name": "c", "image": "i",
                                    "resources": {"limits": {"cpu": "1", "memory": "1Gi"},
                                                  "requests": {"cpu": "500m"}},
                                    "ports": [{"containerPort": 80, "hostPort": 8080},
                                              {"containerPort": 81}]}],
                    "affinity": {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
                        {"labelSelector": {"matchLabels": {"app": "web"}},
                         "topologyKey": "kubernetes.io/hostname"}]}},
                    "topologySpreadConstraints": [{"maxSkew": 1, "topologyKey": "zone",
                        "whenUnsatisfiable": "DoNotSchedule",
                        "labelSelector": {"matchLabels": {"app": "web"}}}],
                    "schedulingGates": [{"name": "g"}],
                },
                "status": {"conditions": [{"type": "PodScheduled", "status": "False",
                                           "reason": "Unschedulable", "message": "m"}]},
            }),
        );
        let s = &p.spec;
        assert_eq!(s.priority, 10);
        assert!(s.never_preempts);
        // The request wins over the limit; the limit stands in for the missing memory request.
        assert_eq!(s.requests.resources.milli_cpu, 500);
        assert_eq!(s.requests.resources.memory, 1 << 30);
        assert_eq!(
            s.host_ports,
            [HostPort {
                ip: "0.0.0.0".into(),
                protocol: "TCP".into(),
                port: 8080
            }]
        );
        assert_eq!(
            s.required_node_affinity.node_selector,
            [("disk".to_string(), "ssd".to_string())]
        );
        assert_eq!(s.tolerations.len(), 1);
        assert_eq!(s.pod_affinity().required_anti_affinity.len(), 1);
        assert_eq!(s.spread.len(), 1);
        assert_eq!(s.spread[0].min_domains, 1);
        assert!(s.spread[0].honor_node_affinity && !s.spread[0].honor_node_taints);
        assert!(s.gated);
        assert_eq!(
            s.controller,
            Some(("ReplicaSet".to_string(), "web-1".to_string()))
        );
        assert_eq!(
            s.scheduled_condition,
            Some(("False".into(), "Unschedulable".into(), "m".into()))
        );
        assert!(s.is_ours());
        assert!(s.invalid.is_none());
    }

    #[test]
    fn a_selector_that_does_not_parse_marks_the_pod_invalid() {
        let p = pod(
            "p",
            "1",
            json!({"spec": {"topologySpreadConstraints": [{"maxSkew": 1, "topologyKey": "zone",
                "whenUnsatisfiable": "DoNotSchedule",
                "labelSelector": {"matchExpressions": [{"key": "a", "operator": "Near"}]}}]}}),
        );
        assert!(p.spec.invalid.is_some());
        let wrong_type = pod("q", "1", json!({"spec": {"priority": "high"}}));
        assert!(wrong_type.spec.invalid.is_some());
    }
}
