//! `metadata.managedFields`: one entry per (manager, operation, subresource), each with the
//! fields that manager owns, read from and written back to an object as kube-apiserver does.
//!
//! Entry format (`metav1.ManagedFieldsEntry`, keys in this order):
//! `{"manager", "operation": "Apply"|"Update", "apiVersion", "time", "fieldsType": "FieldsV1",
//! "fieldsV1": {…}, "subresource"}` (`subresource` only when set). Entries are sorted by
//! operation (Apply first), then time, manager, apiVersion and subresource.

use serde_json::{json, Map, Value};

use super::fieldset::{FieldSet, FieldsV1Error};

/// Why an object's `metadata.managedFields` cannot be read (the object is then treated as
/// untracked: see `read_entries` and `record_update`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ManagedFieldsError {
    #[error("metadata.managedFields must be a list")]
    NotAList,
    #[error("unknown managedFields operation {0:?}")]
    UnknownOperation(String),
    #[error("managedFields entries must have fieldsType FieldsV1")]
    NotFieldsV1,
    #[error(transparent)]
    Fields(#[from] FieldsV1Error),
}

/// Whether an entry records server-side apply or any other write.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Operation {
    Apply,
    Update,
}

impl Operation {
    fn name(self) -> &'static str {
        match self {
            Operation::Apply => "Apply",
            Operation::Update => "Update",
        }
    }
}

/// One managedFields entry.
#[derive(Debug, Clone, PartialEq)]
pub struct Entry {
    pub manager: String,
    pub operation: Operation,
    pub api_version: String,
    pub time: Option<String>,
    pub subresource: String,
    pub fields: FieldSet,
}

impl Entry {
    /// Whether `self` and `other` are the same manager (the apiVersion counts for updaters
    /// only, so an applier keeps one entry across versions).
    pub fn same_manager(&self, other: &Entry) -> bool {
        self.manager == other.manager
            && self.operation == other.operation
            && self.subresource == other.subresource
            && (self.operation == Operation::Apply || self.api_version == other.api_version)
    }

    /// How conflict messages name this manager: `"kubectl"`, `"m" with subresource "status"`,
    /// `"kubectl-edit" using v1` for updaters.
    pub fn display(&self) -> String {
        let mut out = format!("{:?}", self.manager);
        if !self.subresource.is_empty() {
            out = format!("{out} with subresource {:?}", self.subresource);
        }
        if self.operation == Operation::Update {
            out = format!("{out} using {}", self.api_version);
        }
        out
    }

    fn encode(&self) -> Value {
        let mut map = Map::new();
        map.insert("manager".into(), json!(self.manager));
        map.insert("operation".into(), json!(self.operation.name()));
        map.insert("apiVersion".into(), json!(self.api_version));
        if let Some(time) = &self.time {
            map.insert("time".into(), json!(time));
        }
        map.insert("fieldsType".into(), json!("FieldsV1"));
        map.insert("fieldsV1".into(), self.fields.to_fields_v1());
        if !self.subresource.is_empty() {
            map.insert("subresource".into(), json!(self.subresource));
        }
        Value::Object(map)
    }

    fn decode(value: &Value) -> Result<Entry, ManagedFieldsError> {
        let text = |key: &str| {
            value
                .get(key)
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_string()
        };
        let operation = match text("operation").as_str() {
            "Apply" => Operation::Apply,
            "Update" => Operation::Update,
            other => return Err(ManagedFieldsError::UnknownOperation(other.to_string())),
        };
        if text("fieldsType") != "FieldsV1" {
            return Err(ManagedFieldsError::NotFieldsV1);
        }
        let fields = match value.get("fieldsV1") {
            Some(v) => FieldSet::from_fields_v1(v)?,
            None => FieldSet::new(),
        };
        Ok(Entry {
            manager: text("manager"),
            operation,
            api_version: text("apiVersion"),
            time: value
                .get("time")
                .and_then(Value::as_str)
                .map(str::to_string),
            subresource: text("subresource"),
            fields,
        })
    }
}

