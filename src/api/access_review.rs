//! The access reviews: what a user may do and who the caller is, asked of the same
//! authorizer every request passes (kube-apiserver's `authorization.k8s.io` and
//! `authentication.k8s.io` review kinds, created with POST and never stored):
//!
//! - `SelfSubjectAccessReview` (`kubectl auth can-i`): may the caller do this?
//! - `SubjectAccessReview`, `LocalSubjectAccessReview` (namespaced): may this user (name,
//!   groups, uid, extra from the spec) do this?
//! - `SelfSubjectRulesReview` (`kubectl auth can-i --list`): the rules the caller holds in a
//!   namespace;
//! - `SelfSubjectReview` (`kubectl auth whoami`): the caller's user;
//! - `TokenReview`: whom a service-account token authenticates, for the audiences asked
//!   (what a node agent's own port asks of bearer tokens it is shown).
//!
//! A review answers 201 with the request's object and its `status`. Validation and messages
//! are kube-apiserver's.

use std::collections::BTreeMap;

use http::{Method, Response, StatusCode};
use serde_json::{json, Map, Value};

use super::request::ApiRequest;
use super::status::{ApiError, Cause};
use super::{output, write, ApiBody};
use crate::auth::attributes::RequestInfo;
use crate::auth::rbac::rule::PolicyRule;
use crate::auth::UserInfo;

/// Whether `info` is one of the review kinds (served here, create-only).
pub fn is_review(group: &str) -> bool {
    matches!(group, "authorization.k8s.io" | "authentication.k8s.io")
}

/// POST of a review.
pub async fn create(req: &ApiRequest) -> Result<Response<ApiBody>, ApiError> {
    if req.method != Method::POST || req.target.name.is_some() {
        return Err(ApiError::MethodNotAllowed);
    }
    let mut review = write::decode(req)?;
    let info = req.info();
    let answer = match info.kind {
        "SelfSubjectAccessReview" => {
            let spec = review.get("spec").cloned().unwrap_or(Value::Null);
            let attributes = attributes(req, &spec)?;
            status_of(req, &req.user, &attributes)
        }
        "SubjectAccessReview" | "LocalSubjectAccessReview" => {
            let spec = review.get("spec").cloned().unwrap_or(Value::Null);
            let user = spec_user(req, &spec)?;
            if info.kind == "LocalSubjectAccessReview" {
                local_namespace(req, &spec)?;
            }
            let attributes = attributes(req, &spec)?;
            status_of(req, &user, &attributes)
        }
        "SelfSubjectRulesReview" => {
            let namespace = review
                .pointer("/spec/namespace")
                .and_then(Value::as_str)
                .unwrap_or_default();
            if namespace.is_empty() {
                return Err(ApiError::BadRequest("no namespace on request".into()));
            }
            rules_status(req, namespace)
        }
        "TokenReview" => token_review(req, &review)?,
        "SelfSubjectReview" => {
            review["metadata"] = json!({"creationTimestamp": super::meta::now_rfc3339()});
            json!({"userInfo": user_info(&req.user)})
        }
        _ => return Err(ApiError::NoRoute),
    };
    if let Some(map) = review.as_object_mut() {
        map.insert("apiVersion".into(), json!(info.api_version()));
        map.insert("kind".into(), json!(info.kind));
        map.entry("metadata").or_insert_with(|| json!({}));
        map.insert("status".into(), answer);
    }
    output::object(req, StatusCode::CREATED, &review)
}

fn text(value: &Value, pointer: &str) -> String {
    value
        .pointer(pointer)
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string()
}

fn strings(value: Option<&Value>) -> Vec<String> {
    value
        .and_then(Value::as_array)
        .map(|l| {
            l.iter()
                .filter_map(Value::as_str)
                .map(str::to_string)
                .collect()
        })
        .unwrap_or_default()
}

/// The request a review asks about, from `resourceAttributes` or `nonResourceAttributes`
/// (exactly one of them; a local review never the latter).
fn attributes(req: &ApiRequest, spec: &Value) -> Result<RequestInfo, ApiError> {
    let resource = spec.get("resourceAttributes").filter(|v| !v.is_null());
    let non_resource = spec.get("nonResourceAttributes").filter(|v| !v.is_null());
    let invalid = |field: &str, value: Option<&Value>, detail: &str| {
        ApiError::invalid(
            req.info(),
            "",
            vec![Cause::invalid(
                field,
                &value.cloned().unwrap_or(Value::Null),
                detail,
            )],
        )
    };
    if let (Some(n), "LocalSubjectAccessReview") = (non_resource, req.info().kind) {
        return Err(invalid(
            "spec.nonResourceAttributes",
            Some(&json!(format!(
                "authorization.NonResourceAttributes{{Path:{:?}, Verb:{:?}}}",
                text(n, "/path"),
                text(n, "/verb")
            ))),
            "disallowed on this kind of request",
        ));
    }
    match (resource, non_resource) {
        (Some(_), Some(n)) => Err(invalid(
            "spec.nonResourceAttributes",
            Some(&json!(format!(
                "authorization.NonResourceAttributes{{Path:{:?}, Verb:{:?}}}",
                text(n, "/path"),
                text(n, "/verb")
            ))),
            "cannot be specified in combination with resourceAttributes",
        )),
        (None, None) => Err(invalid(
            "spec.resourceAttributes",
            Some(&json!("null")),
            "exactly one of nonResourceAttributes or resourceAttributes must be specified",
        )),
        (Some(r), None) => Ok(RequestInfo {
            resource_request: true,
            verb: text(r, "/verb"),
            namespace: text(r, "/namespace"),
            api_group: text(r, "/group"),
            api_version: match text(r, "/version") {
                v if v.is_empty() => "*".into(),
                v => v,
            },
            resource: text(r, "/resource"),
            subresource: text(r, "/subresource"),
            name: text(r, "/name"),
            ..RequestInfo::default()
        }),
        (None, Some(n)) => Ok(RequestInfo {
            verb: text(n, "/verb"),
            path: text(n, "/path"),
            ..RequestInfo::default()
        }),
    }
}

