//! A pod's volumes: made on the node before its containers start, kept current while it runs,
//! mounted into each container as its `volumeMounts` say, removed when the pod is gone.
//!
//! # Use
//! The pod worker keeps one [`PodVolumes`] per pod:
//! - [`PodVolumes::sync`] on every sync of the pod: sets up what is missing and rewrites the
//!   configMap, secret, downwardAPI and projected volumes from the current objects (only
//!   when their contents changed), so a running container sees an update within a sync.
//!   Each failed volume is a [`VolumeFailure`] (kubelet's `FailedMount` event text); start
//!   no container while there is one (the pod stays `ContainerCreating`, as with kubelet) and
//!   try again at the next sync.
//! - [`PodVolumes::container_mounts`] before creating each container: its
//!   [`VolumeMount`]s, subPaths bound (see `subpath`). An error there is the container's
//!   `CreateContainerConfigError`.
//! - [`PodVolumes::teardown`] (or [`teardown`] with only a uid, after an agent restart) once
//!   every container is gone: unmounts and removes everything below.
//!
//! ConfigMaps and Secrets come from an [`ObjectSource`]: an async trait (a cache miss may
//! ask the API) that the pod workers implement over their client and caches.
//!
//! # On disk (kubelet's names)
//! ```text
//! <pods-dir>/<uid>/volumes/kubernetes.io~empty-dir/<name>/     0777 dir, or tmpfs (Memory)
//!                          kubernetes.io~configmap/<name>/     dir, atomic writer layout
//!                          kubernetes.io~secret/<name>/        tmpfs, atomic writer layout
//!                          kubernetes.io~downward-api/<name>/  dir, atomic writer layout
//!                          kubernetes.io~projected/<name>/     tmpfs, atomic writer layout
//! <pods-dir>/<uid>/volume-subpaths/<volume>/<container>/<n>    subPath bind mounts
//! ```
//! hostPath volumes are the host's paths themselves (`host_path`). configMap, secret,
//! downwardAPI and projected volumes are always mounted read-only, as kubelet mounts them.
//! Teardown deletes nothing while anything is still mounted below the pod's volume
//! directories (a subPath of a hostPath volume is a host directory).
//!
//! # Files
//! - `error`: [`VolumeError`], kubelet's messages.
//! - `objects`: [`ObjectSource`] and decoding ConfigMap and Secret data.
//! - `atomic_writer`: the `..data` symlink swap that updates files under running containers.
//! - `empty_dir`, `host_path`, `config_map`, `secret`, `downward_api`, `projected`: one per
//!   volume type.
//! - `subpath`: subPath and subPathExpr, bound safely.
//! - `mounts`: tmpfs, bind, unmount, the kernel's mount table.

mod atomic_writer;
mod config_map;
mod downward_api;
mod empty_dir;
mod error;
mod host_path;
mod mounts;
pub mod objects;
mod projected;
mod secret;
mod subpath;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde_json::Value;

pub use atomic_writer::{FileProjection, Payload, DATA_DIR};
pub use error::VolumeError;
pub use objects::{ObjectSource, StaticObjects, TokenRequest};

use super::env::{array_at, bool_at, str_at, EnvVar, NodeAllocatable};
use crate::agent::runtime::{Propagation, VolumeMount};
use empty_dir::Medium;

/// What volumes are made from.
#[derive(Debug, Clone)]
pub struct VolumeSettings {
    /// `<node-dir>/pods`.
    pub pods_dir: PathBuf,
    /// Sizes memory-backed volumes and answers `resourceFieldRef` limits a container does
    /// not set.
    pub allocatable: NodeAllocatable,
}

/// The volume types the agent makes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum VolumeKind {
    EmptyDir,
    ConfigMap,
    Secret,
    DownwardApi,
    Projected,
    HostPath,
}

impl VolumeKind {
    /// kubelet's plugin directory name (`None`: the volume is not under the pod directory).
    fn plugin_dir(self) -> Option<&'static str> {
        match self {
            VolumeKind::EmptyDir => Some("kubernetes.io~empty-dir"),
            VolumeKind::ConfigMap => Some("kubernetes.io~configmap"),
            VolumeKind::Secret => Some("kubernetes.io~secret"),
            VolumeKind::DownwardApi => Some("kubernetes.io~downward-api"),
            VolumeKind::Projected => Some("kubernetes.io~projected"),
            VolumeKind::HostPath => None,
        }
    }

    /// The API-data volumes are read-only in every container.
    pub fn always_read_only(self) -> bool {
        matches!(
            self,
            VolumeKind::ConfigMap
                | VolumeKind::Secret
                | VolumeKind::DownwardApi
                | VolumeKind::Projected
        )
    }
}

