//! Routes a request to its handler. The transport calls [`serve`] for HTTPS requests with the
//! user they authenticated as (`system:anonymous` without credentials) and [`serve_anonymous`]
//! for plain HTTP and health checks. [`serve`] answers the health endpoints first (as
//! `system:public-info-viewer` lets everyone), then resolves impersonation and asks the
//! authorizer (`auth`), so every other request — a kubectl's, a forwarded one, the in-process
//! client's — is authorized before it is routed. The impersonated user and the decision
//! are noted for the request's audit event (`audit`), when it has one. Both are generic over the request body so
//! tests can drive them with in-memory bodies. Every resource request is counted and timed
//! (`metrics`) once its response is ready; `/metrics` itself is answered here too.

use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;
use http::{header, Method, Request, Response};

use super::barrier::{self, Barrier};
use super::metrics::{self, RequestLabels};
use super::request::{self, ApiRequest, Query};
use super::status::ApiError;
use super::{
    access_review, body, create, delete, discovery, get, health, list, oidc, openapi, patch,
    subresource, update, watch, ApiBody, ApiContext, UserInfo,
};
use crate::audit;
use crate::auth::impersonation::{self, Refused};

fn header_str<B>(req: &Request<B>, name: header::HeaderName) -> String {
    req.headers()
        .get(name)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_string()
}

fn verbose<B>(req: &Request<B>) -> bool {
    request::query_pairs(req.uri().query().unwrap_or(""))
        .iter()
        .any(|(k, v)| k == "verbose" && v != "false" && v != "0")
}

/// Serves an API request of `user`.
pub async fn serve<B>(ctx: Arc<ApiContext>, req: Request<B>, user: UserInfo) -> Response<ApiBody>
where
    B: hyper::body::Body<Data = Bytes> + Send + 'static,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let path = req.uri().path().to_string();
    if let Some(resp) = health::respond(&ctx, &path, verbose(&req)) {
        return resp;
    }
    let user = match impersonation::resolve(&ctx.authorizer, user, req.headers()) {
        Ok(user) => user,
        Err(Refused::Malformed(reason)) => return ApiError::Internal(reason).into_response(),
        Err(Refused::Forbidden {
            caller,
            what,
            reason,
        }) => {
            audit::note_decision(&req, false, &reason);
            return ApiError::denied(&caller, &what, &reason).into_response();
        }
    };
    if impersonation::requested(req.headers()) {
        audit::note_impersonation(&req, &user);
    }
    // `system:masters` may do anything: the attributes are not even read (the admin token
    // and the in-process controllers take this path on every request).
    if user.is_master() {
        audit::note_decision(&req, true, "");
    } else {
        match ctx
            .authorizer
            .authorize_request(&user, req.method(), &path, req.uri().query())
        {
            Ok(reason) => audit::note_decision(&req, true, &reason),
            Err(denied) => {
                audit::note_decision(&req, false, &denied.reason);
                return ApiError::denied(&user.name, &denied.info, &denied.reason).into_response();
            }
        }
    }
    // A group version an aggregated API server registered: everything under it is its own
    // (authorized here first, as kube-apiserver's chain runs before its aggregator).
    if let Some(backend) = super::aggregation::proxy::backend_for(&ctx, &path) {
        return super::aggregation::proxy::serve(&ctx, &backend, req, &user).await;
    }
    if crate::streams::owns(&path) {
        return crate::streams::serve(ctx, req, user).await;
    }
    let accept = header_str(&req, header::ACCEPT);
    if path == "/metrics" && req.method() == Method::GET {
        return metrics::respond(&ctx.metrics, &ctx.store);
    }
    if path.starts_with("/openapi") || path.starts_with("/swagger") {
        return openapi::respond(&path, &accept, &ctx.custom_kinds)
            .unwrap_or_else(|| ApiError::NoRoute.into_response());
    }
    if let Some(resp) = oidc::respond(&ctx, &path) {
        return resp;
    }
    if path.trim_end_matches('/') == "/apis" {
        ctx.aggregator.refresh_discovery(&ctx).await;
    }
    if !request::is_resource_path(&path) {
        return discovery::respond(&ctx, &path, &accept)
            .unwrap_or_else(|| ApiError::NoRoute.into_response());
    }
    match resource(ctx, req, user, &path, &accept).await {
        Ok(resp) => resp,
        Err(e) => e.into_response(),
    }
}

