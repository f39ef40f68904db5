//! A CustomResourceDefinition's write: its defaults (singular and list kind, `None`
//! conversion), its validation as kube-apiserver words it (names, scope, versions with exactly
//! one storage version, structural schemas, subresources, printer columns), and its status,
//! written here by the server that stores it: the accepted names and the `NamesAccepted` and
//! `Established` conditions. Names that collide with a built-in kind or another definition of
//! the same group are not accepted (`NamesAccepted=False` with kube-apiserver's reason, e.g.
//! `PluralConflict`), and such a definition is stored but not served.

use serde_json::{json, Map, Value};

use super::schema::{not_supported, Schema};
use super::CRDS;
use crate::api::meta::now_rfc3339;
use crate::api::status::{ApiError, Cause};
use crate::api::validation::is_dns1123_subdomain;
use crate::api::ApiContext;
use crate::kube::resources::{ResourceInfo, RESOURCES};

/// The finalizer that keeps a deleted definition until its objects are gone (added by its
/// deletion, `write::deletion`).
pub const CLEANUP_FINALIZER: &str = "customresourcecleanup.apiextensions.k8s.io";

const DNS1035_MSG: &str = "a DNS-1035 label must consist of lower case alphanumeric characters or '-', start with an alphabetic character, and end with an alphanumeric character (e.g. 'my-name',  or 'abc-123', regex used for validation is '[a-z]([-a-z0-9]*[a-z0-9])?')";
const APPROVAL: &str = "api-approved.kubernetes.io";
const COLUMN_TYPES: &[&str] = &["integer", "number", "string", "boolean", "date"];

fn is_dns1035_label(s: &str) -> bool {
    s.len() <= 63
        && s.starts_with(|c: char| c.is_ascii_lowercase())
        && !s.ends_with('-')
        && s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
}

fn text<'v>(v: &'v Value, pointer: &str) -> &'v str {
    v.pointer(pointer).and_then(Value::as_str).unwrap_or("")
}

/// Prepares a definition about to be stored: defaults, validation (422 with every cause),
/// then the status this server writes. `old` is the stored version on update.
pub fn prepare(
    ctx: &ApiContext,
    info: &ResourceInfo,
    name: &str,
    old: Option<&Value>,
    object: &mut Value,
) -> Result<(), ApiError> {
    apply_defaults(object);
    let causes = validate(name, object);
    if !causes.is_empty() {
        return Err(ApiError::invalid(info, name, causes));
    }
    write_status(ctx, name, old, object);
    Ok(())
}

fn apply_defaults(object: &mut Value) {
    let kind = text(object, "/spec/names/kind").to_string();
    if let Some(names) = object
        .pointer_mut("/spec/names")
        .and_then(Value::as_object_mut)
    {
        if !names.get("singular").is_some_and(|s| s != "") && !kind.is_empty() {
            names.insert("singular".into(), json!(kind.to_lowercase()));
        }
        if !names.get("listKind").is_some_and(|s| s != "") && !kind.is_empty() {
            names.insert("listKind".into(), json!(format!("{kind}List")));
        }
    }
    if let Some(spec) = object.get_mut("spec").and_then(Value::as_object_mut) {
        spec.entry("conversion")
            .or_insert_with(|| json!({"strategy": "None"}));
    }
}

/// Every way `object` is not a valid definition named `name`.
pub fn validate(name: &str, object: &Value) -> Vec<Cause> {
    let mut out = Vec::new();
    let group = text(object, "/spec/group");
    let plural = text(object, "/spec/names/plural");
    if name != format!("{plural}.{group}") {
        out.push(Cause::invalid(
            "metadata.name",
            &json!(name),
            "must be spec.names.plural+\".\"+spec.group",
        ));
    }
    if group.is_empty() {
        out.push(Cause::required("spec.group", ""));
    } else if !is_dns1123_subdomain(group) {
        out.push(Cause::invalid("spec.group", &json!(group), "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')"));
    } else if !group.contains('.') {
        out.push(Cause::invalid(
            "spec.group",
            &json!(group),
            "should be a domain with at least one dot",
        ));
    }
    let protected = ["k8s.io", "kubernetes.io"]
        .iter()
        .any(|p| group == *p || group.ends_with(&format!(".{p}")));
    if protected
        && object
            .pointer("/metadata/annotations")
            .and_then(|a| a.get(APPROVAL))
            .is_none()
    {
        out.push(Cause::required(
            &format!("metadata.annotations[{APPROVAL}]"),
            &format!("protected groups must have approval annotation {APPROVAL:?}, see https://github.com/kubernetes/enhancements/pull/1111"),
        ));
    }
    match text(object, "/spec/scope") {
        "" => out.push(Cause::required("spec.scope", "")),
        "Cluster" | "Namespaced" => {}
        other => out.push(not_supported(
            "spec.scope",
            &json!(other),
            &["Cluster", "Namespaced"],
        )),
    }
    match text(object, "/spec/conversion/strategy") {
        "" | "None" => {}
        // Objects are only ever converted by rewriting apiVersion (`conversion`): a definition
        // that needs a webhook to convert would be served wrongly, so it is refused.
        "Webhook" => out.push(Cause::forbidden(
            "spec.conversion.strategy",
            "conversion webhooks are not supported by this server; only \"None\" conversion is",
        )),
        other => out.push(not_supported(
            "spec.conversion.strategy",
            &json!(other),
            &["None", "Webhook"],
        )),
    }
    names(object, &mut out);
    versions(object, &mut out);
    out
}

