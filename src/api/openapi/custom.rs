//! The OpenAPI v3 documents of the custom kinds' group versions
//! (`/openapi/v3/apis/<group>/<version>`), built from the kind registry so they change at run
//! time and are the same on every server (the registry is derived from the stored
//! definitions).
//!
//! A document holds what kube-apiserver publishes for a definition and what kubectl reads:
//! each kind's schema (the version's `openAPIV3Schema` with its descriptions, `apiVersion`,
//! `kind` and `metadata` added, named `<reversed group>.<version>.<Kind>` and marked with
//! `x-kubernetes-group-version-kind`, which `kubectl explain` looks for), its list, the
//! metadata schemas they refer to (copied from the embedded documents), and the create and
//! patch operations listing `fieldValidation`, so kubectl leaves field validation to the
//! server as it does for built-in kinds.
//!
//! A document is built when its group version's kinds change and kept until then: the cache
//! holds the kinds it was built from (an `Arc` each, so a kind's address cannot be reused
//! while the entry lives) and is rebuilt when the registry's kinds are other values.

use std::collections::HashMap;
use std::sync::{Arc, LazyLock};

use bytes::Bytes;
use parking_lot::Mutex;
use serde_json::{json, Map, Value};
use sha2::Digest;

use crate::api::crd::kind::CustomKind;
use crate::api::crd::CustomKinds;

/// One group version's document, serialized once.
pub(super) struct CustomDocument {
    /// `apis/<group>/<version>`.
    pub path: String,
    pub bytes: Bytes,
    /// Content hash (as for the embedded documents).
    pub hash: String,
}

struct Cached {
    kinds: Vec<Arc<CustomKind>>,
    document: Arc<CustomDocument>,
}

/// The documents of every group version a custom kind serves, ordered by path, skipping the
/// group versions in `taken` (those of the embedded documents, which win).
pub(super) fn documents(
    registry: &CustomKinds,
    taken: &dyn Fn(&str) -> bool,
) -> Vec<Arc<CustomDocument>> {
    // Documents are per process, not per registry: a process runs one server outside tests,
    // and a cache entry built from other kinds is only rebuilt.
    static CACHE: LazyLock<Mutex<HashMap<String, Cached>>> = LazyLock::new(Mutex::default);
    let mut by_path: std::collections::BTreeMap<String, Vec<Arc<CustomKind>>> = Default::default();
    for kind in registry.kinds() {
        for version in kind.versions.iter().filter(|v| v.served) {
            let path = format!("apis/{}/{}", kind.group, version.name);
            if !taken(&path) {
                by_path.entry(path).or_default().push(kind.clone());
            }
        }
    }
    let mut cache = CACHE.lock();
    cache.retain(|path, _| by_path.contains_key(path));
    by_path
        .into_iter()
        .map(|(path, kinds)| {
            let fresh = cache.get(&path).is_some_and(|c| {
                c.kinds.len() == kinds.len()
                    && c.kinds.iter().zip(&kinds).all(|(a, b)| Arc::ptr_eq(a, b))
            });
            if !fresh {
                let version = path.rsplit('/').next().unwrap_or_default().to_string();
                let document = Arc::new(build(&path, &version, &kinds));
                cache.insert(path.clone(), Cached { kinds, document });
            }
            cache[&path].document.clone()
        })
        .collect()
}

fn build(path: &str, version: &str, kinds: &[Arc<CustomKind>]) -> CustomDocument {
    let mut schemas = Map::new();
    let mut paths = Map::new();
    for kind in kinds {
        let Some(v) = kind.version(version) else {
            continue;
        };
        let name = schema_name(&kind.group, version, &kind.kind);
        let list_name = schema_name(&kind.group, version, &kind.list_kind);
        let raw = v.openapi.as_deref();
        schemas.insert(name.clone(), kind_schema(kind, version, raw));
        schemas.insert(list_name, list_schema(kind, version, &name));
        let (url, item) = patch_path(kind, version, &name);
        paths.insert(url, item);
        let (url, collection) = post_path(kind, version, &name);
        paths.insert(url, collection);
    }
    for (name, schema) in metadata_schemas() {
        schemas.insert(name.clone(), schema.clone());
    }
    let document = json!({
        "openapi": "3.0.0",
        "info": {"title": "Kubernetes CRD Swagger", "version": "v0.1.0"},
        "paths": paths,
        "components": {"schemas": schemas},
    });
    let bytes = Bytes::from(serde_json::to_vec(&document).unwrap_or_default());
    let hash = hex::encode_upper(sha2::Sha256::digest(&bytes));
    CustomDocument {
        path: path.to_string(),
        bytes,
        hash,
    }
}

