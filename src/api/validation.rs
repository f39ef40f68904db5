//! Checks on incoming objects: type and identity against the URL (400), names per kind and
//! other field rules (422 Invalid with field causes).

use serde_json::{json, Value};

use super::status::{ApiError, Cause};
use crate::kube::resources::ResourceInfo;

const LABEL_MSG: &str = "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')";
const SUBDOMAIN_MSG: &str = "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')";

pub fn is_dns1123_label(s: &str) -> bool {
    s.len() <= 63 && is_label_shaped(s)
}

/// `[a-z0-9]([-a-z0-9]*[a-z0-9])?` without a length limit (subdomain parts have none).
fn is_label_shaped(s: &str) -> bool {
    !s.is_empty()
        && s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !s.starts_with('-')
        && !s.ends_with('-')
}

pub fn is_dns1123_subdomain(s: &str) -> bool {
    !s.is_empty() && s.len() <= 253 && s.split('.').all(is_label_shaped)
}

/// Problems with `name` for kind `info` (empty when valid).
pub fn name_causes(info: &ResourceInfo, name: &str) -> Vec<Cause> {
    let value = json!(name);
    let mut causes = Vec::new();
    match (info.group, info.plural) {
        ("", "namespaces") | ("", "services") => {
            if name.len() > 63 {
                causes.push(Cause::invalid(
                    "metadata.name",
                    &value,
                    "must be no more than 63 characters",
                ));
            }
            if !is_dns1123_label(name) {
                causes.push(Cause::invalid("metadata.name", &value, LABEL_MSG));
            }
        }
        (_, "events") | ("rbac.authorization.k8s.io", _) => {
            // Events and RBAC objects (`system:node`) only need a valid path segment.
            for bad in ["/", "%"] {
                if name.contains(bad) {
                    causes.push(Cause::invalid(
                        "metadata.name",
                        &value,
                        &format!("may not contain '{bad}'"),
                    ));
                }
            }
            if name == "." || name == ".." {
                causes.push(Cause::invalid(
                    "metadata.name",
                    &value,
                    &format!("may not be '{name}'"),
                ));
            }
        }
        _ => {
            if name.len() > 253 {
                causes.push(Cause::invalid(
                    "metadata.name",
                    &value,
                    "must be no more than 253 characters",
                ));
            }
            if !is_dns1123_subdomain(name) {
                causes.push(Cause::invalid("metadata.name", &value, SUBDOMAIN_MSG));
            }
        }
    }
    causes
}

/// Fails unless `name` is valid for `info`.
pub fn check_name(info: &ResourceInfo, name: &str) -> Result<(), ApiError> {
    let causes = name_causes(info, name);
    if causes.is_empty() {
        Ok(())
    } else {
        Err(ApiError::invalid(info, name, causes))
    }
}

/// Checks `kind` and `apiVersion` against the URL's resource and fills them in when absent
/// (upstream decodes with the URL's kind as the default).
/// Rejects values of the wrong JSON type for the kind's schema with 400, as kube-apiserver's
/// decoder does (a string where a map belongs, a number in a ConfigMap's data).
pub fn check_value_types(info: &ResourceInfo, object: &Value) -> Result<(), ApiError> {
    match crate::api::openapi::type_errors(info.group, info.version, info.kind, object) {
        Some(errors) if !errors.is_empty() => Err(ApiError::BadRequest(
            crate::api::openapi::type_error_message(info.kind, info.version, &errors),
        )),
        _ => Ok(()),
    }
}

pub fn check_type(info: &ResourceInfo, object: &mut Value) -> Result<(), ApiError> {
    let want_version = info.api_version();
    match object.get("apiVersion").and_then(Value::as_str) {
        None | Some("") => object["apiVersion"] = json!(want_version),
        Some(v) if v == want_version => {}
        Some(v) => {
            return Err(ApiError::BadRequest(format!(
                "the API version in the data ({v}) does not match the expected API version ({want_version})"
            )))
        }
    }
    match object.get("kind").and_then(Value::as_str) {
        None | Some("") => object["kind"] = json!(info.kind),
        Some(k) if k == info.kind => {}
        Some(k) => {
            return Err(ApiError::BadRequest(format!(
                "the kind in the data ({k}) does not match the expected kind ({})",
                info.kind
            )))
        }
    }
    if object
        .get("metadata")
        .is_some_and(|m| !m.is_object() && !m.is_null())
    {
        return Err(ApiError::BadRequest("metadata must be an object".into()));
    }
    Ok(())
}

/// Makes `metadata.namespace` agree with the URL: filled in when absent, 400 when different,
/// removed for cluster-scoped kinds.
pub fn check_namespace(
    info: &ResourceInfo,
    url_namespace: Option<&str>,
    object: &mut Value,
) -> Result<(), ApiError> {
    let md = super::meta::metadata_mut(object);
    if !info.namespaced {
        md.remove("namespace");
        return Ok(());
    }
    let url_ns = url_namespace.unwrap_or_default();
    match md.get("namespace").and_then(Value::as_str) {
        None | Some("") => {
            md.insert("namespace".into(), json!(url_ns));
        }
        Some(ns) if ns == url_ns => {}
        Some(_) => return Err(ApiError::BadRequest(
            "the namespace of the provided object does not match the namespace sent on the request"
                .into(),
        )),
    }
    Ok(())
}

