//! One RBAC `PolicyRule` and what it means, as kube-apiserver's RBAC authorizer and escalation
//! check read it (pkg/apis/rbac/v1/evaluation_helpers.go, registry/rbac/validation):
//!
//! - **matching a request** ([`PolicyRule::allows`]): a verb, an API group and a resource
//!   (`*` matches all; `pods/log` is a subresource, `*/scale` every resource's `scale`), and
//!   the object's name when the rule lists `resourceNames`; a non-resource request matches
//!   `nonResourceURLs` (`*` all, `/apis/*` a prefix);
//! - **covering rules** ([`uncovered`]): whether the rules someone holds include every
//!   permission of other rules, each broken down into one verb, group, resource and name (the
//!   escalation check), and the compact text of what is missing.

use serde::{Deserialize, Serialize};

use crate::auth::attributes::RequestInfo;
use crate::auth::messages::go_quote_list;

/// Everything (verbs, groups, resources, URLs).
pub const ALL: &str = "*";

/// One rule of a Role or ClusterRole.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct PolicyRule {
    #[serde(default)]
    pub verbs: Vec<String>,
    #[serde(rename = "apiGroups", default, skip_serializing_if = "Vec::is_empty")]
    pub api_groups: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub resources: Vec<String>,
    #[serde(
        rename = "resourceNames",
        default,
        skip_serializing_if = "Vec::is_empty"
    )]
    pub resource_names: Vec<String>,
    #[serde(
        rename = "nonResourceURLs",
        default,
        skip_serializing_if = "Vec::is_empty"
    )]
    pub non_resource_urls: Vec<String>,
}

fn has(list: &[String], value: &str) -> bool {
    list.iter().any(|v| v == value)
}

fn has_all(list: &[String], values: &[String]) -> bool {
    values.iter().all(|v| has(list, v))
}

impl PolicyRule {
    /// A resource rule (tests and the default policy build rules this way).
    pub fn resource(verbs: &[&str], groups: &[&str], resources: &[&str]) -> PolicyRule {
        let own = |l: &[&str]| l.iter().map(|s| s.to_string()).collect();
        PolicyRule {
            verbs: own(verbs),
            api_groups: own(groups),
            resources: own(resources),
            ..PolicyRule::default()
        }
    }

    /// A non-resource rule.
    pub fn urls(verbs: &[&str], urls: &[&str]) -> PolicyRule {
        let own = |l: &[&str]| l.iter().map(|s| s.to_string()).collect();
        PolicyRule {
            verbs: own(verbs),
            non_resource_urls: own(urls),
            ..PolicyRule::default()
        }
    }

    /// The same rule limited to the objects `names`.
    pub fn named(mut self, names: &[&str]) -> PolicyRule {
        self.resource_names = names.iter().map(|s| s.to_string()).collect();
        self
    }

    fn verb_matches(&self, verb: &str) -> bool {
        self.verbs.iter().any(|v| v == ALL || v == verb)
    }

    fn group_matches(&self, group: &str) -> bool {
        self.api_groups.iter().any(|g| g == ALL || g == group)
    }

    /// Whether a rule's resources name `resource` (`resource/subresource` with a
    /// subresource, `*/subresource` for every resource's), compared without building the
    /// combined name.
    fn resource_matches(&self, resource: &str, subresource: &str) -> bool {
        self.resources.iter().any(|r| {
            r == ALL
                || if subresource.is_empty() {
                    r == resource
                } else {
                    r.strip_suffix(subresource)
                        .and_then(|r| r.strip_suffix('/'))
                        .is_some_and(|head| head == resource || head == ALL)
                }
        })
    }

    fn name_matches(&self, name: &str) -> bool {
        self.resource_names.is_empty() || has(&self.resource_names, name)
    }

    fn url_matches(&self, path: &str) -> bool {
        self.non_resource_urls.iter().any(|u| url_covers(u, path))
    }

