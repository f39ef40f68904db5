//! LIST: limit/continue paging at a resourceVersion, and the `<Kind>List` (or Table)
//! response. The selection and the resourceVersion rules are `read`'s.

use http::Response;
use serde_json::{json, Value};

use super::continue_token::{unchanged_since, ContinueToken};
use super::read::{list_options_invalid, rv_request, wait_for_rv, Filter, RvRequest};
use super::request::ApiRequest;
use super::status::{ApiError, Cause, CONTINUE_EXPIRED};
use super::{output, ApiBody};
use crate::kube::object::{ObjectKey, ObjectRef};

/// Serves a LIST.
pub async fn list(req: &ApiRequest) -> Result<Response<ApiBody>, ApiError> {
    let filter = Filter::from_request(req)?;
    let rv_req = rv_request(req)?;
    if req.query.send_initial_events.is_some() {
        return Err(list_options_invalid(Cause::forbidden(
            "sendInitialEvents",
            "sendInitialEvents is forbidden for list",
        )));
    }
    if let RvRequest::At { rv, .. } = rv_req {
        wait_for_rv(req, rv).await?;
    }
    let store = &req.ctx.store;
    let snapshot = store.snapshot();
    let mut list_rv = snapshot.resource_version;
    if let RvRequest::At { rv, exact: true } = rv_req {
        if rv < snapshot.resource_version {
            if !unchanged_since(store, rv, &filter.resource, filter.namespace.as_deref()) {
                return Err(ApiError::too_old(rv, store.oldest_watchable()));
            }
            list_rv = rv;
        }
    }
    let mut after = None;
    if !req.query.continue_token.is_empty() {
        let token = ContinueToken::decode(&req.query.continue_token)?;
        if token.rv > snapshot.resource_version {
            return Err(ApiError::BadRequest(
                "continue key is not valid: resource version is in the future".into(),
            ));
        }
        if !unchanged_since(
            store,
            token.rv,
            &filter.resource,
            filter.namespace.as_deref(),
        ) {
            return Err(ApiError::Expired(CONTINUE_EXPIRED.into()));
        }
        list_rv = token.rv;
        let (ns, name) = token.start_key();
        after = Some(ObjectKey::new(filter.resource.clone(), ns, name));
    }
    let limit = req.query.limit.unwrap_or(usize::MAX);
    let mut items: Vec<ObjectRef> = Vec::new();
    let mut more = false;
    for object in filter.select(&snapshot, after.as_ref()) {
        if items.len() == limit {
            more = true;
            break;
        }
        items.push(object.clone());
    }
    let mut metadata = json!({"resourceVersion": list_rv.to_string()});
    if more {
        if let Some(last) = items.last() {
            let token = ContinueToken::new(list_rv, &last.key.namespace, &last.key.name);
            metadata["continue"] = Value::String(token.encode());
        }
    }
    output::list(req, &items, metadata)
}
