//! Creating and deleting a workload's pods the way kube-controller-manager's `PodControl` does,
//! for every controller that makes pods from a template (ReplicaSet, ReplicationController,
//! and the DaemonSet, StatefulSet and Job controllers):
//! - a pod is its owner's template with `generateName: <owner>-`, the template's labels,
//!   annotations and finalizers, and the owner's controller reference;
//! - each create and delete records `SuccessfulCreate`/`FailedCreate` or
//!   `SuccessfulDelete`/`FailedDelete` on the owner (none when the namespace is terminating,
//!   where every create fails and nothing is wrong with the owner);
//! - many creates go in slow-start batches (1, 2, 4 …) that stop at the first failure, so an
//!   owner whose pods cannot be created costs one failed request per attempt, not hundreds.

use std::future::Future;

use serde_json::{json, Map, Value};

use super::events::{EventRecorder, Involved};
use crate::client::{Client, ClientError, DeleteOptions};
use crate::kube::resources::{self, ResourceInfo};

/// `FailedCreate` and the ReplicaFailure reason of a failed create.
pub const FAILED_CREATE: &str = "FailedCreate";
/// ReplicaFailure's reason after a failed delete.
pub const FAILED_DELETE: &str = "FailedDelete";

pub fn pods() -> &'static ResourceInfo {
    resources::find("", "v1", "pods")
        .unwrap_or_else(|| panic!("built-in kind pods is not registered"))
}

/// Whether a create failed because its namespace is being deleted (upstream's
/// `NamespaceTerminatingCause`): the answer is 403 with that message.
pub fn is_namespace_terminating(e: &ClientError) -> bool {
    matches!(e, ClientError::Status { code: 403, message, .. } if message.contains("because it is being terminated"))
}

/// The pod an owner named `owner_name` creates from `template` (upstream's
/// `GetPodFromTemplate`).
pub fn pod_from_template(template: &Value, owner_name: &str, controller_ref: &Value) -> Value {
    let copy = |field: &str| {
        template
            .pointer(&format!("/metadata/{field}"))
            .filter(|v| !v.is_null())
            .cloned()
    };
    let mut metadata = Map::new();
    metadata.insert("generateName".into(), json!(format!("{owner_name}-")));
    for field in ["labels", "annotations", "finalizers"] {
        if let Some(v) = copy(field) {
            metadata.insert(field.into(), v);
        }
    }
    metadata.insert("ownerReferences".into(), json!([controller_ref]));
    json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": metadata,
        "spec": template.get("spec").cloned().unwrap_or_else(|| json!({})),
    })
}

/// Pod writes on behalf of owners, with their events.
#[derive(Clone)]
pub struct PodControl {
    client: Client,
    recorder: EventRecorder,
}

impl PodControl {
    pub fn new(client: Client, recorder: EventRecorder) -> PodControl {
        PodControl { client, recorder }
    }

    /// Creates one pod from `template` in `namespace` for `owner`; the created pod.
    pub async fn create(
        &self,
        namespace: &str,
        template: &Value,
        owner: &Involved,
        controller_ref: &Value,
    ) -> Result<Value, ClientError> {
        let pod = pod_from_template(template, &owner.name, controller_ref);
        let has_labels = pod
            .pointer("/metadata/labels")
            .and_then(Value::as_object)
            .is_some_and(|l| !l.is_empty());
        if !has_labels {
            // Upstream refuses too: a pod without labels could never be selected back.
            return Err(ClientError::Status {
                code: 422,
                reason: "Invalid".into(),
                message: "unable to create pods, no labels".into(),
            });
        }
        match self.client.create(pods(), namespace, &pod).await {
            Ok(created) => {
                let name = created
                    .pointer("/metadata/name")
                    .and_then(Value::as_str)
                    .unwrap_or_default();
                self.recorder.normal(
                    owner.clone(),
                    "SuccessfulCreate",
                    &format!("Created pod: {name}"),
                );
                Ok(created)
            }
            Err(e) => {
                if !is_namespace_terminating(&e) {
                    self.recorder.warning(
                        owner.clone(),
                        FAILED_CREATE,
                        &format!("Error creating: {}", status_text(&e)),
                    );
                }
                Err(e)
            }
        }
    }

