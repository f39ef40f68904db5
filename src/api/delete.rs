//! DELETE of one object and DELETE of a collection: DeleteOptions (body and query),
//! preconditions, finalizers and graceful pod deletion (set deletionTimestamp and answer with
//! the object), otherwise a Delete mutation answered with the object or a success Status as
//! kube-apiserver does. Namespaces are handed to `namespace`.

use http::{Response, StatusCode};
use serde_json::{json, Value};

use super::create::Written;
use super::read::Filter;
use super::request::ApiRequest;
use super::status::{self, ApiError, Cause, Gr};
use super::update::{self, MAX_ATTEMPTS};
use super::{body, kinds, meta, namespace, output, response, ApiBody};
use crate::kube::mutation::{ApplyError, Mutation, Precondition};
use crate::kube::object::ObjectRef;
use crate::kube::writer::WriteError;

/// The DeleteOptions of a request (body fields, overridden by query parameters).
#[derive(Debug, Clone, Default)]
pub struct DeleteOptions {
    pub uid: Option<String>,
    pub resource_version: Option<String>,
    pub grace_period_seconds: Option<i64>,
    pub dry_run: bool,
}

fn options_invalid(cause: Cause) -> ApiError {
    ApiError::Invalid {
        kind: "DeleteOptions".into(),
        group: "meta.k8s.io".into(),
        name: String::new(),
        causes: vec![cause],
    }
}

pub fn delete_options(req: &ApiRequest) -> Result<DeleteOptions, ApiError> {
    super::options::check(req, super::options::Options::Delete)?;
    let body = if req.body.iter().all(u8::is_ascii_whitespace) {
        json!({})
    } else {
        body::decode_object(&req.body, body::encoding(&req.content_type)?)?
    };
    let policy = req
        .query
        .propagation_policy
        .clone()
        .or_else(|| meta::str_at(&body, "/propagationPolicy").map(str::to_string));
    if let Some(p) =
        policy.filter(|p| !matches!(p.as_str(), "Foreground" | "Background" | "Orphan"))
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
    Ok(DeleteOptions {
        uid: meta::str_at(&body, "/preconditions/uid").map(str::to_string),
        resource_version: meta::str_at(&body, "/preconditions/resourceVersion").map(str::to_string),
        grace_period_seconds: grace,
        dry_run: req.query.dry_run || body_dry_run,
    })
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

/// What a delete did.
pub enum Deleted {
    /// The object is gone; this is its last state.
    Gone(ObjectRef),
    /// Deletion is pending (finalizers, graceful pod deletion, namespace purge).
    Pending(Written),
}

/// Deletes (or starts deleting) one object.
pub async fn delete_one(
    req: &ApiRequest,
    name: &str,
    opts: &DeleteOptions,
) -> Result<Deleted, ApiError> {
    let info = req.info();
    for _ in 0..MAX_ATTEMPTS {
        let current = req
            .ctx
            .store
            .get(&req.target.key(name))
            .ok_or_else(|| ApiError::not_found(info, name))?;
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
        if namespace::is_namespace(info) {
            return namespace::begin_delete(req, &current, opts.dry_run)
                .await
                .map(Deleted::Pending);
        }
        let mut value = current.value();
        let grace = if info.group.is_empty() && info.plural == "pods" {
            pod_grace(&value, opts.grace_period_seconds)
        } else {
            0
        };
        let has_finalizers = !meta::finalizers(&value).is_empty();
        if has_finalizers || grace > 0 {
            if meta::is_deleting(&value) {
                return Ok(Deleted::Pending(Written::Stored(current)));
            }
            let when = chrono::Utc::now() + chrono::Duration::seconds(grace);
            let md = meta::metadata_mut(&mut value);
            md.insert("deletionTimestamp".into(), json!(meta::format_time(when)));
            md.insert("deletionGracePeriodSeconds".into(), json!(grace));
            if info.tracks_generation {
                let generation = md.get("generation").and_then(Value::as_i64).unwrap_or(0);
                md.insert("generation".into(), json!(generation + 1));
            }
            if opts.dry_run {
                return Ok(Deleted::Pending(Written::DryRun(value)));
            }
            let result = update::write_over(req, &current, value).await;
            match result {
                Ok(stored) => return Ok(Deleted::Pending(Written::Stored(stored))),
                Err(WriteError::Rejected(ApplyError::Conflict { .. })) => continue,
                Err(e) => return Err(ApiError::from_write(info, e)),
            }
        }
        if opts.dry_run {
            return Ok(Deleted::Gone(current));
        }
        let result = req
            .ctx
            .writer
            .write(Mutation::Delete {
                key: current.key.clone(),
                precondition: Precondition {
                    resource_version: Some(current.resource_version),
                    uid: Some(current.uid.clone()),
                },
            })
            .await;
        match result {
            Ok(gone) => return Ok(Deleted::Gone(gone)),
            Err(WriteError::Rejected(ApplyError::Conflict { .. })) => continue,
            Err(e) => return Err(ApiError::from_write(info, e)),
        }
    }
    Err(ApiError::conflict_modified(info, name))
}

/// Serves DELETE on a named object.
pub async fn delete(req: &ApiRequest) -> Result<Response<ApiBody>, ApiError> {
    let opts = delete_options(req)?;
    let name = req.name().to_string();
    match delete_one(req, &name, &opts).await? {
        Deleted::Pending(written) => written.respond(req, StatusCode::OK),
        Deleted::Gone(object) if kinds::returns_deleted_object(req.info()) => {
            output::stored(req, StatusCode::OK, &object)
        }
        Deleted::Gone(object) => Ok(response::json_value(
            StatusCode::OK,
            &status::success(req.info(), &name, &object.uid),
        )),
    }
}

/// Serves DELETE on a collection: every object matching the selectors, answered with the
/// list of what was deleted.
pub async fn delete_collection(req: &ApiRequest) -> Result<Response<ApiBody>, ApiError> {
    let opts = delete_options(req)?;
    let filter = Filter::from_request(req)?;
    let snapshot = req.ctx.store.snapshot();
    let names: Vec<(String, String)> = filter
        .select(&snapshot, None)
        .map(|o| (o.key.namespace.clone(), o.key.name.clone()))
        .collect();
    let mut deleted = Vec::new();
    for (namespace, name) in names {
        let mut one = req.target.clone();
        one.namespace = (!namespace.is_empty()).then_some(namespace);
        one.name = Some(name.clone());
        let sub = ApiRequest {
            ctx: req.ctx.clone(),
            method: req.method.clone(),
            target: one,
            query: req.query.clone(),
            form: req.form,
            content_type: req.content_type.clone(),
            body: req.body.clone(),
            user: req.user.clone(),
            user_agent: req.user_agent.clone(),
            warnings: Default::default(),
        };
        match delete_one(&sub, &name, &opts).await {
            Ok(Deleted::Gone(o)) | Ok(Deleted::Pending(Written::Stored(o))) => deleted.push(o),
            Ok(Deleted::Pending(Written::DryRun(_))) => {}
            Err(ApiError::NotFound { .. }) => {}
            Err(e) => return Err(e),
        }
    }
    let metadata = json!({"resourceVersion": req.ctx.store.resource_version().to_string()});
    output::list(req, &deleted, metadata)
}
