//! The root CA publisher: every namespace that is not being deleted has a ConfigMap
//! `kube-root-ca.crt` whose `ca.crt` is the cluster CA, so pods can verify the API server
//! (kube-controller-manager's `root-ca-cert-publisher`). A deleted or edited one is restored.

use std::sync::Arc;

use serde_json::json;

use super::informer::{Change, Informers, InformersBuilder, KindCache};
use super::queue::WorkQueue;
use super::worker::{Controller, Outcome, ReconcileError};
use super::Shared;
use crate::client::Client;
use crate::kube::resources::{self, ResourceInfo};

/// The ConfigMap's name in every namespace.
pub const CONFIG_MAP: &str = "kube-root-ca.crt";
const DESCRIPTION: &str = "Contains a CA bundle that can be used to verify the kube-apiserver when using internal endpoints such as the internal service IP or kubernetes.default.svc. No other usage is guaranteed across distributions of Kubernetes clusters.";

pub struct RootCaPublisher {
    client: Client,
    ca: String,
    namespaces: Arc<KindCache>,
    config_maps: Arc<KindCache>,
}

fn config_maps() -> &'static ResourceInfo {
    resources::find("", "v1", "configmaps")
        .unwrap_or_else(|| panic!("built-in kind configmaps is not registered"))
}

impl Controller for RootCaPublisher {
    /// The namespace's name.
    type Key = String;
    const NAME: &'static str = "root-ca-cert-publisher";
    const WORKERS: usize = 1;

    fn register(builder: &mut InformersBuilder, queue: &WorkQueue<String>) {
        let q = queue.clone();
        builder.on_change(
            "namespaces",
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
                let object = change.object();
                if object.key.name == CONFIG_MAP && !matches!(change, Change::Added(_)) {
                    q.add(object.key.namespace.clone());
                }
            }),
        );
    }

    fn new(shared: &Shared, informers: &Arc<Informers>, _queue: WorkQueue<String>) -> Self {
        RootCaPublisher {
            client: shared.controller_manager.clone(),
            ca: shared.settings.ca_cert_pem.clone(),
            namespaces: informers
                .cache("namespaces")
                .expect("registered in `register`"),
            config_maps: informers
                .cache("configmaps")
                .expect("registered in `register`"),
        }
    }

    async fn reconcile(&self, namespace: &String) -> Result<Outcome, ReconcileError> {
        let Some(ns) = self.namespaces.get("", namespace) else {
            return Ok(Outcome::Done);
        };
        if ns.is_deleting() {
            return Ok(Outcome::Done);
        }
        let result = match self.config_maps.get(namespace, CONFIG_MAP) {
            None => {
                let cm = json!({
                    "apiVersion": "v1",
                    "kind": "ConfigMap",
                    "metadata": {
                        "name": CONFIG_MAP,
                        "namespace": namespace,
                        "annotations": {"kubernetes.io/description": DESCRIPTION},
                    },
                    "data": {"ca.crt": self.ca},
                });
                self.client.create(config_maps(), namespace, &cm).await
            }
            Some(current) => {
                let mut cm = current.value();
                let data = json!({"ca.crt": self.ca});
                if cm.get("data") == Some(&data) {
                    return Ok(Outcome::Done);
                }
                if let Some(obj) = cm.as_object_mut() {
                    obj.insert("data".into(), data);
                    obj.remove("binaryData");
                }
                self.client
                    .update(config_maps(), namespace, CONFIG_MAP, &cm)
                    .await
            }
        };
        match result {
            Ok(_) => Ok(Outcome::Done),
            // The namespace is going away (403/404), or a concurrent create (409): the next
            // change brings the key back if there is still something to do.
            Err(e) if e.code() == 403 || e.is_not_found() || e.is_already_exists() => {
                Ok(Outcome::Done)
            }
            Err(e) => Err(e.into()),
        }
    }
}