/// For PUT/PATCH: `metadata.name` must equal the URL's name (filled in when absent).
pub fn check_body_name(object: &mut Value, url_name: &str) -> Result<(), ApiError> {
    let md = super::meta::metadata_mut(object);
    match md.get("name").and_then(Value::as_str) {
        None | Some("") => {
            md.insert("name".into(), json!(url_name));
            Ok(())
        }
        Some(n) if n == url_name => Ok(()),
        Some(n) => Err(ApiError::BadRequest(format!(
            "the name of the object ({n}) does not match the name on the URL ({url_name})"
        ))),
    }
}

/// A qualified name (`[prefix/]name`) as label and annotation keys use.
pub(crate) fn qualified_name_problem(key: &str) -> Option<String> {
    let (prefix, name) = match key.rsplit_once('/') {
        Some((prefix, name)) => (Some(prefix), name),
        None => (None, key),
    };
    if let Some(prefix) = prefix {
        if prefix.is_empty() || !is_dns1123_subdomain(prefix) {
            return Some("prefix part must be a lowercase RFC 1123 subdomain".into());
        }
    }
    if name.is_empty() || name.len() > 63 {
        return Some("name part must be non-empty and no more than 63 characters".into());
    }
    if !is_label_value_shaped(name) {
        return Some("name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character".into());
    }
    None
}

/// A label value: empty, or up to 63 characters of `[A-Za-z0-9_.-]` starting and ending with
/// an alphanumeric character.
fn is_label_value_shaped(value: &str) -> bool {
    let bytes = value.as_bytes();
    value.is_empty()
        || (bytes.len() <= 63
            && bytes[0].is_ascii_alphanumeric()
            && bytes[bytes.len() - 1].is_ascii_alphanumeric()
            && bytes
                .iter()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.')))
}

/// Labels and annotations must be string maps with qualified-name keys; label values must be
/// valid label values.
pub fn check_metadata_maps(
    info: &ResourceInfo,
    name: &str,
    object: &Value,
) -> Result<(), ApiError> {
    let mut causes = Vec::new();
    for field in ["labels", "annotations"] {
        match object.pointer(&format!("/metadata/{field}")) {
            None | Some(Value::Null) => {}
            Some(Value::Object(m)) => {
                for (k, v) in m {
                    if let Some(problem) = qualified_name_problem(k) {
                        causes.push(Cause::invalid(
                            &format!("metadata.{field}"),
                            &Value::String(k.clone()),
                            &problem,
                        ));
                    }
                    match v.as_str() {
                        None => causes.push(Cause::invalid(
                            &format!("metadata.{field}.{k}"),
                            v,
                            "must be a string",
                        )),
                        Some(value) if field == "labels" && !is_label_value_shaped(value) => {
                            causes.push(Cause::invalid(
                                &format!("metadata.labels.{k}"),
                                v,
                                "a valid label value must be 63 characters or less and must be empty or begin and end with an alphanumeric character ([a-z0-9A-Z]) with dashes (-), underscores (_), dots (.), and alphanumerics between",
                            ))
                        }
                        Some(_) => {}
                    }
                }
            }
            Some(other) => causes.push(Cause::invalid(
                &format!("metadata.{field}"),
                other,
                "must be a map of strings",
            )),
        }
    }
    if causes.is_empty() {
        Ok(())
    } else {
        Err(ApiError::invalid(info, name, causes))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kube::resources;

    #[test]
    fn names_per_kind() {
        let cm = resources::find("", "v1", "configmaps").unwrap();
        let ns = resources::find("", "v1", "namespaces").unwrap();
        let ev = resources::find("", "v1", "events").unwrap();
        assert!(name_causes(cm, "a.b-c").is_empty());
        assert!(!name_causes(cm, "Bad_Name").is_empty());
        assert!(!name_causes(cm, "-a").is_empty());
        assert!(!name_causes(cm, &"a".repeat(254)).is_empty());
        assert!(name_causes(cm, &"a".repeat(253)).is_empty());
        assert!(!name_causes(ns, "a.b").is_empty());
        assert!(name_causes(ns, "kube-system").is_empty());
        assert!(name_causes(ev, "pod.17a3b2c1d0e9f8a7").is_empty());
        assert!(name_causes(ev, "Weird_Name").is_empty());
        assert!(!name_causes(ev, "a/b").is_empty());
        let err = check_name(cm, "Bad").unwrap_err();
        assert!(err.to_string().starts_with(
            "ConfigMap \"Bad\" is invalid: metadata.name: Invalid value: \"Bad\": a lowercase RFC 1123 subdomain"
        ));
    }

    #[test]
    fn type_and_identity() {
        let lease = resources::find("coordination.k8s.io", "v1", "leases").unwrap();
        let mut obj = json!({"metadata":{"name":"x"}});
        check_type(lease, &mut obj).unwrap();
        assert_eq!(obj["apiVersion"], "coordination.k8s.io/v1");
        assert_eq!(obj["kind"], "Lease");
        let mut wrong = json!({"apiVersion":"v1","kind":"Lease"});
        assert!(matches!(
            check_type(lease, &mut wrong),
            Err(ApiError::BadRequest(_))
        ));
        let mut wrong = json!({"kind":"ConfigMap"});
        assert!(matches!(
            check_type(lease, &mut wrong),
            Err(ApiError::BadRequest(_))
        ));
        check_namespace(lease, Some("a"), &mut obj).unwrap();
        assert_eq!(obj["metadata"]["namespace"], "a");
        assert!(check_namespace(lease, Some("b"), &mut obj).is_err());
        assert!(check_body_name(&mut obj, "y").is_err());
        assert!(check_body_name(&mut obj, "x").is_ok());
    }
}
