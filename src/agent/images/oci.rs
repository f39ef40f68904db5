//! The image formats: OCI and Docker (schema 2) manifests, image indexes / manifest lists,
//! image configs and their media types, and the choice of one platform's manifest from an
//! index. Docker's schema 1 manifests are refused (no registry has served them by default
//! since 2019). Fields we do not use are not modelled; unknown fields are ignored.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::digest::Digest;

pub const OCI_INDEX: &str = "application/vnd.oci.image.index.v1+json";
pub const OCI_MANIFEST: &str = "application/vnd.oci.image.manifest.v1+json";
pub const OCI_CONFIG: &str = "application/vnd.oci.image.config.v1+json";
pub const OCI_LAYER: &str = "application/vnd.oci.image.layer.v1.tar";
pub const OCI_LAYER_GZIP: &str = "application/vnd.oci.image.layer.v1.tar+gzip";
pub const DOCKER_LIST: &str = "application/vnd.docker.distribution.manifest.list.v2+json";
pub const DOCKER_MANIFEST: &str = "application/vnd.docker.distribution.manifest.v2+json";
pub const DOCKER_CONFIG: &str = "application/vnd.docker.container.image.v1+json";
pub const DOCKER_LAYER_GZIP: &str = "application/vnd.docker.image.rootfs.diff.tar.gzip";

/// The `Accept` header of a manifest request: every manifest and index type we read.
pub const MANIFEST_ACCEPT: &str = "application/vnd.oci.image.index.v1+json, \
     application/vnd.docker.distribution.manifest.list.v2+json, \
     application/vnd.oci.image.manifest.v1+json, \
     application/vnd.docker.distribution.manifest.v2+json";

/// The annotation containerd writes on an OCI archive's index entries: the image's full name.
pub const ANNOTATION_CONTAINERD_NAME: &str = "io.containerd.image.name";
/// The OCI annotation naming an index entry: a full name or, from some tools, only a tag.
pub const ANNOTATION_REF_NAME: &str = "org.opencontainers.image.ref.name";

/// A reference to content: what it is, its digest and size.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Descriptor {
    #[serde(default)]
    pub media_type: String,
    pub digest: Digest,
    pub size: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub platform: Option<Platform>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub annotations: BTreeMap<String, String>,
}

/// An operating system and CPU, as an index entry or an image config names it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Platform {
    pub os: String,
    pub architecture: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub variant: Option<String>,
}

/// One platform's image: a config and layers, bottom first.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Manifest {
    pub schema_version: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub media_type: Option<String>,
    pub config: Descriptor,
    pub layers: Vec<Descriptor>,
}

/// An image index (OCI) or manifest list (Docker): one manifest per platform.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Index {
    pub schema_version: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub media_type: Option<String>,
    pub manifests: Vec<Descriptor>,
}

/// An image config: the platform, how to run it, and the uncompressed layers' digests.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ImageConfig {
    #[serde(default)]
    pub architecture: String,
    #[serde(default)]
    pub os: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub variant: Option<String>,
    #[serde(default)]
    pub config: ContainerConfig,
    pub rootfs: RootFs,
}

/// The layers' diff-ids: sha256 of each layer as an uncompressed tar, bottom first.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RootFs {
    #[serde(rename = "type")]
    pub kind: String,
    pub diff_ids: Vec<Digest>,
}

/// How the image wants to be run (the `config` object of an image config). Kubernetes'
/// `command` replaces `Entrypoint`, `args` replaces `Cmd`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct ContainerConfig {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub env: Option<Vec<String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub entrypoint: Option<Vec<String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cmd: Option<Vec<String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub working_dir: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stop_signal: Option<String>,
}

/// What a manifest body turned out to be.
#[derive(Debug)]
pub enum Parsed {
    Index(Index),
    Manifest(Manifest),
}

/// A manifest body we cannot use.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FormatError {
    #[error("schema 1 manifests are not supported (push the image again with a current tool)")]
    Schema1,
    #[error("unsupported manifest media type {0:?}")]
    MediaType(String),
    #[error("not a manifest: {0}")]
    Json(String),
}

