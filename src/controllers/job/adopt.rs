//! Which pods a Job owns, as kube-controller-manager's `ClaimPods` decides it for Jobs: pods
//! it controls and still selects are its own; an orphan it selects (not being deleted, the Job
//! not being deleted) is adopted with the Job's controller reference and the tracking
//! finalizer; a pod it controls but no longer selects is released (its reference removed;
//! the finalizer then goes as for any orphan). Pods controlled by others are left alone.
//!
//! Candidates are read from the store, not the informer cache, so a pod this controller has
//! just created is always seen: the pods of the Job's namespace that its selector matches or
//! that carry its `controller-uid` label (the label every pod it makes has, which finds its
//! own pods even after their other labels changed).

use serde_json::{json, Value};

use super::pods::TRACKING_FINALIZER;
use crate::client::{Client, ClientError, PatchKind};
use crate::controllers::objects::{controller_ref, is_deleting, new_controller_ref, uid};
use crate::kube::resources::ResourceInfo;
use crate::kube::selectors::LabelSelector;

/// The label linking pods to the Job that made them.
pub const CONTROLLER_UID: &str = "batch.kubernetes.io/controller-uid";

/// The Job's pods, after adopting and releasing as described above.
pub async fn claim_pods(
    client: &Client,
    pods_info: &ResourceInfo,
    job: &Value,
    selector: &LabelSelector,
) -> Result<Vec<Value>, ClientError> {
    let namespace = job
        .pointer("/metadata/namespace")
        .and_then(Value::as_str)
        .unwrap_or("");
    let job_uid = uid(job).to_string();
    let snapshot = client.store().snapshot();
    let mut owned = Vec::new();
    for object in snapshot.range(&pods_info.store_key(), Some(namespace), None) {
        let selected = selector.matches(&object.labels);
        if !selected && object.labels.get(CONTROLLER_UID) != Some(job_uid.as_str()) {
            continue;
        }
        let pod = object.value();
        match controller_ref(&pod) {
            Some(owner) if owner.uid == job_uid => {
                if selected {
                    owned.push(pod);
                } else {
                    release(client, pods_info, namespace, &pod, &job_uid).await?;
                }
            }
            Some(_) => {}
            None => {
                if !selected || is_deleting(&pod) || is_deleting(job) {
                    continue;
                }
                if let Some(adopted) = adopt(client, pods_info, namespace, &pod, job).await? {
                    owned.push(adopted);
                }
            }
        }
    }
    Ok(owned)
}

/// Adds the controller reference and the tracking finalizer, if the pod is still the one
/// read (its uid is the patch's precondition).
async fn adopt(
    client: &Client,
    pods_info: &ResourceInfo,
    namespace: &str,
    pod: &Value,
    job: &Value,
) -> Result<Option<Value>, ClientError> {
    let patch = json!({"metadata": {
        "ownerReferences": [new_controller_ref(job, "batch/v1", "Job")],
        "finalizers": [TRACKING_FINALIZER],
        "uid": uid(pod),
    }});
    let name = crate::controllers::objects::name(pod);
    match client
        .patch(
            pods_info,
            namespace,
            name,
            None,
            PatchKind::Strategic,
            &patch,
        )
        .await
    {
        Ok(adopted) => Ok(Some(adopted)),
        // Gone or replaced meanwhile: nothing to adopt.
        Err(e) if e.is_not_found() || e.code() == 409 || e.code() == 422 => Ok(None),
        Err(e) => Err(e),
    }
}

/// Removes the Job's reference from a pod it no longer selects.
async fn release(
    client: &Client,
    pods_info: &ResourceInfo,
    namespace: &str,
    pod: &Value,
    job_uid: &str,
) -> Result<(), ClientError> {
    let patch = json!({"metadata": {
        "ownerReferences": [{"$patch": "delete", "uid": job_uid}],
        "uid": uid(pod),
    }});
    let name = crate::controllers::objects::name(pod);
    match client
        .patch(
            pods_info,
            namespace,
            name,
            None,
            PatchKind::Strategic,
            &patch,
        )
        .await
    {
        Ok(_) => Ok(()),
        Err(e) if e.is_not_found() || e.code() == 409 || e.code() == 422 => Ok(()),
        Err(e) => Err(e),
    }
}
