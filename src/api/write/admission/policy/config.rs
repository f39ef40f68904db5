//! ValidatingAdmissionPolicy and ValidatingAdmissionPolicyBinding
//! (`admissionregistration.k8s.io/v1`) as objects: their defaults and their validation on
//! write with kube-apiserver's field paths and messages (every expression compiled, 422 when
//! one does not), and their reading into the [`Policy`] and [`Binding`] the index keeps.

use std::sync::Arc;

use serde_json::{json, Value};

use crate::api::status::Cause;
use crate::api::write::admission::expressions::{self, Condition, Returns};
use crate::api::write::admission::webhook::config::{rule_list, Rule};
use crate::cel::Program;
use crate::kube::selectors::LabelSelector;

pub const POLICY_KIND: &str = "ValidatingAdmissionPolicy";
pub const BINDING_KIND: &str = "ValidatingAdmissionPolicyBinding";

/// The reasons a validation may give, and the status code each answers with.
const REASONS: &[(&str, u16)] = &[
    ("Unauthorized", 401),
    ("Forbidden", 403),
    ("Invalid", 422),
    ("RequestEntityTooLarge", 413),
];

/// kube-apiserver's `SetDefaults_ValidatingAdmissionPolicySpec` and `SetDefaults_MatchResources`.
pub fn apply_defaults(object: &mut Value, kind: &str) {
    let Some(spec) = object.get_mut("spec").and_then(Value::as_object_mut) else {
        return;
    };
    if kind == POLICY_KIND && spec.get("failurePolicy").is_none_or(Value::is_null) {
        spec.insert("failurePolicy".into(), json!("Fail"));
    }
    let key = if kind == POLICY_KIND {
        "matchConstraints"
    } else {
        "matchResources"
    };
    let Some(resources) = spec.get_mut(key).and_then(Value::as_object_mut) else {
        return;
    };
    for (k, v) in [
        ("matchPolicy", json!("Equivalent")),
        ("namespaceSelector", json!({})),
        ("objectSelector", json!({})),
    ] {
        if resources.get(k).is_none_or(Value::is_null) {
            resources.insert(k.into(), v);
        }
    }
    for list in ["resourceRules", "excludeResourceRules"] {
        for rule in resources
            .get_mut(list)
            .and_then(Value::as_array_mut)
            .into_iter()
            .flatten()
            .filter_map(Value::as_object_mut)
        {
            if rule.get("scope").is_none_or(Value::is_null) {
                rule.insert("scope".into(), json!("*"));
            }
        }
    }
}

fn unsupported(field: &str, value: &Value, supported: &[&str]) -> Cause {
    let list: Vec<String> = supported.iter().map(|s| format!("{s:?}")).collect();
    let shown = match value {
        Value::String(s) => format!("{s:?}"),
        other => other.to_string(),
    };
    Cause {
        reason: "FieldValueNotSupported",
        field: field.into(),
        message: format!(
            "Unsupported value: {shown}: supported values: {}",
            list.join(", ")
        ),
    }
}

fn text<'a>(v: &'a Value, key: &str) -> &'a str {
    v.get(key).and_then(Value::as_str).unwrap_or("")
}

fn items<'a>(v: &'a Value, key: &str) -> &'a [Value] {
    v.get(key)
        .and_then(Value::as_array)
        .map_or(&[], Vec::as_slice)
}

/// `matchConstraints` of a policy or `matchResources` of a binding.
fn match_resources(m: &Value, path: &str, rules_required: bool, causes: &mut Vec<Cause>) {
    let rules = items(m, "resourceRules");
    if rules_required && rules.is_empty() {
        causes.push(Cause::required(&format!("{path}.resourceRules"), ""));
    }
    rule_list(rules, &format!("{path}.resourceRules"), causes);
    rule_list(
        items(m, "excludeResourceRules"),
        &format!("{path}.excludeResourceRules"),
        causes,
    );
    if let Some(p) = m.get("matchPolicy").filter(|v| !v.is_null()) {
        if !matches!(p.as_str(), Some("Exact" | "Equivalent")) {
            causes.push(unsupported(
                &format!("{path}.matchPolicy"),
                p,
                &["Exact", "Equivalent"],
            ));
        }
    }
    for selector in ["namespaceSelector", "objectSelector"] {
        if let Err(e) = LabelSelector::from_object(m.get(selector)) {
            causes.push(Cause::invalid(
                &format!("{path}.{selector}"),
                &m[selector],
                &e.to_string(),
            ));
        }
    }
}

