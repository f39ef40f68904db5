//! Table responses (`as=Table`): the columns kubectl shows for each kind, `-o wide` included.
//!
//! Columns and cells follow kube-apiserver's printers (kubernetes
//! pkg/printers/internalversion/printers.go). Like the apiserver, every row carries all cells
//! (wide ones too); kubectl hides columns with priority ≠ 0 unless `-o wide`. Printers are
//! looked up by (group, kind) in [`printers`]; kinds without one get the apiserver's default
//! table: NAME and CREATED AT.

mod cluster;
mod core;
mod fields;
mod format;
mod other;
mod stream;
mod workloads;

use serde_json::{json, Value};

use format::At;

use crate::kube::resources::ResourceInfo;

pub use format::human_duration;
pub use stream::render_stored;

/// Whether each row carries its object (`includeObject=Object`), only metadata (the default,
/// `Metadata`, as PartialObjectMetadata), or nothing (`None`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IncludeObject {
    None,
    Metadata,
    Object,
}

impl IncludeObject {
    /// Parses the `includeObject` query parameter; anything unknown is the default.
    pub fn from_query(value: Option<&str>) -> Self {
        match value {
            Some("None") => IncludeObject::None,
            Some("Object") => IncludeObject::Object,
            _ => IncludeObject::Metadata,
        }
    }
}

/// One column of a Table (`metav1.TableColumnDefinition`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Column {
    pub name: &'static str,
    /// OpenAPI type of the cells: "string" or "integer".
    pub kind: &'static str,
    /// "name" for the column holding the object's name, "" otherwise.
    pub format: &'static str,
    pub description: &'static str,
    /// 0 for normal columns, 1 for those shown only with `-o wide`.
    pub priority: u8,
}

pub(crate) const NAME_DOC: &str = "Name must be unique within a namespace. Is required when creating resources, although some resources may allow a client to request the generation of a name automatically. Name is primarily intended for creation idempotence and configuration definition. Cannot be updated. More info: https://kubernetes.io/docs/concepts/overview/working-with-objects/names#names";
pub(crate) const AGE_DOC: &str = "CreationTimestamp is a timestamp representing the server time when this object was created. It is not guaranteed to be set in happens-before order across separate operations. Clients may not set this value. It is represented in RFC3339 form and is in UTC.\n\nPopulated by the system. Read-only. Null for lists. More info: https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#metadata";

pub(crate) const NAME: Column = Column {
    name: "Name",
    kind: "string",
    format: "name",
    description: NAME_DOC,
    priority: 0,
};
pub(crate) const AGE: Column = col("Age", AGE_DOC);

/// A normal string column.
pub(crate) const fn col(name: &'static str, description: &'static str) -> Column {
    Column {
        name,
        kind: "string",
        format: "",
        description,
        priority: 0,
    }
}

/// A column of another type ("integer", "boolean").
pub(crate) const fn typed(
    name: &'static str,
    kind: &'static str,
    description: &'static str,
) -> Column {
    Column {
        kind,
        ..col(name, description)
    }
}

/// A string column shown only with `-o wide`.
pub(crate) const fn wide(name: &'static str, description: &'static str) -> Column {
    Column {
        priority: 1,
        ..col(name, description)
    }
}

/// Renders one object's cells, in column order. `now` is for ages.
pub(crate) type CellsFn = fn(&Value, chrono::DateTime<chrono::Utc>) -> Vec<Value>;

/// How one kind is printed.
pub(crate) struct Printer {
    pub group: &'static str,
    pub kind: &'static str,
    pub columns: &'static [Column],
    pub cells: CellsFn,
}

/// Every printer; later kinds add rows here (or in a new per-group file).
fn printers() -> impl Iterator<Item = &'static Printer> {
    core::PRINTERS
        .iter()
        .chain(other::PRINTERS.iter())
        .chain(workloads::PRINTERS.iter())
        .chain(cluster::PRINTERS.iter())
}

