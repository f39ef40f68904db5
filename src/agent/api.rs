//! The agent's API client: Kubernetes API requests over HTTP/2 ([`Pool`]) authenticated with
//! the node's client certificate, sent to the best server of the failover list
//! (`failover::Failover`). A server that cannot be reached is failed at once and the request
//! goes to the next one, so a request made just after a server died does not wait for the
//! next health check. Whenever requests move to another server, that server is asked for the
//! current server list (`/litek8s/v1/apiservers`), so the list follows the cluster.
//!
//! Answers are values: [`Answer`] holds any status; the helpers turn the ones their caller
//! does not expect into [`ApiError::Status`] with the server's Status reason and message.
//! Watches stream ([`Watch`]): one JSON event per line, bounded in size, closed when their
//! server fails a check.

use std::sync::Arc;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use http::{header, HeaderValue, Method, Request, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use parking_lot::{Mutex, RwLock};
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use crate::failover::{discovery, Failover};
use crate::http_client::{ClientError, Limits, Pool, TlsConfig, Transport};

/// One request's bound (a write a follower forwards may wait up to 15 s for a new leader).
const REQUEST_LIMITS: Limits = Limits::new(Duration::from_secs(20), 16 << 20);
/// How long a watch may take to answer with its head.
const WATCH_HEAD: Duration = Duration::from_secs(20);
/// The longest watch event line kept (an object is at most 3 MiB on the server).
const MAX_EVENT: usize = 8 << 20;
/// The `User-Agent` of the agent's requests (field managers default to its first part).
const USER_AGENT: &str = concat!("litek8s-agent/", env!("CARGO_PKG_VERSION"));

/// How a request failed.
#[derive(Debug, Clone, thiserror::Error)]
pub enum ApiError {
    /// Every server failed before the request was sent: it had no effect.
    #[error("no server could be reached ({0})")]
    Unreachable(String),
    /// Sent to `server`, no usable answer: it may or may not have had its effect.
    #[error("{server}: {source}")]
    Failed { server: String, source: ClientError },
    /// An answer the caller did not expect.
    #[error("{server} answered {status} {reason}: {message}")]
    Status {
        server: String,
        status: StatusCode,
        reason: String,
        message: String,
    },
    #[error("{server}: the answer is not the JSON expected: {reason}")]
    Decode { server: String, reason: String },
}

impl ApiError {
    /// The HTTP status, for [`ApiError::Status`].
    pub fn status(&self) -> Option<StatusCode> {
        match self {
            ApiError::Status { status, .. } => Some(*status),
            _ => None,
        }
    }
}

/// A whole answer.
#[derive(Debug)]
pub struct Answer {
    pub server: String,
    pub status: StatusCode,
    pub body: Bytes,
}

impl Answer {
    /// The body as JSON when the status is `expected`, else the Status error.
    fn json_if(self, expected: &[StatusCode]) -> Result<Value, ApiError> {
        if !expected.contains(&self.status) {
            return Err(self.into_error());
        }
        serde_json::from_slice(&self.body).map_err(|e| ApiError::Decode {
            server: self.server,
            reason: e.to_string(),
        })
    }

    fn into_error(self) -> ApiError {
        let status: Value = serde_json::from_slice(&self.body).unwrap_or(Value::Null);
        let text = |field: &str| status[field].as_str().unwrap_or_default().to_string();
        let message = match text("message") {
            m if m.is_empty() => String::from_utf8_lossy(&self.body).trim().to_string(),
            m => m,
        };
        ApiError::Status {
            server: self.server,
            status: self.status,
            reason: text("reason"),
            message,
        }
    }
}

/// How a PATCH body is to be read.
#[derive(Debug, Clone, Copy)]
pub enum PatchType {
    Merge,
    Strategic,
}

impl PatchType {
    fn content_type(self) -> &'static str {
        match self {
            PatchType::Merge => "application/merge-patch+json",
            PatchType::Strategic => "application/strategic-merge-patch+json",
        }
    }
}

/// The client (cheap to clone).
#[derive(Clone)]
pub struct ApiClient {
    /// Shared by every clone, so [`ApiClient::reconnect`] reaches them all.
    pool: Arc<RwLock<Pool>>,
    tls: TlsConfig,
    servers: Arc<Failover>,
    /// The server the last request went to.
    in_use: Arc<Mutex<Option<String>>>,
}

impl ApiClient {
    /// A client presenting the credential in `tls`, over `servers`.
    pub fn new(tls: &TlsConfig, servers: Arc<Failover>) -> ApiClient {
        ApiClient {
            pool: Arc::new(RwLock::new(Self::pool_for(tls))),
            tls: tls.clone(),
            servers,
            in_use: Arc::default(),
        }
    }