    /// Whether this rule allows the request.
    pub fn allows(&self, info: &RequestInfo) -> bool {
        if info.resource_request {
            self.verb_matches(&info.verb)
                && self.group_matches(&info.api_group)
                && self.resource_matches(&info.resource, &info.subresource)
                && self.name_matches(&info.name)
        } else {
            self.verb_matches(&info.verb) && self.url_matches(&info.path)
        }
    }

    /// Rules with one group, resource, verb and name each (or one URL and verb) that
    /// together grant exactly what this rule grants.
    pub fn breakdown(&self) -> Vec<PolicyRule> {
        let mut out = Vec::new();
        for group in &self.api_groups {
            for resource in &self.resources {
                for verb in &self.verbs {
                    let one = PolicyRule {
                        verbs: vec![verb.clone()],
                        api_groups: vec![group.clone()],
                        resources: vec![resource.clone()],
                        ..PolicyRule::default()
                    };
                    if self.resource_names.is_empty() {
                        out.push(one);
                    } else {
                        for name in &self.resource_names {
                            out.push(PolicyRule {
                                resource_names: vec![name.clone()],
                                ..one.clone()
                            });
                        }
                    }
                }
            }
        }
        for url in &self.non_resource_urls {
            for verb in &self.verbs {
                out.push(PolicyRule {
                    verbs: vec![verb.clone()],
                    non_resource_urls: vec![url.clone()],
                    ..PolicyRule::default()
                });
            }
        }
        out
    }

    /// Whether this rule grants everything `sub` (a broken-down rule) grants.
    fn covers(&self, sub: &PolicyRule) -> bool {
        let verbs = has(&self.verbs, ALL) || has_all(&self.verbs, &sub.verbs);
        let groups = has(&self.api_groups, ALL) || has_all(&self.api_groups, &sub.api_groups);
        let resources = resources_cover(&self.resources, &sub.resources);
        let urls = sub
            .non_resource_urls
            .iter()
            .all(|path| self.non_resource_urls.iter().any(|u| url_covers(u, path)));
        let names = if sub.resource_names.is_empty() {
            self.resource_names.is_empty()
        } else {
            self.resource_names.is_empty() || has_all(&self.resource_names, &sub.resource_names)
        };
        verbs && groups && resources && urls && names
    }

    /// The rule as escalation messages print it: `{APIGroups:[""], Resources:["pods"],
    /// Verbs:["get"]}`.
    pub fn compact_string(&self) -> String {
        let mut parts = Vec::new();
        if !self.api_groups.is_empty() {
            parts.push(format!("APIGroups:{}", go_quote_list(&self.api_groups)));
        }
        if !self.resources.is_empty() {
            parts.push(format!("Resources:{}", go_quote_list(&self.resources)));
        }
        if !self.non_resource_urls.is_empty() {
            parts.push(format!(
                "NonResourceURLs:{}",
                go_quote_list(&self.non_resource_urls)
            ));
        }
        if !self.resource_names.is_empty() {
            parts.push(format!(
                "ResourceNames:{}",
                go_quote_list(&self.resource_names)
            ));
        }
        if !self.verbs.is_empty() {
            parts.push(format!("Verbs:{}", go_quote_list(&self.verbs)));
        }
        format!("{{{}}}", parts.join(", "))
    }
}

/// `owner` (a rule's URL) covers the request path or URL `path`: equal, `*`, or a `*`-suffixed
/// prefix of it.
fn url_covers(owner: &str, path: &str) -> bool {
    owner == ALL
        || owner == path
        || (owner.ends_with('*') && path.starts_with(owner.trim_end_matches('*')))
}

fn resources_cover(owner: &[String], wanted: &[String]) -> bool {
    if has(owner, ALL) || has_all(owner, wanted) {
        return true;
    }
    wanted.iter().all(|path| {
        has(owner, path)
            || path
                .split_once('/')
                .is_some_and(|(_, sub)| has(owner, &format!("*/{sub}")))
    })
}

