//! The OpenAPI v3 schema of one version of a custom kind, read from a definition's
//! `openAPIV3Schema` and checked to be *structural* as kube-apiserver requires: every object
//! field, array item and the root names its type (unless it is int-or-string or keeps unknown
//! fields), the root is an object, `properties` and `additionalProperties` exclude each other,
//! and the constructs apiextensions forbids (`$ref`, `uniqueItems`, `additionalProperties:
//! false`, an array of `items`) are refused. The refusals are 422 causes with kube-apiserver's
//! field paths and messages; the parsed [`Schema`] is what validation, defaulting and pruning
//! of custom objects walk.

use std::collections::BTreeMap;

use regex::Regex;
use serde_json::Value;

use super::rules::{self, Rule};
use crate::api::status::Cause;

/// Nesting past this many schema levels is refused (the request body's own depth limit keeps
/// real schemas far below it; this keeps the walks bounded whatever a definition holds).
const MAX_SCHEMA_DEPTH: usize = 64;

/// The types a structural schema may name.
const TYPES: &[&str] = &["array", "boolean", "integer", "number", "object", "string"];

/// What a schema says about keys it does not list in `properties`.
#[derive(Debug, Clone, Default)]
pub enum Additional {
    /// Not given: unknown keys are pruned (unless the schema keeps unknown fields).
    #[default]
    Absent,
    /// `additionalProperties: true`: any value under any key.
    Any,
    /// Every value must follow this schema (a map).
    Schema(Box<Schema>),
}

/// One node of a structural schema.
#[derive(Debug, Clone, Default)]
pub struct Schema {
    /// `type`; `None` only for int-or-string and preserve-unknown-fields nodes.
    pub ty: Option<String>,
    pub format: Option<String>,
    pub enumeration: Option<Vec<Value>>,
    pub pattern: Option<(String, Regex)>,
    pub minimum: Option<f64>,
    pub exclusive_minimum: bool,
    pub maximum: Option<f64>,
    pub exclusive_maximum: bool,
    pub min_length: Option<u64>,
    pub max_length: Option<u64>,
    pub min_items: Option<u64>,
    pub max_items: Option<u64>,
    pub min_properties: Option<u64>,
    pub max_properties: Option<u64>,
    pub items: Option<Box<Schema>>,
    pub properties: BTreeMap<String, Schema>,
    pub additional: Additional,
    pub required: Vec<String>,
    pub nullable: bool,
    /// `x-kubernetes-preserve-unknown-fields`: keys not in `properties` are kept, unchecked.
    pub preserve_unknown: bool,
    /// `x-kubernetes-int-or-string`: an integer or a string.
    pub int_or_string: bool,
    /// `x-kubernetes-embedded-resource`: an object with its own apiVersion, kind and metadata.
    pub embedded: bool,
    pub default: Option<Value>,
    /// `oneOf`, `anyOf`, `allOf`, `not`: value constraints restated over the same shape (a
    /// structural schema may not use them to declare new fields or types).
    pub one_of: Vec<Schema>,
    pub any_of: Vec<Schema>,
    pub all_of: Vec<Schema>,
    pub not: Option<Box<Schema>>,
    /// `x-kubernetes-validations`, compiled.
    pub validations: Vec<Rule>,
    /// Whether this node or one below it has a rule (only those nodes are walked).
    pub has_rules: bool,
}

/// Where a node sits, for the "type must not be empty" message kube-apiserver picks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Level {
    Root,
    Item,
    Field,
    /// Inside `oneOf`, `anyOf`, `allOf` or `not`: types need not be restated.
    Junctor,
}

impl Schema {
    /// Reads and checks the schema `raw` found at `path` (e.g.
    /// `spec.versions[0].schema.openAPIV3Schema`). Every way it is not structural is pushed to
    /// `causes`; the returned schema is usable only when none was.
    pub fn parse(raw: &Value, path: &str, causes: &mut Vec<Cause>) -> Schema {
        let schema = parse_node(raw, path, Level::Root, 0, causes);
        let total = rules::total_cost(&schema, 1);
        if total > crate::cel::TOTAL_COST_LIMIT {
            causes.push(Cause::forbidden(
                path,
                &rules::cost_message(
                    "x-kubernetes-validations estimated rule cost total for entire OpenAPIv3 schema",
                    total,
                    crate::cel::TOTAL_COST_LIMIT,
                ),
            ));
        }
        schema
    }
}