/// What an object's `metadata.managedFields` says.
#[derive(Debug, Clone, PartialEq)]
pub enum Recorded {
    /// Absent or null: the client did not speak about ownership.
    Absent,
    /// `[]` or `[{}]`: the client asks to forget all ownership.
    Reset,
    Entries(Vec<Entry>),
}

/// Reads `metadata.managedFields` of `object`.
pub fn read(object: &Value) -> Result<Recorded, ManagedFieldsError> {
    match object.pointer("/metadata/managedFields") {
        None | Some(Value::Null) => Ok(Recorded::Absent),
        Some(Value::Array(items)) if items.is_empty() => Ok(Recorded::Reset),
        Some(Value::Array(items))
            if items.len() == 1 && items[0].as_object().is_some_and(Map::is_empty) =>
        {
            Ok(Recorded::Reset)
        }
        Some(Value::Array(items)) => items
            .iter()
            .map(Entry::decode)
            .collect::<Result<Vec<_>, _>>()
            .map(Recorded::Entries),
        Some(_) => Err(ManagedFieldsError::NotAList),
    }
}

/// The entries of a stored object (undecodable ones read as none).
pub fn read_entries(object: &Value) -> Vec<Entry> {
    match read(object) {
        Ok(Recorded::Entries(entries)) => entries,
        _ => Vec::new(),
    }
}

/// Writes `entries` (empty ones dropped, sorted) into `object`'s metadata; no entries removes
/// the field.
pub fn write(object: &mut Value, mut entries: Vec<Entry>) {
    entries.retain(|e| !e.fields.is_empty());
    entries.sort_by(|a, b| {
        a.operation
            .cmp(&b.operation)
            .then_with(|| a.time.cmp(&b.time))
            .then_with(|| a.manager.cmp(&b.manager))
            .then_with(|| a.api_version.cmp(&b.api_version))
            .then_with(|| a.subresource.cmp(&b.subresource))
    });
    let Some(md) = object.get_mut("metadata").and_then(Value::as_object_mut) else {
        return;
    };
    if entries.is_empty() {
        md.shift_remove("managedFields");
    } else {
        md.insert(
            "managedFields".into(),
            Value::Array(entries.iter().map(Entry::encode).collect()),
        );
    }
}

/// Most Update entries an object keeps (kube-apiserver's `DefaultMaxUpdateManagers`).
pub const MAX_UPDATERS: usize = 10;

/// The manager that collects the oldest Update entries past [`MAX_UPDATERS`].
pub const ANCIENT_CHANGES: &str = "ancient-changes";

/// Merges the oldest Update entries into one `ancient-changes` entry per apiVersion until at
/// most `max` remain, as kube-apiserver caps them.
pub fn cap_updaters(entries: &mut Vec<Entry>, max: usize) {
    let mut updaters: Vec<usize> = (0..entries.len())
        .filter(|&i| entries[i].operation == Operation::Update && !entries[i].fields.is_empty())
        .collect();
    if updaters.len() <= max {
        return;
    }
    updaters.sort_by(|&a, &b| {
        entries[a]
            .time
            .cmp(&entries[b].time)
            .then_with(|| entries[a].manager.cmp(&entries[b].manager))
    });
    let mut remaining = updaters.len();
    let mut first_of_version: Vec<(String, usize)> = Vec::new();
    let mut doomed = Vec::new();
    for &i in &updaters {
        if remaining <= max {
            break;
        }
        let version = entries[i].api_version.clone();
        match first_of_version.iter().find(|(v, _)| *v == version) {
            Some(&(_, first)) => {
                let fields = entries[i].fields.clone();
                let time = entries[i].time.clone();
                let bucket = &mut entries[first];
                bucket.manager = ANCIENT_CHANGES.into();
                bucket.subresource = String::new();
                bucket.fields = bucket.fields.union(&fields);
                bucket.time = time;
                doomed.push(i);
                remaining -= 1;
            }
            None => first_of_version.push((version, i)),
        }
    }
    doomed.sort_unstable();
    for i in doomed.into_iter().rev() {
        entries.remove(i);
    }
}

