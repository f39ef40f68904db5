//! PodDisruptionBudget status (kube-controller-manager's `disruption-controller`): for each
//! budget, how many of the pods it selects are healthy, how many must stay healthy, and so how
//! many voluntary disruptions (evictions through `pods/eviction`) are allowed now.
//!
//! As upstream: `minAvailable` as a number counts the selected pods as expected; as a
//! percentage, or with `maxUnavailable`, the expected count is the scale of the pods'
//! controllers (a Deployment's replicas for pods of its ReplicaSets, a ReplicaSet's,
//! ReplicationController's or StatefulSet's own), percentages rounded up. A pod is healthy
//! when Ready and not being deleted; pods the eviction subresource recorded in
//! `status.disruptedPods` count as gone until they are deleted or 2 minutes pass.
//! `disruptionsAllowed = max(currentHealthy - desiredHealthy, 0)`, with the
//! `DisruptionAllowed` condition (`SufficientPods`, `InsufficientPods`, `SyncFailed` when a
//! controller's scale cannot be found).

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;

use chrono::Utc;
use parking_lot::RwLock;
use serde_json::{json, Map, Value};

use super::informer::{Change, Informers, InformersBuilder, KindCache, ObjectName};
use super::objects::{controller_ref, is_deleting, label_selector, parse_time, pod_is_ready};
use super::queue::WorkQueue;
use super::worker::{Controller, Outcome, ReconcileError};
use super::Shared;
use crate::api::meta::format_time;
use crate::client::Client;
use crate::kube::resources::{self, ResourceInfo};
use crate::kube::selectors::LabelSelector;

/// How long an eviction recorded in `disruptedPods` counts if the pod is not deleted.
const DISRUPTED_TIMEOUT: chrono::Duration = chrono::Duration::minutes(2);

pub struct Disruption {
    client: Client,
    pods: Arc<KindCache>,
    replica_sets: Arc<KindCache>,
    deployments: Arc<KindCache>,
    stateful_sets: Arc<KindCache>,
    replication_controllers: Arc<KindCache>,
}

fn pdbs() -> &'static ResourceInfo {
    resources::find("policy", "v1", "poddisruptionbudgets")
        .unwrap_or_else(|| panic!("built-in kind poddisruptionbudgets.policy is not registered"))
}

/// Budget selectors by namespace, then budget name (kept by the budget handler, read by the
/// pod handler, both on the informers' task).
type Selectors = HashMap<String, BTreeMap<String, LabelSelector>>;

impl Controller for Disruption {
    type Key = ObjectName;
    const NAME: &'static str = "disruption-controller";
    const WORKERS: usize = 1;

