//! The one place where API errors become Kubernetes `Status` objects: `ApiError`, its HTTP
//! code, reason and the canonical upstream messages (apimachinery pkg/api/errors/errors.go).

use http::{Response, StatusCode};
use serde_json::{json, Map, Value};

use super::{response, ApiBody};
use crate::kube::mutation::ApplyError;
use crate::kube::resources::ResourceInfo;
use crate::kube::writer::WriteError;

/// A group and plural resource, as errors name them (`leases.coordination.k8s.io`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Gr {
    pub group: String,
    pub plural: String,
}

impl Gr {
    pub fn of(info: &ResourceInfo) -> Gr {
        Gr {
            group: info.group.to_string(),
            plural: info.plural.to_string(),
        }
    }

    pub fn qualified(&self) -> String {
        if self.group.is_empty() {
            self.plural.clone()
        } else {
            format!("{}.{}", self.plural, self.group)
        }
    }
}

/// One field problem of an Invalid error.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cause {
    /// `FieldValueInvalid`, `FieldValueRequired`, `FieldValueForbidden`, …
    pub reason: &'static str,
    pub field: String,
    /// The error body, e.g. `Invalid value: "x": must be …` or `Required value`.
    pub message: String,
}

impl Cause {
    pub fn invalid(field: &str, value: &Value, detail: &str) -> Cause {
        let shown = match value {
            Value::String(s) => format!("{s:?}"),
            other => other.to_string(),
        };
        Cause {
            reason: "FieldValueInvalid",
            field: field.to_string(),
            message: format!("Invalid value: {shown}: {detail}"),
        }
    }

    pub fn required(field: &str, detail: &str) -> Cause {
        let message = if detail.is_empty() {
            "Required value".to_string()
        } else {
            format!("Required value: {detail}")
        };
        Cause {
            reason: "FieldValueRequired",
            field: field.to_string(),
            message,
        }
    }

    pub fn forbidden(field: &str, detail: &str) -> Cause {
        Cause {
            reason: "FieldValueForbidden",
            field: field.to_string(),
            message: format!("Forbidden: {detail}"),
        }
    }
}

/// Every way an API request can fail.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ApiError {
    #[error("{} \"{name}\" not found", .gr.qualified())]
    NotFound { gr: Gr, name: String },
    /// A path that names no resource or handler.
    #[error("the server could not find the requested resource")]
    NoRoute,
    /// A discovery or OpenAPI path of a group or version this server does not serve; answered
    /// with empty details, as kube-apiserver's discovery and OpenAPI handlers do.
    #[error("the server could not find the requested resource")]
    NoDocument,
    /// A request over plain HTTP for anything but the health endpoints and `/version`.
    #[error("plain HTTP serves only /readyz, /livez, /healthz and /version; use HTTPS")]
    HttpsRequired,
    #[error("{} \"{name}\" already exists", .gr.qualified())]
    AlreadyExists { gr: Gr, name: String },
    #[error("Operation cannot be fulfilled on {} \"{name}\": {detail}", .gr.qualified())]
    Conflict {
        gr: Gr,
        name: String,
        detail: String,
    },
    #[error("{}", invalid_message(.kind, .group, .name, .causes))]
    Invalid {
        kind: String,
        group: String,
        name: String,
        causes: Vec<Cause>,
    },
    /// A server-side apply that would change fields other managers own (409, reason
    /// Conflict, one `FieldManagerConflict` cause per field).
    #[error("{message}")]
    ApplyConflict {
        message: String,
        /// (message, field) per conflicting field.
        causes: Vec<(String, String)>,
    },
    /// 422 without an object to name, as upstream answers a JSON patch that does not apply.
    #[error("{0}")]
    Unprocessable(String),
    #[error("{0}")]
    BadRequest(String),
    #[error("{0}")]
    Forbidden(String),
    /// A 403 about a resource (or, with an empty `gr`, a path), as apimachinery's
    /// `NewForbidden` words it: `pods is forbidden: User "x" cannot list …`.
    #[error("{}", denied_message(.gr, .name, .detail))]
    Denied {
        gr: Gr,
        name: String,
        detail: String,
    },
    /// A write an admission webhook refused: the code (at least 400), reason and message of
    /// the status it answered (`admission webhook "NAME" denied the request: …`).
    #[error("{message}")]
    WebhookDenied {
        code: u16,
        reason: String,
        message: String,
    },
    #[error("the server does not allow this method on the requested resource")]
    MethodNotAllowed,
    /// 405 with its own message: a verb the resource refuses for now (a create of a custom
    /// object while its definition is being deleted).
    #[error("{0}")]
    NotAllowedNow(String),
    #[error(
        "the body of the request was in an unknown format - accepted media types include: {0}"
    )]
    UnsupportedMediaType(String),
    /// Nothing in the Accept header can be served (discovery).
    #[error("{0}")]
    NotAcceptable(String),
    #[error("Request entity too large: limit is {0}")]
    TooLarge(usize),
    #[error("{0}")]
    Expired(String),
    #[error("Too large resource version: {requested}, current: {current}")]
    ResourceVersionTooLarge { requested: u64, current: u64 },
    #[error("{0}")]
    Timeout(String),
    #[error("Unauthorized")]
    Unauthorized,
    #[error("Internal error occurred: {0}")]
    Internal(String),
    #[error("{0}")]
    ServiceUnavailable(String),
    /// 429: the request is refused for now (an eviction a disruption budget forbids); `causes`
    /// are (reason, message) pairs.
    #[error("{message}")]
    TooManyRequests {
        message: String,
        causes: Vec<(String, String)>,
    },
}

