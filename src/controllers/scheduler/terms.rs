//! The matching rules the filters and scores share, parsed once per pod or node:
//! - node selectors (`nodeSelector`, `nodeSelectorTerms` with `matchExpressions` including
//!   `Gt`/`Lt`, and `matchFields` on `metadata.name`), as component-helpers' `nodeaffinity`;
//! - taints and tolerations (`Toleration.ToleratesTaint`, `FindMatchingUntoleratedTaint`);
//! - inter-pod affinity terms (label selector, namespaces or namespace selector, topology key),
//!   as kube-scheduler's `framework.AffinityTerm`.

use serde::Deserialize;
use serde_json::Value;

use crate::controllers::objects::label_selector;
use crate::kube::labels::Labels;
use crate::kube::selectors::{LabelRequirement, LabelSelector};

/// A `NodeSelectorRequirement` as the API sends it.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct RawRequirement {
    pub key: String,
    pub operator: String,
    pub values: Vec<String>,
}

/// A `NodeSelectorTerm` as the API sends it.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct RawNodeSelectorTerm {
    pub match_expressions: Vec<RawRequirement>,
    pub match_fields: Vec<RawRequirement>,
}

/// One requirement on a node's labels.
#[derive(Debug, Clone, PartialEq, Eq)]
enum NodeRequirement {
    In(String, Vec<String>),
    NotIn(String, Vec<String>),
    Exists(String),
    DoesNotExist(String),
    Gt(String, i64),
    Lt(String, i64),
}

impl NodeRequirement {
    fn parse(raw: &RawRequirement) -> Option<NodeRequirement> {
        let key = raw.key.clone();
        let number = || match raw.values.as_slice() {
            [one] => one.parse::<i64>().ok(),
            _ => None,
        };
        Some(match raw.operator.as_str() {
            "In" if !raw.values.is_empty() => NodeRequirement::In(key, raw.values.clone()),
            "NotIn" if !raw.values.is_empty() => NodeRequirement::NotIn(key, raw.values.clone()),
            "Exists" if raw.values.is_empty() => NodeRequirement::Exists(key),
            "DoesNotExist" if raw.values.is_empty() => NodeRequirement::DoesNotExist(key),
            "Gt" => NodeRequirement::Gt(key, number()?),
            "Lt" => NodeRequirement::Lt(key, number()?),
            _ => return None,
        })
    }

    fn matches(&self, labels: &Labels) -> bool {
        let int = |k: &str| labels.get(k).and_then(|v| v.parse::<i64>().ok());
        match self {
            NodeRequirement::In(k, vs) => labels.get(k).is_some_and(|v| vs.iter().any(|x| x == v)),
            NodeRequirement::NotIn(k, vs) => {
                labels.get(k).is_none_or(|v| !vs.iter().any(|x| x == v))
            }
            NodeRequirement::Exists(k) => labels.contains_key(k),
            NodeRequirement::DoesNotExist(k) => !labels.contains_key(k),
            NodeRequirement::Gt(k, n) => int(k).is_some_and(|v| v > *n),
            NodeRequirement::Lt(k, n) => int(k).is_some_and(|v| v < *n),
        }
    }
}

/// A requirement on a node's fields: only `metadata.name` has a value (others read as "").
#[derive(Debug, Clone, PartialEq, Eq)]
struct FieldRequirement {
    key: String,
    value: String,
    equal: bool,
}

impl FieldRequirement {
    fn parse(raw: &RawRequirement) -> Option<FieldRequirement> {
        let [value] = raw.values.as_slice() else {
            return None;
        };
        let equal = match raw.operator.as_str() {
            "In" => true,
            "NotIn" => false,
            _ => return None,
        };
        Some(FieldRequirement {
            key: raw.key.clone(),
            value: value.clone(),
            equal,
        })
    }

    fn matches(&self, node_name: &str) -> bool {
        let field = if self.key == "metadata.name" {
            node_name
        } else {
            ""
        };
        (field == self.value) == self.equal
    }
}

/// A parsed, non-empty `NodeSelectorTerm`: every expression and every field requirement must
/// hold.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeSelectorTerm {
    expressions: Vec<NodeRequirement>,
    fields: Vec<FieldRequirement>,
}