    fn register(builder: &mut InformersBuilder, queue: &WorkQueue<ObjectName>) {
        let selectors: Arc<RwLock<Selectors>> = Arc::default();
        let (q, known) = (queue.clone(), selectors.clone());
        builder.on_change(
            "policy/poddisruptionbudgets",
            Arc::new(move |change: Change<'_>| {
                let pdb = change.object();
                let name = ObjectName::of(pdb);
                let mut known = known.write();
                let in_namespace = known.entry(name.namespace.clone()).or_default();
                let selector = match change {
                    Change::Deleted(_) => None,
                    _ => label_selector(pdb.value().pointer("/spec/selector"))
                        .ok()
                        .flatten(),
                };
                match selector {
                    Some(s) => in_namespace.insert(name.name.clone(), s),
                    None => in_namespace.remove(&name.name),
                };
                if !matches!(change, Change::Deleted(_)) {
                    q.add(name);
                }
            }),
        );
        let q = queue.clone();
        builder.on_change(
            "pods",
            Arc::new(move |change: Change<'_>| {
                let pod = change.object();
                let known = selectors.read();
                let Some(budgets) = known.get(&pod.key.namespace) else {
                    return;
                };
                for (name, selector) in budgets {
                    let before = change.old().is_some_and(|o| selector.matches(&o.labels));
                    if before || selector.matches(&pod.labels) {
                        q.add(ObjectName::new(pod.key.namespace.clone(), name.clone()));
                    }
                }
            }),
        );
        for controllers in [
            "apps/replicasets",
            "apps/deployments",
            "apps/statefulsets",
            "replicationcontrollers",
        ] {
            builder.watch(controllers);
        }
    }

    fn new(shared: &Shared, informers: &Arc<Informers>, _queue: WorkQueue<ObjectName>) -> Self {
        let cache = |r: &str| informers.cache(r).expect("registered in `register`");
        Disruption {
            client: shared.controller_manager.clone(),
            pods: cache("pods"),
            replica_sets: cache("apps/replicasets"),
            deployments: cache("apps/deployments"),
            stateful_sets: cache("apps/statefulsets"),
            replication_controllers: cache("replicationcontrollers"),
        }
    }

    async fn reconcile(&self, key: &ObjectName) -> Result<Outcome, ReconcileError> {
        // From the store: this controller's last status write is the precondition.
        let Some(stored) = self.client.get(pdbs(), &key.namespace, &key.name) else {
            return Ok(Outcome::Done);
        };
        let mut pdb = stored.value();
        let now = Utc::now();
        let selector = label_selector(pdb.pointer("/spec/selector"))
            .map_err(ReconcileError::Invalid)?
            .unwrap_or_default();
        let pods: Vec<Value> = self
            .pods
            .list(Some(&key.namespace))
            .into_iter()
            .filter(|p| selector.matches(&p.labels))
            .map(|p| p.value())
            .collect();
        // Evictions still counting, and the pods they name that still exist undeleted.
        let mut disrupted: Map<String, Value> = pdb
            .pointer("/status/disruptedPods")
            .and_then(Value::as_object)
            .cloned()
            .unwrap_or_default();
        let mut next_expiry: Option<chrono::DateTime<Utc>> = None;
        disrupted.retain(|pod_name, at| {
            let alive = pods
                .iter()
                .any(|p| super::objects::name(p) == pod_name && !is_deleting(p));
            let at = at.as_str().and_then(parse_time);
            let fresh = at.is_some_and(|t| now - t < DISRUPTED_TIMEOUT);
            if alive && fresh {
                let expiry = at.map(|t| t + DISRUPTED_TIMEOUT);
                next_expiry = match (next_expiry, expiry) {
                    (Some(a), Some(b)) => Some(a.min(b)),
                    (a, b) => a.or(b),
                };
            }
            alive && fresh
        });
        let current_healthy = pods
            .iter()
            .filter(|p| {
                pod_is_ready(p)
                    && !is_deleting(p)
                    && !disrupted.contains_key(super::objects::name(p))
            })
            .count() as i64;
        let budget = self.expected(&pdb, &pods);
        let (expected, desired, failure) = match budget {
            Ok((expected, desired)) => (expected, desired, None),
            Err(reason) => (0, 0, Some(reason)),
        };
        let allowed = if failure.is_some() {
            0
        } else {
            (current_healthy - desired).max(0)
        };
        let (status, reason, message) = match &failure {
            Some(why) => ("False", "SyncFailed", why.clone()),
            None if allowed > 0 => ("True", "SufficientPods", String::new()),
            None => ("False", "InsufficientPods", String::new()),
        };
        let generation = pdb
            .pointer("/metadata/generation")
            .cloned()
            .unwrap_or(json!(0));
        let old_status = pdb.get("status").cloned().unwrap_or(json!({}));
        let old_condition = old_status
            .get("conditions")
            .and_then(Value::as_array)
            .and_then(|c| c.iter().find(|c| c["type"] == "DisruptionAllowed"))
            .cloned();
        let transition = match &old_condition {
            Some(c) if c["status"] == status => c["lastTransitionTime"].clone(),
            _ => json!(format_time(now)),
        };
        let mut new_status = json!({
            "observedGeneration": generation,
            "disruptionsAllowed": allowed,
            "currentHealthy": current_healthy,
            "desiredHealthy": desired,
            "expectedPods": expected,
            "conditions": [{
                "type": "DisruptionAllowed",
                "status": status,
                "reason": reason,
                "message": message,
                "observedGeneration": generation,
                "lastTransitionTime": transition,
            }],
        });
        if !disrupted.is_empty() {
            new_status["disruptedPods"] = Value::Object(disrupted);
        }
        if new_status != old_status {
            pdb["status"] = new_status;
            self.client
                .update_status(pdbs(), &key.namespace, &key.name, &pdb)
                .await?;
        }
        Ok(match next_expiry {
            Some(at) => Outcome::RequeueAfter(
                (at - now).to_std().unwrap_or_default() + Duration::from_millis(100),
            ),
            None => Outcome::Done,
        })
    }
}