/// A volume set up on the node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MountedVolume {
    pub kind: VolumeKind,
    /// What containers bind.
    pub path: PathBuf,
}

/// A volume that could not be set up at this sync.
#[derive(Debug)]
pub struct VolumeFailure {
    pub volume: String,
    pub error: VolumeError,
}

impl VolumeFailure {
    /// The event's reason.
    pub const REASON: &'static str = "FailedMount";

    /// The event's message, as kubelet words it.
    pub fn message(&self) -> String {
        format!(
            "MountVolume.SetUp failed for volume {:?} : {}",
            self.volume, self.error
        )
    }
}

/// What one [`PodVolumes::sync`] did.
#[derive(Debug, Default)]
pub struct SyncReport {
    pub failures: Vec<VolumeFailure>,
    /// Volumes whose files were (re)written.
    pub written: Vec<String>,
}

impl SyncReport {
    /// Every volume is set up: containers may start.
    pub fn ready(&self) -> bool {
        self.failures.is_empty()
    }
}

/// The volumes of one pod.
#[derive(Debug)]
pub struct PodVolumes {
    namespace: String,
    pod_dir: PathBuf,
    allocatable: NodeAllocatable,
    mounted: BTreeMap<String, MountedVolume>,
}

/// Volume types the API accepts that this node cannot make.
const UNSUPPORTED: &[&str] = &[
    "persistentVolumeClaim",
    "ephemeral",
    "image",
    "csi",
    "nfs",
    "iscsi",
    "gitRepo",
    "rbd",
    "cephfs",
    "fc",
    "flexVolume",
    "glusterfs",
    "awsElasticBlockStore",
    "gcePersistentDisk",
    "azureDisk",
    "azureFile",
    "vsphereVolume",
    "quobyte",
    "portworxVolume",
    "scaleIO",
    "storageos",
    "photonPersistentDisk",
    "flocker",
    "cinder",
];

enum Source {
    EmptyDir(empty_dir::EmptyDirSource),
    HostPath(host_path::HostPathSource),
    ConfigMap(config_map::ConfigMapSource),
    Secret(secret::SecretSource),
    DownwardApi(downward_api::DownwardApiSource),
    Projected(projected::ProjectedSource),
}

/// A volume of the pod spec: its name and source, or why it cannot be made.
fn parse(volume: &Value) -> Result<(String, Source), VolumeError> {
    let name = str_at(volume, &["name"]).to_string();
    if name.is_empty() || name.contains('/') || name == "." || name == ".." {
        return Err(VolumeError::BadSpec {
            name,
            message: "a volume name must be a DNS label".into(),
        });
    }
    let bad = |e: serde_json::Error| VolumeError::BadSpec {
        name: name.clone(),
        message: e.to_string(),
    };
    let field = |key: &str| volume.get(key).filter(|v| !v.is_null()).cloned();
    let source = if let Some(v) = field("emptyDir") {
        Source::EmptyDir(serde_json::from_value(v).map_err(bad)?)
    } else if let Some(v) = field("hostPath") {
        Source::HostPath(serde_json::from_value(v).map_err(bad)?)
    } else if let Some(v) = field("configMap") {
        Source::ConfigMap(serde_json::from_value(v).map_err(bad)?)
    } else if let Some(v) = field("secret") {
        Source::Secret(serde_json::from_value(v).map_err(bad)?)
    } else if let Some(v) = field("downwardAPI") {
        Source::DownwardApi(serde_json::from_value(v).map_err(bad)?)
    } else if let Some(v) = field("projected") {
        Source::Projected(serde_json::from_value(v).map_err(bad)?)
    } else if let Some(kind) = UNSUPPORTED.iter().find(|k| field(k).is_some()) {
        return Err(VolumeError::Unsupported {
            name,
            kind: kind.to_string(),
        });
    } else {
        let fields: Vec<&str> = volume
            .as_object()
            .map(|o| {
                o.keys()
                    .map(String::as_str)
                    .filter(|k| *k != "name")
                    .collect()
            })
            .unwrap_or_default();
        return Err(VolumeError::UnknownType {
            name,
            fields: if fields.is_empty() {
                "none".into()
            } else {
                fields.join(", ")
            },
        });
    };
    Ok((name, source))
}

