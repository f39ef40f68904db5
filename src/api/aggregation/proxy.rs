//! A request for an aggregated group version passed to its Service: the caller's own
//! credentials removed, its identity (as authenticated, or impersonated, here) in the
//! front-proxy headers, the answer passed back. The request is read whole (within the API's
//! body limit); the answer is streamed: its head must come within [`HEAD_TIMEOUT`], its body
//! is passed on as it comes, at the pace the caller reads it, so a watch through an
//! aggregated server lasts until either side ends it, with a bounded buffer in between.

use std::time::Duration;

use bytes::Bytes;
use http::{HeaderMap, HeaderName, HeaderValue, Request, Response};
use http_body_util::Full;

use super::apiservice::{self, Backend};
use super::front_proxy::{EXTRA_PREFIX, GROUP_HEADER, USER_HEADER};
use crate::api::status::ApiError;
use crate::api::{body, ApiBody, ApiContext, UserInfo};

/// How long a proxied request may take until the answer's head (connection, request, status
/// and headers); the body has no deadline.
const HEAD_TIMEOUT: Duration = Duration::from_secs(60);

/// The Service-backed APIService serving `path`, if `path` is under `/apis/<group>/<version>`
/// of one.
pub fn backend_for(ctx: &ApiContext, path: &str) -> Option<Backend> {
    let mut parts = path.strip_prefix("/apis/")?.split('/');
    let (group, version) = (parts.next()?, parts.next()?);
    if group.is_empty() || version.is_empty() {
        return None;
    }
    apiservice::backend_of(&ctx.store, group, version)
}

/// Headers never passed on: the caller's credentials and identity claims (the proxy states
/// the identity itself), and hop-by-hop ones.
fn dropped(name: &HeaderName) -> bool {
    let name = name.as_str();
    name == "authorization"
        || name == "host"
        || name == "connection"
        || name == "keep-alive"
        || name == "proxy-connection"
        || name == "transfer-encoding"
        || name == "upgrade"
        || name == "te"
        || name == "content-length"
        || name.starts_with("impersonate-")
        || name.starts_with("x-remote-")
}

/// The front-proxy headers stating `user`.
pub fn identity_headers(user: &UserInfo, headers: &mut HeaderMap) {
    let mut add = |name: String, value: &str| {
        if let (Ok(name), Ok(value)) = (HeaderName::try_from(name), HeaderValue::from_str(value)) {
            headers.append(name, value);
        }
    };
    add(USER_HEADER.to_string(), &user.name);
    for group in &user.groups {
        add(GROUP_HEADER.to_string(), group);
    }
    for (key, values) in user.extra.iter() {
        for value in values {
            add(format!("{EXTRA_PREFIX}{}", escape_key(key)), value);
        }
    }
}

/// An extra's key as a header name carries it: percent-encoded as Go's `url.PathEscape`
/// encodes (kube-aggregator's encoding; the receiver decodes it).
fn escape_key(key: &str) -> String {
    let mut out = String::new();
    for b in key.bytes() {
        let plain = b.is_ascii_alphanumeric()
            || matches!(
                b,
                b'-' | b'_'
                    | b'.'
                    | b'~'
                    | b'!'
                    | b'$'
                    | b'&'
                    | b'\''
                    | b'('
                    | b')'
                    | b'*'
                    | b'+'
                    | b','
                    | b';'
                    | b'='
                    | b':'
                    | b'@'
            );
        if plain {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// Passes `req` of `user` to `backend`'s Service, or 503 when the APIService is not
/// Available.
pub async fn serve<B>(
    ctx: &ApiContext,
    backend: &Backend,
    req: Request<B>,
    user: &UserInfo,
) -> Response<ApiBody>
where
    B: hyper::body::Body<Data = Bytes> + Send + 'static,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    if !backend.available {
        return ApiError::ServiceUnavailable(format!(
            "service unavailable: APIService {:?} is not available",
            backend.name
        ))
        .into_response();
    }
    let (parts, incoming) = req.into_parts();
    let bytes = match body::read(incoming).await {
        Ok(bytes) => bytes,
        Err(e) => return e.into_response(),
    };
    let path_and_query = parts
        .uri
        .path_and_query()
        .map(|p| p.as_str().to_string())
        .unwrap_or_else(|| "/".into());
    let mut request = Request::new(Full::new(bytes));
    *request.method_mut() = parts.method;
    match path_and_query.parse() {
        Ok(uri) => *request.uri_mut() = uri,
        Err(_) => return ApiError::BadRequest("malformed request path".into()).into_response(),
    }
    for (name, value) in &parts.headers {
        if !dropped(name) {
            request.headers_mut().append(name, value.clone());
        }
    }
    identity_headers(user, request.headers_mut());
    let answer = ctx
        .aggregator
        .stream(ctx, backend, request, HEAD_TIMEOUT)
        .await;
    match answer {
        Ok(answer) => {
            let (parts, body) = answer.into_parts();
            let mut out = Response::new(body);
            *out.status_mut() = parts.status;
            for (name, value) in &parts.headers {
                if !dropped(name) {
                    out.headers_mut().append(name, value.clone());
                }
            }
            out
        }
        Err(unavailable) => {
            tracing::info!(
                component = "aggregator",
                apiservice = %backend.name,
                reason = unavailable.reason,
                error = %unavailable.message,
                "aggregated API server did not answer"
            );
            ApiError::ServiceUnavailable(format!(
                "service unavailable: APIService {:?}: {}",
                backend.name, unavailable.message
            ))
            .into_response()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::header;
    use std::sync::Arc;

    #[test]
    fn the_callers_credentials_and_claims_are_not_passed_on() {
        for name in [
            "authorization",
            "impersonate-user",
            "x-remote-user",
            "x-remote-extra-a",
        ] {
            assert!(dropped(&HeaderName::from_static(name)), "{name}");
        }
        assert!(!dropped(&header::ACCEPT));
    }

    #[test]
    fn the_user_is_stated_in_front_proxy_headers() {
        let mut user = UserInfo::new("alice", &["dev", "system:authenticated"]);
        Arc::make_mut(&mut user.extra).insert(
            "scopes.example.com/a b".into(),
            vec!["x".into(), "y".into()],
        );
        let mut headers = HeaderMap::new();
        identity_headers(&user, &mut headers);
        assert_eq!(headers["x-remote-user"], "alice");
        let groups: Vec<_> = headers.get_all("x-remote-group").iter().collect();
        assert_eq!(groups, ["dev", "system:authenticated"]);
        let extra: Vec<_> = headers
            .get_all("x-remote-extra-scopes.example.com%2Fa%20b")
            .iter()
            .collect();
        assert_eq!(extra, ["x", "y"]);
    }
}
