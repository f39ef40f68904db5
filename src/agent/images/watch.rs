//! Watching the air-gap directory `<node-dir>/images/`: every archive there is imported at
//! start, and each one that appears later as soon as it is complete — inotify's
//! `IN_CLOSE_WRITE` (a file written in place) and `IN_MOVED_TO` (a file moved in, the safe
//! way to drop one). Where inotify is not available the directory is rescanned every
//! [`RESCAN`] instead, and a log line says so.
//!
//! What each archive gave is remembered in `content/imports.json` by file name, size and
//! mtime, so an unchanged archive is neither imported again at the next start (unless one of
//! its images is gone from the store) nor, when it is not an image, logged again: a file that
//! is not an image is logged once, with the reason, and left alone. Hidden files (a name
//! starting with `.`, as copies in progress often are) are ignored.

use std::collections::BTreeMap;
use std::os::fd::{AsFd, AsRawFd, RawFd};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use nix::sys::inotify::{AddWatchFlags, InitFlags, Inotify};
use serde::{Deserialize, Serialize};
use tokio::io::unix::AsyncFd;
use tokio::io::Interest;
use tokio_util::sync::CancellationToken;

use super::service::Images;
use crate::storage::fsutil;

/// How often the directory is scanned when inotify is not available.
pub const RESCAN: Duration = Duration::from_secs(10);

/// What one archive gave, the last time it was read.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct Seen {
    size: u64,
    mtime_ns: i128,
    /// The images it recorded.
    #[serde(default)]
    names: Vec<String>,
    /// Why it was not imported.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    error: Option<String>,
}

/// Watches `images.images_dir()` until `stop`; imports what is there first.
pub async fn watch(images: Arc<Images>, stop: CancellationToken) {
    watch_signalling(images, stop, None).await
}

/// [`watch`], sending on `scanned` once what was there at the start is imported (so pods
/// that need those images do not try to pull them meanwhile).
pub async fn watch_signalling(
    images: Arc<Images>,
    stop: CancellationToken,
    scanned: Option<tokio::sync::oneshot::Sender<()>>,
) {
    let dir = images.images_dir().to_path_buf();
    if let Err(e) = std::fs::create_dir_all(&dir) {
        tracing::error!(
            "{}: cannot create the image import directory: {e}",
            dir.display()
        );
        return;
    }
    let mut importer = Importer::load(images);
    // The watch comes first, so a file dropped during the first scan is not missed.
    let inotify = match watcher(&dir) {
        Ok(fd) => Some(fd),
        Err(e) => {
            tracing::warn!(
                "{}: inotify is not available ({e}); rescanning every {}s instead",
                dir.display(),
                RESCAN.as_secs()
            );
            None
        }
    };
    importer.scan(&dir).await;
    if let Some(scanned) = scanned {
        let _ = scanned.send(());
    }
    match inotify {
        Some(fd) => loop {
            tokio::select! {
                _ = stop.cancelled() => return,
                ready = fd.readable() => {
                    let mut guard = match ready {
                        Ok(g) => g,
                        Err(e) => {
                            tracing::error!("{}: inotify: {e}", dir.display());
                            return;
                        }
                    };
                    let events = match guard.get_inner().0.read_events() {
                        Ok(events) => events,
                        Err(nix::Error::EAGAIN) => {
                            guard.clear_ready();
                            continue;
                        }
                        Err(e) => {
                            tracing::error!("{}: inotify: {e}", dir.display());
                            return;
                        }
                    };
                    drop(guard);
                    if events.iter().any(|e| e.mask.contains(AddWatchFlags::IN_Q_OVERFLOW)) {
                        importer.scan(&dir).await;
                        continue;
                    }
                    for name in events.into_iter().filter_map(|e| e.name) {
                        importer.consider(&dir.join(name)).await;
                    }
                }
            }
        },
        None => loop {
            tokio::select! {
                _ = stop.cancelled() => return,
                _ = tokio::time::sleep(RESCAN) => importer.scan(&dir).await,
            }
        },
    }
}

