//! `/openapi/v2`: the custom kinds' schemas as an OpenAPI v2 (Swagger 2.0) document, in JSON
//! or as the protobuf `openapi.v2.Document` (gnostic's `OpenAPIv2.proto`) that kubectl asks
//! for.
//!
//! Only custom kinds are published. kubectl computes a client-side strategic merge patch for
//! a built-in kind from that kind's v2 definition (its `x-kubernetes-patch-*` extensions) when
//! one exists; the embedded schemas carry no such extensions, so a built-in definition here
//! would make `kubectl apply` compute patches that replace lists it should merge. Without one
//! kubectl uses the types compiled into it. Custom kinds are not compiled into kubectl, so it
//! always sends them JSON merge patches and their definitions only serve reading:
//! `kubectl explain --output plaintext-openapiv2` and clients that read v2 alone. No paths are
//! published: kubectl ≥ 1.27 learns from the v3 documents that the server validates fields.
//!
//! Each definition is the kind's v3 schema (the one the v3 documents publish) turned into v2
//! the way kube-apiserver turns a definition's schema into v2: v2 has no `oneOf`, `anyOf`,
//! `not` or `nullable`, and kubectl's reader of v2 (kube-openapi's proto models) refuses the
//! whole document over a single schema it cannot read — an array without `items`, a `$ref`
//! beside a `type` or `properties`, several types. So:
//! - `oneOf`, `anyOf`, `not` and value-validation `allOf` are dropped; an `allOf` holding only a
//!   `$ref` (how the v3 documents point at ObjectMeta) becomes that `$ref`;
//! - a nullable value loses its `type`, `items` and `properties` and is no longer `required`
//!   (so a client accepts its `null`);
//! - a value keeping unknown fields loses `items` and `properties` (a client would otherwise
//!   refuse the unknown ones), and an array left without `items` loses its `type`;
//! - `$ref`s point at `#/definitions/` instead of `#/components/schemas/`.
//!
//! The document is built when the custom kinds change and kept until then, as the v3 ones are.

use std::sync::{Arc, LazyLock};

use bytes::Bytes;
use parking_lot::Mutex;
use serde_json::{json, Map, Value};
use sha2::Digest;

use super::custom;
use crate::api::crd::kind::CustomKind;
use crate::api::crd::CustomKinds;

/// The document in both encodings, each with its content hash (the ETag).
pub(super) struct V2Document {
    pub json: Bytes,
    pub json_hash: String,
    pub protobuf: Bytes,
    pub protobuf_hash: String,
}

struct Cached {
    kinds: Vec<Arc<CustomKind>>,
    document: Arc<V2Document>,
}

/// The document for the registry's current kinds.
pub(super) fn document(registry: &CustomKinds) -> Arc<V2Document> {
    static CACHE: LazyLock<Mutex<Option<Cached>>> = LazyLock::new(Mutex::default);
    let kinds = registry.kinds();
    let mut cache = CACHE.lock();
    if let Some(cached) = cache.as_ref() {
        if cached.kinds.len() == kinds.len()
            && cached
                .kinds
                .iter()
                .zip(&kinds)
                .all(|(a, b)| Arc::ptr_eq(a, b))
        {
            return cached.document.clone();
        }
    }
    let document = Arc::new(build(&kinds));
    *cache = Some(Cached {
        kinds,
        document: document.clone(),
    });
    document
}

fn hash(bytes: &[u8]) -> String {
    hex::encode_upper(sha2::Sha256::digest(bytes))
}

fn build(kinds: &[Arc<CustomKind>]) -> V2Document {
    let definitions = definitions(kinds);
    let document = json!({
        "swagger": "2.0",
        "info": {"title": "Kubernetes", "version": "litek8s"},
        "paths": {},
        "definitions": Value::Object(definitions.iter().cloned().collect()),
    });
    let json = Bytes::from(serde_json::to_vec(&document).unwrap_or_default());
    let protobuf = Bytes::from(protobuf_document(&definitions));
    V2Document {
        json_hash: hash(&json),
        json,
        protobuf_hash: hash(&protobuf),
        protobuf,
    }
}