/// A CEL identifier, as a variable's name must be.
fn is_identifier(name: &str) -> bool {
    let mut chars = name.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// kube-apiserver's `ValidateValidatingAdmissionPolicy` of a defaulted object.
pub fn policy_causes(object: &Value) -> Vec<Cause> {
    let mut causes = Vec::new();
    let spec = object.get("spec").unwrap_or(&Value::Null);
    let name = object
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or("");
    read_policy(name, spec, &mut causes);
    causes
}

/// Reads (and with `causes`, validates) a policy's spec.
fn read_policy(name: &str, spec: &Value, causes: &mut Vec<Cause>) -> Policy {
    if let Some(kind) = spec.get("paramKind").filter(|v| !v.is_null()) {
        for key in ["apiVersion", "kind"] {
            if text(kind, key).is_empty() {
                causes.push(Cause::required(&format!("spec.paramKind.{key}"), ""));
            }
        }
    }
    match spec.get("matchConstraints").filter(|v| !v.is_null()) {
        None => causes.push(Cause::required("spec.matchConstraints", "")),
        Some(m) => match_resources(m, "spec.matchConstraints", true, causes),
    }
    match spec.get("failurePolicy").filter(|v| !v.is_null()) {
        None => causes.push(Cause::required("spec.failurePolicy", "")),
        Some(p) if matches!(p.as_str(), Some("Fail" | "Ignore")) => {}
        Some(p) => causes.push(unsupported("spec.failurePolicy", p, &["Fail", "Ignore"])),
    }
    // Variables, each seeing the ones declared before it.
    let mut declared: Vec<String> = Vec::new();
    let mut variables = Vec::new();
    for (i, v) in items(spec, "variables").iter().enumerate() {
        let at = format!("spec.variables[{i}]");
        let var = text(v, "name");
        if var.is_empty() {
            causes.push(Cause::required(&format!("{at}.name"), ""));
        } else if !is_identifier(var) {
            causes.push(Cause::invalid(
                &format!("{at}.name"),
                &json!(var),
                "name is not a valid CEL identifier",
            ));
        } else if declared.iter().any(|d| d == var) {
            causes.push(Cause {
                reason: "FieldValueDuplicate",
                field: format!("{at}.name"),
                message: format!("Duplicate value: {var:?}"),
            });
        }
        let env = expressions::policy_env(&declared);
        let program = compiled(v, "expression", &at, &env, Returns::Any, causes);
        declared.push(var.to_string());
        variables.push(Variable {
            name: var.to_string(),
            program,
        });
    }
    let env = expressions::policy_env(&declared);
    let conditions = expressions::match_conditions(
        spec.get("matchConditions"),
        "spec.matchConditions",
        &env,
        causes,
    );
    let validations_given = items(spec, "validations");
    let audits_given = items(spec, "auditAnnotations");
    if validations_given.is_empty() && audits_given.is_empty() {
        causes.push(Cause::required(
            "spec.validations",
            "validations or auditAnnotations must contain at least one item",
        ));
    }
    let mut validations = Vec::new();
    for (i, v) in validations_given.iter().enumerate() {
        let at = format!("spec.validations[{i}]");
        let expression = text(v, "expression").to_string();
        let program = compiled(v, "expression", &at, &env, Returns::Bool, causes);
        let message = text(v, "message").to_string();
        if message.contains('\n') {
            causes.push(Cause::invalid(
                &format!("{at}.message"),
                &json!(message),
                "message must not contain line breaks",
            ));
        }
        let message_expression = if text(v, "messageExpression").trim().is_empty() {
            None
        } else {
            compiled(v, "messageExpression", &at, &env, Returns::String, causes)
        };
        let reason = match v.get("reason").filter(|r| !r.is_null()) {
            None => "Invalid",
            Some(r) => match REASONS.iter().find(|(k, _)| r.as_str() == Some(k)) {
                Some((k, _)) => k,
                None => {
                    let names: Vec<&str> = REASONS.iter().map(|(k, _)| *k).collect();
                    causes.push(unsupported(&format!("{at}.reason"), r, &names));
                    "Invalid"
                }
            },
        };
        validations.push(Validation {
            expression,
            program,
            message,
            message_expression,
            reason,
        });
    }
    let mut audit_annotations = Vec::new();
    let mut keys = std::collections::HashSet::new();
    for (i, a) in audits_given.iter().enumerate() {
        let at = format!("spec.auditAnnotations[{i}]");
        let key = text(a, "key");
        let full = format!("{name}/{key}");
        if key.is_empty() {
            causes.push(Cause::required(&format!("{at}.key"), ""));
        } else if key.len() > 63 {
            causes.push(Cause::invalid(
                &format!("{at}.key"),
                &json!(key),
                "must be no more than 63 characters",
            ));
        } else if let Some(p) = crate::api::validation::qualified_name_problem(&full) {
            causes.push(Cause::invalid(&format!("{at}.key"), &json!(key), &p));
        } else if !keys.insert(key) {
            causes.push(Cause {
                reason: "FieldValueDuplicate",
                field: format!("{at}.key"),
                message: format!("Duplicate value: {key:?}"),
            });
        }
        // A value expression may also give null (no annotation): `dyn` results are taken.
        let program = compiled(a, "valueExpression", &at, &env, Returns::String, causes);
        audit_annotations.push(AuditAnnotation { key: full, program });
    }
    let param_kind = spec.get("paramKind").filter(|v| !v.is_null()).map(|k| {
        (
            text(k, "apiVersion").to_string(),
            text(k, "kind").to_string(),
        )
    });
    let constraints = spec
        .get("matchConstraints")
        .map(MatchResources::read)
        .unwrap_or_default();
    Policy {
        name: name.to_string(),
        param_kind,
        constraints,
        ignore_failures: spec.get("failurePolicy").and_then(Value::as_str) == Some("Ignore"),
        variables,
        conditions,
        validations,
        audit_annotations,
    }
}

/// Compiles `v[key]` (required) at `at.key`; `None` (and a cause) when it does not compile.
fn compiled(
    v: &Value,
    key: &str,
    at: &str,
    env: &[(String, crate::cel::Ty)],
    returns: Returns,
    causes: &mut Vec<Cause>,
) -> Option<Arc<Program>> {
    let source = text(v, key);
    if source.trim().is_empty() {
        causes.push(Cause::required(&format!("{at}.{key}"), ""));
        return None;
    }
    match expressions::compile(source, env, returns) {
        Ok(p) => Some(p),
        Err(detail) => {
            causes.push(Cause::invalid(
                &format!("{at}.{key}"),
                &json!(source),
                &detail,
            ));
            None
        }
    }
}

/// kube-apiserver's `ValidateValidatingAdmissionPolicyBinding` of a defaulted object.
pub fn binding_causes(object: &Value) -> Vec<Cause> {
    let mut causes = Vec::new();
    let spec = object.get("spec").unwrap_or(&Value::Null);
    if text(spec, "policyName").is_empty() {
        causes.push(Cause::required("spec.policyName", ""));
    }
    if let Some(m) = spec.get("matchResources").filter(|v| !v.is_null()) {
        match_resources(m, "spec.matchResources", false, &mut causes);
    }
    if let Some(p) = spec.get("paramRef").filter(|v| !v.is_null()) {
        let has_name = !text(p, "name").is_empty();
        let has_selector = p.get("selector").is_some_and(|s| !s.is_null());
        if has_name == has_selector {
            causes.push(Cause::forbidden(
                "spec.paramRef",
                "one of `name` or `selector` must be set",
            ));
        }
        if let Err(e) = LabelSelector::from_object(p.get("selector")) {
            causes.push(Cause::invalid(
                "spec.paramRef.selector",
                &p["selector"],
                &e.to_string(),
            ));
        }
        match p.get("parameterNotFoundAction").filter(|v| !v.is_null()) {
            None => causes.push(Cause::required("spec.paramRef.parameterNotFoundAction", "")),
            Some(a) if matches!(a.as_str(), Some("Allow" | "Deny")) => {}
            Some(a) => causes.push(unsupported(
                "spec.paramRef.parameterNotFoundAction",
                a,
                &["Allow", "Deny"],
            )),
        }
    }
    let actions = items(spec, "validationActions");
    if actions.is_empty() {
        causes.push(Cause::required(
            "spec.validationActions",
            "at least one validation action is required",
        ));
    }
    let mut seen = std::collections::HashSet::new();
    for (i, a) in actions.iter().enumerate() {
        match a.as_str() {
            Some(s @ ("Deny" | "Warn" | "Audit")) => {
                if !seen.insert(s) {
                    causes.push(Cause {
                        reason: "FieldValueDuplicate",
                        field: format!("spec.validationActions[{i}]"),
                        message: format!("Duplicate value: {s:?}"),
                    });
                }
            }
            _ => causes.push(unsupported(
                &format!("spec.validationActions[{i}]"),
                a,
                &["Audit", "Deny", "Warn"],
            )),
        }
    }
    if seen.contains("Deny") && seen.contains("Warn") {
        causes.push(Cause::invalid(
            "spec.validationActions",
            &json!(actions),
            "must not contain both Deny and Warn (repeating the same validation failure information in the API response and headers serves no purpose)",
        ));
    }
    causes
}

/// Which requests a policy (its `matchConstraints`) or a binding (`matchResources`) takes.
#[derive(Debug, Clone, Default)]
pub struct MatchResources {
    /// Each rule with its `resourceNames` (empty: any name).
    pub rules: Vec<(Rule, Vec<String>)>,
    pub excluded: Vec<(Rule, Vec<String>)>,
    pub namespace_selector: LabelSelector,
    pub object_selector: LabelSelector,
}

impl MatchResources {
    fn read(m: &Value) -> MatchResources {
        let rules = |key: &str| {
            items(m, key)
                .iter()
                .map(|r| {
                    (
                        Rule::read(r),
                        crate::api::write::admission::webhook::config::strings(
                            r.get("resourceNames"),
                        ),
                    )
                })
                .collect()
        };
        let selector = |key: &str| {
            LabelSelector::from_object(m.get(key))
                .ok()
                .flatten()
                .unwrap_or_default()
        };
        MatchResources {
            rules: rules("resourceRules"),
            excluded: rules("excludeResourceRules"),
            namespace_selector: selector("namespaceSelector"),
            object_selector: selector("objectSelector"),
        }
    }
}

/// A policy variable, evaluated the first time an expression needs it.
#[derive(Debug)]
pub struct Variable {
    pub name: String,
    pub program: Option<Arc<Program>>,
}

#[derive(Debug)]
pub struct Validation {
    pub expression: String,
    pub program: Option<Arc<Program>>,
    pub message: String,
    pub message_expression: Option<Arc<Program>>,
    /// `Invalid` unless the validation gives another.
    pub reason: &'static str,
}

impl Validation {
    /// The status code of a refusal for this validation's reason.
    pub fn code(&self) -> u16 {
        REASONS
            .iter()
            .find(|(k, _)| *k == self.reason)
            .map_or(422, |(_, c)| *c)
    }
}

#[derive(Debug)]
pub struct AuditAnnotation {
    /// `policyName/key`.
    pub key: String,
    pub program: Option<Arc<Program>>,
}

/// A stored policy, compiled.
#[derive(Debug)]
pub struct Policy {
    pub name: String,
    /// `(apiVersion, kind)` of its parameters.
    pub param_kind: Option<(String, String)>,
    pub constraints: MatchResources,
    pub ignore_failures: bool,
    pub variables: Vec<Variable>,
    pub conditions: Vec<Condition>,
    pub validations: Vec<Validation>,
    pub audit_annotations: Vec<AuditAnnotation>,
}

impl Policy {
    /// A stored policy (validated when written).
    pub fn read(name: &str, object: &Value) -> Policy {
        let mut ignored = Vec::new();
        read_policy(
            name,
            object.get("spec").unwrap_or(&Value::Null),
            &mut ignored,
        )
    }
}

/// Where a binding's parameters are.
#[derive(Debug, Clone)]
pub struct ParamRef {
    pub name: Option<String>,
    pub namespace: Option<String>,
    pub selector: LabelSelector,
    /// `parameterNotFoundAction: Deny`.
    pub deny_if_missing: bool,
}

/// What a binding does with a failed validation.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Actions {
    pub deny: bool,
    pub warn: bool,
    pub audit: bool,
}

