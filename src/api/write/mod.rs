//! The write step every verb ends in: create, update, patch (server-side apply included),
//! delete and deletecollection, and the subresources that write (`api::subresource`). A verb
//! turns its request into what it asks for; from there every write takes the same stages:
//!
//! 1. **decode**: the verb's part ([`decode`] for an object body; a patch applied to the
//!    current object; a Scale's replicas; DeleteOptions);
//! 2. **checks of the object against the request**: type, namespace, name, value types,
//!    `fieldValidation` (`validation`, `options`);
//! 3. **admission** ([`admission::admit`]): where admission plugins change or refuse a write
//!    (the ResourceQuota plugin, [`admission::charge_quota`], runs after stage 5, on the object
//!    as it will be stored);
//! 4. **metadata the server owns** (`meta`): uid, timestamps, generation, what an update may
//!    not change; before the defaults, since they and the kind's validation read it;
//! 5. **the kind's preparation** (`kind_rules::prepare`): defaults, status rules, the kind's
//!    validation, a Service's addresses and ports;
//! 6. **field ownership** (`ownership`): managedFields;
//! 7. **the Mutation**, handed to the Writer by `commit`; a refusal becomes the API error.
//!
//! Entry points: [`create`] for a new object (`new_object`: generated names, the namespace's
//! lifecycle, and a create that commits before the read barrier, `barrier::Barrier`), and
//! [`read_modify_write`] for every write that starts from the stored object: the verb plans an
//! attempt from what it read ([`Plan`]), this module carries it out (`replace`, or a deletion
//! mark or removal here), and reads and plans again when a concurrent write won, as upstream's
//! GuaranteedUpdate does. Deletion (DeleteOptions, grace periods, finalizers, namespaces) is
//! planned in `deletion`, shared by DELETE and deletecollection.

pub(crate) mod admission;
mod deletion;
mod new_object;
mod replace;

use http::{Response, StatusCode};
use serde_json::Value;

use crate::api::crd::conversion::Conversion;

use self::admission::Operation;
use super::request::ApiRequest;
use super::status::ApiError;
use super::{body, meta, namespace_lifecycle, output, ApiBody};
use crate::kube::mutation::{Mutation, Precondition};
use crate::kube::object::ObjectRef;
use crate::kube::writer::WriteError;

pub use self::deletion::{delete, DeleteOptions, FOREGROUND_FINALIZER, ORPHAN_FINALIZER};

/// How often a write plans again after losing a race to a concurrent write (GuaranteedUpdate).
const MAX_ATTEMPTS: usize = 8;

/// The result of a write: what the store holds now, or with dryRun what it would hold.
pub enum Written {
    Stored(ObjectRef),
    DryRun(Value),
}

impl Written {
    pub fn respond(
        &self,
        req: &ApiRequest,
        code: StatusCode,
    ) -> Result<Response<ApiBody>, ApiError> {
        match self {
            Written::Stored(o) => output::stored(req, code, o),
            Written::DryRun(v) => output::object(req, code, v),
        }
    }
}

/// What a write that started from the stored object did.
pub enum Outcome {
    /// There was none and the plan created it.
    Created(Written),
    /// Replaced or marked; or nothing changed, and this is the object as it stands.
    Updated(Written),
    /// Deleted: the object's last state (with dryRun, the state it would have been deleted in).
    Removed(ObjectRef),
}

impl Outcome {
    /// The object in the response: 201 for a created one, 200 otherwise.
    pub fn respond(&self, req: &ApiRequest) -> Result<Response<ApiBody>, ApiError> {
        match self {
            Outcome::Created(written) => written.respond(req, StatusCode::CREATED),
            Outcome::Updated(written) => written.respond(req, StatusCode::OK),
            Outcome::Removed(object) => output::stored(req, StatusCode::OK, object),
        }
    }
}

/// What a lost race does: the store's version moved on between the read and the write.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OnConflict {
    /// Read the object again and plan again.
    Retry,
    /// Answer 409: the plan rests on the version read (a precondition the client gave).
    Fail,
}

