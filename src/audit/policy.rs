//! The audit policy: kube-apiserver's `--audit-policy-file` (audit.k8s.io/v1 `Policy`), read
//! and checked at start, and the one question the request path asks of it: at which level,
//! and without which stages, is this request recorded.
//!
//! Rules are tried in order and the first that matches decides; a request no rule matches is
//! not recorded (level `None`), as upstream's `policy.Checker` does. A rule matches when every
//! list it sets contains the request's value (an unset list matches everything): `users` the
//! authenticated user's name, `userGroups` any of its groups, `verbs` the verb. `resources`
//! and `namespaces` match only resource requests, `nonResourceURLs` only the others (a
//! trailing `*` matches any path with that prefix). A resource entry names its `group` (`""`
//! for the core group), `resources` as `pods`, `pods/log`, `*`, `*/log` or `pods/*`, and
//! optionally `resourceNames`.

use std::path::Path;

use serde::Deserialize;

use crate::auth::attributes::RequestInfo;
use crate::auth::UserInfo;

use super::event::{Level, Stage};

/// Why a policy file was refused (the file is named by the caller's error).
#[derive(Debug, thiserror::Error)]
pub enum PolicyError {
    #[error("cannot read it: {0}")]
    Read(#[from] std::io::Error),
    #[error("not an audit policy: {0}")]
    Parse(String),
    #[error("{0}")]
    Invalid(String),
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct PolicyFile {
    api_version: String,
    kind: String,
    #[serde(default)]
    metadata: Option<serde_yaml::Value>,
    #[serde(default)]
    rules: Vec<RuleFile>,
    #[serde(default)]
    omit_stages: Vec<String>,
    #[serde(default)]
    omit_managed_fields: bool,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct RuleFile {
    #[serde(default)]
    level: String,
    #[serde(default)]
    users: Vec<String>,
    #[serde(default)]
    user_groups: Vec<String>,
    #[serde(default)]
    verbs: Vec<String>,
    #[serde(default)]
    resources: Vec<GroupResources>,
    #[serde(default)]
    namespaces: Vec<String>,
    #[serde(default, rename = "nonResourceURLs")]
    non_resource_urls: Vec<String>,
    #[serde(default)]
    omit_stages: Vec<String>,
    #[serde(default)]
    omit_managed_fields: Option<bool>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct GroupResources {
    #[serde(default)]
    pub group: String,
    #[serde(default)]
    pub resources: Vec<String>,
    #[serde(default)]
    pub resource_names: Vec<String>,
}

/// One checked rule.
#[derive(Debug, Clone, Default)]
pub struct Rule {
    pub level: Level,
    pub users: Vec<String>,
    pub user_groups: Vec<String>,
    pub verbs: Vec<String>,
    pub resources: Vec<GroupResources>,
    pub namespaces: Vec<String>,
    pub non_resource_urls: Vec<String>,
    pub omit_stages: Vec<Stage>,
    pub omit_managed_fields: Option<bool>,
}

/// A checked policy.
#[derive(Debug, Clone, Default)]
pub struct Policy {
    pub rules: Vec<Rule>,
    pub omit_stages: Vec<Stage>,
    pub omit_managed_fields: bool,
}

/// What the policy says about one request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verdict {
    pub level: Level,
    /// The policy's and the rule's omitted stages together.
    pub omit_stages: Vec<Stage>,
    pub omit_managed_fields: bool,
}

impl Verdict {
    pub fn records(&self, stage: Stage) -> bool {
        self.level != Level::None && !self.omit_stages.contains(&stage)
    }
}

fn level(text: &str, at: &str) -> Result<Level, PolicyError> {
    match text {
        "None" => Ok(Level::None),
        "Metadata" => Ok(Level::Metadata),
        "Request" => Ok(Level::Request),
        "RequestResponse" => Ok(Level::RequestResponse),
        "" => Err(PolicyError::Invalid(format!("{at}.level: Required value"))),
        other => Err(PolicyError::Invalid(format!(
            "{at}.level: Unsupported value: {other:?}: supported values: \"None\", \"Metadata\", \"Request\", \"RequestResponse\""
        ))),
    }
}

fn stages(list: &[String], at: &str) -> Result<Vec<Stage>, PolicyError> {
    list.iter()
        .enumerate()
        .map(|(i, s)| {
            Stage::parse(s).ok_or_else(|| {
                PolicyError::Invalid(format!(
                    "{at}.omitStages[{i}]: Unsupported value: {s:?}: supported values: \"RequestReceived\", \"ResponseStarted\", \"ResponseComplete\", \"Panic\""
                ))
            })
        })
        .collect()
}

fn check_rule(rule: RuleFile, at: &str) -> Result<Rule, PolicyError> {
    let invalid = |what: String| Err(PolicyError::Invalid(format!("{at}.{what}")));
    let level = level(&rule.level, at)?;
    if !rule.non_resource_urls.is_empty()
        && (!rule.resources.is_empty() || !rule.namespaces.is_empty())
    {
        return invalid(
            "nonResourceURLs: Invalid value: rules cannot apply to both regular resources and non-resource URLs"
                .into(),
        );
    }
    for (i, url) in rule.non_resource_urls.iter().enumerate() {
        if url.is_empty() {
            return invalid(format!(
                "nonResourceURLs[{i}]: Required value: empty non-resource URLs are not allowed"
            ));
        }
        if url != "*" && !url.starts_with('/') {
            return invalid(format!(
                "nonResourceURLs[{i}]: Invalid value: {url:?}: non-resource URL rules must begin with a '/' character"
            ));
        }
        if url[..url.len() - 1].contains('*') {
            return invalid(format!(
                "nonResourceURLs[{i}]: Invalid value: {url:?}: non-resource URL wildcards are only supported at the end of the URL"
            ));
        }
    }
    for (i, group) in rule.resources.iter().enumerate() {
        if !group.resource_names.is_empty() && group.resources.is_empty() {
            return invalid(format!(
                "resources[{i}].resourceNames: Invalid value: using resourceNames requires at least one resource"
            ));
        }
        if group.group.contains('/') || group.group.contains(char::is_whitespace) {
            return invalid(format!(
                "resources[{i}].group: Invalid value: {:?}: not an API group name",
                group.group
            ));
        }
        for (j, resource) in group.resources.iter().enumerate() {
            if resource.is_empty() || resource.matches('/').count() > 1 {
                return invalid(format!(
                    "resources[{i}].resources[{j}]: Invalid value: {resource:?}: a resource, resource/subresource, */subresource or resource/*"
                ));
            }
        }
    }
    Ok(Rule {
        level,
        omit_stages: stages(&rule.omit_stages, at)?,
        users: rule.users,
        user_groups: rule.user_groups,
        verbs: rule.verbs,
        resources: rule.resources,
        namespaces: rule.namespaces,
        non_resource_urls: rule.non_resource_urls,
        omit_managed_fields: rule.omit_managed_fields,
    })
}

impl Policy {
    /// Reads and checks a policy file.
    pub fn load(path: &Path) -> Result<Policy, PolicyError> {
        Policy::parse(&std::fs::read_to_string(path)?)
    }

    /// Parses and checks a policy (YAML or JSON).
    pub fn parse(text: &str) -> Result<Policy, PolicyError> {
        let file: PolicyFile =
            serde_yaml::from_str(text).map_err(|e| PolicyError::Parse(e.to_string()))?;
        let _ = file.metadata;
        if file.kind != "Policy" {
            return Err(PolicyError::Parse(format!(
                "kind is {:?}, expected \"Policy\"",
                file.kind
            )));
        }
        if file.api_version != "audit.k8s.io/v1" {
            return Err(PolicyError::Parse(format!(
                "apiVersion is {:?}, expected \"audit.k8s.io/v1\"",
                file.api_version
            )));
        }
        if file.rules.is_empty() {
            return Err(PolicyError::Invalid(
                "rules: Required value: the policy has no rules (nothing would be recorded)".into(),
            ));
        }
        let rules = file
            .rules
            .into_iter()
            .enumerate()
            .map(|(i, rule)| check_rule(rule, &format!("rules[{i}]")))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Policy {
            rules,
            omit_stages: stages(&file.omit_stages, "")
                .map_err(|e| PolicyError::Invalid(e.to_string().trim_start_matches('.').into()))?,
            omit_managed_fields: file.omit_managed_fields,
        })
    }

    /// The policy kube-apiserver's documentation starts from when no file is given: every
    /// request at Metadata level.
    pub fn metadata_for_all() -> Policy {
        Policy {
            rules: vec![Rule {
                level: Level::Metadata,
                ..Rule::default()
            }],
            ..Policy::default()
        }
    }

    /// What the first matching rule says about a request of `user` (the authenticated user,
    /// before impersonation, as upstream evaluates it).
    pub fn evaluate(&self, user: &UserInfo, info: &RequestInfo) -> Verdict {
        match self.rules.iter().find(|r| r.matches(user, info)) {
            Some(rule) => {
                let mut omit = self.omit_stages.clone();
                omit.extend(rule.omit_stages.iter().copied());
                Verdict {
                    level: rule.level,
                    omit_stages: omit,
                    omit_managed_fields: rule
                        .omit_managed_fields
                        .unwrap_or(self.omit_managed_fields),
                }
            }
            None => Verdict {
                level: Level::None,
                omit_stages: Vec::new(),
                omit_managed_fields: false,
            },
        }
    }
}

impl Rule {
    fn matches(&self, user: &UserInfo, info: &RequestInfo) -> bool {
        if !self.users.is_empty() && !self.users.contains(&user.name) {
            return false;
        }
        if !self.user_groups.is_empty() && !user.groups.iter().any(|g| self.user_groups.contains(g))
        {
            return false;
        }
        if !self.verbs.is_empty() && !self.verbs.contains(&info.verb) {
            return false;
        }
        if !self.namespaces.is_empty() || !self.resources.is_empty() {
            return self.matches_resource(info);
        }
        if !self.non_resource_urls.is_empty() {
            return !info.resource_request
                && self
                    .non_resource_urls
                    .iter()
                    .any(|spec| path_matches(&info.path, spec));
        }
        true
    }

    fn matches_resource(&self, info: &RequestInfo) -> bool {
        if !info.resource_request {
            return false;
        }
        // A cluster-scoped resource's namespace is "", which a rule may list.
        if !self.namespaces.is_empty() && !self.namespaces.contains(&info.namespace) {
            return false;
        }
        if self.resources.is_empty() {
            return true;
        }
        let combined = info.combined_resource();
        self.resources
            .iter()
            .filter(|g| g.group == info.api_group)
            .any(|g| {
                if g.resources.is_empty() {
                    return true;
                }
                if !g.resource_names.is_empty() && !g.resource_names.contains(&info.name) {
                    return false;
                }
                g.resources.iter().any(|res| {
                    res == "*"
                        || *res == combined
                        || (!info.subresource.is_empty()
                            && res.strip_prefix("*/") == Some(info.subresource.as_str()))
                        || res.strip_suffix("/*") == Some(info.resource.as_str())
                })
            })
    }
}

fn path_matches(path: &str, spec: &str) -> bool {
    spec == "*"
        || spec == path
        || spec
            .strip_suffix('*')
            .is_some_and(|prefix| path.starts_with(prefix))
}

#[cfg(test)]
mod tests;
