//! Whole-request forwarding (docs/guarantees.md, Writes): a client write reaching a follower goes
//! to the leader as the same HTTP request, so allocators (ClusterIPs, NodePorts) and admission run
//! in one place. The follower authenticates the client, then sends the request with the cluster
//! secret as bearer token and the authenticated user (name, uid, groups, extra, as JSON) in
//! `x-litek8s-forwarded-user` — a header the leader honours only together with the secret, so
//! the leader authorizes the user the follower authenticated. From anyone else the header is
//! ignored (and logged): the request is authenticated by its own credential. The leader answers with its store's
//! resourceVersion in `x-litek8s-resource-version`; the follower answers its client once it has
//! applied that far (read-your-writes through one server). The follower audits the request
//! (crate::audit); what the leader's authorization and admission annotate comes back in
//! `x-litek8s-audit-annotations` for the follower's event, and never reaches the client.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::{header, HeaderValue, Method, Request, Response, StatusCode};
use http_body_util::{BodyExt, Full, Limited};

use super::node::{ClusterNode, Leadership};
use super::peer::PeerError;
use super::raft_writer::NO_LEADER_TIMEOUT;
use crate::api::status::ApiError;
use crate::api::{response, ApiBody};
use crate::audit::request::{Carried, Handle};
use crate::auth::UserInfo;

/// The user a follower authenticated, sent to the leader with the cluster secret.
pub const FORWARDED_USER: &str = "x-litek8s-forwarded-user";
/// The leader's store resourceVersion after a forwarded request.
pub const LEADER_RESOURCE_VERSION: &str = "x-litek8s-resource-version";
/// The audit annotations the leader made for a forwarded request (a JSON object of strings).
pub const AUDIT_ANNOTATIONS: &str = "x-litek8s-audit-annotations";
/// The largest forwarded body: the API's own request limit plus room for framing.
const MAX_FORWARDED_BODY: usize = 4 << 20;
/// How long the leader may take to answer one forwarded request.
const FORWARD_TIMEOUT: Duration = Duration::from_secs(30);
/// How long a follower waits to apply what the leader acknowledged.
const APPLY_WAIT: Duration = Duration::from_secs(10);

/// Whether a request is a client write that a follower forwards. The access reviews
/// (`authorization.k8s.io`, `authentication.k8s.io`) are POSTs that write nothing: every
/// member answers them from its own store; a POST to `pods/exec` is a stream, which goes to
/// the server holding the node's tunnel (`streams`), not to the leader.
pub fn is_forwardable_write<B>(req: &Request<B>) -> bool {
    let path = req.uri().path();
    matches!(
        *req.method(),
        Method::POST | Method::PUT | Method::PATCH | Method::DELETE
    ) && (path.starts_with("/api/") || path.starts_with("/apis/"))
        && !path.starts_with("/apis/authorization.k8s.io/")
        && !path.starts_with("/apis/authentication.k8s.io/")
        && !crate::streams::owns(path)
}

/// The user of a request forwarded by a peer: present only when the request carries the
/// cluster secret; a request with the secret and no user header is refused (`None`).
pub fn forwarded_user<B>(node: &ClusterNode, req: &Request<B>) -> Option<UserInfo> {
    let token = req
        .headers()
        .get(header::AUTHORIZATION)?
        .as_bytes()
        .strip_prefix(b"Bearer ")?;
    if !node.secret.matches(token) {
        return None;
    }
    serde_json::from_slice(req.headers().get(FORWARDED_USER)?.as_bytes()).ok()
}

/// The header value carrying `user`: its JSON with every non-ASCII character escaped, so it
/// is a valid header value whatever the names hold.
pub(crate) fn user_header(user: &UserInfo) -> Option<HeaderValue> {
    ascii_json(user)
}

/// `value` as JSON with every non-ASCII character escaped: always a valid header value.
fn ascii_json(value: &impl serde::Serialize) -> Option<HeaderValue> {
    let json = serde_json::to_string(value).ok()?;
    let mut ascii = String::with_capacity(json.len());
    for c in json.chars() {
        if c.is_ascii() {
            ascii.push(c);
        } else {
            let mut units = [0u16; 2];
            for unit in c.encode_utf16(&mut units) {
                ascii.push_str(&format!("\\u{unit:04x}"));
            }
        }
    }
    HeaderValue::from_str(&ascii).ok()
}

/// Stamps the leader's resourceVersion on the answer to a forwarded request.
pub fn stamp_leader_version(node: &ClusterNode, response: &mut Response<ApiBody>) {
    if let Ok(value) = HeaderValue::from_str(&node.store.resource_version().to_string()) {
        response
            .headers_mut()
            .insert(LEADER_RESOURCE_VERSION, value);
    }
}

/// Sends the annotations the leader collected for a forwarded request back with its answer.
pub fn carry_annotations(carried: &Carried, response: &mut Response<ApiBody>) {
    let annotations = carried.take();
    if annotations.is_empty() {
        return;
    }
    if let Some(value) = ascii_json(&annotations) {
        response.headers_mut().insert(AUDIT_ANNOTATIONS, value);
    }
}