impl NodeSelectorTerm {
    /// `None` for an empty term (it selects nothing) or one with an invalid requirement
    /// (kube-scheduler skips those terms and logs the error).
    pub fn parse(raw: &RawNodeSelectorTerm) -> Option<NodeSelectorTerm> {
        if raw.match_expressions.is_empty() && raw.match_fields.is_empty() {
            return None;
        }
        Some(NodeSelectorTerm {
            expressions: raw
                .match_expressions
                .iter()
                .map(NodeRequirement::parse)
                .collect::<Option<_>>()?,
            fields: raw
                .match_fields
                .iter()
                .map(FieldRequirement::parse)
                .collect::<Option<_>>()?,
        })
    }

    pub fn matches(&self, node_name: &str, labels: &Labels) -> bool {
        self.expressions.iter().all(|r| r.matches(labels))
            && self.fields.iter().all(|r| r.matches(node_name))
    }
}

/// What a pod requires of its node: `spec.nodeSelector` and the required node affinity
/// (`GetRequiredNodeAffinity`). A required affinity whose terms are all empty or invalid
/// matches no node.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RequiredNodeAffinity {
    pub node_selector: Vec<(String, String)>,
    /// `None` without a required node affinity.
    pub terms: Option<Vec<NodeSelectorTerm>>,
}

impl RequiredNodeAffinity {
    pub fn is_empty(&self) -> bool {
        self.node_selector.is_empty() && self.terms.is_none()
    }

    pub fn matches(&self, node_name: &str, labels: &Labels) -> bool {
        self.node_selector
            .iter()
            .all(|(k, v)| labels.get(k) == Some(v.as_str()))
            && self
                .terms
                .as_ref()
                .is_none_or(|terms| terms.iter().any(|t| t.matches(node_name, labels)))
    }
}

/// A `NodeSelectorTerm` a pod prefers, with its weight.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PreferredNodeTerm {
    pub weight: i64,
    pub term: NodeSelectorTerm,
}

/// A node taint.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(default)]
pub struct Taint {
    pub key: String,
    pub value: String,
    pub effect: String,
}

/// A pod toleration.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(default)]
pub struct Toleration {
    pub key: String,
    pub operator: String,
    pub value: String,
    pub effect: String,
}

impl Toleration {
    /// `Toleration.ToleratesTaint`: an empty effect or key matches any; the empty operator is
    /// `Equal`.
    pub fn tolerates(&self, taint: &Taint) -> bool {
        if !self.effect.is_empty() && self.effect != taint.effect {
            return false;
        }
        if !self.key.is_empty() && self.key != taint.key {
            return false;
        }
        match self.operator.as_str() {
            "" | "Equal" => self.value == taint.value,
            "Exists" => true,
            _ => false,
        }
    }
}

/// Whether some toleration tolerates `taint`.
pub fn tolerated(tolerations: &[Toleration], taint: &Taint) -> bool {
    tolerations.iter().any(|t| t.tolerates(taint))
}

/// The first of `taints` that `keep` selects and no toleration tolerates.
pub fn first_untolerated<'a>(
    taints: &'a [Taint],
    tolerations: &[Toleration],
    keep: impl Fn(&Taint) -> bool,
) -> Option<&'a Taint> {
    taints
        .iter()
        .find(|t| keep(t) && !tolerated(tolerations, t))
}

/// A `PodAffinityTerm` as the API sends it.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct RawAffinityTerm {
    pub label_selector: Option<Value>,
    pub namespaces: Vec<String>,
    pub topology_key: String,
    pub namespace_selector: Option<Value>,
    pub match_label_keys: Vec<String>,
    pub mismatch_label_keys: Vec<String>,
}

/// An inter-pod (anti-)affinity term, resolved against the pod that carries it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AffinityTerm {
    /// The namespaces named, or the carrier's own when neither names nor a selector are given.
    pub namespaces: Vec<String>,
    /// `None`: no namespace selector (matches no namespace by labels).
    pub namespace_selector: Option<LabelSelector>,
    /// `None`: no label selector (matches no pod).
    pub selector: Option<LabelSelector>,
    pub topology_key: String,
    /// The term's weight (preferred terms; 0 for required ones).
    pub weight: i64,
}

