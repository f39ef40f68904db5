//! One custom kind as the API serves it, read from its stored CustomResourceDefinition: its
//! names, scope, and per version whether it is served and stored, its structural schema, its
//! status and scale subresources and its printer columns. The value is shaped so a built-in
//! kind could be described the same way (names, scope, versions, subresources, columns,
//! schema); only custom kinds use it so far.
//!
//! The router, the verbs and the store's helpers take a kind as `&'static ResourceInfo`, so
//! each served version also gets one, *interned*: the same description always yields the same
//! reference, and a new one is allocated (and kept for the life of the process) only for a
//! description not seen before. That bounds the memory to the distinct definitions a process
//! ever serves, which changes of CRDs add to only rarely.

use std::collections::HashMap;
use std::sync::{Arc, LazyLock};

use parking_lot::Mutex;
use serde_json::Value;

use super::schema::Schema;
use crate::kube::resources::ResourceInfo;

/// A custom kind, from the definition that established it.
#[derive(Debug)]
pub struct CustomKind {
    /// The CustomResourceDefinition's name (`plural.group`).
    pub definition: String,
    pub group: String,
    pub plural: String,
    pub kind: String,
    pub list_kind: String,
    pub namespaced: bool,
    pub versions: Vec<Version>,
    /// The definition is being deleted: its objects are being deleted and no new one is made.
    pub terminating: bool,
}

/// One version of a custom kind.
#[derive(Debug)]
pub struct Version {
    pub name: String,
    pub served: bool,
    /// The version objects are stored in (exactly one per kind).
    pub storage: bool,
    pub schema: Option<Arc<Schema>>,
    /// The `openAPIV3Schema` as stored, with its descriptions (the OpenAPI documents publish
    /// it).
    pub openapi: Option<Arc<Value>>,
    pub columns: Vec<PrinterColumn>,
    pub scale: Option<ScalePaths>,
    /// How the router and the verbs see this version.
    pub info: &'static ResourceInfo,
}

/// An `additionalPrinterColumns` entry.
#[derive(Debug, Clone)]
pub struct PrinterColumn {
    pub name: String,
    /// `integer`, `number`, `string`, `boolean` or `date`.
    pub ty: String,
    pub format: String,
    pub description: String,
    pub priority: i64,
    pub json_path: String,
}

/// The scale subresource's paths into the object (`.spec.replicas`, …).
#[derive(Debug, Clone)]
pub struct ScalePaths {
    pub spec_replicas: String,
    pub status_replicas: String,
    pub label_selector: Option<String>,
}

impl CustomKind {
    /// The kind a stored definition describes (the names it was accepted with), or `None`
    /// when it is not usable (the server never stores such a definition).
    pub fn from_definition(crd: &Value) -> Option<CustomKind> {
        let text = |v: &Value, p: &str| v.pointer(p).and_then(Value::as_str).map(str::to_string);
        let list = |v: &Value, p: &str| -> Vec<String> {
            v.pointer(p)
                .and_then(Value::as_array)
                .map(|a| {
                    a.iter()
                        .filter_map(Value::as_str)
                        .map(str::to_string)
                        .collect()
                })
                .unwrap_or_default()
        };
        let names = match crd.pointer("/status/acceptedNames") {
            Some(n) if n.get("plural").is_some_and(|p| p != "") => n,
            _ => crd.pointer("/spec/names")?,
        };
        let group = text(crd, "/spec/group")?;
        let plural = text(names, "/plural")?;
        let kind = text(names, "/kind")?;
        let singular = text(names, "/singular").unwrap_or_else(|| kind.to_lowercase());
        let list_kind = text(names, "/listKind").unwrap_or_else(|| format!("{kind}List"));
        let short_names = list(names, "/shortNames");
        let categories = list(names, "/categories");
        let namespaced = text(crd, "/spec/scope").as_deref() != Some("Cluster");
        let mut versions = Vec::new();
        for v in crd.pointer("/spec/versions")?.as_array()? {
            let name = text(v, "/name")?;
            let raw = v.pointer("/schema/openAPIV3Schema");
            let schema = raw.map(|raw| {
                let mut causes = Vec::new();
                Arc::new(Schema::parse(raw, "", &mut causes))
            });
            let openapi = raw.map(|raw| Arc::new(raw.clone()));
            let status = v.pointer("/subresources/status").is_some();
            let scale = v.pointer("/subresources/scale").map(|s| ScalePaths {
                spec_replicas: text(s, "/specReplicasPath").unwrap_or_default(),
                status_replicas: text(s, "/statusReplicasPath").unwrap_or_default(),
                label_selector: text(s, "/labelSelectorPath"),
            });
            let columns = v
                .get("additionalPrinterColumns")
                .and_then(Value::as_array)
                .map(|cols| cols.iter().filter_map(PrinterColumn::from_json).collect())
                .unwrap_or_default();
            let info = intern(Described {
                group: group.clone(),
                version: name.clone(),
                kind: kind.clone(),
                plural: plural.clone(),
                singular: singular.clone(),
                short_names: short_names.clone(),
                categories: categories.clone(),
                namespaced,
                has_status: status,
                has_scale: scale.is_some(),
            });
            versions.push(Version {
                served: v.get("served").and_then(Value::as_bool).unwrap_or(false),
                storage: v.get("storage").and_then(Value::as_bool).unwrap_or(false),
                name,
                schema,
                openapi,
                columns,
                scale,
                info,
            });
        }
        Some(CustomKind {
            definition: text(crd, "/metadata/name")?,
            group,
            plural,
            kind,
            list_kind,
            namespaced,
            versions,
            terminating: crd.pointer("/metadata/deletionTimestamp").is_some(),
        })
    }