/// apiserver's default table convertor (pkg/registry/rest/table.go): the creation time as an
/// RFC 3339 date rather than an age.
const DEFAULT_COLUMNS: &[Column] = &[NAME, typed("Created At", "date", AGE_DOC)];

fn default_cells(obj: &Value, _now: chrono::DateTime<chrono::Utc>) -> Vec<Value> {
    vec![
        json!(format::name(obj)),
        // Go formats the zero time when the field is missing.
        json!(match format::text(obj, "/metadata/creationTimestamp") {
            "" => "0001-01-01T00:00:00Z",
            t => t,
        }),
    ]
}

/// The columns and cell function for `info`'s kind.
pub(crate) fn printer_for(info: &ResourceInfo) -> (&'static [Column], CellsFn) {
    printers()
        .find(|p| p.group == info.group && p.kind == info.kind)
        .map(|p| (p.columns, p.cells))
        .unwrap_or((DEFAULT_COLUMNS, default_cells as CellsFn))
}

/// The column definitions of `info`'s table, as JSON.
pub fn column_definitions(info: &ResourceInfo) -> Vec<Value> {
    printer_for(info)
        .0
        .iter()
        .map(|c| {
            json!({"name": c.name, "type": c.kind, "format": c.format,
                   "description": c.description, "priority": c.priority})
        })
        .collect()
}

/// Renders `objects` (full objects of kind `info`) as a `meta.k8s.io/v1` Table. `list_metadata`
/// becomes the Table's `metadata` (resourceVersion, continue). `now` formats ages.
pub fn render(
    info: &ResourceInfo,
    objects: &[Value],
    list_metadata: Value,
    include: IncludeObject,
    now: chrono::DateTime<chrono::Utc>,
) -> Value {
    let (_, cells) = printer_for(info);
    render_with(
        column_definitions(info),
        objects,
        list_metadata,
        include,
        |obj| cells(obj, now),
        |obj| row_conditions(info, obj),
    )
}

/// A Table with the column definitions `columns`, each row's cells from `cells` and its
/// conditions from `conditions` (the part every printer shares, custom kinds' included).
pub(crate) fn render_with(
    columns: Vec<Value>,
    objects: &[Value],
    list_metadata: Value,
    include: IncludeObject,
    cells: impl Fn(&Value) -> Vec<Value>,
    conditions: impl Fn(&Value) -> Option<Value>,
) -> Value {
    let rows: Vec<Value> = objects
        .iter()
        .map(|obj| {
            let mut row = serde_json::Map::new();
            row.insert("cells".into(), Value::Array(cells(obj)));
            if let Some(conditions) = conditions(obj) {
                row.insert("conditions".into(), conditions);
            }
            match include {
                IncludeObject::None => {}
                IncludeObject::Metadata => {
                    row.insert(
                        "object".into(),
                        json!({
                            "kind": "PartialObjectMetadata",
                            "apiVersion": "meta.k8s.io/v1",
                            "metadata": obj.get("metadata").cloned().unwrap_or_else(|| json!({})),
                        }),
                    );
                }
                IncludeObject::Object => {
                    row.insert("object".into(), obj.clone());
                }
            }
            Value::Object(row)
        })
        .collect();
    json!({
        "kind": "Table",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": list_metadata,
        "columnDefinitions": columns,
        "rows": rows,
    })
}

/// Completed pods carry a `Completed` row condition, as upstream marks them.
fn row_conditions(info: &ResourceInfo, obj: &Value) -> Option<Value> {
    if !(info.group.is_empty() && info.kind == "Pod") {
        return None;
    }
    let (reason, message) = match obj.at("/status/phase").and_then(Value::as_str)? {
        "Succeeded" => ("Succeeded", "The pod has completed successfully."),
        "Failed" => ("Failed", "The pod failed."),
        _ => return None,
    };
    Some(json!([{"type": "Completed", "status": "True", "reason": reason, "message": message}]))
}

#[cfg(test)]
mod tests;
