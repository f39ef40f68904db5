//! Claiming the objects a controller manages, as kube-controller-manager's
//! `ControllerRefManager` does: an object belongs to the owner whose controller reference
//! (the owner reference with `controller: true`) it carries; the selector only decides which
//! orphans an owner takes and which of its objects it lets go.
//!
//! For each candidate in the owner's namespace ([`decide`]):
//! - controlled by another owner: ignored, whatever its labels (two controllers with
//!   overlapping selectors never take each other's objects);
//! - controlled by this owner and matched by its selector: claimed;
//! - controlled by this owner but no longer matched: released (its controller reference is
//!   removed), unless the owner is being deleted;
//! - an orphan the selector matches, not being deleted, while the owner is not being deleted:
//!   adopted. Before the first adoption the owner is read again from the store and must still
//!   exist with the same uid and no deletion timestamp (upstream's uncached
//!   `RecheckDeletionTimestamp`), so a deleted owner never adopts.
//!
//! Adoption is a strategic-merge patch adding the controller reference, carrying the
//! candidate's `metadata.uid` (a pod replaced under the same name is not adopted) and the
//! `metadata.resourceVersion` it was decided on: the API does not refuse a second controller
//! reference the way kube-apiserver's validation does, so the version makes two owners
//! adopting one orphan at once conflict instead of both succeeding. Release is a patch that
//! deletes this owner's reference by uid; an object that is gone or was replaced counts as
//! released.
//!
//! Use (the same for pods of a ReplicaSet, DaemonSet or Job and ReplicaSets of a Deployment):
//! register [`CONTROLLER_UID_INDEX`] on the owned kind's cache, gather [`candidates`] from a
//! store snapshot, then [`RefManager::claim`] them; work only with what it returns. A Job's
//! claims add its tracking finalizer with the reference ([`RefManager::adding_finalizer`]).

use std::collections::BTreeMap;

use serde::Deserialize;
use serde_json::{json, Value};

use super::informer::{Change, ObjectName};
use super::objects::{self, OwnerRef};
use super::worker::ReconcileError;
use crate::client::{Client, ClientError, PatchKind};
use crate::kube::object::{ObjectRef, StoredObject};
use crate::kube::resources::ResourceInfo;
use crate::kube::selectors::LabelSelector;
use crate::kube::store::StoreSnapshot;

/// The informer index of objects by the uid of their controller. Register it with
/// `builder.index(resource, CONTROLLER_UID_INDEX, controller_uid_index)`.
pub const CONTROLLER_UID_INDEX: &str = "controller-uid";

/// Index function of [`CONTROLLER_UID_INDEX`].
pub fn controller_uid_index(object: &StoredObject) -> Vec<String> {
    controller_of(object)
        .map(|r| vec![r.uid])
        .unwrap_or_default()
}

/// The controller reference of a stored object, read without building its whole value (the
/// informers' handlers call this for every change of a pod).
pub fn controller_of(object: &StoredObject) -> Option<OwnerRef> {
    #[derive(Deserialize)]
    struct Object {
        metadata: Option<Metadata>,
    }
    #[derive(Deserialize)]
    struct Metadata {
        #[serde(rename = "ownerReferences")]
        owner_references: Option<Vec<Reference>>,
    }
    #[derive(Deserialize)]
    struct Reference {
        #[serde(rename = "apiVersion")]
        api_version: Option<String>,
        kind: Option<String>,
        name: Option<String>,
        uid: Option<String>,
        controller: Option<bool>,
        #[serde(rename = "blockOwnerDeletion")]
        block_owner_deletion: Option<bool>,
    }
    let object: Object = serde_json::from_slice(&object.json).ok()?;
    object
        .metadata?
        .owner_references?
        .into_iter()
        .find(|r| r.controller == Some(true))
        .and_then(|r| {
            Some(OwnerRef {
                api_version: r.api_version?,
                kind: r.kind?,
                name: r.name?,
                uid: r.uid?,
                controller: true,
                block_owner_deletion: r.block_owner_deletion == Some(true),
            })
        })
}

/// Where a change of an owned object (a pod, a ReplicaSet) sends its controller's work.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OwnedChange {
    /// The controlling object of kind `owner_kind` named by the object's controller
    /// reference, now or before the change.
    Owner(ObjectName),
    /// The object itself: an orphan that appeared, lost its controller or changed labels, so
    /// an owner whose selector matches may adopt it.
    Orphan(ObjectName),
}

