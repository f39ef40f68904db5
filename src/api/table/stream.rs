//! The Table of a list written straight to bytes: each stored object is parsed once (without
//! its `managedFields`, which no printer reads), its cells are rendered, and its row goes out
//! with the stored metadata bytes as they are, so a list of thousands of objects builds no
//! intermediate Table value and copies no metadata.

use serde::de::{Deserialize, Deserializer, IgnoredAny, MapAccess, Visitor};
use serde_json::value::RawValue;
use serde_json::{Map, Value};

use super::{column_definitions, printer_for, row_conditions, IncludeObject};
use crate::kube::object::ObjectRef;
use crate::kube::resources::ResourceInfo;

/// A stored object read in one pass for the printers: every top-level field parsed except
/// `metadata`, which is kept as raw bytes (copied into the row as is) and parsed separately
/// without `managedFields`.
struct Printable<'a> {
    object: Map<String, Value>,
    raw_metadata: Option<&'a RawValue>,
}

impl<'de: 'a, 'a> Deserialize<'de> for Printable<'a> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Fields<'a>(std::marker::PhantomData<&'a ()>);
        impl<'de: 'a, 'a> Visitor<'de> for Fields<'a> {
            type Value = Printable<'a>;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("an object")
            }
            fn visit_map<M: MapAccess<'de>>(self, mut map: M) -> Result<Self::Value, M::Error> {
                let mut object = Map::new();
                let mut raw_metadata = None;
                while let Some(key) = map.next_key::<String>()? {
                    if key == "metadata" {
                        raw_metadata = Some(map.next_value::<&'de RawValue>()?);
                    } else {
                        object.insert(key, map.next_value::<Value>()?);
                    }
                }
                Ok(Printable {
                    object,
                    raw_metadata,
                })
            }
        }
        deserializer.deserialize_map(Fields(std::marker::PhantomData))
    }
}

/// Metadata without `managedFields` (skipped, not parsed).
struct PrintableMetadata(Map<String, Value>);

impl<'de> Deserialize<'de> for PrintableMetadata {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Fields;
        impl<'de> Visitor<'de> for Fields {
            type Value = PrintableMetadata;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("an object")
            }
            fn visit_map<M: MapAccess<'de>>(self, mut map: M) -> Result<Self::Value, M::Error> {
                let mut out = Map::new();
                while let Some(key) = map.next_key::<String>()? {
                    if key == "managedFields" {
                        map.next_value::<IgnoredAny>()?;
                    } else {
                        out.insert(key, map.next_value::<Value>()?);
                    }
                }
                Ok(PrintableMetadata(out))
            }
        }
        deserializer.deserialize_map(Fields)
    }
}

/// `object` as a Value for the printers (metadata without managedFields), and its raw
/// metadata. `None` if the stored bytes are not an object (they always are).
fn printable(json: &[u8]) -> Option<(Value, Option<&RawValue>)> {
    let Printable {
        mut object,
        raw_metadata,
    } = serde_json::from_slice(json).ok()?;
    if let Some(raw) = raw_metadata {
        let PrintableMetadata(metadata) = serde_json::from_str(raw.get()).ok()?;
        object.insert("metadata".into(), Value::Object(metadata));
    }
    Some((Value::Object(object), raw_metadata))
}

/// The JSON bytes of a `meta.k8s.io/<version>` Table of `items` (stored objects of `info`'s
/// kind), with `list_metadata` as its metadata.
pub fn render_stored(
    info: &ResourceInfo,
    version: &str,
    items: &[ObjectRef],
    list_metadata: &Value,
    include: IncludeObject,
    now: chrono::DateTime<chrono::Utc>,
) -> Vec<u8> {
    let (_, cells) = printer_for(info);
    let mut out: Vec<u8> = Vec::with_capacity(4096 + items.len() * 512);
    out.extend_from_slice(b"{\"kind\":\"Table\",\"apiVersion\":\"meta.k8s.io/");
    out.extend_from_slice(version.as_bytes());
    out.extend_from_slice(b"\",\"metadata\":");
    write(&mut out, list_metadata);
    out.extend_from_slice(b",\"columnDefinitions\":");
    write(&mut out, &Value::Array(column_definitions(info)));
    out.extend_from_slice(b",\"rows\":[");
    let mut first = true;
    for item in items {
        // The fallback (a full parse) is never needed for what the store wrote.
        let (object, raw_metadata) = printable(&item.json).unwrap_or_else(|| (item.value(), None));
        if !first {
            out.push(b',');
        }
        first = false;
        out.extend_from_slice(b"{\"cells\":");
        write(&mut out, &Value::Array(cells(&object, now)));
        if let Some(conditions) = row_conditions(info, &object) {
            out.extend_from_slice(b",\"conditions\":");
            write(&mut out, &conditions);
        }
        match include {
            IncludeObject::None => {}
            IncludeObject::Metadata => {
                out.extend_from_slice(
                    b",\"object\":{\"kind\":\"PartialObjectMetadata\",\"apiVersion\":\"meta.k8s.io/v1\",\"metadata\":",
                );
                match (raw_metadata, object.get("metadata")) {
                    (Some(raw), _) => out.extend_from_slice(raw.get().as_bytes()),
                    (None, Some(parsed)) => write(&mut out, parsed),
                    (None, None) => out.extend_from_slice(b"{}"),
                }
                out.push(b'}');
            }
            IncludeObject::Object => {
                out.extend_from_slice(b",\"object\":");
                out.extend_from_slice(&item.json);
            }
        }
        out.push(b'}');
    }
    out.extend_from_slice(b"]}");
    out
}

fn write(out: &mut Vec<u8>, value: &Value) {
    // Writing a Value into a Vec cannot fail.
    let _ = serde_json::to_writer(&mut *out, value);
}
