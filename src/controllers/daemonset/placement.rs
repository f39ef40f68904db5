//! Where a DaemonSet's pods go, as upstream's `NodeShouldRunDaemonPod` and the daemon `util`
//! package decide it:
//! - a node is eligible when the template's `nodeName` (if any) is that node, the template's
//!   `nodeSelector` and required node affinity match it, and the pod tolerates every
//!   `NoSchedule` and `NoExecute` taint it has; a pod already there may stay on a node that is
//!   no longer eligible only because of a `NoSchedule` taint ([`Fit::Stay`]);
//! - the pod always tolerates what the control plane puts on troubled nodes (upstream's
//!   `AddOrUpdateDaemonPodTolerations`): `not-ready` and `unreachable` `NoExecute` (for ever,
//!   so taint-based eviction never removes a daemon pod), `disk-pressure`, `memory-pressure`,
//!   `pid-pressure` and `unschedulable` `NoSchedule`, and `network-unavailable` `NoSchedule`
//!   for `hostNetwork` pods;
//! - a new pod is created unbound, with a required node affinity on `metadata.name` naming its
//!   node in place of the template's required terms (`ReplaceDaemonSetPodNodeNameNodeAffinity`),
//!   and the scheduler binds it; its node is read back from that term while it is unbound
//!   (`GetTargetNodeName`).

use serde::Deserialize;
use serde_json::{json, Map, Value};

use crate::controllers::scheduler::terms::{
    NodeSelectorTerm, RawNodeSelectorTerm, RequiredNodeAffinity,
};
use crate::controllers::taints::{self, keys, Effect, Taint, Toleration};
use crate::kube::labels::Labels;
use crate::kube::object::StoredObject;

/// The tolerations every daemon pod gets: (key, effect).
const DAEMON_TOLERATIONS: [(&str, &str); 6] = [
    (keys::NOT_READY, "NoExecute"),
    (keys::UNREACHABLE, "NoExecute"),
    (keys::DISK_PRESSURE, "NoSchedule"),
    (keys::MEMORY_PRESSURE, "NoSchedule"),
    (keys::PID_PRESSURE, "NoSchedule"),
    (keys::UNSCHEDULABLE, "NoSchedule"),
];

/// What the controller reads of a node.
#[derive(Debug, Clone)]
pub struct NodeFacts {
    pub name: String,
    pub labels: Labels,
    pub taints: Vec<Taint>,
}

impl NodeFacts {
    /// Reads the node's name, labels and `spec.taints` (only the spec is parsed).
    pub fn of(node: &StoredObject) -> NodeFacts {
        #[derive(Deserialize)]
        struct Partial {
            #[serde(default)]
            spec: Value,
        }
        let spec = serde_json::from_slice::<Partial>(&node.json)
            .map(|p| p.spec)
            .unwrap_or(Value::Null);
        NodeFacts {
            name: node.key.name.clone(),
            labels: node.labels.clone(),
            taints: taints::node_taints(&json!({ "spec": spec })),
        }
    }
}

/// Whether a daemon pod belongs on a node.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fit {
    /// Should run there (`shouldRun`, and so `shouldContinueRunning`).
    Run,
    /// No new pod, but one already there stays: only a `NoSchedule` taint is not tolerated.
    Stay,
    /// No pod there (a pod that is there is deleted).
    No,
}

impl Fit {
    pub fn should_run(self) -> bool {
        self == Fit::Run
    }

    pub fn should_continue(self) -> bool {
        self != Fit::No
    }
}

/// The template's placement rules, read once per reconcile.
#[derive(Debug, Clone)]
pub struct Placement {
    /// The template's `spec.nodeName`, empty when unset.
    node_name: String,
    affinity: RequiredNodeAffinity,
    /// The template's tolerations plus the daemon ones.
    tolerations: Vec<Toleration>,
}