    /// Deletes pod `name` (only the one with `uid`: a pod replaced under the same name is not
    /// touched). A pod already gone is `Err` with `is_not_found`, and gets no event.
    pub async fn delete(
        &self,
        namespace: &str,
        name: &str,
        uid: &str,
        owner: &Involved,
    ) -> Result<(), ClientError> {
        let options = DeleteOptions {
            uid: Some(uid.to_string()),
            ..DeleteOptions::default()
        };
        match self.client.delete(pods(), namespace, name, &options).await {
            Ok(_) => {
                self.recorder.normal(
                    owner.clone(),
                    "SuccessfulDelete",
                    &format!("Deleted pod: {name}"),
                );
                Ok(())
            }
            Err(e) if e.is_not_found() => Err(e),
            // The uid precondition failed: the pod we meant is gone.
            Err(e) if e.is_conflict() => Err(ClientError::Status {
                code: 404,
                reason: "NotFound".into(),
                message: e.to_string(),
            }),
            Err(e) => {
                self.recorder.warning(
                    owner.clone(),
                    "FailedDelete",
                    &format!("Error deleting: {}", status_text(&e)),
                );
                Err(e)
            }
        }
    }
}

/// The API's message, as upstream's events quote the Status error.
pub fn status_text(e: &ClientError) -> String {
    match e {
        ClientError::Status { message, .. } if !message.is_empty() => message.clone(),
        other => other.to_string(),
    }
}

/// Calls `f` `count` times in batches of 1, 2, 4 … (`initial` first), each batch at once,
/// stopping after a batch with a failure (upstream's `slowStartBatch`). Returns how many calls
/// succeeded and the first failure.
pub async fn slow_start_batch<E, F, Fut>(
    count: usize,
    initial: usize,
    mut f: F,
) -> (usize, Option<E>)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<(), E>>,
{
    let mut remaining = count;
    let mut successes = 0;
    let mut batch = remaining.min(initial.max(1));
    while batch > 0 {
        let results = futures::future::join_all((0..batch).map(|_| f())).await;
        let mut failure = None;
        for result in results {
            match result {
                Ok(()) => successes += 1,
                Err(e) => {
                    failure.get_or_insert(e);
                }
            }
        }
        if failure.is_some() {
            return (successes, failure);
        }
        remaining -= batch;
        batch = (2 * batch).min(remaining);
    }
    (successes, None)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    #[test]
    fn pods_come_from_the_template() {
        let template = json!({
            "metadata": {"labels": {"app": "web"}, "annotations": {"a": "b"},
                         "finalizers": ["x/y"], "name": "ignored"},
            "spec": {"containers": [{"name": "c", "image": "nginx"}]},
        });
        let owner_ref =
            json!({"kind": "ReplicaSet", "name": "web", "uid": "u", "controller": true});
        let pod = pod_from_template(&template, "web", &owner_ref);
        assert_eq!(pod["metadata"]["generateName"], "web-");
        assert_eq!(pod["metadata"]["labels"], json!({"app": "web"}));
        assert_eq!(pod["metadata"]["annotations"], json!({"a": "b"}));
        assert_eq!(pod["metadata"]["finalizers"], json!(["x/y"]));
        assert_eq!(pod["metadata"]["ownerReferences"], json!([owner_ref]));
        assert!(pod["metadata"].get("name").is_none());
        assert_eq!(pod["spec"], template["spec"]);
    }

    #[tokio::test]
    async fn slow_start_doubles_and_stops_at_the_first_failing_batch() {
        let calls = AtomicUsize::new(0);
        let (ok, err) = slow_start_batch(10, 1, || async {
            calls.fetch_add(1, Ordering::SeqCst);
            Ok::<(), ()>(())
        })
        .await;
        assert_eq!((ok, err, calls.load(Ordering::SeqCst)), (10, None, 10));

        // Batches 1, 2, 4: the 5th call fails, so the batch of 4 is the last one.
        let calls = AtomicUsize::new(0);
        let (ok, err) = slow_start_batch(100, 1, || {
            let n = calls.fetch_add(1, Ordering::SeqCst);
            async move {
                if n == 4 {
                    Err("quota")
                } else {
                    Ok(())
                }
            }
        })
        .await;
        assert_eq!((ok, err), (6, Some("quota")));
        assert_eq!(calls.load(Ordering::SeqCst), 7);
        assert_eq!(
            slow_start_batch(0, 1, || async { Ok::<(), ()>(()) }).await,
            (0, None)
        );
    }
}
