//! What can go wrong with a pod's volumes. The messages are kubelet's where kubelet has one
//! (`configmap "x" not found`, `hostPath type check failed: /p is not a directory`), so that
//! events and statuses read as they do on any other node.

use std::path::PathBuf;

#[derive(Debug, thiserror::Error)]
pub enum VolumeError {
    #[error("configmap \"{0}\" not found")]
    ConfigMapNotFound(String),
    #[error("secret \"{0}\" not found")]
    SecretNotFound(String),
    /// An `items` entry naming a key the object does not have (and not `optional`).
    #[error("configmap references non-existent config key: {0}")]
    ConfigMapKey(String),
    #[error("references non-existent secret key: {0}")]
    SecretKey(String),
    /// The object could not be read (the API unreachable); retried at the next sync.
    #[error("couldn't get {kind} {namespace}/{name}: {message}")]
    Fetch {
        kind: &'static str,
        namespace: String,
        name: String,
        message: String,
    },
    /// An object whose data does not decode (the API never stores one).
    #[error("{0}")]
    BadObject(String),
    /// A downwardAPI item that cannot be resolved.
    #[error("{0}")]
    Field(String),
    /// Several sources of a projected volume failed (kubelet's aggregate error text).
    #[error("{}", aggregate(.0))]
    Several(Vec<VolumeError>),
    /// A file name a configMap, secret, downwardAPI or projected volume cannot hold.
    #[error("invalid path: {0}")]
    InvalidPath(String),
    /// A hostPath that is not what its `type` says.
    #[error("hostPath type check failed: {path} is not {what}")]
    HostPathType { path: String, what: &'static str },
    #[error("{0:?} does not exist")]
    HostPathMissing(String),
    #[error("{0} is an invalid volume type")]
    HostPathInvalidType(String),
    /// A volume type this node does not run (the API accepts more types than the agent
    /// implements, e.g. persistentVolumeClaim).
    #[error("volume {name:?}: {kind} volumes are not supported on this node")]
    Unsupported { name: String, kind: String },
    /// A projected volume's source the agent cannot produce.
    #[error("{0} projections are not supported on this node")]
    UnsupportedProjection(&'static str),
    /// A volume with no type the agent knows of at all.
    #[error("volume {name:?} has no volume type this node knows (fields: {fields})")]
    UnknownType { name: String, fields: String },
    /// A volume spec that does not parse (the API validates them; a hand-made object might
    /// not be).
    #[error("volume {name:?}: {message}")]
    BadSpec { name: String, message: String },
    /// `volumeMounts[].name` names no volume of the pod.
    #[error("cannot find volume {volume:?} to mount into container {container:?}")]
    NoSuchVolume { volume: String, container: String },
    /// A `subPath` or `subPathExpr` that is absolute, climbs out, or resolves (through a
    /// symlink) outside its volume.
    #[error("{0}")]
    SubPath(String),
    #[error("{what}: {source}")]
    Io {
        what: String,
        #[source]
        source: std::io::Error,
    },
    #[error("{what}: {errno}")]
    Mount {
        what: String,
        errno: nix::errno::Errno,
    },
    /// Teardown found mounts it could not remove under the pod's directory: nothing there is
    /// deleted (it could be a host directory bound in).
    #[error("volumes of the pod are still mounted: {}", .0.iter().map(|p| p.display().to_string()).collect::<Vec<_>>().join(", "))]
    StillMounted(Vec<PathBuf>),
}

fn aggregate(errors: &[VolumeError]) -> String {
    match errors {
        [one] => one.to_string(),
        many => format!(
            "[{}]",
            many.iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
                .join(", ")
        ),
    }
}

impl VolumeError {
    pub(crate) fn io(what: impl Into<String>, source: std::io::Error) -> Self {
        VolumeError::Io {
            what: what.into(),
            source,
        }
    }

    pub(crate) fn mount(what: impl Into<String>, errno: nix::errno::Errno) -> Self {
        VolumeError::Mount {
            what: what.into(),
            errno,
        }
    }

    /// The container's waiting reason when this error stops a container from being
    /// created (a volume mount of that container): kubelet's `CreateContainerConfigError`.
    /// A volume that fails to set up keeps the pod in `ContainerCreating` with a
    /// `FailedMount` event ([`super::VolumeFailure`]).
    pub fn reason(&self) -> &'static str {
        "CreateContainerConfigError"
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_read_like_kubelets() {
        assert_eq!(
            VolumeError::ConfigMapNotFound("x".into()).to_string(),
            "configmap \"x\" not found"
        );
        assert_eq!(
            VolumeError::HostPathType {
                path: "/p".into(),
                what: "a directory"
            }
            .to_string(),
            "hostPath type check failed: /p is not a directory"
        );
        assert_eq!(
            VolumeError::HostPathMissing("/p".into()).to_string(),
            "\"/p\" does not exist"
        );
        let two = VolumeError::Several(vec![
            VolumeError::ConfigMapNotFound("a".into()),
            VolumeError::SecretNotFound("b".into()),
        ]);
        assert_eq!(
            two.to_string(),
            "[configmap \"a\" not found, secret \"b\" not found]"
        );
        assert_eq!(
            VolumeError::Several(vec![VolumeError::SecretKey("k".into())]).to_string(),
            "references non-existent secret key: k"
        );
    }
}