fn parse_node(raw: &Value, path: &str, level: Level, depth: usize, out: &mut Vec<Cause>) -> Schema {
    let mut s = Schema::default();
    let Some(m) = raw.as_object() else {
        out.push(Cause::invalid(path, raw, "must be a schema object"));
        return s;
    };
    if depth > MAX_SCHEMA_DEPTH {
        out.push(Cause::forbidden(
            path,
            &format!("must not be nested deeper than {MAX_SCHEMA_DEPTH} levels"),
        ));
        return s;
    }
    let child = |name: &str| format!("{path}.{name}");
    // Below a junctor, every node is a junctor's: it restates, it does not declare.
    let below = |l: Level| {
        if level == Level::Junctor {
            Level::Junctor
        } else {
            l
        }
    };
    let flag = |name: &str| m.get(name).and_then(Value::as_bool).unwrap_or(false);
    s.int_or_string = flag("x-kubernetes-int-or-string");
    s.preserve_unknown = flag("x-kubernetes-preserve-unknown-fields");
    s.embedded = flag("x-kubernetes-embedded-resource");
    s.nullable = flag("nullable");
    match m.get("type") {
        None | Some(Value::Null) => {}
        Some(Value::String(t)) if t.is_empty() => {}
        Some(Value::String(t)) if TYPES.contains(&t.as_str()) => s.ty = Some(t.clone()),
        Some(other) => out.push(not_supported(&child("type"), other, TYPES)),
    }
    if s.int_or_string {
        if let Some(t) = &s.ty {
            out.push(Cause::invalid(
                &child("type"),
                &Value::String(t.clone()),
                "must be empty if x-kubernetes-int-or-string is true",
            ));
        }
    }
    if s.embedded {
        match s.ty.as_deref() {
            Some("object") => {}
            None => out.push(Cause::required(
                &child("type"),
                "must be object if x-kubernetes-embedded-resource is true",
            )),
            Some(t) => out.push(Cause::invalid(
                &child("type"),
                &Value::String(t.into()),
                "must be object if x-kubernetes-embedded-resource is true",
            )),
        }
    } else if s.ty.is_none() && !s.int_or_string && !s.preserve_unknown && level != Level::Junctor {
        let detail = match level {
            Level::Root => "must not be empty at the root",
            Level::Item => "must not be empty for specified array items",
            Level::Field | Level::Junctor => "must not be empty for specified object fields",
        };
        out.push(Cause::required(&child("type"), detail));
    }
    if level == Level::Root {
        if let Some(t) = s.ty.as_deref().filter(|t| *t != "object") {
            out.push(Cause::invalid(
                &child("type"),
                &Value::String(t.into()),
                "must be object at the root",
            ));
        }
    }
    if m.contains_key("$ref") {
        out.push(Cause::forbidden(&child("$ref"), "$ref is not supported"));
    }
    if flag("uniqueItems") {
        out.push(Cause::forbidden(
            &child("uniqueItems"),
            "uniqueItems cannot be set to true since the runtime complexity becomes quadratic",
        ));
    }
    s.format = m.get("format").and_then(Value::as_str).map(str::to_string);
    s.enumeration = m.get("enum").and_then(Value::as_array).cloned();
    if let Some(p) = m.get("pattern").and_then(Value::as_str) {
        match Regex::new(p) {
            Ok(re) => s.pattern = Some((p.to_string(), re)),
            Err(e) => out.push(Cause::invalid(
                &child("pattern"),
                &Value::String(p.into()),
                &format!("must be a valid regular expression, but isn't: {e}"),
            )),
        }
    }
    s.minimum = m.get("minimum").and_then(Value::as_f64);
    s.maximum = m.get("maximum").and_then(Value::as_f64);
    s.exclusive_minimum = flag("exclusiveMinimum");
    s.exclusive_maximum = flag("exclusiveMaximum");
    let count = |name: &str| m.get(name).and_then(Value::as_u64);
    s.min_length = count("minLength");
    s.max_length = count("maxLength");
    s.min_items = count("minItems");
    s.max_items = count("maxItems");
    s.min_properties = count("minProperties");
    s.max_properties = count("maxProperties");
    s.required = m
        .get("required")
        .and_then(Value::as_array)
        .map(|r| {
            r.iter()
                .filter_map(Value::as_str)
                .map(str::to_string)
                .collect()
        })
        .unwrap_or_default();
    s.default = m.get("default").cloned();
    match m.get("items") {
        None | Some(Value::Null) => {
            if s.ty.as_deref() == Some("array") && level != Level::Junctor {
                out.push(Cause::required(&child("items"), "must be specified"));
            }
        }
        Some(Value::Array(_)) => out.push(Cause::forbidden(
            &child("items"),
            "items must be a schema object and not an array",
        )),
        Some(items) => {
            s.items = Some(Box::new(parse_node(
                items,
                &child("items"),
                below(Level::Item),
                depth + 1,
                out,
            )))
        }
    }
    if let Some(props) = m.get("properties").and_then(Value::as_object) {
        for (name, prop) in props {
            let p = parse_node(
                prop,
                &format!("{path}.properties[{name}]"),
                below(Level::Field),
                depth + 1,
                out,
            );
            s.properties.insert(name.clone(), p);
        }
    }
    match m.get("additionalProperties") {
        None | Some(Value::Null) => {}
        Some(Value::Bool(false)) => out.push(Cause::forbidden(
            &child("additionalProperties"),
            "additionalProperties cannot be set to false",
        )),
        Some(Value::Bool(true)) => s.additional = Additional::Any,
        Some(schema) => {
            s.additional = Additional::Schema(Box::new(parse_node(
                schema,
                &child("additionalProperties"),
                below(Level::Field),
                depth + 1,
                out,
            )))
        }
    }
    if !s.properties.is_empty() && !matches!(s.additional, Additional::Absent) {
        out.push(Cause::forbidden(
            &child("additionalProperties"),
            "additionalProperties and properties are mutual exclusive",
        ));
    }
    let junctor = |name: &str, out: &mut Vec<Cause>| -> Vec<Schema> {
        m.get(name)
            .and_then(Value::as_array)
            .map(|list| {
                list.iter()
                    .enumerate()
                    .map(|(i, raw)| {
                        parse_node(
                            raw,
                            &format!("{path}.{name}[{i}]"),
                            Level::Junctor,
                            depth + 1,
                            out,
                        )
                    })
                    .collect()
            })
            .unwrap_or_default()
    };
    s.one_of = junctor("oneOf", out);
    s.any_of = junctor("anyOf", out);
    s.all_of = junctor("allOf", out);
    s.not = m.get("not").filter(|v| v.is_object()).map(|raw| {
        Box::new(parse_node(
            raw,
            &child("not"),
            Level::Junctor,
            depth + 1,
            out,
        ))
    });
    if level == Level::Root {
        if let Some(meta) = m.get("properties").and_then(|p| p.get("metadata")) {
            if !metadata_schema_allowed(meta) {
                out.push(Cause::forbidden(
                    &format!("{path}.properties[metadata]"),
                    "must not specify anything other than name and generateName, but metadata is implicitly specified",
                ));
            }
        }
    }
    if let Some(default) = &s.default {
        if level != Level::Junctor {
            let at = child("default");
            for cause in super::validate::value(&s, default, &at) {
                out.push(cause);
            }
        }
    }
    s.validations = rules::parse(
        m.get("x-kubernetes-validations"),
        &s,
        level == Level::Root,
        path,
        out,
    );
    s.has_rules = !s.validations.is_empty()
        || s.properties.values().any(|p| p.has_rules)
        || s.items.as_ref().is_some_and(|i| i.has_rules)
        || matches!(&s.additional, Additional::Schema(a) if a.has_rules);
    s
}

