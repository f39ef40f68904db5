//! DELETE of one object and DELETE of a collection, through the write step's deletion
//! (`write::delete`: DeleteOptions, preconditions, finalizers, graceful pod deletion,
//! namespaces), answered with the object or a success Status as kube-apiserver does.

use http::{Response, StatusCode};
use serde_json::json;

use super::read::Filter;
use super::request::ApiRequest;
use super::status::{self, ApiError};
use super::write::{self, DeleteOptions, Outcome, Written};
use super::{kind_rules, output, response, ApiBody};

/// Serves DELETE on a named object.
pub async fn delete(req: &ApiRequest) -> Result<Response<ApiBody>, ApiError> {
    let opts = DeleteOptions::from_request(req)?;
    let name = req.name().to_string();
    match write::delete(req, &name, &opts).await? {
        Outcome::Removed(object) if !kind_rules::returns_deleted_object(req.info()) => {
            Ok(response::json_value(
                StatusCode::OK,
                &status::success(req.info(), &name, &object.uid),
            ))
        }
        outcome => outcome.respond(req),
    }
}

/// Serves DELETE on a collection: every object matching the selectors, answered with the
/// list of what was deleted.
pub async fn delete_collection(req: &ApiRequest) -> Result<Response<ApiBody>, ApiError> {
    let opts = DeleteOptions::from_request(req)?;
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
            audit_annotations: Default::default(),
        };
        match write::delete(&sub, &name, &opts).await {
            Ok(Outcome::Removed(o)) | Ok(Outcome::Updated(Written::Stored(o))) => deleted.push(o),
            Ok(_) => {}
            Err(ApiError::NotFound { .. }) => {}
            Err(e) => return Err(e),
        }
    }
    let metadata = json!({"resourceVersion": req.ctx.store.resource_version().to_string()});
    output::list(req, &deleted, metadata)
}