/// The inotify descriptor, for tokio's readiness.
struct Watch(Inotify);

impl AsRawFd for Watch {
    fn as_raw_fd(&self) -> RawFd {
        self.0.as_fd().as_raw_fd()
    }
}

fn watcher(dir: &Path) -> Result<AsyncFd<Watch>, String> {
    let inotify =
        Inotify::init(InitFlags::IN_NONBLOCK | InitFlags::IN_CLOEXEC).map_err(|e| e.to_string())?;
    inotify
        .add_watch(
            dir,
            AddWatchFlags::IN_CLOSE_WRITE | AddWatchFlags::IN_MOVED_TO,
        )
        .map_err(|e| e.to_string())?;
    // SAFETY: the descriptor is the `Inotify`'s own, owned by the `Watch` the AsyncFd holds,
    // and `as_raw_fd` always returns that same descriptor.
    unsafe { AsyncFd::register_with_interest(Watch(inotify), Interest::READABLE) }
        .map_err(|e| e.to_string())
}

struct Importer {
    images: Arc<Images>,
    state_path: PathBuf,
    seen: BTreeMap<String, Seen>,
}

impl Importer {
    fn load(images: Arc<Images>) -> Importer {
        let state_path = images.store().root().join("imports.json");
        let seen = std::fs::read(&state_path)
            .ok()
            .and_then(|b| serde_json::from_slice(&b).ok())
            .unwrap_or_default();
        Importer {
            images,
            state_path,
            seen,
        }
    }

    async fn scan(&mut self, dir: &Path) {
        let mut paths: Vec<PathBuf> = match std::fs::read_dir(dir) {
            Ok(entries) => entries.flatten().map(|e| e.path()).collect(),
            Err(e) => {
                tracing::error!("{}: {e}", dir.display());
                return;
            }
        };
        paths.sort();
        for path in paths {
            self.consider(&path).await;
        }
    }

    /// Imports the file at `path` unless it was read before as it is now.
    async fn consider(&mut self, path: &Path) {
        let Some(name) = path.file_name().map(|n| n.to_string_lossy().into_owned()) else {
            return;
        };
        if name.starts_with('.') {
            return;
        }
        let Ok(meta) = std::fs::metadata(path) else {
            return;
        };
        if !meta.is_file() {
            return;
        }
        let (size, mtime_ns) = (
            meta.len(),
            i128::from(meta.mtime()) * 1_000_000_000 + i128::from(meta.mtime_nsec()),
        );
        if let Some(seen) = self.seen.get(&name) {
            let unchanged = seen.size == size && seen.mtime_ns == mtime_ns;
            let complete = seen.error.is_some()
                || seen
                    .names
                    .iter()
                    .all(|n| self.images.store().image(n).is_some());
            if unchanged && complete {
                return;
            }
        }
        let seen = match self.images.import(path).await {
            Ok(records) => {
                let names: Vec<String> = records.iter().map(|r| r.name.clone()).collect();
                tracing::info!("images/{name}: imported {}", names.join(", "));
                Seen {
                    size,
                    mtime_ns,
                    names,
                    error: None,
                }
            }
            Err(e) => {
                tracing::warn!("images/{name}: skipped: {e}");
                Seen {
                    size,
                    mtime_ns,
                    names: Vec::new(),
                    error: Some(e.to_string()),
                }
            }
        };
        self.seen.insert(name, seen);
        self.seen.retain(|n, _| path.with_file_name(n).exists());
        match serde_json::to_vec_pretty(&self.seen) {
            Ok(bytes) => {
                if let Err(e) = fsutil::write_atomic(&self.state_path, &bytes, fsutil::PUBLIC_MODE)
                {
                    tracing::warn!("{}: {e}", self.state_path.display());
                }
            }
            Err(e) => tracing::warn!("{}: {e}", self.state_path.display()),
        }
    }
}