/// The work a change of an owned object concerns, for the controller of `owner_kind`: its
/// controlling owner (the previous one too when the reference changed), or, for an orphan
/// that appeared or changed labels, the object itself, as upstream's `updatePod`/`addPod`
/// handlers decide. Deleted orphans concern nobody.
pub fn route_owned_change(owner_kind: &str, change: Change<'_>, mut to: impl FnMut(OwnedChange)) {
    let ours = |object: &StoredObject| {
        controller_of(object)
            .filter(|r| r.kind == owner_kind)
            .map(|r| ObjectName::new(object.key.namespace.clone(), r.name))
    };
    let object = change.object();
    let current = controller_of(object);
    let mut orphan_changed = current.is_none() && matches!(change, Change::Added(_));
    if let Some(old) = change.old() {
        if controller_of(old) != current {
            if let Some(owner) = ours(old) {
                to(OwnedChange::Owner(owner));
            }
            orphan_changed |= current.is_none();
        }
        orphan_changed |= current.is_none() && old.labels != object.labels;
    }
    match ours(object) {
        Some(owner) => to(OwnedChange::Owner(owner)),
        None if current.is_none() && orphan_changed && !matches!(change, Change::Deleted(_)) => {
            to(OwnedChange::Orphan(ObjectName::of(object)));
        }
        None => {}
    }
}

/// A candidate object with its parsed value (claims read owner references from it; callers
/// keep it for their own reads).
#[derive(Debug, Clone)]
pub struct Candidate {
    pub object: ObjectRef,
    pub value: Value,
}

impl Candidate {
    pub fn new(object: ObjectRef) -> Candidate {
        let value = object.value();
        Candidate { object, value }
    }

    pub fn name(&self) -> &str {
        &self.object.key.name
    }
}

/// The objects of store resource `resource` in `namespace` a claim must look at: those
/// `selector` matches (read from the store's label index when the selector has an equality
/// requirement, else from the namespace's range) and `owned`, the objects the owner's uid
/// finds in [`CONTROLLER_UID_INDEX`] (to release those that stopped matching), read again
/// from `snapshot` so every candidate is as fresh as the snapshot. In name order.
pub fn candidates(
    snapshot: &StoreSnapshot,
    resource: &str,
    namespace: &str,
    selector: Option<&LabelSelector>,
    owned: &[ObjectRef],
) -> Vec<ObjectRef> {
    let mut found: BTreeMap<String, ObjectRef> = BTreeMap::new();
    if let Some(selector) = selector {
        let matching: Vec<&ObjectRef> = match selector.indexable() {
            Some((k, v)) => snapshot.with_label(resource, Some(namespace), k, v),
            None => snapshot.range(resource, Some(namespace), None).collect(),
        };
        for object in matching {
            if selector.matches(&object.labels) {
                found.insert(object.key.name.clone(), object.clone());
            }
        }
    }
    for cached in owned {
        if found.contains_key(&cached.key.name) || cached.key.namespace != namespace {
            continue;
        }
        if let Some(fresh) = snapshot.get(&cached.key) {
            found.insert(fresh.key.name.clone(), fresh.clone());
        }
    }
    found.into_values().collect()
}

/// What a claim does with one candidate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decision {
    /// Already this owner's, and matched.
    Keep,
    /// An orphan this owner takes.
    Adopt,
    /// This owner's, no longer matched: let go.
    Release,
    /// Not this owner's business.
    Ignore,
}

/// The owner side of a decision.
#[derive(Debug, Clone, Copy)]
pub struct OwnerFacts<'a> {
    pub uid: &'a str,
    pub namespace: &'a str,
    pub deleting: bool,
}

/// The candidate side of a decision.
#[derive(Debug, Clone, Copy)]
pub struct CandidateFacts<'a> {
    pub namespace: &'a str,
    /// The uid of its controller, if it has one.
    pub controller_uid: Option<&'a str>,
    pub matches: bool,
    pub deleting: bool,
}

