//! downwardAPI: the pod's own fields as files (kubelet's `CollectData`): `fieldRef` for
//! `metadata.name`, `namespace`, `uid`, `labels`, `annotations` (all of them as `key="value"`
//! lines, or one by subscript), `resourceFieldRef` for a container's requests and limits.
//! Written with the atomic writer, so new labels or annotations reach running containers at
//! the pod's next sync. Every item is tried; the failures are reported together.

use serde::Deserialize;
use serde_json::Value;

use super::atomic_writer::{clean_path, FileProjection, Payload};
use super::VolumeError;
use crate::agent::pods::env::{self, NodeAllocatable, ResourceSelector};

/// `downwardAPI` (and a projected volume's `downwardAPI` source).
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DownwardApiSource {
    #[serde(default)]
    pub items: Vec<DownwardApiFile>,
    #[serde(default)]
    pub default_mode: Option<u32>,
}

#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DownwardApiFile {
    #[serde(default)]
    pub path: String,
    #[serde(default)]
    pub field_ref: Option<FieldRef>,
    #[serde(default)]
    pub resource_field_ref: Option<Value>,
    #[serde(default)]
    pub mode: Option<u32>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct FieldRef {
    #[serde(default)]
    pub api_version: String,
    #[serde(default)]
    pub field_path: String,
}

/// The files for `items` of `pod`.
pub fn payload(
    items: &[DownwardApiFile],
    pod: &Value,
    allocatable: &NodeAllocatable,
    default_mode: u32,
) -> Result<Payload, VolumeError> {
    let mut payload = Payload::new();
    let mut errors = Vec::new();
    for item in items {
        let data = if let Some(f) = &item.field_ref {
            env::metadata_field(pod, &f.field_path)
        } else if let Some(r) = &item.resource_field_ref {
            env::resource_field(pod, &ResourceSelector::from_json(r), allocatable)
        } else {
            Ok(String::new())
        };
        match data {
            Ok(data) => {
                let path = match clean_path(&item.path) {
                    Ok(p) => p,
                    Err(e) => {
                        errors.push(e);
                        continue;
                    }
                };
                payload.insert(
                    path,
                    FileProjection {
                        data: data.into_bytes(),
                        mode: item.mode.unwrap_or(default_mode),
                    },
                );
            }
            Err(e) => errors.push(VolumeError::Field(e)),
        }
    }
    match errors.len() {
        0 => Ok(payload),
        _ => Err(VolumeError::Several(errors)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn fields_and_resources_as_files() {
        let pod = json!({
            "metadata": {"name": "web", "namespace": "ns", "uid": "u1",
                         "labels": {"b": "2", "a": "1"}, "annotations": {"k": "v\"q"}},
            "spec": {"containers": [{"name": "main", "resources": {"limits": {"memory": "64Mi"}}}]}
        });
        let items: Vec<DownwardApiFile> = serde_json::from_value(json!([
            {"path": "labels", "fieldRef": {"fieldPath": "metadata.labels"}},
            {"path": "annotations", "fieldRef": {"fieldPath": "metadata.annotations"}},
            {"path": "meta/name", "fieldRef": {"fieldPath": "metadata.name"}, "mode": 0o400},
            {"path": "app", "fieldRef": {"fieldPath": "metadata.labels['a']"}},
            {"path": "mem", "resourceFieldRef": {"containerName": "main", "resource": "limits.memory", "divisor": "1Mi"}},
            {"path": "cpu", "resourceFieldRef": {"containerName": "main", "resource": "limits.cpu", "divisor": "1m"}}
        ]))
        .unwrap();
        let alloc = NodeAllocatable {
            cpu_millis: 2000,
            memory_bytes: 1 << 30,
            ephemeral_storage_bytes: 0,
        };
        let p = payload(&items, &pod, &alloc, 0o644).unwrap();
        let text = |k: &str| String::from_utf8(p[k].data.clone()).unwrap();
        assert_eq!(text("labels"), "a=\"1\"\nb=\"2\"");
        assert_eq!(text("annotations"), "k=\"v\\\"q\"");
        assert_eq!(text("meta/name"), "web");
        assert_eq!(p["meta/name"].mode, 0o400);
        assert_eq!(p["labels"].mode, 0o644);
        assert_eq!(text("app"), "1");
        assert_eq!(text("mem"), "64");
        assert_eq!(text("cpu"), "2000");
    }

    #[test]
    fn every_failure_is_reported() {
        let pod = json!({"metadata": {"name": "web"}, "spec": {"containers": []}});
        let items: Vec<DownwardApiFile> = serde_json::from_value(json!([
            {"path": "a", "fieldRef": {"fieldPath": "spec.nodeName"}},
            {"path": "b", "resourceFieldRef": {"containerName": "ghost", "resource": "limits.cpu"}},
            {"path": "ok", "fieldRef": {"fieldPath": "metadata.name"}}
        ]))
        .unwrap();
        let e = payload(&items, &pod, &NodeAllocatable::default(), 0o644).unwrap_err();
        assert_eq!(
            e.to_string(),
            "[unsupported fieldPath: spec.nodeName, container ghost not found]"
        );
    }
}
