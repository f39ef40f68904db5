//! The lifecycle of namespaces: creates are refused in a namespace that is missing or
//! terminating; DELETE marks a namespace Terminating (deletionTimestamp and status.phase, never
//! for `default`, `kube-system` and `kube-public`). The leader's namespace controller then
//! deletes everything in it and removes `kubernetes` from its `spec.finalizers` through the
//! `finalize` subresource; once no finalizer of either list is left, the namespace is removed.

use serde_json::{json, Value};

use super::meta;
use super::request::ApiRequest;
use super::status::{ApiError, Gr};
use crate::kube::object::{ObjectKey, ObjectRef};
use crate::kube::resources::ResourceInfo;

pub fn is_namespace(info: &ResourceInfo) -> bool {
    info.group.is_empty() && info.plural == "namespaces"
}

/// Whether a namespace being deleted has nothing left to wait for: neither `spec.finalizers`
/// (the namespace controller's) nor `metadata.finalizers` (the garbage collector's, others').
pub fn finalized(namespace: &Value) -> bool {
    meta::is_deleting(namespace)
        && meta::finalizers(namespace).is_empty()
        && namespace
            .pointer("/spec/finalizers")
            .and_then(Value::as_array)
            .is_none_or(|f| f.is_empty())
}

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
