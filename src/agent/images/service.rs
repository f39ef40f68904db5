//! [`Images`]: the face the pod workers use. It owns the content store, the registry client
//! and the rootfs builder, and keeps three rules between them:
//!
//! - one pull per image name (and pull secret) at a time: pods of one image starting
//!   together share the pull in flight and its outcome, success or failure;
//! - pulls, imports and rootfs preparation hold the content lock shared, image GC holds it
//!   alone: GC removes blobs no image refers to yet, which is what a pull in progress has;
//! - blocking work (unpacking, copying, fsync) runs on the blocking pool.

use std::collections::{BTreeSet, HashMap};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use parking_lot::Mutex;

use super::client::RegistryClient;
use super::credentials::Keyring;
use super::endpoint::RegistrySettings;
use super::gc::{self, DiskUsage, GcPolicy, GcReport};
use super::import::{self, ImportError};
use super::oci::Platform;
use super::pull::{self, Decision, PullError, PullPolicy};
use super::records::ImageRecord;
use super::reference::Reference;
use super::rootfs::{self, Rootfs, RootfsBuilder, RootfsError, RootfsMode};
use super::store::{self, ContentStore, StoreError};

/// One pull that several callers wait for.
type Flight = tokio::sync::OnceCell<Result<ImageRecord, Arc<PullError>>>;

/// What the agent decides about images (from its flags).
#[derive(Debug, Clone)]
pub struct ImageSettings {
    /// `--node-dir`: the store is `content/`, the air-gap directory `images/`.
    pub node_dir: PathBuf,
    pub registry: RegistrySettings,
    /// The platform chosen from multi-platform images (this machine's by default).
    pub platform: Platform,
    pub rootfs: RootfsMode,
    pub gc: GcPolicy,
}

impl ImageSettings {
    /// The defaults for `node_dir`: this machine's platform, overlayfs where it works,
    /// kubelet's GC thresholds, no insecure registry.
    pub fn new(node_dir: &Path) -> ImageSettings {
        ImageSettings {
            node_dir: node_dir.to_path_buf(),
            registry: RegistrySettings::default(),
            platform: Platform::host(),
            rootfs: RootfsMode::Auto,
            gc: GcPolicy::default(),
        }
    }
}

/// Why the image service could not start.
#[derive(Debug, thiserror::Error)]
pub enum OpenError {
    #[error("content store: {0}")]
    Store(#[from] StoreError),
    #[error("registry TLS: {0}")]
    Tls(#[from] crate::http_client::TlsError),
}

/// Images on this node.
pub struct Images {
    store: Arc<ContentStore>,
    client: RegistryClient,
    platform: Platform,
    rootfs: Arc<RootfsBuilder>,
    gc: GcPolicy,
    images_dir: PathBuf,
    /// The pull in flight per image name and credentials, and its outcome once known.
    pulls: Mutex<HashMap<(String, u64), Arc<Flight>>>,
    content: tokio::sync::RwLock<()>,
}

impl std::fmt::Debug for Images {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Images")
            .field("store", &self.store.root())
            .field("platform", &self.platform)
            .finish_non_exhaustive()
    }
}

impl Images {
    /// Opens the store under `settings.node_dir` (blocking: reads `images.json`).
    pub fn open(settings: ImageSettings) -> Result<Images, OpenError> {
        let content = settings.node_dir.join("content");
        let store = Arc::new(ContentStore::open(&content)?);
        let client = RegistryClient::new(settings.registry)?;
        Ok(Images {
            rootfs: Arc::new(RootfsBuilder::new(&content.join("tmp"), settings.rootfs)),
            store,
            client,
            platform: settings.platform,
            gc: settings.gc,
            images_dir: settings.node_dir.join("images"),
            pulls: Mutex::new(HashMap::new()),
            content: tokio::sync::RwLock::new(()),
        })
    }

    pub fn store(&self) -> &Arc<ContentStore> {
        &self.store
    }

    pub fn platform(&self) -> &Platform {
        &self.platform
    }

    /// `<node-dir>/images/`, the air-gap drop directory.
    pub fn images_dir(&self) -> &Path {
        &self.images_dir
    }

    /// The image `image` (as a pod names it) if the node has it.
    pub fn get(&self, image: &str) -> Option<ImageRecord> {
        let name = Reference::parse(image).ok()?.to_string();
        self.store.image(&name)
    }

    pub fn list(&self) -> Vec<ImageRecord> {
        self.store.images()
    }