impl PodVolumes {
    /// The volumes of `pod` (nothing is made until [`PodVolumes::sync`]).
    pub fn new(settings: &VolumeSettings, pod: &Value) -> Result<PodVolumes, VolumeError> {
        let uid = str_at(pod, &["metadata", "uid"]).to_string();
        if uid.is_empty() || uid.contains('/') || uid == "." || uid == ".." {
            return Err(VolumeError::BadSpec {
                name: String::new(),
                message: format!("pod uid {uid:?} cannot name a directory"),
            });
        }
        Ok(PodVolumes {
            pod_dir: settings.pods_dir.join(&uid),
            namespace: str_at(pod, &["metadata", "namespace"]).to_string(),
            allocatable: settings.allocatable,
            mounted: BTreeMap::new(),
        })
    }

    /// `<pods-dir>/<uid>`.
    pub fn pod_dir(&self) -> &Path {
        &self.pod_dir
    }

    /// A volume set up by an earlier sync.
    pub fn volume(&self, name: &str) -> Option<&MountedVolume> {
        self.mounted.get(name)
    }

    fn dir_of(&self, kind: VolumeKind, name: &str) -> PathBuf {
        self.pod_dir
            .join("volumes")
            .join(kind.plugin_dir().unwrap_or_default())
            .join(name)
    }

    /// Sets up every volume of `pod` that is not yet, and rewrites the API-data volumes
    /// whose contents changed.
    pub async fn sync<S: ObjectSource>(&mut self, pod: &Value, objects: &S) -> SyncReport {
        let mut report = SyncReport::default();
        for volume in array_at(pod, &["spec", "volumes"]) {
            let (name, source) = match parse(volume) {
                Ok(parsed) => parsed,
                Err(error) => {
                    report.failures.push(VolumeFailure {
                        volume: str_at(volume, &["name"]).to_string(),
                        error,
                    });
                    continue;
                }
            };
            match self.sync_one(pod, &name, &source, objects).await {
                Ok(Some(written)) => {
                    if written {
                        report.written.push(name);
                    }
                }
                Ok(None) => {}
                Err(error) => report.failures.push(VolumeFailure {
                    volume: name,
                    error,
                }),
            }
        }
        report
    }

    /// `Some(written)` for the API-data volumes, `None` for the others.
    async fn sync_one<S: ObjectSource>(
        &mut self,
        pod: &Value,
        name: &str,
        source: &Source,
        objects: &S,
    ) -> Result<Option<bool>, VolumeError> {
        let ns = self.namespace.clone();
        let memory = Medium::Memory(empty_dir::memory_size(
            pod,
            None,
            self.allocatable.memory_bytes,
        ));
        let (kind, payload, medium) = match source {
            Source::EmptyDir(src) => {
                if !self.mounted.contains_key(name) {
                    let medium = src.medium(name, pod, self.allocatable.memory_bytes)?;
                    let dir = self.dir_of(VolumeKind::EmptyDir, name);
                    empty_dir::set_up(&dir, medium)?;
                    self.remember(name, VolumeKind::EmptyDir, dir);
                }
                return Ok(None);
            }
            Source::HostPath(src) => {
                if !self.mounted.contains_key(name) {
                    let path = host_path::set_up(name, src)?;
                    self.remember(name, VolumeKind::HostPath, path);
                }
                return Ok(None);
            }
            Source::ConfigMap(src) => {
                let mode = src.default_mode.unwrap_or(config_map::DEFAULT_MODE);
                let payload = config_map::payload(src, &ns, objects, mode).await?;
                (VolumeKind::ConfigMap, payload, Medium::Disk)
            }
            Source::Secret(src) => {
                let mode = src.default_mode.unwrap_or(config_map::DEFAULT_MODE);
                let payload = secret::payload(src, &ns, objects, mode).await?;
                (VolumeKind::Secret, payload, memory)
            }
            Source::DownwardApi(src) => {
                let mode = src.default_mode.unwrap_or(config_map::DEFAULT_MODE);
                let payload = downward_api::payload(&src.items, pod, &self.allocatable, mode)?;
                (VolumeKind::DownwardApi, payload, Medium::Disk)
            }
            Source::Projected(src) => {
                let projected =
                    projected::payload(src, pod, &ns, objects, &self.allocatable).await?;
                (VolumeKind::Projected, projected.payload, memory)
            }
        };
        // A payload that cannot be written leaves no directory behind.
        for path in payload.keys() {
            atomic_writer::clean_path(path)?;
        }
        let dir = self.dir_of(kind, name);
        empty_dir::set_up(&dir, medium)?;
        let written = atomic_writer::write(&dir, &payload)?;
        self.remember(name, kind, dir);
        Ok(Some(written))
    }

