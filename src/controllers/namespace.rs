//! The namespace controller (kube-controller-manager's `namespace-controller`): a namespace
//! being deleted is emptied (every namespaced kind deleted with a deletecollection, background
//! propagation, as upstream's deleter), its status conditions say what is left, and once
//! nothing is, `kubernetes` is removed from its `spec.finalizers` through the `finalize`
//! subresource, after which the API removes the namespace (when no other finalizer is left).
//!
//! Conditions, with upstream's types, reasons and messages: `NamespaceDeletionDiscoveryFailure`,
//! `NamespaceDeletionGroupVersionParsingFailure`, `NamespaceDeletionContentFailure`,
//! `NamespaceContentRemaining` ("Some resources are remaining: pods. has 2 resource
//! instances") and `NamespaceFinalizersRemaining` ("Some content in the namespace has
//! finalizers remaining: example.com/hold in 1 resource instances"). While content remains
//! (pods in their grace period, objects held by finalizers) the namespace is looked at again
//! every second.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use chrono::Utc;
use http::Method;
use serde_json::{json, Value};

use super::informer::{Change, Informers, InformersBuilder};
use super::objects::is_deleting;
use super::queue::WorkQueue;
use super::worker::{Controller, Outcome, ReconcileError};
use super::Shared;
use crate::api::meta::format_time;
use crate::client::{collection_path, Client};
use crate::kube::resources::{self, ResourceInfo};

/// The finalizer this controller owns.
const FINALIZER: &str = "kubernetes";
/// How soon a namespace with content left is looked at again.
const RECHECK: Duration = Duration::from_secs(1);

pub struct Namespaces {
    client: Client,
}

fn namespaces() -> &'static ResourceInfo {
    resources::find("", "v1", "namespaces")
        .unwrap_or_else(|| panic!("built-in kind namespaces is not registered"))
}

impl Controller for Namespaces {
    /// The namespace's name.
    type Key = String;
    const NAME: &'static str = "namespace-controller";
    const WORKERS: usize = 2;

    fn register(builder: &mut InformersBuilder, queue: &WorkQueue<String>) {
        let q = queue.clone();
        builder.on_change(
            "namespaces",
            Arc::new(move |change: Change<'_>| {
                let ns = change.object();
                if !matches!(change, Change::Deleted(_)) && ns.is_deleting() {
                    q.add(ns.key.name.clone());
                }
            }),
        );
    }

    fn new(shared: &Shared, _informers: &Arc<Informers>, _queue: WorkQueue<String>) -> Self {
        Namespaces {
            client: shared.controller_manager.clone(),
        }
    }

    async fn reconcile(&self, name: &String) -> Result<Outcome, ReconcileError> {
        let Some(stored) = self.client.get(namespaces(), "", name) else {
            return Ok(Outcome::Done);
        };
        let mut ns = stored.value();
        let ours = spec_finalizers(&ns).iter().any(|f| f == FINALIZER);
        if !is_deleting(&ns) || !ours {
            return Ok(Outcome::Done);
        }
        // Delete what is there, kind by kind.
        let mut failures = Vec::new();
        for info in namespaced_kinds() {
            let present = self
                .client
                .store()
                .snapshot()
                .range(&info.store_key(), Some(name), None)
                .any(|o| !o.is_deleting());
            if !present {
                continue;
            }
            let path = format!(
                "{}?propagationPolicy=Background",
                collection_path(info, name)
            );
            if let Err(e) = self
                .client
                .send(Method::DELETE, &path, "application/json", Bytes::new())
                .await
            {
                failures.push(format!("{}: {e}", qualified(info)));
            }
        }
        // What is left, and what holds it.
        let snapshot = self.client.store().snapshot();
        let mut remaining: BTreeMap<String, usize> = BTreeMap::new();
        let mut finalizers: BTreeMap<String, usize> = BTreeMap::new();
        for info in namespaced_kinds() {
            for object in snapshot.range(&info.store_key(), Some(name), None) {
                *remaining.entry(qualified(info)).or_default() += 1;
                if object.is_deleting() {
                    for f in super::objects::finalizers_of(&object.value()) {
                        *finalizers.entry(f).or_default() += 1;
                    }
                }
            }
        }
        let now = format_time(Utc::now());
        let conditions = conditions(&failures, &remaining, &finalizers, &ns, &now);
        if ns.pointer("/status/conditions") != Some(&conditions) {
            ns["status"]["conditions"] = conditions;
            ns["status"]["phase"] = json!("Terminating");
            match self.client.update_status(namespaces(), "", name, &ns).await {
                Ok(updated) => ns = updated,
                // Another writer changed it: the next pass sees its version.
                Err(e) if e.is_conflict() => return Ok(Outcome::RequeueAfter(RECHECK)),
                Err(e) => return Err(e.into()),
            }
        }
        if !remaining.is_empty() || !failures.is_empty() {
            return Ok(Outcome::RequeueAfter(RECHECK));
        }
        // Empty: let the namespace go.
        let mut finalized = ns.clone();
        finalized["spec"]["finalizers"] = Value::Array(
            spec_finalizers(&ns)
                .into_iter()
                .filter(|f| f != FINALIZER)
                .map(Value::String)
                .collect(),
        );
        let path = format!("/api/v1/namespaces/{name}/finalize");
        let body = Bytes::from(serde_json::to_vec(&finalized).unwrap_or_default());
        match self
            .client
            .send(Method::PUT, &path, "application/json", body)
            .await
        {
            Ok(_) => {
                tracing::info!(component = "controllers", namespace = %name, "namespace emptied and finalized");
                Ok(Outcome::Done)
            }
            Err(e) if e.is_not_found() => Ok(Outcome::Done),
            Err(e) if e.is_conflict() => Ok(Outcome::RequeueAfter(RECHECK)),
            Err(e) => Err(e.into()),
        }
    }
}

