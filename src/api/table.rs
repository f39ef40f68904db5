//! Table responses (`as=Table`): the columns kubectl shows for each kind, `-o wide` included.

use serde_json::Value;

use crate::kube::resources::ResourceInfo;

/// Whether each row carries its object (`includeObject=Object`), only metadata (the default,
/// `Metadata`, as PartialObjectMetadata), or nothing (`None`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IncludeObject {
    None,
    Metadata,
    Object,
}

/// Renders `objects` (full objects of kind `info`) as a `meta.k8s.io/v1` Table. `list_metadata`
/// becomes the Table's `metadata` (resourceVersion, continue). `now` formats ages.
pub fn render(
    _info: &ResourceInfo,
    _objects: &[Value],
    list_metadata: Value,
    _include: IncludeObject,
    _now: chrono::DateTime<chrono::Utc>,
) -> Value {
    serde_json::json!({"kind":"Table","apiVersion":"meta.k8s.io/v1","metadata":list_metadata,"columnDefinitions":[],"rows":[]})
}
