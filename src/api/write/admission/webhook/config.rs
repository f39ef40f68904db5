//! MutatingWebhookConfiguration and ValidatingWebhookConfiguration
//! (`admissionregistration.k8s.io/v1`) as objects: their defaults and their validation on
//! write, with kube-apiserver's field paths and messages, and their reading into the
//! [`Hook`]s the index keeps.
//!
//! `matchConditions` are compiled when a configuration is written (`admission::expressions`):
//! one that does not compile is refused (422).

use std::time::Duration;

use base64::Engine;
use serde_json::{json, Value};

use crate::api::status::Cause;
use crate::api::validation::is_dns1123_subdomain;
use crate::api::write::admission::expressions::{self, Condition};
use crate::kube::selectors::LabelSelector;

pub const MUTATING_KIND: &str = "MutatingWebhookConfiguration";
pub const VALIDATING_KIND: &str = "ValidatingWebhookConfiguration";
pub const GROUP: &str = "admissionregistration.k8s.io";

/// How long a call may take when the configuration does not say (kube-apiserver's default).
const DEFAULT_TIMEOUT_SECONDS: i64 = 10;

/// The defaults kube-apiserver's `SetDefaults_*Webhook` give every webhook of a configuration.
pub fn apply_defaults(object: &mut Value, mutating: bool) {
    let Some(hooks) = object.get_mut("webhooks").and_then(Value::as_array_mut) else {
        return;
    };
    for hook in hooks.iter_mut().filter_map(Value::as_object_mut) {
        let mut default = |key: &str, value: Value| {
            if hook.get(key).is_none_or(Value::is_null) {
                hook.insert(key.to_string(), value);
            }
        };
        default("failurePolicy", json!("Fail"));
        default("matchPolicy", json!("Equivalent"));
        default("namespaceSelector", json!({}));
        default("objectSelector", json!({}));
        default("timeoutSeconds", json!(DEFAULT_TIMEOUT_SECONDS));
        if mutating {
            default("reinvocationPolicy", json!("Never"));
        }
        if let Some(rules) = hook.get_mut("rules").and_then(Value::as_array_mut) {
            for rule in rules.iter_mut().filter_map(Value::as_object_mut) {
                if rule.get("scope").is_none_or(Value::is_null) {
                    rule.insert("scope".into(), json!("*"));
                }
            }
        }
        if let Some(service) = hook
            .get_mut("clientConfig")
            .and_then(|c| c.get_mut("service"))
            .and_then(Value::as_object_mut)
        {
            if service.get("port").is_none_or(Value::is_null) {
                service.insert("port".into(), json!(443));
            }
        }
    }
}

fn unsupported(field: &str, value: &Value, supported: &[&str]) -> Cause {
    let shown = match value {
        Value::String(s) => format!("{s:?}"),
        other => other.to_string(),
    };
    let list: Vec<String> = supported.iter().map(|s| format!("{s:?}")).collect();
    Cause {
        reason: "FieldValueNotSupported",
        field: field.to_string(),
        message: format!(
            "Unsupported value: {shown}: supported values: {}",
            list.join(", ")
        ),
    }
}

fn duplicate(field: &str, value: &str) -> Cause {
    Cause {
        reason: "FieldValueDuplicate",
        field: field.to_string(),
        message: format!("Duplicate value: {value:?}"),
    }
}

/// Checks one of `choices` when the field is given; `required` says what to answer when not.
fn one_of(
    hook: &Value,
    key: &str,
    path: &str,
    choices: &[&str],
    required: Option<&str>,
    causes: &mut Vec<Cause>,
) {
    let field = format!("{path}.{key}");
    match hook.get(key).filter(|v| !v.is_null()) {
        None => {
            if let Some(detail) = required {
                causes.push(Cause::required(&field, detail));
            }
        }
        Some(v) if v.as_str().is_some_and(|s| choices.contains(&s)) => {}
        Some(v) => causes.push(unsupported(&field, v, choices)),
    }
}

