//! POST `/api/v1/namespaces/NS/pods/NAME/eviction`: a delete that respects the pod's
//! PodDisruptionBudget, as kube-apiserver's EvictionREST (what `kubectl drain` uses).
//!
//! - A pod that is not running yet (Pending), already finished (Succeeded, Failed) or being
//!   deleted is deleted without a budget check.
//! - A pod selected by more than one budget: 500 (upstream does not support it either).
//! - With one budget: refused with 429 (reason `TooManyRequests`, cause `DisruptionBudget`)
//!   while the budget's status is not current (`observedGeneration` behind) or allows no
//!   disruption; otherwise the budget's `disruptionsAllowed` is decremented and the pod
//!   recorded in `status.disruptedPods` (so concurrent evictions cannot both use the last
//!   allowance: the budget write is conditional on its resourceVersion and retried), then the
//!   pod is deleted with the eviction's DeleteOptions. A pod that is not Ready is evicted
//!   without using the allowance when the budget is already met (`unhealthyPodEvictionPolicy`
//!   IfHealthyBudget, the default) or always (`AlwaysAllow`).
//! - Success is a 201 `Status` with `status: Success`.

use chrono::Utc;
use http::{Response, StatusCode};
use serde_json::{json, Map, Value};

use crate::api::request::ApiRequest;
use crate::api::status::ApiError;
use crate::api::write::{self, DeleteOptions};
use crate::api::{meta, response, ApiBody};
use crate::kube::mutation::{ApplyError, Mutation, Precondition};
use crate::kube::object::{ObjectKey, ObjectRef};
use crate::kube::selectors::LabelSelector;
use crate::kube::writer::WriteError;

/// Attempts at the budget's conditional update before answering 409.
const BUDGET_ATTEMPTS: usize = 8;
const VIOLATION: &str = "Cannot evict pod as it would violate the pod's disruption budget.";

pub async fn post(req: &ApiRequest) -> Result<Response<ApiBody>, ApiError> {
    let name = req.name().to_string();
    let eviction = write::decode(req)?;
    if let Some(kind) = meta::str_at(&eviction, "/kind").filter(|k| *k != "Eviction") {
        return Err(ApiError::BadRequest(format!(
            "the body of an eviction must be an Eviction, not {kind}"
        )));
    }
    let options =
        DeleteOptions::from_body(req, eviction.get("deleteOptions").unwrap_or(&json!({})))?;
    let namespace = req.target.namespace.clone().unwrap_or_default();
    let pod = req
        .ctx
        .store
        .get(&ObjectKey::new("pods", namespace.clone(), name.clone()))
        .ok_or_else(|| ApiError::not_found(req.info(), &name))?;
    let pod_value = pod.value();
    if !budget_applies(&pod_value) {
        return evict(req, &name, &options, &pod).await;
    }
    for _ in 0..BUDGET_ATTEMPTS {
        let budgets = matching_budgets(req, &namespace, &pod);
        let budget = match budgets.as_slice() {
            [] => return evict(req, &name, &options, &pod).await,
            [one] => one.clone(),
            _ => {
                return Err(ApiError::Internal(
                    "This pod has more than one PodDisruptionBudget, which the eviction subresource does not support.".into(),
                ))
            }
        };
        let mut pdb = budget.value();
        let pdb_name = budget.key.name.clone();
        let observed = pdb
            .pointer("/status/observedGeneration")
            .and_then(Value::as_i64)
            .unwrap_or(0);
        let generation = pdb
            .pointer("/metadata/generation")
            .and_then(Value::as_i64)
            .unwrap_or(0);
        if observed < generation {
            return Err(refused(format!(
                "The disruption budget {pdb_name} is still being processed by the server."
            )));
        }
        let status_int = |field: &str| {
            pdb.pointer(&format!("/status/{field}"))
                .and_then(Value::as_i64)
                .unwrap_or(0)
        };
        let (allowed, healthy, desired) = (
            status_int("disruptionsAllowed"),
            status_int("currentHealthy"),
            status_int("desiredHealthy"),
        );
        if !pod_ready(&pod_value) {
            let always = pdb
                .pointer("/spec/unhealthyPodEvictionPolicy")
                .and_then(Value::as_str)
                == Some("AlwaysAllow");
            if always || healthy >= desired {
                return evict(req, &name, &options, &pod).await;
            }
        }
        if allowed <= 0 {
            return Err(refused(format!(
                "The disruption budget {pdb_name} needs {desired} healthy pods and has {healthy} currently"
            )));
        }
        if options.dry_run {
            return evict(req, &name, &options, &pod).await;
        }
        pdb["status"]["disruptionsAllowed"] = json!(allowed - 1);
        let disrupted = pdb["status"]
            .as_object_mut()
            .map(|s| s.entry("disruptedPods").or_insert_with(|| json!({})));
        if let Some(Value::Object(map)) = disrupted {
            map.insert(name.clone(), json!(meta::format_time(Utc::now())));
        }
        let written = req
            .ctx
            .writer
            .write(Mutation::Update {
                key: budget.key.clone(),
                object: pdb,
                precondition: Precondition::at(budget.resource_version),
            })
            .await;
        match written {
            Ok(_) => return evict(req, &name, &options, &pod).await,
            // Another eviction or the controller updated the budget: read it again.
            Err(WriteError::Rejected(ApplyError::Conflict { .. })) => continue,
            Err(e) => return Err(ApiError::from_write(req.info(), e)),
        }
    }
    Err(ApiError::conflict_modified(req.info(), &name))
}