/// kube-apiserver's name of a custom kind's schema: the group reversed, then version and
/// kind (`com.example.v1.Widget` for `example.com/v1` `Widget`).
pub(super) fn schema_name(group: &str, version: &str, kind: &str) -> String {
    let reversed: Vec<&str> = group.split('.').rev().collect();
    format!("{}.{version}.{kind}", reversed.join("."))
}

const OBJECT_META: &str = "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta";
const PATCH: &str = "io.k8s.apimachinery.pkg.apis.meta.v1.Patch";
const API_VERSION: &str = "APIVersion defines the versioned schema of this representation of an object. Servers should convert recognized schemas to the latest internal value, and may reject unrecognized values. More info: https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#resources";
const KIND: &str = "Kind is a string value representing the REST resource this object represents. Servers may infer this from the endpoint the client submits requests to. Cannot be updated. In CamelCase. More info: https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#types-kinds";
const METADATA: &str = "Standard object's metadata. More info: https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#metadata";

fn gvk(kind: &CustomKind, version: &str, name: &str) -> Value {
    json!({"group": kind.group, "version": version, "kind": name})
}

/// The version's schema with `apiVersion`, `kind` and `metadata` first, as kube-apiserver
/// publishes it (the definition's own `metadata` schema is replaced by ObjectMeta).
pub(super) fn kind_schema(kind: &CustomKind, version: &str, raw: Option<&Value>) -> Value {
    let mut schema = match raw {
        Some(Value::Object(fields)) => fields.clone(),
        _ => Map::new(),
    };
    schema
        .entry("type")
        .or_insert_with(|| Value::String("object".into()));
    let mut properties = Map::new();
    properties.insert(
        "apiVersion".into(),
        json!({"description": API_VERSION, "type": "string"}),
    );
    properties.insert(
        "kind".into(),
        json!({"description": KIND, "type": "string"}),
    );
    properties.insert(
        "metadata".into(),
        json!({"description": METADATA,
               "allOf": [{"$ref": format!("#/components/schemas/{OBJECT_META}")}]}),
    );
    if let Some(Value::Object(own)) = schema.remove("properties") {
        for (field, child) in own {
            if !properties.contains_key(&field) {
                properties.insert(field, child);
            }
        }
    }
    schema.insert("properties".into(), Value::Object(properties));
    schema.insert(
        "x-kubernetes-group-version-kind".into(),
        json!([gvk(kind, version, &kind.kind)]),
    );
    Value::Object(schema)
}

pub(super) fn list_schema(kind: &CustomKind, version: &str, item: &str) -> Value {
    json!({
        "description": format!("{} is a list of {}", kind.list_kind, kind.kind),
        "type": "object",
        "required": ["items"],
        "properties": {
            "apiVersion": {"description": API_VERSION, "type": "string"},
            "items": {
                "description": format!("List of {}. More info: https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md", kind.plural),
                "type": "array",
                "items": {"$ref": format!("#/components/schemas/{item}")},
            },
            "kind": {"description": KIND, "type": "string"},
            "metadata": {"description": "Standard list metadata. More info: https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#types-kinds", "type": "object"},
        },
        "x-kubernetes-group-version-kind": [gvk(kind, version, &kind.list_kind)],
    })
}

/// ObjectMeta, Patch and every schema they refer to, from the embedded core document.
pub(super) fn metadata_schemas() -> &'static [(String, Value)] {
    static SCHEMAS: LazyLock<Vec<(String, Value)>> = LazyLock::new(|| {
        // Parsed whole (descriptions are what `kubectl explain` shows) and dropped once the
        // few schemas are copied.
        let core = super::documents()
            .iter()
            .find(|d| d.path == "api/v1")
            .map(|d| d.parse())
            .unwrap_or_default();
        let Some(all) = core.pointer("/components/schemas") else {
            return Vec::new();
        };
        let mut out: Vec<(String, Value)> = Vec::new();
        let mut pending = vec![OBJECT_META.to_string(), PATCH.to_string()];
        while let Some(name) = pending.pop() {
            if out.iter().any(|(n, _)| *n == name) {
                continue;
            }
            let Some(schema) = all.get(&name) else {
                continue;
            };
            references(schema, &mut pending);
            out.push((name, schema.clone()));
        }
        out.sort_by(|a, b| a.0.cmp(&b.0));
        out
    });
    &SCHEMAS
}