/// kube-apiserver's `ValidateMutatingWebhookConfiguration` and
/// `ValidateValidatingWebhookConfiguration` (v1) of a defaulted object.
pub fn causes(object: &Value, mutating: bool) -> Vec<Cause> {
    let mut causes = Vec::new();
    let Some(hooks) = object.get("webhooks").filter(|v| !v.is_null()) else {
        return causes;
    };
    let Some(hooks) = hooks.as_array() else {
        causes.push(Cause::invalid("webhooks", hooks, "must be a list"));
        return causes;
    };
    let mut names = std::collections::HashSet::new();
    for (i, hook) in hooks.iter().enumerate() {
        let path = format!("webhooks[{i}]");
        let name = hook.get("name").and_then(Value::as_str).unwrap_or("");
        if name.is_empty() {
            causes.push(Cause::required(&format!("{path}.name"), ""));
        } else if !is_fully_qualified(name) {
            causes.push(Cause::invalid(
                &format!("{path}.name"),
                &json!(name),
                "should be a domain with at least three segments separated by dots",
            ));
        } else if !names.insert(name) {
            causes.push(duplicate(&format!("{path}.name"), name));
        }
        rules(hook, &path, &mut causes);
        one_of(
            hook,
            "failurePolicy",
            &path,
            &["Fail", "Ignore"],
            None,
            &mut causes,
        );
        one_of(
            hook,
            "matchPolicy",
            &path,
            &["Exact", "Equivalent"],
            None,
            &mut causes,
        );
        one_of(
            hook,
            "sideEffects",
            &path,
            &["None", "NoneOnDryRun"],
            Some("must specify one of None, NoneOnDryRun"),
            &mut causes,
        );
        if mutating {
            one_of(
                hook,
                "reinvocationPolicy",
                &path,
                &["Never", "IfNeeded"],
                None,
                &mut causes,
            );
        }
        review_versions(hook, &path, &mut causes);
        if let Some(t) = hook.get("timeoutSeconds").filter(|v| !v.is_null()) {
            if !t.as_i64().is_some_and(|t| (1..=30).contains(&t)) {
                causes.push(Cause::invalid(
                    &format!("{path}.timeoutSeconds"),
                    t,
                    "the timeout value must be between 1 and 30 seconds",
                ));
            }
        }
        for selector in ["namespaceSelector", "objectSelector"] {
            if let Err(e) = LabelSelector::from_object(hook.get(selector)) {
                causes.push(Cause::invalid(
                    &format!("{path}.{selector}"),
                    &hook[selector],
                    &e.to_string(),
                ));
            }
        }
        client_config(
            hook.get("clientConfig"),
            &format!("{path}.clientConfig"),
            &mut causes,
        );
        expressions::match_conditions(
            hook.get("matchConditions"),
            &format!("{path}.matchConditions"),
            &expressions::webhook_env(),
            &mut causes,
        );
    }
    causes
}

/// `IsFullyQualifiedName`: a DNS subdomain of at least three labels.
fn is_fully_qualified(name: &str) -> bool {
    is_dns1123_subdomain(name) && name.split('.').count() >= 3
}