/// A root's `metadata` schema may only say it is an object and restate `name` and
/// `generateName` as strings (the API, not the schema, owns metadata).
fn metadata_schema_allowed(meta: &Value) -> bool {
    let Some(m) = meta.as_object() else {
        return false;
    };
    let only = |m: &serde_json::Map<String, Value>, allowed: &[&str]| {
        m.keys().all(|k| allowed.contains(&k.as_str()))
    };
    if !only(m, &["type", "properties", "description"])
        || m.get("type").is_some_and(|t| t != "object")
    {
        return false;
    }
    let Some(props) = m.get("properties") else {
        return true;
    };
    let Some(props) = props.as_object() else {
        return false;
    };
    props.iter().all(|(name, p)| {
        matches!(name.as_str(), "name" | "generateName")
            && p.as_object().is_some_and(|p| {
                p.keys()
                    .all(|k| matches!(k.as_str(), "type" | "description" | "pattern" | "maxLength"))
                    && p.get("type").is_none_or(|t| t == "string")
            })
    })
}

/// kube-apiserver's `Unsupported value: "x": supported values: "a", "b"`.
pub fn not_supported(field: &str, value: &Value, supported: &[&str]) -> Cause {
    let listed: Vec<String> = supported.iter().map(|s| format!("{s:?}")).collect();
    Cause {
        reason: "FieldValueNotSupported",
        field: field.to_string(),
        message: format!(
            "Unsupported value: {}: supported values: {}",
            shown(value),
            listed.join(", ")
        ),
    }
}

