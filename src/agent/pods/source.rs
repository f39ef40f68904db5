//! The pods bound to this node, from the API: a list with `fieldSelector=spec.nodeName=<node>`,
//! then a watch from the list's resourceVersion. The watch is started again from the last
//! resourceVersion seen when it ends (its server failed, the server closed it); when the
//! server no longer has that version (an `ERROR` event, 410 Gone) or the stream breaks, the
//! pods are listed again, and the new list is the whole truth: pods missing from it are gone.

use std::time::Duration;

use serde_json::Value;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::agent::api::ApiClient;

/// What the source saw.
#[derive(Debug)]
pub enum SourceEvent {
    /// Every pod bound to the node (a list): the ones not in it are gone.
    Listed(Vec<Value>),
    /// A pod was added or changed.
    Changed(Value),
    /// A pod is gone from the API (or no longer bound to this node).
    Deleted(Value),
}

fn list_path(node: &str) -> String {
    format!("/api/v1/pods?fieldSelector=spec.nodeName%3D{node}")
}

fn watch_path(node: &str, rv: &str) -> String {
    format!(
        "/api/v1/pods?watch=true&allowWatchBookmarks=true&fieldSelector=spec.nodeName%3D{node}&resourceVersion={rv}"
    )
}

/// Follows the pods of `node` until `stop` (or until the receiver is gone).
pub async fn run(
    api: ApiClient,
    node: String,
    events: mpsc::Sender<SourceEvent>,
    stop: CancellationToken,
) {
    let mut retry = Duration::from_millis(250);
    let mut version: Option<String> = None;
    loop {
        if version.is_none() {
            let path = list_path(&node);
            let listed = tokio::select! {
                _ = stop.cancelled() => return,
                l = api.get(&path) => l,
            };
            match listed {
                Ok(Some(mut list)) => {
                    retry = Duration::from_millis(250);
                    version = list["metadata"]["resourceVersion"]
                        .as_str()
                        .map(str::to_string);
                    let items = match list["items"].take() {
                        Value::Array(items) => items,
                        _ => Vec::new(),
                    };
                    if events.send(SourceEvent::Listed(items)).await.is_err() {
                        return;
                    }
                }
                Ok(None) | Err(_) => {
                    if let Err(e) = listed {
                        tracing::warn!(component = "pods", "listing the node's pods: {e}");
                    }
                    tokio::select! {
                        _ = stop.cancelled() => return,
                        _ = tokio::time::sleep(retry) => {}
                    }
                    retry = (retry * 2).min(Duration::from_secs(5));
                    continue;
                }
            }
        }
        let rv = version.clone().unwrap_or_default();
        let started = tokio::time::Instant::now();
        let path = watch_path(&node, &rv);
        let watching = tokio::select! {
            _ = stop.cancelled() => return,
            w = api.watch(&path) => w,
        };
        match watching {
            Ok(mut watch) => loop {
                let event = tokio::select! {
                    _ = stop.cancelled() => return,
                    e = watch.next() => e,
                };
                let event = match event {
                    None => break,
                    Some(Ok(e)) => e,
                    Some(Err(e)) => {
                        tracing::debug!(component = "pods", "watching the node's pods: {e}");
                        version = None;
                        break;
                    }
                };
                if let Some(rv) = event.object["metadata"]["resourceVersion"].as_str() {
                    version = Some(rv.to_string());
                }
                let sent = match event.kind.as_str() {
                    "ADDED" | "MODIFIED" => events.send(SourceEvent::Changed(event.object)).await,
                    "DELETED" => events.send(SourceEvent::Deleted(event.object)).await,
                    "BOOKMARK" => Ok(()),
                    _ => {
                        // ERROR: most likely 410 Gone, the version is too old to watch from.
                        tracing::debug!(component = "pods", "watch error: {}", event.object);
                        version = None;
                        break;
                    }
                };
                if sent.is_err() {
                    return;
                }
            },
            Err(e) => {
                tracing::debug!(component = "pods", "watching the node's pods: {e}");
                if e.status().is_some() {
                    // The server answered but refused the watch (the version is gone).
                    version = None;
                }
            }
        }
        // A watch that ends at once is not started again in a tight loop.
        if started.elapsed() < Duration::from_secs(1) {
            tokio::select! {
                _ = stop.cancelled() => return,
                _ = tokio::time::sleep(Duration::from_secs(1)) => {}
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_select_the_node() {
        assert_eq!(
            list_path("n1"),
            "/api/v1/pods?fieldSelector=spec.nodeName%3Dn1"
        );
        assert_eq!(
            watch_path("n1", "12"),
            "/api/v1/pods?watch=true&allowWatchBookmarks=true&fieldSelector=spec.nodeName%3Dn1&resourceVersion=12"
        );
    }
}