/// What a follower does with a client write.
pub enum Routed {
    /// This member leads (or became leader meanwhile): serve it here.
    Local(Request<Full<Bytes>>),
    /// The leader's answer, ready for the client.
    Answered(Response<ApiBody>),
}

fn error(e: ApiError) -> Routed {
    Routed::Answered(e.into_response())
}

/// Forwards `req` (authenticated as `user`) to the leader, or hands it back when this member
/// leads.
pub async fn route<B>(node: &Arc<ClusterNode>, req: Request<B>, user: &UserInfo) -> Routed
where
    B: hyper::body::Body<Data = Bytes>,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let audit = Handle::of(&req);
    let (parts, body) = req.into_parts();
    let body = match Limited::new(body, MAX_FORWARDED_BODY).collect().await {
        Ok(collected) => collected.to_bytes(),
        Err(_) => return error(ApiError::TooLarge(MAX_FORWARDED_BODY)),
    };
    let user_header = user_header(user);
    let deadline = tokio::time::Instant::now() + NO_LEADER_TIMEOUT;
    loop {
        let remaining = deadline.saturating_duration_since(tokio::time::Instant::now());
        let leader = match node.wait_for_leader(remaining).await {
            Leadership::Me => {
                return Routed::Local(Request::from_parts(parts, Full::new(body)));
            }
            Leadership::Unknown => {
                return error(ApiError::Timeout(
                    "no Raft leader within 15 s: the request was not applied".into(),
                ))
            }
            Leadership::Other { member, .. } => member,
        };
        let mut request = Request::builder().method(parts.method.clone()).uri(format!(
            "https://{}{}",
            leader.api,
            parts
                .uri
                .path_and_query()
                .map(|p| p.as_str())
                .unwrap_or("/")
        ));
        for (name, value) in &parts.headers {
            if name != header::AUTHORIZATION && name != header::HOST && name != FORWARDED_USER {
                request = request.header(name, value);
            }
        }
        if let Some(value) = &user_header {
            request = request.header(FORWARDED_USER, value.clone());
        }
        let Ok(request) = request.body(Full::new(body.clone())) else {
            return error(ApiError::BadRequest("request cannot be forwarded".into()));
        };
        match node
            .peers
            .exchange(&leader.api, request, FORWARD_TIMEOUT)
            .await
        {
            Ok(answer) => return Routed::Answered(relay(node, answer, audit.as_ref()).await),
            // Never reached the leader: safe to try again once a leader is known.
            Err(PeerError::Unreachable { reason, .. }) => {
                tracing::debug!(leader = %leader.name, "forwarding: {reason}");
                if tokio::time::Instant::now() >= deadline {
                    return error(ApiError::Timeout(format!(
                        "the leader {} is unreachable: the request was not applied",
                        leader.name
                    )));
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            Err(e) => {
                return error(ApiError::Timeout(format!(
                "forwarding to the leader {}: {e}; the request may or may not have been applied",
                leader.name
            )))
            }
        }
    }
}

/// The leader's answer for the client, once this member has applied what it acknowledged; the
/// leader's audit annotations go to this member's event of the request.
async fn relay(
    node: &ClusterNode,
    answer: Response<Bytes>,
    audit: Option<&Handle>,
) -> Response<ApiBody> {
    let (mut parts, body) = answer.into_parts();
    let annotations = parts.headers.remove(AUDIT_ANNOTATIONS);
    if let (Some(audit), Some(value)) = (audit, annotations) {
        let carried: BTreeMap<String, String> =
            serde_json::from_slice(value.as_bytes()).unwrap_or_default();
        for (key, value) in carried {
            audit.annotate(key, value);
        }
    }
    let leader_rv = parts
        .headers
        .remove(LEADER_RESOURCE_VERSION)
        .and_then(|v| v.to_str().ok().and_then(|s| s.parse::<u64>().ok()));
    if let Some(rv) = leader_rv {
        if parts.status.is_success() && node.store.wait_for(rv, APPLY_WAIT).await < rv {
            return ApiError::Timeout(format!(
                "the write was applied by the leader (resourceVersion {rv}) but this server did not catch up in time"
            ))
            .into_response();
        }
    }
    parts.headers.remove(header::CONTENT_LENGTH);
    parts.headers.remove(header::TRANSFER_ENCODING);
    parts.headers.remove(header::CONNECTION);
    let mut response = Response::new(response::body(body));
    *response.status_mut() = parts.status;
    *response.headers_mut() = parts.headers;
    if response.status() == StatusCode::SWITCHING_PROTOCOLS {
        *response.status_mut() = StatusCode::BAD_GATEWAY;
    }
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_user_header_round_trips_any_name() {
        let mut user = UserInfo::new("zoë 🦀", &["g\"quoted\"", "system:authenticated"]);
        user.uid = "1000".into();
        Arc::make_mut(&mut user.extra).insert("scopes".into(), vec!["a".into(), "b".into()]);
        let value = user_header(&user).expect("a header value");
        assert!(value.as_bytes().is_ascii());
        let back: UserInfo = serde_json::from_slice(value.as_bytes()).unwrap();
        assert_eq!(back, user);
    }
}
