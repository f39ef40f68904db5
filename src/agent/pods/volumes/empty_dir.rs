//! emptyDir: a directory made empty for the pod, on the node's disk (mode 0777, as kubelet
//! makes it) or, with `medium: Memory`, a tmpfs. Also the storage under the API-data volumes:
//! configMap and downwardAPI files live on disk, secret and projected ones in memory, as
//! kubelet wraps them.
//!
//! A tmpfs is sized as kubelet sizes it (`calculateEmptyDirMemorySize`): the node's
//! allocatable memory, or less — the pod's memory limit when every container declares one,
//! and the volume's `sizeLimit` when smaller still. A disk emptyDir's `sizeLimit` is not
//! enforced (kubelet evicts the pod when it is exceeded; eviction is not here yet).

use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use serde::Deserialize;
use serde_json::Value;

use super::mounts;
use super::VolumeError;
use crate::controllers::scheduler::quantity::Quantity;

/// `emptyDir`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct EmptyDirSource {
    #[serde(default)]
    pub medium: String,
    #[serde(default)]
    pub size_limit: Option<Value>,
}

/// Where an emptyDir's files live.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Medium {
    Disk,
    /// A tmpfs of at most that many bytes (`None`: the kernel's default, half the RAM).
    Memory(Option<u64>),
}

impl EmptyDirSource {
    /// The medium of this volume for `pod` on a node with `allocatable_memory` bytes.
    pub fn medium(
        &self,
        name: &str,
        pod: &Value,
        allocatable_memory: i64,
    ) -> Result<Medium, VolumeError> {
        match self.medium.as_str() {
            "" => Ok(Medium::Disk),
            "Memory" => {
                let limit = match &self.size_limit {
                    None => None,
                    Some(v) => Some(quantity(v).ok_or_else(|| VolumeError::BadSpec {
                        name: name.to_string(),
                        message: format!("sizeLimit {v} is not a quantity"),
                    })?),
                };
                Ok(Medium::Memory(memory_size(pod, limit, allocatable_memory)))
            }
            other if other.starts_with("HugePages") => Err(VolumeError::Unsupported {
                name: name.to_string(),
                kind: format!("emptyDir medium {other}"),
            }),
            other => Err(VolumeError::BadSpec {
                name: name.to_string(),
                message: format!("unknown emptyDir medium {other:?}"),
            }),
        }
    }
}

fn quantity(v: &Value) -> Option<i64> {
    match v {
        Value::String(s) => Quantity::parse(s).map(|q| q.value()),
        Value::Number(n) => n.as_i64(),
        _ => None,
    }
}

/// kubelet's size of a memory-backed volume: allocatable, or the pod's memory limit, or the
/// volume's own limit, whichever is smallest and positive.
pub fn memory_size(pod: &Value, size_limit: Option<i64>, allocatable_memory: i64) -> Option<u64> {
    let mut size = allocatable_memory.max(0);
    if let Some(pod_limit) = pod_memory_limit(pod) {
        if pod_limit > 0 && (size == 0 || pod_limit <= size) {
            size = pod_limit;
        }
    }
    if let Some(limit) = size_limit {
        if limit > 0 && (size == 0 || limit <= size) {
            size = limit;
        }
    }
    (size > 0).then_some(size as u64)
}

/// The pod's memory limit as its cgroup would get it: the sum of its containers' limits, or
/// the largest init container's when larger; `None` when a container declares none.
pub fn pod_memory_limit(pod: &Value) -> Option<i64> {
    let limit = |c: &Value| c.pointer("/resources/limits/memory").and_then(quantity);
    let spec = pod.get("spec")?;
    let containers = spec.get("containers").and_then(Value::as_array)?;
    let mut sum = 0i64;
    for c in containers {
        sum = sum.saturating_add(limit(c)?);
    }
    for c in spec
        .get("initContainers")
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or_default()
    {
        sum = sum.max(limit(c)?);
    }
    Some(sum)
}

/// Makes `dir` an empty directory on `medium`; one that exists keeps its contents (a
/// second call, or an agent restart, finds the pod's files where they were).
pub fn set_up(dir: &Path, medium: Medium) -> Result<(), VolumeError> {
    if !dir.exists() {
        std::fs::create_dir_all(dir)
            .map_err(|e| VolumeError::io(format!("create {}", dir.display()), e))?;
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o777))
            .map_err(|e| VolumeError::io(format!("chmod {}", dir.display()), e))?;
    }
    if let Medium::Memory(size) = medium {
        if !mounts::is_mount_point(dir)? {
            mounts::mount_tmpfs(dir, size)?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod(limits: &[Option<&str>], init: &[Option<&str>]) -> Value {
        let c = |l: &Option<&str>| match l {
            Some(m) => json!({"resources": {"limits": {"memory": m}}}),
            None => json!({}),
        };
        json!({"spec": {
            "containers": limits.iter().map(c).collect::<Vec<_>>(),
            "initContainers": init.iter().map(c).collect::<Vec<_>>()
        }})
    }

    #[test]
    fn tmpfs_sizes_follow_kubelet() {
        const GI: i64 = 1 << 30;
        const MI: i64 = 1 << 20;
        let none = pod(&[None], &[]);
        assert_eq!(memory_size(&none, None, 8 * GI), Some(8 * GI as u64));
        assert_eq!(
            memory_size(&none, Some(64 * MI), 8 * GI),
            Some(64 * MI as u64)
        );
        // A sizeLimit above what the node has does not raise the size.
        assert_eq!(
            memory_size(&none, Some(16 * GI), 8 * GI),
            Some(8 * GI as u64)
        );
        let limited = pod(&[Some("256Mi"), Some("256Mi")], &[Some("1Gi")]);
        assert_eq!(pod_memory_limit(&limited), Some(GI));
        let two = pod(&[Some("256Mi"), Some("256Mi")], &[]);
        assert_eq!(memory_size(&two, None, 8 * GI), Some(512 * MI as u64));
        assert_eq!(
            memory_size(&two, Some(100 * MI), 8 * GI),
            Some(100 * MI as u64)
        );
        // One container without a limit: the pod has none.
        assert_eq!(pod_memory_limit(&pod(&[Some("1Gi"), None], &[])), None);
        // Nothing known: the kernel's default.
        assert_eq!(memory_size(&none, None, 0), None);
        assert_eq!(memory_size(&none, Some(MI), 0), Some(MI as u64));
    }

    #[test]
    fn media() {
        let p = pod(&[None], &[]);
        let src = |v: Value| serde_json::from_value::<EmptyDirSource>(v).unwrap();
        assert_eq!(
            src(json!({})).medium("v", &p, 1 << 30).unwrap(),
            Medium::Disk
        );
        assert_eq!(
            src(json!({"medium": "Memory", "sizeLimit": "1Mi"}))
                .medium("v", &p, 1 << 30)
                .unwrap(),
            Medium::Memory(Some(1 << 20))
        );
        assert!(matches!(
            src(json!({"medium": "HugePages"})).medium("v", &p, 0),
            Err(VolumeError::Unsupported { .. })
        ));
        assert!(src(json!({"medium": "Memory", "sizeLimit": "lots"}))
            .medium("v", &p, 0)
            .unwrap_err()
            .to_string()
            .contains("not a quantity"));
    }

    #[test]
    fn disk_dirs_are_world_writable_and_kept() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("a/b");
        set_up(&dir, Medium::Disk).unwrap();
        let mode = std::fs::metadata(&dir).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o777);
        std::fs::write(dir.join("f"), "x").unwrap();
        set_up(&dir, Medium::Disk).unwrap();
        assert!(dir.join("f").exists());
    }
}