/// The message upstream builds for 410 on an expired continue token.
pub const CONTINUE_EXPIRED: &str = "The provided continue parameter is too old to display a consistent list result. You can start a new list without the continue parameter, or use the continue token in this response to retrieve the remainder of the results. Continuing with the provided token results in an inconsistent list - objects that were created, modified, or deleted between the time the first chunk was returned and now may show up in the list.";

fn denied_message(gr: &Gr, name: &str, detail: &str) -> String {
    if gr.group.is_empty() && gr.plural.is_empty() {
        format!("forbidden: {detail}")
    } else if name.is_empty() {
        format!("{} is forbidden: {detail}", gr.qualified())
    } else {
        format!(
            "{} {} is forbidden: {detail}",
            gr.qualified(),
            crate::auth::messages::go_quote(name)
        )
    }
}

fn invalid_message(kind: &str, group: &str, name: &str, causes: &[Cause]) -> String {
    let qualified = if group.is_empty() {
        kind.to_string()
    } else {
        format!("{kind}.{group}")
    };
    let parts: Vec<String> = causes
        .iter()
        .map(|c| format!("{}: {}", c.field, c.message))
        .collect();
    let joined = match parts.len() {
        1 => parts[0].clone(),
        _ => format!("[{}]", parts.join(", ")),
    };
    format!("{qualified} {name:?} is invalid: {joined}")
}

impl ApiError {
    pub fn not_found(info: &ResourceInfo, name: &str) -> ApiError {
        ApiError::NotFound {
            gr: Gr::of(info),
            name: name.to_string(),
        }
    }

    pub fn conflict_modified(info: &ResourceInfo, name: &str) -> ApiError {
        ApiError::Conflict {
            gr: Gr::of(info),
            name: name.to_string(),
            detail: "the object has been modified; please apply your changes to the latest version and try again".into(),
        }
    }

    pub fn invalid(info: &ResourceInfo, name: &str, causes: Vec<Cause>) -> ApiError {
        ApiError::Invalid {
            kind: info.kind.to_string(),
            group: info.group.to_string(),
            name: name.to_string(),
            causes,
        }
    }

    /// The 403 of a request the authorizer denied (`info` as it read the request), with the
    /// authorizer's reason when it gave one.
    pub fn denied(
        user: &str,
        info: &crate::auth::attributes::RequestInfo,
        reason: &str,
    ) -> ApiError {
        let mut detail = crate::auth::messages::forbidden(user, info);
        if !reason.is_empty() {
            detail.push_str(": ");
            detail.push_str(reason);
        }
        ApiError::Denied {
            gr: Gr {
                group: info.api_group.clone(),
                plural: info.resource.clone(),
            },
            name: info.name.clone(),
            detail,
        }
    }

