//! Deletion of one object, for DELETE and deletecollection: DeleteOptions (body and query),
//! preconditions, and the plan: a namespace is marked Terminating (the namespace controller
//! empties it, then finalizes it: `namespace_lifecycle`); an object with finalizers, a pod still
//! running on its node, or a foreground or orphan deletion (the garbage collector's
//! finalizers, `Propagation`) gets a deletionTimestamp; anything else is removed.

use serde_json::{json, Value};

use super::{Outcome, Plan, Written};
use crate::api::request::ApiRequest;
use crate::api::status::{ApiError, Cause, Gr};
use crate::api::{body, meta, namespace_lifecycle, options};
use crate::kube::object::ObjectRef;

/// The DeleteOptions of a request (body fields, overridden by query parameters).
#[derive(Debug, Clone, Default)]
pub struct DeleteOptions {
    pub uid: Option<String>,
    pub resource_version: Option<String>,
    pub grace_period_seconds: Option<i64>,
    pub dry_run: bool,
    /// `propagationPolicy` (or the legacy `orphanDependents`); the kind's default when unset.
    pub propagation: Option<Propagation>,
}

/// What happens to an object's dependents (objects naming it in `ownerReferences`) when it is
/// deleted; the garbage collector carries it out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Propagation {
    /// The object goes now; the collector deletes its dependents afterwards.
    Background,
    /// The object stays (finalizer `foregroundDeletion`) until the collector has deleted the
    /// dependents that block its deletion.
    Foreground,
    /// The object stays (finalizer `orphan`) until the collector has removed it from its
    /// dependents' ownerReferences; they are kept.
    Orphan,
}

/// The finalizers the garbage collector owns.
pub const FOREGROUND_FINALIZER: &str = "foregroundDeletion";
pub const ORPHAN_FINALIZER: &str = "orphan";

impl Propagation {
    /// The default of a kind when a delete names none: Jobs orphan their pods (batch/v1's
    /// strategy, which is why kubectl asks for Background), every other kind deletes its
    /// dependents in the background.
    pub fn default_for(info: &crate::kube::resources::ResourceInfo) -> Propagation {
        if info.group == "batch" && info.plural == "jobs" {
            Propagation::Orphan
        } else {
            Propagation::Background
        }
    }

    /// The finalizer that makes the object wait for the collector, if any.
    pub fn finalizer(self) -> Option<&'static str> {
        match self {
            Propagation::Background => None,
            Propagation::Foreground => Some(FOREGROUND_FINALIZER),
            Propagation::Orphan => Some(ORPHAN_FINALIZER),
        }
    }
}

fn options_invalid(cause: Cause) -> ApiError {
    ApiError::Invalid {
        kind: "DeleteOptions".into(),
        group: "meta.k8s.io".into(),
        name: String::new(),
        causes: vec![cause],
    }
}

impl DeleteOptions {
    /// The options of a DELETE: its query parameters and its body, if any.
    pub fn from_request(req: &ApiRequest) -> Result<DeleteOptions, ApiError> {
        options::check(req, options::Options::Delete)?;
        let body = if req.body.iter().all(u8::is_ascii_whitespace) {
            json!({})
        } else {
            body::decode_object(&req.body, body::encoding(&req.content_type)?)?
        };
        DeleteOptions::from_body(req, &body)
    }

    /// The options in a DeleteOptions object `body` (a DELETE's body, or the one an eviction
    /// carries), with the request's query parameters taking precedence.
    pub fn from_body(req: &ApiRequest, body: &Value) -> Result<DeleteOptions, ApiError> {
        let policy = req
            .query
            .propagation_policy
            .clone()
            .or_else(|| meta::str_at(body, "/propagationPolicy").map(str::to_string));
        if let Some(p) = policy
            .as_ref()
            .filter(|p| !matches!(p.as_str(), "Foreground" | "Background" | "Orphan"))
        {
            return Err(options_invalid(Cause {
                reason: "FieldValueNotSupported",
                field: "propagationPolicy".into(),
                message: format!(
                    "Unsupported value: {p:?}: supported values: \"Foreground\", \"Background\", \"Orphan\", \"nil\""
                ),
            }));
        }
        let grace = req
            .query
            .grace_period_seconds
            .or_else(|| body.get("gracePeriodSeconds").and_then(Value::as_i64));
        if grace.is_some_and(|g| g < 0) {
            return Err(options_invalid(Cause::invalid(
                "gracePeriodSeconds",
                &json!(grace),
                "must be greater than or equal to 0",
            )));
        }
        let body_dry_run = body
            .get("dryRun")
            .and_then(Value::as_array)
            .is_some_and(|a| !a.is_empty());
        if let Some(bad) = body
            .get("dryRun")
            .and_then(Value::as_array)
            .filter(|a| a.iter().any(|v| v != "All"))
        {
            let shown: Vec<String> = bad.iter().map(|v| v.to_string()).collect();
            return Err(options_invalid(Cause {
                reason: "FieldValueNotSupported",
                field: "dryRun".into(),
                message: format!(
                    "Unsupported value: []string{{{}}}: supported values: \"All\"",
                    shown.join(", ")
                ),
            }));
        }
        let propagation = match policy.as_deref() {
            Some("Foreground") => Some(Propagation::Foreground),
            Some("Background") => Some(Propagation::Background),
            Some("Orphan") => Some(Propagation::Orphan),
            _ => match body.get("orphanDependents").and_then(Value::as_bool) {
                Some(true) => Some(Propagation::Orphan),
                Some(false) => Some(Propagation::Background),
                None => None,
            },
        };
        Ok(DeleteOptions {
            propagation,
            uid: meta::str_at(body, "/preconditions/uid").map(str::to_string),
            resource_version: meta::str_at(body, "/preconditions/resourceVersion")
                .map(str::to_string),
            grace_period_seconds: grace,
            dry_run: req.query.dry_run || body_dry_run,
        })
    }
}

