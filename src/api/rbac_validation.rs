//! Validation of the RBAC kinds with kube-apiserver's field paths and messages
//! (pkg/apis/rbac/validation): every rule has verbs, a resource rule has groups and resources,
//! non-resource URLs appear only in ClusterRoles and never beside resources; an aggregationRule
//! has selectors; a binding refers to a Role or ClusterRole of the RBAC group by a valid name,
//! never changes that reference, and names users, groups and service accounts properly.

use serde_json::Value;

use super::status::Cause;

const GROUP: &str = "rbac.authorization.k8s.io";

/// The problems of an RBAC object of `kind` (`old`: the stored version on update).
pub fn causes(kind: &str, old: Option<&Value>, object: &Value) -> Vec<Cause> {
    let mut causes = Vec::new();
    match kind {
        "Role" => rules(object, true, &mut causes),
        "ClusterRole" => {
            rules(object, false, &mut causes);
            aggregation_rule(object, &mut causes);
        }
        "RoleBinding" => binding(object, old, true, &mut causes),
        "ClusterRoleBinding" => binding(object, old, false, &mut causes),
        _ => {}
    }
    causes
}

fn strings(value: Option<&Value>) -> Vec<String> {
    value
        .and_then(Value::as_array)
        .map(|list| {
            list.iter()
                .map(|v| v.as_str().unwrap_or_default().to_string())
                .collect()
        })
        .unwrap_or_default()
}

/// Go's `%#v` of a `[]string`.
fn go_strings(list: &[String]) -> String {
    let items: Vec<String> = list.iter().map(|s| format!("{s:?}")).collect();
    format!("[]string{{{}}}", items.join(", "))
}

fn invalid(field: &str, shown: &str, detail: &str) -> Cause {
    Cause {
        reason: "FieldValueInvalid",
        field: field.to_string(),
        message: format!("Invalid value: {shown}: {detail}"),
    }
}

fn not_supported(field: &str, value: &str, supported: &[&str]) -> Cause {
    let supported: Vec<String> = supported.iter().map(|s| format!("{s:?}")).collect();
    Cause {
        reason: "FieldValueNotSupported",
        field: field.to_string(),
        message: format!(
            "Unsupported value: {value:?}: supported values: {}",
            supported.join(", ")
        ),
    }
}

fn rules(object: &Value, namespaced: bool, causes: &mut Vec<Cause>) {
    let Some(list) = object.get("rules").and_then(Value::as_array) else {
        return;
    };
    for (i, rule) in list.iter().enumerate() {
        let at = format!("rules[{i}]");
        let verbs = strings(rule.get("verbs"));
        let groups = strings(rule.get("apiGroups"));
        let resources = strings(rule.get("resources"));
        let names = strings(rule.get("resourceNames"));
        let urls = strings(rule.get("nonResourceURLs"));
        if verbs.is_empty() {
            causes.push(Cause::required(
                &format!("{at}.verbs"),
                "verbs must contain at least one value",
            ));
        }
        if !urls.is_empty() {
            let field = format!("{at}.nonResourceURLs");
            if namespaced {
                causes.push(invalid(
                    &field,
                    &go_strings(&urls),
                    "namespaced rules cannot apply to non-resource URLs",
                ));
            }
            if !groups.is_empty() || !resources.is_empty() || !names.is_empty() {
                causes.push(invalid(
                    &field,
                    &go_strings(&urls),
                    "rules cannot apply to both regular resources and non-resource URLs",
                ));
            }
            continue;
        }
        if groups.is_empty() {
            causes.push(Cause::required(
                &format!("{at}.apiGroups"),
                "resource rules must supply at least one api group",
            ));
        }
        if resources.is_empty() {
            causes.push(Cause::required(
                &format!("{at}.resources"),
                "resource rules must supply at least one resource",
            ));
        }
    }
}

