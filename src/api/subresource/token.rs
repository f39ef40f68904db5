//! POST `/api/v1/namespaces/NS/serviceaccounts/NAME/token`: a bound token for the service
//! account (an `authentication.k8s.io/v1` TokenRequest, what `kubectl create token` sends),
//! as kube-apiserver's TokenREST (pkg/registry/core/serviceaccount/storage/token.go):
//!
//! - the service account must exist (404);
//! - `spec.audiences` defaults to the API server's own audience, `spec.expirationSeconds` to
//!   one hour and must lie between 10 minutes and 2^32 seconds (422);
//! - `spec.boundObjectRef` binds the token to a Pod (one running as this service account; its
//!   node goes into the token when the node exists) or a Secret, which must exist and, when
//!   the reference names a uid, still have it (409); other kinds are 400;
//! - a node (`system:node:<name>`) gets only tokens bound to a pod on itself
//!   (NodeRestriction);
//! - the answer is 201 with the request, `status.token` and `status.expirationTimestamp`.
//!
//! Nothing is stored: the token is checked against the store when it is used
//! (`auth::service_account`).

use http::{Response, StatusCode};
use serde_json::{json, Value};

use crate::api::request::ApiRequest;
use crate::api::status::{ApiError, Cause, Gr};
use crate::api::{meta, output, write, ApiBody};
use crate::auth::service_account::claims::Ref;
use crate::auth::service_account::{BoundObject, TokenSpec, ISSUER};
use crate::kube::object::ObjectKey;

const DEFAULT_EXPIRATION_SECONDS: i64 = 3600;
const MIN_EXPIRATION_SECONDS: i64 = 600;
const MAX_EXPIRATION_SECONDS: i64 = 1 << 32;

