//! The ServiceAccount controller: every namespace that is not being deleted has a
//! ServiceAccount named `default` (kube-controller-manager's `serviceaccount-controller`).
//! A deleted `default` account is made again; a namespace being deleted gets none.

use std::sync::Arc;

use serde_json::json;

use super::informer::{Change, Informers, InformersBuilder, KindCache};
use super::queue::WorkQueue;
use super::worker::{Controller, Outcome, ReconcileError};
use super::Shared;
use crate::client::Client;
use crate::kube::resources::{self, ResourceInfo};

/// The account every namespace gets.
const DEFAULT_ACCOUNT: &str = "default";

pub struct ServiceAccounts {
    client: Client,
    namespaces: Arc<KindCache>,
    accounts: Arc<KindCache>,
}

fn service_accounts() -> &'static ResourceInfo {
    resources::find("", "v1", "serviceaccounts")
        .unwrap_or_else(|| panic!("built-in kind serviceaccounts is not registered"))
}

impl Controller for ServiceAccounts {
    /// The namespace's name.
    type Key = String;
    const NAME: &'static str = "serviceaccount-controller";
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
            "serviceaccounts",
            Arc::new(move |change: Change<'_>| {
                let object = change.object();
                if matches!(change, Change::Deleted(_)) && object.key.name == DEFAULT_ACCOUNT {
                    q.add(object.key.namespace.clone());
                }
            }),
        );
    }

    fn new(shared: &Shared, informers: &Arc<Informers>, _queue: WorkQueue<String>) -> Self {
        ServiceAccounts {
            client: shared.controller_manager.clone(),
            namespaces: informers
                .cache("namespaces")
                .expect("registered in `register`"),
            accounts: informers
                .cache("serviceaccounts")
                .expect("registered in `register`"),
        }
    }

    async fn reconcile(&self, namespace: &String) -> Result<Outcome, ReconcileError> {
        let Some(ns) = self.namespaces.get("", namespace) else {
            return Ok(Outcome::Done);
        };
        if ns.is_deleting() || self.accounts.get(namespace, DEFAULT_ACCOUNT).is_some() {
            return Ok(Outcome::Done);
        }
        let account = json!({
            "apiVersion": "v1",
            "kind": "ServiceAccount",
            "metadata": {"name": DEFAULT_ACCOUNT, "namespace": namespace},
        });
        match self
            .client
            .create(service_accounts(), namespace, &account)
            .await
        {
            Ok(_) => Ok(Outcome::Done),
            // Created meanwhile, or the namespace started terminating: nothing to do.
            Err(e) if e.is_already_exists() || e.code() == 403 || e.is_not_found() => {
                Ok(Outcome::Done)
            }
            Err(e) => Err(e.into()),
        }
    }
}
