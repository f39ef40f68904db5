//! The node's heartbeat: `kube-node-lease/<node>`, held by the node, renewed every quarter of
//! its duration (10 s of 40 s), as kubelet's lease controller does. The node lifecycle
//! controller marks a node whose Lease stops moving Unknown after its grace period, so a
//! renewal that fails (a server went away mid-request, the cluster is electing a leader) is
//! retried at once on the next server and then after 200 ms, doubling up to 7 s, never
//! waiting for the next period.
//!
//! The Lease is written with PUT from the copy the last write returned (one request per
//! renewal); a conflict reads it again. Its owner is the Node (once the Node's uid is known),
//! so deleting the Node deletes its Lease.

use std::time::Duration;

use chrono::Utc;
use serde_json::{json, Value};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use crate::agent::api::{ApiClient, ApiError};
use crate::api::lease::format_micro;
use crate::systemd::watchdog::Heartbeat;

/// The namespace of node Leases.
pub const NAMESPACE: &str = "kube-node-lease";
const FIRST_RETRY: Duration = Duration::from_millis(200);
const MAX_RETRY: Duration = Duration::from_secs(7);

fn path(name: Option<&str>) -> String {
    match name {
        Some(name) => format!("/apis/coordination.k8s.io/v1/namespaces/{NAMESPACE}/leases/{name}"),
        None => format!("/apis/coordination.k8s.io/v1/namespaces/{NAMESPACE}/leases"),
    }
}

/// What the renewals share between rounds.
pub struct LeaseRenewer {
    api: ApiClient,
    node: String,
    duration: Duration,
    /// The Lease as the last write returned it.
    cached: Option<Value>,
}

impl LeaseRenewer {
    pub fn new(api: ApiClient, node: String, duration: Duration) -> LeaseRenewer {
        LeaseRenewer {
            api,
            node,
            duration,
            cached: None,
        }
    }

    /// How often the Lease is renewed.
    pub fn interval(&self) -> Duration {
        (self.duration / 4).max(Duration::from_millis(250))
    }

    fn owner(&self, node_uid: Option<&str>) -> Value {
        match node_uid {
            Some(uid) => {
                json!([{"apiVersion": "v1", "kind": "Node", "name": self.node, "uid": uid}])
            }
            None => Value::Null,
        }
    }

    /// Renews (or creates) the Lease once; returns its renewTime.
    pub async fn renew(&mut self, node_uid: Option<&str>) -> Result<String, ApiError> {
        let now = format_micro(Utc::now());
        let mut lease = match self.cached.take() {
            Some(lease) => lease,
            None => match self.api.get(&path(Some(&self.node))).await? {
                Some(lease) => lease,
                None => {
                    let mut lease = json!({
                        "apiVersion": "coordination.k8s.io/v1",
                        "kind": "Lease",
                        "metadata": {"name": self.node, "namespace": NAMESPACE},
                        "spec": {
                            "holderIdentity": self.node,
                            "leaseDurationSeconds": self.duration.as_secs().max(1),
                            "renewTime": now,
                        },
                    });
                    if node_uid.is_some() {
                        lease["metadata"]["ownerReferences"] = self.owner(node_uid);
                    }
                    let created = self.api.create(&path(None), &lease).await?;
                    self.cached = Some(created);
                    return Ok(now);
                }
            },
        };
        lease["spec"]["holderIdentity"] = json!(self.node);
        lease["spec"]["leaseDurationSeconds"] = json!(self.duration.as_secs().max(1));
        lease["spec"]["renewTime"] = json!(now);
        if node_uid.is_some() && lease["metadata"]["ownerReferences"].is_null() {
            lease["metadata"]["ownerReferences"] = self.owner(node_uid);
        }
        // On any failure nothing is cached: the next attempt reads the Lease again (someone
        // else wrote it, it was deleted, or the write's outcome is unknown).
        let updated = self.api.update(&path(Some(&self.node)), &lease).await?;
        self.cached = Some(updated);
        Ok(now)
    }

    /// Renews until `stop`: every interval, and after a failure again after 200 ms doubling
    /// up to 7 s (bounded by the interval). Every attempt, whatever its outcome, beats
    /// `heartbeat` (the systemd watchdog's proof that the loop runs).
    pub async fn run(
        mut self,
        node_uid: watch::Receiver<Option<String>>,
        heartbeat: Heartbeat,
        stop: CancellationToken,
    ) {
        let interval = self.interval();
        let mut retry = FIRST_RETRY;
        let mut failing_since: Option<tokio::time::Instant> = None;
        loop {
            let uid = node_uid.borrow().clone();
            let attempt = self.renew(uid.as_deref()).await;
            heartbeat.beat();
            let wait = match attempt {
                Ok(_) => {
                    if let Some(since) = failing_since.take() {
                        tracing::info!(
                            component = "lease",
                            "node Lease renewed again after {:.1} s of failures",
                            since.elapsed().as_secs_f64()
                        );
                    }
                    retry = FIRST_RETRY;
                    interval
                }
                Err(e) => {
                    failing_since.get_or_insert_with(tokio::time::Instant::now);
                    tracing::warn!(component = "lease", "renewing the node Lease: {e}");
                    let wait = retry.min(interval);
                    retry = (retry * 2).min(MAX_RETRY);
                    wait
                }
            };
            tokio::select! {
                _ = stop.cancelled() => return,
                _ = tokio::time::sleep(wait) => {}
            }
        }
    }
}