/// Every served version's kind and list definitions, and the metadata schemas they refer to,
/// converted to v2 and ordered by name.
fn definitions(kinds: &[Arc<CustomKind>]) -> Vec<(String, Value)> {
    let mut out: Vec<(String, Value)> = Vec::new();
    for kind in kinds {
        for version in kind.versions.iter().filter(|v| v.served) {
            let name = custom::schema_name(&kind.group, &version.name, &kind.kind);
            let list_name = custom::schema_name(&kind.group, &version.name, &kind.list_kind);
            let schema = custom::kind_schema(kind, &version.name, version.openapi.as_deref());
            let list = custom::list_schema(kind, &version.name, &name);
            out.push((name, to_v2(&schema)));
            out.push((list_name, to_v2(&list)));
        }
    }
    if !out.is_empty() {
        for (name, schema) in custom::metadata_schemas() {
            out.push((name.clone(), to_v2(schema)));
        }
    }
    out.sort_by(|a, b| a.0.cmp(&b.0));
    out.dedup_by(|a, b| a.0 == b.0);
    out
}

const V3_REF: &str = "#/components/schemas/";
const V2_REF: &str = "#/definitions/";
/// The types kubectl's v2 reader knows; any other makes it refuse the document.
const KNOWN_TYPES: [&str; 6] = ["object", "array", "string", "number", "integer", "boolean"];

/// `schema` (OpenAPI v3) as an OpenAPI v2 schema kubectl can read (module doc).
fn to_v2(schema: &Value) -> Value {
    let Value::Object(fields) = schema else {
        return schema.clone();
    };
    let mut out = Map::new();
    for (key, value) in fields {
        match key.as_str() {
            "oneOf" | "anyOf" | "not" | "nullable" | "writeOnly" | "deprecated" => {}
            "allOf" => {
                if let Some(reference) = only_reference(value) {
                    out.insert("$ref".into(), Value::String(reference));
                }
            }
            "$ref" => {
                let target = value.as_str().unwrap_or_default();
                let name = target.strip_prefix(V3_REF).unwrap_or(target);
                out.insert("$ref".into(), Value::String(format!("{V2_REF}{name}")));
            }
            "properties" | "patternProperties" => {
                let converted: Map<String, Value> = value
                    .as_object()
                    .map(|props| props.iter().map(|(k, v)| (k.clone(), to_v2(v))).collect())
                    .unwrap_or_default();
                out.insert(key.clone(), Value::Object(converted));
            }
            "items" | "additionalProperties" if value.is_object() => {
                out.insert(key.clone(), to_v2(value));
            }
            _ => {
                out.insert(key.clone(), value.clone());
            }
        }
    }
    let nullable = fields.get("nullable").and_then(Value::as_bool) == Some(true);
    let keeps_unknown = fields
        .get("x-kubernetes-preserve-unknown-fields")
        .and_then(Value::as_bool)
        == Some(true);
    if nullable {
        out.remove("type");
        out.remove("items");
        out.remove("properties");
    }
    if keeps_unknown {
        out.remove("items");
        out.remove("properties");
    }
    if out.contains_key("$ref") {
        out.remove("type");
        out.remove("properties");
        out.remove("items");
    }
    match out.get("type") {
        Some(Value::String(t)) if KNOWN_TYPES.contains(&t.as_str()) => {}
        Some(_) => {
            out.remove("type");
        }
        None => {}
    }
    let array_without_items = out.get("type").and_then(Value::as_str) == Some("array")
        && !out.get("items").is_some_and(Value::is_object);
    if array_without_items {
        out.remove("type");
        out.remove("items");
    }
    drop_nullable_from_required(fields, &mut out);
    Value::Object(out)
}

/// The reference of an `allOf` that holds exactly one schema which is only a `$ref`.
fn only_reference(all_of: &Value) -> Option<String> {
    let [Value::Object(only)] = all_of.as_array()?.as_slice() else {
        return None;
    };
    let target = only.get("$ref")?.as_str()?;
    (only.len() == 1).then(|| {
        let name = target.strip_prefix(V3_REF).unwrap_or(target);
        format!("{V2_REF}{name}")
    })
}

