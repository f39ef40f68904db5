//! The lifecycle of namespaces: creates are refused in a namespace that is missing or
//! terminating; DELETE marks a namespace Terminating (deletionTimestamp and status.phase, never
//! for `default`, `kube-system` and `kube-public`), then a spawned purge task deletes everything
//! in it, waits for the finalizers of its contents to clear, and finally removes the namespace.

use std::sync::Arc;
use std::time::Duration;

use serde_json::{json, Value};

use super::request::ApiRequest;
use super::status::{ApiError, Gr};
use super::{meta, ApiContext};
use crate::kube::mutation::{Mutation, Precondition};
use crate::kube::object::{ObjectKey, ObjectRef};
use crate::kube::resources::{self, ResourceInfo};

pub fn is_namespace(info: &ResourceInfo) -> bool {
    info.group.is_empty() && info.plural == "namespaces"
}

/// How long the purge task waits for a change before looking again.
const PURGE_POLL: Duration = Duration::from_secs(2);

/// Namespaces that may not be deleted, as kube-apiserver's NamespaceLifecycle admission has
/// them (`kube-node-lease` is not one: deleted, the leader's bootstrap recreates it).
const IMMORTAL: [&str; 3] = ["default", "kube-system", "kube-public"];

/// Fails unless `namespace` exists and is not terminating (a create of `name` in it is
/// refused otherwise, as kube-apiserver's NamespaceLifecycle admission refuses it).
pub fn check_open(req: &ApiRequest, namespace: &str, name: &str) -> Result<(), ApiError> {
    let ns_info = crate::kube::resources::find("", "v1", "namespaces")
        .ok_or_else(|| ApiError::Internal("namespaces are not registered".into()))?;
    let ns = req
        .ctx
        .store
        .get(&ObjectKey::new("namespaces", "", namespace))
        .ok_or_else(|| ApiError::not_found(ns_info, namespace))?;
    if ns.is_deleting() {
        return Err(ApiError::Forbidden(format!(
            "{} \"{name}\" is forbidden: unable to create new content in namespace {namespace} because it is being terminated",
            req.info().qualified_plural()
        )));
    }
    Ok(())
}

/// The deletion mark of namespace `current`: Terminating, with a deletionTimestamp. Refused
/// for the namespaces that may not be deleted and for one already terminating.
pub fn deletion_mark(info: &ResourceInfo, current: &ObjectRef) -> Result<Value, ApiError> {
    let name = &current.key.name;
    if IMMORTAL.contains(&name.as_str()) {
        return Err(ApiError::Forbidden(format!(
            "namespaces \"{name}\" is forbidden: this namespace may not be deleted"
        )));
    }
    let mut value = current.value();
    if meta::is_deleting(&value) {
        return Err(ApiError::Conflict {
            gr: Gr::of(info),
            name: current.key.name.clone(),
            detail: "The system is ensuring all content is removed from this namespace.  Upon completion, this namespace will automatically be purged by the system.".into(),
        });
    }
    let md = meta::metadata_mut(&mut value);
    md.insert("deletionTimestamp".into(), json!(meta::now_rfc3339()));
    md.insert("deletionGracePeriodSeconds".into(), json!(0));
    meta::set_path(&mut value, &["status", "phase"], json!("Terminating"));
    Ok(value)
}

/// Starts the purge of namespace `marked`, which its deletion mark has just been stored in.
pub fn start_purge(ctx: &Arc<ApiContext>, marked: &ObjectRef) {
    let ctx = ctx.clone();
    let (name, uid) = (marked.key.name.clone(), marked.uid.clone());
    tokio::spawn(async move { purge(ctx, name, uid).await });
}

/// Deletes the contents of namespace `name` (uid `uid`), then the namespace.
async fn purge(ctx: Arc<ApiContext>, name: String, uid: String) {
    let ns_key = ObjectKey::new("namespaces", "", name.clone());
    let mut versions = ctx.store.applied_versions();
    loop {
        match ctx.store.get(&ns_key) {
            Some(ns) if ns.uid == uid => {}
            _ => return,
        }
        let remaining = purge_pass(&ctx, &name).await;
        if remaining == 0 {
            finish(&ctx, &ns_key, &uid).await;
            return;
        }
        // Objects with finalizers remain: look again after the next change (or a while).
        let _ = tokio::time::timeout(PURGE_POLL, versions.changed()).await;
    }
}

/// One pass over every namespaced kind; returns how many objects are still there.
async fn purge_pass(ctx: &ApiContext, namespace: &str) -> usize {
    let snapshot = ctx.store.snapshot();
    let mut remaining = 0;
    for info in resources::RESOURCES.iter().filter(|r| r.namespaced) {
        let objects: Vec<ObjectRef> = snapshot
            .range(&info.store_key(), Some(namespace), None)
            .cloned()
            .collect();
        for object in objects {
            remaining += 1;
            let mut value = object.value();
            let mutation = if meta::finalizers(&value).is_empty() {
                Mutation::Delete {
                    key: object.key.clone(),
                    precondition: Precondition::at(object.resource_version),
                }
            } else if meta::is_deleting(&value) {
                continue;
            } else {
                let md = meta::metadata_mut(&mut value);
                md.insert("deletionTimestamp".into(), json!(meta::now_rfc3339()));
                md.insert("deletionGracePeriodSeconds".into(), json!(0));
                Mutation::Update {
                    key: object.key.clone(),
                    object: value,
                    precondition: Precondition::at(object.resource_version),
                }
            };
            if let Err(e) = ctx.writer.write(mutation).await {
                tracing::debug!(key = %object.key, error = %e, "namespace purge: write lost a race");
            }
        }
    }
    remaining
}

/// Clears the namespace's finalizers and removes it.
async fn finish(ctx: &ApiContext, key: &ObjectKey, uid: &str) {
    let Some(ns) = ctx.store.get(key) else { return };
    let mut value = ns.value();
    if let Some(spec) = value.get_mut("spec").and_then(Value::as_object_mut) {
        spec.insert("finalizers".into(), json!([]));
    }
    let cleared = ctx
        .writer
        .write(Mutation::Update {
            key: key.clone(),
            object: value,
            precondition: Precondition {
                resource_version: Some(ns.resource_version),
                uid: Some(uid.to_string()),
            },
        })
        .await;
    let Ok(cleared) = cleared else { return };
    if meta::finalizers(&cleared.value()).is_empty() {
        let deleted = ctx
            .writer
            .write(Mutation::Delete {
                key: key.clone(),
                precondition: Precondition {
                    resource_version: Some(cleared.resource_version),
                    uid: Some(uid.to_string()),
                },
            })
            .await;
        if let Err(e) = deleted {
            tracing::warn!(namespace = %key.name, error = %e, "namespace purge: final delete failed");
        }
    }
}