/// Upstream's `ClaimObject` decision for one candidate.
pub fn decide(owner: OwnerFacts<'_>, candidate: CandidateFacts<'_>) -> Decision {
    match candidate.controller_uid {
        Some(uid) if uid != owner.uid => Decision::Ignore,
        Some(_) if candidate.matches => Decision::Keep,
        // A deleted owner's objects stay with it until the garbage collector acts.
        Some(_) if owner.deleting => Decision::Ignore,
        Some(_) => Decision::Release,
        None if owner.deleting || !candidate.matches || candidate.deleting => Decision::Ignore,
        None if !owner.namespace.is_empty() && owner.namespace != candidate.namespace => {
            Decision::Ignore
        }
        None => Decision::Adopt,
    }
}

/// Why a claim could not finish; the caller retries the whole reconcile.
#[derive(Debug, thiserror::Error)]
pub enum ClaimError {
    /// The owner is gone, replaced or being deleted, so it may not adopt.
    #[error("{kind} {namespace}/{name} may not adopt: {reason}")]
    CannotAdopt {
        kind: &'static str,
        namespace: String,
        name: String,
        reason: String,
    },
    #[error("{action} {kind} {object}: {source}")]
    Api {
        action: &'static str,
        kind: &'static str,
        /// `namespace/name`.
        object: String,
        source: Box<ClientError>,
    },
}

impl From<ClaimError> for ReconcileError {
    fn from(e: ClaimError) -> ReconcileError {
        match e {
            ClaimError::Api { source, .. } => ReconcileError::Api(*source),
            other => ReconcileError::Invalid(other.to_string()),
        }
    }
}

/// Claims candidates for one owner. One per reconcile (it remembers whether the owner was
/// found adoptable).
pub struct RefManager<'a> {
    client: &'a Client,
    owner_info: &'static ResourceInfo,
    owner: &'a Value,
    selector: Option<&'a LabelSelector>,
    owned: &'static ResourceInfo,
    /// The fresh check before the first adoption, once made.
    adoptable: Option<Result<(), String>>,
    /// A finalizer adoption adds with the reference (a Job's tracking finalizer).
    finalizer: Option<&'static str>,
}