fn review_versions(hook: &Value, path: &str, causes: &mut Vec<Cause>) {
    let field = format!("{path}.admissionReviewVersions");
    let versions: Vec<&str> = hook
        .get("admissionReviewVersions")
        .and_then(Value::as_array)
        .map(|v| v.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    if versions.is_empty() {
        causes.push(Cause::required(&field, "must specify one of v1, v1beta1"));
    } else if !versions.iter().any(|v| matches!(*v, "v1" | "v1beta1")) {
        causes.push(unsupported(&field, &json!(versions), &["v1", "v1beta1"]));
    }
}

fn rules(hook: &Value, path: &str, causes: &mut Vec<Cause>) {
    let Some(rules) = hook.get("rules").and_then(Value::as_array) else {
        return;
    };
    rule_list(rules, &format!("{path}.rules"), causes);
}

/// kube-apiserver's `validateRuleWithOperations` of each rule of `rules` (at `path`).
pub fn rule_list(rules: &[Value], path: &str, causes: &mut Vec<Cause>) {
    const OPERATIONS: &[&str] = &["*", "CREATE", "UPDATE", "DELETE", "CONNECT"];
    for (j, rule) in rules.iter().enumerate() {
        let path = format!("{path}[{j}]");
        let list = |key: &str| -> Vec<&str> {
            rule.get(key)
                .and_then(Value::as_array)
                .map(|v| v.iter().filter_map(Value::as_str).collect())
                .unwrap_or_default()
        };
        let operations = list("operations");
        if operations.is_empty() {
            causes.push(Cause::required(&format!("{path}.operations"), ""));
        }
        if operations.len() > 1 && operations.contains(&"*") {
            causes.push(Cause::invalid(
                &format!("{path}.operations"),
                &json!(operations),
                "if '*' is present, must not specify other operations",
            ));
        }
        for (k, op) in operations.iter().enumerate() {
            if !OPERATIONS.contains(op) {
                causes.push(unsupported(
                    &format!("{path}.operations[{k}]"),
                    &json!(op),
                    OPERATIONS,
                ));
            }
        }
        for key in ["apiGroups", "apiVersions"] {
            let values = list(key);
            if values.is_empty() {
                causes.push(Cause::required(&format!("{path}.{key}"), ""));
            }
            if values.len() > 1 && values.contains(&"*") {
                causes.push(Cause::invalid(
                    &format!("{path}.{key}"),
                    &json!(values),
                    "if '*' is present, must not specify other API groups",
                ));
            }
        }
        let resources = list("resources");
        if resources.is_empty() {
            causes.push(Cause::required(&format!("{path}.resources"), ""));
        }
        for (k, r) in resources.iter().enumerate() {
            if r.is_empty() || r.split('/').count() > 2 || r.split('/').any(str::is_empty) {
                causes.push(Cause::invalid(
                    &format!("{path}.resources[{k}]"),
                    &json!(r),
                    "must be a resource, a resource/subresource, '*' or '*/*'",
                ));
            }
        }
        if let Some(scope) = rule.get("scope").filter(|v| !v.is_null()) {
            if !scope
                .as_str()
                .is_some_and(|s| matches!(s, "*" | "Cluster" | "Namespaced"))
            {
                causes.push(unsupported(
                    &format!("{path}.scope"),
                    scope,
                    &["*", "Cluster", "Namespaced"],
                ));
            }
        }
    }
}

fn client_config(config: Option<&Value>, path: &str, causes: &mut Vec<Cause>) {
    let url = config.and_then(|c| c.get("url")).filter(|v| !v.is_null());
    let service = config
        .and_then(|c| c.get("service"))
        .filter(|v| !v.is_null());
    match (url, service) {
        (Some(_), Some(_)) | (None, None) => causes.push(Cause::required(
            path,
            "exactly one of url or service is required",
        )),
        (Some(url), None) => {
            if let Some(detail) = url.as_str().map_or(Some("must be a string"), bad_url) {
                causes.push(Cause::invalid(&format!("{path}.url"), url, detail));
            }
        }
        (None, Some(service)) => {
            let path = format!("{path}.service");
            for key in ["namespace", "name"] {
                if service
                    .get(key)
                    .and_then(Value::as_str)
                    .unwrap_or("")
                    .is_empty()
                {
                    causes.push(Cause::required(&format!("{path}.{key}"), ""));
                }
            }
            if let Some(p) = service.get("path").and_then(Value::as_str) {
                if !p.starts_with('/') {
                    causes.push(Cause::invalid(
                        &format!("{path}.path"),
                        &json!(p),
                        "must start with a '/'",
                    ));
                }
            }
            if let Some(port) = service.get("port").filter(|v| !v.is_null()) {
                if !port.as_i64().is_some_and(|p| (1..=65535).contains(&p)) {
                    causes.push(Cause::invalid(
                        &format!("{path}.port"),
                        port,
                        "port is not valid: must be between 1 and 65535, inclusive",
                    ));
                }
            }
        }
    }
    if let Some(bundle) = config
        .and_then(|c| c.get("caBundle"))
        .and_then(Value::as_str)
    {
        if base64::engine::general_purpose::STANDARD
            .decode(bundle)
            .is_err()
        {
            causes.push(Cause::invalid(
                &format!("{path}.caBundle"),
                &json!("<bytes>"),
                "must be base64",
            ));
        }
    }
}

/// Why kube-apiserver's `ValidateWebhookURL` refuses `url`, if it does.
fn bad_url(url: &str) -> Option<&'static str> {
    let Some(rest) = url.strip_prefix("https://") else {
        return Some("'https' is the only allowed URL scheme");
    };
    let authority = rest.split(['/', '?', '#']).next().unwrap_or("");
    if authority.contains('@') {
        return Some("user information is not permitted in the URL");
    }
    if url.contains('#') {
        return Some("fragments are not permitted in the URL");
    }
    if url.contains('?') {
        return Some("query parameters are not permitted in the URL");
    }
    if authority.is_empty() {
        return Some("host must be specified");
    }
    None
}