impl AffinityTerm {
    /// The term of a pod in `namespace` with `labels`; `matchLabelKeys` (`mismatchLabelKeys`)
    /// become `key in (value)` (`key notin (value)`) of the carrier's own labels, as
    /// kube-apiserver merges them. An unparsable selector is an error.
    pub fn parse(
        raw: &RawAffinityTerm,
        namespace: &str,
        labels: &Labels,
        weight: i64,
    ) -> Result<AffinityTerm, String> {
        let mut selector = label_selector(raw.label_selector.as_ref())?;
        if let Some(selector) = selector.as_mut() {
            for key in &raw.match_label_keys {
                if let Some(v) = labels.get(key) {
                    selector
                        .requirements
                        .push(LabelRequirement::In(key.clone(), vec![v.to_string()]));
                }
            }
            for key in &raw.mismatch_label_keys {
                if let Some(v) = labels.get(key) {
                    selector
                        .requirements
                        .push(LabelRequirement::NotIn(key.clone(), vec![v.to_string()]));
                }
            }
        }
        let namespace_selector = label_selector(raw.namespace_selector.as_ref())?;
        let namespaces = if raw.namespaces.is_empty() && namespace_selector.is_none() {
            vec![namespace.to_string()]
        } else {
            raw.namespaces.clone()
        };
        Ok(AffinityTerm {
            namespaces,
            namespace_selector,
            selector,
            topology_key: raw.topology_key.clone(),
            weight,
        })
    }