/// The schema names `value` refers to with `$ref`, pushed onto `out`.
fn references(value: &Value, out: &mut Vec<String>) {
    match value {
        Value::Object(fields) => {
            for (key, child) in fields {
                match (key.as_str(), child) {
                    ("$ref", Value::String(r)) => {
                        if let Some(name) = r.strip_prefix("#/components/schemas/") {
                            out.push(name.to_string());
                        }
                    }
                    _ => references(child, out),
                }
            }
        }
        Value::Array(items) => items.iter().for_each(|i| references(i, out)),
        _ => {}
    }
}

fn query_param(name: &str, description: &str, ty: &str) -> Value {
    json!({"name": name, "in": "query", "description": description,
           "schema": {"type": ty, "uniqueItems": true}})
}

fn write_params() -> Vec<Value> {
    vec![
        query_param(
            "dryRun",
            "When present, indicates that modifications should not be persisted.",
            "string",
        ),
        query_param(
            "fieldManager",
            "fieldManager is a name associated with the actor or entity that is making these changes.",
            "string",
        ),
        query_param(
            "fieldValidation",
            "fieldValidation instructs the server on how to handle objects in the request (POST/PUT/PATCH) containing unknown or duplicate fields. Valid values are: Ignore, Warn and Strict.",
            "string",
        ),
    ]
}

fn namespace_param() -> Value {
    json!({"name": "namespace", "in": "path", "required": true,
           "description": "object name and auth scope, such as for teams and projects",
           "schema": {"type": "string", "uniqueItems": true}})
}

fn collection_url(kind: &CustomKind, version: &str) -> String {
    if kind.namespaced {
        format!(
            "/apis/{}/{version}/namespaces/{{namespace}}/{}",
            kind.group, kind.plural
        )
    } else {
        format!("/apis/{}/{version}/{}", kind.group, kind.plural)
    }
}

fn tag(kind: &CustomKind, version: &str) -> String {
    format!("{}_{version}", kind.group).replace(['/', '.'], "_")
}

/// The create operation on the kind's collection.
fn post_path(kind: &CustomKind, version: &str, schema: &str) -> (String, Value) {
    let body = json!({"schema": {"$ref": format!("#/components/schemas/{schema}")}});
    let operation = if kind.namespaced {
        format!("createNamespaced{}", kind.kind)
    } else {
        format!("create{}", kind.kind)
    };
    let op = json!({
        "tags": [tag(kind, version)],
        "description": format!("create a {}", kind.kind),
        "operationId": operation,
        "parameters": write_params(),
        "requestBody": {"content": {"application/json": body, "application/yaml": body}, "required": true},
        "responses": {
            "200": {"description": "OK", "content": {"application/json": body}},
            "201": {"description": "Created", "content": {"application/json": body}},
        },
        "x-kubernetes-action": "post",
        "x-kubernetes-group-version-kind": gvk(kind, version, &kind.kind),
    });
    let parameters: Vec<Value> = if kind.namespaced {
        vec![namespace_param()]
    } else {
        Vec::new()
    };
    (
        collection_url(kind, version),
        json!({"parameters": parameters, "post": op}),
    )
}

/// The patch operation on one object of the kind.
fn patch_path(kind: &CustomKind, version: &str, schema: &str) -> (String, Value) {
    let mut parameters = vec![json!({"name": "name", "in": "path", "required": true,
        "description": format!("name of the {}", kind.kind),
        "schema": {"type": "string", "uniqueItems": true}})];
    if kind.namespaced {
        parameters.push(namespace_param());
    }
    let body = json!({"schema": {"$ref": format!("#/components/schemas/{PATCH}")}});
    let response = json!({"schema": {"$ref": format!("#/components/schemas/{schema}")}});
    let mut params = write_params();
    params.push(query_param(
        "force",
        "Force is going to \"force\" Apply requests.",
        "boolean",
    ));
    let op = json!({
        "tags": [tag(kind, version)],
        "description": format!("partially update the specified {}", kind.kind),
        "operationId": if kind.namespaced {
            format!("patchNamespaced{}", kind.kind)
        } else {
            format!("patch{}", kind.kind)
        },
        "parameters": params,
        "requestBody": {"content": {
            "application/apply-patch+yaml": body,
            "application/json-patch+json": body,
            "application/merge-patch+json": body,
        }, "required": true},
        "responses": {
            "200": {"description": "OK", "content": {"application/json": response}},
            "201": {"description": "Created", "content": {"application/json": response}},
        },
        "x-kubernetes-action": "patch",
        "x-kubernetes-group-version-kind": gvk(kind, version, &kind.kind),
    });
    (
        format!("{}/{{name}}", collection_url(kind, version)),
        json!({"parameters": parameters, "patch": op}),
    )
}