/// Parses a manifest or index body, using `content_type` (the answer's header) when the body
/// does not name its media type itself, as OCI manifests need not.
pub fn parse_manifest(body: &[u8], content_type: Option<&str>) -> Result<Parsed, FormatError> {
    #[derive(Deserialize)]
    #[serde(rename_all = "camelCase")]
    struct Probe {
        #[serde(default)]
        schema_version: u32,
        #[serde(default)]
        media_type: Option<String>,
        #[serde(default)]
        manifests: Option<serde_json::Value>,
    }
    let json = |e: serde_json::Error| FormatError::Json(e.to_string());
    let probe: Probe = serde_json::from_slice(body).map_err(json)?;
    if probe.schema_version == 1 {
        return Err(FormatError::Schema1);
    }
    let header = content_type
        .map(|t| t.split(';').next().unwrap_or("").trim())
        .filter(|t| !t.is_empty() && *t != "application/json" && *t != "text/plain");
    let media_type = probe.media_type.as_deref().or(header);
    match media_type {
        Some(OCI_INDEX | DOCKER_LIST) => {
            Ok(Parsed::Index(serde_json::from_slice(body).map_err(json)?))
        }
        Some(OCI_MANIFEST | DOCKER_MANIFEST) => Ok(Parsed::Manifest(
            serde_json::from_slice(body).map_err(json)?,
        )),
        Some(other) if other.contains("schema1") || other.contains("manifest.v1") => {
            Err(FormatError::Schema1)
        }
        Some(other) => Err(FormatError::MediaType(other.to_string())),
        None if probe.manifests.is_some() => {
            Ok(Parsed::Index(serde_json::from_slice(body).map_err(json)?))
        }
        None => Ok(Parsed::Manifest(
            serde_json::from_slice(body).map_err(json)?,
        )),
    }
}

/// How a layer blob is compressed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Compression {
    None,
    Gzip,
}

/// The compression of a layer of `media_type`, `None` for a type that is no layer we can read
/// (zstd among them).
pub fn layer_compression(media_type: &str) -> Option<Compression> {
    match media_type {
        OCI_LAYER_GZIP
        | DOCKER_LAYER_GZIP
        | "application/vnd.oci.image.layer.nondistributable.v1.tar+gzip"
        | "application/vnd.docker.image.rootfs.foreign.diff.tar.gzip" => Some(Compression::Gzip),
        OCI_LAYER
        | "application/vnd.docker.image.rootfs.diff.tar"
        | "application/vnd.oci.image.layer.nondistributable.v1.tar" => Some(Compression::None),
        _ => None,
    }
}

impl Platform {
    /// The platform this process runs on, named as Go names it (`amd64`, `arm64` …), as
    /// images do.
    pub fn host() -> Platform {
        let (architecture, variant) = match std::env::consts::ARCH {
            "x86_64" => ("amd64", None),
            "aarch64" => ("arm64", Some("v8")),
            "arm" => ("arm", Some("v7")),
            "x86" => ("386", None),
            "powerpc64" if cfg!(target_endian = "little") => ("ppc64le", None),
            "s390x" => ("s390x", None),
            "riscv64" => ("riscv64", None),
            other => (other, None),
        };
        Platform {
            os: "linux".to_string(),
            architecture: architecture.to_string(),
            variant: variant.map(str::to_string),
        }
    }

    /// How well an image for `self` fits a machine of `want`: `None` when it cannot run
    /// there, else a rank (higher is better): the exact variant, then no variant named, then
    /// an older variant of the same family, the newest first (an arm v6 image runs on v7).
    pub fn fit(&self, want: &Platform) -> Option<u16> {
        if self.os != want.os
            || normalize_arch(&self.architecture) != normalize_arch(&want.architecture)
        {
            return None;
        }
        let default_variant = match normalize_arch(&want.architecture) {
            "arm64" => Some("v8"),
            "amd64" => Some("v1"),
            _ => None,
        };
        let mine = self
            .variant
            .as_deref()
            .filter(|v| Some(*v) != default_variant);
        let theirs = want
            .variant
            .as_deref()
            .filter(|v| Some(*v) != default_variant);
        match (mine, theirs) {
            (a, b) if a == b => Some(1000),
            (None, Some(_)) => Some(500),
            (Some(m), Some(t)) => {
                let level = |v: &str| v.strip_prefix('v').and_then(|n| n.parse::<u16>().ok());
                match (level(m), level(t)) {
                    (Some(m), Some(t)) if m < t => Some(m),
                    _ => None,
                }
            }
            (Some(_), None) | (None, None) => None,
        }
    }
}

impl std::fmt::Display for Platform {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.os, self.architecture)?;
        if let Some(v) = &self.variant {
            write!(f, "/{v}")?;
        }
        Ok(())
    }
}

fn normalize_arch(arch: &str) -> &str {
    match arch {
        "x86_64" | "x86-64" => "amd64",
        "aarch64" => "arm64",
        "i386" => "386",
        other => other,
    }
}

/// The entry of `index` for `want`: the best fit, the first of equals. Entries without a
/// platform count only when no entry names a fitting one.
pub fn choose<'a>(index: &'a Index, want: &Platform) -> Option<&'a Descriptor> {
    let mut best: Option<(u16, &Descriptor)> = None;
    for entry in &index.manifests {
        if let Some(rank) = entry.platform.as_ref().and_then(|p| p.fit(want)) {
            if best.is_none_or(|(b, _)| rank > b) {
                best = Some((rank, entry));
            }
        }
    }
    best.map(|(_, d)| d)
        .or_else(|| index.manifests.iter().find(|d| d.platform.is_none()))
}