/// The manager name of a non-apply write: `fieldManager`, else the User-Agent up to its first
/// `/` (printable characters, at most 128), as kube-apiserver derives it.
pub fn manager_or_user_agent(field_manager: Option<&str>, user_agent: &str) -> String {
    if let Some(m) = field_manager.filter(|m| !m.is_empty()) {
        return m.to_string();
    }
    user_agent
        .split('/')
        .next()
        .unwrap_or("")
        .chars()
        .filter(|c| !c.is_control())
        .take(128)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_round_trip_sorted() {
        let object = json!({"metadata": {"managedFields": [
            {"manager": "b", "operation": "Update", "apiVersion": "v1", "time": "2024-01-01T00:00:00Z",
             "fieldsType": "FieldsV1", "fieldsV1": {"f:data": {"f:x": {}}}},
            {"manager": "a", "operation": "Apply", "apiVersion": "v1", "time": "2024-01-02T00:00:00Z",
             "fieldsType": "FieldsV1", "fieldsV1": {"f:data": {"f:y": {}}}, "subresource": "status"}
        ]}});
        let entries = read_entries(&object);
        assert_eq!(entries.len(), 2);
        let mut out = json!({"metadata": {}});
        write(&mut out, entries);
        let written = &out["metadata"]["managedFields"];
        assert_eq!(written[0]["manager"], "a");
        assert_eq!(written[0]["subresource"], "status");
        assert_eq!(written[1]["fieldsV1"], json!({"f:data": {"f:x": {}}}));
        assert_eq!(
            read(&json!({"metadata": {"managedFields": [{}]}})),
            Ok(Recorded::Reset)
        );
        assert_eq!(read(&json!({"metadata": {}})), Ok(Recorded::Absent));
        let entry = |e: serde_json::Value| read(&json!({"metadata": {"managedFields": [e]}}));
        assert_eq!(
            entry(json!({"operation": "X"})),
            Err(ManagedFieldsError::UnknownOperation("X".into()))
        );
        assert_eq!(
            entry(json!({"operation": "Apply", "fieldsType": "FieldsV2"})),
            Err(ManagedFieldsError::NotFieldsV1)
        );
        assert_eq!(
            entry(json!({"operation": "Apply", "fieldsType": "FieldsV1", "fieldsV1": []})),
            Err(ManagedFieldsError::Fields(FieldsV1Error::NotAnObject))
        );
        assert_eq!(
            read(&json!({"metadata": {"managedFields": {}}})),
            Err(ManagedFieldsError::NotAList)
        );
    }

    #[test]
    fn updaters_are_capped() {
        let mut entries: Vec<Entry> = (0..13)
            .map(|i| {
                let mut fields = FieldSet::new();
                fields.insert(&[super::super::PathElement::Field(format!("f{i}"))]);
                Entry {
                    manager: format!("m{i:02}"),
                    operation: Operation::Update,
                    api_version: "v1".into(),
                    time: Some(format!("2024-01-01T00:00:{i:02}Z")),
                    subresource: String::new(),
                    fields,
                }
            })
            .collect();
        cap_updaters(&mut entries, MAX_UPDATERS);
        assert_eq!(entries.len(), MAX_UPDATERS);
        let bucket = entries
            .iter()
            .find(|e| e.manager == ANCIENT_CHANGES)
            .unwrap();
        assert_eq!(bucket.fields.paths().len(), 4);
        assert_eq!(bucket.time.as_deref(), Some("2024-01-01T00:00:03Z"));
        assert!(!entries
            .iter()
            .any(|e| e.manager == "m00" || e.manager == "m03"));
        assert!(entries.iter().any(|e| e.manager == "m04"));
    }

    #[test]
    fn manager_names() {
        assert_eq!(manager_or_user_agent(Some("mine"), "kubectl/v1.33"), "mine");
        assert_eq!(
            manager_or_user_agent(None, "kubectl/v1.33.0 (linux/amd64) kubernetes/abc"),
            "kubectl"
        );
        assert_eq!(manager_or_user_agent(Some(""), ""), "");
    }
}