    pub fn too_old(requested: u64, oldest: u64) -> ApiError {
        ApiError::Expired(format!("too old resource version: {requested} ({oldest})"))
    }

    /// The API error for a failed write of an object of kind `info`.
    pub fn from_write(info: &ResourceInfo, error: WriteError) -> ApiError {
        match error {
            WriteError::Rejected(ApplyError::AlreadyExists(key)) => ApiError::AlreadyExists {
                gr: Gr::of(info),
                name: key.name,
            },
            WriteError::Rejected(ApplyError::NotFound(key)) => ApiError::not_found(info, &key.name),
            WriteError::Rejected(ApplyError::Conflict { key, .. }) => {
                ApiError::conflict_modified(info, &key.name)
            }
            WriteError::Rejected(ApplyError::Invalid { reason, .. }) => ApiError::Internal(reason),
            // The create path (`api::write`) answers this one itself (it tells a missing
            // namespace from one being deleted); any other writer that sets the requirement
            // gets the namespace's 404.
            WriteError::Rejected(ApplyError::NamespaceNotOpen(key)) => {
                match crate::kube::resources::find("", "v1", "namespaces") {
                    Some(namespaces) => ApiError::not_found(namespaces, &key.namespace),
                    None => ApiError::Internal(format!("{key}: namespace not open")),
                }
            }
            WriteError::Unavailable(reason) => {
                ApiError::ServiceUnavailable(format!("storage is unavailable: {reason}"))
            }
            WriteError::Timeout => ApiError::Timeout(
                "Timeout: request did not complete within the allowed duration".into(),
            ),
        }
    }

    pub fn code(&self) -> StatusCode {
        match self {
            ApiError::NotFound { .. }
            | ApiError::NoRoute
            | ApiError::NoDocument
            | ApiError::HttpsRequired => StatusCode::NOT_FOUND,
            ApiError::AlreadyExists { .. }
            | ApiError::Conflict { .. }
            | ApiError::ApplyConflict { .. } => StatusCode::CONFLICT,
            ApiError::Invalid { .. } | ApiError::Unprocessable(_) => {
                StatusCode::UNPROCESSABLE_ENTITY
            }
            ApiError::BadRequest(_) => StatusCode::BAD_REQUEST,
            ApiError::WebhookDenied { code, .. } => {
                StatusCode::from_u16(*code).unwrap_or(StatusCode::BAD_REQUEST)
            }
            ApiError::Forbidden(_) | ApiError::Denied { .. } => StatusCode::FORBIDDEN,
            ApiError::MethodNotAllowed | ApiError::NotAllowedNow(_) => {
                StatusCode::METHOD_NOT_ALLOWED
            }
            ApiError::NotAcceptable(_) => StatusCode::NOT_ACCEPTABLE,
            ApiError::UnsupportedMediaType(_) => StatusCode::UNSUPPORTED_MEDIA_TYPE,
            ApiError::TooLarge(_) => StatusCode::PAYLOAD_TOO_LARGE,
            ApiError::Expired(_) => StatusCode::GONE,
            ApiError::ResourceVersionTooLarge { .. } | ApiError::Timeout(_) => {
                StatusCode::GATEWAY_TIMEOUT
            }
            ApiError::Unauthorized => StatusCode::UNAUTHORIZED,
            ApiError::Internal(_) => StatusCode::INTERNAL_SERVER_ERROR,
            ApiError::ServiceUnavailable(_) => StatusCode::SERVICE_UNAVAILABLE,
            ApiError::TooManyRequests { .. } => StatusCode::TOO_MANY_REQUESTS,
        }
    }

