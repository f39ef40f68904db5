//! Defaulting and pruning of a custom object by its structural schema, in kube-apiserver's
//! order: `default` values fill absent fields (a `null` in a non-nullable field counts as
//! absent), then every field the schema does not declare is dropped, unless a node keeps
//! unknown fields (`x-kubernetes-preserve-unknown-fields`) or is a map
//! (`additionalProperties`). The root keeps `apiVersion`, `kind` and `metadata`, as an
//! embedded resource does. What was dropped is returned so `fieldValidation=Strict` can refuse
//! it and `Warn` can name it.

use serde_json::Value;

use super::schema::{Additional, Schema};

/// Fills in the schema's defaults in `object`.
pub fn default(schema: &Schema, object: &mut Value) {
    let Some(m) = object.as_object_mut() else {
        return;
    };
    for (name, child) in &schema.properties {
        let absent = match m.get(name) {
            None => true,
            Some(Value::Null) => !child.nullable,
            Some(_) => false,
        };
        if absent {
            if let Some(d) = &child.default {
                m.insert(name.clone(), d.clone());
            }
        }
    }
    for (name, value) in m.iter_mut() {
        if let Some(child) = schema.properties.get(name) {
            default_value(child, value);
        } else if let Additional::Schema(child) = &schema.additional {
            default_value(child, value);
        }
    }
}

fn default_value(schema: &Schema, value: &mut Value) {
    match value {
        Value::Object(_) => default(schema, value),
        Value::Array(items) => {
            if let Some(item_schema) = &schema.items {
                for item in items {
                    default_value(item_schema, item);
                }
            }
        }
        _ => {}
    }
}

/// Drops the fields of `object` (a whole custom object) its schema does not declare; returns
/// their paths (`spec.foo`, `spec.list[0].bar`), in the order met.
pub fn prune(schema: &Schema, object: &mut Value) -> Vec<String> {
    let mut dropped = Vec::new();
    prune_object(schema, object, "", true, &mut dropped);
    dropped
}

fn prune_object(
    schema: &Schema,
    value: &mut Value,
    path: &str,
    keeps_type_meta: bool,
    dropped: &mut Vec<String>,
) {
    let Some(m) = value.as_object_mut() else {
        return;
    };
    let join = |name: &str| {
        if path.is_empty() {
            name.to_string()
        } else {
            format!("{path}.{name}")
        }
    };
    let type_meta = |name: &str| matches!(name, "apiVersion" | "kind" | "metadata");
    let keeps_unknown = schema.preserve_unknown || !matches!(schema.additional, Additional::Absent);
    let mut unknown = Vec::new();
    for (name, child_value) in m.iter_mut() {
        if keeps_type_meta && type_meta(name) {
            continue;
        }
        let child = match (schema.properties.get(name), &schema.additional) {
            (Some(c), _) => c,
            (None, Additional::Schema(c)) => c,
            _ if keeps_unknown => continue,
            _ => {
                unknown.push(name.clone());
                dropped.push(join(name));
                continue;
            }
        };
        prune_value(child, child_value, &join(name), dropped);
    }
    for name in unknown {
        m.remove(&name);
    }
}

fn prune_value(schema: &Schema, value: &mut Value, path: &str, dropped: &mut Vec<String>) {
    match value {
        Value::Object(_) => prune_object(schema, value, path, schema.embedded, dropped),
        Value::Array(items) => {
            if let Some(item_schema) = &schema.items {
                for (i, item) in items.iter_mut().enumerate() {
                    prune_value(item_schema, item, &format!("{path}[{i}]"), dropped);
                }
            }
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn schema() -> Schema {
        let raw = json!({"type": "object", "properties": {
            "spec": {"type": "object", "properties": {
                "replicas": {"type": "integer", "default": 1},
                "mode": {"type": "string", "default": "A"},
                "labels": {"type": "object", "additionalProperties": {"type": "string"}},
                "list": {"type": "array", "items": {"type": "object",
                    "properties": {"a": {"type": "string", "default": "x"}}}},
                "free": {"type": "object", "x-kubernetes-preserve-unknown-fields": true},
            }},
            "status": {"type": "object", "properties": {"ready": {"type": "boolean"}}},
        }});
        let mut causes = Vec::new();
        let s = Schema::parse(&raw, "s", &mut causes);
        assert!(causes.is_empty(), "{causes:?}");
        s
    }

    #[test]
    fn defaults_fill_absent_and_null_fields_only() {
        let mut o = json!({"spec": {"mode": null, "replicas": 5, "list": [{}, {"a": "y"}]}});
        default(&schema(), &mut o);
        assert_eq!(
            o,
            json!({"spec": {"mode": "A", "replicas": 5, "list": [{"a": "x"}, {"a": "y"}]}})
        );
    }

    #[test]
    fn unknown_fields_are_dropped_and_named() {
        let mut o = json!({"apiVersion": "x/v1", "kind": "X", "metadata": {"name": "a"},
            "extra": 1,
            "spec": {"replicas": 1, "bogus": true, "labels": {"k": "v"},
                     "list": [{"a": "x", "b": 2}], "free": {"anything": {"goes": 1}}},
            "status": {"ready": true, "phase": "x"}});
        let dropped = prune(&schema(), &mut o);
        assert_eq!(
            dropped,
            ["extra", "spec.bogus", "spec.list[0].b", "status.phase"]
        );
        assert_eq!(
            o,
            json!({"apiVersion": "x/v1", "kind": "X", "metadata": {"name": "a"},
                "spec": {"replicas": 1, "labels": {"k": "v"}, "list": [{"a": "x"}],
                         "free": {"anything": {"goes": 1}}},
                "status": {"ready": true}})
        );
    }
}