fn aggregation_rule(object: &Value, causes: &mut Vec<Cause>) {
    let Some(rule) = object.get("aggregationRule").filter(|r| !r.is_null()) else {
        return;
    };
    let selectors = rule
        .get("clusterRoleSelectors")
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or_default();
    if selectors.is_empty() {
        causes.push(Cause::required(
            "aggregationRule.clusterRoleSelectors",
            "at least one clusterRoleSelector required if aggregationRule is non-nil",
        ));
    }
    for (i, selector) in selectors.iter().enumerate() {
        if crate::kube::selectors::LabelSelector::from_object(Some(selector)).is_err() {
            causes.push(invalid(
                &format!("aggregationRule.clusterRoleSelectors[{i}]"),
                &selector.to_string(),
                "invalid label selector.",
            ));
        }
    }
}

/// kube-apiserver's RBAC names: valid path segments.
fn name_problems(name: &str) -> Vec<String> {
    let mut out = Vec::new();
    if name == "." || name == ".." {
        out.push(format!("may not be '{name}'"));
    }
    for bad in ["/", "%"] {
        if name.contains(bad) {
            out.push(format!("may not contain '{bad}'"));
        }
    }
    out
}

fn text<'a>(value: &'a Value, pointer: &str) -> &'a str {
    value.pointer(pointer).and_then(Value::as_str).unwrap_or("")
}

fn binding(object: &Value, old: Option<&Value>, namespaced: bool, causes: &mut Vec<Cause>) {
    let api_group = text(object, "/roleRef/apiGroup");
    if api_group != GROUP {
        causes.push(not_supported("roleRef.apiGroup", api_group, &[GROUP]));
    }
    let kind = text(object, "/roleRef/kind");
    let kinds: &[&str] = if namespaced {
        &["Role", "ClusterRole"]
    } else {
        &["ClusterRole"]
    };
    if !kinds.contains(&kind) {
        causes.push(not_supported("roleRef.kind", kind, kinds));
    }
    let name = text(object, "/roleRef/name");
    if name.is_empty() {
        causes.push(Cause::required("roleRef.name", ""));
    } else {
        for problem in name_problems(name) {
            causes.push(Cause::invalid(
                "roleRef.name",
                &Value::String(name.into()),
                &problem,
            ));
        }
    }
    if let Some(subjects) = object.get("subjects").and_then(Value::as_array) {
        for (i, subject) in subjects.iter().enumerate() {
            subject_causes(subject, namespaced, &format!("subjects[{i}]"), causes);
        }
    }
    if let Some(old) = old {
        let reference = |o: &Value| {
            (
                text(o, "/roleRef/apiGroup").to_string(),
                text(o, "/roleRef/kind").to_string(),
                text(o, "/roleRef/name").to_string(),
            )
        };
        if reference(old) != reference(object) {
            let (g, k, n) = reference(object);
            causes.push(invalid(
                "roleRef",
                &format!("rbac.RoleRef{{APIGroup:{g:?}, Kind:{k:?}, Name:{n:?}}}"),
                "cannot change roleRef",
            ));
        }
    }
}