/// Whether a webhook may be called for a dry run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SideEffects {
    /// `None` or `NoneOnDryRun`: the webhook is called with `dryRun` set.
    NoneOnDryRun,
    /// `Some` or `Unknown` (only on objects stored under v1beta1 rules): a dry run it matches
    /// is refused.
    Some,
}

/// Where a webhook is reached.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Endpoint {
    Url(String),
    Service {
        namespace: String,
        name: String,
        path: String,
        port: u16,
    },
}

/// One rule of a webhook.
#[derive(Debug, Clone, Default)]
pub struct Rule {
    pub operations: Vec<String>,
    pub api_groups: Vec<String>,
    pub api_versions: Vec<String>,
    pub resources: Vec<String>,
    pub scope: String,
}

/// One webhook of a stored configuration, as the write path calls it.
#[derive(Debug, Clone)]
pub struct Hook {
    /// The configuration's name (the order of mutating webhooks is by it).
    pub configuration: String,
    pub name: String,
    pub endpoint: Endpoint,
    /// PEM certificates the webhook's serving certificate must chain to; `None`: the
    /// system's roots.
    pub ca_bundle: Option<String>,
    pub rules: Vec<Rule>,
    pub ignore_failures: bool,
    pub namespace_selector: LabelSelector,
    pub object_selector: LabelSelector,
    pub side_effects: SideEffects,
    pub timeout: Duration,
    /// `reinvocationPolicy: IfNeeded` (mutating webhooks only).
    pub reinvoke: bool,
    /// All must be true for the webhook to be called.
    pub conditions: Vec<Condition>,
}

impl Rule {
    /// A stored rule (`RuleWithOperations`).
    pub fn read(rule: &Value) -> Rule {
        Rule {
            operations: strings(rule.get("operations")),
            api_groups: strings(rule.get("apiGroups")),
            api_versions: strings(rule.get("apiVersions")),
            resources: strings(rule.get("resources")),
            scope: rule
                .get("scope")
                .and_then(Value::as_str)
                .unwrap_or("*")
                .to_string(),
        }
    }
}

pub fn strings(value: Option<&Value>) -> Vec<String> {
    value
        .and_then(Value::as_array)
        .map(|v| {
            v.iter()
                .filter_map(Value::as_str)
                .map(str::to_string)
                .collect()
        })
        .unwrap_or_default()
}

/// The webhooks of a stored configuration (validated and defaulted when written). A webhook
/// that cannot be read (stored before a rule this server checks) is skipped with a log line.
pub fn hooks(configuration: &str, object: &Value) -> Vec<Hook> {
    let mut out = Vec::new();
    for hook in object
        .get("webhooks")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        match read_hook(configuration, hook) {
            Some(h) => out.push(h),
            None => tracing::warn!(
                component = "admission",
                configuration,
                webhook = %hook["name"],
                "skipping a webhook that cannot be read"
            ),
        }
    }
    out
}

