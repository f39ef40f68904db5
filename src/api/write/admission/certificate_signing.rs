//! CertificateSigningRequests at admission, as kube-apiserver's CSR strategy and its
//! CertificateApproval, CertificateSigning and CertificateSubjectRestriction plugins treat them:
//!
//! - On create, `spec.username`, `uid`, `groups` and `extra` are the requesting user's, whatever
//!   the body said; a request to `kubernetes.io/kube-apiserver-client` naming the
//!   `system:masters` group is refused (403), since an approver could otherwise mint an
//!   unrestricted credential by accident.
//! - On update the spec is the stored one (it never changes after create). The object itself
//!   changes neither status nor spec; `status` changes the status but keeps the Approved and
//!   Denied conditions as stored (adding one there is refused); `approval` changes the
//!   conditions but keeps the certificate.
//! - Writing `approval` needs `approve` on the resource `signers` (group certificates.k8s.io)
//!   named the request's signerName or `<domain>/*`; changing the certificate or the conditions
//!   through `status` needs `sign` on it. Both come on top of the request's own authorization
//!   (`update` on `certificatesigningrequests/approval` or `/status`).
//! - Conditions without times get the current time; an unchanged condition keeps its
//!   transition time.

use serde_json::{json, Value};

use super::Operation;
use crate::api::certificates::{self, conditions_of, GROUP};
use crate::api::meta::now_rfc3339;
use crate::api::request::ApiRequest;
use crate::api::status::{ApiError, Cause, Gr};
use crate::auth::attributes::RequestInfo;
use crate::auth::user::MASTERS;
use crate::auth::UserInfo;

const PLURAL: &str = "certificatesigningrequests";

pub fn admit(req: &ApiRequest, operation: &mut Operation<'_>) -> Result<(), ApiError> {
    let info = req.info();
    if info.group != GROUP || info.plural != PLURAL {
        return Ok(());
    }
    match operation {
        Operation::Create { object } => {
            set_requestor(object, &req.user);
            restrict_subject(req, object)
        }
        Operation::Update { current, object } => {
            let old = current.value();
            object["spec"] = old.get("spec").cloned().unwrap_or_else(|| json!({}));
            let name = current.key.name.clone();
            let signer = old
                .pointer("/spec/signerName")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_string();
            match req.target.subresource.as_deref() {
                Some("approval") => {
                    match old.pointer("/status/certificate") {
                        Some(c) => object["status"]["certificate"] = c.clone(),
                        None => {
                            if let Some(s) = object.get_mut("status").and_then(Value::as_object_mut)
                            {
                                s.remove("certificate");
                            }
                        }
                    }
                    if !authorized_for_signer(req, &req.user, "approve", &signer) {
                        return Err(denied(req, &name, "approve", &signer));
                    }
                }
                Some("status") => {
                    keep_approval_conditions(req, &name, &old, object)?;
                    let changed = old.pointer("/status/certificate")
                        != object.pointer("/status/certificate")
                        || old.pointer("/status/conditions")
                            != object.pointer("/status/conditions");
                    if changed && !authorized_for_signer(req, &req.user, "sign", &signer) {
                        return Err(denied(req, &name, "sign", &signer));
                    }
                }
                _ => match old.get("status") {
                    Some(s) => object["status"] = s.clone(),
                    None => {
                        if let Some(m) = object.as_object_mut() {
                            m.remove("status");
                        }
                    }
                },
            }
            stamp_conditions(&old, object);
            Ok(())
        }
        Operation::Delete { .. } => Ok(()),
    }
}

/// The requestor's identity in the spec, as the authenticator gave it.
fn set_requestor(object: &mut Value, user: &UserInfo) {
    if !object.get("spec").is_some_and(Value::is_object) {
        object["spec"] = json!({});
    }
    let Some(spec) = object.get_mut("spec").and_then(Value::as_object_mut) else {
        return;
    };
    for field in ["username", "uid", "groups", "extra"] {
        spec.remove(field);
    }
    spec.insert("username".into(), json!(user.name));
    if !user.uid.is_empty() {
        spec.insert("uid".into(), json!(user.uid));
    }
    if !user.groups.is_empty() {
        spec.insert("groups".into(), json!(user.groups));
    }
    if !user.extra.is_empty() {
        spec.insert("extra".into(), json!(user.extra));
    }
}