/// A nullable property is no longer required, nor is any key of a map whose values are
/// nullable (a client would otherwise refuse the `null` the server accepts).
fn drop_nullable_from_required(v3: &Map<String, Value>, out: &mut Map<String, Value>) {
    let is_nullable =
        |schema: &Value| schema.get("nullable").and_then(Value::as_bool) == Some(true);
    if v3.get("additionalProperties").is_some_and(is_nullable) {
        out.remove("required");
        return;
    }
    let Some(Value::Object(properties)) = v3.get("properties") else {
        return;
    };
    if let Some(Value::Array(required)) = out.get_mut("required") {
        required.retain(|name| {
            !name
                .as_str()
                .and_then(|n| properties.get(n))
                .is_some_and(is_nullable)
        });
        if required.is_empty() {
            out.remove("required");
        }
    }
}

/// Protobuf wire encoding of the few messages of `openapi.v2` the document needs.
mod wire {
    pub const VARINT: u8 = 0;
    pub const FIXED64: u8 = 1;
    pub const LENGTH: u8 = 2;

    #[derive(Default)]
    pub struct Writer(pub Vec<u8>);

    impl Writer {
        fn varint(&mut self, mut value: u64) {
            while value >= 0x80 {
                self.0.push((value as u8) | 0x80);
                value >>= 7;
            }
            self.0.push(value as u8);
        }

        fn key(&mut self, field: u32, wire_type: u8) {
            self.varint((u64::from(field) << 3) | u64::from(wire_type));
        }

        pub fn bytes(&mut self, field: u32, bytes: &[u8]) {
            self.key(field, LENGTH);
            self.varint(bytes.len() as u64);
            self.0.extend_from_slice(bytes);
        }

        pub fn string(&mut self, field: u32, value: &str) {
            self.bytes(field, value.as_bytes());
        }

        pub fn boolean(&mut self, field: u32, value: bool) {
            self.key(field, VARINT);
            self.varint(u64::from(value));
        }

        /// An `int64` (negative values as their two's complement, ten bytes).
        pub fn int64(&mut self, field: u32, value: i64) {
            self.key(field, VARINT);
            self.varint(value as u64);
        }

        pub fn double(&mut self, field: u32, value: f64) {
            self.key(field, FIXED64);
            self.0.extend_from_slice(&value.to_le_bytes());
        }

        /// An embedded message written by `write`.
        pub fn message(&mut self, field: u32, write: impl FnOnce(&mut Writer)) {
            let mut inner = Writer::default();
            write(&mut inner);
            self.bytes(field, &inner.0);
        }
    }
}

use wire::Writer;

/// `openapi.v2.Document`: swagger (1), info (2: title 1, version 2), definitions (9: repeated
/// NamedSchema 1).
fn protobuf_document(definitions: &[(String, Value)]) -> Vec<u8> {
    let mut doc = Writer::default();
    doc.string(1, "2.0");
    doc.message(2, |info| {
        info.string(1, "Kubernetes");
        info.string(2, "litek8s");
    });
    doc.message(9, |defs| {
        for (name, schema) in definitions {
            defs.message(1, |named| named_schema(named, name, schema));
        }
    });
    doc.0
}

/// `NamedSchema`: name (1), value (2).
fn named_schema(w: &mut Writer, name: &str, schema: &Value) {
    w.string(1, name);
    w.message(2, |s| schema_message(s, schema));
}

/// `Any` holding `value` as YAML (JSON is YAML; kubectl reads extensions, defaults and enums
/// from this field).
fn any_yaml(w: &mut Writer, field: u32, value: &Value) {
    let text = serde_json::to_string(value).unwrap_or_default();
    w.message(field, |any| any.string(2, &text));
}

