//! The service-account issuer's OIDC discovery documents, so other systems can verify the
//! cluster's service-account tokens: `/.well-known/openid-configuration` and
//! `/openid/v1/jwks` (the public key, as a JSON Web Key Set). RBAC lets every service
//! account read them (`system:service-account-issuer-discovery`).

use http::{Response, StatusCode};

use super::{response, ApiBody, ApiContext};

/// The document at `path`, or `None` for any other path (or without a signing key).
pub fn respond(ctx: &ApiContext, path: &str) -> Option<Response<ApiBody>> {
    let tokens = ctx.service_accounts.as_ref()?;
    let (content_type, document) = match path {
        "/.well-known/openid-configuration" => ("application/json", tokens.openid_configuration()),
        "/openid/v1/jwks" => ("application/jwk-set+json", tokens.jwks()),
        _ => return None,
    };
    let bytes = serde_json::to_vec(&document).unwrap_or_default();
    let mut resp = response::with_type(StatusCode::OK, content_type, bytes);
    // kube-apiserver lets caches keep them an hour.
    resp.headers_mut().insert(
        http::header::CACHE_CONTROL,
        http::HeaderValue::from_static("public, max-age=3600"),
    );
    Some(resp)
}
