//! PUT (update) of an object or its `status`, and `replace`, the step shared with PATCH that
//! turns "current version + wanted version" into an Update mutation: status rules, server-owned
//! metadata, generation, kind defaults, no-op detection, and the final delete when the last
//! finalizer of a deleting object is removed.

use http::{Response, StatusCode};
use serde_json::Value;

use super::create::{self, Written};
use super::meta;
use super::request::ApiRequest;
use super::status::{ApiError, Gr};
use super::{body, kinds, lease, validation, ApiBody};
use crate::kube::mutation::{ApplyError, Mutation, Precondition};
use crate::kube::object::ObjectRef;
use crate::kube::writer::WriteError;

/// How often a write retries internally after losing a race (GuaranteedUpdate).
pub const MAX_ATTEMPTS: usize = 8;

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

/// Whether a write's error is a lost race worth retrying.
pub fn is_conflict(e: &ApiError) -> bool {
    matches!(e, ApiError::Conflict { .. })
}

/// Serves PUT on a named object or its status.
pub async fn put(req: &ApiRequest) -> Result<Response<ApiBody>, ApiError> {
    let info = req.info();
    let name = req.name().to_string();
    super::options::check(req, super::options::Options::Update)?;
    let mut object = body::decode_object(&req.body, body::encoding(&req.content_type)?)?;
    validation::check_type(info, &mut object)?;
    validation::check_body_name(&mut object, &name)?;
    validation::check_namespace(info, req.target.namespace.as_deref(), &mut object)?;
    let status_only = req.target.subresource.as_deref() == Some("status");
    let client_rv = body_rv(&object)?;
    for _ in 0..MAX_ATTEMPTS {
        let Some(current) = req.ctx.store.get(&req.target.key(&name)) else {
            if kinds::allows_create_on_update(info) && !status_only {
                let written = create::create(req, object.clone()).await?;
                return written.respond(req, StatusCode::CREATED);
            }
            return Err(ApiError::not_found(info, &name));
        };
        if client_rv.is_none() && lease::is_lease(info) && !status_only {
            return Err(lease::missing_rv(info, &name));
        }
        if client_rv.is_some_and(|rv| rv != current.resource_version) {
            return Err(ApiError::conflict_modified(info, &name));
        }
        if let Some(uid) = meta::str_at(&object, "/metadata/uid").filter(|u| !u.is_empty()) {
            if uid != current.uid {
                return Err(ApiError::Conflict {
                    gr: Gr::of(info),
                    name: name.clone(),
                    detail: format!(
                        "Precondition failed: UID in precondition: {uid}, UID in object meta: {}",
                        current.uid
                    ),
                });
            }
        }
        match replace(req, &current, object.clone(), status_only).await {
            Err(e) if is_conflict(&e) && client_rv.is_none() => continue,
            Err(e) => return Err(e),
            Ok(written) => return written.respond(req, StatusCode::OK),
        }
    }
    Err(ApiError::conflict_modified(info, &name))
}

/// Writes `object` over `current`, on the condition that the store still holds `current`'s
/// resourceVersion (a concurrent change comes back as a conflict).
pub async fn write_over(
    req: &ApiRequest,
    current: &ObjectRef,
    object: Value,
) -> Result<ObjectRef, WriteError> {
    req.ctx
        .writer
        .write(Mutation::Update {
            key: current.key.clone(),
            object,
            precondition: Precondition::at(current.resource_version),
        })
        .await
}

/// Writes `wanted` over `current` (both full objects of the request's kind). With
/// `status_only`, only `status` is taken from `wanted`; otherwise `status` is kept from
/// `current` for kinds with a status subresource. A store conflict comes back as
/// `ApiError::Conflict` for the caller to retry.
pub async fn replace(
    req: &ApiRequest,
    current: &ObjectRef,
    wanted: Value,
    status_only: bool,
) -> Result<Written, ApiError> {
    replace_parsed(req, current, current.value(), wanted, status_only).await
}

/// [`replace`] for a caller that already holds `current` parsed (`old`), as a patch does.
pub async fn replace_parsed(
    req: &ApiRequest,
    current: &ObjectRef,
    old: Value,
    wanted: Value,
    status_only: bool,
) -> Result<Written, ApiError> {
    let info = req.info();
    validation::check_value_types(info, &wanted)?;
    super::options::check_fields(req, info, &wanted)?;
    let name = current.key.name.clone();
    let mut new = if status_only {
        let mut merged = old.clone();
        match wanted.get("status") {
            Some(s) => merged["status"] = s.clone(),
            None => {
                if let Some(m) = merged.as_object_mut() {
                    m.remove("status");
                }
            }
        }
        merged
    } else {
        let mut new = wanted;
        if info.has_status {
            match old.get("status") {
                Some(s) => new["status"] = s.clone(),
                None => {
                    if let Some(m) = new.as_object_mut() {
                        m.remove("status");
                    }
                }
            }
        }
        new
    };
    validation::check_metadata_maps(info, &name, &new)?;
    meta::prepare_update(info, &old, &mut new);
    // The stored resourceVersion is the store's; keep the body's out of the comparison.
    if let Some(md) = new.get_mut("metadata").and_then(Value::as_object_mut) {
        md.remove("resourceVersion");
    }
    let reservation = kinds::prepare(&req.ctx, info, &name, Some(&old), &mut new)?;
    super::ownership::record_write(req, Some(&old), &mut new);
    if meta::same_but_rv(&old, &new) {
        return Ok(Written::Stored(current.clone()));
    }
    if req.query.dry_run {
        new["metadata"]["resourceVersion"] = Value::String(current.resource_version.to_string());
        return Ok(Written::DryRun(new));
    }
    // Upstream `shouldDeleteDuringUpdate`: deleting, no finalizers left and no grace period
    // running (a pod in graceful deletion waits for its node's final DELETE). Namespaces
    // finish through their purge task (spec.finalizers), not here.
    let finalized = meta::is_deleting(&new)
        && meta::finalizers(&new).is_empty()
        && new
            .pointer("/metadata/deletionGracePeriodSeconds")
            .and_then(Value::as_i64)
            .unwrap_or(0)
            == 0
        && !(info.group.is_empty() && info.plural == "namespaces");
    let result = write_over(req, current, new).await;
    drop(reservation);
    let stored = result.map_err(|e| ApiError::from_write(info, e))?;
    if finalized {
        // The last finalizer is gone: the object goes (MODIFIED, then DELETED).
        let deleted = req
            .ctx
            .writer
            .write(Mutation::Delete {
                key: stored.key.clone(),
                precondition: Precondition {
                    resource_version: Some(stored.resource_version),
                    uid: Some(stored.uid.clone()),
                },
            })
            .await;
        match deleted {
            Ok(_) | Err(WriteError::Rejected(ApplyError::NotFound(_))) => {}
            Err(WriteError::Rejected(ApplyError::Conflict { .. })) => {
                // Someone changed it in between; their write decides what happens next.
            }
            Err(e) => return Err(ApiError::from_write(info, e)),
        }
    }
    Ok(Written::Stored(stored))
}