    fn pool_for(tls: &TlsConfig) -> Pool {
        // Without a bearer token a pool cannot fail to build.
        Pool::http2(tls, None).unwrap_or_else(|_| unreachable!("no bearer token"))
    }

    fn pool(&self) -> Pool {
        self.pool.read().clone()
    }

    /// Opens new connections for the requests from now on (their handshakes present the
    /// credential the TLS configuration holds then); requests and watches under way finish
    /// on the connections they have. A server checks a client certificate's validity on
    /// every request, so after the certificate is renewed the kept connections, made with
    /// the old one, must not outlive it.
    pub fn reconnect(&self) {
        let fresh = Self::pool_for(&self.tls);
        *self.pool.write() = fresh;
    }

    /// The server list behind this client.
    pub fn servers(&self) -> &Arc<Failover> {
        &self.servers
    }

    /// The server the last request went to.
    pub fn in_use(&self) -> Option<String> {
        self.in_use.lock().clone()
    }

    fn request(
        addr: &str,
        method: &Method,
        path: &str,
        body: &Bytes,
        content_type: Option<&str>,
    ) -> Result<Request<Full<Bytes>>, ClientError> {
        let mut builder = Request::builder()
            .method(method.clone())
            .uri(format!("https://{addr}{path}"))
            .header(header::ACCEPT, "application/json")
            .header(header::USER_AGENT, HeaderValue::from_static(USER_AGENT));
        if let Some(ct) = content_type {
            builder = builder.header(header::CONTENT_TYPE, ct);
        }
        builder
            .body(Full::new(body.clone()))
            .map_err(|e| ClientError::BadRequest {
                addr: addr.to_string(),
                reason: e.to_string(),
            })
    }

    /// Notes the server a request went to; a new one is asked for the server list.
    fn used(&self, addr: &str) {
        let previous = {
            let mut in_use = self.in_use.lock();
            if in_use.as_deref() == Some(addr) {
                return;
            }
            in_use.replace(addr.to_string())
        };
        match previous {
            Some(previous) => tracing::info!(
                component = "failover",
                "requests go to {addr} (was {previous})"
            ),
            None => tracing::info!(component = "failover", "requests go to {addr}"),
        }
        let (servers, addr) = (self.servers.clone(), addr.to_string());
        tokio::spawn(async move {
            match discovery::ask(&addr, &Transport::Plain, Duration::from_secs(2)).await {
                Ok(listed) => servers.on_members(&listed),
                Err(e) => tracing::debug!(component = "failover", "{addr}: no server list: {e}"),
            }
        });
    }

    /// Sends a request to the best server that can be reached; any status is an answer.
    pub async fn send(
        &self,
        method: Method,
        path: &str,
        body: Option<&Value>,
        content_type: Option<&str>,
    ) -> Result<Answer, ApiError> {
        let body = match body {
            Some(value) => Bytes::from(serde_json::to_vec(value).unwrap_or_default()),
            None => Bytes::new(),
        };
        let content_type = match (content_type, body.is_empty()) {
            (Some(ct), _) => Some(ct),
            (None, false) => Some("application/json"),
            (None, true) => None,
        };
        let mut unsent = Vec::new();
        for candidate in self.servers.candidates() {
            let addr = candidate.addr;
            let request =
                Self::request(&addr, &method, path, &body, content_type).map_err(|source| {
                    ApiError::Failed {
                        server: addr.clone(),
                        source,
                    }
                })?;
            match self.pool().send(request, REQUEST_LIMITS).await {
                Ok(answer) => {
                    self.used(&addr);
                    return Ok(Answer {
                        server: addr,
                        status: answer.status(),
                        body: answer.into_body(),
                    });
                }
                Err(e) if e.is_unsent() => {
                    self.servers.on_connect_failed(&addr, &e);
                    unsent.push(format!("{addr}: {e}"));
                }
                Err(source) => {
                    return Err(ApiError::Failed {
                        server: addr,
                        source,
                    })
                }
            }
        }
        Err(unreachable(unsent))
    }

    /// GET: the object, or `None` on 404.
    pub async fn get(&self, path: &str) -> Result<Option<Value>, ApiError> {
        let answer = self.send(Method::GET, path, None, None).await?;
        if answer.status == StatusCode::NOT_FOUND {
            return Ok(None);
        }
        answer.json_if(&[StatusCode::OK]).map(Some)
    }

    /// POST to a collection: the created object.
    pub async fn create(&self, path: &str, object: &Value) -> Result<Value, ApiError> {
        self.send(Method::POST, path, Some(object), None)
            .await?
            .json_if(&[StatusCode::OK, StatusCode::CREATED])
    }