    pub fn reason(&self) -> &'static str {
        match self {
            ApiError::NotFound { .. }
            | ApiError::NoRoute
            | ApiError::NoDocument
            | ApiError::HttpsRequired => "NotFound",
            ApiError::AlreadyExists { .. } => "AlreadyExists",
            ApiError::Conflict { .. } | ApiError::ApplyConflict { .. } => "Conflict",
            ApiError::Invalid { .. } | ApiError::Unprocessable(_) => "Invalid",
            ApiError::BadRequest(_) => "BadRequest",
            // The webhook's own reason, put in place by `status`.
            ApiError::WebhookDenied { .. } => "",
            ApiError::Forbidden(_) | ApiError::Denied { .. } => "Forbidden",
            ApiError::MethodNotAllowed | ApiError::NotAllowedNow(_) => "MethodNotAllowed",
            ApiError::NotAcceptable(_) => "NotAcceptable",
            ApiError::UnsupportedMediaType(_) => "UnsupportedMediaType",
            ApiError::TooLarge(_) => "RequestEntityTooLarge",
            ApiError::Expired(_) => "Expired",
            ApiError::ResourceVersionTooLarge { .. } | ApiError::Timeout(_) => "Timeout",
            ApiError::Unauthorized => "Unauthorized",
            ApiError::Internal(_) => "InternalError",
            ApiError::ServiceUnavailable(_) => "ServiceUnavailable",
            ApiError::TooManyRequests { .. } => "TooManyRequests",
        }
    }

    fn details(&self) -> Option<Value> {
        let gr_details = |gr: &Gr, name: &str| {
            let mut d = Map::new();
            d.insert("name".into(), json!(name));
            if !gr.group.is_empty() {
                d.insert("group".into(), json!(gr.group));
            }
            d.insert("kind".into(), json!(gr.plural));
            Value::Object(d)
        };
        match self {
            ApiError::NotFound { gr, name }
            | ApiError::AlreadyExists { gr, name }
            | ApiError::Conflict { gr, name, .. } => Some(gr_details(gr, name)),
            ApiError::Invalid {
                kind,
                group,
                name,
                causes,
            } => {
                let mut d = Map::new();
                d.insert("name".into(), json!(name));
                if !group.is_empty() {
                    d.insert("group".into(), json!(group));
                }
                d.insert("kind".into(), json!(kind));
                let causes: Vec<Value> = causes
                    .iter()
                    .map(|c| json!({"reason": c.reason, "message": c.message, "field": c.field}))
                    .collect();
                d.insert("causes".into(), Value::Array(causes));
                Some(Value::Object(d))
            }
            ApiError::Denied { gr, name, .. } => {
                let mut d = Map::new();
                if !name.is_empty() {
                    d.insert("name".into(), json!(name));
                }
                if !gr.group.is_empty() {
                    d.insert("group".into(), json!(gr.group));
                }
                if !gr.plural.is_empty() {
                    d.insert("kind".into(), json!(gr.plural));
                }
                Some(Value::Object(d))
            }
            ApiError::ApplyConflict { causes, .. } => Some(json!({
                "causes": causes
                    .iter()
                    .map(|(message, field)| json!({"reason": "FieldManagerConflict", "message": message, "field": field}))
                    .collect::<Vec<_>>()
            })),
            ApiError::Unprocessable(_) | ApiError::NoDocument | ApiError::NotAcceptable(_) => {
                Some(json!({}))
            }
            ApiError::ResourceVersionTooLarge { .. } => Some(json!({
                "causes": [{"reason": "ResourceVersionTooLarge", "message": "Too large resource version"}],
                "retryAfterSeconds": 1
            })),
            ApiError::Timeout(_) | ApiError::ServiceUnavailable(_) => {
                Some(json!({"retryAfterSeconds": 1}))
            }
            ApiError::Internal(m) => Some(json!({"causes": [{"message": m}]})),
            ApiError::TooManyRequests { causes, .. } => Some(json!({
                "causes": causes
                    .iter()
                    .map(|(reason, message)| json!({"reason": reason, "message": message}))
                    .collect::<Vec<_>>()
            })),
            _ => None,
        }
    }

    /// The `Status` object.
    pub fn status(&self) -> Value {
        let mut status = json!({
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.to_string(),
            "reason": self.reason(),
        });
        if let Some(details) = self.details() {
            status["details"] = details;
        }
        if let ApiError::WebhookDenied { reason, .. } = self {
            status["reason"] = json!(reason);
        }
        status["code"] = json!(self.code().as_u16());
        status
    }

    pub fn into_response(self) -> Response<ApiBody> {
        let mut resp = response::json_value(self.code(), &self.status());
        if matches!(
            self,
            ApiError::ResourceVersionTooLarge { .. }
                | ApiError::Timeout(_)
                | ApiError::ServiceUnavailable(_)
        ) {
            resp.headers_mut().insert(
                http::header::RETRY_AFTER,
                http::HeaderValue::from_static("1"),
            );
        }
        resp
    }
}

