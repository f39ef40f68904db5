//! The client side of server-to-server traffic: HTTPS pinned to the cluster CA (no system
//! roots), every request carrying the cluster secret, JSON bodies, over the kept HTTP/2
//! connections of a [`Pool`] (one per peer, so a request openraft stopped
//! waiting for only resets its own stream and the connection is reused).
//!
//! Create one `PeerClient` per runtime: its connections are driven by tasks on the runtime
//! that opened them (the Raft runtime for Raft RPCs, the API runtime for forwarding).

use std::time::Duration;

use bytes::Bytes;
use http::{header, Method, Request, StatusCode};
use http_body_util::Full;
use serde::de::DeserializeOwned;
use serde::Serialize;

use super::join_token::ClusterSecret;
use crate::http_client::{BadToken, ClientError, Limits, Pool, TlsConfig, TlsError};

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

impl PeerError {
    fn from_client(addr: &str, e: ClientError) -> PeerError {
        let (addr, reason) = (addr.to_string(), e.to_string());
        if e.is_unsent() {
            PeerError::Unreachable { addr, reason }
        } else {
            PeerError::Lost { addr, reason }
        }
    }
}

/// Why a peer client could not be built.
#[derive(Debug, thiserror::Error)]
pub enum PeerSetupError {
    #[error("cluster CA: {0}")]
    Ca(#[from] TlsError),
    #[error("cluster secret: {0}")]
    Secret(#[from] BadToken),
}

/// A TLS client trusting only the cluster CA.
#[derive(Clone)]
pub struct PeerClient {
    pool: Pool,
}

impl PeerClient {
    pub fn new(ca_pem: &str, secret: ClusterSecret) -> Result<PeerClient, PeerSetupError> {
        let tls = TlsConfig::pinned(ca_pem, None)?;
        let pool = Pool::http2(&tls, Some(secret.as_str()))?;
        Ok(PeerClient { pool })
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
        request: Request<Full<Bytes>>,
        timeout: Duration,
    ) -> Result<http::Response<Bytes>, PeerError> {
        self.pool
            .send(request, Limits::new(timeout, MAX_RESPONSE))
            .await
            .map_err(|e| PeerError::from_client(addr, e))
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