    fn remember(&mut self, name: &str, kind: VolumeKind, path: PathBuf) {
        self.mounted
            .insert(name.to_string(), MountedVolume { kind, path });
    }

    /// The mounts of `container` (a container of the pod spec), with `env` its environment
    /// for `subPathExpr`. Binds its subPaths under `volume-subpaths/` (again on every call:
    /// a restarted container sees a subPath's current file).
    pub fn container_mounts(
        &self,
        container: &Value,
        env: &[EnvVar],
    ) -> Result<Vec<VolumeMount>, VolumeError> {
        let container_name = str_at(container, &["name"]);
        let mut out = Vec::new();
        for (index, m) in array_at(container, &["volumeMounts"]).iter().enumerate() {
            let volume_name = str_at(m, &["name"]);
            let volume =
                self.mounted
                    .get(volume_name)
                    .ok_or_else(|| VolumeError::NoSuchVolume {
                        volume: volume_name.to_string(),
                        container: container_name.to_string(),
                    })?;
            let expr = str_at(m, &["subPathExpr"]);
            let sub_path = if expr.is_empty() {
                str_at(m, &["subPath"]).to_string()
            } else {
                subpath::expand_expr(expr, env)?
            };
            let host_path = if sub_path.is_empty() {
                volume.path.clone()
            } else {
                if container_name.is_empty() || container_name.contains('/') {
                    return Err(VolumeError::SubPath(format!(
                        "container name {container_name:?} cannot name a directory"
                    )));
                }
                let target = self
                    .pod_dir
                    .join("volume-subpaths")
                    .join(volume_name)
                    .join(container_name)
                    .join(index.to_string());
                subpath::prepare(
                    &volume.path,
                    &sub_path,
                    &target,
                    volume_name,
                    container_name,
                )?
            };
            let propagation = match str_at(m, &["mountPropagation"]) {
                "" | "None" => Propagation::None,
                "HostToContainer" => Propagation::HostToContainer,
                "Bidirectional" => Propagation::Bidirectional,
                other => {
                    return Err(VolumeError::BadSpec {
                        name: volume_name.to_string(),
                        message: format!("invalid mountPropagation {other:?}"),
                    })
                }
            };
            out.push(VolumeMount {
                host_path,
                container_path: str_at(m, &["mountPath"]).to_string(),
                read_only: bool_at(m, &["readOnly"]) || volume.kind.always_read_only(),
                propagation,
            });
        }
        Ok(out)
    }

    /// Unmounts and removes every volume of the pod (the containers must be gone).
    pub fn teardown(&mut self) -> Result<(), VolumeError> {
        teardown_dir(&self.pod_dir)?;
        self.mounted.clear();
        Ok(())
    }
}

/// [`PodVolumes::teardown`] for a pod known only by its uid.
pub fn teardown(pods_dir: &Path, uid: &str) -> Result<(), VolumeError> {
    if uid.is_empty() || uid.contains('/') || uid == "." || uid == ".." {
        return Err(VolumeError::BadSpec {
            name: String::new(),
            message: format!("pod uid {uid:?} cannot name a directory"),
        });
    }
    teardown_dir(&pods_dir.join(uid))
}

fn teardown_dir(pod_dir: &Path) -> Result<(), VolumeError> {
    for sub in ["volume-subpaths", "volumes"] {
        let dir = pod_dir.join(sub);
        mounts::unmount_all_under(&dir)?;
        match std::fs::remove_dir_all(&dir) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(VolumeError::io(format!("remove {}", dir.display()), e)),
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests;
