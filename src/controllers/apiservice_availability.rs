//! APIService availability (kube-aggregator's `AvailableConditionController`): every
//! APIService's `Available` condition — True for a local one; for a Service-backed one the
//! outcome of fetching its discovery (`GET /apis/<group>/<version>`) through the Service, on
//! every change of the APIService or its Service's endpoints and every 30 s. It also
//! publishes `kube-system/extension-apiserver-authentication`, the trust aggregated servers
//! read. The leader alone runs it, so followers never write either.

use std::sync::Arc;
use std::time::Duration;

use serde_json::{json, Value};

use super::informer::{Change, Informers, InformersBuilder, KindCache};
use super::queue::WorkQueue;
use super::worker::{Controller, Outcome, ReconcileError};
use super::Shared;
use crate::api::aggregation::apiservice::{Backend, STORE_KEY};
use crate::api::aggregation::front_proxy::{FrontProxy, CONFIG_MAP, CONFIG_MAP_NAMESPACE};
use crate::api::meta::now_rfc3339;
use crate::client::Client;
use crate::kube::resources::{self, ResourceInfo};

/// How often a Service-backed APIService is checked again.
const RECHECK: Duration = Duration::from_secs(30);
/// The queue key of the ConfigMap (APIService names are never empty).
const CONFIG_MAP_KEY: &str = "";
/// Keys `service:<namespace>/<name>` stand for the APIServices that name a Service.
const SERVICE_PREFIX: &str = "service:";

pub struct ApiServiceAvailability {
    client: Client,
    queue: WorkQueue<String>,
    cluster_ca: String,
    front_proxy: Option<FrontProxy>,
    api_services: Arc<KindCache>,
    config_maps: Arc<KindCache>,
}

fn info(group: &str, plural: &str) -> &'static ResourceInfo {
    let version = "v1";
    resources::find(group, version, plural)
        .unwrap_or_else(|| panic!("built-in kind {plural} is not registered"))
}

impl Controller for ApiServiceAvailability {
    type Key = String;
    const NAME: &'static str = "apiservice-availability";
    const WORKERS: usize = 2;

    fn register(builder: &mut InformersBuilder, queue: &WorkQueue<String>) {
        let q = queue.clone();
        builder.on_change(
            STORE_KEY,
            Arc::new(move |change: Change<'_>| {
                if !matches!(change, Change::Deleted(_)) {
                    q.add(change.object().key.name.clone());
                }
            }),
        );
        let q = queue.clone();
        builder.on_change(
            "configmaps",
            Arc::new(move |change: Change<'_>| {
                let key = &change.object().key;
                if key.namespace == CONFIG_MAP_NAMESPACE && key.name == CONFIG_MAP {
                    q.add(CONFIG_MAP_KEY.to_string());
                }
            }),
        );
        for resource in ["services", "endpoints"] {
            let q = queue.clone();
            builder.on_change(
                resource,
                Arc::new(move |change: Change<'_>| {
                    let key = &change.object().key;
                    q.add(format!("{SERVICE_PREFIX}{}/{}", key.namespace, key.name));
                }),
            );
        }
    }

    fn new(shared: &Shared, informers: &Arc<Informers>, queue: WorkQueue<String>) -> Self {
        let front_proxy = match FrontProxy::derive(&shared.settings.ca_key_pem) {
            Ok(front_proxy) => Some(front_proxy),
            Err(error) => {
                tracing::warn!(
                    component = "apiservice-availability",
                    %error,
                    "no front-proxy CA: extension-apiserver-authentication is not published"
                );
                None
            }
        };
        queue.add(CONFIG_MAP_KEY.to_string());
        ApiServiceAvailability {
            client: shared.apiserver.clone(),
            queue,
            cluster_ca: shared.settings.ca_cert_pem.clone(),
            front_proxy,
            api_services: informers
                .cache(STORE_KEY)
                .expect("registered in `register`"),
            config_maps: informers
                .cache("configmaps")
                .expect("registered in `register`"),
        }
    }

    async fn reconcile(&self, key: &String) -> Result<Outcome, ReconcileError> {
        if key == CONFIG_MAP_KEY {
            return self.publish().await;
        }
        if let Some(service) = key.strip_prefix(SERVICE_PREFIX) {
            for object in self.api_services.list(None) {
                let Some(backend) = Backend::of(&object.value()) else {
                    continue;
                };
                if format!("{}/{}", backend.namespace, backend.service) == service {
                    self.queue.add(backend.name);
                }
            }
            return Ok(Outcome::Done);
        }
        let Some(stored) = self.api_services.get("", key) else {
            return Ok(Outcome::Done);
        };
        let object = stored.value();
        let (status, reason, message, next) = match Backend::of(&object) {
            None => (
                "True",
                "Local",
                "Local APIServices are always available".to_string(),
                Outcome::Done,
            ),
            Some(backend) => {
                let ctx = self.client.context();
                match ctx.aggregator.probe(ctx, &backend).await {
                    Ok(()) => (
                        "True",
                        "Passed",
                        "all checks passed".to_string(),
                        Outcome::RequeueAfter(RECHECK),
                    ),
                    Err(failed) => (
                        "False",
                        failed.reason,
                        failed.message,
                        Outcome::RequeueAfter(RECHECK),
                    ),
                }
            }
        };
        self.set_available(object, status, reason, &message).await?;
        Ok(next)
    }
}

