//! Pulling one image into the content store, and what `imagePullPolicy` decides.
//!
//! A pull: resolve the reference to a manifest (trying each matching pull secret in turn
//! while the registry says 401/403, anonymous when none matches), pick this platform's
//! manifest from an index, fetch the config, stream each missing layer blob into the store
//! (digest checked, nothing kept on a mismatch), unpack each layer once (diff-id checked),
//! and record the image under its name. Layers already in the store, from any image, are
//! neither fetched nor unpacked again. Layers are fetched one after another.
//!
//! The errors are what a pod's status shows: [`PullError::reason`] is the `waiting.reason`
//! (`ErrImagePull`, `ErrImageNeverPull`, `InvalidImageName`; `ImagePullBackOff` is the
//! caller's, between retries) and the message names the image and what the registry said.

use std::sync::Arc;

use super::client::{RegistryClient, RegistryError, Session, MAX_CONFIG};
use super::credentials::{Credential, Keyring};
use super::digest::Digest;
use super::oci::{self, ImageConfig, Manifest, Parsed, Platform};
use super::records::ImageRecord;
use super::reference::{BadReference, Reference};
use super::store::{self, ContentStore, StoreError};

/// `imagePullPolicy`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PullPolicy {
    /// Resolve the name at the registry every time (the layers present are reused).
    Always,
    IfNotPresent,
    /// Use what the node has; never contact a registry.
    Never,
}

impl PullPolicy {
    /// The API's spelling; `None` for anything else.
    pub fn parse(text: &str) -> Option<PullPolicy> {
        match text {
            "Always" => Some(PullPolicy::Always),
            "IfNotPresent" => Some(PullPolicy::IfNotPresent),
            "Never" => Some(PullPolicy::Never),
            _ => None,
        }
    }

    /// The API server's default for a container without one: `Always` for `:latest` (or no
    /// tag and no digest), else `IfNotPresent`.
    pub fn default_for(reference: &Reference) -> PullPolicy {
        match (&reference.digest, reference.tag.as_deref()) {
            (None, Some("latest") | None) => PullPolicy::Always,
            _ => PullPolicy::IfNotPresent,
        }
    }
}

/// What to do about an image before starting a container.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// The node's copy is used as it is.
    UsePresent(Box<ImageRecord>),
    Pull,
}

/// `policy` applied to what the node has (`present`): the one place the policy is read.
pub fn decide(
    policy: PullPolicy,
    image: &str,
    present: Option<ImageRecord>,
) -> Result<Decision, PullError> {
    match (policy, present) {
        (PullPolicy::Always, _) => Ok(Decision::Pull),
        (_, Some(record)) => Ok(Decision::UsePresent(Box::new(record))),
        (PullPolicy::IfNotPresent, None) => Ok(Decision::Pull),
        (PullPolicy::Never, None) => Err(PullError::NeverPull {
            image: image.to_string(),
        }),
    }
}

/// Why an image is not there to run.
#[derive(Debug, thiserror::Error)]
pub enum PullError {
    #[error("Failed to apply default image tag: {0}")]
    InvalidName(#[from] BadReference),
    #[error("Container image {image:?} is not present with pull policy of Never")]
    NeverPull { image: String },
    #[error("failed to pull image {image:?}: {source}")]
    Registry {
        image: String,
        source: RegistryError,
    },
    #[error("failed to pull image {image:?}: no manifest for {want} (the index offers {offered})")]
    NoPlatform {
        image: String,
        want: Platform,
        offered: String,
    },
    #[error("failed to pull image {image:?}: {reason}")]
    Format { image: String, reason: String },
    #[error("failed to pull image {image:?}: {source}")]
    Store { image: String, source: StoreError },
    /// The outcome of a pull another caller started.
    #[error(transparent)]
    Shared(Arc<PullError>),
}

impl PullError {
    /// The pod status' `waiting.reason` for this failure.
    pub fn reason(&self) -> &'static str {
        match self {
            PullError::Shared(inner) => inner.reason(),
            PullError::InvalidName(_) => "InvalidImageName",
            PullError::NeverPull { .. } => "ErrImageNeverPull",
            _ => "ErrImagePull",
        }
    }
}