/// The platforms an index offers, for an error saying none fits.
pub fn offered(index: &Index) -> String {
    let names: Vec<String> = index
        .manifests
        .iter()
        .filter_map(|d| d.platform.as_ref().map(|p| p.to_string()))
        .collect();
    if names.is_empty() {
        "none named".to_string()
    } else {
        names.join(", ")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn platform(os: &str, arch: &str, variant: Option<&str>) -> Platform {
        Platform {
            os: os.into(),
            architecture: arch.into(),
            variant: variant.map(Into::into),
        }
    }

    fn entry(n: u8, p: Option<Platform>) -> Descriptor {
        Descriptor {
            media_type: OCI_MANIFEST.into(),
            digest: Digest::of(&[n]),
            size: 1,
            platform: p,
            annotations: BTreeMap::new(),
        }
    }

    #[test]
    fn an_index_entry_is_chosen_by_os_architecture_and_variant() {
        let index = Index {
            schema_version: 2,
            media_type: Some(OCI_INDEX.into()),
            manifests: vec![
                entry(0, Some(platform("unknown", "unknown", None))),
                entry(1, Some(platform("linux", "arm", Some("v6")))),
                entry(2, Some(platform("linux", "arm64", Some("v8")))),
                entry(3, Some(platform("linux", "amd64", None))),
                entry(4, Some(platform("linux", "arm", Some("v7")))),
                entry(5, Some(platform("windows", "amd64", None))),
                entry(6, Some(platform("linux", "arm", Some("v5")))),
            ],
        };
        let pick = |p: Platform| choose(&index, &p).map(|d| d.digest.clone());
        assert_eq!(
            pick(platform("linux", "amd64", None)),
            Some(Digest::of(&[3]))
        );
        assert_eq!(
            pick(platform("linux", "x86_64", Some("v1"))),
            Some(Digest::of(&[3]))
        );
        assert_eq!(
            pick(platform("linux", "arm64", None)),
            Some(Digest::of(&[2]))
        );
        assert_eq!(
            pick(platform("linux", "arm", Some("v7"))),
            Some(Digest::of(&[4]))
        );
        // No v8 arm entry: the newest older variant.
        assert_eq!(
            pick(platform("linux", "arm", Some("v8"))),
            Some(Digest::of(&[4]))
        );
        assert_eq!(
            pick(platform("linux", "arm", Some("v5"))),
            Some(Digest::of(&[6]))
        );
        assert_eq!(pick(platform("linux", "s390x", None)), None);
        assert_eq!(
            offered(&index),
            "unknown/unknown, linux/arm/v6, linux/arm64/v8, linux/amd64, linux/arm/v7, windows/amd64, linux/arm/v5"
        );
        // A newer variant never fits an older machine.
        assert_eq!(
            platform("linux", "arm", Some("v7")).fit(&platform("linux", "arm", Some("v6"))),
            None
        );
        // An entry without a platform is the fallback.
        let bare = Index {
            schema_version: 2,
            media_type: None,
            manifests: vec![entry(7, None)],
        };
        assert_eq!(
            choose(&bare, &Platform::host()).map(|d| d.digest.clone()),
            Some(Digest::of(&[7]))
        );
    }

    #[test]
    fn manifests_are_told_from_indexes_by_media_type_or_shape() {
        let d = Digest::of(b"x");
        let manifest = format!(
            r#"{{"schemaVersion":2,"config":{{"mediaType":"{OCI_CONFIG}","digest":"{d}","size":1}},"layers":[]}}"#
        );
        assert!(matches!(
            parse_manifest(manifest.as_bytes(), None),
            Ok(Parsed::Manifest(_))
        ));
        assert!(matches!(
            parse_manifest(
                manifest.as_bytes(),
                Some(&format!("{OCI_MANIFEST}; charset=utf-8"))
            ),
            Ok(Parsed::Manifest(_))
        ));
        let index = format!(r#"{{"schemaVersion":2,"manifests":[{{"digest":"{d}","size":1}}]}}"#);
        assert!(matches!(
            parse_manifest(index.as_bytes(), None),
            Ok(Parsed::Index(_))
        ));
        assert!(matches!(
            parse_manifest(index.as_bytes(), Some(DOCKER_LIST)),
            Ok(Parsed::Index(_))
        ));
        assert_eq!(
            parse_manifest(br#"{"schemaVersion":1,"fsLayers":[]}"#, None).unwrap_err(),
            FormatError::Schema1
        );
        assert_eq!(
            parse_manifest(br#"{"schemaVersion":2,"mediaType":"text/html"}"#, None).unwrap_err(),
            FormatError::MediaType("text/html".into())
        );
        assert!(matches!(
            parse_manifest(b"<html>", None),
            Err(FormatError::Json(_))
        ));
        assert_eq!(layer_compression(OCI_LAYER_GZIP), Some(Compression::Gzip));
        assert_eq!(
            layer_compression(DOCKER_LAYER_GZIP),
            Some(Compression::Gzip)
        );
        assert_eq!(layer_compression(OCI_LAYER), Some(Compression::None));
        assert_eq!(
            layer_compression("application/vnd.oci.image.layer.v1.tar+zstd"),
            None
        );
    }
}
