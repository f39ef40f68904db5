//! `GET pods/{name}/log`: the options checked as kube-apiserver checks them, the pod's
//! container chosen, then the request carried to the node's agent (`agent::streams::logs`
//! reads the files and applies the options) and its answer streamed back as it comes, so
//! `follow` shows each line as soon as the agent reads it.

use std::sync::Arc;

use bytes::Bytes;
use http::{Method, Request, Response};
use http_body_util::BodyExt;

use super::route::{self, Route};
use super::{container_status, pod_target, relay, relayed, tunnel_request};
use crate::api::request::query_pairs;
use crate::api::status::ApiError;
use crate::api::{ApiBody, ApiContext, UserInfo};

/// The options' checks (`ValidatePodLogOptions`), on the query's raw values.
pub fn check_options(pairs: &[(String, String)]) -> Result<(), ApiError> {
    let get = |k: &str| pairs.iter().find(|(n, _)| n == k).map(|(_, v)| v.as_str());
    let int = |k: &str| -> Result<Option<i64>, ApiError> {
        get(k)
            .map(|v| {
                v.parse::<i64>()
                    .map_err(|_| ApiError::BadRequest(format!("{k}: {v:?} is not an integer")))
            })
            .transpose()
    };
    if int("tailLines")?.is_some_and(|n| n < 0) {
        return Err(ApiError::BadRequest(
            "tailLines: Invalid value: must be greater than or equal to 0".into(),
        ));
    }
    if int("limitBytes")?.is_some_and(|n| n < 1) {
        return Err(ApiError::BadRequest(
            "limitBytes: Invalid value: must be greater than 0".into(),
        ));
    }
    if int("sinceSeconds")?.is_some_and(|n| n < 1) {
        return Err(ApiError::BadRequest(
            "sinceSeconds: Invalid value: must be greater than 0".into(),
        ));
    }
    if let Some(t) = get("sinceTime") {
        if chrono::DateTime::parse_from_rfc3339(t).is_err() {
            return Err(ApiError::BadRequest(format!(
                "sinceTime: {t:?} is not an RFC 3339 time"
            )));
        }
        if get("sinceSeconds").is_some() {
            return Err(ApiError::BadRequest(
                "at most one of `sinceTime` or `sinceSeconds` may be specified".into(),
            ));
        }
    }
    Ok(())
}

pub async fn serve<B: Send + 'static>(
    ctx: &Arc<ApiContext>,
    ns: &str,
    name: &str,
    req: Request<B>,
    user: &UserInfo,
) -> Result<Response<ApiBody>, ApiError> {
    if req.method() != Method::GET {
        return Err(ApiError::MethodNotAllowed);
    }
    let query = req.uri().query().unwrap_or("").to_string();
    let pairs = query_pairs(&query);
    check_options(&pairs)?;
    let flag = |k: &str| {
        pairs
            .iter()
            .any(|(n, v)| n == k && v != "false" && v != "0")
    };
    let container = pairs
        .iter()
        .find(|(k, _)| k == "container")
        .map(|(_, v)| v.as_str());
    let target = pod_target(ctx, ns, name, container)?;
    let status = container_status(&target.pod, &target.container);
    if flag("previous") {
        if status.is_none_or(|s| !s["lastState"]["terminated"].is_object()) {
            return Err(ApiError::BadRequest(format!(
                "previous terminated container {:?} in pod {name:?} not found",
                target.container
            )));
        }
    } else if let Some(waiting) = status.and_then(|s| s["state"]["waiting"].as_object()) {
        // A container that never ran has no log yet (one restarting has its last one).
        if status.is_some_and(|s| !s["lastState"]["terminated"].is_object()) {
            return Err(ApiError::BadRequest(format!(
                "container {:?} in pod {name:?} is waiting to start: {}",
                target.container,
                waiting
                    .get("reason")
                    .and_then(|r| r.as_str())
                    .unwrap_or("ContainerCreating")
            )));
        }
    }
    let mut tunnel = match route::route(ctx, &target.node, relayed(&req)) {
        Route::Local(tunnel) => tunnel,
        Route::Relay { server, addr } => {
            let Some(peers) = ctx.streams.peers.get() else {
                return Err(ApiError::ServiceUnavailable("no peers".into()));
            };
            return relay::relay(peers, &server, &addr, req, user).await;
        }
        Route::Unavailable(why) => return Err(ApiError::ServiceUnavailable(why)),
    };
    let path = format!("/logs/{ns}/{name}?{query}");
    let empty = http_body_util::Empty::<Bytes>::new()
        .map_err(|e| match e {})
        .boxed();
    let request = tunnel_request(Method::GET, &path, &target, empty)?;
    let answer = route::send(&mut tunnel, &target.node, request).await?;
    let (parts, body) = answer.into_parts();
    let mut resp = Response::new(body.map_err(std::io::Error::other).boxed());
    *resp.status_mut() = parts.status;
    if let Some(ct) = parts.headers.get(http::header::CONTENT_TYPE) {
        resp.headers_mut()
            .insert(http::header::CONTENT_TYPE, ct.clone());
    }
    Ok(resp)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(q: &str) -> Result<(), ApiError> {
        check_options(&query_pairs(q))
    }

    #[test]
    fn options_are_checked_like_kube_apiserver() {
        assert!(check("follow=true&tailLines=0&limitBytes=1&sinceSeconds=5").is_ok());
        assert!(check("tailLines=-1").is_err());
        assert!(check("limitBytes=0").is_err());
        assert!(check("sinceSeconds=0").is_err());
        assert!(check("sinceSeconds=x").is_err());
        assert!(check("sinceTime=2026-12-05T10:00:00Z").is_ok());
        assert!(check("sinceTime=yesterday").is_err());
        assert!(check("sinceTime=2026-12-05T10:00:00Z&sinceSeconds=3").is_err());
    }
}
