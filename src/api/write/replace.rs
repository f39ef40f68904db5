//! A new version of a stored object from the client (PUT, PATCH, and the subresources that
//! change the object through it): the `status` rules, server-owned metadata, generation, the
//! kind's preparation, no-op detection, and the final delete when the last finalizer of a
//! deleting object is removed.

use serde_json::Value;

use super::admission::webhook::{self, Op};
use super::admission::{self, Operation};
use super::Written;
use crate::api::request::ApiRequest;
use crate::api::status::ApiError;
use crate::api::{kind_rules, meta, options, ownership, validation};
use crate::kube::object::ObjectRef;

/// Writes `wanted` over `current` (`old` is `current` parsed; both full objects of the
/// request's kind). On the `status` subresource only `status` is taken from `wanted`;
/// otherwise `status` is kept from `current` for kinds with a status subresource. A store
/// conflict comes back as `ApiError::Conflict` for the caller to retry.
pub(super) async fn replace(
    req: &ApiRequest,
    current: &ObjectRef,
    old: Value,
    wanted: Value,
    dry_run: bool,
) -> Result<Written, ApiError> {
    let info = req.info();
    let status_only = super::status_only(req);
    validation::check_value_types(info, &wanted)?;
    options::check_fields(req, info, &wanted)?;
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
    admission::admit(
        req,
        Operation::Update {
            current,
            object: &mut new,
        },
    )?;
    webhook::mutate(req, Op::Update, &mut new, Some(&old)).await?;
    meta::prepare_update(info, &old, &mut new);
    // The stored resourceVersion is the store's; keep the body's out of the comparison.
    if let Some(md) = new.get_mut("metadata").and_then(Value::as_object_mut) {
        md.remove("resourceVersion");
    }
    let reservation = kind_rules::prepare(&req.ctx, info, &name, Some(&old), &mut new)?;
    ownership::record_write(req, Some(&old), &mut new);
    webhook::validate(req, Op::Update, Some(&new), Some(&old)).await?;
    admission::policy::validate(req, Op::Update, Some(&new), Some(&old))?;
    if meta::same_but_rv(&old, &new) {
        return Ok(Written::Stored(current.clone()));
    }
    admission::charge_quota(req, Some(&old), &new, dry_run).await?;
    if dry_run {
        new["metadata"]["resourceVersion"] = Value::String(current.resource_version.to_string());
        return Ok(Written::DryRun(new));
    }
    let finalized = super::is_finalized(info, &new);
    let result = super::over(req, current, new).await;
    drop(reservation);
    let stored = result.map_err(|e| ApiError::from_write(info, e))?;
    if finalized {
        super::remove_finalized(req, &stored).await?;
    }
    Ok(Written::Stored(stored))
}
