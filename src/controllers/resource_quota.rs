//! The resource quota controller (kube-controller-manager's `resourcequota`): every
//! ResourceQuota's `status.hard` follows its `spec.hard`, and `status.used` is recomputed from
//! the stored objects of its namespace (`api::write::admission::resource_quota::usage`).
//!
//! The ResourceQuota admission plugin adds what each admitted write uses; this controller is
//! what takes usage back down: a namespace's quotas are recomputed when one of them is created
//! or its `spec.hard` changes, when a counted object is deleted or a pod ends, and every
//! [`RESYNC`] for the kinds counted by name only (`count/<resource>.<group>`).

use std::sync::Arc;
use std::time::Duration;

use serde_json::{json, Value};

use super::informer::{Change, Informers, InformersBuilder, KindCache};
use super::queue::WorkQueue;
use super::worker::{Controller, Outcome, ReconcileError};
use super::Shared;
use crate::api::write::admission::pod_resources;
use crate::api::write::admission::resource_quota::{as_list, usage};
use crate::client::Client;
use crate::kube::resources::{self, ResourceInfo};

/// How often every quota is recomputed even without a change (upstream's default
/// `--resource-quota-sync-period`).
const RESYNC: Duration = Duration::from_secs(300);

/// The kinds whose deletion frees quota right away.
const WATCHED: [&str; 6] = [
    "pods",
    "services",
    "configmaps",
    "secrets",
    "persistentvolumeclaims",
    "replicationcontrollers",
];

pub struct ResourceQuotas {
    client: Client,
    quotas: Arc<KindCache>,
}

fn quota_info() -> &'static ResourceInfo {
    resources::find("", "v1", "resourcequotas")
        .unwrap_or_else(|| panic!("built-in kind resourcequotas is not registered"))
}

fn ended(pod: &Value) -> bool {
    matches!(
        pod.pointer("/status/phase").and_then(Value::as_str),
        Some("Succeeded" | "Failed")
    )
}

impl Controller for ResourceQuotas {
    /// A namespace: all of its quotas are recomputed together.
    type Key = String;
    const NAME: &'static str = "resourcequota";
    const WORKERS: usize = 2;

    fn register(builder: &mut InformersBuilder, queue: &WorkQueue<String>) {
        let q = queue.clone();
        builder.on_change_with_resync(
            "resourcequotas",
            RESYNC,
            Arc::new(move |change: Change<'_>| {
                if matches!(change, Change::Deleted(_)) {
                    return;
                }
                let quota = change.object().value();
                let synced = quota.pointer("/status/hard").is_some()
                    && quota
                        .pointer("/spec/hard")
                        .map(|h| as_list(&pod_resources::read(h, ""), &pod_resources::read(h, "")))
                        == quota.pointer("/status/hard").cloned();
                if !synced || matches!(change, Change::Resync(_)) {
                    q.add(change.object().key.namespace.clone());
                }
            }),
        );
        for kind in WATCHED {
            let q = queue.clone();
            builder.on_change(
                kind,
                Arc::new(move |change: Change<'_>| {
                    let frees = match change {
                        Change::Deleted(_) => true,
                        Change::Modified { old, new } => {
                            kind == "pods" && ended(&new.value()) && !ended(&old.value())
                        }
                        _ => false,
                    };
                    if frees {
                        q.add(change.object().key.namespace.clone());
                    }
                }),
            );
        }
    }

    fn new(shared: &Shared, informers: &Arc<Informers>, _queue: WorkQueue<String>) -> Self {
        ResourceQuotas {
            client: shared.controller_manager.clone(),
            quotas: informers
                .cache("resourcequotas")
                .expect("registered in `register`"),
        }
    }

    async fn reconcile(&self, namespace: &String) -> Result<Outcome, ReconcileError> {
        for quota_ref in self.quotas.list(Some(namespace)) {
            let quota = quota_ref.value();
            let hard = pod_resources::read(&quota, "/spec/hard");
            let snapshot = self.client.store().snapshot();
            let used = usage::recompute(&snapshot, namespace, &quota);
            let status = json!({"hard": as_list(&hard, &hard), "used": as_list(&hard, &used)});
            if quota.get("status") == Some(&status) {
                continue;
            }
            let mut updated = quota.clone();
            updated["status"] = status;
            match self
                .client
                .update_status(quota_info(), namespace, &quota_ref.key.name, &updated)
                .await
            {
                Ok(_) => {}
                // Deleted meanwhile; or changed (an admitted write charged it): the change
                // brings the namespace back when there is something to do.
                Err(e) if e.is_not_found() => {}
                Err(e) if e.is_conflict() => {
                    return Ok(Outcome::RequeueAfter(Duration::from_millis(100)))
                }
                Err(e) => return Err(e.into()),
            }
        }
        Ok(Outcome::Done)
    }
}