/// One attempt of a write that starts from the stored object, as its verb planned it.
pub enum Plan {
    /// Create the object (a PUT of a kind that allows it, an apply of a missing object).
    Create(Value),
    /// Replace the stored object (`old`, as parsed) with the client's version `wanted`: every
    /// stage of the write step. On the `status` subresource only `status` is taken.
    Replace {
        old: Value,
        wanted: Value,
        on_conflict: OnConflict,
    },
    /// Store `object`, which differs from the stored one only in metadata or fields the server
    /// owns (a deletion mark, finalizers): admission, then the Writer, with no defaults,
    /// validation or ownership of its own.
    Mark {
        object: Value,
        on_conflict: OnConflict,
    },
    /// Delete the stored object, on the condition that it is still the version read.
    Remove,
    /// Nothing to write: this is the answer.
    Unchanged(Written),
}

/// Decodes an object body (JSON, YAML or protobuf, by Content-Type).
pub fn decode(req: &ApiRequest) -> Result<Value, ApiError> {
    body::decode_object(&req.body, body::encoding(&req.content_type)?)
}

/// `metadata.resourceVersion` of a body: `None` when absent or empty, 400 when not a number.
pub fn body_rv(object: &Value) -> Result<Option<u64>, ApiError> {
    match meta::str_at(object, "/metadata/resourceVersion") {
        None | Some("") => Ok(None),
        Some(s) => s
            .parse()
            .map(Some)
            .map_err(|_| ApiError::BadRequest(format!("invalid resource version: {s:?}"))),
    }
}

/// Whether the request writes the `status` subresource, or a CertificateSigningRequest's
/// `approval` (only `status` changes; admission narrows what each may change within it).
pub fn status_only(req: &ApiRequest) -> bool {
    matches!(
        req.target.subresource.as_deref(),
        Some("status" | "approval")
    )
}

/// Creates `object` (decoded, any kind/apiVersion) in the request's resource and namespace.
pub async fn create(req: &ApiRequest, object: Value) -> Result<Written, ApiError> {
    new_object::create(req, object, req.query.dry_run).await
}

/// Reads the object `name` of the request's resource and namespace, asks `plan` what to do
/// with it (`None`: there is none; a plan other than [`Plan::Create`] then answers 404), and
/// carries the plan out. A write that lost a race to a concurrent one is planned again from the
/// new version, unless its plan said [`OnConflict::Fail`]; after `MAX_ATTEMPTS`, 409.
pub async fn read_modify_write<F>(
    req: &ApiRequest,
    name: &str,
    dry_run: bool,
    mut plan: F,
) -> Result<Outcome, ApiError>
where
    F: FnMut(Option<&ObjectRef>) -> Result<Plan, ApiError>,
{
    let info = req.info();
    let key = req.target.key(name);
    for _ in 0..MAX_ATTEMPTS {
        let current = req.ctx.store.get(&key);
        let (result, on_conflict) = match (plan(current.as_ref())?, current) {
            (Plan::Create(object), _) => {
                return new_object::create(req, object, dry_run)
                    .await
                    .map(Outcome::Created)
            }
            (Plan::Unchanged(written), _) => return Ok(Outcome::Updated(written)),
            (_, None) => return Err(ApiError::not_found(info, name)),
            (
                Plan::Replace {
                    old,
                    wanted,
                    on_conflict,
                },
                Some(current),
            ) => {
                let result = replace::replace(req, &current, old, wanted, dry_run).await;
                (result.map(Outcome::Updated), on_conflict)
            }
            (
                Plan::Mark {
                    object,
                    on_conflict,
                },
                Some(current),
            ) => {
                let result = mark(req, &current, object, dry_run).await;
                (result.map(Outcome::Updated), on_conflict)
            }
            (Plan::Remove, Some(current)) => {
                let result = remove(req, &current, dry_run).await;
                (result.map(Outcome::Removed), OnConflict::Retry)
            }
        };
        match result {
            // Carrying a plan out answers Conflict only for a store precondition that failed.
            Err(ApiError::Conflict { .. }) if on_conflict == OnConflict::Retry => continue,
            result => return result,
        }
    }
    Err(ApiError::conflict_modified(info, name))
}

/// Hands `mutation` to the Writer: every write of an API request reaches it here.
async fn commit(req: &ApiRequest, mutation: Mutation) -> Result<ObjectRef, WriteError> {
    req.ctx.writer.write(mutation).await
}