impl Actions {
    /// The actions' names, in kube-apiserver's order, for the audit annotation.
    pub fn names(&self) -> Vec<&'static str> {
        let mut out = Vec::new();
        if self.deny {
            out.push("Deny");
        }
        if self.warn {
            out.push("Warn");
        }
        if self.audit {
            out.push("Audit");
        }
        out
    }
}

/// A stored binding.
#[derive(Debug, Clone)]
pub struct Binding {
    pub name: String,
    pub policy: String,
    pub param_ref: Option<ParamRef>,
    /// `None`: every request the policy matches.
    pub resources: Option<MatchResources>,
    pub actions: Actions,
}

impl Binding {
    pub fn read(name: &str, object: &Value) -> Binding {
        let spec = object.get("spec").unwrap_or(&Value::Null);
        let actions: Vec<&str> = items(spec, "validationActions")
            .iter()
            .filter_map(Value::as_str)
            .collect();
        Binding {
            name: name.to_string(),
            policy: text(spec, "policyName").to_string(),
            param_ref: spec
                .get("paramRef")
                .filter(|v| !v.is_null())
                .map(|p| ParamRef {
                    name: Some(text(p, "name").to_string()).filter(|s| !s.is_empty()),
                    namespace: Some(text(p, "namespace").to_string()).filter(|s| !s.is_empty()),
                    selector: LabelSelector::from_object(p.get("selector"))
                        .ok()
                        .flatten()
                        .unwrap_or_default(),
                    deny_if_missing: text(p, "parameterNotFoundAction") == "Deny",
                }),
            resources: spec
                .get("matchResources")
                .filter(|v| !v.is_null())
                .map(MatchResources::read),
            actions: Actions {
                deny: actions.contains(&"Deny"),
                warn: actions.contains(&"Warn"),
                audit: actions.contains(&"Audit"),
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn messages(kind: &str, spec: Value) -> Vec<String> {
        let mut object = json!({"metadata": {"name": "p"}, "spec": spec});
        apply_defaults(&mut object, kind);
        let causes = if kind == POLICY_KIND {
            policy_causes(&object)
        } else {
            binding_causes(&object)
        };
        causes
            .into_iter()
            .map(|c| format!("{}: {}", c.field, c.message))
            .collect()
    }

    fn policy(extra: Value) -> Value {
        let mut spec = json!({
            "matchConstraints": {"resourceRules": [{"apiGroups": ["apps"], "apiVersions": ["v1"], "operations": ["CREATE"], "resources": ["deployments"]}]},
            "validations": [{"expression": "object.spec.replicas <= 5"}],
        });
        for (k, v) in extra.as_object().into_iter().flatten() {
            spec[k] = v.clone();
        }
        spec
    }

    #[test]
    fn policies_are_defaulted_and_checked() {
        let mut object = json!({"spec": policy(json!({}))});
        apply_defaults(&mut object, POLICY_KIND);
        assert_eq!(object["spec"]["failurePolicy"], "Fail");
        assert_eq!(
            object["spec"]["matchConstraints"]["matchPolicy"],
            "Equivalent"
        );
        assert_eq!(
            object["spec"]["matchConstraints"]["resourceRules"][0]["scope"],
            "*"
        );
        assert!(messages(POLICY_KIND, policy(json!({}))).is_empty());
        let cases = [
            (json!({"validations": [{"expression": "object.spec.replicas <"}]}), "spec.validations[0].expression: Invalid value: \"object.spec.replicas <\": compilation failed"),
            (json!({"validations": [{"expression": "'x'"}]}), "spec.validations[0].expression: Invalid value: \"'x'\": must evaluate to bool"),
            (json!({"validations": [{"expression": "true", "messageExpression": "1"}]}), "spec.validations[0].messageExpression: Invalid value: \"1\": must evaluate to string"),
            (json!({"validations": [{"expression": "true", "reason": "Teapot"}]}), "spec.validations[0].reason: Unsupported value: \"Teapot\""),
            (json!({"validations": [{"expression": "variables.nope"}]}), "undefined field 'nope'"),
            (json!({"validations": []}), "spec.validations: Required value: validations or auditAnnotations must contain at least one item"),
            (json!({"matchConstraints": null}), "spec.matchConstraints: Required value"),
            (json!({"failurePolicy": "Maybe"}), "spec.failurePolicy: Unsupported value: \"Maybe\""),
            (json!({"variables": [{"name": "a-b", "expression": "1"}]}), "spec.variables[0].name: Invalid value: \"a-b\": name is not a valid CEL identifier"),
            (json!({"variables": [{"name": "b", "expression": "variables.a"}, {"name": "a", "expression": "1"}]}), "spec.variables[0].expression"),
            (json!({"matchConditions": [{"name": "x", "expression": "1"}]}), "spec.matchConditions[0].expression: Invalid value: \"1\": must evaluate to bool"),
        ];
        for (extra, want) in cases {
            let got = messages(POLICY_KIND, policy(extra.clone()));
            assert!(got.iter().any(|m| m.contains(want)), "{extra}: {got:?}");
        }
        let vars = policy(json!({
            "variables": [{"name": "r", "expression": "object.spec.replicas"}, {"name": "big", "expression": "variables.r > 3"}],
            "validations": [{"expression": "!variables.big", "messageExpression": "'replicas: ' + string(variables.r)"}],
            "paramKind": {"apiVersion": "v1", "kind": "ConfigMap"},
        }));
        assert!(messages(POLICY_KIND, vars).is_empty());
    }

    #[test]
    fn bindings_are_checked() {
        let ok = json!({"policyName": "p", "validationActions": ["Deny"]});
        assert!(messages(BINDING_KIND, ok).is_empty());
        let cases = [
            (json!({"policyName": "p"}), "spec.validationActions: Required value: at least one validation action is required"),
            (json!({"policyName": "p", "validationActions": ["Deny", "Warn"]}), "must not contain both Deny and Warn"),
            (json!({"policyName": "p", "validationActions": ["Shout"]}), "spec.validationActions[0]: Unsupported value: \"Shout\""),
            (json!({"policyName": "p", "validationActions": ["Audit", "Audit"]}), "spec.validationActions[1]: Duplicate value: \"Audit\""),
            (json!({"validationActions": ["Deny"]}), "spec.policyName: Required value"),
            (json!({"policyName": "p", "validationActions": ["Deny"], "paramRef": {"parameterNotFoundAction": "Deny"}}), "spec.paramRef: Forbidden: one of `name` or `selector` must be set"),
            (json!({"policyName": "p", "validationActions": ["Deny"], "paramRef": {"name": "x"}}), "spec.paramRef.parameterNotFoundAction: Required value"),
        ];
        for (spec, want) in cases {
            let got = messages(BINDING_KIND, spec.clone());
            assert!(got.iter().any(|m| m.contains(want)), "{spec}: {got:?}");
        }
    }
}
