//! Write options shared by create, update, patch and delete: validation of `dryRun`,
//! `fieldManager`, `fieldValidation` and `force` (422 naming `CreateOptions`, `UpdateOptions`,
//! `PatchOptions` or `DeleteOptions` in `meta.k8s.io`, as kube-apiserver answers), unknown and
//! duplicate fields per `fieldValidation`, and the `Warning` headers of `Warn`.

use http::{HeaderValue, Response};
use serde_json::{json, Value};

use super::request::ApiRequest;
use super::status::{ApiError, Cause};
use super::ApiBody;
use crate::kube::resources::ResourceInfo;

/// Which options object a request carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Options {
    Create,
    Update,
    /// A patch; `apply` for `application/apply-patch+yaml`.
    Patch {
        apply: bool,
    },
    Delete,
}

impl Options {
    fn kind(self) -> &'static str {
        match self {
            Options::Create => "CreateOptions",
            Options::Update => "UpdateOptions",
            Options::Patch { .. } => "PatchOptions",
            Options::Delete => "DeleteOptions",
        }
    }
}

/// Validates the request's write options.
pub fn check(req: &ApiRequest, options: Options) -> Result<(), ApiError> {
    let q = &req.query;
    let mut causes = Vec::new();
    match options {
        Options::Patch { apply: true } if q.field_manager.as_deref().unwrap_or("").is_empty() => {
            causes.push(Cause::required(
                "fieldManager",
                "is required for apply patch",
            ));
        }
        Options::Patch { apply: false } if q.force.is_some() => causes.push(Cause::forbidden(
            "force",
            "may not be specified for non-apply patch",
        )),
        _ => {}
    }
    if options != Options::Delete {
        if let Some(manager) = q.field_manager.as_deref() {
            if manager.chars().count() > 128 {
                causes.push(Cause {
                    reason: "FieldValueTooLong",
                    field: "fieldManager".into(),
                    message: "Too long: may not be more than 128 bytes".into(),
                });
            }
            if let Some((i, c)) = manager.char_indices().find(|(_, c)| c.is_control()) {
                causes.push(Cause::invalid(
                    "fieldManager",
                    &json!(manager),
                    &format!("invalid character U+{:04X} (at position {i})", c as u32),
                ));
            }
        }
    }
    if q.dry_run_values.iter().any(|v| v != "All") {
        let listed: Vec<String> = q.dry_run_values.iter().map(|v| format!("{v:?}")).collect();
        causes.push(not_supported(
            "dryRun",
            &format!("[]string{{{}}}", listed.join(", ")),
            "\"All\"",
        ));
    }
    if let Some(v) = q.field_validation.as_deref() {
        if !matches!(v, "Ignore" | "Warn" | "Strict") && options != Options::Delete {
            causes.push(not_supported(
                "fieldValidation",
                &format!("{v:?}"),
                "\"\", \"Ignore\", \"Strict\", \"Warn\"",
            ));
        }
    }
    if causes.is_empty() {
        return Ok(());
    }
    Err(ApiError::Invalid {
        kind: options.kind().into(),
        group: "meta.k8s.io".into(),
        name: String::new(),
        causes,
    })
}

fn not_supported(field: &str, shown: &str, supported: &str) -> Cause {
    Cause {
        reason: "FieldValueNotSupported",
        field: field.into(),
        message: format!("Unsupported value: {shown}: supported values: {supported}"),
    }
}