impl Placement {
    /// Reads the rules of `template` (a pod template spec's parent: `{metadata, spec}`).
    pub fn of(template: &Value) -> Placement {
        let spec = template.get("spec").cloned().unwrap_or_else(|| json!({}));
        let with_daemon = json!({ "spec": daemon_spec(&spec) });
        Placement {
            node_name: spec
                .get("nodeName")
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_string(),
            affinity: required_affinity(&spec),
            tolerations: taints::pod_tolerations(&with_daemon),
        }
    }

    /// Upstream's `NodeShouldRunDaemonPod`.
    pub fn fit(&self, node: &NodeFacts) -> Fit {
        if !self.node_name.is_empty() && self.node_name != node.name {
            return Fit::No;
        }
        if !self.affinity.matches(&node.name, &node.labels) {
            return Fit::No;
        }
        let untolerated = |effects: &[Effect]| {
            node.taints
                .iter()
                .any(|t| effects.contains(&t.effect) && !taints::tolerated(&self.tolerations, t))
        };
        if !untolerated(&[Effect::NoSchedule, Effect::NoExecute]) {
            Fit::Run
        } else if untolerated(&[Effect::NoExecute]) {
            Fit::No
        } else {
            Fit::Stay
        }
    }
}

/// `nodeSelector` and the required node affinity of a pod spec.
fn required_affinity(spec: &Value) -> RequiredNodeAffinity {
    let node_selector = spec
        .get("nodeSelector")
        .and_then(Value::as_object)
        .map(|m| {
            m.iter()
                .filter_map(|(k, v)| v.as_str().map(|v| (k.clone(), v.to_string())))
                .collect()
        })
        .unwrap_or_default();
    let terms = spec
        .pointer("/affinity/nodeAffinity/requiredDuringSchedulingIgnoredDuringExecution")
        .filter(|r| !r.is_null())
        .map(|required| {
            required
                .get("nodeSelectorTerms")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .filter_map(|t| serde_json::from_value::<RawNodeSelectorTerm>(t.clone()).ok())
                .filter_map(|t| NodeSelectorTerm::parse(&t))
                .collect()
        });
    RequiredNodeAffinity {
        node_selector,
        terms,
    }
}

/// The pod spec with the daemon tolerations added or put right (upstream's
/// `AddOrUpdateTolerationInPodSpec`: a toleration of the same key, operator, value and effect
/// is replaced by the daemon one, which has no `tolerationSeconds`; others are kept first).
pub fn daemon_spec(spec: &Value) -> Value {
    let mut spec = spec.clone();
    let Some(map) = spec.as_object_mut() else {
        return spec;
    };
    let host_network = map.get("hostNetwork").and_then(Value::as_bool) == Some(true);
    let mut list: Vec<Value> = map
        .get("tolerations")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let network = host_network.then_some((keys::NETWORK_UNAVAILABLE, "NoSchedule"));
    for (key, effect) in DAEMON_TOLERATIONS.into_iter().chain(network) {
        let wanted = json!({"key": key, "operator": "Exists", "effect": effect});
        let same = |t: &Value| {
            let text = |f: &str| t.get(f).and_then(Value::as_str).unwrap_or("");
            text("key") == key
                && text("operator") == "Exists"
                && text("value").is_empty()
                && text("effect") == effect
        };
        match list.iter_mut().find(|t| same(t)) {
            Some(existing) => *existing = wanted,
            None => list.push(wanted),
        }
    }
    map.insert("tolerations".into(), Value::Array(list));
    spec
}

/// The template of the pod for `node`: the daemon tolerations and a required node affinity
/// naming the node in place of the template's required terms.
pub fn pod_template_for(template: &Value, node: &str) -> Value {
    let mut template = template.clone();
    let spec = daemon_spec(template.get("spec").unwrap_or(&json!({})));
    template["spec"] = spec;
    if let Some(spec) = template["spec"].as_object_mut() {
        replace_node_affinity(spec, node);
    }
    template
}