fn read_hook(configuration: &str, hook: &Value) -> Option<Hook> {
    let client = hook.get("clientConfig")?;
    let endpoint = match (
        client.get("url").and_then(Value::as_str),
        client.get("service"),
    ) {
        (Some(url), _) => Endpoint::Url(url.to_string()),
        (None, Some(service)) => Endpoint::Service {
            namespace: service.get("namespace")?.as_str()?.to_string(),
            name: service.get("name")?.as_str()?.to_string(),
            path: service
                .get("path")
                .and_then(Value::as_str)
                .unwrap_or("/")
                .to_string(),
            port: service
                .get("port")
                .and_then(Value::as_u64)
                .and_then(|p| u16::try_from(p).ok())
                .unwrap_or(443),
        },
        _ => return None,
    };
    let ca_bundle = match client.get("caBundle").and_then(Value::as_str) {
        Some(b) if !b.is_empty() => Some(
            String::from_utf8(base64::engine::general_purpose::STANDARD.decode(b).ok()?).ok()?,
        ),
        _ => None,
    };
    let rules = hook
        .get("rules")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .map(Rule::read)
        .collect();
    let selector = |key: &str| {
        LabelSelector::from_object(hook.get(key))
            .ok()
            .map(Option::unwrap_or_default)
    };
    Some(Hook {
        configuration: configuration.to_string(),
        name: hook.get("name")?.as_str()?.to_string(),
        endpoint,
        ca_bundle,
        rules,
        ignore_failures: hook.get("failurePolicy").and_then(Value::as_str) == Some("Ignore"),
        namespace_selector: selector("namespaceSelector")?,
        object_selector: selector("objectSelector")?,
        side_effects: match hook.get("sideEffects").and_then(Value::as_str) {
            Some("None" | "NoneOnDryRun") => SideEffects::NoneOnDryRun,
            _ => SideEffects::Some,
        },
        timeout: Duration::from_secs(
            hook.get("timeoutSeconds")
                .and_then(Value::as_u64)
                .unwrap_or(DEFAULT_TIMEOUT_SECONDS as u64)
                .clamp(1, 30),
        ),
        reinvoke: hook.get("reinvocationPolicy").and_then(Value::as_str) == Some("IfNeeded"),
        conditions: expressions::read_conditions(
            hook.get("matchConditions"),
            &expressions::webhook_env(),
        ),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hook(extra: Value) -> Value {
        let mut h = json!({
            "name": "deny.example.com",
            "clientConfig": {"url": "https://127.0.0.1:9443/deny"},
            "rules": [{"operations": ["CREATE"], "apiGroups": [""], "apiVersions": ["v1"], "resources": ["configmaps"]}],
            "sideEffects": "None",
            "admissionReviewVersions": ["v1"],
        });
        for (k, v) in extra.as_object().into_iter().flatten() {
            h[k] = v.clone();
        }
        h
    }

    fn messages(hooks: Vec<Value>, mutating: bool) -> Vec<String> {
        let mut object = json!({"webhooks": hooks});
        apply_defaults(&mut object, mutating);
        causes(&object, mutating)
            .into_iter()
            .map(|c| format!("{}: {}", c.field, c.message))
            .collect()
    }

    #[test]
    fn defaults_are_kube_apiservers() {
        let mut object = json!({"webhooks": [hook(json!({"clientConfig": {"service": {"namespace": "ns", "name": "svc"}}}))]});
        apply_defaults(&mut object, true);
        let h = &object["webhooks"][0];
        assert_eq!(h["failurePolicy"], "Fail");
        assert_eq!(h["matchPolicy"], "Equivalent");
        assert_eq!(h["namespaceSelector"], json!({}));
        assert_eq!(h["objectSelector"], json!({}));
        assert_eq!(h["timeoutSeconds"], 10);
        assert_eq!(h["reinvocationPolicy"], "Never");
        assert_eq!(h["rules"][0]["scope"], "*");
        assert_eq!(h["clientConfig"]["service"]["port"], 443);
        assert!(messages(vec![hook(json!({}))], true).is_empty());
    }

    #[test]
    fn bad_configurations_get_kube_apiservers_messages() {
        let cases = [
            (json!({"name": "short"}), "webhooks[0].name: Invalid value: \"short\": should be a domain with at least three segments separated by dots"),
            (json!({"clientConfig": {"url": "http://x.example.com/"}}), "webhooks[0].clientConfig.url: Invalid value: \"http://x.example.com/\": 'https' is the only allowed URL scheme"),
            (json!({"clientConfig": {"url": "https://u:p@x.example.com/"}}), "user information is not permitted in the URL"),
            (json!({"clientConfig": {"url": "https://x.example.com/#f"}}), "fragments are not permitted in the URL"),
            (json!({"clientConfig": {"url": "https://x/", "service": {"namespace": "a", "name": "b"}}}), "webhooks[0].clientConfig: Required value: exactly one of url or service is required"),
            (json!({"clientConfig": {}}), "exactly one of url or service is required"),
            (json!({"sideEffects": null}), "webhooks[0].sideEffects: Required value: must specify one of None, NoneOnDryRun"),
            (json!({"sideEffects": "Some"}), "webhooks[0].sideEffects: Unsupported value: \"Some\": supported values: \"None\", \"NoneOnDryRun\""),
            (json!({"admissionReviewVersions": []}), "webhooks[0].admissionReviewVersions: Required value: must specify one of v1, v1beta1"),
            (json!({"timeoutSeconds": 31}), "webhooks[0].timeoutSeconds: Invalid value: 31: the timeout value must be between 1 and 30 seconds"),
            (json!({"timeoutSeconds": 0}), "the timeout value must be between 1 and 30 seconds"),
            (json!({"failurePolicy": "Maybe"}), "webhooks[0].failurePolicy: Unsupported value: \"Maybe\": supported values: \"Fail\", \"Ignore\""),
            (json!({"rules": [{"operations": ["*", "CREATE"], "apiGroups": [""], "apiVersions": ["v1"], "resources": ["pods"]}]}), "if '*' is present, must not specify other operations"),
            (json!({"rules": [{"operations": ["CREATE"], "apiGroups": [""], "apiVersions": ["v1"], "resources": []}]}), "webhooks[0].rules[0].resources: Required value"),
            (json!({"matchConditions": [{"name": "a", "expression": "object.("}]}), "webhooks[0].matchConditions[0].expression: Invalid value: \"object.(\": compilation failed"),
            (json!({"matchConditions": [{"name": "a", "expression": "1"}]}), "webhooks[0].matchConditions[0].expression: Invalid value: \"1\": must evaluate to bool"),
        ];
        for (extra, want) in cases {
            let got = messages(vec![hook(extra.clone())], false);
            assert!(got.iter().any(|m| m.contains(want)), "{extra}: {got:?}");
        }
        let twice = messages(vec![hook(json!({})), hook(json!({}))], false);
        assert_eq!(
            twice,
            ["webhooks[1].name: Duplicate value: \"deny.example.com\""]
        );
        let bad_policy = messages(vec![hook(json!({"reinvocationPolicy": "Always"}))], true);
        assert_eq!(bad_policy.len(), 1, "{bad_policy:?}");
    }

    #[test]
    fn stored_configurations_read_into_hooks() {
        let ca = base64::engine::general_purpose::STANDARD.encode("PEM");
        let mut object = json!({"webhooks": [hook(json!({
            "clientConfig": {"service": {"namespace": "ns", "name": "svc", "path": "/m"}, "caBundle": ca},
            "failurePolicy": "Ignore",
            "reinvocationPolicy": "IfNeeded",
            "objectSelector": {"matchLabels": {"a": "b"}},
        }))]});
        apply_defaults(&mut object, true);
        let hooks = hooks("conf", &object);
        assert_eq!(hooks.len(), 1);
        let h = &hooks[0];
        assert_eq!(
            h.endpoint,
            Endpoint::Service {
                namespace: "ns".into(),
                name: "svc".into(),
                path: "/m".into(),
                port: 443
            }
        );
        assert_eq!(h.ca_bundle.as_deref(), Some("PEM"));
        assert!(h.ignore_failures && h.reinvoke);
        assert_eq!(h.timeout, Duration::from_secs(10));
        assert_eq!(h.side_effects, SideEffects::NoneOnDryRun);
        assert_eq!(h.object_selector.requirements.len(), 1);
    }
}