impl ApiServiceAvailability {
    /// Writes the `Available` condition unless it says this already; its transition time
    /// moves only when the status changes.
    async fn set_available(
        &self,
        mut object: Value,
        status: &str,
        reason: &str,
        message: &str,
    ) -> Result<(), ReconcileError> {
        let mut conditions = object
            .pointer("/status/conditions")
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default();
        let current = conditions.iter().position(|c| c["type"] == "Available");
        let mut transition = now_rfc3339();
        if let Some(i) = current {
            let c = &conditions[i];
            if c["status"] == status && c["reason"] == reason && c["message"] == message {
                return Ok(());
            }
            if c["status"] == status {
                if let Some(at) = c["lastTransitionTime"].as_str() {
                    transition = at.to_string();
                }
            }
            conditions.remove(i);
        }
        conditions.push(json!({
            "type": "Available",
            "status": status,
            "lastTransitionTime": transition,
            "reason": reason,
            "message": message,
        }));
        object["status"] = json!({"conditions": conditions});
        let name = object["metadata"]["name"]
            .as_str()
            .unwrap_or("")
            .to_string();
        match self
            .client
            .update_status(
                info("apiregistration.k8s.io", "apiservices"),
                "",
                &name,
                &object,
            )
            .await
        {
            Ok(_) => Ok(()),
            // Deleted meanwhile, or changed: the change brings the key back.
            Err(e) if e.is_not_found() || e.is_conflict() => Ok(()),
            Err(e) => Err(e.into()),
        }
    }

    /// Creates or corrects `kube-system/extension-apiserver-authentication`.
    async fn publish(&self) -> Result<Outcome, ReconcileError> {
        let Some(front_proxy) = &self.front_proxy else {
            return Ok(Outcome::Done);
        };
        let data = front_proxy.config_map_data(&self.cluster_ca);
        let config_maps = info("", "configmaps");
        let result = match self.config_maps.get(CONFIG_MAP_NAMESPACE, CONFIG_MAP) {
            None => {
                let cm = json!({
                    "apiVersion": "v1",
                    "kind": "ConfigMap",
                    "metadata": {"name": CONFIG_MAP, "namespace": CONFIG_MAP_NAMESPACE},
                    "data": data,
                });
                self.client
                    .create(config_maps, CONFIG_MAP_NAMESPACE, &cm)
                    .await
            }
            Some(current) => {
                let mut cm = current.value();
                if cm.get("data") == Some(&data) {
                    return Ok(Outcome::Done);
                }
                cm["data"] = data;
                self.client
                    .update(config_maps, CONFIG_MAP_NAMESPACE, CONFIG_MAP, &cm)
                    .await
            }
        };
        match result {
            Ok(_) => Ok(Outcome::Done),
            // kube-system not there yet (bootstrap creates it) or a concurrent write: again.
            Err(e)
                if e.code() == 404
                    || e.code() == 403
                    || e.is_already_exists()
                    || e.is_conflict() =>
            {
                Ok(Outcome::RequeueAfter(Duration::from_secs(1)))
            }
            Err(e) => Err(e.into()),
        }
    }
}