    /// The image a container of `image` with `policy` runs, pulled if the policy says so.
    pub async fn ensure(
        &self,
        image: &str,
        policy: PullPolicy,
        keyring: &Keyring,
    ) -> Result<ImageRecord, PullError> {
        let reference = Reference::parse(image)?;
        let name = reference.to_string();
        if let Decision::UsePresent(record) = pull::decide(policy, image, self.store.image(&name))?
        {
            return Ok(*record);
        }
        // Pods asking for the same image with the same credentials share one pull and its
        // outcome, success or failure: a hundred pods of an image whose registry hangs wait
        // for one timeout, not a hundred in a row.
        let key = (name.clone(), keyring.fingerprint(&reference));
        let flight = self.pulls.lock().entry(key.clone()).or_default().clone();
        let outcome = flight
            .get_or_init(|| async {
                self.pull_reference(&reference, keyring)
                    .await
                    .map_err(Arc::new)
            })
            .await
            .clone();
        {
            let mut pulls = self.pulls.lock();
            if pulls.get(&key).is_some_and(|f| Arc::ptr_eq(f, &flight)) {
                pulls.remove(&key);
            }
        }
        outcome.map_err(PullError::Shared)
    }

    /// Pulls `image` whatever the node has.
    pub async fn pull(&self, image: &str, keyring: &Keyring) -> Result<ImageRecord, PullError> {
        let reference = Reference::parse(image)?;
        self.pull_reference(&reference, keyring).await
    }

    async fn pull_reference(
        &self,
        reference: &Reference,
        keyring: &Keyring,
    ) -> Result<ImageRecord, PullError> {
        let _shared = self.content.read().await;
        let started = std::time::Instant::now();
        let pulled = pull::pull(
            &self.client,
            &self.store,
            &self.platform,
            reference,
            keyring,
        )
        .await;
        crate::agent::metrics::METRICS.image_pulled(started.elapsed(), pulled.is_ok());
        pulled
    }

    /// The root filesystem of a container of `image` in `dir` (see [`super::rootfs`]); notes
    /// the image as used now, for GC's least-recently-used order.
    pub async fn prepare_rootfs(
        &self,
        image: &ImageRecord,
        dir: &Path,
    ) -> Result<Rootfs, RootfsError> {
        let _shared = self.content.read().await;
        let (store, image, dir) = (self.store.clone(), image.clone(), dir.to_path_buf());
        let builder = self.rootfs.clone();
        tokio::task::spawn_blocking(move || {
            let _ = store.touch(&image.name, store::unix_now());
            builder.prepare(&store, &image, &dir)
        })
        .await
        .unwrap_or_else(|e| {
            Err(RootfsError::Io {
                path: PathBuf::new(),
                source: std::io::Error::other(e.to_string()),
            })
        })
    }

    /// Unmounts and removes the root filesystem in `dir`.
    pub async fn release_rootfs(&self, dir: &Path) -> Result<(), RootfsError> {
        let dir = dir.to_path_buf();
        tokio::task::spawn_blocking(move || rootfs::release(&dir))
            .await
            .unwrap_or_else(|e| {
                Err(RootfsError::Io {
                    path: PathBuf::new(),
                    source: std::io::Error::other(e.to_string()),
                })
            })
    }

    /// Image GC against the node directory's filesystem (see [`super::gc`]).
    pub async fn collect_garbage(&self, in_use: &BTreeSet<String>) -> Result<GcReport, StoreError> {
        let root = self.store.root().to_path_buf();
        let usage = DiskUsage::of(&root).map_err(|source| StoreError::Io { path: root, source })?;
        self.collect_garbage_at(in_use, usage).await
    }

    /// Image GC as if the filesystem were `usage`.
    pub async fn collect_garbage_at(
        &self,
        in_use: &BTreeSet<String>,
        usage: DiskUsage,
    ) -> Result<GcReport, StoreError> {
        let _alone = self.content.write().await;
        let (store, policy, in_use) = (self.store.clone(), self.gc, in_use.clone());
        tokio::task::spawn_blocking(move || {
            gc::collect(&store, &policy, usage, &in_use, store::unix_now())
        })
        .await
        .unwrap_or_else(|e| {
            Err(StoreError::Io {
                path: PathBuf::new(),
                source: std::io::Error::other(e.to_string()),
            })
        })
    }

    /// Imports the archive at `path` (see [`super::import`]).
    pub async fn import(&self, path: &Path) -> Result<Vec<ImageRecord>, ImportError> {
        let _shared = self.content.read().await;
        let (store, platform, path) = (
            self.store.clone(),
            self.platform.clone(),
            path.to_path_buf(),
        );
        tokio::task::spawn_blocking(move || import::import_archive(&store, &path, &platform))
            .await
            .unwrap_or_else(|e| Err(ImportError::Broken(format!("import stopped: {e}"))))
    }
}
