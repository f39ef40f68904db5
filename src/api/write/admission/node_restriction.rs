//! NodeRestriction admission: what a node credential (`system:node:<name>`) may write, as
//! kube-apiserver's NodeRestriction plugin words its refusals (the Node authorizer,
//! `auth::node`, already keeps it from objects its pods do not use):
//!
//! - its own Node only (created, updated, its status, deleted);
//! - its own Lease in `kube-node-lease` only;
//! - pods: only mirror pods bound to itself are created; only the status of pods bound to it
//!   is updated; only pods bound to it are deleted or evicted.

use serde_json::Value;

use super::Operation;
use crate::api::request::ApiRequest;
use crate::api::status::{ApiError, Gr};
use crate::auth::node::node_name;

const MIRROR_ANNOTATION: &str = "kubernetes.io/config.mirror";
const NODE_LEASE_NAMESPACE: &str = "kube-node-lease";

pub fn admit(req: &ApiRequest, operation: &mut Operation<'_>) -> Result<(), ApiError> {
    let Some(node) = node_name(&req.user) else {
        return Ok(());
    };
    let info = req.info();
    let name = match operation {
        Operation::Create { object } => object
            .pointer("/metadata/name")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string(),
        _ => req.name().to_string(),
    };
    let forbidden = |detail: String| ApiError::Denied {
        gr: Gr::of(info),
        name: name.clone(),
        detail,
    };
    let bound_here =
        |object: &Value| object.pointer("/spec/nodeName").and_then(Value::as_str) == Some(node);
    let namespace = req.target.namespace.as_deref().unwrap_or_default();
    match (info.group, info.plural) {
        ("", "nodes") if name != node => Err(forbidden(format!(
            "node {node:?} is not allowed to modify node {name:?}"
        ))),
        ("coordination.k8s.io", "leases") if namespace == NODE_LEASE_NAMESPACE && name != node => {
            Err(forbidden(
                "can only access node lease with the same name as the requesting node".into(),
            ))
        }
        ("", "pods") => {
            let subresource = req.target.subresource.as_deref().unwrap_or_default();
            match operation {
                Operation::Create { object } => {
                    let mirror = object
                        .pointer("/metadata/annotations")
                        .and_then(|a| a.get(MIRROR_ANNOTATION))
                        .is_some();
                    if !mirror {
                        Err(forbidden(format!(
                            "pod does not have {MIRROR_ANNOTATION:?} annotation, node {node:?} can only create mirror pods"
                        )))
                    } else if !bound_here(object) {
                        Err(forbidden(format!(
                            "node {node:?} can only create pods with spec.nodeName set to itself"
                        )))
                    } else {
                        Ok(())
                    }
                }
                Operation::Update { current, .. } if !bound_here(&current.value()) => {
                    let what = if subresource == "status" {
                        "update pod status for"
                    } else {
                        "update"
                    };
                    Err(forbidden(format!(
                        "node {node:?} can only {what} pods with spec.nodeName set to itself"
                    )))
                }
                Operation::Delete { current } if !bound_here(&current.value()) => {
                    let what = if subresource == "eviction" {
                        "evict"
                    } else {
                        "delete"
                    };
                    Err(forbidden(format!(
                        "node {node:?} can only {what} pods with spec.nodeName set to itself"
                    )))
                }
                _ => Ok(()),
            }
        }
        _ => Ok(()),
    }
}
