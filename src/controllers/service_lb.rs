//! Addresses for `LoadBalancer` Services, as k3s's ServiceLB gives them but without its
//! pods: every node's agent already answers a Service's ports on the node's addresses (the
//! agent's proxy routes `status.loadBalancer.ingress` addresses like NodePorts), so the
//! Service's `status.loadBalancer.ingress` lists the InternalIPs of the Ready nodes, sorted.
//! Services with a `spec.loadBalancerClass` belong to another controller and are left alone.
//!
//! A Service's change queues it; a node's change of address or readiness queues the
//! sentinel key [`ALL`], whose reconcile queues every `LoadBalancer` Service.

use std::sync::Arc;

use serde_json::{json, Value};

use super::informer::{Change, Informers, InformersBuilder, KindCache, ObjectName};
use super::queue::WorkQueue;
use super::worker::{Controller, Outcome, ReconcileError};
use super::Shared;
use crate::client::Client;
use crate::kube::resources::{self, ResourceInfo};

/// The key standing for "every LoadBalancer Service" (no object has an empty name).
const ALL: ObjectName = ObjectName {
    namespace: String::new(),
    name: String::new(),
};

fn services() -> &'static ResourceInfo {
    resources::find("", "v1", "services")
        .unwrap_or_else(|| panic!("built-in kind services is not registered"))
}

pub struct ServiceLb {
    client: Client,
    services: Arc<KindCache>,
    nodes: Arc<KindCache>,
    queue: WorkQueue<ObjectName>,
}

/// What of a node the ingress depends on: its InternalIP and whether it is Ready.
fn node_facts(node: &Value) -> (Option<String>, bool) {
    let ip = node["status"]["addresses"].as_array().and_then(|a| {
        a.iter()
            .find(|a| a["type"] == "InternalIP")
            .and_then(|a| a["address"].as_str())
            .map(str::to_string)
    });
    let ready = node["status"]["conditions"].as_array().is_some_and(|c| {
        c.iter()
            .any(|c| c["type"] == "Ready" && c["status"] == "True")
    });
    (ip, ready)
}

/// Whether the Service is this controller's.
fn is_ours(service: &Value) -> bool {
    service["spec"]["type"] == "LoadBalancer" && service["spec"]["loadBalancerClass"].is_null()
}

/// The ingress for the nodes in `nodes`: their Ready InternalIPs, sorted.
fn ingress(nodes: &[Value]) -> Value {
    let mut ips: Vec<String> = nodes
        .iter()
        .map(node_facts)
        .filter_map(|(ip, ready)| ip.filter(|_| ready))
        .collect();
    ips.sort();
    ips.dedup();
    Value::Array(ips.into_iter().map(|ip| json!({"ip": ip})).collect())
}

impl Controller for ServiceLb {
    type Key = ObjectName;
    const NAME: &'static str = "service-lb-controller";
    const WORKERS: usize = 1;