/// The broken-down permissions of `wanted` that no rule of `held` covers (empty: `held`
/// grants everything `wanted` does).
pub fn uncovered(held: &[PolicyRule], wanted: &[PolicyRule]) -> Vec<PolicyRule> {
    wanted
        .iter()
        .flat_map(PolicyRule::breakdown)
        .filter(|sub| !held.iter().any(|owner| owner.covers(sub)))
        .collect()
}

/// Joins broken-down rules that differ only in their verb (one group, one resource, at most
/// one name, nothing else), as kube-apiserver compacts the missing permissions it reports.
pub fn compact(rules: Vec<PolicyRule>) -> Vec<PolicyRule> {
    let mut out: Vec<PolicyRule> = Vec::new();
    let mut simple: Vec<PolicyRule> = Vec::new();
    for rule in rules {
        let is_simple = rule.resource_names.len() <= 1
            && rule.non_resource_urls.is_empty()
            && rule.api_groups.len() == 1
            && rule.resources.len() == 1;
        if !is_simple {
            out.push(rule);
            continue;
        }
        match simple.iter_mut().find(|s| {
            s.api_groups == rule.api_groups
                && s.resources == rule.resources
                && s.resource_names == rule.resource_names
        }) {
            Some(existing) => existing.verbs.extend(rule.verbs),
            None => simple.push(rule),
        }
    }
    out.extend(simple);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::Method;

    fn req(method: Method, url: &str) -> RequestInfo {
        let (path, query) = match url.split_once('?') {
            Some((p, q)) => (p, Some(q)),
            None => (url, None),
        };
        RequestInfo::from_request(&method, path, query)
    }

    #[test]
    fn matching_requests() {
        let get_pods = PolicyRule::resource(&["get", "list"], &[""], &["pods"]);
        assert!(get_pods.allows(&req(Method::GET, "/api/v1/namespaces/a/pods")));
        assert!(get_pods.allows(&req(Method::GET, "/api/v1/namespaces/a/pods/p")));
        assert!(!get_pods.allows(&req(Method::GET, "/api/v1/namespaces/a/pods?watch=1")));
        assert!(!get_pods.allows(&req(Method::GET, "/api/v1/namespaces/a/pods/p/log")));
        assert!(!get_pods.allows(&req(Method::GET, "/apis/apps/v1/namespaces/a/pods")));
        assert!(!get_pods.allows(&req(Method::DELETE, "/api/v1/namespaces/a/pods/p")));

        let logs = PolicyRule::resource(&["get"], &[""], &["pods/log"]);
        assert!(logs.allows(&req(Method::GET, "/api/v1/namespaces/a/pods/p/log")));
        assert!(!logs.allows(&req(Method::GET, "/api/v1/namespaces/a/pods/p")));

        let any_scale = PolicyRule::resource(&["*"], &["*"], &["*/scale"]);
        assert!(any_scale.allows(&req(
            Method::PUT,
            "/apis/apps/v1/namespaces/a/deployments/d/scale"
        )));
        assert!(!any_scale.allows(&req(
            Method::PUT,
            "/apis/apps/v1/namespaces/a/deployments/d"
        )));
        assert!(!any_scale.allows(&req(
            Method::PUT,
            "/apis/apps/v1/namespaces/a/deployments/d/status"
        )));

        let one = PolicyRule::resource(&["get", "update"], &["coordination.k8s.io"], &["leases"])
            .named(&["kube-scheduler"]);
        assert!(one.allows(&req(
            Method::PUT,
            "/apis/coordination.k8s.io/v1/namespaces/kube-system/leases/kube-scheduler"
        )));
        assert!(!one.allows(&req(
            Method::PUT,
            "/apis/coordination.k8s.io/v1/namespaces/kube-system/leases/other"
        )));
        // A list names no object, so a rule limited to names does not allow it…
        assert!(
            !PolicyRule::resource(&["list"], &["coordination.k8s.io"], &["leases"])
                .named(&["x"])
                .allows(&req(
                    Method::GET,
                    "/apis/coordination.k8s.io/v1/namespaces/n/leases"
                ))
        );
        // … unless a field selector pins it to one.
        assert!(PolicyRule::resource(&["list"], &["coordination.k8s.io"], &["leases"])
            .named(&["x"])
            .allows(&req(Method::GET, "/apis/coordination.k8s.io/v1/namespaces/n/leases?fieldSelector=metadata.name%3Dx")));

        let everything = PolicyRule::resource(&["*"], &["*"], &["*"]);
        assert!(everything.allows(&req(
            Method::DELETE,
            "/apis/apps/v1/namespaces/a/deployments"
        )));
        assert!(
            !everything.allows(&req(Method::GET, "/api")),
            "resource rules match no path"
        );
    }

    #[test]
    fn matching_paths() {
        let discovery = PolicyRule::urls(&["get"], &["/api", "/api/*", "/version"]);
        assert!(discovery.allows(&req(Method::GET, "/api")));
        assert!(discovery.allows(&req(Method::GET, "/api/v1")));
        assert!(discovery.allows(&req(Method::GET, "/version")));
        assert!(!discovery.allows(&req(Method::GET, "/version/")));
        assert!(!discovery.allows(&req(Method::GET, "/apis")));
        assert!(!discovery.allows(&req(Method::POST, "/api")));
        assert!(
            !discovery.allows(&req(Method::GET, "/api/v1/pods")),
            "paths match no resource"
        );
        assert!(PolicyRule::urls(&["*"], &["*"]).allows(&req(Method::PUT, "/anything")));
    }

    #[test]
    fn covering_rules() {
        let held = vec![
            PolicyRule::resource(&["get", "list"], &[""], &["pods", "*/status"]),
            PolicyRule::resource(&["*"], &["apps"], &["deployments"]),
            PolicyRule::urls(&["get"], &["/apis/*"]),
        ];
        let fine = vec![
            PolicyRule::resource(&["get"], &[""], &["pods", "pods/status"]),
            PolicyRule::resource(&["delete", "patch"], &["apps"], &["deployments"]).named(&["d"]),
            PolicyRule::urls(&["get"], &["/apis/apps"]),
        ];
        assert!(uncovered(&held, &fine).is_empty());
        let more = vec![
            PolicyRule::resource(
                &["get", "delete", "deletecollection"],
                &[""],
                &["pods", "secrets"],
            ),
            PolicyRule::urls(&["get"], &["/api"]),
        ];
        let missing = compact(uncovered(&held, &more));
        let mut texts: Vec<String> = missing.iter().map(PolicyRule::compact_string).collect();
        texts.sort();
        assert_eq!(
            texts,
            [
                r#"{APIGroups:[""], Resources:["pods"], Verbs:["delete" "deletecollection"]}"#,
                r#"{APIGroups:[""], Resources:["secrets"], Verbs:["get" "delete" "deletecollection"]}"#,
                r#"{NonResourceURLs:["/api"], Verbs:["get"]}"#,
            ]
        );
        // A rule limited to names is not covered by one limited to other names.
        let named = vec![PolicyRule::resource(&["get"], &[""], &["pods"]).named(&["a"])];
        let wanted = vec![PolicyRule::resource(&["get"], &[""], &["pods"])];
        assert_eq!(uncovered(&named, &wanted).len(), 1);
        assert!(uncovered(&wanted, &named).is_empty());
    }

    #[test]
    fn rules_read_and_write_as_the_api_spells_them() {
        let rule: PolicyRule = serde_json::from_value(serde_json::json!({
            "verbs": ["get"], "apiGroups": [""], "resources": ["pods"],
            "resourceNames": ["p"], "nonResourceURLs": []
        }))
        .unwrap();
        assert_eq!(
            rule,
            PolicyRule::resource(&["get"], &[""], &["pods"]).named(&["p"])
        );
        assert_eq!(
            serde_json::to_value(PolicyRule::urls(&["get"], &["/healthz"])).unwrap(),
            serde_json::json!({"verbs": ["get"], "nonResourceURLs": ["/healthz"]})
        );
    }
}