pub async fn post(req: &ApiRequest) -> Result<Response<ApiBody>, ApiError> {
    let Some(tokens) = req.ctx.service_accounts.clone() else {
        // Without a signing key kube-apiserver does not serve the subresource either.
        return Err(ApiError::NoRoute);
    };
    let mut request = write::decode(req)?;
    if !request.is_object() {
        return Err(ApiError::BadRequest(
            "the body must be a TokenRequest".into(),
        ));
    }
    if let Some(kind) = meta::str_at(&request, "/kind").filter(|k| *k != "TokenRequest") {
        return Err(ApiError::BadRequest(format!(
            "the body of a token request must be a TokenRequest, not {kind}"
        )));
    }
    let name = req.name().to_string();
    let namespace = req.target.namespace.clone().unwrap_or_default();
    let get = |resource: &str, name: &str| {
        req.ctx
            .store
            .get(&ObjectKey::new(resource, namespace.as_str(), name))
    };
    let account = get("serviceaccounts", &name)
        .filter(|sa| !sa.is_deleting())
        .ok_or_else(|| ApiError::not_found(req.info(), &name))?;

    let spec = request.get("spec").cloned().unwrap_or(json!({}));
    let mut audiences: Vec<String> = spec
        .get("audiences")
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(Value::as_str)
                .map(str::to_string)
                .collect()
        })
        .unwrap_or_default();
    if audiences.is_empty() {
        audiences.push(ISSUER.to_string());
    }
    let expiration_seconds = match spec.get("expirationSeconds") {
        None | Some(Value::Null) => DEFAULT_EXPIRATION_SECONDS,
        Some(v) => v.as_i64().ok_or_else(|| {
            ApiError::BadRequest("spec.expirationSeconds must be an integer".into())
        })?,
    };
    let invalid = |detail: &str| ApiError::Invalid {
        kind: "TokenRequest".into(),
        group: "authentication.k8s.io".into(),
        name: String::new(),
        causes: vec![Cause::invalid(
            "spec.expirationSeconds",
            &json!(expiration_seconds),
            detail,
        )],
    };
    if expiration_seconds < MIN_EXPIRATION_SECONDS {
        return Err(invalid("may not specify a duration less than 10 minutes"));
    }
    if expiration_seconds > MAX_EXPIRATION_SECONDS {
        return Err(invalid(
            "may not specify a duration larger than 2^32 seconds",
        ));
    }

    let bound = match spec.get("boundObjectRef").filter(|r| !r.is_null()) {
        None => None,
        Some(reference) => {
            let text = |field: &str| {
                reference
                    .get(field)
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .to_string()
            };
            let (api_version, kind, bound_name, uid) =
                (text("apiVersion"), text("kind"), text("name"), text("uid"));
            let resource = match (api_version.as_str(), kind.as_str()) {
                ("v1" | "", "Pod") => "pods",
                ("v1" | "", "Secret") => "secrets",
                _ => {
                    let (group, version) =
                        api_version.split_once('/').unwrap_or(("", &api_version));
                    return Err(ApiError::BadRequest(format!(
                        "cannot bind token for serviceaccount {name:?} to object of type {group}/{version}, Kind={kind}"
                    )));
                }
            };
            let object = get(resource, &bound_name).ok_or_else(|| ApiError::NotFound {
                gr: Gr {
                    group: String::new(),
                    plural: resource.to_string(),
                },
                name: bound_name.clone(),
            })?;
            if !uid.is_empty() && uid != object.uid {
                return Err(ApiError::Conflict {
                    gr: Gr {
                        group: String::new(),
                        plural: kind.clone(),
                    },
                    name: bound_name,
                    detail: format!(
                        "the UID in the bound object reference ({uid}) does not match the UID in record. The object might have been deleted and then recreated"
                    ),
                });
            }
            Some(if resource == "pods" {
                let pod_account = object.field("spec.serviceAccountName").unwrap_or("default");
                if pod_account != name {
                    return Err(ApiError::BadRequest(format!(
                        "cannot bind token for serviceaccount {name:?} to pod running with different serviceaccount name."
                    )));
                }
                let node = object
                    .field("spec.nodeName")
                    .filter(|n| !n.is_empty())
                    .and_then(|node| {
                        let stored = req.ctx.store.get(&ObjectKey::new("nodes", "", node))?;
                        Some(Ref {
                            name: node.to_string(),
                            uid: stored.uid.clone(),
                        })
                    });
                BoundObject::Pod {
                    name: bound_name,
                    uid: object.uid.clone(),
                    node,
                }
            } else {
                BoundObject::Secret {
                    name: bound_name,
                    uid: object.uid.clone(),
                }
            })
        }
    };
    // NodeRestriction: a node asks only for tokens bound to its own pods.
    if let Some(node) = crate::auth::node::node_name(&req.user) {
        let denied = |detail: &str| ApiError::Denied {
            gr: Gr::of(req.info()),
            name: name.clone(),
            detail: detail.to_string(),
        };
        match &bound {
            Some(BoundObject::Pod { name: pod, .. }) => {
                let on_node =
                    get("pods", pod).is_some_and(|p| p.field("spec.nodeName") == Some(node));
                if !on_node {
                    return Err(denied(
                        "node requested token bound to a pod scheduled on a different node",
                    ));
                }
            }
            _ => return Err(denied("node requested token not bound to a pod")),
        }
    }
    let token_spec = TokenSpec {
        namespace: namespace.clone(),
        service_account: Ref {
            name: name.clone(),
            uid: account.uid.clone(),
        },
        audiences: audiences.clone(),
        expiration_seconds,
        bound: bound.clone(),
    };
    let now = chrono::Utc::now();
    let (token, expires) = tokens
        .issue(&token_spec, now.timestamp())
        .map_err(|e| ApiError::Internal(format!("failed to sign the token: {e}")))?;
    let expires = chrono::DateTime::from_timestamp(expires, 0).unwrap_or(now);

    request["apiVersion"] = json!("authentication.k8s.io/v1");
    request["kind"] = json!("TokenRequest");
    let metadata = request
        .get("metadata")
        .filter(|m| m.is_object())
        .cloned()
        .unwrap_or(json!({}));
    request["metadata"] = metadata;
    request["metadata"]["name"] = json!(name);
    request["metadata"]["namespace"] = json!(namespace);
    request["metadata"]["creationTimestamp"] = json!(meta::format_time(now));
    request["spec"] = spec;
    if let Some(spec) = request["spec"].as_object_mut() {
        // Clients send an absent reference as null; kube-apiserver answers without it.
        spec.retain(|_, v| !v.is_null());
    }
    request["spec"]["audiences"] = json!(audiences);
    request["spec"]["expirationSeconds"] = json!(expiration_seconds);
    if let Some(BoundObject::Pod { uid, .. } | BoundObject::Secret { uid, .. }) = &bound {
        request["spec"]["boundObjectRef"]["uid"] = json!(uid);
    }
    request["status"] = json!({
        "token": token,
        "expirationTimestamp": meta::format_time(expires),
    });
    output::object(req, StatusCode::CREATED, &request)
}
