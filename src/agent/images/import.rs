//! Air-gap import: image archives dropped into `<node-dir>/images/` become images on the
//! node without a registry, as in k3s. Two formats, plain or gzip-compressed:
//!
//! - a `docker save` archive (`manifest.json`: `[{"Config", "RepoTags", "Layers"}]`, layers
//!   as tar files, docker 25's `blobs/sha256/` paths included): named by `RepoTags`;
//! - an OCI image layout (`index.json`, `oci-layout`, `blobs/sha256/<hex>`): each entry of
//!   `index.json` named by its `io.containerd.image.name` annotation, else by
//!   `org.opencontainers.image.ref.name` when that is a name (has a `/` or a `:`) rather than
//!   a bare tag; a nested index gives this platform's manifest.
//!
//! When an archive has both (docker 25 writes both), `manifest.json` is read. An image
//! without a name is kept under its manifest digest and a warning says so. Imported images
//! are pinned: image GC leaves them.
//!
//! The archive is read twice, never unpacked to disk whole: the first pass keeps the
//! metadata files and small blobs (manifests, configs) in memory (bounded); the second
//! streams the layer blobs it still needs into the content store, each checked against its
//! digest. Something that is not an image archive is [`ImportError::NotAnImage`] with the
//! reason, and nothing is stored for it.

use std::collections::{BTreeMap, HashMap};
use std::fs::File;
use std::io::{self, BufReader, Read};
use std::path::{Path, PathBuf};

use flate2::read::MultiGzDecoder;

use super::digest::Digest;
use super::oci::{self, Descriptor, Manifest, Parsed, Platform};
use super::records::ImageRecord;
use super::reference::Reference;
use super::store::{self, ContentStore, StoreError};

/// Entries kept in memory by the first pass: at most this large each …
const SMALL_ENTRY: u64 = 4 << 20;
/// … and this large together.
const SMALL_TOTAL: u64 = 64 << 20;

/// Why an archive was not imported.
#[derive(Debug, thiserror::Error)]
pub enum ImportError {
    /// Not an image archive at all (wrong format, no index or manifest): skipped.
    #[error("not an image archive: {0}")]
    NotAnImage(String),
    /// An image archive with something wrong inside.
    #[error("broken image archive: {0}")]
    Broken(String),
    #[error("{path}: {source}")]
    Io { path: PathBuf, source: io::Error },
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// What the first pass learned.
#[derive(Default)]
struct Catalog {
    /// Small entries' content, by normalized path.
    small: HashMap<String, Vec<u8>>,
    /// Every regular entry's size, by normalized path.
    sizes: HashMap<String, u64>,
    /// Symlink and hard-link entries: path → target path (normalized, relative to the root).
    links: HashMap<String, String>,
}

impl Catalog {
    /// The real entry `path` names, links followed (a few hops at most).
    fn resolve(&self, path: &str) -> String {
        let mut at = normalize(path);
        for _ in 0..8 {
            match self.links.get(&at) {
                Some(next) => at = next.clone(),
                None => break,
            }
        }
        at
    }