fn restrict_subject(req: &ApiRequest, object: &Value) -> Result<(), ApiError> {
    if object.pointer("/spec/signerName").and_then(Value::as_str)
        != Some(certificates::KUBE_APISERVER_CLIENT)
    {
        return Ok(());
    }
    // A request that does not parse is refused by the kind's validation (422).
    let Some(parsed) = certificates::request_bytes(object)
        .and_then(|bytes| certificates::parse_request(&bytes).ok())
    else {
        return Ok(());
    };
    if parsed.organizations.iter().any(|o| o == MASTERS) {
        let name = object
            .pointer("/metadata/name")
            .and_then(Value::as_str)
            .unwrap_or_default();
        return Err(ApiError::Denied {
            gr: Gr::of(req.info()),
            name: name.to_string(),
            detail: format!(
                "use of {} signer with {MASTERS} group is not allowed",
                certificates::KUBE_APISERVER_CLIENT
            ),
        });
    }
    Ok(())
}

/// Whether `user` holds `verb` on the signer `signer`, or on every signer of its domain.
pub fn authorized_for_signer(req: &ApiRequest, user: &UserInfo, verb: &str, signer: &str) -> bool {
    let ask = |name: &str| {
        let info = RequestInfo {
            resource_request: true,
            verb: verb.to_string(),
            api_group: GROUP.to_string(),
            api_version: "*".to_string(),
            resource: "signers".to_string(),
            name: name.to_string(),
            ..RequestInfo::default()
        };
        req.ctx.authorizer.authorize(user, &info).allowed()
    };
    if ask(signer) {
        return true;
    }
    match signer.split_once('/') {
        Some((domain, _)) => ask(&format!("{domain}/*")),
        None => false,
    }
}

fn denied(req: &ApiRequest, name: &str, verb: &str, signer: &str) -> ApiError {
    ApiError::Denied {
        gr: Gr::of(req.info()),
        name: name.to_string(),
        detail: format!(
            "user not permitted to {verb} requests with signerName {}",
            crate::auth::messages::go_quote(signer)
        ),
    }
}

/// The `status` subresource keeps the stored Approved and Denied conditions; a write that
/// adds or removes one is refused as kube-apiserver refuses it.
fn keep_approval_conditions(
    req: &ApiRequest,
    name: &str,
    old: &Value,
    object: &mut Value,
) -> Result<(), ApiError> {
    let mut causes = Vec::new();
    for kind in ["Approved", "Denied"] {
        let before: Vec<Value> = conditions_of(old, kind).into_iter().cloned().collect();
        let positions: Vec<usize> = object
            .pointer("/status/conditions")
            .and_then(Value::as_array)
            .map(|list| {
                list.iter()
                    .enumerate()
                    .filter(|(_, c)| c.get("type").and_then(Value::as_str) == Some(kind))
                    .map(|(i, _)| i)
                    .collect()
            })
            .unwrap_or_default();
        if positions.len() > before.len() {
            causes.push(Cause::forbidden(
                "status.conditions",
                &format!("updates may not add a condition of type {kind:?}"),
            ));
        } else if positions.len() == before.len() {
            for (at, condition) in positions.into_iter().zip(before) {
                object["status"]["conditions"][at] = condition;
            }
        }
        // Fewer than stored: the kind's validation refuses the removal.
    }
    if causes.is_empty() {
        Ok(())
    } else {
        Err(ApiError::invalid(req.info(), name, causes))
    }
}

/// kube-apiserver's `populateConditionTimestamps`.
fn stamp_conditions(old: &Value, object: &mut Value) {
    let now = now_rfc3339();
    let Some(list) = object
        .pointer_mut("/status/conditions")
        .and_then(Value::as_array_mut)
    else {
        return;
    };
    for condition in list.iter_mut() {
        let Some(c) = condition.as_object_mut() else {
            continue;
        };
        let unset = |v: Option<&Value>| v.is_none_or(|v| v.is_null() || v == "");
        if unset(c.get("lastUpdateTime")) {
            c.insert("lastUpdateTime".into(), json!(now));
        }
        if unset(c.get("lastTransitionTime")) {
            let kind = c.get("type").cloned().unwrap_or(Value::Null);
            let status = c.get("status").cloned().unwrap_or(Value::Null);
            let kept = old
                .pointer("/status/conditions")
                .and_then(Value::as_array)
                .and_then(|l| {
                    l.iter()
                        .find(|o| o.get("type") == Some(&kind) && o.get("status") == Some(&status))
                })
                .and_then(|o| o.get("lastTransitionTime"))
                .filter(|t| !unset(Some(t)))
                .cloned();
            c.insert(
                "lastTransitionTime".into(),
                kept.unwrap_or_else(|| json!(now)),
            );
        }
    }
}