    /// The store's key for the kind's objects (every version shares it).
    pub fn store_key(&self) -> String {
        format!("{}/{}", self.group, self.plural)
    }

    pub fn version(&self, name: &str) -> Option<&Version> {
        self.versions.iter().find(|v| v.name == name)
    }
}

impl PrinterColumn {
    fn from_json(c: &Value) -> Option<PrinterColumn> {
        let text = |k: &str| c.get(k).and_then(Value::as_str).unwrap_or("").to_string();
        Some(PrinterColumn {
            name: c.get("name")?.as_str()?.to_string(),
            ty: text("type"),
            format: text("format"),
            description: text("description"),
            priority: c.get("priority").and_then(Value::as_i64).unwrap_or(0),
            json_path: c.get("jsonPath")?.as_str()?.to_string(),
        })
    }
}

/// Everything a served version's `ResourceInfo` holds, as owned values (the intern key).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct Described {
    group: String,
    version: String,
    kind: String,
    plural: String,
    singular: String,
    short_names: Vec<String>,
    categories: Vec<String>,
    namespaced: bool,
    has_status: bool,
    has_scale: bool,
}

/// The one `ResourceInfo` of a description (see the module's comment on why it is kept).
fn intern(d: Described) -> &'static ResourceInfo {
    static INTERNED: LazyLock<Mutex<HashMap<Described, &'static ResourceInfo>>> =
        LazyLock::new(Mutex::default);
    let mut interned = INTERNED.lock();
    if let Some(info) = interned.get(&d) {
        return info;
    }
    fn leak(s: &str) -> &'static str {
        Box::leak(s.to_owned().into_boxed_str())
    }
    fn leak_all(list: &[String]) -> &'static [&'static str] {
        Box::leak(
            list.iter()
                .map(|s| leak(s))
                .collect::<Vec<_>>()
                .into_boxed_slice(),
        )
    }
    let info: &'static ResourceInfo = Box::leak(Box::new(ResourceInfo {
        group: leak(&d.group),
        version: leak(&d.version),
        kind: leak(&d.kind),
        plural: leak(&d.plural),
        singular: leak(&d.singular),
        short_names: leak_all(&d.short_names),
        categories: leak_all(&d.categories),
        namespaced: d.namespaced,
        has_status: d.has_status,
        // kube-apiserver tracks metadata.generation for every custom object.
        tracks_generation: true,
        selectable_fields: &[],
        has_scale: d.has_scale,
    }));
    interned.insert(d, info);
    info
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn crd(short: &str) -> Value {
        json!({"metadata": {"name": "widgets.example.com"},
               "spec": {"group": "example.com", "scope": "Namespaced",
                        "names": {"plural": "widgets", "kind": "Widget", "shortNames": [short]},
                        "versions": [{"name": "v1", "served": true, "storage": true,
                                      "schema": {"openAPIV3Schema": {"type": "object"}},
                                      "subresources": {"status": {}, "scale": {
                                          "specReplicasPath": ".spec.replicas",
                                          "statusReplicasPath": ".status.replicas"}}}]}})
    }

    #[test]
    fn a_definition_becomes_a_kind_with_interned_infos() {
        let a = CustomKind::from_definition(&crd("wd")).expect("a kind");
        let b = CustomKind::from_definition(&crd("wd")).expect("a kind");
        let c = CustomKind::from_definition(&crd("wg")).expect("a kind");
        assert_eq!(a.store_key(), "example.com/widgets");
        let (ia, ib, ic) = (a.versions[0].info, b.versions[0].info, c.versions[0].info);
        assert!(
            std::ptr::eq(ia, ib),
            "the same description is one ResourceInfo"
        );
        assert!(!std::ptr::eq(ia, ic));
        assert_eq!(ia.singular, "widget");
        assert_eq!(ia.short_names, ["wd"]);
        assert!(ia.namespaced && ia.has_status && ia.has_scale);
        assert_eq!(
            ia.subresources().iter().map(|s| s.name).collect::<Vec<_>>(),
            ["scale", "status"]
        );
    }
}