/// Every namespaced kind the API serves.
fn namespaced_kinds() -> impl Iterator<Item = &'static ResourceInfo> {
    resources::RESOURCES.iter().filter(|r| r.namespaced)
}

/// `pods.` or `deployments.apps`, as upstream's messages name resources.
fn qualified(info: &ResourceInfo) -> String {
    format!("{}.{}", info.plural, info.group)
}

fn spec_finalizers(ns: &Value) -> Vec<String> {
    ns.pointer("/spec/finalizers")
        .and_then(Value::as_array)
        .map(|f| {
            f.iter()
                .filter_map(|v| v.as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default()
}

/// The namespace's deletion conditions, keeping each one's transition time while its status
/// stays the same.
fn conditions(
    failures: &[String],
    remaining: &BTreeMap<String, usize>,
    finalizers: &BTreeMap<String, usize>,
    ns: &Value,
    now: &str,
) -> Value {
    let counts = |m: &BTreeMap<String, usize>| {
        m.iter()
            .map(|(what, n)| format!("{what} has {n} resource instances"))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let finalizer_counts = finalizers
        .iter()
        .map(|(f, n)| format!("{f} in {n} resource instances"))
        .collect::<Vec<_>>()
        .join(", ");
    let wanted = [
        (
            "NamespaceDeletionDiscoveryFailure",
            false,
            "ResourcesDiscovered",
            "All resources successfully discovered".to_string(),
        ),
        (
            "NamespaceDeletionGroupVersionParsingFailure",
            false,
            "ParsedGroupVersions",
            "All legacy kube types successfully parsed".to_string(),
        ),
        if failures.is_empty() {
            (
                "NamespaceDeletionContentFailure",
                false,
                "ContentDeleted",
                "All content successfully deleted, may be waiting on finalization".to_string(),
            )
        } else {
            (
                "NamespaceDeletionContentFailure",
                true,
                "ContentDeletionFailed",
                format!(
                    "Failed to delete all resource types, {} remaining: {}",
                    failures.len(),
                    failures.join(", ")
                ),
            )
        },
        if remaining.is_empty() {
            (
                "NamespaceContentRemaining",
                false,
                "ContentRemoved",
                "All content successfully removed".to_string(),
            )
        } else {
            (
                "NamespaceContentRemaining",
                true,
                "SomeResourcesRemain",
                format!("Some resources are remaining: {}", counts(remaining)),
            )
        },
        if finalizers.is_empty() {
            (
                "NamespaceFinalizersRemaining",
                false,
                "ContentHasNoFinalizers",
                "All content-preserving finalizers finished".to_string(),
            )
        } else {
            (
                "NamespaceFinalizersRemaining",
                true,
                "SomeFinalizersRemain",
                format!(
                    "Some content in the namespace has finalizers remaining: {finalizer_counts}"
                ),
            )
        },
    ];
    let old: Vec<Value> = ns
        .pointer("/status/conditions")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    Value::Array(
        wanted
            .into_iter()
            .map(|(kind, status, reason, message)| {
                let status = if status { "True" } else { "False" };
                let previous = old.iter().find(|c| c["type"] == kind);
                let since = match previous {
                    Some(c) if c["status"] == status => c["lastTransitionTime"].clone(),
                    _ => json!(now),
                };
                json!({
                    "type": kind,
                    "status": status,
                    "reason": reason,
                    "message": message,
                    "lastTransitionTime": since,
                })
            })
            .collect(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn condition_messages_match_upstream() {
        let remaining = BTreeMap::from([
            ("pods.".to_string(), 2),
            ("deployments.apps".to_string(), 1),
        ]);
        let finalizers = BTreeMap::from([("example.com/hold".to_string(), 1)]);
        let c = conditions(
            &[],
            &remaining,
            &finalizers,
            &json!({}),
            "2026-01-01T00:00:00Z",
        );
        let find = |kind: &str| {
            c.as_array()
                .unwrap()
                .iter()
                .find(|x| x["type"] == kind)
                .unwrap()
                .clone()
        };
        assert_eq!(
            find("NamespaceContentRemaining")["message"],
            "Some resources are remaining: deployments.apps has 1 resource instances, pods. has 2 resource instances"
        );
        assert_eq!(
            find("NamespaceFinalizersRemaining")["message"],
            "Some content in the namespace has finalizers remaining: example.com/hold in 1 resource instances"
        );
        assert_eq!(find("NamespaceDeletionContentFailure")["status"], "False");
        // The transition time stays while the status does.
        let later = conditions(
            &[],
            &remaining,
            &finalizers,
            &json!({"status": {"conditions": c}}),
            "2026-01-01T00:05:00Z",
        );
        let find_later = |kind: &str| {
            later
                .as_array()
                .unwrap()
                .iter()
                .find(|x| x["type"] == kind)
                .unwrap()
                .clone()
        };
        assert_eq!(
            find_later("NamespaceContentRemaining")["lastTransitionTime"],
            "2026-01-01T00:00:00Z"
        );
    }
}
