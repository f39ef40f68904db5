//! The Table of a list written straight to bytes: each stored object is parsed once, keeping
//! only what its printer reads (`fields`), its cells are rendered, and its row goes out with
//! the stored metadata bytes as they are, so a list of thousands of objects builds no
//! intermediate Table value and copies no metadata.

use serde::de::{DeserializeSeed, Deserializer, IgnoredAny, MapAccess, Visitor};
use serde_json::value::RawValue;
use serde_json::{Map, Value};

use super::fields::{self, Fields, Selected};
use super::{column_definitions, printer_for, row_conditions, IncludeObject};
use crate::kube::object::ObjectRef;
use crate::kube::resources::ResourceInfo;

/// A stored object read in one pass for the printers: the top-level fields the kind's printer
/// reads (all of them for kinds without a [`Fields`] list), and `metadata` twice: as raw bytes
/// (copied into the row as is) and parsed with only the fields printers read.
struct Printable<'a> {
    object: Map<String, Value>,
    raw_metadata: Option<&'a RawValue>,
}

struct PrintableSeed(&'static Fields);

impl<'de> DeserializeSeed<'de> for PrintableSeed {
    type Value = Printable<'de>;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Self::Value, D::Error> {
        deserializer.deserialize_map(self)
    }
}

impl<'de> Visitor<'de> for PrintableSeed {
    type Value = Printable<'de>;

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("an object")
    }

    fn visit_map<M: MapAccess<'de>>(self, mut map: M) -> Result<Self::Value, M::Error> {
        let mut object = Map::new();
        let mut raw_metadata = None;
        while let Some(key) = map.next_key::<String>()? {
            if key == "metadata" {
                raw_metadata = Some(map.next_value::<&'de RawValue>()?);
                continue;
            }
            match self.0.get(&key) {
                Some(fields) => {
                    object.insert(key, map.next_value_seed(Selected(fields))?);
                }
                None => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        Ok(Printable {
            object,
            raw_metadata,
        })
    }
}

/// What the printer of `info`'s kind reads besides metadata.
fn printed_fields(info: &ResourceInfo) -> &'static Fields {
    match (info.group, info.kind) {
        ("", "Pod") => &fields::POD,
        _ => &Fields::All,
    }
}

/// `object` as a Value for the printers (with the metadata fields they read), and its raw
/// metadata. `None` if the stored bytes are not an object (they always are).
fn printable<'a>(json: &'a [u8], fields: &'static Fields) -> Option<(Value, Option<&'a RawValue>)> {
    let mut de = serde_json::Deserializer::from_slice(json);
    let Printable {
        mut object,
        raw_metadata,
    } = PrintableSeed(fields).deserialize(&mut de).ok()?;
    de.end().ok()?;
    if let Some(raw) = raw_metadata {
        let mut de = serde_json::Deserializer::from_str(raw.get());
        let metadata = Selected(&fields::METADATA).deserialize(&mut de).ok()?;
        object.insert("metadata".into(), metadata);
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
    let fields = printed_fields(info);
    let mut out: Vec<u8> = Vec::with_capacity(4096 + items.len() * 512);
    out.extend_from_slice(b"{\"kind\":\"Table\",\"apiVersion\":\"meta.k8s.io/");
    out.extend_from_slice(version.as_bytes());
    out.extend_from_slice(b"\",\"metadata\":");
    write(&mut out, list_metadata);
    out.extend_from_slice(b",\"columnDefinitions\":");
    write(&mut out, &Value::Array(column_definitions(info)));
    out.extend_from_slice(b",\"rows\":[");
    let rows_start = out.len();
    for (i, item) in items.iter().enumerate() {
        // Once a few rows are out, their size predicts the rest: one allocation for the
        // whole answer instead of doubling (and copying) megabytes along the way.
        if i == SAMPLE_ROWS {
            let per_row = (out.len() - rows_start) / SAMPLE_ROWS;
            out.reserve((items.len() - SAMPLE_ROWS) * per_row * 9 / 8 + 64);
        }
        // The fallback (a full parse) is never needed for what the store wrote.
        let (object, raw_metadata) =
            printable(&item.json, fields).unwrap_or_else(|| (item.value(), None));
        if i > 0 {
            out.push(b',');
        }
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

/// Rows rendered before the answer's size is estimated from them.
const SAMPLE_ROWS: usize = 32;

fn write(out: &mut Vec<u8>, value: &Value) {
    // Writing a Value into a Vec cannot fail.
    let _ = serde_json::to_writer(&mut *out, value);
}