/// Writes `object` over `current`, on the condition that the store still holds `current`'s
/// resourceVersion (a concurrent change comes back as a conflict).
async fn over(
    req: &ApiRequest,
    current: &ObjectRef,
    mut object: Value,
) -> Result<ObjectRef, WriteError> {
    if let Some(conversion) = Conversion::of(&req.ctx, req.info()) {
        conversion.to_storage(&mut object);
    }
    commit(
        req,
        Mutation::Update {
            key: current.key.clone(),
            object,
            precondition: Precondition::at(current.resource_version),
        },
    )
    .await
}

/// Carries out [`Plan::Mark`]. A DELETE's mark is admitted as the deletion it starts.
async fn mark(
    req: &ApiRequest,
    current: &ObjectRef,
    mut object: Value,
    dry_run: bool,
) -> Result<Written, ApiError> {
    let deleting = req.method == http::Method::DELETE;
    let operation = if deleting {
        Operation::Delete { current }
    } else {
        Operation::Update {
            current,
            object: &mut object,
        }
    };
    admission::admit(req, operation)?;
    if admission::webhook::any(req) {
        let old = current.value();
        if deleting {
            admission::webhook::delete(req, &old).await?;
        } else {
            let op = admission::webhook::Op::Update;
            admission::webhook::mutate(req, op, &mut object, Some(&old)).await?;
            admission::webhook::validate(req, op, Some(&object), Some(&old)).await?;
        }
    }
    if admission::policy::any(req) {
        let op = admission::webhook::Op::Update;
        let old = current.value();
        if deleting {
            admission::policy::validate(req, admission::webhook::Op::Delete, None, Some(&old))?;
        } else {
            admission::policy::validate(req, op, Some(&object), Some(&old))?;
        }
    }
    if dry_run {
        return Ok(Written::DryRun(object));
    }
    let finalized = is_finalized(req.info(), &object);
    let stored = over(req, current, object)
        .await
        .map_err(|e| ApiError::from_write(req.info(), e))?;
    if finalized {
        remove_finalized(req, &stored).await?;
    }
    Ok(Written::Stored(stored))
}

/// Upstream `shouldDeleteDuringUpdate`: a write that leaves an object deleting with no
/// finalizer and no grace period running (a pod in graceful deletion waits for its node's
/// final DELETE) removes it. A namespace also waits for its `spec.finalizers` (the namespace
/// controller's).
fn is_finalized(info: &crate::kube::resources::ResourceInfo, object: &Value) -> bool {
    if namespace_lifecycle::is_namespace(info) {
        return namespace_lifecycle::finalized(object);
    }
    meta::is_deleting(object)
        && meta::finalizers(object).is_empty()
        && object
            .pointer("/metadata/deletionGracePeriodSeconds")
            .and_then(Value::as_i64)
            .unwrap_or(0)
            == 0
}

/// Removes `stored`, whose last finalizer has just gone (a watcher sees MODIFIED, then
/// DELETED). A concurrent change in between decides what happens next.
async fn remove_finalized(req: &ApiRequest, stored: &ObjectRef) -> Result<(), ApiError> {
    let deleted = commit(
        req,
        Mutation::Delete {
            key: stored.key.clone(),
            precondition: Precondition {
                resource_version: Some(stored.resource_version),
                uid: Some(stored.uid.clone()),
            },
        },
    )
    .await;
    match deleted {
        Ok(_)
        | Err(WriteError::Rejected(
            crate::kube::mutation::ApplyError::NotFound(_)
            | crate::kube::mutation::ApplyError::Conflict { .. },
        )) => Ok(()),
        Err(e) => Err(ApiError::from_write(req.info(), e)),
    }
}

/// Carries out [`Plan::Remove`].
async fn remove(
    req: &ApiRequest,
    current: &ObjectRef,
    dry_run: bool,
) -> Result<ObjectRef, ApiError> {
    admission::admit(req, Operation::Delete { current })?;
    if admission::webhook::any(req) {
        admission::webhook::delete(req, &current.value()).await?;
    }
    if admission::policy::any(req) {
        let op = admission::webhook::Op::Delete;
        admission::policy::validate(req, op, None, Some(&current.value()))?;
    }
    if dry_run {
        return Ok(current.clone());
    }
    commit(
        req,
        Mutation::Delete {
            key: current.key.clone(),
            precondition: Precondition {
                resource_version: Some(current.resource_version),
                uid: Some(current.uid.clone()),
            },
        },
    )
    .await
    .map_err(|e| ApiError::from_write(req.info(), e))
}
