//! One call of one webhook: the AdmissionReview (`admission.k8s.io/v1`) it is sent, the
//! HTTPS exchange (the configuration's caBundle is the only trust, connections are kept per
//! webhook address), and the reading of its answer: allowed or denied with a status, a
//! JSONPatch (`patchType: JSONPatch`, base64) and warnings.
//!
//! A webhook named by URL is called at that URL; one named by Service reference
//! (`clientConfig.service`) through a stream to one of the Service's ready endpoints
//! (`streams::dial`), its certificate checked for `<name>.<namespace>.svc` as kube-apiserver
//! checks it.
//!
//! A call that gets no usable answer ([`CallError`]) is decided by the webhook's
//! failurePolicy; a denial is the webhook's answer and is never ignored.

use std::collections::HashMap;
use std::time::Duration;

use base64::Engine;
use bytes::Bytes;
use http::{header, Method, Request};
use http_body_util::Full;
use parking_lot::Mutex;
use serde_json::{json, Value};

use super::config::{Endpoint, Hook};
use crate::api::ApiContext;
use crate::http_client::{ClientError, Limits, Pool, TlsConfig};
use crate::streams::service_http::{ServiceHttp, ServiceHttpError, ServiceTarget};

/// The largest answer read from a webhook.
const MAX_ANSWER: usize = 8 << 20;
/// Idle HTTP/1.1 connections kept per webhook address (an HTTP/2 one carries every call).
const IDLE_PER_HOST: usize = 8;
const REVIEW_API_VERSION: &str = "admission.k8s.io/v1";

/// Why a call gave no usable answer (the failurePolicy decides what follows).
#[derive(Debug, thiserror::Error)]
pub enum CallError {
    #[error("failed to call webhook: Post {url:?}: {error}")]
    Client { url: String, error: ClientError },
    #[error("failed to call webhook: the server answered {code}: {preview}")]
    Status { code: u16, preview: String },
    #[error("received invalid webhook response: {0}")]
    Invalid(String),
    #[error("failed to call webhook: Post {url:?}: {error}")]
    Service {
        url: String,
        error: ServiceHttpError,
    },
    #[error("caBundle: {0}")]
    Trust(String),
}

/// What a webhook answered.
#[derive(Debug, Default)]
pub struct Answer {
    pub allowed: bool,
    /// `response.status` (code, reason, message of a denial).
    pub status: Value,
    /// The decoded JSON Patch, if any.
    pub patch: Option<Value>,
    pub warnings: Vec<String>,
}

/// The kept connections: by URL one pool per (trusted bundle, scheme and authority); by
/// Service reference the connections `services` keeps per Service port and bundle.
#[derive(Default)]
pub struct Clients {
    pools: Mutex<HashMap<(Option<String>, String), Pool>>,
    trust: Mutex<HashMap<Option<String>, TlsConfig>>,
    services: ServiceHttp,
}

impl Clients {
    /// The TLS configuration trusting `hook`'s caBundle (the system's roots without one).
    fn tls(&self, hook: &Hook) -> Result<TlsConfig, CallError> {
        if let Some(tls) = self.trust.lock().get(&hook.ca_bundle) {
            return Ok(tls.clone());
        }
        let tls = match &hook.ca_bundle {
            Some(pem) => TlsConfig::pinned(pem, None),
            None => TlsConfig::public_roots(None),
        }
        .map_err(|e| CallError::Trust(e.to_string()))?;
        self.trust
            .lock()
            .insert(hook.ca_bundle.clone(), tls.clone());
        Ok(tls)
    }

    fn pool(&self, hook: &Hook, origin: &str) -> Result<Pool, CallError> {
        let key = (hook.ca_bundle.clone(), origin.to_string());
        if let Some(pool) = self.pools.lock().get(&key) {
            return Ok(pool.clone());
        }
        let tls = match &hook.ca_bundle {
            Some(pem) => TlsConfig::pinned(pem, None),
            None => TlsConfig::public_roots(None),
        }
        .map_err(|e| CallError::Trust(e.to_string()))?;
        let pool = Pool::https(&tls, Duration::from_secs(2), IDLE_PER_HOST);
        self.pools.lock().insert(key, pool.clone());
        Ok(pool)
    }