/// A value as Go's `%#v`-like field errors print it: strings quoted, the rest as JSON.
pub fn shown(value: &Value) -> String {
    match value {
        Value::String(s) => format!("{s:?}"),
        other => other.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn messages(raw: Value) -> Vec<String> {
        let mut causes = Vec::new();
        Schema::parse(&raw, "s", &mut causes);
        causes
            .into_iter()
            .map(|c| format!("{}: {}", c.field, c.message))
            .collect()
    }

    #[test]
    fn structural_schemas_pass() {
        let raw = json!({"type": "object", "properties": {
        "spec": {"type": "object", "properties": {
            "replicas": {"type": "integer", "minimum": 0},
            "port": {"x-kubernetes-int-or-string": true},
            "labels": {"type": "object", "additionalProperties": {"type": "string"}},
            "items": {"type": "array", "items": {"type": "string"}},
            "free": {"x-kubernetes-preserve-unknown-fields": true},
        }}}});
        assert!(messages(raw).is_empty());
    }

    #[test]
    fn non_structural_schemas_are_refused_as_kube_apiserver_words_it() {
        let cases = [
            (json!({"properties": {}}), "s.type: Required value: must not be empty at the root"),
            (json!({"type": "string"}), "s.type: Invalid value: \"string\": must be object at the root"),
            (
                json!({"type": "object", "properties": {"spec": {"properties": {}}}}),
                "s.properties[spec].type: Required value: must not be empty for specified object fields",
            ),
            (
                json!({"type": "object", "properties": {"a": {"type": "array", "items": {}}}}),
                "s.properties[a].items.type: Required value: must not be empty for specified array items",
            ),
            (
                json!({"type": "object", "properties": {"a": {"type": "object",
                    "properties": {"b": {"type": "string"}}, "additionalProperties": {"type": "string"}}}}),
                "s.properties[a].additionalProperties: Forbidden: additionalProperties and properties are mutual exclusive",
            ),
            (
                json!({"type": "object", "properties": {"a": {"type": "strin"}}}),
                "s.properties[a].type: Unsupported value: \"strin\": supported values: \"array\", \"boolean\", \"integer\", \"number\", \"object\", \"string\"",
            ),
            (
                json!({"type": "object", "properties": {"a": {"$ref": "#/x", "type": "object"}}}),
                "s.properties[a].$ref: Forbidden: $ref is not supported",
            ),
        ];
        for (raw, want) in cases {
            let got = messages(raw);
            assert!(got.iter().any(|m| m == want), "{want}\n got {got:?}");
        }
    }

    #[test]
    fn deep_schemas_are_refused_not_walked_forever() {
        let mut raw = json!({"type": "string"});
        for _ in 0..100 {
            raw = json!({"type": "object", "properties": {"a": raw}});
        }
        let got = messages(raw);
        assert!(
            got.iter().any(|m| m.contains("must not be nested deeper")),
            "{got:?}"
        );
    }

    #[test]
    fn defaults_must_follow_their_schema_and_metadata_only_restates_names() {
        let got = messages(json!({"type": "object", "properties": {
            "n": {"type": "integer", "default": "x"},
            "m": {"type": "string", "default": "ok"}}}));
        assert_eq!(
            got,
            ["s.properties[n].default: Invalid value: \"string\": s.properties[n].default in body must be of type integer: \"string\""]
        );
        let meta = |m: Value| messages(json!({"type": "object", "properties": {"metadata": m}}));
        assert!(meta(json!({"type": "object"})).is_empty());
        assert!(meta(
            json!({"type": "object", "properties": {"name": {"type": "string", "maxLength": 20}}})
        )
        .is_empty());
        assert_eq!(
            meta(json!({"type": "object", "properties": {"labels": {"type": "object"}}})),
            ["s.properties[metadata]: Forbidden: must not specify anything other than name and generateName, but metadata is implicitly specified"]
        );
    }

    #[test]
    fn junctors_need_not_restate_types() {
        let got = messages(
            json!({"type": "object", "properties": {"a": {"type": "object",
            "oneOf": [{"required": ["x"]}, {"properties": {"y": {"minimum": 1}}}],
            "not": {"required": ["z"]}}}}),
        );
        assert!(got.is_empty(), "{got:?}");
    }
}
