//! The audit record: kube-apiserver's audit.k8s.io/v1 `Event`, one JSON object per line.
//!
//! Fields, as upstream fills them: `level`, `auditID` (a UUID per request, also answered in
//! the `Audit-Id` response header), `stage`, `requestURI` (path and query as sent), `verb`
//! (the RBAC verb for resource requests, the lower-case HTTP method otherwise), `user` (as
//! authenticated), `impersonatedUser`, `sourceIPs` (`X-Forwarded-For`, `X-Real-Ip`, then the
//! peer), `userAgent`, `objectRef`, `responseStatus` (the code, and for failures the
//! `Status`'s status, message and reason), `requestObject` (level Request and above) and
//! `responseObject` (RequestResponse), `requestReceivedTimestamp` and `stageTimestamp`
//! (RFC 3339, microseconds) and `annotations` (`authorization.k8s.io/decision` and `reason`).

use std::collections::BTreeMap;

use serde::Serialize;
use serde_json::Value;

use crate::auth::UserInfo;

/// How much of a request is recorded.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Serialize)]
pub enum Level {
    /// Not recorded.
    #[default]
    None,
    /// Who, what, when and the outcome; no bodies.
    Metadata,
    /// Metadata and the request's body.
    Request,
    /// Metadata and both bodies.
    RequestResponse,
}

/// The moments a request is recorded at.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum Stage {
    /// As soon as the request is authenticated, before anything else happens to it.
    RequestReceived,
    /// When the headers of a long-running answer (a watch, a stream) are sent.
    ResponseStarted,
    /// When the whole answer has been sent (or the client went away).
    ResponseComplete,
    /// The handler panicked.
    Panic,
}

impl Stage {
    pub fn parse(text: &str) -> Option<Stage> {
        Some(match text {
            "RequestReceived" => Stage::RequestReceived,
            "ResponseStarted" => Stage::ResponseStarted,
            "ResponseComplete" => Stage::ResponseComplete,
            "Panic" => Stage::Panic,
            _ => return None,
        })
    }
}

/// authentication.k8s.io/v1 `UserInfo` as the event carries it.
#[derive(Debug, Clone, Serialize)]
pub struct AuditUser {
    #[serde(skip_serializing_if = "String::is_empty")]
    pub username: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub uid: String,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub groups: Vec<String>,
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub extra: BTreeMap<String, Vec<String>>,
}

impl From<&UserInfo> for AuditUser {
    fn from(user: &UserInfo) -> AuditUser {
        AuditUser {
            username: user.name.clone(),
            uid: user.uid.clone(),
            groups: user.groups.clone(),
            extra: (*user.extra).clone(),
        }
    }
}

/// The object a resource request is about.
#[derive(Debug, Clone, Default, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ObjectRef {
    #[serde(skip_serializing_if = "String::is_empty")]
    pub resource: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub namespace: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub name: String,
    #[serde(rename = "apiGroup", skip_serializing_if = "String::is_empty")]
    pub api_group: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub api_version: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub subresource: String,
}

/// One audit event, as written.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Event {
    pub kind: &'static str,
    pub api_version: &'static str,
    pub level: Level,
    #[serde(rename = "auditID")]
    pub audit_id: String,
    pub stage: Stage,
    #[serde(rename = "requestURI")]
    pub request_uri: String,
    pub verb: String,
    pub user: AuditUser,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub impersonated_user: Option<AuditUser>,
    #[serde(rename = "sourceIPs")]
    pub source_ips: Vec<String>,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub user_agent: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub object_ref: Option<ObjectRef>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub response_status: Option<Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub request_object: Option<Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub response_object: Option<Value>,
    pub request_received_timestamp: String,
    pub stage_timestamp: String,
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub annotations: BTreeMap<String, String>,
}

/// A time as upstream's `MicroTime` is written: `2006-01-02T15:04:05.000000Z`.
pub fn micro_time(at: chrono::DateTime<chrono::Utc>) -> String {
    at.format("%Y-%m-%dT%H:%M:%S%.6fZ").to_string()
}

/// The `responseStatus` of an answer with `code` and, for a failure, its `Status` body.
pub fn response_status(code: u16, status_body: Option<&Value>) -> Value {
    let mut out = serde_json::json!({"metadata": {}, "code": code});
    if let Some(Value::Object(status)) = status_body {
        if status.get("kind").and_then(Value::as_str) == Some("Status") {
            for key in ["status", "message", "reason", "details"] {
                if let Some(v) = status.get(key) {
                    out[key] = v.clone();
                }
            }
        }
    }
    out
}

/// Drops `metadata.managedFields` from an object, or from every item of a list.
pub fn strip_managed_fields(value: &mut Value) {
    if let Some(meta) = value.get_mut("metadata").and_then(Value::as_object_mut) {
        meta.remove("managedFields");
    }
    if let Some(items) = value.get_mut("items").and_then(Value::as_array_mut) {
        for item in items {
            if let Some(meta) = item.get_mut("metadata").and_then(Value::as_object_mut) {
                meta.remove("managedFields");
            }
        }
    }
}
