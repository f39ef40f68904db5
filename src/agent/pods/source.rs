//! The pods bound to this node, from the API: a list with `fieldSelector=spec.nodeName=<node>`,
//! then a watch from the list's resourceVersion. The watch is started again from the last
//! resourceVersion seen when it ends (its server failed, the server closed it); when the
//! server no longer has that version (an `ERROR` event, 410 Gone) or the stream breaks, the
//! pods are listed again, and the new list is the whole truth: pods missing from it are gone.
//! The following itself is [`reflector`]'s.

use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::agent::api::ApiClient;
use crate::agent::reflector::{self, Collection};

/// What the source saw: every pod bound to the node (`Listed`: the ones not in it are gone),
/// a pod added or changed, a pod gone from the API (or no longer bound to this node).
pub type SourceEvent = reflector::Change;

fn list_path(node: &str) -> String {
    format!("/api/v1/pods?fieldSelector=spec.nodeName%3D{node}")
}

/// Follows the pods of `node` until `stop` (or until the receiver is gone).
pub async fn run(
    api: ApiClient,
    node: String,
    events: mpsc::Sender<SourceEvent>,
    stop: CancellationToken,
) {
    let path = list_path(&node);
    let collection = Collection {
        path: &path,
        resync: None,
        component: "pods",
    };
    reflector::run(&api, collection, &stop, |change| {
        let events = events.clone();
        async move { events.send(change).await.is_ok() }
    })
    .await;
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
            reflector::watch_path(&list_path("n1"), "12"),
            "/api/v1/pods?fieldSelector=spec.nodeName%3Dn1&watch=true&allowWatchBookmarks=true&resourceVersion=12"
        );
    }
}
