//! The client side of server-to-server traffic: HTTPS pinned to the cluster CA (no system
//! roots), every request carrying the cluster secret, JSON bodies. One pooled HTTP/2
//! connection per peer, so a request openraft stopped waiting for only resets its own stream
//! and the connection is reused.
//!
//! Create one `PeerClient` per runtime: its connections are driven by tasks on the runtime
//! that opened them (the Raft runtime for Raft RPCs, the API runtime for forwarding).

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::{header, Method, Request, StatusCode};
use http_body_util::{BodyExt, Full, Limited};
use hyper_util::client::legacy::{connect::HttpConnector, Client};
use hyper_util::rt::{TokioExecutor, TokioTimer};
use serde::de::DeserializeOwned;
use serde::Serialize;

use super::token::ClusterSecret;

/// The largest response a peer may send (a snapshot chunk, a member list, a forwarded object).
const MAX_RESPONSE: usize = 8 << 20;

/// Why a call to a peer failed, split by what the caller may assume about its effect.
#[derive(Debug, Clone, thiserror::Error)]
pub enum PeerError {
    /// The request never reached the peer (connect refused, TLS refused, bad address): it had
    /// no effect.
    #[error("{addr} unreachable: {reason}")]
    Unreachable { addr: String, reason: String },
    /// Sent, but no answer in time or the connection broke: it may or may not have had effect.
    #[error("{addr}: no answer: {reason}")]
    Lost { addr: String, reason: String },
    /// The peer answered with an error status.
    #[error("{addr} answered {status}: {message}")]
    Status {
        addr: String,
        status: u16,
        message: String,
    },
    /// The peer's answer did not decode.
    #[error("{addr}: undecodable answer: {reason}")]
    Decode { addr: String, reason: String },
}

/// A TLS client trusting only the cluster CA.
#[derive(Clone)]
pub struct PeerClient {
    client: Client<hyper_rustls::HttpsConnector<HttpConnector>, Full<Bytes>>,
    secret: Arc<ClusterSecret>,
}

/// The rustls client configuration that trusts only `ca_pem`.
pub fn pinned_tls(ca_pem: &str) -> Result<rustls::ClientConfig, String> {
    let mut roots = rustls::RootCertStore::empty();
    for cert in rustls_pemfile::certs(&mut ca_pem.as_bytes()) {
        let cert = cert.map_err(|e| format!("cluster CA: {e}"))?;
        roots.add(cert).map_err(|e| format!("cluster CA: {e}"))?;
    }
    if roots.is_empty() {
        return Err("cluster CA: no certificate".into());
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    Ok(rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| format!("TLS versions: {e}"))?
        .with_root_certificates(roots)
        .with_no_client_auth())
}

impl PeerClient {
    pub fn new(ca_pem: &str, secret: ClusterSecret) -> Result<PeerClient, String> {
        let tls = pinned_tls(ca_pem)?;
        let mut http = HttpConnector::new();
        http.enforce_http(false);
        http.set_nodelay(true);
        http.set_connect_timeout(Some(Duration::from_secs(2)));
        let connector = hyper_rustls::HttpsConnectorBuilder::new()
            .with_tls_config(tls)
            .https_only()
            .enable_http2()
            .wrap_connector(http);
        let client = Client::builder(TokioExecutor::new())
            .timer(TokioTimer::new())
            .pool_timer(TokioTimer::new())
            .http2_only(true)
            .http2_keep_alive_interval(Some(Duration::from_secs(5)))
            .http2_keep_alive_timeout(Duration::from_secs(5))
            .pool_idle_timeout(Duration::from_secs(90))
            .build(connector);
        Ok(PeerClient {
            client,
            secret: Arc::new(secret),
        })
    }

    /// POSTs `body` as JSON to `https://{addr}{path}` and decodes the JSON answer.
    pub async fn post<Req, Resp>(
        &self,
        addr: &str,
        path: &str,
        body: &Req,
        timeout: Duration,
    ) -> Result<Resp, PeerError>
    where
        Req: Serialize + ?Sized,
        Resp: DeserializeOwned,
    {
        let bytes = serde_json::to_vec(body).map_err(|e| PeerError::Decode {
            addr: addr.to_string(),
            reason: format!("encoding the request: {e}"),
        })?;
        let answer = self
            .send(addr, Method::POST, path, Bytes::from(bytes), timeout)
            .await?;
        serde_json::from_slice(&answer).map_err(|e| PeerError::Decode {
            addr: addr.to_string(),
            reason: e.to_string(),
        })
    }

    /// Sends `request` (the cluster secret added as its bearer token) and returns the whole
    /// answer, whatever its status.
    pub async fn exchange(
        &self,
        addr: &str,
        mut request: Request<Full<Bytes>>,
        timeout: Duration,
    ) -> Result<http::Response<Bytes>, PeerError> {
        let bearer = format!("Bearer {}", self.secret.as_str());
        match header::HeaderValue::from_str(&bearer) {
            Ok(value) => {
                request.headers_mut().insert(header::AUTHORIZATION, value);
            }
            Err(e) => {
                return Err(PeerError::Unreachable {
                    addr: addr.to_string(),
                    reason: format!("bad secret header: {e}"),
                })
            }
        }
        let exchange = async {
            let response = self.client.request(request).await.map_err(|e| {
                if e.is_connect() {
                    PeerError::Unreachable {
                        addr: addr.to_string(),
                        reason: error_chain(&e),
                    }
                } else {
                    PeerError::Lost {
                        addr: addr.to_string(),
                        reason: error_chain(&e),
                    }
                }
            })?;
            let (parts, body) = response.into_parts();
            let body = Limited::new(body, MAX_RESPONSE)
                .collect()
                .await
                .map_err(|e| PeerError::Lost {
                    addr: addr.to_string(),
                    reason: e.to_string(),
                })?
                .to_bytes();
            Ok(http::Response::from_parts(parts, body))
        };
        match tokio::time::timeout(timeout, exchange).await {
            Ok(result) => result,
            Err(_) => Err(PeerError::Lost {
                addr: addr.to_string(),
                reason: format!("timed out after {timeout:?}"),
            }),
        }
    }

    /// Sends one request and returns the body of a 2xx answer.
    pub async fn send(
        &self,
        addr: &str,
        method: Method,
        path: &str,
        body: Bytes,
        timeout: Duration,
    ) -> Result<Bytes, PeerError> {
        let request = Request::builder()
            .method(method)
            .uri(format!("https://{addr}{path}"))
            .header(header::CONTENT_TYPE, "application/json")
            .body(Full::new(body))
            .map_err(|e| PeerError::Unreachable {
                addr: addr.to_string(),
                reason: format!("bad request: {e}"),
            })?;
        let answer = self.exchange(addr, request, timeout).await?;
        let status = answer.status();
        let body = answer.into_body();
        if status.is_success() {
            Ok(body)
        } else {
            Err(PeerError::Status {
                addr: addr.to_string(),
                status: status.as_u16(),
                message: String::from_utf8_lossy(&body[..body.len().min(512)]).into_owned(),
            })
        }
    }
}

/// Whether `status` from a peer means "the secret was refused".
pub fn is_auth_refusal(status: u16) -> bool {
    status == StatusCode::UNAUTHORIZED.as_u16() || status == StatusCode::FORBIDDEN.as_u16()
}

/// An error and its sources on one line.
fn error_chain(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        let more = s.to_string();
        if !text.contains(&more) {
            text.push_str(": ");
            text.push_str(&more);
        }
        source = s.source();
    }
    text
}
