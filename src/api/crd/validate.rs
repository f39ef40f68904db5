//! Validation of a custom object against its version's structural schema, with the field
//! paths and messages kube-apiserver writes (its OpenAPI validator's errors turned into field
//! errors): `spec.replicas: Invalid value: "string": spec.replicas in body must be of type
//! integer: "string"`, `spec.x: Required value`, `Unsupported value` for enums, and so on.
//! The object's `apiVersion`, `kind` and `metadata` are the API's to check, not the schema's.

use serde_json::Value;

use super::schema::{not_supported, shown, Additional, Schema};
use crate::api::status::Cause;

/// Every way `object` breaks `schema` (empty when it follows it).
pub fn validate(schema: &Schema, object: &Value) -> Vec<Cause> {
    let mut out = Vec::new();
    let Some(m) = object.as_object() else {
        return out;
    };
    for name in &schema.required {
        if matches!(name.as_str(), "apiVersion" | "kind" | "metadata") {
            continue;
        }
        if !m.contains_key(name) {
            out.push(Cause::required(name, ""));
        }
    }
    for (name, value) in m {
        if matches!(name.as_str(), "apiVersion" | "kind" | "metadata") {
            continue;
        }
        if let Some(child) = child_schema(schema, name) {
            node(child, value, name, &mut out);
        }
    }
    out
}

/// Every way `value`, found at `path`, breaks the schema node `schema` (a definition's
/// `default` values are checked with it).
pub fn value(schema: &Schema, value: &Value, path: &str) -> Vec<Cause> {
    let mut out = Vec::new();
    node(schema, value, path, &mut out);
    out
}

fn child_schema<'s>(schema: &'s Schema, key: &str) -> Option<&'s Schema> {
    schema.properties.get(key).or(match &schema.additional {
        Additional::Schema(s) => Some(s),
        _ => None,
    })
}