    /// PUT: the updated object.
    pub async fn update(&self, path: &str, object: &Value) -> Result<Value, ApiError> {
        self.send(Method::PUT, path, Some(object), None)
            .await?
            .json_if(&[StatusCode::OK])
    }

    /// PATCH: the patched object.
    pub async fn patch(
        &self,
        path: &str,
        patch: &Value,
        kind: PatchType,
    ) -> Result<Value, ApiError> {
        self.send(Method::PATCH, path, Some(patch), Some(kind.content_type()))
            .await?
            .json_if(&[StatusCode::OK])
    }

    /// Starts a watch (`path` with `watch=true` and its selectors) on the best server.
    pub async fn watch(&self, path: &str) -> Result<Watch, ApiError> {
        let mut unsent = Vec::new();
        for candidate in self.servers.candidates() {
            let addr = candidate.addr;
            let request = Self::request(&addr, &Method::GET, path, &Bytes::new(), None).map_err(
                |source| ApiError::Failed {
                    server: addr.clone(),
                    source,
                },
            )?;
            match self.pool().stream(request, WATCH_HEAD).await {
                Ok(response) => {
                    self.used(&addr);
                    let status = response.status();
                    if status != StatusCode::OK {
                        let body = response
                            .into_body()
                            .collect()
                            .await
                            .map(|c| c.to_bytes())
                            .unwrap_or_default();
                        return Err(Answer {
                            server: addr,
                            status,
                            body,
                        }
                        .into_error());
                    }
                    return Ok(Watch {
                        server: addr,
                        body: response.into_body(),
                        buffer: BytesMut::new(),
                        closed: candidate.closed,
                    });
                }
                Err(e) if e.is_unsent() => {
                    self.servers.on_connect_failed(&addr, &e);
                    unsent.push(format!("{addr}: {e}"));
                }
                Err(source) => {
                    return Err(ApiError::Failed {
                        server: addr,
                        source,
                    })
                }
            }
        }
        Err(unreachable(unsent))
    }
}

/// Every server failed before a request was sent: why, per server.
fn unreachable(unsent: Vec<String>) -> ApiError {
    ApiError::Unreachable(if unsent.is_empty() {
        "no server known".into()
    } else {
        unsent.join("; ")
    })
}

/// One watch event.
#[derive(Debug, Clone)]
pub struct WatchEvent {
    /// `ADDED`, `MODIFIED`, `DELETED`, `BOOKMARK` or `ERROR`.
    pub kind: String,
    pub object: Value,
}

/// A watch's stream of events.
pub struct Watch {
    pub server: String,
    body: Incoming,
    buffer: BytesMut,
    /// Cancelled when the server fails a check: the watch ends so its owner starts another
    /// on the next server.
    closed: CancellationToken,
}

impl Watch {
    /// The next event; `None` when the watch ended (the server closed it, or failed).
    pub async fn next(&mut self) -> Option<Result<WatchEvent, ApiError>> {
        loop {
            if let Some(end) = self.buffer.iter().position(|b| *b == b'\n') {
                let line = self.buffer.split_to(end + 1);
                let line = line.trim_ascii();
                if line.is_empty() {
                    continue;
                }
                return Some(self.decode(line));
            }
            if self.buffer.len() > MAX_EVENT {
                return Some(Err(ApiError::Decode {
                    server: self.server.clone(),
                    reason: format!("a watch event longer than {MAX_EVENT} bytes"),
                }));
            }
            let frame = tokio::select! {
                _ = self.closed.cancelled() => return None,
                frame = self.body.frame() => frame,
            };
            match frame {
                None => return None,
                Some(Err(e)) => {
                    return Some(Err(ApiError::Failed {
                        server: self.server.clone(),
                        source: ClientError::Lost(e.to_string()),
                    }))
                }
                Some(Ok(frame)) => {
                    if let Ok(data) = frame.into_data() {
                        self.buffer.extend_from_slice(&data);
                    }
                }
            }
        }
    }

    fn decode(&self, line: &[u8]) -> Result<WatchEvent, ApiError> {
        let decode = |reason: String| ApiError::Decode {
            server: self.server.clone(),
            reason,
        };
        let mut event: Value = serde_json::from_slice(line).map_err(|e| decode(e.to_string()))?;
        let kind = event["type"]
            .as_str()
            .ok_or_else(|| decode("a watch event without a type".into()))?
            .to_string();
        Ok(WatchEvent {
            kind,
            object: event["object"].take(),
        })
    }
}
