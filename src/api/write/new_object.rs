//! A new object (POST, and PUT or server-side apply when they create): the namespace's
//! lifecycle (a create in a missing or terminating namespace is refused, `namespace_lifecycle`),
//! the name or generateName (a collision of a generated name is retried), the server's
//! metadata, the kind's preparation, and the Create mutation.
//!
//! A create has no current object to read, so it need not pass the read barrier first
//! (`barrier::Barrier::CommitFirst`, docs/guarantees.md, Reads): the proposal carries `requires_open_namespace`, the state
//! machine checks the name and the namespace against the state the entry commits into, and
//! only a commit answers. A refusal read from this server's copy of the store, which may lag,
//! is not an answer: the create passes the barrier and is decided again on the store as it
//! then stands. Dry runs and kinds whose preparation reads the store (a Service's addresses and
//! ports) pass the barrier before they start.

use serde_json::Value;

use super::admission::webhook::{self, Op};
use crate::api::crd::conversion::Conversion;

use super::admission::{self, Operation};
use super::Written;
use crate::api::barrier::{self, Barrier};
use crate::api::meta::{self, str_at};
use crate::api::request::ApiRequest;
use crate::api::status::{ApiError, Cause, Gr};
use crate::api::{kind_rules, namespace_lifecycle, ownership, validation};
use crate::kube::mutation::{ApplyError, Mutation};
use crate::kube::object::ObjectKey;
use crate::kube::writer::WriteError;

/// Attempts at a fresh generated name before giving up (upstream: a retryable 409).
const GENERATE_ATTEMPTS: usize = 8;

/// How current the store a create checks against is known to be.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum StoreView {
    /// The request passed the read barrier: the store holds every write acknowledged before
    /// it arrived.
    Linearized,
    /// No barrier: the store may lag. Only a commit may answer; a refusal read from the store
    /// is `Unconfirmed`.
    Unconfirmed,
}

enum CreateError {
    /// The answer to give.
    Refused(ApiError),
    /// The store refused the create but may be behind: pass the barrier and decide again.
    Unconfirmed,
}

impl From<ApiError> for CreateError {
    fn from(e: ApiError) -> Self {
        CreateError::Refused(e)
    }
}

/// Creates `object` (decoded, any kind/apiVersion) in the request's resource and namespace.
pub(super) async fn create(
    req: &ApiRequest,
    object: Value,
    dry_run: bool,
) -> Result<Written, ApiError> {
    if barrier::decide(req) != Barrier::CommitFirst {
        return decided(create_from(req, object, dry_run, StoreView::Linearized).await);
    }
    match create_from(req, object, dry_run, StoreView::Unconfirmed).await {
        Ok(written) => Ok(written),
        Err(CreateError::Refused(e)) => Err(e),
        Err(CreateError::Unconfirmed) => {
            barrier::pass(req).await?;
            // Only a POST of its body commits first, so the object is the body: decoding it
            // again on this rare path spares every create a copy of it.
            let object = super::decode(req)?;
            decided(create_from(req, object, dry_run, StoreView::Linearized).await)
        }
    }
}

/// The answer of a create decided on a store that passed the barrier.
fn decided(result: Result<Written, CreateError>) -> Result<Written, ApiError> {
    match result {
        Ok(written) => Ok(written),
        Err(CreateError::Refused(e)) => Err(e),
        Err(CreateError::Unconfirmed) => Err(ApiError::Internal(
            "a create after the read barrier asked for it again".into(),
        )),
    }
}

