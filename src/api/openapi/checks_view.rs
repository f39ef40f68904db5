//! The write path's view of an embedded OpenAPI document: only what its checks read
//! (`type_errors`, `unknown_fields` and the kind lookup), parsed straight from the embedded text.
//!
//! Why the parse filters: a group version's document is mostly what these checks never read
//! (the paths, descriptions, enums, defaults, list and patch markers). Parsed whole and pruned
//! afterwards, the core document built 30,000 JSON nodes to keep 9,400, in blocks interleaved
//! with the kept ones: the freed ones left the allocator's pages partly used, and the server's
//! own bootstrap writes (the first to be checked) left that in every idle server
//! (docs/performance-notes.md, "What an idle API server's heap holds"). Skipping what is not
//! kept while parsing allocates only what stays.

use serde::de::{self, DeserializeSeed, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde::Deserialize;
use serde_json::{Map, Value};

/// The keys of a schema the checks read; a schema's other keys are skipped.
const SCHEMA_KEYS: [&str; 9] = [
    "$ref",
    "allOf",
    "type",
    "format",
    "properties",
    "additionalProperties",
    "items",
    "x-kubernetes-int-or-string",
    "x-kubernetes-preserve-unknown-fields",
];

/// Which kinds a schema is (`kinds_of`): kept as written.
const GROUP_VERSION_KIND: &str = "x-kubernetes-group-version-kind";

/// The document `raw` with only `components.schemas`, and of each schema only the keys the
/// checks read (nested schemas alike).
pub(super) fn parse(raw: &str) -> serde_json::Result<Value> {
    let mut deserializer = serde_json::Deserializer::from_str(raw);
    let view = Part::Document.deserialize(&mut deserializer)?;
    deserializer.end()?;
    Ok(view)
}

/// Where a value sits in the document, which decides which of its keys are kept.
#[derive(Clone, Copy)]
enum Part {
    /// The document: only `components`.
    Document,
    /// `components`: only `schemas`.
    Components,
    /// `components.schemas` or a schema's `properties`: every key, each naming a schema.
    Named,
    /// A schema (or a list of them, `allOf`): the keys in [`SCHEMA_KEYS`] and
    /// [`GROUP_VERSION_KIND`].
    Schema,
    /// Kept as written.
    Whole,
}

impl Part {
    /// The part of the value under `key`, `None` when it is skipped.
    fn child(self, key: &str) -> Option<Part> {
        match self {
            Part::Document => (key == "components").then_some(Part::Components),
            Part::Components => (key == "schemas").then_some(Part::Named),
            Part::Named => Some(Part::Schema),
            Part::Schema if key == "properties" => Some(Part::Named),
            Part::Schema if key == GROUP_VERSION_KIND => Some(Part::Whole),
            Part::Schema => SCHEMA_KEYS.contains(&key).then_some(Part::Schema),
            Part::Whole => Some(Part::Whole),
        }
    }
}

impl<'de> DeserializeSeed<'de> for Part {
    type Value = Value;

    fn deserialize<D: de::Deserializer<'de>>(self, deserializer: D) -> Result<Value, D::Error> {
        match self {
            Part::Whole => Value::deserialize(deserializer),
            _ => deserializer.deserialize_any(self),
        }
    }
}

impl<'de> Visitor<'de> for Part {
    type Value = Value;

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("an OpenAPI v3 document")
    }

    fn visit_bool<E>(self, v: bool) -> Result<Value, E> {
        Ok(Value::Bool(v))
    }

    fn visit_i64<E>(self, v: i64) -> Result<Value, E> {
        Ok(v.into())
    }

    fn visit_u64<E>(self, v: u64) -> Result<Value, E> {
        Ok(v.into())
    }

    fn visit_f64<E>(self, v: f64) -> Result<Value, E> {
        Ok(v.into())
    }

    fn visit_str<E>(self, v: &str) -> Result<Value, E> {
        Ok(Value::String(v.to_owned()))
    }

    fn visit_string<E>(self, v: String) -> Result<Value, E> {
        Ok(Value::String(v))
    }

    fn visit_unit<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        let mut items = Vec::new();
        while let Some(item) = seq.next_element_seed(self)? {
            items.push(item);
        }
        Ok(Value::Array(items))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        let mut fields = Map::new();
        while let Some(key) = map.next_key::<String>()? {
            match self.child(&key) {
                Some(part) => {
                    let value = map.next_value_seed(part)?;
                    fields.insert(key, value);
                }
                None => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        Ok(Value::Object(fields))
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::parse;

    #[test]
    fn keeps_the_schemas_and_only_the_keys_the_checks_read() {
        let raw = json!({
            "openapi": "3.0.0",
            "paths": {"/api/v1/pods": {"get": {"description": "list pods"}}},
            "components": {
                "securitySchemes": {"BearerToken": {"type": "apiKey"}},
                "schemas": {
                    "io.k8s.api.core.v1.ConfigMap": {
                        "description": "ConfigMap holds configuration data",
                        "type": "object",
                        "required": ["data"],
                        "properties": {
                            "data": {
                                "description": "Data contains the configuration data.",
                                "type": "object",
                                "additionalProperties": {"type": "string", "default": ""},
                            },
                            "description": {"type": "string", "format": "byte"},
                            "metadata": {
                                "allOf": [{"$ref": "#/components/schemas/ObjectMeta"}],
                                "default": {},
                            },
                            "tags": {
                                "type": "array",
                                "items": {"type": "string", "enum": ["a", "b"]},
                                "x-kubernetes-list-type": "set",
                            },
                            "quantity": {"x-kubernetes-int-or-string": true},
                            "raw": {"x-kubernetes-preserve-unknown-fields": true},
                        },
                        "x-kubernetes-group-version-kind": [
                            {"group": "", "kind": "ConfigMap", "version": "v1"}
                        ],
                    }
                }
            }
        })
        .to_string();
        let view = parse(&raw).expect("a valid document");
        assert_eq!(
            view,
            json!({"components": {"schemas": {"io.k8s.api.core.v1.ConfigMap": {
                "type": "object",
                "properties": {
                    "data": {"type": "object", "additionalProperties": {"type": "string"}},
                    "description": {"type": "string", "format": "byte"},
                    "metadata": {"allOf": [{"$ref": "#/components/schemas/ObjectMeta"}]},
                    "tags": {"type": "array", "items": {"type": "string"}},
                    "quantity": {"x-kubernetes-int-or-string": true},
                    "raw": {"x-kubernetes-preserve-unknown-fields": true},
                },
                "x-kubernetes-group-version-kind": [
                    {"group": "", "kind": "ConfigMap", "version": "v1"}
                ],
            }}}})
        );
    }

    #[test]
    fn refuses_what_is_not_json() {
        assert!(parse("{\"components\": ").is_err());
        assert!(parse("{} trailing").is_err());
    }
}
