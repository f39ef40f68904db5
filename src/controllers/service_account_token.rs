//! The token controller: a Secret of type `kubernetes.io/service-account-token` naming a
//! ServiceAccount (annotation `kubernetes.io/service-account.name`) gets a legacy token of
//! that account, the cluster CA and the namespace in its data, and the account's uid in the
//! annotation `kubernetes.io/service-account.uid` (kube-controller-manager's
//! `serviceaccount-token-controller`). A Secret whose account is gone, or was replaced by
//! another of the same name, is deleted, which also ends its token: the authenticator accepts
//! a legacy token only while its Secret holds it (`auth::service_account`).

use std::sync::Arc;

use base64::engine::general_purpose::STANDARD;
use base64::Engine;
use serde_json::{json, Value};

use super::informer::{Change, Informers, InformersBuilder, KindCache, ObjectName};
use super::queue::WorkQueue;
use super::worker::{Controller, Outcome, ReconcileError};
use super::Shared;
use crate::auth::service_account::claims::Ref;
use crate::auth::service_account::SERVICE_ACCOUNT_TOKEN_TYPE;
use crate::client::{Client, DeleteOptions};
use crate::kube::object::StoredObject;
use crate::kube::resources::{self, ResourceInfo};

const NAME_ANNOTATION: &str = "kubernetes.io/service-account.name";
const UID_ANNOTATION: &str = "kubernetes.io/service-account.uid";
/// Token Secrets by `<namespace>/<account>`.
const BY_ACCOUNT: &str = "service-account";

pub struct TokenSecrets {
    client: Client,
    ca: String,
    accounts: Arc<KindCache>,
    secrets: Arc<KindCache>,
}

fn secrets() -> &'static ResourceInfo {
    resources::find("", "v1", "secrets")
        .unwrap_or_else(|| panic!("built-in kind secrets is not registered"))
}

/// The account a token Secret names, if it is one.
fn account_of(secret: &StoredObject) -> Option<String> {
    if secret.field("type") != Some(SERVICE_ACCOUNT_TOKEN_TYPE) {
        return None;
    }
    let value = secret.value();
    let name = value
        .pointer("/metadata/annotations")
        .and_then(|a| a.get(NAME_ANNOTATION))
        .and_then(Value::as_str)?;
    Some(name.to_string())
}

fn by_account(secret: &StoredObject) -> Vec<String> {
    account_of(secret)
        .map(|account| vec![format!("{}/{account}", secret.key.namespace)])
        .unwrap_or_default()
}

impl Controller for TokenSecrets {
    /// The service account.
    type Key = ObjectName;
    const NAME: &'static str = "serviceaccount-token-controller";
    const WORKERS: usize = 1;

    fn register(builder: &mut InformersBuilder, queue: &WorkQueue<ObjectName>) {
        builder.index("secrets", BY_ACCOUNT, by_account);
        let q = queue.clone();
        builder.on_change(
            "secrets",
            Arc::new(move |change: Change<'_>| {
                let secret = change.object();
                if !matches!(change, Change::Deleted(_)) {
                    if let Some(account) = account_of(secret) {
                        q.add(ObjectName::new(secret.key.namespace.clone(), account));
                    }
                }
            }),
        );
        let q = queue.clone();
        builder.on_change(
            "serviceaccounts",
            Arc::new(move |change: Change<'_>| q.add(ObjectName::of(change.object()))),
        );
    }

    fn new(shared: &Shared, informers: &Arc<Informers>, _queue: WorkQueue<ObjectName>) -> Self {
        TokenSecrets {
            client: shared.controller_manager.clone(),
            ca: shared.settings.ca_cert_pem.clone(),
            accounts: informers
                .cache("serviceaccounts")
                .expect("registered in `register`"),
            secrets: informers
                .cache("secrets")
                .expect("registered in `register`"),
        }
    }

    async fn reconcile(&self, key: &ObjectName) -> Result<Outcome, ReconcileError> {
        let Some(tokens) = self.client.context().service_accounts.clone() else {
            return Ok(Outcome::Done);
        };
        let account = self
            .accounts
            .get(&key.namespace, &key.name)
            .filter(|a| !a.is_deleting());
        let index = format!("{}/{}", key.namespace, key.name);
        for secret in self.secrets.by_index(BY_ACCOUNT, &index) {
            if secret.is_deleting() {
                continue;
            }
            let mut value = secret.value();
            let recorded_uid = value
                .pointer("/metadata/annotations")
                .and_then(|a| a.get(UID_ANNOTATION))
                .and_then(Value::as_str)
                .map(str::to_string);
            let account = match &account {
                Some(a) if recorded_uid.as_ref().is_none_or(|uid| *uid == a.uid) => a,
                // The account is gone, or this Secret was made for an earlier one.
                _ => {
                    let options = DeleteOptions {
                        uid: Some(secret.uid.clone()),
                        ..DeleteOptions::default()
                    };
                    match self
                        .client
                        .delete(secrets(), &key.namespace, &secret.key.name, &options)
                        .await
                    {
                        Ok(_) => {}
                        Err(e) if e.is_not_found() || e.is_conflict() => {}
                        Err(e) => return Err(e.into()),
                    }
                    continue;
                }
            };
            let has_token = value
                .pointer("/data/token")
                .and_then(Value::as_str)
                .is_some_and(|t| !t.is_empty());
            if has_token && recorded_uid.is_some() {
                continue;
            }
            let token = tokens
                .issue_legacy(
                    &key.namespace,
                    &secret.key.name,
                    &Ref {
                        name: key.name.clone(),
                        uid: account.uid.clone(),
                    },
                )
                .map_err(|e| ReconcileError::Invalid(format!("signing a token: {e}")))?;
            value["metadata"]["annotations"][UID_ANNOTATION] = json!(account.uid);
            if !value.get("data").is_some_and(Value::is_object) {
                value["data"] = json!({});
            }
            value["data"]["token"] = json!(STANDARD.encode(token));
            value["data"]["ca.crt"] = json!(STANDARD.encode(&self.ca));
            value["data"]["namespace"] = json!(STANDARD.encode(&key.namespace));
            match self
                .client
                .update(secrets(), &key.namespace, &secret.key.name, &value)
                .await
            {
                Ok(_) => {}
                // Changed or deleted meanwhile: its change queues the account again.
                Err(e) if e.is_not_found() || e.is_conflict() => {}
                Err(e) => return Err(e.into()),
            }
        }
        Ok(Outcome::Done)
    }
}