    /// Sends `review` (whose request uid is `uid`) to `hook` and reads its answer.
    pub async fn call(
        &self,
        ctx: &ApiContext,
        hook: &Hook,
        uid: &str,
        review: Bytes,
    ) -> Result<Answer, CallError> {
        let answer = match &hook.endpoint {
            Endpoint::Url(url) => self.call_url(hook, url, review).await?,
            Endpoint::Service {
                namespace,
                name,
                path,
                port,
            } => {
                let target = ServiceTarget {
                    namespace: namespace.clone(),
                    name: name.clone(),
                    port: *port,
                    tls: self.tls(hook)?,
                    key: bundle_key(hook.ca_bundle.as_deref()),
                };
                let path = format!("{path}?timeout={}s", hook.timeout.as_secs());
                let url = format!("https://{}:{port}{path}", target.server_name());
                let request = match post(&path, review) {
                    Ok(request) => request,
                    Err(reason) => {
                        let error = ServiceHttpError::Http(reason);
                        return Err(CallError::Service { url, error });
                    }
                };
                self.services
                    .send(ctx, &target, request, Limits::new(hook.timeout, MAX_ANSWER))
                    .await
                    .map_err(|error| CallError::Service { url, error })?
            }
        };
        if !answer.status().is_success() {
            let preview: String = String::from_utf8_lossy(answer.body())
                .chars()
                .take(200)
                .collect();
            return Err(CallError::Status {
                code: answer.status().as_u16(),
                preview,
            });
        }
        read_answer(answer.body(), uid)
    }

    async fn call_url(
        &self,
        hook: &Hook,
        base: &str,
        review: Bytes,
    ) -> Result<http::Response<Bytes>, CallError> {
        let url = format!("{base}?timeout={}s", hook.timeout.as_secs());
        let origin = base.splitn(4, '/').take(3).collect::<Vec<_>>().join("/");
        let pool = self.pool(hook, &origin)?;
        let request = post(&url, review).map_err(|reason| CallError::Client {
            url: url.clone(),
            error: ClientError::BadRequest {
                addr: url.clone(),
                reason,
            },
        })?;
        pool.send(request, Limits::new(hook.timeout, MAX_ANSWER))
            .await
            .map_err(|error| CallError::Client {
                url: url.clone(),
                error,
            })
    }
}

/// The POST of a review to `uri`.
fn post(uri: &str, review: Bytes) -> Result<Request<Full<Bytes>>, String> {
    Request::builder()
        .method(Method::POST)
        .uri(uri)
        .header(header::CONTENT_TYPE, "application/json")
        .header(header::ACCEPT, "application/json")
        .body(Full::new(review))
        .map_err(|e| e.to_string())
}

/// A short name for a CA bundle, so connections trusting one are never reused for another.
fn bundle_key(bundle: Option<&str>) -> String {
    use std::hash::{Hash, Hasher};
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    bundle.hash(&mut hasher);
    format!("{:016x}", hasher.finish())
}

/// The AdmissionReview a webhook is sent.
pub struct Review<'a> {
    pub uid: &'a str,
    pub operation: &'a str,
    pub group: &'a str,
    pub version: &'a str,
    pub kind: &'a str,
    pub resource: &'a str,
    pub subresource: &'a str,
    pub name: &'a str,
    pub namespace: &'a str,
    pub user: &'a crate::api::UserInfo,
    pub object: Option<&'a Value>,
    pub old_object: Option<&'a Value>,
    pub dry_run: bool,
    pub field_manager: Option<&'a str>,
}

impl Review<'_> {
    pub fn to_bytes(&self) -> Bytes {
        let kind = json!({"group": self.group, "version": self.version, "kind": self.kind});
        let resource =
            json!({"group": self.group, "version": self.version, "resource": self.resource});
        let options_kind = match self.operation {
            "CREATE" => "CreateOptions",
            "UPDATE" => "UpdateOptions",
            _ => "DeleteOptions",
        };
        let mut options = json!({"apiVersion": "meta.k8s.io/v1", "kind": options_kind});
        if let Some(manager) = self.field_manager.filter(|_| self.operation != "DELETE") {
            options["fieldManager"] = json!(manager);
        }
        if self.dry_run {
            options["dryRun"] = json!(["All"]);
        }
        let mut request = json!({
            "uid": self.uid,
            "kind": kind,
            "resource": resource,
            "requestKind": kind,
            "requestResource": resource,
            "name": self.name,
            "operation": self.operation,
            "userInfo": {
                "username": self.user.name,
                "uid": self.user.uid,
                "groups": self.user.groups,
                "extra": self.user.extra,
            },
            "object": self.object,
            "oldObject": self.old_object,
            "dryRun": self.dry_run,
            "options": options,
        });
        if !self.namespace.is_empty() {
            request["namespace"] = json!(self.namespace);
        }
        if !self.subresource.is_empty() {
            request["subResource"] = json!(self.subresource);
            request["requestSubResource"] = json!(self.subresource);
        }
        let review = json!({
            "apiVersion": REVIEW_API_VERSION,
            "kind": "AdmissionReview",
            "request": request,
        });
        Bytes::from(serde_json::to_vec(&review).unwrap_or_default())
    }
}