impl Disruption {
    /// (expectedPods, desiredHealthy) of a budget over `pods`, or why they are unknown.
    fn expected(&self, pdb: &Value, pods: &[Value]) -> Result<(i64, i64), String> {
        let spec = &pdb["spec"];
        match (spec.get("minAvailable"), spec.get("maxUnavailable")) {
            (Some(Value::Number(n)), _) => Ok((pods.len() as i64, n.as_i64().unwrap_or(0))),
            (Some(Value::String(p)), _) => {
                let expected = self.controllers_scale(pods)?;
                Ok((expected, scaled(p, expected, true)?))
            }
            (None, Some(max)) => {
                let expected = self.controllers_scale(pods)?;
                let unavailable = match max {
                    Value::Number(n) => n.as_i64().unwrap_or(0),
                    Value::String(p) => scaled(p, expected, true)?,
                    _ => 0,
                };
                Ok((expected, (expected - unavailable).max(0)))
            }
            // Neither: every selected pod must stay (minAvailable 100%).
            _ => Ok((pods.len() as i64, pods.len() as i64)),
        }
    }

    /// The sum of the replicas of the controllers of `pods` (each controller once).
    fn controllers_scale(&self, pods: &[Value]) -> Result<i64, String> {
        let mut seen: HashMap<String, i64> = HashMap::new();
        for pod in pods {
            let Some(owner) = controller_ref(pod) else {
                return Err(format!(
                    "found no controllers for pod {:?}",
                    super::objects::name(pod)
                ));
            };
            let ns = pod
                .pointer("/metadata/namespace")
                .and_then(Value::as_str)
                .unwrap_or("");
            let (key, replicas) = match (owner.api_version.as_str(), owner.kind.as_str()) {
                ("apps/v1", "ReplicaSet") => {
                    let rs = self
                        .replica_sets
                        .get(ns, &owner.name)
                        .filter(|rs| rs.uid == owner.uid)
                        .ok_or_else(|| format!("replicaset {ns}/{} not found", owner.name))?
                        .value();
                    // A Deployment's ReplicaSets count as the Deployment.
                    match controller_ref(&rs).filter(|d| d.kind == "Deployment") {
                        Some(d) => {
                            let dep = self
                                .deployments
                                .get(ns, &d.name)
                                .ok_or_else(|| format!("deployment {ns}/{} not found", d.name))?;
                            (d.uid, replicas_of(&dep.value()))
                        }
                        None => (owner.uid.clone(), replicas_of(&rs)),
                    }
                }
                ("apps/v1", "StatefulSet") => {
                    let sts = self
                        .stateful_sets
                        .get(ns, &owner.name)
                        .ok_or_else(|| format!("statefulset {ns}/{} not found", owner.name))?;
                    (owner.uid.clone(), replicas_of(&sts.value()))
                }
                ("v1", "ReplicationController") => {
                    let rc = self
                        .replication_controllers
                        .get(ns, &owner.name)
                        .ok_or_else(|| {
                            format!("replicationcontroller {ns}/{} not found", owner.name)
                        })?;
                    (owner.uid.clone(), replicas_of(&rc.value()))
                }
                (api_version, kind) => {
                    return Err(format!(
                    "the pod's controller {kind} ({api_version}) has no scale this budget can use"
                ))
                }
            };
            seen.insert(key, replicas);
        }
        Ok(seen.values().sum())
    }
}

fn replicas_of(object: &Value) -> i64 {
    object
        .pointer("/spec/replicas")
        .and_then(Value::as_i64)
        .unwrap_or(1)
}

/// `"30%"` of `total`, rounded up or down (upstream `GetScaledValueFromIntOrPercent`).
fn scaled(percent: &str, total: i64, round_up: bool) -> Result<i64, String> {
    let p: i64 = percent
        .strip_suffix('%')
        .and_then(|n| n.parse().ok())
        .ok_or_else(|| format!("invalid value for IntOrString: {percent:?}"))?;
    let product = p * total;
    Ok(if round_up {
        (product + 99) / 100
    } else {
        product / 100
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentages_round_as_upstream() {
        assert_eq!(scaled("50%", 3, true), Ok(2));
        assert_eq!(scaled("50%", 3, false), Ok(1));
        assert_eq!(scaled("100%", 7, true), Ok(7));
        assert_eq!(scaled("0%", 7, true), Ok(0));
        assert!(scaled("half", 7, true).is_err());
    }
}