fn precondition_failed(req: &ApiRequest, name: &str, detail: String) -> ApiError {
    ApiError::Conflict {
        gr: Gr::of(req.info()),
        name: name.to_string(),
        detail,
    }
}

/// The grace period a pod gets: none unless it is bound to a node and still running there.
fn pod_grace(value: &Value, requested: Option<i64>) -> i64 {
    let bound = meta::str_at(value, "/spec/nodeName").is_some_and(|n| !n.is_empty());
    let terminal = matches!(
        meta::str_at(value, "/status/phase"),
        Some("Succeeded" | "Failed")
    );
    if !bound || terminal {
        return 0;
    }
    requested.unwrap_or_else(|| {
        value
            .pointer("/spec/terminationGracePeriodSeconds")
            .and_then(Value::as_i64)
            .unwrap_or(30)
    })
}

/// Deletes (or starts deleting) the object `name` of the request's resource and namespace:
/// [`Outcome::Removed`] when it is gone, [`Outcome::Updated`] while its deletion is pending
/// (finalizers, a pod's grace period, a namespace's purge).
pub async fn delete(
    req: &ApiRequest,
    name: &str,
    opts: &DeleteOptions,
) -> Result<Outcome, ApiError> {
    super::read_modify_write(req, name, opts.dry_run, |current| {
        plan(req, name, opts, current)
    })
    .await
}

/// One attempt of a deletion.
fn plan(
    req: &ApiRequest,
    name: &str,
    opts: &DeleteOptions,
    current: Option<&ObjectRef>,
) -> Result<Plan, ApiError> {
    let info = req.info();
    let current = current.ok_or_else(|| ApiError::not_found(info, name))?;
    if let Some(uid) = opts.uid.as_deref().filter(|u| *u != current.uid) {
        return Err(precondition_failed(
            req,
            name,
            format!(
                "Precondition failed: UID in precondition: {uid}, UID in object meta: {}",
                current.uid
            ),
        ));
    }
    if let Some(rv) = opts
        .resource_version
        .as_deref()
        .filter(|rv| *rv != current.resource_version.to_string())
    {
        return Err(precondition_failed(req, name, format!(
            "Precondition failed: ResourceVersion in precondition: {rv}, ResourceVersion in object meta: {}",
            current.resource_version
        )));
    }
    if namespace_lifecycle::is_namespace(info) {
        return Ok(Plan::Mark {
            object: namespace_lifecycle::deletion_mark(info, current)?,
            on_conflict: super::OnConflict::Fail,
        });
    }
    let mut value = current.value();
    let grace = if info.group.is_empty() && info.plural == "pods" {
        pod_grace(&value, opts.grace_period_seconds)
    } else {
        0
    };
    // Foreground and orphan deletions wait for the garbage collector behind its finalizer.
    let propagation = opts
        .propagation
        .unwrap_or_else(|| Propagation::default_for(info));
    let mut finalizers = meta::finalizers(&value);
    let gc_finalizer = propagation
        .finalizer()
        .filter(|f| !finalizers.iter().any(|have| have == f));
    if let Some(f) = gc_finalizer {
        finalizers.push(f.to_string());
        meta::metadata_mut(&mut value).insert("finalizers".into(), json!(finalizers));
    }
    // A CustomResourceDefinition goes only after its objects (`controllers::crd_cleanup`): as
    // in kube-apiserver, its deletion adds the cleanup finalizer.
    let cleanup = crate::api::crd::definition::CLEANUP_FINALIZER;
    if crate::api::crd::is_definition(info)
        && !meta::is_deleting(&value)
        && !finalizers.iter().any(|f| f == cleanup)
    {
        finalizers.push(cleanup.to_string());
        meta::metadata_mut(&mut value).insert("finalizers".into(), json!(finalizers));
    }
    if finalizers.is_empty() && grace == 0 {
        return Ok(Plan::Remove);
    }
    if meta::is_deleting(&value) {
        // Already deleting: a new request may only add the collector's finalizer.
        return Ok(match gc_finalizer {
            Some(_) => Plan::Mark {
                object: value,
                on_conflict: super::OnConflict::Retry,
            },
            None => Plan::Unchanged(Written::Stored(current.clone())),
        });
    }
    let when = chrono::Utc::now() + chrono::Duration::seconds(grace);
    let md = meta::metadata_mut(&mut value);
    md.insert("deletionTimestamp".into(), json!(meta::format_time(when)));
    md.insert("deletionGracePeriodSeconds".into(), json!(grace));
    if info.tracks_generation {
        let generation = md.get("generation").and_then(Value::as_i64).unwrap_or(0);
        md.insert("generation".into(), json!(generation + 1));
    }
    Ok(Plan::Mark {
        object: value,
        on_conflict: super::OnConflict::Retry,
    })
}
