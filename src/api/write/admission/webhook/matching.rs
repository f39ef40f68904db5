//! Which webhooks a write is sent to, as kube-apiserver decides: a rule matching the
//! operation, group, version, resource (with its subresource) and scope; the namespace
//! selector on the labels of the object's namespace (of a Namespace, its own labels; a
//! cluster-scoped object of another kind always passes); the object selector on the labels of
//! the new or the old object (either one matching is enough).
//!
//! `matchPolicy: Equivalent` reaches the same resource under another group version; this
//! server serves each resource under one group version only, so Exact and Equivalent match
//! the same requests.

use serde_json::Value;

use super::config::{Hook, Rule};
use crate::kube::labels::Labels;

/// What a request asks, as the rules read it.
#[derive(Debug, Clone)]
pub struct Attributes<'a> {
    /// `CREATE`, `UPDATE`, `DELETE` (`CONNECT` is not a write here).
    pub operation: &'a str,
    pub group: &'a str,
    pub version: &'a str,
    pub resource: &'a str,
    /// "" for the object itself.
    pub subresource: &'a str,
    pub namespaced: bool,
}

fn listed(values: &[String], value: &str) -> bool {
    values.iter().any(|v| v == "*" || v == value)
}

/// Whether `resources` (`pods`, `pods/status`, `*`, `*/status`, `pods/*`, `*/*`) names the
/// resource and subresource.
fn names_resource(resources: &[String], resource: &str, subresource: &str) -> bool {
    resources.iter().any(|r| {
        let (res, sub) = r.split_once('/').unwrap_or((r, ""));
        (res == "*" || res == resource) && (sub == "*" || sub == subresource)
    })
}

impl Rule {
    pub fn matches(&self, a: &Attributes<'_>) -> bool {
        let scope = match self.scope.as_str() {
            "Cluster" => !a.namespaced,
            "Namespaced" => a.namespaced,
            _ => true,
        };
        scope
            && listed(&self.operations, a.operation)
            && listed(&self.api_groups, a.group)
            && listed(&self.api_versions, a.version)
            && names_resource(&self.resources, a.resource, a.subresource)
    }
}

/// The labels of `metadata.labels` of an object.
pub fn labels_of(object: &Value) -> Labels {
    object
        .pointer("/metadata/labels")
        .and_then(Value::as_object)
        .into_iter()
        .flatten()
        .filter_map(|(k, v)| Some((k.as_str(), v.as_str()?)))
        .collect()
}

impl Hook {
    /// Whether the rules name the request.
    pub fn matches_rules(&self, a: &Attributes<'_>) -> bool {
        self.rules.iter().any(|r| r.matches(a))
    }

    /// Whether the object selector picks the new or the old object.
    pub fn matches_object(&self, new: Option<&Value>, old: Option<&Value>) -> bool {
        if self.object_selector.is_empty() {
            return true;
        }
        [new, old]
            .into_iter()
            .flatten()
            .any(|o| self.object_selector.matches(&labels_of(o)))
    }

    /// Whether the namespace selector picks `namespace_labels` (`None`: not namespaced, and
    /// not a Namespace either, so it passes).
    pub fn matches_namespace(&self, namespace_labels: Option<&Labels>) -> bool {
        match namespace_labels {
            None => true,
            Some(labels) => self.namespace_selector.matches(labels),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kube::selectors::LabelSelector;
    use serde_json::json;

    fn rule(resources: &[&str], scope: &str) -> Rule {
        Rule {
            operations: vec!["CREATE".into(), "UPDATE".into()],
            api_groups: vec!["".into()],
            api_versions: vec!["v1".into()],
            resources: resources.iter().map(|s| s.to_string()).collect(),
            scope: scope.into(),
        }
    }

    fn pods(operation: &'static str, subresource: &'static str) -> Attributes<'static> {
        Attributes {
            operation,
            group: "",
            version: "v1",
            resource: "pods",
            subresource,
            namespaced: true,
        }
    }

    #[test]
    fn rules_match_resources_subresources_and_scope() {
        assert!(rule(&["pods"], "*").matches(&pods("CREATE", "")));
        assert!(!rule(&["pods"], "*").matches(&pods("CREATE", "status")));
        assert!(!rule(&["pods"], "*").matches(&pods("DELETE", "")));
        assert!(rule(&["pods/status"], "*").matches(&pods("UPDATE", "status")));
        assert!(rule(&["pods/*"], "*").matches(&pods("UPDATE", "status")));
        assert!(rule(&["*/status"], "*").matches(&pods("UPDATE", "status")));
        assert!(rule(&["*"], "*").matches(&pods("CREATE", "")));
        assert!(!rule(&["*"], "*").matches(&pods("CREATE", "status")));
        assert!(rule(&["*/*"], "Namespaced").matches(&pods("CREATE", "status")));
        assert!(!rule(&["*"], "Cluster").matches(&pods("CREATE", "")));
        let mut other_group = pods("CREATE", "");
        other_group.group = "apps";
        assert!(!rule(&["*"], "*").matches(&other_group));
    }

    #[test]
    fn object_selector_takes_the_new_or_the_old_object() {
        let hook = super::super::config::hooks(
            "c",
            &json!({"webhooks": [{
                "name": "a.b.c", "clientConfig": {"url": "https://x/"}, "sideEffects": "None",
                "objectSelector": {"matchLabels": {"hook": "yes"}}, "namespaceSelector": {"matchExpressions": [{"key": "env", "operator": "In", "values": ["prod"]}]}
            }]}),
        )
        .remove(0);
        let yes = json!({"metadata": {"labels": {"hook": "yes"}}});
        let no = json!({"metadata": {"labels": {"hook": "no"}}});
        assert!(hook.matches_object(Some(&yes), None));
        assert!(hook.matches_object(Some(&no), Some(&yes)));
        assert!(!hook.matches_object(Some(&no), None));
        let prod: Labels = [("env", "prod")].into_iter().collect();
        let dev: Labels = [("env", "dev")].into_iter().collect();
        assert!(hook.matches_namespace(Some(&prod)));
        assert!(!hook.matches_namespace(Some(&dev)));
        assert!(hook.matches_namespace(None));
        assert!(LabelSelector::default().is_empty());
    }
}