/// A `Status` of success (deletes that do not return the object).
pub fn success(info: &ResourceInfo, name: &str, uid: &str) -> Value {
    let mut details = Map::new();
    details.insert("name".into(), json!(name));
    if !info.group.is_empty() {
        details.insert("group".into(), json!(info.group));
    }
    details.insert("kind".into(), json!(info.plural));
    details.insert("uid".into(), json!(uid));
    json!({"kind":"Status","apiVersion":"v1","metadata":{},"status":"Success","details":details})
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kube::resources;

    #[test]
    fn canonical_messages() {
        let cm = resources::find("", "v1", "configmaps").unwrap();
        let lease = resources::find("coordination.k8s.io", "v1", "leases").unwrap();
        let nf = ApiError::not_found(cm, "x").status();
        assert_eq!(nf["message"], "configmaps \"x\" not found");
        assert_eq!(nf["details"], json!({"name":"x","kind":"configmaps"}));
        assert_eq!(nf["code"], 404);
        let c = ApiError::conflict_modified(lease, "x").status();
        assert_eq!(c["message"], "Operation cannot be fulfilled on leases.coordination.k8s.io \"x\": the object has been modified; please apply your changes to the latest version and try again");
        assert_eq!(c["reason"], "Conflict");
        assert_eq!(c["details"]["group"], "coordination.k8s.io");
        let inv = ApiError::invalid(
            cm,
            "Bad",
            vec![Cause::invalid(
                "metadata.name",
                &json!("Bad"),
                "must be lowercase",
            )],
        )
        .status();
        assert_eq!(
            inv["message"],
            "ConfigMap \"Bad\" is invalid: metadata.name: Invalid value: \"Bad\": must be lowercase"
        );
        assert_eq!(inv["details"]["kind"], "ConfigMap");
        assert_eq!(inv["details"]["causes"][0]["reason"], "FieldValueInvalid");
        assert_eq!(inv["code"], 422);
        let big = ApiError::ResourceVersionTooLarge {
            requested: 9,
            current: 3,
        }
        .status();
        assert_eq!(big["message"], "Too large resource version: 9, current: 3");
        assert_eq!(big["details"]["retryAfterSeconds"], 1);
        assert_eq!(big["code"], 504);
        assert_eq!(
            ApiError::too_old(1, 5).status()["message"],
            "too old resource version: 1 (5)"
        );
        let two = ApiError::invalid(
            lease,
            "l",
            vec![Cause::required("a", ""), Cause::required("b", "")],
        );
        assert_eq!(
            two.to_string(),
            "Lease.coordination.k8s.io \"l\" is invalid: [a: Required value, b: Required value]"
        );
    }

    /// The bytes of the errors the transport, discovery and OpenAPI answer, as clients see them.
    #[test]
    fn transport_and_discovery_bytes() {
        let bytes = |e: ApiError| {
            let resp = e.into_response();
            let code = resp.status().as_u16();
            let body =
                futures::executor::block_on(http_body_util::BodyExt::collect(resp.into_body()))
                    .unwrap()
                    .to_bytes();
            (code, String::from_utf8(body.to_vec()).unwrap())
        };
        let cases = [
            (
                ApiError::Unauthorized,
                401,
                r#"{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"Unauthorized","reason":"Unauthorized","code":401}"#,
            ),
            (
                ApiError::HttpsRequired,
                404,
                r#"{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"plain HTTP serves only /readyz, /livez, /healthz and /version; use HTTPS","reason":"NotFound","code":404}"#,
            ),
            (
                ApiError::NoDocument,
                404,
                r#"{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"the server could not find the requested resource","reason":"NotFound","details":{},"code":404}"#,
            ),
            (
                ApiError::NoRoute,
                404,
                r#"{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"the server could not find the requested resource","reason":"NotFound","code":404}"#,
            ),
            (
                ApiError::NotAcceptable("only json".into()),
                406,
                r#"{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"only json","reason":"NotAcceptable","details":{},"code":406}"#,
            ),
        ];
        for (error, code, body) in cases {
            assert_eq!(bytes(error), (code, body.to_string()));
        }
    }
}
