//! The content store under `<node-dir>/content/`, shared by every image on the node:
//!
//! ```text
//! content/blobs/sha256/<hex>     manifests, configs and layer blobs, by digest
//! content/layers/sha256/<hex>/   each layer unpacked once, by diff-id (overlay's form, see
//!                                super::unpack), read-only lower layers of every rootfs
//! content/images.json            name → manifest, config, layers (super::records)
//! content/tmp/                   blobs and layers being written; emptied at open
//! ```
//!
//! A blob is written to a temporary file while its digest is computed, fsynced, and renamed
//! into place only when the digest (and the size the descriptor announced) match: a blob
//! under its name always has that digest, and a mismatch keeps nothing. A layer is unpacked
//! into a temporary directory and renamed into place once its diff-id checked out, so a
//! directory under `layers/` is always complete. Two pulls writing the same content race
//! harmlessly: the second rename finds the content there and drops its copy.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::io;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use parking_lot::Mutex;

use super::blob::BlobWriter;
use super::digest::Digest;
use super::files;
use super::oci::{self, ImageConfig, Parsed};
use super::records::{self, ImageRecord, LayerRecord, Loaded};
use super::unpack::{self, UnpackError};
use crate::storage::fsutil;

/// Why the store could not do what was asked.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("{path}: {source}")]
    Io { path: PathBuf, source: io::Error },
    /// Content whose digest is not the one it was asked for under: nothing was kept.
    #[error("{what}: digest mismatch: expected {expected}, got {actual}")]
    DigestMismatch {
        what: String,
        expected: Digest,
        actual: Digest,
    },
    #[error("{what}: expected {expected} bytes, got {actual}")]
    Size {
        what: String,
        expected: u64,
        actual: u64,
    },
    #[error("layer {layer}: media type {media_type:?} is not a layer this agent can unpack")]
    MediaType { layer: Digest, media_type: String },
    #[error("blob {0} is not in the store")]
    Missing(Digest),
    #[error(transparent)]
    Unpack(#[from] UnpackError),
}

pub(super) fn io_at(path: &Path) -> impl FnOnce(io::Error) -> StoreError + '_ {
    move |source| StoreError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// The store (one per node directory).
#[derive(Debug)]
pub struct ContentStore {
    root: PathBuf,
    records: Mutex<BTreeMap<String, ImageRecord>>,
    /// Makes temporary names unique within the process.
    counter: AtomicU64,
}

impl ContentStore {
    /// Opens (creating) the store at `root` (`<node-dir>/content`), empties its `tmp/`, and
    /// reads `images.json`, rebuilding it from the blobs when it does not parse.
    pub fn open(root: &Path) -> Result<ContentStore, StoreError> {
        for dir in ["blobs/sha256", "layers/sha256", "tmp"] {
            let path = root.join(dir);
            fs::create_dir_all(&path).map_err(io_at(&path))?;
        }
        let tmp = root.join("tmp");
        for entry in fs::read_dir(&tmp).map_err(io_at(&tmp))?.flatten() {
            // A probe mount left by a crash is detached first: removing through a mount
            // would write whiteouts instead of removing files.
            let probe = entry.path().join("rootfs");
            if super::rootfs::is_mountpoint(&probe) {
                let _ = nix::mount::umount2(&probe, nix::mount::MntFlags::MNT_DETACH);
            }
            let _ = files::remove(&entry.path());
        }
        let store = ContentStore {
            root: root.to_path_buf(),
            records: Mutex::new(BTreeMap::new()),
            counter: AtomicU64::new(0),
        };
        let path = store.records_path();
        let records = match records::load(&path).map_err(io_at(&path))? {
            Loaded::Missing => BTreeMap::new(),
            Loaded::Records(r) => r,
            Loaded::Corrupt(reason) => {
                let rebuilt = store.rebuild_records();
                tracing::error!(
                    "{}: unreadable ({reason}); rebuilt from the blobs: {} image(s) kept, their names lost until pulled or imported again",
                    path.display(),
                    rebuilt.len()
                );
                records::save(&path, &rebuilt).map_err(io_at(&path))?;
                rebuilt
            }
        };
        *store.records.lock() = records;
        Ok(store)
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    fn records_path(&self) -> PathBuf {
        self.root.join("images.json")
    }

    pub fn blob_path(&self, digest: &Digest) -> PathBuf {
        self.root.join("blobs/sha256").join(digest.hex())
    }

    pub fn has_blob(&self, digest: &Digest) -> bool {
        self.blob_path(digest).is_file()
    }

    /// The blob `digest`, if it is at most `max` bytes.
    pub fn read_blob(&self, digest: &Digest, max: u64) -> Result<Vec<u8>, StoreError> {
        let path = self.blob_path(digest);
        let meta = match fs::metadata(&path) {
            Ok(m) => m,
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                return Err(StoreError::Missing(digest.clone()))
            }
            Err(e) => return Err(io_at(&path)(e)),
        };
        if meta.len() > max {
            return Err(StoreError::Size {
                what: format!("blob {digest}"),
                expected: max,
                actual: meta.len(),
            });
        }
        fs::read(&path).map_err(io_at(&path))
    }