    fn small(&self, path: &str) -> Option<&[u8]> {
        self.small.get(&self.resolve(path)).map(Vec::as_slice)
    }
}

/// Imports the archive at `path`; returns the images recorded.
pub fn import_archive(
    store: &ContentStore,
    path: &Path,
    platform: &Platform,
) -> Result<Vec<ImageRecord>, ImportError> {
    let catalog = first_pass(path)?;
    let plan = if catalog.small.contains_key("manifest.json") {
        docker_plan(&catalog)?
    } else if catalog.small.contains_key("index.json") {
        oci_plan(&catalog, platform)?
    } else {
        return Err(ImportError::NotAnImage(
            "no manifest.json (docker save) or index.json (OCI layout) in it".to_string(),
        ));
    };
    if plan.images.is_empty() {
        return Err(ImportError::NotAnImage(
            "it lists no image for this platform".to_string(),
        ));
    }
    // Small blobs straight from memory; the rest in a second pass.
    let mut wanted: BTreeMap<String, Digest> = BTreeMap::new();
    for (entry, digest) in &plan.blobs {
        if store.has_blob(digest) {
            continue;
        }
        match catalog.small(entry) {
            Some(bytes) => store.put_blob(digest, bytes)?,
            None => {
                wanted.insert(catalog.resolve(entry), digest.clone());
            }
        }
    }
    if !wanted.is_empty() {
        second_pass(store, path, &mut wanted)?;
    }
    if let Some((entry, _)) = wanted.iter().next() {
        return Err(ImportError::Broken(format!(
            "{entry} is named but not in the archive"
        )));
    }
    let now = store::unix_now();
    let mut records = Vec::new();
    for image in plan.images {
        let manifest_bytes =
            serde_json::to_vec(&image.manifest).map_err(|e| ImportError::Broken(e.to_string()))?;
        // A docker archive has no manifest blob: the one built here is stored as one.
        if !store.has_blob(&image.manifest_digest) {
            store.put_blob(&image.manifest_digest, &manifest_bytes)?;
        }
        let name = image
            .name
            .clone()
            .unwrap_or_else(|| image.manifest_digest.to_string());
        let mut record =
            store.record_from_manifest(&image.manifest_digest, &name, &image.manifest, now)?;
        record.repo_digest = image.repo_digest.clone();
        record.pinned = true;
        for layer in &record.layers {
            store.ensure_layer(layer)?;
        }
        if image.name.is_none() {
            tracing::warn!(
                "{}: an image without a name ({}), kept as {name}",
                path.display(),
                image.manifest_digest
            );
        }
        store.put_image(record.clone())?;
        records.push(record);
    }
    Ok(records)
}

/// An image found in an archive, ready to be recorded.
struct PlannedImage {
    name: Option<String>,
    manifest: Manifest,
    manifest_digest: Digest,
    repo_digest: Digest,
}

struct Plan {
    images: Vec<PlannedImage>,
    /// Archive entry → the digest it must have.
    blobs: Vec<(String, Digest)>,
}

fn open(path: &Path) -> Result<Box<dyn Read>, ImportError> {
    let io_err = |source| ImportError::Io {
        path: path.to_path_buf(),
        source,
    };
    let mut file = BufReader::with_capacity(256 << 10, File::open(path).map_err(io_err)?);
    let magic = {
        use std::io::BufRead;
        let buf = file.fill_buf().map_err(io_err)?;
        buf.len() >= 2 && buf[0] == 0x1f && buf[1] == 0x8b
    };
    Ok(if magic {
        Box::new(MultiGzDecoder::new(file))
    } else {
        Box::new(file)
    })
}

fn not_tar(e: io::Error) -> ImportError {
    ImportError::NotAnImage(format!("not a tar archive ({e})"))
}

fn truncated(e: io::Error) -> ImportError {
    ImportError::Broken(format!("the tar archive is truncated or corrupt ({e})"))
}

fn first_pass(path: &Path) -> Result<Catalog, ImportError> {
    let mut archive = tar::Archive::new(open(path)?);
    let mut catalog = Catalog::default();
    let mut kept = 0u64;
    let mut any = false;
    for entry in archive.entries().map_err(not_tar)? {
        let mut entry = match entry {
            Ok(entry) => entry,
            Err(e) if any => return Err(truncated(e)),
            Err(e) => return Err(not_tar(e)),
        };
        any = true;
        let Ok(name) = entry.path().map(|p| normalize(&p.to_string_lossy())) else {
            continue;
        };
        let kind = entry.header().entry_type();
        if kind.is_symlink() || kind.is_hard_link() {
            if let Ok(Some(target)) = entry.link_name() {
                let target = target.to_string_lossy().into_owned();
                let resolved = if kind.is_symlink() && !target.starts_with('/') {
                    let dir = name.rsplit_once('/').map_or("", |(d, _)| d);
                    normalize(&format!("{dir}/{target}"))
                } else {
                    normalize(&target)
                };
                catalog.links.insert(name, resolved);
            }
            continue;
        }
        if !kind.is_file() {
            continue;
        }
        let size = entry.size();
        catalog.sizes.insert(name.clone(), size);
        if size <= SMALL_ENTRY && kept + size <= SMALL_TOTAL {
            let mut bytes = Vec::with_capacity(size as usize);
            entry.read_to_end(&mut bytes).map_err(truncated)?;
            kept += size;
            catalog.small.insert(name, bytes);
        }
    }
    if !any {
        return Err(ImportError::NotAnImage(
            "an empty or unreadable tar archive".to_string(),
        ));
    }
    Ok(catalog)
}

/// Streams the entries of `wanted` (entry → digest) into the store, removing each from
/// `wanted` once stored.
fn second_pass(
    store: &ContentStore,
    path: &Path,
    wanted: &mut BTreeMap<String, Digest>,
) -> Result<(), ImportError> {
    let mut archive = tar::Archive::new(open(path)?);
    for entry in archive.entries().map_err(truncated)? {
        let mut entry = entry.map_err(truncated)?;
        let Ok(name) = entry.path().map(|p| normalize(&p.to_string_lossy())) else {
            continue;
        };
        let Some(digest) = wanted.get(&name).cloned() else {
            continue;
        };
        let mut writer = store.blob_writer(&digest, Some(entry.size()))?;
        let mut buf = vec![0u8; 256 << 10];
        loop {
            let n = entry
                .read(&mut buf)
                .map_err(|e| ImportError::Broken(format!("{name}: {e}")))?;
            if n == 0 {
                break;
            }
            writer.write(&buf[..n])?;
        }
        writer.commit()?;
        wanted.remove(&name);
        if wanted.is_empty() {
            break;
        }
    }
    Ok(())
}

/// `docker save`'s `manifest.json`.
fn docker_plan(catalog: &Catalog) -> Result<Plan, ImportError> {
    #[derive(serde::Deserialize)]
    struct Entry {
        #[serde(rename = "Config")]
        config: String,
        #[serde(rename = "RepoTags", default)]
        repo_tags: Option<Vec<String>>,
        #[serde(rename = "Layers")]
        layers: Vec<String>,
    }
    let bytes = catalog.small("manifest.json").unwrap_or_default();
    let entries: Vec<Entry> = serde_json::from_slice(bytes).map_err(|e| {
        ImportError::NotAnImage(format!("manifest.json is not a docker save manifest: {e}"))
    })?;
    let mut plan = Plan {
        images: Vec::new(),
        blobs: Vec::new(),
    };
    for entry in entries {
        let config_bytes = catalog.small(&entry.config).ok_or_else(|| {
            ImportError::Broken(format!("config {} is not in the archive", entry.config))
        })?;
        let config_digest = Digest::of(config_bytes);
        let config: oci::ImageConfig = serde_json::from_slice(config_bytes)
            .map_err(|e| ImportError::Broken(format!("config {}: {e}", entry.config)))?;
        if config.rootfs.diff_ids.len() != entry.layers.len() {
            return Err(ImportError::Broken(format!(
                "config {} names {} layers, manifest.json {}",
                entry.config,
                config.rootfs.diff_ids.len(),
                entry.layers.len()
            )));
        }
        plan.blobs
            .push((entry.config.clone(), config_digest.clone()));
        let mut layers = Vec::new();
        for (layer_path, diff_id) in entry.layers.iter().zip(&config.rootfs.diff_ids) {
            let real = catalog.resolve(layer_path);
            let size = *catalog.sizes.get(&real).ok_or_else(|| {
                ImportError::Broken(format!("layer {layer_path} is not in the archive"))
            })?;
            // Docker writes layers uncompressed: the blob is the tar, its digest the diff-id.
            // A compressed one (some tools) is named by its own digest, from its path.
            let gzip = catalog
                .small(layer_path)
                .is_some_and(|b| b.starts_with(&[0x1f, 0x8b]));
            let (digest, media_type) = if gzip {
                let digest = digest_from_path(&real).ok_or_else(|| {
                    ImportError::Broken(format!(
                        "compressed layer {layer_path} has no digest in its name"
                    ))
                })?;
                (digest, oci::DOCKER_LAYER_GZIP)
            } else {
                (
                    diff_id.clone(),
                    "application/vnd.docker.image.rootfs.diff.tar",
                )
            };
            plan.blobs.push((real, digest.clone()));
            layers.push(Descriptor {
                media_type: media_type.to_string(),
                digest,
                size,
                platform: None,
                annotations: BTreeMap::new(),
            });
        }
        let manifest = Manifest {
            schema_version: 2,
            media_type: Some(oci::DOCKER_MANIFEST.to_string()),
            config: Descriptor {
                media_type: oci::DOCKER_CONFIG.to_string(),
                digest: config_digest,
                size: config_bytes.len() as u64,
                platform: None,
                annotations: BTreeMap::new(),
            },
            layers,
        };
        let manifest_digest = Digest::of(
            &serde_json::to_vec(&manifest).map_err(|e| ImportError::Broken(e.to_string()))?,
        );
        let tags = entry.repo_tags.unwrap_or_default();
        let names: Vec<Option<String>> = if tags.is_empty() {
            vec![None]
        } else {
            tags.iter()
                .map(|t| {
                    Reference::parse(t)
                        .map(|r| Some(r.to_string()))
                        .map_err(|e| ImportError::Broken(format!("RepoTags: {e}")))
                })
                .collect::<Result<_, _>>()?
        };
        for name in names {
            plan.images.push(PlannedImage {
                name,
                manifest: manifest.clone(),
                manifest_digest: manifest_digest.clone(),
                repo_digest: manifest_digest.clone(),
            });
        }
    }
    Ok(plan)
}

/// An OCI image layout's `index.json`.
fn oci_plan(catalog: &Catalog, platform: &Platform) -> Result<Plan, ImportError> {
    let bytes = catalog.small("index.json").unwrap_or_default();
    let index = match oci::parse_manifest(bytes, Some(oci::OCI_INDEX)) {
        Ok(Parsed::Index(index)) => index,
        Ok(Parsed::Manifest(_)) => {
            return Err(ImportError::NotAnImage(
                "index.json is a manifest, not an index".to_string(),
            ))
        }
        Err(e) => {
            return Err(ImportError::NotAnImage(format!(
                "index.json is not an OCI index: {e}"
            )))
        }
    };
    let blob = |d: &Digest| catalog.small(&format!("blobs/sha256/{}", d.hex()));
    let mut plan = Plan {
        images: Vec::new(),
        blobs: Vec::new(),
    };
    for entry in &index.manifests {
        if let Some(p) = &entry.platform {
            if p.fit(platform).is_none() {
                continue;
            }
        }
        let name = image_name(entry);
        let body = blob(&entry.digest).ok_or_else(|| {
            ImportError::Broken(format!("{} is not in the archive", entry.digest))
        })?;
        let (manifest_digest, manifest) = match oci::parse_manifest(body, Some(&entry.media_type)) {
            Ok(Parsed::Manifest(m)) => (entry.digest.clone(), m),
            Ok(Parsed::Index(nested)) => {
                let Some(chosen) = oci::choose(&nested, platform) else {
                    tracing::warn!(
                        "{}: no manifest for {platform} (it offers {})",
                        entry.digest,
                        oci::offered(&nested)
                    );
                    continue;
                };
                let body = blob(&chosen.digest).ok_or_else(|| {
                    ImportError::Broken(format!("{} is not in the archive", chosen.digest))
                })?;
                match oci::parse_manifest(body, Some(&chosen.media_type)) {
                    Ok(Parsed::Manifest(m)) => {
                        plan.blobs.push((
                            format!("blobs/sha256/{}", chosen.digest.hex()),
                            chosen.digest.clone(),
                        ));
                        (chosen.digest.clone(), m)
                    }
                    _ => {
                        return Err(ImportError::Broken(format!(
                            "{} is not a manifest",
                            chosen.digest
                        )))
                    }
                }
            }
            Err(e) => return Err(ImportError::Broken(format!("{}: {e}", entry.digest))),
        };
        plan.blobs.push((
            format!("blobs/sha256/{}", entry.digest.hex()),
            entry.digest.clone(),
        ));
        plan.blobs.push((
            format!("blobs/sha256/{}", manifest.config.digest.hex()),
            manifest.config.digest.clone(),
        ));
        for layer in &manifest.layers {
            plan.blobs.push((
                format!("blobs/sha256/{}", layer.digest.hex()),
                layer.digest.clone(),
            ));
        }
        plan.images.push(PlannedImage {
            name,
            manifest,
            manifest_digest,
            repo_digest: entry.digest.clone(),
        });
    }
    Ok(plan)
}

/// The name an OCI index entry gives its image (see the module documentation).
fn image_name(entry: &Descriptor) -> Option<String> {
    if let Some(name) = entry.annotations.get(oci::ANNOTATION_CONTAINERD_NAME) {
        if let Ok(r) = Reference::parse(name) {
            return Some(r.to_string());
        }
    }
    let name = entry.annotations.get(oci::ANNOTATION_REF_NAME)?;
    if !name.contains(['/', ':']) {
        return None;
    }
    Reference::parse(name).ok().map(|r| r.to_string())
}

/// `./a//b/` → `a/b`.
fn normalize(path: &str) -> String {
    path.split('/')
        .filter(|p| !p.is_empty() && *p != ".")
        .collect::<Vec<_>>()
        .join("/")
}

/// The digest in a path like `blobs/sha256/<hex>`.
fn digest_from_path(path: &str) -> Option<Digest> {
    let (dir, hex) = path.rsplit_once('/')?;
    dir.ends_with("sha256")
        .then(|| Digest::from_hex(hex))
        .flatten()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_come_from_the_containerd_annotation_or_a_full_ref_name() {
        let entry = |annotations: &[(&str, &str)]| Descriptor {
            media_type: oci::OCI_MANIFEST.into(),
            digest: Digest::of(b"m"),
            size: 1,
            platform: None,
            annotations: annotations
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        };
        assert_eq!(
            image_name(&entry(&[
                (
                    oci::ANNOTATION_CONTAINERD_NAME,
                    "docker.io/library/busybox:1.36"
                ),
                (oci::ANNOTATION_REF_NAME, "other:1")
            ])),
            Some("docker.io/library/busybox:1.36".into())
        );
        assert_eq!(
            image_name(&entry(&[(oci::ANNOTATION_REF_NAME, "busybox:1.36")])),
            Some("docker.io/library/busybox:1.36".into())
        );
        assert_eq!(
            image_name(&entry(&[(oci::ANNOTATION_REF_NAME, "localhost:5000/x")])),
            Some("localhost:5000/x:latest".into())
        );
        assert_eq!(
            image_name(&entry(&[(oci::ANNOTATION_REF_NAME, "latest")])),
            None,
            "a bare tag"
        );
        assert_eq!(image_name(&entry(&[])), None);
        assert_eq!(normalize("./a//b/"), "a/b");
        assert_eq!(
            digest_from_path(&format!("blobs/sha256/{}", Digest::of(b"").hex())),
            Some(Digest::of(b""))
        );
        assert_eq!(digest_from_path("abc/layer.tar"), None);
    }
}