/// Whether the pod's budget is consulted: not for pods that are not running yet, finished,
/// or already being deleted (upstream `canIgnorePDB`).
fn budget_applies(pod: &Value) -> bool {
    let phase = meta::str_at(pod, "/status/phase").unwrap_or("Pending");
    !meta::is_deleting(pod) && !matches!(phase, "Pending" | "Succeeded" | "Failed")
}

fn pod_ready(pod: &Value) -> bool {
    pod.pointer("/status/conditions")
        .and_then(Value::as_array)
        .is_some_and(|c| {
            c.iter()
                .any(|c| c["type"] == "Ready" && c["status"] == "True")
        })
}

/// The budgets of the pod's namespace whose selector selects it.
fn matching_budgets(req: &ApiRequest, namespace: &str, pod: &ObjectRef) -> Vec<ObjectRef> {
    req.ctx
        .store
        .snapshot()
        .range("policy/poddisruptionbudgets", Some(namespace), None)
        .filter(|pdb| {
            selector(&pdb.value()).is_some_and(|s| !s.is_empty() && s.matches(&pod.labels))
        })
        .cloned()
        .collect()
}

/// A budget's `spec.selector`; an empty or missing one matches no pod, as upstream's policy/v1
/// eviction treats it.
fn selector(pdb: &Value) -> Option<LabelSelector> {
    LabelSelector::from_object(pdb.pointer("/spec/selector"))
        .ok()
        .flatten()
}

fn refused(cause: String) -> ApiError {
    ApiError::TooManyRequests {
        message: VIOLATION.to_string(),
        causes: vec![("DisruptionBudget".to_string(), cause)],
    }
}

/// Deletes the evicted pod (its uid as a precondition unless the eviction gave its own) and
/// answers 201 with a success Status.
async fn evict(
    req: &ApiRequest,
    name: &str,
    options: &DeleteOptions,
    pod: &ObjectRef,
) -> Result<Response<ApiBody>, ApiError> {
    let mut options = options.clone();
    options.uid.get_or_insert_with(|| pod.uid.clone());
    write::delete(req, name, &options).await?;
    let mut status = Map::new();
    status.insert("kind".into(), json!("Status"));
    status.insert("apiVersion".into(), json!("v1"));
    status.insert("metadata".into(), json!({}));
    status.insert("status".into(), json!("Success"));
    status.insert("code".into(), json!(201));
    Ok(response::json_value(
        StatusCode::CREATED,
        &Value::Object(status),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kube::labels::Labels;

    fn labels(pairs: &[(&str, &str)]) -> Labels {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn budgets_apply_to_running_pods_only() {
        assert!(budget_applies(&json!({"status": {"phase": "Running"}})));
        assert!(!budget_applies(&json!({"status": {"phase": "Pending"}})));
        assert!(!budget_applies(&json!({})));
        assert!(!budget_applies(&json!({"status": {"phase": "Succeeded"}})));
        assert!(!budget_applies(
            &json!({"metadata": {"deletionTimestamp": "2026-01-01T00:00:00Z"}, "status": {"phase": "Running"}})
        ));
    }

    #[test]
    fn budget_selectors() {
        let s = selector(&json!({"spec": {"selector": {"matchLabels": {"app": "db"}}}})).unwrap();
        assert!(s.matches(&labels(&[("app", "db")])));
        assert!(!s.matches(&labels(&[("app", "web")])));
        assert!(selector(&json!({"spec": {}})).is_none());
    }
}