    /// Stores `bytes` as the blob `expected`, if that is their digest.
    pub fn put_blob(&self, expected: &Digest, bytes: &[u8]) -> Result<(), StoreError> {
        if self.has_blob(expected) {
            return Ok(());
        }
        let mut writer = self.blob_writer(expected, Some(bytes.len() as u64))?;
        writer.write(bytes)?;
        writer.commit()
    }

    /// A writer for the blob `expected` of `size` bytes (when known).
    pub fn blob_writer(
        &self,
        expected: &Digest,
        size: Option<u64>,
    ) -> Result<BlobWriter, StoreError> {
        BlobWriter::create(
            self.temp_path("blob"),
            self.blob_path(expected),
            expected,
            size,
        )
    }

    fn temp_path(&self, what: &str) -> PathBuf {
        let n = self.counter.fetch_add(1, Ordering::Relaxed);
        self.root
            .join("tmp")
            .join(format!("{what}-{}-{n}", std::process::id()))
    }

    pub fn layer_path(&self, diff_id: &Digest) -> PathBuf {
        self.root.join("layers/sha256").join(diff_id.hex())
    }

    pub fn has_layer(&self, diff_id: &Digest) -> bool {
        self.layer_path(diff_id).is_dir()
    }

    /// Unpacks `layer` from its blob unless it is unpacked already (blocking: run it off the
    /// async runtime). The blob must be in the store.
    pub fn ensure_layer(&self, layer: &LayerRecord) -> Result<(), StoreError> {
        if self.has_layer(&layer.diff_id) {
            return Ok(());
        }
        let compression =
            oci::layer_compression(&layer.media_type).ok_or_else(|| StoreError::MediaType {
                layer: layer.digest.clone(),
                media_type: layer.media_type.clone(),
            })?;
        let blob = self.blob_path(&layer.digest);
        if !blob.is_file() {
            return Err(StoreError::Missing(layer.digest.clone()));
        }
        let tmp = self.temp_path("layer");
        fs::create_dir(&tmp).map_err(io_at(&tmp))?;
        let result = unpack::unpack(&blob, &layer.digest, compression, &layer.diff_id, &tmp);
        if let Err(e) = result {
            let _ = files::remove(&tmp);
            return Err(e.into());
        }
        let dest = self.layer_path(&layer.diff_id);
        match fs::rename(&tmp, &dest) {
            Ok(()) => {}
            // Another pull unpacked the same layer first.
            Err(_) if dest.is_dir() => {
                let _ = files::remove(&tmp);
            }
            Err(e) => {
                let _ = files::remove(&tmp);
                return Err(io_at(&dest)(e));
            }
        }
        let dir = self.root.join("layers/sha256");
        fsutil::fsync_dir(&dir).map_err(io_at(&dir))
    }

    /// The image known as `name`.
    pub fn image(&self, name: &str) -> Option<ImageRecord> {
        self.records.lock().get(name).cloned()
    }

    /// Every image, by name.
    pub fn images(&self) -> Vec<ImageRecord> {
        self.records.lock().values().cloned().collect()
    }

    /// Records `record` under its name (replacing what that name pointed to).
    pub fn put_image(&self, record: ImageRecord) -> Result<(), StoreError> {
        self.update(|records| {
            records.insert(record.name.clone(), record);
        })
    }

    /// Forgets the image `name`; its content stays until [`ContentStore::prune`].
    pub fn remove_image(&self, name: &str) -> Result<Option<ImageRecord>, StoreError> {
        let mut removed = None;
        self.update(|records| removed = records.remove(name))?;
        Ok(removed)
    }