impl<'a> RefManager<'a> {
    /// `owner` is the owner's value (kind `owner_info`), `selector` its parsed selector
    /// (`None` matches nothing), `owned` the candidates' kind.
    pub fn new(
        client: &'a Client,
        owner_info: &'static ResourceInfo,
        owner: &'a Value,
        selector: Option<&'a LabelSelector>,
        owned: &'static ResourceInfo,
    ) -> RefManager<'a> {
        RefManager {
            client,
            owner_info,
            owner,
            selector,
            owned,
            adoptable: None,
            finalizer: None,
        }
    }

    /// Adoption also adds `finalizer`, as upstream's pod claims for Jobs add their tracking
    /// finalizer in the same patch.
    pub fn adding_finalizer(mut self, finalizer: &'static str) -> RefManager<'a> {
        self.finalizer = Some(finalizer);
        self
    }

    /// The candidates this owner controls after adopting and releasing (adopted ones as the
    /// store holds them after the adoption). Every candidate is handled before the first
    /// failure is returned, as upstream aggregates them.
    pub async fn claim(
        &mut self,
        candidates: Vec<Candidate>,
    ) -> Result<Vec<Candidate>, ClaimError> {
        let owner = OwnerFacts {
            uid: objects::uid(self.owner),
            namespace: self
                .owner
                .pointer("/metadata/namespace")
                .and_then(Value::as_str)
                .unwrap_or(""),
            deleting: objects::is_deleting(self.owner),
        };
        let mut claimed = Vec::with_capacity(candidates.len());
        let mut first_error = None;
        for candidate in candidates {
            let controller = objects::controller_ref(&candidate.value);
            let facts = CandidateFacts {
                namespace: &candidate.object.key.namespace,
                controller_uid: controller.as_ref().map(|c| c.uid.as_str()),
                matches: self
                    .selector
                    .is_some_and(|s| s.matches(&candidate.object.labels)),
                deleting: objects::is_deleting(&candidate.value),
            };
            let result = match decide(owner, facts) {
                Decision::Keep => {
                    claimed.push(candidate);
                    Ok(())
                }
                Decision::Ignore => Ok(()),
                Decision::Release => self.release(&candidate).await,
                Decision::Adopt => match self.adopt(&candidate).await {
                    Ok(Some(adopted)) => {
                        claimed.push(adopted);
                        Ok(())
                    }
                    Ok(None) => Ok(()),
                    Err(e) => Err(e),
                },
            };
            if let Err(e) = result {
                first_error.get_or_insert(e);
            }
        }
        match first_error {
            Some(e) => Err(e),
            None => Ok(claimed),
        }
    }

    fn owner_name(&self) -> (&'a str, &'a str) {
        let owner: &'a Value = self.owner;
        (
            owner
                .pointer("/metadata/namespace")
                .and_then(Value::as_str)
                .unwrap_or(""),
            objects::name(owner),
        )
    }

    /// Upstream's `CanAdopt`: the owner, read again, still exists, is the same object and is
    /// not being deleted. Checked once per claim.
    fn can_adopt(&mut self) -> Result<(), ClaimError> {
        let (namespace, name) = self.owner_name();
        if self.adoptable.is_none() {
            let uid = objects::uid(self.owner);
            let result = match self.client.get(self.owner_info, namespace, name) {
                None => Err("it no longer exists".to_string()),
                Some(fresh) if fresh.uid != uid => Err(format!(
                    "it was replaced: got uid {}, wanted {uid}",
                    fresh.uid
                )),
                Some(fresh) if fresh.is_deleting() => Err("it is being deleted".to_string()),
                Some(_) => Ok(()),
            };
            self.adoptable = Some(result);
        }
        match &self.adoptable {
            Some(Err(reason)) => Err(ClaimError::CannotAdopt {
                kind: self.owner_info.kind,
                namespace: namespace.to_string(),
                name: name.to_string(),
                reason: reason.clone(),
            }),
            _ => Ok(()),
        }
    }

    /// Adds the controller reference; the object as stored afterwards (`None` if it went).
    async fn adopt(&mut self, candidate: &Candidate) -> Result<Option<Candidate>, ClaimError> {
        self.can_adopt()?;
        let object = &candidate.object;
        let reference = objects::new_controller_ref(
            self.owner,
            &self.owner_info.api_version(),
            self.owner_info.kind,
        );
        let mut patch = json!({"metadata": {
            "ownerReferences": [reference],
            "uid": object.uid,
            "resourceVersion": object.resource_version.to_string(),
        }});
        if let Some(finalizer) = self.finalizer {
            patch["metadata"]["finalizers"] = json!([finalizer]);
        }
        let patched = self
            .client
            .patch(
                self.owned,
                &object.key.namespace,
                &object.key.name,
                None,
                PatchKind::Strategic,
                &patch,
            )
            .await;
        match patched {
            Ok(_) => Ok(self
                .client
                .get(self.owned, &object.key.namespace, &object.key.name)
                .filter(|fresh| fresh.uid == object.uid)
                .map(Candidate::new)),
            // Deleted meanwhile, or replaced under the same name (the uid differs): nothing
            // to adopt.
            Err(e) if e.is_not_found() || e.code() == 422 => Ok(None),
            Err(source) => Err(self.api_error("adopting", object, source)),
        }
    }

    /// Removes this owner's reference.
    async fn release(&self, candidate: &Candidate) -> Result<(), ClaimError> {
        let object = &candidate.object;
        let patch = json!({"metadata": {
            "ownerReferences": [{"$patch": "delete", "uid": objects::uid(self.owner)}],
            "uid": object.uid,
        }});
        let patched = self
            .client
            .patch(
                self.owned,
                &object.key.namespace,
                &object.key.name,
                None,
                PatchKind::Strategic,
                &patch,
            )
            .await;
        match patched {
            Ok(_) => Ok(()),
            // Gone, or replaced (the uid differs): released either way.
            Err(e) if e.is_not_found() || e.code() == 422 => Ok(()),
            Err(source) => Err(self.api_error("releasing", object, source)),
        }
    }

    fn api_error(
        &self,
        action: &'static str,
        object: &StoredObject,
        source: ClientError,
    ) -> ClaimError {
        ClaimError::Api {
            action,
            kind: self.owned.kind,
            object: format!("{}/{}", object.key.namespace, object.key.name),
            source: Box::new(source),
        }
    }
}

#[cfg(test)]
mod tests;