async fn resource<B>(
    ctx: Arc<ApiContext>,
    req: Request<B>,
    user: UserInfo,
    path: &str,
    accept: &str,
) -> Result<Response<ApiBody>, ApiError>
where
    B: hyper::body::Body<Data = Bytes> + Send + 'static,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let started = Instant::now();
    let target = request::parse_path(path, &ctx.custom_kinds)?;
    let query = Query::parse(req.uri().query())?;
    let content_type = header_str(&req, header::CONTENT_TYPE);
    let labels = RequestLabels::new(
        &target,
        req.method(),
        query.watch,
        query.dry_run,
        content_type.starts_with("application/apply-patch"),
    );
    let user_agent = header_str(&req, header::USER_AGENT);
    let audit = crate::audit::request::Annotations::of(&req);
    let method = req.method().clone();
    let has_body = matches!(
        method,
        Method::POST | Method::PUT | Method::PATCH | Method::DELETE
    );
    let body = if has_body {
        body::read(req.into_body()).await?
    } else {
        Bytes::new()
    };
    let api = ApiRequest {
        ctx,
        method,
        target,
        query,
        form: request::form(accept),
        content_type,
        body,
        user,
        user_agent,
        warnings: Default::default(),
        audit_annotations: Default::default(),
    };
    let result = dispatch(&api).await;
    let result = super::options::add_warnings(&api, result);
    if let (Some(audit), Ok(mut notes)) = (audit, api.audit_annotations.lock()) {
        for (key, value) in notes.drain(..) {
            audit.annotate(key, value);
        }
    }
    Ok(match labels {
        Some(labels) => {
            let response = result.unwrap_or_else(ApiError::into_response);
            api.ctx.metrics.finish(labels, started, response)
        }
        None => result?,
    })
}

async fn dispatch(req: &ApiRequest) -> Result<Response<ApiBody>, ApiError> {
    if barrier::decide(req) == Barrier::Now {
        barrier::pass(req).await?;
    }
    let t = &req.target;
    let in_namespace = !t.info.namespaced || t.namespace.is_some();
    match (t.name.is_some(), t.subresource.as_deref(), &req.method) {
        _ if t.info.is_create_only() && access_review::is_review(t.info.group) => {
            access_review::create(req).await
        }
        _ if t.info.is_create_only() => subresource::bindings(req).await,
        (false, None, &Method::GET) if req.query.watch => watch::watch(req).await,
        (false, None, &Method::GET) => list::list(req).await,
        (false, None, &Method::POST) if in_namespace => create::post(req).await,
        (false, None, &Method::DELETE) if in_namespace => delete::delete_collection(req).await,
        (true, None, &Method::GET) if req.query.watch => watch::watch(req).await,
        (true, None | Some("status" | "approval"), &Method::GET) => get::get(req).await,
        (true, None | Some("status" | "approval"), &Method::PUT) => update::put(req).await,
        (true, None | Some("status" | "approval"), &Method::PATCH) => patch::patch(req).await,
        (true, None, &Method::DELETE) => delete::delete(req).await,
        (true, Some(_), _) => subresource::serve(req).await,
        _ => Err(ApiError::MethodNotAllowed),
    }
}

/// Serves the anonymous endpoints (/readyz, /livez, /healthz, /version); `None` for any other
/// path, which the transport answers with 401 (HTTPS) or 404/400 (plain HTTP).
pub async fn serve_anonymous<B>(
    ctx: Arc<ApiContext>,
    req: &Request<B>,
) -> Option<Response<ApiBody>> {
    health::respond(&ctx, req.uri().path(), verbose(req))
}

#[cfg(test)]
mod tests;