async fn create_from(
    req: &ApiRequest,
    mut object: Value,
    dry_run: bool,
    view: StoreView,
) -> Result<Written, CreateError> {
    let info = req.info();
    validation::check_type(info, &mut object)?;
    validation::check_value_types(info, &object)?;
    crate::api::options::check_fields(req, info, &object)?;
    validation::check_namespace(info, req.target.namespace.as_deref(), &mut object)?;
    let given = str_at(&object, "/metadata/name").unwrap_or("").to_string();
    let prefix = str_at(&object, "/metadata/generateName")
        .unwrap_or("")
        .to_string();
    if given.is_empty() && prefix.is_empty() {
        return Err(ApiError::invalid(
            info,
            "",
            vec![Cause::required(
                "metadata.name",
                "name or generateName is required",
            )],
        )
        .into());
    }
    let namespace = str_at(&object, "/metadata/namespace")
        .unwrap_or("")
        .to_string();
    let shown_name = if given.is_empty() { &prefix } else { &given };
    if info.namespaced {
        match namespace_lifecycle::check_open(req, &namespace, shown_name) {
            Ok(()) => {}
            Err(_) if view == StoreView::Unconfirmed => return Err(CreateError::Unconfirmed),
            Err(e) => return Err(e.into()),
        }
    }
    admission::admit(
        req,
        Operation::Create {
            object: &mut object,
        },
    )?;
    webhook::mutate(req, Op::Create, &mut object, None).await?;
    let now = meta::now_rfc3339();
    let attempts = if given.is_empty() {
        GENERATE_ATTEMPTS
    } else {
        1
    };
    for attempt in 0..attempts {
        let name = if given.is_empty() {
            meta::generate_name(&prefix)
        } else {
            given.clone()
        };
        validation::check_metadata_maps(info, &name, &object)?;
        validation::check_name(info, &name)?;
        let mut candidate = object.clone();
        meta::prepare_create(info, &mut candidate, &name, &now);
        let reservation = kind_rules::prepare(&req.ctx, info, &name, None, &mut candidate)?;
        ownership::record_write(req, None, &mut candidate);
        if attempt == 0 {
            // Validating admission sees the object as it will be stored; the quota, last,
            // charges only what every other check let through.
            webhook::validate(req, Op::Create, Some(&candidate), None).await?;
            admission::policy::validate(req, Op::Create, Some(&candidate), None)?;
            admission::charge_quota(req, None, &object, dry_run).await?;
        }
        if dry_run {
            let key = ObjectKey::new(info.store_key(), namespace.clone(), name.clone());
            if req.ctx.store.get(&key).is_some() {
                return Err(ApiError::AlreadyExists {
                    gr: Gr::of(info),
                    name,
                }
                .into());
            }
            return Ok(Written::DryRun(candidate));
        }
        if let Some(conversion) = Conversion::of(&req.ctx, info) {
            conversion.to_storage(&mut candidate);
        }
        let key = ObjectKey::new(info.store_key(), namespace.clone(), name.clone());
        let result = super::commit(
            req,
            Mutation::Create {
                key,
                object: candidate,
                requires_open_namespace: info.namespaced,
            },
        )
        .await;
        drop(reservation);
        match result {
            Ok(stored) => return Ok(Written::Stored(stored)),
            Err(WriteError::Rejected(ApplyError::AlreadyExists(_)))
                if given.is_empty() && attempt + 1 < attempts =>
            {
                continue
            }
            // The namespace went away (or is going) after the check above: say which, as
            // the check would have. The store has applied this create's entry, so it shows
            // the namespace's state then or later.
            Err(WriteError::Rejected(ApplyError::NamespaceNotOpen(key))) => {
                return Err(match view {
                    StoreView::Unconfirmed => CreateError::Unconfirmed,
                    StoreView::Linearized => {
                        namespace_lifecycle::check_open(req, &namespace, shown_name)
                            .err()
                            .unwrap_or_else(|| {
                                ApiError::from_write(
                                    info,
                                    WriteError::Rejected(ApplyError::NamespaceNotOpen(key)),
                                )
                            })
                            .into()
                    }
                })
            }
            Err(e) => return Err(ApiError::from_write(info, e).into()),
        }
    }
    Err(ApiError::Internal("could not generate a unique name".into()).into())
}
