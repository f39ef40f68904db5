//! One collection of the API followed as client-go's reflector follows it: a list, then a
//! watch from the list's resourceVersion, started again from the last version seen when it
//! ends, and a new list when the server no longer has that version (a refused watch or an
//! `ERROR` event, most likely 410 Gone) or, with a resync period, when that period has
//! passed. The pods' source, the Service proxy and the cluster DNS each follow their kinds
//! through [`run`] and only say what a change does to them.
//!
//! Bounds: a list that fails is tried again after 250 ms, doubling up to 5 s; a watch that
//! ends within a second is not started again before that second is over, so a server that
//! closes watches at once is not asked in a tight loop.

use std::future::Future;
use std::time::Duration;

use serde_json::Value;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::api::ApiClient;

/// What happened to the collection.
#[derive(Debug)]
pub enum Change {
    /// A whole list: it replaces everything known of the collection.
    Listed(Vec<Value>),
    /// An object added or changed.
    Changed(Value),
    Deleted(Value),
}

/// A collection to follow.
#[derive(Debug, Clone, Copy)]
pub struct Collection<'a> {
    /// The list path, with its selectors (`/api/v1/pods?fieldSelector=…`).
    pub path: &'a str,
    /// List again this often even while the watch is healthy (`None`: only when needed).
    pub resync: Option<Duration>,
    /// The `component` field of its log lines.
    pub component: &'static str,
}

const FIRST_RETRY: Duration = Duration::from_millis(250);
const MAX_RETRY: Duration = Duration::from_secs(5);
const MIN_WATCH: Duration = Duration::from_secs(1);

/// The watch request for `list_path` from `version`.
pub fn watch_path(list_path: &str, version: &str) -> String {
    let sep = if list_path.contains('?') { '&' } else { '?' };
    format!("{list_path}{sep}watch=true&allowWatchBookmarks=true&resourceVersion={version}")
}

/// Follows `collection` until `stop`, or until `deliver` answers `false` (its receiver is
/// gone). `deliver` may wait (a full queue holds the watch back).
pub async fn run<F, Fut>(
    api: &ApiClient,
    collection: Collection<'_>,
    stop: &CancellationToken,
    mut deliver: F,
) where
    F: FnMut(Change) -> Fut,
    Fut: Future<Output = bool>,
{
    let Collection {
        path,
        resync,
        component,
    } = collection;
    let mut retry = FIRST_RETRY;
    let mut version: Option<String> = None;
    let mut listed_at = Instant::now();
    loop {
        let resync_due = resync.is_some_and(|period| listed_at.elapsed() >= period);
        if version.is_none() || resync_due {
            let listed = tokio::select! {
                _ = stop.cancelled() => return,
                l = api.get(path) => l,
            };
            match listed {
                Ok(Some(mut list)) => {
                    retry = FIRST_RETRY;
                    listed_at = Instant::now();
                    version = list["metadata"]["resourceVersion"]
                        .as_str()
                        .map(str::to_string);
                    let items = match list["items"].take() {
                        Value::Array(items) => items,
                        _ => Vec::new(),
                    };
                    if !deliver(Change::Listed(items)).await {
                        return;
                    }
                }
                other => {
                    if let Err(e) = other {
                        tracing::warn!(component, "listing {path}: {e}");
                    }
                    tokio::select! {
                        _ = stop.cancelled() => return,
                        _ = tokio::time::sleep(retry) => {}
                    }
                    retry = (retry * 2).min(MAX_RETRY);
                    continue;
                }
            }
        }
        let started = Instant::now();
        // Far enough to mean "never" without overflowing the clock.
        let until_resync = resync
            .map(|period| period.saturating_sub(listed_at.elapsed()))
            .unwrap_or(Duration::from_secs(86_400 * 365));
        let watch_at = watch_path(path, version.as_deref().unwrap_or_default());
        let watching = tokio::select! {
            _ = stop.cancelled() => return,
            w = api.watch(&watch_at) => w,
        };
        match watching {
            Ok(mut watch) => loop {
                let event = tokio::select! {
                    _ = stop.cancelled() => return,
                    _ = tokio::time::sleep_until(started + until_resync) => break,
                    e = watch.next() => e,
                };
                let event = match event {
                    None => break,
                    Some(Ok(e)) => e,
                    Some(Err(e)) => {
                        tracing::debug!(component, "watching {path}: {e}");
                        version = None;
                        break;
                    }
                };
                if let Some(rv) = event.object["metadata"]["resourceVersion"].as_str() {
                    version = Some(rv.to_string());
                }
                let delivered = match event.kind.as_str() {
                    "ADDED" | "MODIFIED" => deliver(Change::Changed(event.object)).await,
                    "DELETED" => deliver(Change::Deleted(event.object)).await,
                    "BOOKMARK" => true,
                    _ => {
                        // ERROR: most likely 410 Gone, the version is too old to watch from.
                        tracing::debug!(component, "watch error on {path}: {}", event.object);
                        version = None;
                        break;
                    }
                };
                if !delivered {
                    return;
                }
            },
            Err(e) => {
                tracing::debug!(component, "watching {path}: {e}");
                if e.status().is_some() {
                    // The server answered but refused the watch (the version is gone).
                    version = None;
                }
            }
        }
        if started.elapsed() < MIN_WATCH {
            tokio::select! {
                _ = stop.cancelled() => return,
                _ = tokio::time::sleep(MIN_WATCH) => {}
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_watch_keeps_the_lists_selectors() {
        assert_eq!(
            watch_path("/api/v1/pods?fieldSelector=spec.nodeName%3Dn1", "12"),
            "/api/v1/pods?fieldSelector=spec.nodeName%3Dn1&watch=true&allowWatchBookmarks=true&resourceVersion=12"
        );
        assert_eq!(
            watch_path("/api/v1/services", ""),
            "/api/v1/services?watch=true&allowWatchBookmarks=true&resourceVersion="
        );
    }
}