fn spec_is_userless(spec: &Value) -> bool {
    text(spec, "/user").is_empty() && strings(spec.get("groups")).is_empty()
}

/// The user a SubjectAccessReview names (its groups as given: nothing is added).
fn spec_user(req: &ApiRequest, spec: &Value) -> Result<UserInfo, ApiError> {
    if spec_is_userless(spec) {
        return Err(ApiError::invalid(
            req.info(),
            "",
            vec![Cause::invalid(
                "spec.user",
                &json!(""),
                "at least one of user or group must be specified",
            )],
        ));
    }
    let extra: BTreeMap<String, Vec<String>> = spec
        .get("extra")
        .and_then(Value::as_object)
        .map(|m| {
            m.iter()
                .map(|(k, v)| (k.clone(), strings(Some(v))))
                .collect()
        })
        .unwrap_or_default();
    Ok(UserInfo {
        name: text(spec, "/user"),
        uid: text(spec, "/uid"),
        groups: strings(spec.get("groups")),
        extra: extra.into(),
    })
}

/// A LocalSubjectAccessReview asks about its own namespace only.
fn local_namespace(req: &ApiRequest, spec: &Value) -> Result<(), ApiError> {
    let namespace = req.target.namespace.clone().unwrap_or_default();
    let asked = text(spec, "/resourceAttributes/namespace");
    if asked != namespace {
        return Err(ApiError::BadRequest(format!(
            "spec.resourceAttributes.namespace must match namespace: {namespace}"
        )));
    }
    Ok(())
}

fn status_of(req: &ApiRequest, user: &UserInfo, attributes: &RequestInfo) -> Value {
    let decision = req.ctx.authorizer.authorize(user, attributes);
    let mut status = Map::new();
    status.insert("allowed".into(), json!(decision.allowed()));
    if !decision.reason().is_empty() {
        status.insert("reason".into(), json!(decision.reason()));
    }
    Value::Object(status)
}

fn rules_status(req: &ApiRequest, namespace: &str) -> Value {
    let found = req.ctx.authorizer.rules_for(&req.user, namespace);
    let mut resource_rules = Vec::new();
    let mut non_resource_rules = Vec::new();
    for rule in &found.rules {
        if !rule.resources.is_empty() {
            resource_rules.push(
                serde_json::to_value(PolicyRule {
                    non_resource_urls: Vec::new(),
                    ..rule.clone()
                })
                .unwrap_or(Value::Null),
            );
        }
        if !rule.non_resource_urls.is_empty() {
            non_resource_rules.push(json!({
                "verbs": rule.verbs,
                "nonResourceURLs": rule.non_resource_urls,
            }));
        }
    }
    let mut status = json!({
        "resourceRules": resource_rules,
        "nonResourceRules": non_resource_rules,
        "incomplete": false,
    });
    if !found.errors.is_empty() {
        status["evaluationError"] = json!(if found.errors.len() == 1 {
            found.errors[0].clone()
        } else {
            format!("[{}]", found.errors.join(", "))
        });
    }
    status
}

/// `authentication.k8s.io/v1` UserInfo.
/// The status of a TokenReview: the token's user and the audiences it is good for, or why
/// it authenticates no one.
fn token_review(req: &ApiRequest, review: &Value) -> Result<Value, ApiError> {
    let token = review
        .pointer("/spec/token")
        .and_then(Value::as_str)
        .unwrap_or_default();
    if token.is_empty() {
        return Err(ApiError::BadRequest(
            "token is required for TokenReview in authentication.k8s.io/v1".into(),
        ));
    }
    let audiences: Vec<String> = review
        .pointer("/spec/audiences")
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(Value::as_str)
                .map(str::to_string)
                .collect()
        })
        .unwrap_or_default();
    let Some(tokens) = &req.ctx.service_accounts else {
        return Ok(json!({"user": {}, "error": "[invalid bearer token]"}));
    };
    Ok(
        match tokens.authenticate(token.as_bytes(), &audiences, chrono::Utc::now().timestamp()) {
            Ok(who) => json!({
                "authenticated": true,
                "user": user_info(&who.user),
                "audiences": who.audiences,
            }),
            Err(e) => json!({"user": {}, "error": format!("[invalid bearer token, {e}]")}),
        },
    )
}

fn user_info(user: &UserInfo) -> Value {
    let mut info = Map::new();
    info.insert("username".into(), json!(user.name));
    if !user.uid.is_empty() {
        info.insert("uid".into(), json!(user.uid));
    }
    if !user.groups.is_empty() {
        info.insert("groups".into(), json!(user.groups));
    }
    if !user.extra.is_empty() {
        info.insert("extra".into(), json!(user.extra));
    }
    Value::Object(info)
}
