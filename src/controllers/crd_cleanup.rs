//! The CustomResourceDefinition cleanup (kube-apiserver's `crd-finalizer`): a definition being
//! deleted keeps its `customresourcecleanup.apiextensions.k8s.io` finalizer until every object
//! of its kind is gone. This controller deletes them through the API (so their own finalizers
//! and the garbage collector have their say), looks again while any is left, and then removes
//! the finalizer, which lets the definition go. It runs on the leader, as every controller.

use std::sync::Arc;
use std::time::Duration;

use serde_json::{json, Value};

use super::informer::{Change, Informers, InformersBuilder, KindCache};
use super::queue::WorkQueue;
use super::worker::{Controller, Outcome, ReconcileError};
use super::Shared;
use crate::api::crd::definition::CLEANUP_FINALIZER;
use crate::api::crd::CRDS;

use crate::client::{Client, DeleteOptions, PatchKind};
use crate::kube::object::ObjectKey;
use crate::kube::resources;

/// How soon a definition whose objects are still going is looked at again.
const RECHECK: Duration = Duration::from_millis(200);

pub struct CrdCleanup {
    client: Client,
    definitions: Arc<KindCache>,
}

impl Controller for CrdCleanup {
    /// The definition's name.
    type Key = String;
    const NAME: &'static str = "crd-finalizer";
    const WORKERS: usize = 1;

    fn register(builder: &mut InformersBuilder, queue: &WorkQueue<String>) {
        let q = queue.clone();
        builder.on_change(
            CRDS,
            Arc::new(move |change: Change<'_>| {
                let object = change.object();
                if !matches!(change, Change::Deleted(_)) && object.is_deleting() {
                    q.add(object.key.name.clone());
                }
            }),
        );
    }

    fn new(shared: &Shared, informers: &Arc<Informers>, _queue: WorkQueue<String>) -> Self {
        CrdCleanup {
            client: shared.apiserver.clone(),
            definitions: informers.cache(CRDS).expect("registered in `register`"),
        }
    }

    async fn reconcile(&self, name: &String) -> Result<Outcome, ReconcileError> {
        let Some(stored) = self.definitions.get("", name) else {
            return Ok(Outcome::Done);
        };
        let crd = stored.value();
        let finalizers = crate::api::meta::finalizers(&crd);
        if !stored.is_deleting() || !finalizers.iter().any(|f| f == CLEANUP_FINALIZER) {
            return Ok(Outcome::Done);
        }
        let text = |p: &str| crd.pointer(p).and_then(Value::as_str).unwrap_or("");
        let store_key = format!("{}/{}", text("/spec/group"), text("/spec/names/plural"));
        let ctx = self.client.context();
        let left: Vec<ObjectKey> = ctx
            .store
            .snapshot()
            .range(&store_key, None, None)
            .map(|o| o.key.clone())
            .collect();
        if !left.is_empty() {
            // The kind stays served while its definition is being deleted, so its objects are
            // deleted the way a client would delete them.
            let Some(kind) = ctx.custom_kinds.by_key(&store_key) else {
                return Ok(Outcome::RequeueAfter(RECHECK));
            };
            let Some(info) = kind.versions.iter().find(|v| v.storage).map(|v| v.info) else {
                return Ok(Outcome::RequeueAfter(RECHECK));
            };
            for key in &left {
                match self
                    .client
                    .delete(info, &key.namespace, &key.name, &DeleteOptions::default())
                    .await
                {
                    Ok(_) => {}
                    Err(e) if e.is_not_found() => {}
                    Err(e) => return Err(e.into()),
                }
            }
            return Ok(Outcome::RequeueAfter(RECHECK));
        }
        let kept: Vec<String> = finalizers
            .into_iter()
            .filter(|f| f != CLEANUP_FINALIZER)
            .collect();
        let patch = json!({"metadata": {"finalizers": kept,
                                        "resourceVersion": stored.resource_version.to_string()}});
        let definitions =
            resources::find("apiextensions.k8s.io", "v1", "customresourcedefinitions")
                .unwrap_or_else(|| {
                    panic!("built-in kind customresourcedefinitions is not registered")
                });
        match self
            .client
            .patch(definitions, "", name, None, PatchKind::Merge, &patch)
            .await
        {
            Ok(_) => Ok(Outcome::Done),
            Err(e) if e.is_not_found() => Ok(Outcome::Done),
            Err(e) if e.is_conflict() => Ok(Outcome::RequeueAfter(RECHECK)),
            Err(e) => Err(e.into()),
        }
    }
}