/// `Schema`, field numbers from gnostic's `OpenAPIv2.proto`.
fn schema_message(w: &mut Writer, schema: &Value) {
    let Value::Object(fields) = schema else {
        return;
    };
    let text = |w: &mut Writer, field: u32, key: &str| {
        if let Some(Value::String(s)) = fields.get(key) {
            w.string(field, s);
        }
    };
    let number = |w: &mut Writer, field: u32, key: &str| {
        if let Some(n) = fields.get(key).and_then(Value::as_f64) {
            w.double(field, n);
        }
    };
    let integer = |w: &mut Writer, field: u32, key: &str| {
        if let Some(n) = fields.get(key).and_then(Value::as_i64) {
            w.int64(field, n);
        }
    };
    let flag = |w: &mut Writer, field: u32, key: &str| {
        if let Some(b) = fields.get(key).and_then(Value::as_bool) {
            w.boolean(field, b);
        }
    };
    text(w, 1, "$ref");
    text(w, 2, "format");
    text(w, 3, "title");
    text(w, 4, "description");
    if let Some(default) = fields.get("default") {
        any_yaml(w, 5, default);
    }
    number(w, 6, "multipleOf");
    number(w, 7, "maximum");
    flag(w, 8, "exclusiveMaximum");
    number(w, 9, "minimum");
    flag(w, 10, "exclusiveMinimum");
    integer(w, 11, "maxLength");
    integer(w, 12, "minLength");
    text(w, 13, "pattern");
    integer(w, 14, "maxItems");
    integer(w, 15, "minItems");
    flag(w, 16, "uniqueItems");
    integer(w, 17, "maxProperties");
    integer(w, 18, "minProperties");
    if let Some(Value::Array(required)) = fields.get("required") {
        for name in required.iter().filter_map(Value::as_str) {
            w.string(19, name);
        }
    }
    if let Some(Value::Array(values)) = fields.get("enum") {
        for value in values {
            any_yaml(w, 20, value);
        }
    }
    match fields.get("additionalProperties") {
        Some(Value::Bool(allowed)) => w.message(21, |item| item.boolean(2, *allowed)),
        Some(inner @ Value::Object(_)) => {
            w.message(21, |item| item.message(1, |s| schema_message(s, inner)))
        }
        _ => {}
    }
    match fields.get("type") {
        Some(Value::String(t)) => w.message(22, |ty| ty.string(1, t)),
        Some(Value::Array(types)) => w.message(22, |ty| {
            for t in types.iter().filter_map(Value::as_str) {
                ty.string(1, t);
            }
        }),
        _ => {}
    }
    if let Some(items @ Value::Object(_)) = fields.get("items") {
        w.message(23, |list| list.message(1, |s| schema_message(s, items)));
    }
    if let Some(Value::Array(all)) = fields.get("allOf") {
        for inner in all {
            w.message(24, |s| schema_message(s, inner));
        }
    }
    if let Some(Value::Object(properties)) = fields.get("properties") {
        w.message(25, |props| {
            for (name, inner) in properties {
                props.message(1, |named| named_schema(named, name, inner));
            }
        });
    }
    text(w, 26, "discriminator");
    flag(w, 27, "readOnly");
    if let Some(example) = fields.get("example") {
        any_yaml(w, 30, example);
    }
    for (key, value) in fields.iter().filter(|(k, _)| k.starts_with("x-")) {
        w.message(31, |named| {
            named.string(1, key);
            any_yaml(named, 2, value);
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn value_validation_junctors_are_dropped_and_a_lone_reference_kept() {
        let v3 = json!({
            "type": "object",
            "properties": {
                "metadata": {"description": "m", "allOf": [{"$ref": "#/components/schemas/X"}]},
                "port": {"x-kubernetes-int-or-string": true,
                         "anyOf": [{"type": "integer"}, {"type": "string"}]},
                "mode": {"type": "string", "oneOf": [{"enum": ["a"]}], "not": {"enum": ["b"]}},
            },
        });
        let v2 = to_v2(&v3);
        assert_eq!(
            v2["properties"]["metadata"],
            json!({"description": "m", "$ref": "#/definitions/X"})
        );
        assert_eq!(
            v2["properties"]["port"],
            json!({"x-kubernetes-int-or-string": true})
        );
        assert_eq!(v2["properties"]["mode"], json!({"type": "string"}));
    }

    #[test]
    fn nullable_and_unknown_field_values_lose_what_a_client_would_refuse() {
        let v3 = json!({
            "type": "object",
            "required": ["a", "b"],
            "properties": {
                "a": {"type": "object", "nullable": true, "properties": {"x": {"type": "string"}}},
                "b": {"type": "array", "x-kubernetes-preserve-unknown-fields": true,
                      "items": {"type": "string"}},
                "c": {"type": "array"},
                "d": {"type": ["string", "null"]},
            },
        });
        let v2 = to_v2(&v3);
        assert_eq!(v2["required"], json!(["b"]));
        assert_eq!(v2["properties"]["a"], json!({}));
        assert_eq!(
            v2["properties"]["b"],
            json!({"x-kubernetes-preserve-unknown-fields": true})
        );
        assert_eq!(v2["properties"]["c"], json!({}));
        assert_eq!(v2["properties"]["d"], json!({}));
    }

    #[test]
    fn a_map_of_nullable_values_requires_no_key() {
        let v3 = json!({"type": "object", "required": ["a"],
                        "additionalProperties": {"type": "string", "nullable": true}});
        let v2 = to_v2(&v3);
        assert!(v2.get("required").is_none());
        assert_eq!(v2["additionalProperties"], json!({}));
    }

    #[test]
    fn a_reference_beside_a_type_keeps_only_the_reference() {
        let v2 = to_v2(&json!({"$ref": "#/components/schemas/Y", "type": "object"}));
        assert_eq!(v2, json!({"$ref": "#/definitions/Y"}));
    }

    /// Reads one length-delimited or varint field at `at`: (field, wire type, payload, next).
    fn field(bytes: &[u8], at: usize) -> (u32, u8, &[u8], usize) {
        let varint = |mut i: usize| {
            let (mut value, mut shift) = (0u64, 0);
            loop {
                let b = bytes[i];
                value |= u64::from(b & 0x7f) << shift;
                i += 1;
                if b < 0x80 {
                    return (value, i);
                }
                shift += 7;
            }
        };
        let (key, i) = varint(at);
        let (field, wire_type) = ((key >> 3) as u32, (key & 7) as u8);
        match wire_type {
            wire::LENGTH => {
                let (len, i) = varint(i);
                (
                    field,
                    wire_type,
                    &bytes[i..i + len as usize],
                    i + len as usize,
                )
            }
            wire::FIXED64 => (field, wire_type, &bytes[i..i + 8], i + 8),
            _ => {
                let (_, next) = varint(i);
                (field, wire_type, &bytes[i..next], next)
            }
        }
    }

    fn fields(bytes: &[u8]) -> Vec<(u32, u8, Vec<u8>)> {
        let mut out = Vec::new();
        let mut at = 0;
        while at < bytes.len() {
            let (f, w, payload, next) = field(bytes, at);
            out.push((f, w, payload.to_vec()));
            at = next;
        }
        out
    }

    #[test]
    fn the_protobuf_document_carries_each_definition_with_its_type_and_extensions() {
        let schema = json!({
            "type": "object",
            "description": "a widget",
            "required": ["spec"],
            "properties": {"spec": {"type": "string", "maxLength": 5, "minimum": -1.5}},
            "x-kubernetes-group-version-kind": [{"group": "g", "version": "v1", "kind": "W"}],
        });
        let bytes = protobuf_document(&[("g.v1.W".into(), schema)]);
        let top = fields(&bytes);
        assert_eq!(top[0], (1, wire::LENGTH, b"2.0".to_vec()));
        assert_eq!(top[2].0, 9, "definitions");
        let named = fields(&fields(&top[2].2)[0].2);
        assert_eq!(named[0], (1, wire::LENGTH, b"g.v1.W".to_vec()));
        let schema = fields(&named[1].2);
        let by_field = |n: u32| schema.iter().filter(move |f| f.0 == n).collect::<Vec<_>>();
        assert_eq!(by_field(4)[0].2, b"a widget");
        assert_eq!(by_field(19)[0].2, b"spec");
        assert_eq!(fields(&by_field(22)[0].2)[0].2, b"object");
        let extension = fields(&by_field(31)[0].2);
        assert_eq!(extension[0].2, b"x-kubernetes-group-version-kind");
        let yaml = &fields(&extension[1].2)[0];
        assert_eq!(yaml.0, 2);
        let parsed: Value = serde_json::from_slice(&yaml.2).expect("yaml is JSON");
        assert_eq!(parsed[0]["kind"], "W");
        let property = fields(&fields(&by_field(25)[0].2)[0].2);
        assert_eq!(property[0].2, b"spec");
        let spec = fields(&property[1].2);
        assert!(spec.contains(&(11, wire::VARINT, vec![5])));
        assert!(spec.contains(&(9, wire::FIXED64, (-1.5f64).to_le_bytes().to_vec())));
    }
}