/// Pulls `reference` into `store` for `platform` and records it under its full name.
pub async fn pull(
    client: &RegistryClient,
    store: &Arc<ContentStore>,
    platform: &Platform,
    reference: &Reference,
    keyring: &Keyring,
) -> Result<ImageRecord, PullError> {
    let image = reference.to_string();
    let registry = |source| PullError::Registry {
        image: image.clone(),
        source,
    };
    let format = |reason: String| PullError::Format {
        image: image.clone(),
        reason,
    };
    let in_store = |source| PullError::Store {
        image: image.clone(),
        source,
    };

    let (mut session, body, content_type, top_digest) = resolve(client, reference, keyring)
        .await
        .map_err(registry)?;
    let parsed =
        oci::parse_manifest(&body, content_type.as_deref()).map_err(|e| format(e.to_string()))?;
    put_blob(store, &top_digest, &body)
        .await
        .map_err(in_store)?;
    let (manifest_digest, manifest) = match parsed {
        Parsed::Manifest(m) => (top_digest.clone(), m),
        Parsed::Index(index) => {
            let entry = oci::choose(&index, platform).ok_or_else(|| PullError::NoPlatform {
                image: image.clone(),
                want: platform.clone(),
                offered: oci::offered(&index),
            })?;
            let digest = entry.digest.to_string();
            let (body, content_type, digest) = session.manifest(&digest).await.map_err(registry)?;
            match oci::parse_manifest(&body, content_type.as_deref())
                .map_err(|e| format(e.to_string()))?
            {
                Parsed::Manifest(m) => {
                    put_blob(store, &digest, &body).await.map_err(in_store)?;
                    (digest, m)
                }
                Parsed::Index(_) => {
                    return Err(format(format!(
                        "index entry {digest} is another index, not a manifest"
                    )))
                }
            }
        }
    };
    let config = fetch_config(&mut session, store, &manifest)
        .await
        .map_err(|e| match e {
            Fetch::Registry(e) => registry(e),
            Fetch::Store(e) => in_store(e),
            Fetch::Format(reason) => format(reason),
        })?;
    if !config.architecture.is_empty() {
        let of_image = Platform {
            os: config.os.clone(),
            architecture: config.architecture.clone(),
            variant: config.variant.clone(),
        };
        if of_image.fit(platform).is_none() {
            return Err(PullError::NoPlatform {
                image: image.clone(),
                want: platform.clone(),
                offered: of_image.to_string(),
            });
        }
    }
    let mut record = store::record_for(
        &manifest_digest,
        &image,
        &manifest,
        &config,
        store::unix_now(),
    )
    .map_err(in_store)?;
    record.repo_digest = top_digest;
    for layer in &record.layers {
        if oci::layer_compression(&layer.media_type).is_none() {
            return Err(in_store(StoreError::MediaType {
                layer: layer.digest.clone(),
                media_type: layer.media_type.clone(),
            }));
        }
    }
    for layer in &record.layers {
        if !store.has_blob(&layer.digest) {
            download(&mut session, store, &layer.digest, layer.size)
                .await
                .map_err(|e| match e {
                    Fetch::Registry(e) => registry(e),
                    Fetch::Store(e) => in_store(e),
                    Fetch::Format(reason) => format(reason),
                })?;
        }
    }
    for layer in record.layers.clone() {
        store::blocking(store, move |s| s.ensure_layer(&layer))
            .await
            .map_err(in_store)?;
    }
    let kept = record.clone();
    store::blocking(store, move |s| s.put_image(kept))
        .await
        .map_err(in_store)?;
    tracing::info!(
        "pulled {image} ({}, {} layer(s), {} bytes)",
        record.manifest,
        record.layers.len(),
        record.size
    );
    Ok(record)
}

/// The manifest (or index) the reference names, from a session that worked: each matching
/// credential is tried while the registry refuses with 401/403.
async fn resolve(
    client: &RegistryClient,
    reference: &Reference,
    keyring: &Keyring,
) -> Result<(Session, bytes::Bytes, Option<String>, Digest), RegistryError> {
    let mut candidates: Vec<Option<Credential>> =
        keyring.lookup(reference).into_iter().map(Some).collect();
    if candidates.is_empty() {
        candidates.push(None);
    }
    let mut last = None;
    for credential in candidates {
        let attempt = async {
            let mut session = client
                .session(reference.api_host(), &reference.repository, credential)
                .await?;
            let (body, content_type, digest) = session.manifest(&reference.tag_or_digest()).await?;
            Ok::<_, RegistryError>((session, body, content_type, digest))
        };
        match attempt.await {
            Ok(found) => return Ok(found),
            Err(e) if e.is_unauthorized() => last = Some(e),
            Err(e) => return Err(e),
        }
    }
    Err(last.unwrap_or_else(|| RegistryError::Protocol {
        what: reference.to_string(),
        reason: "no credentials to try".to_string(),
    }))
}