fn subject_causes(subject: &Value, namespaced: bool, at: &str, causes: &mut Vec<Cause>) {
    let name = text(subject, "/name");
    let api_group = text(subject, "/apiGroup");
    if name.is_empty() {
        causes.push(Cause::required(&format!("{at}.name"), ""));
    }
    match text(subject, "/kind") {
        "ServiceAccount" => {
            if !name.is_empty() && !super::validation::is_dns1123_subdomain(name) {
                causes.push(Cause::invalid(
                    &format!("{at}.name"),
                    &Value::String(name.into()),
                    "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')",
                ));
            }
            if !api_group.is_empty() {
                causes.push(not_supported(&format!("{at}.apiGroup"), api_group, &[""]));
            }
            if !namespaced && text(subject, "/namespace").is_empty() {
                causes.push(Cause::required(&format!("{at}.namespace"), ""));
            }
        }
        "User" | "Group" => {
            if api_group != GROUP {
                causes.push(not_supported(
                    &format!("{at}.apiGroup"),
                    api_group,
                    &[GROUP],
                ));
            }
        }
        other => causes.push(not_supported(
            &format!("{at}.kind"),
            other,
            &["ServiceAccount", "User", "Group"],
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn messages(kind: &str, old: Option<&Value>, object: Value) -> Vec<String> {
        causes(kind, old, &object)
            .into_iter()
            .map(|c| format!("{}: {}", c.field, c.message))
            .collect()
    }

    #[test]
    fn rules_as_kube_apiserver_checks_them() {
        assert_eq!(
            messages(
                "Role",
                None,
                json!({"rules": [{"verbs": [], "apiGroups": [""], "resources": ["pods"]}]})
            ),
            ["rules[0].verbs: Required value: verbs must contain at least one value"]
        );
        assert_eq!(
            messages(
                "Role",
                None,
                json!({"rules": [{"verbs": ["get"], "nonResourceURLs": ["/x"]}]})
            ),
            [
                r#"rules[0].nonResourceURLs: Invalid value: []string{"/x"}: namespaced rules cannot apply to non-resource URLs"#
            ]
        );
        assert_eq!(
            messages(
                "ClusterRole",
                None,
                json!({"rules": [{"verbs": ["get"], "resources": ["pods"], "nonResourceURLs": ["/x"]}]})
            ),
            [
                r#"rules[0].nonResourceURLs: Invalid value: []string{"/x"}: rules cannot apply to both regular resources and non-resource URLs"#
            ]
        );
        assert_eq!(
            messages("ClusterRole", None, json!({"rules": [{"verbs": ["get"]}]})),
            [
                "rules[0].apiGroups: Required value: resource rules must supply at least one api group",
                "rules[0].resources: Required value: resource rules must supply at least one resource"
            ]
        );
        assert_eq!(
            messages("ClusterRole", None, json!({"aggregationRule": {"clusterRoleSelectors": []}})),
            ["aggregationRule.clusterRoleSelectors: Required value: at least one clusterRoleSelector required if aggregationRule is non-nil"]
        );
        assert!(messages(
            "ClusterRole",
            None,
            json!({"rules": [{"verbs": ["get"], "nonResourceURLs": ["/healthz"]}]})
        )
        .is_empty());
    }

    #[test]
    fn bindings_as_kube_apiserver_checks_them() {
        let good = json!({
            "roleRef": {"apiGroup": GROUP, "kind": "Role", "name": "r"},
            "subjects": [{"kind": "User", "name": "u", "apiGroup": GROUP},
                         {"kind": "ServiceAccount", "name": "sa"}]});
        assert!(messages("RoleBinding", None, good.clone()).is_empty());
        assert_eq!(
            messages("ClusterRoleBinding", None, good.clone()),
            [
                r#"roleRef.kind: Unsupported value: "Role": supported values: "ClusterRole""#,
                "subjects[1].namespace: Required value"
            ]
        );
        let mut changed = good.clone();
        changed["roleRef"]["name"] = json!("other");
        assert_eq!(
            messages("RoleBinding", Some(&good), changed),
            [
                r#"roleRef: Invalid value: rbac.RoleRef{APIGroup:"rbac.authorization.k8s.io", Kind:"Role", Name:"other"}: cannot change roleRef"#
            ]
        );
        assert_eq!(
            messages(
                "RoleBinding",
                None,
                json!({
                "roleRef": {"apiGroup": "x", "kind": "Role", "name": "a/b"},
                "subjects": [{"kind": "Robot", "name": ""}]})
            ),
            [
                r#"roleRef.apiGroup: Unsupported value: "x": supported values: "rbac.authorization.k8s.io""#,
                r#"roleRef.name: Invalid value: "a/b": may not contain '/'"#,
                "subjects[0].name: Required value",
                r#"subjects[0].kind: Unsupported value: "Robot": supported values: "ServiceAccount", "User", "Group""#
            ]
        );
    }
}