fn names(object: &Value, out: &mut Vec<Cause>) {
    let label = |field: &str, value: &str, required: bool, out: &mut Vec<Cause>| {
        if value.is_empty() {
            if required {
                out.push(Cause::required(field, ""));
            }
        } else if !is_dns1035_label(value) {
            out.push(Cause::invalid(field, &json!(value), DNS1035_MSG));
        }
    };
    label(
        "spec.names.plural",
        text(object, "/spec/names/plural"),
        true,
        out,
    );
    label(
        "spec.names.singular",
        text(object, "/spec/names/singular"),
        true,
        out,
    );
    for (i, short) in object
        .pointer("/spec/names/shortNames")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .enumerate()
    {
        label(
            &format!("spec.names.shortNames[{i}]"),
            short.as_str().unwrap_or(""),
            true,
            out,
        );
    }
    for (field, pointer) in [
        ("spec.names.kind", "/spec/names/kind"),
        ("spec.names.listKind", "/spec/names/listKind"),
    ] {
        let kind = text(object, pointer);
        if kind.is_empty() {
            out.push(Cause::required(field, ""));
        } else if !is_dns1035_label(&kind.to_lowercase()) {
            out.push(Cause::invalid(
                field,
                &json!(kind),
                &format!("may have mixed case, but should otherwise match: {DNS1035_MSG}"),
            ));
        }
    }
}

fn versions(object: &Value, out: &mut Vec<Cause>) {
    let Some(list) = object.pointer("/spec/versions").and_then(Value::as_array) else {
        out.push(Cause::required(
            "spec.versions",
            "must have exactly one version marked as storage version",
        ));
        return;
    };
    let names: Vec<&str> = list.iter().map(|v| text(v, "/name")).collect();
    let storage = list
        .iter()
        .filter(|v| v.get("storage").and_then(Value::as_bool) == Some(true))
        .count();
    if storage != 1 {
        out.push(Cause::invalid(
            "spec.versions",
            &json!(names),
            "must have exactly one version marked as storage version",
        ));
    }
    if !list
        .iter()
        .any(|v| v.get("served").and_then(Value::as_bool) == Some(true))
    {
        out.push(Cause::invalid(
            "spec.versions",
            &json!(names),
            "must have at least one served version",
        ));
    }
    for (i, v) in list.iter().enumerate() {
        let path = format!("spec.versions[{i}]");
        let name = text(v, "/name");
        if name.is_empty() {
            out.push(Cause::required(&format!("{path}.name"), ""));
        } else if !is_dns1035_label(name) {
            out.push(Cause::invalid(
                &format!("{path}.name"),
                &json!(name),
                DNS1035_MSG,
            ));
        } else if names[..i].contains(&name) {
            out.push(Cause::invalid(
                &format!("{path}.name"),
                &json!(name),
                "must appear only once",
            ));
        }
        match v.pointer("/schema/openAPIV3Schema") {
            None | Some(Value::Null) => out.push(Cause::required(
                &format!("{path}.schema.openAPIV3Schema"),
                "schemas are required",
            )),
            Some(raw) => {
                Schema::parse(raw, &format!("{path}.schema.openAPIV3Schema"), out);
            }
        }
        if let Some(scale) = v.pointer("/subresources/scale") {
            let scale_path = format!("{path}.subresources.scale");
            json_path_under(scale, "specReplicasPath", ".spec.", true, &scale_path, out);
            json_path_under(
                scale,
                "statusReplicasPath",
                ".status.",
                true,
                &scale_path,
                out,
            );
            json_path_under(scale, "labelSelectorPath", "", false, &scale_path, out);
        }
        for (c, col) in v
            .get("additionalPrinterColumns")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .enumerate()
        {
            let col_path = format!("{path}.additionalPrinterColumns[{c}]");
            if text(col, "/name").is_empty() {
                out.push(Cause::required(&format!("{col_path}.name"), ""));
            }
            match text(col, "/type") {
                "" => out.push(Cause::required(&format!("{col_path}.type"), "")),
                t if COLUMN_TYPES.contains(&t) => {}
                t => out.push(not_supported(
                    &format!("{col_path}.type"),
                    &json!(t),
                    COLUMN_TYPES,
                )),
            }
            if text(col, "/jsonPath").is_empty() {
                out.push(Cause::required(&format!("{col_path}.jsonPath"), ""));
            }
        }
    }
}