/// The JSON type of a value as the validator names it (an integral number is an integer).
fn type_name(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(n) if n.is_i64() || n.is_u64() => "integer",
        Value::Number(n) if n.as_f64().is_some_and(|f| f.fract() == 0.0) => "integer",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

fn type_error(path: &str, value: &Value, want: &str) -> Cause {
    let actual = type_name(value);
    Cause::invalid(
        path,
        &Value::String(actual.into()),
        &format!("{path} in body must be of type {want}: {actual:?}"),
    )
}

fn node(s: &Schema, value: &Value, path: &str, out: &mut Vec<Cause>) {
    if value.is_null() {
        if !s.nullable && !s.preserve_unknown && (s.ty.is_some() || s.int_or_string) {
            let want = if s.int_or_string {
                "integer,string"
            } else {
                s.ty.as_deref().unwrap_or("")
            };
            out.push(type_error(path, value, want));
        }
        return;
    }
    let actual = type_name(value);
    if s.int_or_string {
        if !matches!(actual, "integer" | "string") {
            out.push(type_error(path, value, "integer,string"));
            return;
        }
    } else if let Some(want) = s.ty.as_deref() {
        let fits = actual == want || (want == "number" && actual == "integer");
        if !fits {
            out.push(type_error(path, value, want));
            return;
        }
    }
    if let Some(allowed) = &s.enumeration {
        if !allowed.contains(value) {
            let listed: Vec<String> = allowed
                .iter()
                .map(|v| {
                    v.as_str()
                        .map(str::to_string)
                        .unwrap_or_else(|| v.to_string())
                })
                .collect();
            let refs: Vec<&str> = listed.iter().map(String::as_str).collect();
            out.push(not_supported(path, value, &refs));
        }
    }
    match value {
        Value::String(text) => string(s, text, value, path, out),
        Value::Number(n) => number(s, n.as_f64().unwrap_or(0.0), value, path, out),
        Value::Array(items) => {
            if let Some(min) = s.min_items.filter(|min| (items.len() as u64) < *min) {
                out.push(Cause::invalid(
                    path,
                    value,
                    &format!("{path} in body should have at least {min} items"),
                ));
            }
            if let Some(max) = s.max_items.filter(|max| (items.len() as u64) > *max) {
                out.push(Cause {
                    reason: "FieldValueTooMany",
                    field: path.to_string(),
                    message: format!("Too many: {}: must have at most {max} items", items.len()),
                });
            }
            if let Some(item_schema) = &s.items {
                for (i, item) in items.iter().enumerate() {
                    node(item_schema, item, &format!("{path}[{i}]"), out);
                }
            }
        }
        Value::Object(m) => {
            for name in &s.required {
                if !m.contains_key(name) {
                    out.push(Cause::required(&format!("{path}.{name}"), ""));
                }
            }
            if let Some(min) = s.min_properties.filter(|min| (m.len() as u64) < *min) {
                out.push(Cause::invalid(
                    path,
                    &Value::Null,
                    &format!("{path} in body should have at least {min} properties"),
                ));
            }
            if let Some(max) = s.max_properties.filter(|max| (m.len() as u64) > *max) {
                out.push(Cause {
                    reason: "FieldValueTooMany",
                    field: path.to_string(),
                    message: format!("Too many: {}: must have at most {max} items", m.len()),
                });
            }
            if s.embedded {
                embedded(value, path, out);
            }
            for (name, child) in m {
                if s.embedded && matches!(name.as_str(), "apiVersion" | "kind" | "metadata") {
                    continue;
                }
                if let Some(cs) = child_schema(s, name) {
                    node(cs, child, &format!("{path}.{name}"), out);
                }
            }
        }
        Value::Bool(_) | Value::Null => {}
    }
    junctors(s, value, path, out);
}

/// `oneOf`, `anyOf`, `allOf` and `not`, with the errors of the branches that failed (as
/// kube-apiserver's OpenAPI validator reports them) and its composite message.
fn junctors(s: &Schema, value: &Value, path: &str, out: &mut Vec<Cause>) {
    let composite = |what: &str| {
        // The validator's composite errors carry no value: Go prints it as "null".
        Cause::invalid(
            path,
            &Value::String("null".into()),
            &format!("{path} in body {what}"),
        )
    };
    let run = |branch: &Schema| {
        let mut errs = Vec::new();
        node(branch, value, path, &mut errs);
        errs
    };
    if !s.one_of.is_empty() {
        let results: Vec<Vec<Cause>> = s.one_of.iter().map(run).collect();
        let passed = results.iter().filter(|r| r.is_empty()).count();
        if passed != 1 {
            if passed == 0 {
                out.extend(results.into_iter().flatten());
            }
            out.push(composite("must validate one and only one schema (oneOf)"));
        }
    }
    if !s.any_of.is_empty() {
        let results: Vec<Vec<Cause>> = s.any_of.iter().map(run).collect();
        if !results.iter().any(Vec::is_empty) {
            out.extend(results.into_iter().flatten());
            out.push(composite("must validate at least one schema (anyOf)"));
        }
    }
    if !s.all_of.is_empty() {
        let failed: Vec<Cause> = s.all_of.iter().flat_map(run).collect();
        if !failed.is_empty() {
            out.extend(failed);
            out.push(composite("must validate all the schemas (allOf)"));
        }
    }
    if let Some(not) = &s.not {
        if run(not).is_empty() {
            out.push(composite("must not validate the schema (not)"));
        }
    }
}

fn string(s: &Schema, text: &str, value: &Value, path: &str, out: &mut Vec<Cause>) {
    let chars = text.chars().count() as u64;
    if let Some(max) = s.max_length.filter(|max| chars > *max) {
        out.push(Cause {
            reason: "FieldValueTooLong",
            field: path.to_string(),
            message: format!("Too long: may not be more than {max} bytes"),
        });
    }
    if let Some(min) = s.min_length.filter(|min| chars < *min) {
        out.push(Cause::invalid(
            path,
            value,
            &format!("{path} in body should be at least {min} chars long"),
        ));
    }
    if let Some((source, re)) = &s.pattern {
        if !re.is_match(text) {
            out.push(Cause::invalid(
                path,
                value,
                &format!("{path} in body should match '{source}'"),
            ));
        }
    }
    if let Some(format) = s.format.as_deref() {
        if !format_ok(format, text) {
            out.push(Cause::invalid(
                path,
                value,
                &format!("{path} in body must be of type {format}: {}", shown(value)),
            ));
        }
    }
}

fn number(s: &Schema, n: f64, value: &Value, path: &str, out: &mut Vec<Cause>) {
    if let Some(min) = s.minimum {
        let (bad, word) = if s.exclusive_minimum {
            (n <= min, "greater than")
        } else {
            (n < min, "greater than or equal to")
        };
        if bad {
            out.push(Cause::invalid(
                path,
                value,
                &format!("{path} in body should be {word} {}", go_number(min)),
            ));
        }
    }
    if let Some(max) = s.maximum {
        let (bad, word) = if s.exclusive_maximum {
            (n >= max, "less than")
        } else {
            (n > max, "less than or equal to")
        };
        if bad {
            out.push(Cause::invalid(
                path,
                value,
                &format!("{path} in body should be {word} {}", go_number(max)),
            ));
        }
    }
}

/// A bound as Go's `%v` prints a float64: `10`, not `10.0`.
fn go_number(n: f64) -> String {
    if n.fract() == 0.0 && n.abs() < 1e15 {
        format!("{}", n as i64)
    } else {
        n.to_string()
    }
}

/// The string formats kube-apiserver checks; any other format is accepted as is.
fn format_ok(format: &str, text: &str) -> bool {
    use base64::Engine;
    match format {
        "date-time" => chrono::DateTime::parse_from_rfc3339(text).is_ok(),
        "date" => chrono::NaiveDate::parse_from_str(text, "%Y-%m-%d").is_ok(),
        "byte" => base64::engine::general_purpose::STANDARD
            .decode(text)
            .is_ok(),
        "ipv4" => text.parse::<std::net::Ipv4Addr>().is_ok(),
        "ipv6" => text.parse::<std::net::Ipv6Addr>().is_ok(),
        "cidr" => text.split_once('/').is_some_and(|(ip, bits)| {
            ip.parse::<std::net::IpAddr>().is_ok_and(|ip| {
                bits.parse::<u8>()
                    .is_ok_and(|b| b <= if ip.is_ipv4() { 32 } else { 128 })
            })
        }),
        "uuid" => uuid::Uuid::parse_str(text).is_ok(),
        _ => true,
    }
}

/// An embedded resource carries its own `apiVersion` and `kind` (metadata is optional).
fn embedded(value: &Value, path: &str, out: &mut Vec<Cause>) {
    for field in ["apiVersion", "kind"] {
        match value.get(field) {
            Some(Value::String(s)) if !s.is_empty() => {}
            _ => out.push(Cause::required(
                &format!("{path}.{field}"),
                "must not be empty",
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn schema() -> Schema {
        let raw = json!({"type": "object", "properties": {"spec": {"type": "object",
        "required": ["secretName"],
        "properties": {
            "secretName": {"type": "string", "minLength": 1, "maxLength": 8},
            "replicas": {"type": "integer", "minimum": 0, "maximum": 10},
            "mode": {"type": "string", "enum": ["A", "B"]},
            "host": {"type": "string", "pattern": "^[a-z]+$"},
            "port": {"x-kubernetes-int-or-string": true},
            "names": {"type": "array", "maxItems": 2, "items": {"type": "string"}},
            "when": {"type": "string", "format": "date-time"},
            "inner": {"type": "object", "nullable": true, "properties": {"a": {"type": "boolean"}}},
            "template": {"type": "object", "x-kubernetes-embedded-resource": true,
                "x-kubernetes-preserve-unknown-fields": true},
        }}}});
        let mut causes = Vec::new();
        let s = Schema::parse(&raw, "s", &mut causes);
        assert!(causes.is_empty());
        s
    }

    fn messages(object: Value) -> Vec<String> {
        validate(&schema(), &object)
            .into_iter()
            .map(|c| format!("{}: {}", c.field, c.message))
            .collect()
    }

    #[test]
    fn valid_objects_pass() {
        let ok = json!({"apiVersion": "x/v1", "kind": "X", "metadata": {"name": "a"},
            "spec": {"secretName": "s", "replicas": 3, "mode": "A", "host": "abc", "port": "http",
                     "names": ["a"], "when": "2024-01-01T00:00:00Z", "inner": null,
                     "template": {"apiVersion": "v1", "kind": "Pod", "spec": {}}}});
        assert_eq!(messages(ok), Vec::<String>::new());
    }

    #[test]
    fn each_keyword_is_reported_with_kube_apiservers_path_and_words() {
        let cases = [
            (json!({"spec": {}}), "spec.secretName: Required value"),
            (json!({"spec": {"secretName": 5}}),
             "spec.secretName: Invalid value: \"integer\": spec.secretName in body must be of type string: \"integer\""),
            (json!({"spec": {"secretName": ""}}),
             "spec.secretName: Invalid value: \"\": spec.secretName in body should be at least 1 chars long"),
            (json!({"spec": {"secretName": "123456789"}}),
             "spec.secretName: Too long: may not be more than 8 bytes"),
            (json!({"spec": {"secretName": "a", "replicas": -1}}),
             "spec.replicas: Invalid value: -1: spec.replicas in body should be greater than or equal to 0"),
            (json!({"spec": {"secretName": "a", "replicas": 11}}),
             "spec.replicas: Invalid value: 11: spec.replicas in body should be less than or equal to 10"),
            (json!({"spec": {"secretName": "a", "mode": "C"}}),
             "spec.mode: Unsupported value: \"C\": supported values: \"A\", \"B\""),
            (json!({"spec": {"secretName": "a", "host": "A1"}}),
             "spec.host: Invalid value: \"A1\": spec.host in body should match '^[a-z]+$'"),
            (json!({"spec": {"secretName": "a", "port": true}}),
             "spec.port: Invalid value: \"boolean\": spec.port in body must be of type integer,string: \"boolean\""),
            (json!({"spec": {"secretName": "a", "names": ["a", "b", "c"]}}),
             "spec.names: Too many: 3: must have at most 2 items"),
            (json!({"spec": {"secretName": "a", "names": [1]}}),
             "spec.names[0]: Invalid value: \"integer\": spec.names[0] in body must be of type string: \"integer\""),
            (json!({"spec": {"secretName": "a", "when": "yesterday"}}),
             "spec.when: Invalid value: \"yesterday\": spec.when in body must be of type date-time: \"yesterday\""),
            (json!({"spec": {"secretName": "a", "template": {"spec": {}}}}),
             "spec.template.apiVersion: Required value: must not be empty"),
            (json!({"spec": null}),
             "spec: Invalid value: \"null\": spec in body must be of type object: \"null\""),
        ];
        for (object, want) in cases {
            let got = messages(object);
            assert!(got.iter().any(|m| m == want), "{want}\n got {got:?}");
        }
    }

    #[test]
    fn one_of_any_of_all_of_and_not_are_checked_with_kube_apiservers_messages() {
        let raw = json!({"type": "object", "properties": {"spec": {"type": "object",
            "properties": {"a": {"type": "string"}, "b": {"type": "string"},
                "n": {"type": "integer", "not": {"enum": [13]},
                      "anyOf": [{"minimum": 100}, {"maximum": 10}],
                      "allOf": [{"minimum": 0}]}},
            "oneOf": [{"required": ["a"]}, {"required": ["b"]}]}}});
        let mut causes = Vec::new();
        let s = Schema::parse(&raw, "s", &mut causes);
        assert!(causes.is_empty(), "{causes:?}");
        let msgs = |object: Value| -> Vec<String> {
            validate(&s, &object)
                .into_iter()
                .map(|c| format!("{}: {}", c.field, c.message))
                .collect()
        };
        assert_eq!(
            msgs(json!({"spec": {"a": "x", "n": 5}})),
            Vec::<String>::new()
        );
        let cases = [
            (json!({"spec": {"a": "x", "b": "y"}}),
             "spec: Invalid value: \"null\": spec in body must validate one and only one schema (oneOf)"),
            (json!({"spec": {}}), "spec.a: Required value"),
            (json!({"spec": {}}),
             "spec: Invalid value: \"null\": spec in body must validate one and only one schema (oneOf)"),
            (json!({"spec": {"a": "x", "n": 13}}),
             "spec.n: Invalid value: \"null\": spec.n in body must not validate the schema (not)"),
            (json!({"spec": {"a": "x", "n": 50}}),
             "spec.n: Invalid value: \"null\": spec.n in body must validate at least one schema (anyOf)"),
            (json!({"spec": {"a": "x", "n": -1}}),
             "spec.n: Invalid value: \"null\": spec.n in body must validate all the schemas (allOf)"),
            (json!({"spec": {"a": "x", "n": -1}}),
             "spec.n: Invalid value: -1: spec.n in body should be greater than or equal to 0"),
        ];
        for (object, want) in cases {
            let got = msgs(object);
            assert!(got.iter().any(|m| m == want), "{want}\n got {got:?}");
        }
    }
}