/// Applies `fieldValidation` to `object` (a whole object of kind `info`) and, for JSON
/// bodies, to the request body's duplicate fields: Strict answers 400 listing them all, Warn
/// queues one `Warning` per field, Ignore (the default) accepts them.
pub fn check_fields(req: &ApiRequest, info: &ResourceInfo, object: &Value) -> Result<(), ApiError> {
    let mode = req.query.field_validation.as_deref();
    if !matches!(mode, Some("Strict" | "Warn")) {
        return Ok(());
    }
    let unknown = crate::api::openapi::unknown_fields(info.group, info.version, info.kind, object)
        .or_else(|| {
            let kind = req.ctx.custom_kinds.of(info)?;
            Some(crate::api::crd::objects::unknown_fields(
                &kind, info, object,
            ))
        });
    let mut problems: Vec<String> = unknown
        .unwrap_or_default()
        .iter()
        .map(|f| format!("unknown field {f:?}"))
        .collect();
    if req.body.iter().find(|b| !b.is_ascii_whitespace()) == Some(&b'{') {
        problems.extend(
            duplicate_fields(&req.body)
                .iter()
                .map(|f| format!("duplicate field {f:?}")),
        );
    }
    if problems.is_empty() {
        return Ok(());
    }
    if mode == Some("Strict") {
        return Err(ApiError::BadRequest(format!(
            "{kind} in version \"{version}\" cannot be handled as a {kind}: strict decoding error: {}",
            problems.join(", "),
            kind = info.kind,
            version = info.version
        )));
    }
    if let Ok(mut warnings) = req.warnings.lock() {
        for p in problems {
            if !warnings.contains(&p) {
                warnings.push(p);
            }
        }
    }
    Ok(())
}

/// Dotted paths of object keys that appear twice in the same JSON object of `body`
/// (`serde_json` keeps the last silently). Array elements do not add a path step.
pub fn duplicate_fields(body: &[u8]) -> Vec<String> {
    /// One open container.
    struct Frame {
        is_object: bool,
        keys: std::collections::HashSet<String>,
        /// The key whose value is being read (objects).
        key: Option<String>,
        /// Whether opening this container added a step to the path.
        stepped: bool,
    }
    let mut out = Vec::new();
    let mut stack: Vec<Frame> = Vec::new();
    let mut path: Vec<String> = Vec::new();
    let mut i = 0;
    while i < body.len() {
        match body[i] {
            b'"' => {
                let start = i;
                let mut j = i + 1;
                while j < body.len() && body[j] != b'"' {
                    if body[j] == b'\\' {
                        j += 1;
                    }
                    j += 1;
                }
                i = j + 1;
                let mut k = i;
                while k < body.len() && body[k].is_ascii_whitespace() {
                    k += 1;
                }
                let in_object = stack.last().is_some_and(|f| f.is_object);
                if in_object && body.get(k) == Some(&b':') {
                    let key = serde_json::from_slice::<String>(&body[start..i.min(body.len())])
                        .unwrap_or_default();
                    if let Some(frame) = stack.last_mut() {
                        if !frame.keys.insert(key.clone()) {
                            let mut full = path.clone();
                            full.push(key.clone());
                            out.push(full.join("."));
                        }
                        frame.key = Some(key);
                    }
                    i = k + 1;
                }
                continue;
            }
            b'{' | b'[' => {
                let step = stack
                    .last()
                    .filter(|f| f.is_object)
                    .and_then(|f| f.key.clone());
                let stepped = step.is_some();
                path.extend(step);
                stack.push(Frame {
                    is_object: body[i] == b'{',
                    keys: Default::default(),
                    key: None,
                    stepped,
                });
            }
            b'}' | b']' if stack.pop().is_some_and(|f| f.stepped) => {
                path.pop();
            }
            _ => {}
        }
        i += 1;
    }
    out
}

/// Adds the queued `Warning` headers to a response.
pub fn add_warnings(
    req: &ApiRequest,
    result: Result<Response<ApiBody>, ApiError>,
) -> Result<Response<ApiBody>, ApiError> {
    let mut response = result?;
    if let Ok(warnings) = req.warnings.lock() {
        for w in warnings.iter() {
            let text = format!("299 - {}", serde_json::Value::String(w.clone()));
            if let Ok(value) = HeaderValue::from_str(&text) {
                response.headers_mut().append(http::header::WARNING, value);
            }
        }
    }
    Ok(response)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn duplicates_found_with_paths() {
        let body = br#"{"a": 1, "spec": {"x": [{"k": 1, "k": 2}], "x": "s\"x", "y": {}}, "a": 2, "spec": {}}"#;
        assert_eq!(
            duplicate_fields(body),
            vec!["spec.x.k", "spec.x", "a", "spec"]
        );
        assert!(duplicate_fields(br#"{"a": {"b": 1}, "c": {"b": 2}}"#).is_empty());
    }
}
