//! `content/images.json`: which images the node has, by name. The blobs are the truth and
//! this file the index over them: it is replaced whole and atomically on every change
//! (write, fsync, rename, fsync the directory), so a crash leaves the old or the new one.
//! A file that does not parse is reported and rebuilt from the blobs by the store: the
//! images' content survives, only their names are lost until the next pull or import.
//!
//! ```json
//! {"version": 1, "images": [{"name": "docker.io/library/busybox:latest",
//!   "repoDigest": "sha256:…", "manifest": "sha256:…", "config": "sha256:…",
//!   "layers": [{"digest": "sha256:…", "diffId": "sha256:…", "mediaType": "…", "size": 1}],
//!   "size": 1, "containerConfig": {"Cmd": ["sh"]}, "pulledAt": 0, "lastUsed": 0}]}
//! ```

use std::collections::BTreeMap;
use std::io;
use std::path::Path;

use serde::{Deserialize, Serialize};

use super::digest::Digest;
use super::oci::ContainerConfig;
use crate::storage::fsutil;

const VERSION: u32 = 1;

/// One image the node has.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ImageRecord {
    /// The normalized reference it is known by (`docker.io/library/busybox:latest`), or the
    /// manifest digest for an image whose name was lost.
    pub name: String,
    /// What the name resolved to: an index's digest for a multi-platform image, else the
    /// manifest's (containerStatus.imageID is `repository@repoDigest`).
    pub repo_digest: Digest,
    /// This platform's manifest.
    pub manifest: Digest,
    /// The config's digest: the image ID.
    pub config: Digest,
    /// Bottom first.
    pub layers: Vec<LayerRecord>,
    /// Compressed size: config and layer blobs.
    pub size: u64,
    #[serde(default)]
    pub container_config: ContainerConfig,
    /// Unix seconds.
    pub pulled_at: u64,
    /// Unix seconds of the last time a container was started from it (or its pull).
    pub last_used: u64,
    /// Imported from the air-gap directory: image GC leaves it (as k3s pins such images).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub pinned: bool,
}

/// One layer of an image: its blob and its unpacked directory's name.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LayerRecord {
    pub digest: Digest,
    pub diff_id: Digest,
    pub media_type: String,
    pub size: u64,
}

#[derive(Serialize, Deserialize)]
struct File {
    version: u32,
    images: Vec<ImageRecord>,
}

/// What reading the file found.
#[derive(Debug)]
pub enum Loaded {
    Missing,
    Records(BTreeMap<String, ImageRecord>),
    /// The file exists but is not a records file: why.
    Corrupt(String),
}

/// Reads `path`.
pub fn load(path: &Path) -> io::Result<Loaded> {
    let bytes = match std::fs::read(path) {
        Ok(b) => b,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Loaded::Missing),
        Err(e) => return Err(e),
    };
    let file: File = match serde_json::from_slice(&bytes) {
        Ok(f) => f,
        Err(e) => return Ok(Loaded::Corrupt(e.to_string())),
    };
    if file.version != VERSION {
        return Ok(Loaded::Corrupt(format!(
            "version {} (this agent reads version {VERSION})",
            file.version
        )));
    }
    Ok(Loaded::Records(
        file.images
            .into_iter()
            .map(|r| (r.name.clone(), r))
            .collect(),
    ))
}

/// Replaces `path` with `records`, atomically and durably.
pub fn save(path: &Path, records: &BTreeMap<String, ImageRecord>) -> io::Result<()> {
    let file = File {
        version: VERSION,
        images: records.values().cloned().collect(),
    };
    let bytes = serde_json::to_vec_pretty(&file).map_err(io::Error::other)?;
    fsutil::write_atomic(path, &bytes, fsutil::PUBLIC_MODE)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(name: &str) -> ImageRecord {
        let d = Digest::of(name.as_bytes());
        ImageRecord {
            name: name.into(),
            repo_digest: d.clone(),
            manifest: d.clone(),
            config: d.clone(),
            layers: vec![LayerRecord {
                digest: d.clone(),
                diff_id: d,
                media_type: super::super::oci::OCI_LAYER_GZIP.into(),
                size: 3,
            }],
            size: 3,
            container_config: ContainerConfig {
                cmd: Some(vec!["sh".into()]),
                ..ContainerConfig::default()
            },
            pulled_at: 1,
            last_used: 2,
            pinned: true,
        }
    }

    #[test]
    fn records_round_trip_and_bad_files_are_corrupt_not_errors() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("images.json");
        assert!(matches!(load(&path).unwrap(), Loaded::Missing));
        let mut records = BTreeMap::new();
        for name in ["docker.io/library/a:1", "localhost:5000/b:latest"] {
            records.insert(name.to_string(), record(name));
        }
        save(&path, &records).unwrap();
        match load(&path).unwrap() {
            Loaded::Records(back) => assert_eq!(back, records),
            other => panic!("{other:?}"),
        }
        for bad in [
            &b""[..],
            b"{",
            b"[]",
            b"{\"version\":9,\"images\":[]}",
            b"\x00\xff",
        ] {
            std::fs::write(&path, bad).unwrap();
            assert!(
                matches!(load(&path).unwrap(), Loaded::Corrupt(_)),
                "{bad:?}"
            );
        }
    }
}