fn replace_node_affinity(spec: &mut Map<String, Value>, node: &str) {
    let term = json!({"matchFields": [
        {"key": "metadata.name", "operator": "In", "values": [node]}]});
    let affinity = spec.entry("affinity").or_insert_with(|| json!({}));
    if !affinity.is_object() {
        *affinity = json!({});
    }
    let node_affinity = affinity
        .as_object_mut()
        .map(|a| a.entry("nodeAffinity").or_insert_with(|| json!({})));
    let Some(node_affinity) = node_affinity else {
        return;
    };
    if !node_affinity.is_object() {
        *node_affinity = json!({});
    }
    let required = &mut node_affinity["requiredDuringSchedulingIgnoredDuringExecution"];
    if required.is_object() {
        required["nodeSelectorTerms"] = json!([term]);
    } else {
        *required = json!({ "nodeSelectorTerms": [term] });
    }
}

/// The node a daemon pod is for: its `spec.nodeName`, or, while unbound, the node its
/// `metadata.name` affinity names (upstream's `GetTargetNodeName`). `None` for a pod that
/// names none.
pub fn target_node(pod: &Value) -> Option<String> {
    if let Some(name) = pod
        .pointer("/spec/nodeName")
        .and_then(Value::as_str)
        .filter(|n| !n.is_empty())
    {
        return Some(name.to_string());
    }
    let terms = pod
        .pointer("/spec/affinity/nodeAffinity/requiredDuringSchedulingIgnoredDuringExecution/nodeSelectorTerms")
        .and_then(Value::as_array)?;
    for term in terms {
        for field in term
            .get("matchFields")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            let text = |f: &str| field.get(f).and_then(Value::as_str);
            if text("key") == Some("metadata.name") && text("operator") == Some("In") {
                return match field.get("values").and_then(Value::as_array) {
                    Some(values) if values.len() == 1 => values[0].as_str().map(str::to_string),
                    _ => None,
                };
            }
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(name: &str, labels: &[(&str, &str)], taints: Value) -> NodeFacts {
        NodeFacts {
            name: name.into(),
            labels: labels
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            taints: taints::node_taints(&json!({"spec": {"taints": taints}})),
        }
    }

    fn template(spec: Value) -> Value {
        json!({"metadata": {"labels": {"app": "d"}}, "spec": spec})
    }

    #[test]
    fn selectors_affinity_and_node_name_choose_nodes() {
        let plain = Placement::of(&template(json!({"containers": []})));
        assert_eq!(plain.fit(&node("n1", &[], json!([]))), Fit::Run);

        let selected = Placement::of(&template(json!({"nodeSelector": {"disk": "ssd"}})));
        assert_eq!(
            selected.fit(&node("n1", &[("disk", "ssd")], json!([]))),
            Fit::Run
        );
        assert_eq!(
            selected.fit(&node("n2", &[("disk", "hdd")], json!([]))),
            Fit::No
        );

        let affinity = Placement::of(&template(json!({"affinity": {"nodeAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
            {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a", "b"]}]},
            {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n9"]}]},
        ]}}}})));
        assert_eq!(
            affinity.fit(&node("n1", &[("zone", "b")], json!([]))),
            Fit::Run
        );
        assert_eq!(affinity.fit(&node("n9", &[], json!([]))), Fit::Run);
        assert_eq!(
            affinity.fit(&node("n2", &[("zone", "c")], json!([]))),
            Fit::No
        );

        let named = Placement::of(&template(json!({"nodeName": "n2"})));
        assert_eq!(named.fit(&node("n1", &[], json!([]))), Fit::No);
        assert_eq!(named.fit(&node("n2", &[], json!([]))), Fit::Run);
    }

    #[test]
    fn taints_keep_new_pods_off_and_only_no_execute_removes_running_ones() {
        let plain = Placement::of(&template(json!({})));
        let no_schedule = node(
            "n1",
            &[],
            json!([{"key": "dedicated", "value": "x", "effect": "NoSchedule"}]),
        );
        assert_eq!(plain.fit(&no_schedule), Fit::Stay);
        let no_execute = node(
            "n1",
            &[],
            json!([{"key": "dedicated", "effect": "NoExecute"}]),
        );
        assert_eq!(plain.fit(&no_execute), Fit::No);
        let prefer = node(
            "n1",
            &[],
            json!([{"key": "dedicated", "effect": "PreferNoSchedule"}]),
        );
        assert_eq!(plain.fit(&prefer), Fit::Run);
        let tolerant = Placement::of(&template(json!({"tolerations": [
            {"key": "dedicated", "operator": "Exists"}]})));
        assert_eq!(tolerant.fit(&no_schedule), Fit::Run);
        assert_eq!(tolerant.fit(&no_execute), Fit::Run);
    }

    #[test]
    fn daemon_pods_tolerate_troubled_nodes() {
        let plain = Placement::of(&template(json!({})));
        for (key, effect) in [
            (keys::NOT_READY, "NoExecute"),
            (keys::UNREACHABLE, "NoExecute"),
            (keys::DISK_PRESSURE, "NoSchedule"),
            (keys::MEMORY_PRESSURE, "NoSchedule"),
            (keys::PID_PRESSURE, "NoSchedule"),
            (keys::UNSCHEDULABLE, "NoSchedule"),
        ] {
            let n = node("n1", &[], json!([{"key": key, "effect": effect}]));
            assert_eq!(plain.fit(&n), Fit::Run, "{key}");
        }
        let network = node(
            "n1",
            &[],
            json!([{"key": keys::NETWORK_UNAVAILABLE, "effect": "NoSchedule"}]),
        );
        assert_eq!(plain.fit(&network), Fit::Stay);
        let host = Placement::of(&template(json!({"hostNetwork": true})));
        assert_eq!(host.fit(&network), Fit::Run);
        // A user's not-ready toleration with a limit is replaced by the unlimited one; other
        // tolerations are kept, first.
        let spec = daemon_spec(&json!({"tolerations": [
            {"key": "a", "operator": "Exists"},
            {"key": keys::NOT_READY, "operator": "Exists", "effect": "NoExecute",
             "tolerationSeconds": 30}]}));
        let list = spec["tolerations"].as_array().unwrap();
        assert_eq!(list.len(), 7);
        assert_eq!(list[0]["key"], "a");
        assert_eq!(
            list[1],
            json!({"key": keys::NOT_READY, "operator": "Exists", "effect": "NoExecute"})
        );
    }

    #[test]
    fn new_pods_name_their_node_in_a_required_affinity() {
        let t = template(json!({"affinity": {"nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
                {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]}]},
            "preferredDuringSchedulingIgnoredDuringExecution": [
                {"weight": 1, "preference": {"matchExpressions": [
                    {"key": "x", "operator": "Exists"}]}}]}}}));
        let pod = pod_template_for(&t, "n2");
        let affinity = &pod["spec"]["affinity"]["nodeAffinity"];
        assert_eq!(
            affinity["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"],
            json!([{"matchFields": [
                {"key": "metadata.name", "operator": "In", "values": ["n2"]}]}])
        );
        assert!(affinity["preferredDuringSchedulingIgnoredDuringExecution"].is_array());
        assert_eq!(target_node(&pod).as_deref(), Some("n2"));
        let bare = pod_template_for(&template(json!({})), "n3");
        assert_eq!(target_node(&bare).as_deref(), Some("n3"));
        let mut bound = bare.clone();
        bound["spec"]["nodeName"] = json!("n1");
        assert_eq!(target_node(&bound).as_deref(), Some("n1"));
        assert_eq!(target_node(&template(json!({}))), None);
    }
}