/// Reads an AdmissionReview answer to the request `uid`.
pub fn read_answer(body: &[u8], uid: &str) -> Result<Answer, CallError> {
    let review: Value =
        serde_json::from_slice(body).map_err(|e| CallError::Invalid(format!("not JSON: {e}")))?;
    let (api_version, kind) = (&review["apiVersion"], &review["kind"]);
    if api_version != REVIEW_API_VERSION || kind != "AdmissionReview" {
        return Err(CallError::Invalid(format!(
            "expected webhook response of {REVIEW_API_VERSION}, Kind=AdmissionReview, got {}, Kind={}",
            api_version.as_str().unwrap_or(""),
            kind.as_str().unwrap_or("")
        )));
    }
    let Some(response) = review.get("response").filter(|r| r.is_object()) else {
        return Err(CallError::Invalid("response is nil".into()));
    };
    let got = response["uid"].as_str().unwrap_or("");
    if got != uid {
        return Err(CallError::Invalid(format!(
            "expected response.uid={uid:?}, got {got:?}"
        )));
    }
    let Some(allowed) = response["allowed"].as_bool() else {
        return Err(CallError::Invalid(
            "response.allowed is not a boolean".into(),
        ));
    };
    let patch = match (response["patchType"].as_str(), response["patch"].as_str()) {
        (_, None) => None,
        (Some("JSONPatch"), Some(encoded)) => {
            let bytes = base64::engine::general_purpose::STANDARD
                .decode(encoded)
                .map_err(|e| CallError::Invalid(format!("response.patch is not base64: {e}")))?;
            let patch: Value = serde_json::from_slice(&bytes)
                .map_err(|e| CallError::Invalid(format!("response.patch is not JSON: {e}")))?;
            Some(patch)
        }
        (None, Some(_)) => {
            return Err(CallError::Invalid(
                "webhook returned response.patch but not response.patchType".into(),
            ))
        }
        (Some(other), Some(_)) => {
            return Err(CallError::Invalid(format!(
                "webhook returned invalid response.patchType of {other:?}"
            )))
        }
    };
    let warnings = response["warnings"]
        .as_array()
        .map(|w| {
            w.iter()
                .filter_map(Value::as_str)
                .map(str::to_string)
                .collect()
        })
        .unwrap_or_default();
    Ok(Answer {
        allowed,
        status: response.get("status").cloned().unwrap_or(Value::Null),
        patch,
        warnings,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn answer(response: Value) -> Result<Answer, CallError> {
        let review = json!({"apiVersion": REVIEW_API_VERSION, "kind": "AdmissionReview", "response": response});
        read_answer(&serde_json::to_vec(&review).unwrap(), "u1")
    }

    #[test]
    fn answers_are_read_as_kube_apiserver_reads_them() {
        let patch = base64::engine::general_purpose::STANDARD
            .encode(r#"[{"op":"add","path":"/metadata/labels/x","value":"y"}]"#);
        let a = answer(json!({"uid": "u1", "allowed": true, "patchType": "JSONPatch", "patch": patch, "warnings": ["w"]})).unwrap();
        assert!(a.allowed);
        assert_eq!(a.patch.unwrap()[0]["path"], "/metadata/labels/x");
        assert_eq!(a.warnings, ["w"]);
        let denied = answer(
            json!({"uid": "u1", "allowed": false, "status": {"code": 403, "message": "no"}}),
        )
        .unwrap();
        assert!(!denied.allowed);
        assert_eq!(denied.status["code"], 403);
        for (bad, want) in [
            (
                json!({"uid": "u2", "allowed": true}),
                "expected response.uid=\"u1\", got \"u2\"",
            ),
            (json!({"uid": "u1"}), "response.allowed"),
            (
                json!({"uid": "u1", "allowed": true, "patch": patch}),
                "not response.patchType",
            ),
        ] {
            let e = answer(bad).unwrap_err().to_string();
            assert!(e.contains(want), "{e}");
        }
        let garbage = read_answer(b"hello", "u1").unwrap_err().to_string();
        assert!(
            garbage.starts_with("received invalid webhook response"),
            "{garbage}"
        );
    }
}