    /// Whether a pod in `namespace` with `labels` matches (`AffinityTerm.Matches`);
    /// `namespace_labels` are its namespace's labels, when known.
    pub fn matches(
        &self,
        namespace: &str,
        labels: &Labels,
        namespace_labels: Option<&Labels>,
    ) -> bool {
        let in_namespace = self.namespaces.iter().any(|n| n == namespace)
            || self
                .namespace_selector
                .as_ref()
                .zip(namespace_labels)
                .is_some_and(|(s, l)| s.matches(l));
        in_namespace && self.selector.as_ref().is_some_and(|s| s.matches(labels))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn labels(pairs: &[(&str, &str)]) -> Labels {
        pairs.iter().copied().collect()
    }

    fn term(value: Value) -> Option<NodeSelectorTerm> {
        NodeSelectorTerm::parse(&serde_json::from_value(value).unwrap())
    }

    #[test]
    fn node_selector_terms_match_as_nodeaffinity_does() {
        let node = labels(&[("zone", "a"), ("gen", "5"), ("disk", "ssd")]);
        let cases = [
            (
                json!({"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a", "b"]}]}),
                Some(true),
            ),
            (
                json!({"matchExpressions": [{"key": "zone", "operator": "In", "values": ["b"]}]}),
                Some(false),
            ),
            (
                json!({"matchExpressions": [{"key": "zone", "operator": "NotIn", "values": ["b"]}]}),
                Some(true),
            ),
            (
                json!({"matchExpressions": [{"key": "rack", "operator": "NotIn", "values": ["b"]}]}),
                Some(true),
            ),
            (
                json!({"matchExpressions": [{"key": "disk", "operator": "Exists"}]}),
                Some(true),
            ),
            (
                json!({"matchExpressions": [{"key": "disk", "operator": "DoesNotExist"}]}),
                Some(false),
            ),
            (
                json!({"matchExpressions": [{"key": "gen", "operator": "Gt", "values": ["4"]}]}),
                Some(true),
            ),
            (
                json!({"matchExpressions": [{"key": "gen", "operator": "Lt", "values": ["4"]}]}),
                Some(false),
            ),
            (
                json!({"matchExpressions": [{"key": "zone", "operator": "Gt", "values": ["4"]}]}),
                Some(false),
            ),
            (
                json!({"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n1"]}]}),
                Some(true),
            ),
            (
                json!({"matchFields": [{"key": "metadata.name", "operator": "NotIn", "values": ["n1"]}]}),
                Some(false),
            ),
            (
                json!({"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}],
                    "matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n2"]}]}),
                Some(false),
            ),
            // Empty and invalid terms select nothing.
            (json!({}), None),
            (
                json!({"matchExpressions": [{"key": "zone", "operator": "In", "values": []}]}),
                None,
            ),
            (
                json!({"matchExpressions": [{"key": "gen", "operator": "Gt", "values": ["x"]}]}),
                None,
            ),
            (
                json!({"matchExpressions": [{"key": "disk", "operator": "Exists", "values": ["x"]}]}),
                None,
            ),
            (
                json!({"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["a", "b"]}]}),
                None,
            ),
            (
                json!({"matchFields": [{"key": "metadata.name", "operator": "Exists"}]}),
                None,
            ),
            (
                json!({"matchExpressions": [{"key": "zone", "operator": "Equals", "values": ["a"]}]}),
                None,
            ),
        ];
        for (raw, want) in cases {
            let got = term(raw.clone()).map(|t| t.matches("n1", &node));
            assert_eq!(got, want, "{raw}");
        }
    }

    #[test]
    fn required_affinity_is_the_node_selector_and_any_term() {
        let node = labels(&[("zone", "a")]);
        let zone = |z: &str| {
            term(json!({"matchExpressions": [{"key": "zone", "operator": "In", "values": [z]}]}))
                .unwrap()
        };
        let cases = [
            (RequiredNodeAffinity::default(), true),
            (
                RequiredNodeAffinity {
                    node_selector: vec![("zone".into(), "a".into())],
                    terms: None,
                },
                true,
            ),
            (
                RequiredNodeAffinity {
                    node_selector: vec![("zone".into(), "b".into())],
                    terms: None,
                },
                false,
            ),
            (
                RequiredNodeAffinity {
                    node_selector: vec![],
                    terms: Some(vec![zone("b"), zone("a")]),
                },
                true,
            ),
            (
                RequiredNodeAffinity {
                    node_selector: vec![("zone".into(), "a".into())],
                    terms: Some(vec![zone("b")]),
                },
                false,
            ),
            // A required affinity left with no usable term matches nothing.
            (
                RequiredNodeAffinity {
                    node_selector: vec![],
                    terms: Some(vec![]),
                },
                false,
            ),
        ];
        for (affinity, want) in cases {
            assert_eq!(affinity.matches("n1", &node), want, "{affinity:?}");
        }
    }

    #[test]
    fn tolerations_tolerate_as_upstream() {
        let taint = Taint {
            key: "k".into(),
            value: "v".into(),
            effect: "NoSchedule".into(),
        };
        let t = |key: &str, op: &str, value: &str, effect: &str| Toleration {
            key: key.into(),
            operator: op.into(),
            value: value.into(),
            effect: effect.into(),
        };
        let cases = [
            (t("k", "Equal", "v", "NoSchedule"), true),
            (t("k", "", "v", ""), true),
            (t("k", "Equal", "w", "NoSchedule"), false),
            (t("k", "Exists", "", ""), true),
            (t("", "Exists", "", ""), true),
            (t("", "Exists", "", "NoExecute"), false),
            (t("other", "Exists", "", ""), false),
            (t("k", "Lt", "v", ""), false),
        ];
        for (toleration, want) in cases {
            assert_eq!(toleration.tolerates(&taint), want, "{toleration:?}");
        }
        let taints = vec![
            Taint {
                key: "soft".into(),
                value: String::new(),
                effect: "PreferNoSchedule".into(),
            },
            taint.clone(),
        ];
        let hard = |t: &Taint| t.effect == "NoSchedule" || t.effect == "NoExecute";
        assert_eq!(first_untolerated(&taints, &[], hard), Some(&taint));
        assert_eq!(
            first_untolerated(&taints, &[t("k", "Exists", "", "")], hard),
            None
        );
    }

    #[test]
    fn affinity_terms_resolve_namespaces_and_label_keys() {
        let carrier = labels(&[("app", "web"), ("rev", "7")]);
        let raw = |v: Value| -> RawAffinityTerm { serde_json::from_value(v).unwrap() };
        let own = AffinityTerm::parse(
            &raw(json!({"labelSelector": {"matchLabels": {"app": "web"}},
                        "topologyKey": "zone", "matchLabelKeys": ["rev"]})),
            "ns",
            &carrier,
            0,
        )
        .unwrap();
        assert_eq!(own.namespaces, ["ns"]);
        assert!(own.matches("ns", &labels(&[("app", "web"), ("rev", "7")]), None));
        assert!(!own.matches("ns", &labels(&[("app", "web"), ("rev", "6")]), None));
        assert!(!own.matches("other", &carrier, None));
        let anywhere = AffinityTerm::parse(
            &raw(json!({"labelSelector": {}, "namespaceSelector": {}, "topologyKey": "zone"})),
            "ns",
            &carrier,
            0,
        )
        .unwrap();
        assert!(anywhere.namespaces.is_empty());
        assert!(anywhere.matches("other", &labels(&[]), Some(&labels(&[]))));
        let no_selector =
            AffinityTerm::parse(&raw(json!({"topologyKey": "zone"})), "ns", &carrier, 0).unwrap();
        assert!(!no_selector.matches("ns", &carrier, None));
        assert!(AffinityTerm::parse(
            &raw(
                json!({"labelSelector": {"matchExpressions": [{"key": "a", "operator": "Near"}]}})
            ),
            "ns",
            &carrier,
            0
        )
        .is_err());
    }
}