/// A scale path: required or optional, and (when `under` is given) inside that part.
fn json_path_under(
    scale: &Value,
    field: &str,
    under: &str,
    required: bool,
    path: &str,
    out: &mut Vec<Cause>,
) {
    let field_path = format!("{path}.{field}");
    match scale.get(field).and_then(Value::as_str) {
        None | Some("") if required => out.push(Cause::required(&field_path, "")),
        None | Some("") => {}
        Some(p) if !p.starts_with('.') => out.push(Cause::invalid(
            &field_path,
            &json!(p),
            "must be a simple json path starting with .",
        )),
        Some(p) if !under.is_empty() && !p.starts_with(under) => out.push(Cause::invalid(
            &field_path,
            &json!(p),
            &format!(
                "should be a json path under {}",
                under.trim_end_matches('.')
            ),
        )),
        Some(_) => {}
    }
}

/// A names conflict: kube-apiserver's condition reason and message.
fn conflict(ctx: &ApiContext, name: &str, object: &Value) -> Option<(String, String)> {
    let group = text(object, "/spec/group");
    let names = object.pointer("/spec/names")?;
    let plural = text(names, "/plural");
    let singular = text(names, "/singular");
    let kind = text(names, "/kind");
    let list_kind = text(names, "/listKind");
    let shorts: Vec<&str> = names
        .get("shortNames")
        .and_then(Value::as_array)
        .map(|a| a.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    let in_use = |what: &str| format!("{what:?} is already in use");
    // Built-in kinds of the group, then the other definitions of the group (as accepted).
    let mut taken: Vec<(String, String, String, Vec<String>)> = RESOURCES
        .iter()
        .filter(|r| r.group == group)
        .map(|r| {
            (
                r.plural.to_string(),
                r.singular.to_string(),
                r.kind.to_string(),
                r.short_names.iter().map(|s| s.to_string()).collect(),
            )
        })
        .collect();
    let snapshot = ctx.store.snapshot();
    for other in snapshot.range(CRDS, None, None) {
        if other.key.name == name {
            continue;
        }
        let other = other.value();
        if text(&other, "/spec/group") != group {
            continue;
        }
        let Some(accepted) = other.pointer("/status/acceptedNames") else {
            continue;
        };
        taken.push((
            text(accepted, "/plural").to_string(),
            text(accepted, "/singular").to_string(),
            text(accepted, "/kind").to_string(),
            accepted
                .get("shortNames")
                .and_then(Value::as_array)
                .map(|a| {
                    a.iter()
                        .filter_map(Value::as_str)
                        .map(str::to_string)
                        .collect()
                })
                .unwrap_or_default(),
        ));
    }
    for (t_plural, t_singular, t_kind, t_shorts) in &taken {
        let words = [t_plural.as_str(), t_singular.as_str()];
        if words.contains(&plural) {
            return Some(("PluralConflict".into(), in_use(plural)));
        }
        if words.contains(&singular) {
            return Some(("SingularConflict".into(), in_use(singular)));
        }
        if let Some(s) = shorts
            .iter()
            .find(|s| t_shorts.iter().any(|t| t == *s) || words.contains(s))
        {
            return Some(("ShortNamesConflict".into(), in_use(s)));
        }
        if t_kind == kind {
            return Some(("KindConflict".into(), in_use(kind)));
        }
        if *t_kind == list_kind || format!("{t_kind}List") == list_kind {
            return Some(("ListKindConflict".into(), in_use(list_kind)));
        }
    }
    None
}

/// Writes `status`: the accepted names, `NamesAccepted`, `Established` and the stored versions.
fn write_status(ctx: &ApiContext, name: &str, old: Option<&Value>, object: &mut Value) {
    let now = now_rfc3339();
    let old_status = old
        .and_then(|o| o.get("status"))
        .cloned()
        .unwrap_or(json!({}));
    let was_established = old.is_some_and(super::registry::established);
    let (accepted, established) = match conflict(ctx, name, object) {
        None => (
            condition("NamesAccepted", true, "NoConflicts", "no conflicts found"),
            condition(
                "Established",
                true,
                "InitialNamesAccepted",
                "the initial names have been accepted",
            ),
        ),
        Some((reason, message)) => (
            condition("NamesAccepted", false, &reason, &message),
            if was_established {
                condition(
                    "Established",
                    true,
                    "InitialNamesAccepted",
                    "the initial names have been accepted",
                )
            } else {
                condition(
                    "Established",
                    false,
                    "NotAccepted",
                    "not all names are accepted",
                )
            },
        ),
    };
    let names_ok = accepted.get("status").is_some_and(|s| s == "True");
    let accepted_names = if names_ok {
        object.pointer("/spec/names").cloned().unwrap_or(json!({}))
    } else {
        old_status
            .get("acceptedNames")
            .cloned()
            .unwrap_or_else(|| json!({"plural": "", "kind": ""}))
    };
    let old_conditions = old_status
        .get("conditions")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let conditions: Vec<Value> = [accepted, established]
        .into_iter()
        .map(|mut c| {
            let same = old_conditions
                .iter()
                .find(|o| o["type"] == c["type"] && o["status"] == c["status"]);
            c["lastTransitionTime"] = match same.and_then(|o| o.get("lastTransitionTime")) {
                Some(t) => t.clone(),
                None => json!(now),
            };
            c
        })
        .collect();
    let mut stored: Vec<Value> = old_status
        .get("storedVersions")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let storage = object
        .pointer("/spec/versions")
        .and_then(Value::as_array)
        .and_then(|vs| vs.iter().find(|v| v["storage"] == true))
        .and_then(|v| v.get("name").cloned());
    if let Some(storage) = storage {
        if !stored.contains(&storage) {
            stored.push(storage);
        }
    }
    let mut status = Map::new();
    status.insert("conditions".into(), Value::Array(conditions));
    status.insert("acceptedNames".into(), accepted_names);
    status.insert("storedVersions".into(), Value::Array(stored));
    object["status"] = Value::Object(status);
}

fn condition(ty: &str, ok: bool, reason: &str, message: &str) -> Value {
    json!({"type": ty, "status": if ok { "True" } else { "False" }, "lastTransitionTime": null,
           "reason": reason, "message": message})
}

#[cfg(test)]
mod tests {
    use super::*;

    fn crd() -> Value {
        json!({"metadata": {"name": "widgets.example.com"},
               "spec": {"group": "example.com", "scope": "Namespaced",
                        "names": {"plural": "widgets", "kind": "Widget", "singular": "widget", "listKind": "WidgetList"},
                        "versions": [{"name": "v1", "served": true, "storage": true,
                                      "schema": {"openAPIV3Schema": {"type": "object"}}}]}})
    }

    fn messages(object: &Value, name: &str) -> Vec<String> {
        validate(name, object)
            .into_iter()
            .map(|c| format!("{}: {}", c.field, c.message))
            .collect()
    }

    #[test]
    fn a_valid_definition_passes() {
        assert_eq!(
            messages(&crd(), "widgets.example.com"),
            Vec::<String>::new()
        );
    }

    #[test]
    fn bad_definitions_are_refused_with_kube_apiservers_words() {
        let mut two_storage = crd();
        two_storage["spec"]["versions"] = json!([
            {"name": "v1", "served": true, "storage": true, "schema": {"openAPIV3Schema": {"type": "object"}}},
            {"name": "v2", "served": true, "storage": true, "schema": {"openAPIV3Schema": {"type": "object"}}}]);
        let mut core_pods = crd();
        core_pods["spec"]["group"] = json!("");
        core_pods["spec"]["names"]["plural"] = json!("pods");
        let mut no_schema = crd();
        no_schema["spec"]["versions"][0]
            .as_object_mut()
            .unwrap()
            .remove("schema");
        let mut protected = crd();
        protected["spec"]["group"] = json!("networking.k8s.io");
        let cases = [
            (two_storage, "widgets.example.com", "spec.versions: Invalid value: [\"v1\",\"v2\"]: must have exactly one version marked as storage version"),
            (crd(), "other.example.com", "metadata.name: Invalid value: \"other.example.com\": must be spec.names.plural+\".\"+spec.group"),
            (core_pods, "pods.", "spec.group: Required value"),
            (no_schema, "widgets.example.com", "spec.versions[0].schema.openAPIV3Schema: Required value: schemas are required"),
            (protected, "widgets.networking.k8s.io", "metadata.annotations[api-approved.kubernetes.io]: Required value: protected groups must have approval annotation \"api-approved.kubernetes.io\", see https://github.com/kubernetes/enhancements/pull/1111"),
        ];
        for (object, name, want) in cases {
            let got = messages(&object, name);
            assert!(got.iter().any(|m| m == want), "{want}\n got {got:?}");
        }
    }
}