    /// Notes that a container was started from `name` at `now` (unix seconds).
    pub fn touch(&self, name: &str, now: u64) -> Result<(), StoreError> {
        self.update(|records| {
            if let Some(r) = records.get_mut(name) {
                r.last_used = r.last_used.max(now);
            }
        })
    }

    fn update(
        &self,
        change: impl FnOnce(&mut BTreeMap<String, ImageRecord>),
    ) -> Result<(), StoreError> {
        let mut records = self.records.lock();
        let mut next = records.clone();
        change(&mut next);
        if next == *records {
            return Ok(());
        }
        let path = self.records_path();
        records::save(&path, &next).map_err(io_at(&path))?;
        *records = next;
        Ok(())
    }

    /// Removes blobs and unpacked layers no image refers to; returns the bytes freed.
    pub fn prune(&self) -> Result<u64, StoreError> {
        let (blobs, layers) = self.referenced();
        let mut freed = 0;
        let blob_dir = self.root.join("blobs/sha256");
        for entry in fs::read_dir(&blob_dir).map_err(io_at(&blob_dir))?.flatten() {
            let name = entry.file_name();
            let keep =
                Digest::from_hex(&name.to_string_lossy()).is_some_and(|d| blobs.contains(&d));
            if !keep {
                freed += entry.metadata().map(|m| m.len()).unwrap_or(0);
                let _ = fs::remove_file(entry.path());
            }
        }
        let layer_dir = self.root.join("layers/sha256");
        for entry in fs::read_dir(&layer_dir)
            .map_err(io_at(&layer_dir))?
            .flatten()
        {
            let name = entry.file_name();
            let keep =
                Digest::from_hex(&name.to_string_lossy()).is_some_and(|d| layers.contains(&d));
            if !keep {
                freed += disk_usage(&entry.path());
                let _ = files::remove(&entry.path());
            }
        }
        Ok(freed)
    }

    /// The blobs (manifests, index, configs, layers) and layer directories the images use.
    fn referenced(&self) -> (BTreeSet<Digest>, BTreeSet<Digest>) {
        let mut blobs = BTreeSet::new();
        let mut layers = BTreeSet::new();
        for r in self.records.lock().values() {
            blobs.insert(r.repo_digest.clone());
            blobs.insert(r.manifest.clone());
            blobs.insert(r.config.clone());
            for l in &r.layers {
                blobs.insert(l.digest.clone());
                layers.insert(l.diff_id.clone());
            }
        }
        (blobs, layers)
    }

    /// Bytes on disk that only `names` use (blobs and unpacked layers no other image shares).
    pub fn exclusive_size(&self, names: &[String]) -> u64 {
        let records = self.records.lock();
        let mut others_blobs = BTreeSet::new();
        let mut others_layers = BTreeSet::new();
        for r in records.values().filter(|r| !names.contains(&r.name)) {
            others_blobs.extend([r.repo_digest.clone(), r.manifest.clone(), r.config.clone()]);
            for l in &r.layers {
                others_blobs.insert(l.digest.clone());
                others_layers.insert(l.diff_id.clone());
            }
        }
        let mut blobs = BTreeSet::new();
        let mut layers = BTreeSet::new();
        for r in records.values().filter(|r| names.contains(&r.name)) {
            blobs.extend([r.repo_digest.clone(), r.manifest.clone(), r.config.clone()]);
            for l in &r.layers {
                blobs.insert(l.digest.clone());
                layers.insert(l.diff_id.clone());
            }
        }
        drop(records);
        let blob_bytes: u64 = blobs
            .difference(&others_blobs)
            .map(|d| {
                fs::metadata(self.blob_path(d))
                    .map(|m| m.len())
                    .unwrap_or(0)
            })
            .sum();
        let layer_bytes: u64 = layers
            .difference(&others_layers)
            .map(|d| disk_usage(&self.layer_path(d)))
            .sum();
        blob_bytes + layer_bytes
    }