enum Fetch {
    Registry(RegistryError),
    Store(StoreError),
    Format(String),
}

async fn fetch_config(
    session: &mut Session,
    store: &Arc<ContentStore>,
    manifest: &Manifest,
) -> Result<ImageConfig, Fetch> {
    let digest = &manifest.config.digest;
    let bytes = if store.has_blob(digest) {
        store
            .read_blob(digest, MAX_CONFIG as u64)
            .map_err(Fetch::Store)?
    } else {
        let bytes = session
            .small_blob(&manifest.config, MAX_CONFIG)
            .await
            .map_err(Fetch::Registry)?;
        put_blob(store, digest, &bytes)
            .await
            .map_err(Fetch::Store)?;
        bytes.to_vec()
    };
    serde_json::from_slice(&bytes).map_err(|e| Fetch::Format(format!("image config {digest}: {e}")))
}

/// Stores a small blob off the async runtime.
async fn put_blob(
    store: &Arc<ContentStore>,
    digest: &Digest,
    bytes: &[u8],
) -> Result<(), StoreError> {
    let (digest, bytes) = (digest.clone(), bytes.to_vec());
    store::blocking(store, move |s| s.put_blob(&digest, &bytes)).await
}

/// Streams the blob `digest` of `size` bytes into the store.
async fn download(
    session: &mut Session,
    store: &Arc<ContentStore>,
    digest: &Digest,
    size: u64,
) -> Result<(), Fetch> {
    let mut answer = session.blob(digest).await.map_err(Fetch::Registry)?;
    let mut writer = store
        .blob_writer(digest, Some(size))
        .map_err(Fetch::Store)?;
    let host = session.host().to_string();
    while let Some(piece) = answer.chunk().await.map_err(|error| {
        Fetch::Registry(RegistryError::Transport {
            host: host.clone(),
            error,
            hint: None,
        })
    })? {
        writer.write(&piece).map_err(Fetch::Store)?;
    }
    tokio::task::spawn_blocking(move || writer.commit())
        .await
        .map_err(|e| Fetch::Format(format!("storing blob {digest} stopped: {e}")))?
        .map_err(Fetch::Store)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record() -> ImageRecord {
        let d = Digest::of(b"x");
        ImageRecord {
            name: "docker.io/library/x:1".into(),
            repo_digest: d.clone(),
            manifest: d.clone(),
            config: d,
            layers: vec![],
            size: 0,
            container_config: Default::default(),
            pulled_at: 0,
            last_used: 0,
            pinned: false,
        }
    }

    #[test]
    fn the_pull_policy_decides_with_what_the_node_has() {
        use PullPolicy::*;
        let have = Some(record());
        assert_eq!(decide(Always, "x:1", have.clone()).unwrap(), Decision::Pull);
        assert_eq!(decide(Always, "x:1", None).unwrap(), Decision::Pull);
        assert_eq!(
            decide(IfNotPresent, "x:1", have.clone()).unwrap(),
            Decision::UsePresent(Box::new(record()))
        );
        assert_eq!(decide(IfNotPresent, "x:1", None).unwrap(), Decision::Pull);
        assert_eq!(
            decide(Never, "x:1", have).unwrap(),
            Decision::UsePresent(Box::new(record()))
        );
        let e = decide(Never, "x:1", None).unwrap_err();
        assert_eq!(e.reason(), "ErrImageNeverPull");
        assert_eq!(
            e.to_string(),
            "Container image \"x:1\" is not present with pull policy of Never"
        );
        let bad = PullError::from(Reference::parse("UPPER").unwrap_err());
        assert_eq!(bad.reason(), "InvalidImageName");
        assert_eq!(PullPolicy::parse("Never"), Some(Never));
        assert_eq!(PullPolicy::parse("never"), None);
        let policy = |image: &str| PullPolicy::default_for(&Reference::parse(image).unwrap());
        assert_eq!(policy("busybox"), Always);
        assert_eq!(policy("busybox:latest"), Always);
        assert_eq!(policy("busybox:1.36"), IfNotPresent);
        assert_eq!(
            policy(
                "busybox@sha256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
            ),
            IfNotPresent
        );
    }
}