    fn register(builder: &mut InformersBuilder, queue: &WorkQueue<ObjectName>) {
        let q = queue.clone();
        builder.on_change(
            "services",
            Arc::new(move |change: Change<'_>| {
                if !matches!(change, Change::Deleted(_)) {
                    q.add(ObjectName::of(change.object()));
                }
            }),
        );
        let q = queue.clone();
        builder.on_change(
            "nodes",
            Arc::new(move |change: Change<'_>| {
                // Heartbeats change a node every few seconds; only its address or readiness
                // matter here.
                let now = node_facts(&change.object().value());
                let before = change.old().map(|o| node_facts(&o.value()));
                if before.as_ref() != Some(&now) {
                    q.add(ALL);
                }
            }),
        );
    }

    fn new(shared: &Shared, informers: &Arc<Informers>, queue: WorkQueue<ObjectName>) -> Self {
        ServiceLb {
            client: shared.controller_manager.clone(),
            services: informers
                .cache("services")
                .expect("registered in `register`"),
            nodes: informers.cache("nodes").expect("registered in `register`"),
            queue,
        }
    }

    async fn reconcile(&self, key: &ObjectName) -> Result<Outcome, ReconcileError> {
        if *key == ALL {
            for service in self.services.list(None) {
                if is_ours(&service.value()) {
                    self.queue.add(ObjectName::of(&service));
                }
            }
            return Ok(Outcome::Done);
        }
        let Some(stored) = self.services.get(&key.namespace, &key.name) else {
            return Ok(Outcome::Done);
        };
        let mut service = stored.value();
        if !is_ours(&service) {
            return Ok(Outcome::Done);
        }
        let nodes: Vec<Value> = self.nodes.list(None).iter().map(|n| n.value()).collect();
        let wanted = ingress(&nodes);
        let current = &service["status"]["loadBalancer"]["ingress"];
        if *current == wanted || (current.is_null() && wanted == json!([])) {
            return Ok(Outcome::Done);
        }
        service["status"]["loadBalancer"] = json!({"ingress": wanted});
        match self
            .client
            .update_status(services(), &key.namespace, &key.name, &service)
            .await
        {
            Ok(_) => Ok(Outcome::Done),
            // Gone meanwhile; a conflict brings a newer version through the informer.
            Err(e) if e.is_not_found() || e.is_conflict() => Ok(Outcome::Done),
            Err(e) => Err(e.into()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::controllers::testing::{session, settings, until};

    fn node(name: &str, ip: &str, ready: bool) -> Value {
        json!({
            "apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name},
            "status": {
                "addresses": [{"type": "InternalIP", "address": ip}],
                "conditions": [{"type": "Ready", "status": if ready { "True" } else { "False" }}],
            },
        })
    }

    #[test]
    fn ingress_lists_ready_nodes_sorted() {
        let nodes = [
            node("b", "192.0.2.2", true),
            node("a", "192.0.2.1", true),
            node("c", "192.0.2.3", false),
        ];
        assert_eq!(
            ingress(&nodes),
            json!([{"ip": "192.0.2.1"}, {"ip": "192.0.2.2"}])
        );
    }

    #[tokio::test]
    async fn a_load_balancer_service_gets_the_node_addresses() {
        let s = session::<ServiceLb>(settings(), async |client: &Client| {
            let namespaces = resources::find("", "v1", "namespaces").expect("namespaces");
            let default = json!({"metadata": {"name": "default"}});
            client
                .create(namespaces, "", &default)
                .await
                .expect("a namespace");
            let nodes = resources::find("", "v1", "nodes").expect("nodes");
            for n in [node("n1", "192.0.2.1", true), node("n2", "192.0.2.2", true)] {
                let created = client.create(nodes, "", &n).await.expect("a node");
                let mut with_status = created.clone();
                with_status["status"] = n["status"].clone();
                client
                    .update_status(
                        nodes,
                        "",
                        n["metadata"]["name"].as_str().unwrap_or(""),
                        &with_status,
                    )
                    .await
                    .expect("its status");
            }
            for (name, kind) in [("lb", "LoadBalancer"), ("plain", "ClusterIP")] {
                let svc = json!({
                    "apiVersion": "v1", "kind": "Service",
                    "metadata": {"namespace": "default", "name": name},
                    "spec": {"type": kind, "ports": [{"port": 80}]},
                });
                client
                    .create(services(), "default", &svc)
                    .await
                    .expect("a service");
            }
        })
        .await;
        until(|| s.controller.services.len() == 2 && s.controller.nodes.len() == 2).await;
        for name in ["lb", "plain"] {
            let key = ObjectName::new("default", name);
            s.controller.reconcile(&key).await.expect("a reconcile");
        }
        let lb = s
            .client
            .get(services(), "default", "lb")
            .expect("lb")
            .value();
        assert_eq!(
            lb["status"]["loadBalancer"]["ingress"],
            json!([{"ip": "192.0.2.1"}, {"ip": "192.0.2.2"}])
        );
        let plain = s
            .client
            .get(services(), "default", "plain")
            .expect("plain")
            .value();
        assert!(
            plain["status"]["loadBalancer"]["ingress"].is_null(),
            "{plain}"
        );
    }
}