    /// Image records for every manifest among the blobs whose config and layers are there
    /// too, named by the manifest's digest (the names are what `images.json` held).
    fn rebuild_records(&self) -> BTreeMap<String, ImageRecord> {
        let mut out = BTreeMap::new();
        let dir = self.root.join("blobs/sha256");
        let Ok(entries) = fs::read_dir(&dir) else {
            return out;
        };
        let now = unix_now();
        for entry in entries.flatten() {
            let Some(digest) = Digest::from_hex(&entry.file_name().to_string_lossy()) else {
                continue;
            };
            let Ok(bytes) =
                self.read_blob(&digest, crate::agent::images::client::MAX_MANIFEST as u64)
            else {
                continue;
            };
            if !bytes.starts_with(b"{") {
                continue;
            }
            let Ok(Parsed::Manifest(manifest)) = oci::parse_manifest(&bytes, None) else {
                continue;
            };
            if let Ok(record) =
                self.record_from_manifest(&digest, &digest.to_string(), &manifest, now)
            {
                out.insert(record.name.clone(), record);
            }
        }
        out
    }

    /// The record of `manifest` (stored as the blob `manifest_digest`) under `name`, from its
    /// config in the store; its layer blobs must be there too.
    pub fn record_from_manifest(
        &self,
        manifest_digest: &Digest,
        name: &str,
        manifest: &oci::Manifest,
        now: u64,
    ) -> Result<ImageRecord, StoreError> {
        let config_bytes = self.read_blob(
            &manifest.config.digest,
            crate::agent::images::client::MAX_CONFIG as u64,
        )?;
        let config: ImageConfig =
            serde_json::from_slice(&config_bytes).map_err(|e| StoreError::Io {
                path: self.blob_path(&manifest.config.digest),
                source: io::Error::new(
                    io::ErrorKind::InvalidData,
                    format!("not an image config: {e}"),
                ),
            })?;
        record_for(manifest_digest, name, manifest, &config, now).and_then(|r| {
            for l in &r.layers {
                if !self.has_blob(&l.digest) {
                    return Err(StoreError::Missing(l.digest.clone()));
                }
            }
            Ok(r)
        })
    }
}

/// Runs `work` on the store on the blocking pool: every write fsyncs.
pub async fn blocking<T: Send + 'static>(
    store: &Arc<ContentStore>,
    work: impl FnOnce(&ContentStore) -> Result<T, StoreError> + Send + 'static,
) -> Result<T, StoreError> {
    let store = store.clone();
    tokio::task::spawn_blocking(move || work(&store))
        .await
        .unwrap_or_else(|e| {
            Err(StoreError::Io {
                path: PathBuf::new(),
                source: io::Error::other(format!("store task stopped: {e}")),
            })
        })
}

/// The record of an image: `manifest` with its parsed `config`.
pub fn record_for(
    manifest_digest: &Digest,
    name: &str,
    manifest: &oci::Manifest,
    config: &ImageConfig,
    now: u64,
) -> Result<ImageRecord, StoreError> {
    if config.rootfs.diff_ids.len() != manifest.layers.len() {
        return Err(StoreError::Size {
            what: format!(
                "image config {}: diff_ids (the manifest has {} layers)",
                manifest.config.digest,
                manifest.layers.len()
            ),
            expected: manifest.layers.len() as u64,
            actual: config.rootfs.diff_ids.len() as u64,
        });
    }
    let layers: Vec<LayerRecord> = manifest
        .layers
        .iter()
        .zip(&config.rootfs.diff_ids)
        .map(|(d, diff_id)| LayerRecord {
            digest: d.digest.clone(),
            diff_id: diff_id.clone(),
            media_type: d.media_type.clone(),
            size: d.size,
        })
        .collect();
    let size = manifest.config.size + layers.iter().map(|l| l.size).sum::<u64>();
    Ok(ImageRecord {
        name: name.to_string(),
        repo_digest: manifest_digest.clone(),
        manifest: manifest_digest.clone(),
        config: manifest.config.digest.clone(),
        layers,
        size,
        container_config: config.config.clone(),
        pulled_at: now,
        last_used: now,
        pinned: false,
    })
}

/// Bytes used by the files under `path` (hard links counted once per walk).
pub fn disk_usage(path: &Path) -> u64 {
    fn walk(path: &Path, seen: &mut BTreeSet<(u64, u64)>) -> u64 {
        let Ok(meta) = fs::symlink_metadata(path) else {
            return 0;
        };
        let mut total = 0;
        if meta.nlink() <= 1 || seen.insert((meta.dev(), meta.ino())) {
            total += meta.blocks() * 512;
        }
        if meta.is_dir() {
            if let Ok(entries) = fs::read_dir(path) {
                for e in entries.flatten() {
                    total += walk(&e.path(), seen);
                }
            }
        }
        total
    }
    walk(path, &mut BTreeSet::new())
}

/// Seconds since the Unix epoch.
pub fn unix_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}
