//! HTTPS to a Service's port over [`dial`](super::dial): rustls pinned to the caller's CA
//! bundle (server name `<name>.<namespace>.svc`, as kube-apiserver checks it) and hyper's
//! HTTP/1.1 client, keeping a few idle connections per target so a call does not pay a TLS
//! handshake each time.
//!
//! Two ways to exchange: [`ServiceHttp::send`] reads the whole answer within a deadline and a
//! size limit (webhook calls, discovery probes); [`ServiceHttp::stream`] hands the answer on as
//! soon as its head arrived, its body read only as fast as the caller takes it (the
//! aggregation proxy, whose answers include watches that last as long as either side keeps
//! them). A streamed connection goes back to the idle ones when its body ended, and is closed
//! when the caller drops the body first.

use std::collections::HashMap;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::{header, HeaderValue, Request, Response};
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::{Body, Frame, Incoming, SizeHint};
use hyper::client::conn::http1::SendRequest;
use hyper_util::rt::TokioIo;
use parking_lot::Mutex;

use super::dial::{dial, DialError, CONNECT_TIMEOUT};
use crate::api::{ApiBody, ApiContext};
use crate::http_client::{Limits, TlsConfig};

/// Idle connections kept per target.
const IDLE_PER_TARGET: usize = 8;
/// An idle connection older than this is closed rather than reused (the peer may have).
const IDLE_FOR: Duration = Duration::from_secs(60);

/// Where HTTPS requests go: a Service's port, verified as `<name>.<namespace>.svc` with
/// `tls`. `key` names the TLS configuration (its CA bundle, client certificate) so
/// connections made with one are never reused with another.
#[derive(Clone)]
pub struct ServiceTarget {
    pub namespace: String,
    pub name: String,
    pub port: u16,
    pub tls: TlsConfig,
    pub key: String,
}

impl ServiceTarget {
    /// The server name the endpoint's certificate must carry.
    pub fn server_name(&self) -> String {
        format!("{}.{}.svc", self.name, self.namespace)
    }

    fn pool_key(&self) -> String {
        format!(
            "{}/{}:{}#{}",
            self.namespace, self.name, self.port, self.key
        )
    }
}

/// Why an HTTPS request to a Service got no answer.
#[derive(Debug, thiserror::Error)]
pub enum ServiceHttpError {
    #[error("{0}")]
    Dial(#[from] DialError),
    #[error("TLS handshake with {server}: {reason}")]
    Tls { server: String, reason: String },
    #[error("{0}")]
    Http(String),
    #[error("no answer in {}ms", .0.as_millis())]
    Timeout(Duration),
    #[error("answer longer than {0} bytes")]
    TooLarge(usize),
}

type Sender = SendRequest<ApiBody>;

/// Idle connections by [`ServiceTarget::pool_key`], with when each became idle.
#[derive(Default)]
struct Idle(Mutex<HashMap<String, Vec<(Sender, Instant)>>>);

impl Idle {
    /// Keeps `sender` for the next request to `key`, unless it is closed or enough are kept.
    fn keep(&self, key: String, sender: Sender) {
        if sender.is_closed() {
            return;
        }
        let mut idle = self.0.lock();
        let list = idle.entry(key).or_default();
        if list.len() < IDLE_PER_TARGET {
            list.push((sender, Instant::now()));
        }
    }
}

/// Kept HTTP/1.1 connections to Services, a few idle ones per target.
#[derive(Default)]
pub struct ServiceHttp {
    idle: Arc<Idle>,
}

impl ServiceHttp {
    /// An idle connection to `target`, or a new one.
    async fn sender(
        &self,
        ctx: &ApiContext,
        target: &ServiceTarget,
    ) -> Result<Sender, ServiceHttpError> {
        let key = target.pool_key();
        loop {
            let kept = self.idle.0.lock().get_mut(&key).and_then(Vec::pop);
            let Some((sender, since)) = kept else { break };
            if since.elapsed() < IDLE_FOR && !sender.is_closed() && sender.is_ready() {
                return Ok(sender);
            }
        }
        let io = dial(ctx, &target.namespace, &target.name, target.port).await?;
        let server = target.server_name();
        let tls_error = |reason: String| ServiceHttpError::Tls {
            server: server.clone(),
            reason,
        };
        let name = rustls::pki_types::ServerName::try_from(server.clone())
            .map_err(|e| tls_error(e.to_string()))?;
        let tls = tokio::time::timeout(CONNECT_TIMEOUT, target.tls.connector().connect(name, io))
            .await
            .map_err(|_| tls_error("timed out".into()))?
            .map_err(|e| tls_error(e.to_string()))?;
        let (sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(tls))
            .await
            .map_err(|e| ServiceHttpError::Http(e.to_string()))?;
        tokio::spawn(async move {
            let _ = connection.with_upgrades().await;
        });
        Ok(sender)
    }

    /// Sends `request` (its URI a path) to `target` on a kept or new connection: the
    /// connection and the answer's head.
    async fn exchange(
        &self,
        ctx: &ApiContext,
        target: &ServiceTarget,
        request: Request<Full<Bytes>>,
    ) -> Result<(Sender, Response<Incoming>), ServiceHttpError> {
        let request = prepare(target, request);
        let mut sender = self.sender(ctx, target).await?;
        let answer = sender
            .send_request(request)
            .await
            .map_err(|e| ServiceHttpError::Http(e.to_string()))?;
        Ok((sender, answer))
    }

    /// Sends `request` (its URI a path) to `target` and returns the whole answer within
    /// `limits`; the connection is kept for the next request.
    pub async fn send(
        &self,
        ctx: &ApiContext,
        target: &ServiceTarget,
        request: Request<Full<Bytes>>,
        limits: Limits,
    ) -> Result<Response<Bytes>, ServiceHttpError> {
        let exchange = async {
            let (sender, answer) = self.exchange(ctx, target, request).await?;
            let (parts, body) = answer.into_parts();
            let body = Limited::new(body, limits.max_body)
                .collect()
                .await
                .map_err(|e| {
                    if e.is::<http_body_util::LengthLimitError>() {
                        ServiceHttpError::TooLarge(limits.max_body)
                    } else {
                        ServiceHttpError::Http(e.to_string())
                    }
                })?
                .to_bytes();
            self.idle.keep(target.pool_key(), sender);
            Ok(Response::from_parts(parts, body))
        };
        tokio::time::timeout(limits.timeout, exchange)
            .await
            .map_err(|_| ServiceHttpError::Timeout(limits.timeout))?
    }

    /// Sends `request` (its URI a path) to `target` and returns the answer once its head
    /// arrived within `head_timeout`; the body is passed on as the Service sends it, with no
    /// deadline (a watch lasts until either side ends it), read no faster than the caller
    /// takes it. The connection is kept for the next request once the body ended.
    pub async fn stream(
        &self,
        ctx: &ApiContext,
        target: &ServiceTarget,
        request: Request<Full<Bytes>>,
        head_timeout: Duration,
    ) -> Result<Response<ApiBody>, ServiceHttpError> {
        let (sender, answer) =
            tokio::time::timeout(head_timeout, self.exchange(ctx, target, request))
                .await
                .map_err(|_| ServiceHttpError::Timeout(head_timeout))??;
        let (parts, body) = answer.into_parts();
        let body = KeepWhenDone {
            body,
            connection: Some(Returned {
                sender,
                idle: self.idle.clone(),
                key: target.pool_key(),
            }),
        };
        Ok(Response::from_parts(
            parts,
            body.map_err(std::io::Error::other).boxed(),
        ))
    }
}

/// `request` as sent on a kept connection: its body boxed, its Host the Service's name.
fn prepare(target: &ServiceTarget, request: Request<Full<Bytes>>) -> Request<ApiBody> {
    let (parts, body) = request.into_parts();
    let mut request = Request::from_parts(parts, body.map_err(|e| match e {}).boxed());
    set_host(target, &mut request);
    request
}

/// The connection a streamed answer came on, returned to the idle ones when the answer ends.
struct Returned {
    sender: Sender,
    idle: Arc<Idle>,
    key: String,
}

/// A streamed answer's body. Dropped before its end, it drops the connection with it (hyper
/// closes a connection whose answer is abandoned), which ends the exchange on the Service's
/// side too.
struct KeepWhenDone {
    body: Incoming,
    connection: Option<Returned>,
}

impl Body for KeepWhenDone {
    type Data = Bytes;
    type Error = hyper::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, hyper::Error>>> {
        let this = self.get_mut();
        let polled = Pin::new(&mut this.body).poll_frame(cx);
        if let Poll::Ready(None) = polled {
            if let Some(done) = this.connection.take() {
                done.idle.keep(done.key, done.sender);
            }
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}

fn set_host<B>(target: &ServiceTarget, request: &mut Request<B>) {
    let host = if target.port == 443 {
        target.server_name()
    } else {
        format!("{}:{}", target.server_name(), target.port)
    };
    if let Ok(v) = HeaderValue::from_str(&host) {
        request.headers_mut().insert(header::HOST, v);
    }
}

#[cfg(test)]
mod tests {
    use std::convert::Infallible;
    use std::sync::atomic::{AtomicUsize, Ordering};

    use serde_json::json;
    use tokio::sync::mpsc;

    use super::*;
    use crate::streams::dial::tests::{ctx, service};

    /// A CA and a serving certificate for `web.ns.svc` it signed: (CA PEM, server config).
    fn tls() -> (String, rustls::ServerConfig) {
        let ca_key = rcgen::KeyPair::generate().unwrap();
        let mut ca_params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        ca_params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        let ca = ca_params.self_signed(&ca_key).unwrap();
        let key = rcgen::KeyPair::generate().unwrap();
        let cert = rcgen::CertificateParams::new(vec!["web.ns.svc".to_string()])
            .unwrap()
            .signed_by(&key, &ca, &ca_key)
            .unwrap();
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let config = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_no_client_auth()
            .with_single_cert(
                vec![cert.der().clone()],
                rustls::pki_types::PrivateKeyDer::Pkcs8(key.serialize_der().into()),
            )
            .unwrap();
        (ca.pem(), config)
    }

    /// An HTTPS server on loopback: `/stream` answers with the chunks sent on the channel
    /// `chunks` hands out (one such request), anything else `whole`. Counts its connections.
    async fn server(
        config: rustls::ServerConfig,
        chunks: mpsc::Receiver<Bytes>,
        connections: Arc<AtomicUsize>,
    ) -> u16 {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
        let chunks = Arc::new(Mutex::new(Some(chunks)));
        tokio::spawn(async move {
            while let Ok((tcp, _)) = listener.accept().await {
                connections.fetch_add(1, Ordering::SeqCst);
                let acceptor = acceptor.clone();
                let chunks = chunks.clone();
                tokio::spawn(async move {
                    let tls = acceptor.accept(tcp).await.unwrap();
                    let service = hyper::service::service_fn(move |req: Request<Incoming>| {
                        let chunks = chunks.clone();
                        async move {
                            let body = match (req.uri().path(), chunks.lock().take()) {
                                ("/stream", Some(rx)) => {
                                    let frames = futures::stream::unfold(rx, |mut rx| async {
                                        let chunk = rx.recv().await?;
                                        Some((Ok::<_, Infallible>(Frame::data(chunk)), rx))
                                    });
                                    http_body_util::StreamBody::new(frames).boxed_unsync()
                                }
                                _ => Full::new(Bytes::from_static(b"whole")).boxed_unsync(),
                            };
                            Ok::<_, Infallible>(Response::new(body))
                        }
                    });
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(tls), service)
                        .await;
                });
            }
        });
        port
    }

    fn get(path: &str) -> Request<Full<Bytes>> {
        Request::get(path).body(Full::new(Bytes::new())).unwrap()
    }

    #[tokio::test]
    async fn a_streamed_answer_comes_as_sent_and_its_connection_is_kept_once_read() {
        let (ca_pem, config) = tls();
        let (tx, rx) = mpsc::channel(1);
        let connections = Arc::new(AtomicUsize::new(0));
        let port = server(config, rx, connections.clone()).await;
        let endpoints = json!({"subsets": [
            {"addresses": [{"ip": "127.0.0.1"}], "ports": [{"port": port}]},
        ]});
        let ctx = ctx(&[
            ("services", "web", service(json!([{"port": 443}]))),
            ("endpoints", "web", endpoints),
        ]);
        let target = ServiceTarget {
            namespace: "ns".into(),
            name: "web".into(),
            port: 443,
            tls: TlsConfig::pinned(&ca_pem, None).unwrap(),
            key: "test".into(),
        };
        let http = ServiceHttp::default();
        let answer = http
            .stream(&ctx, &target, get("/stream"), Duration::from_secs(5))
            .await
            .unwrap();
        let mut body = answer.into_body();
        // Each chunk is passed on before the next one exists: nothing waits for the end.
        for chunk in ["first", "second"] {
            tx.send(Bytes::from(chunk)).await.unwrap();
            let frame = body.frame().await.unwrap().unwrap();
            assert_eq!(frame.into_data().unwrap(), chunk);
        }
        drop(tx);
        assert!(body.frame().await.is_none());
        drop(body);
        // Read to its end, the connection went back to the idle ones and serves the next.
        let limits = Limits::new(Duration::from_secs(5), 1024);
        let whole = http.send(&ctx, &target, get("/whole"), limits).await;
        assert_eq!(whole.unwrap().into_body(), "whole");
        assert_eq!(connections.load(Ordering::SeqCst), 1);
    }
}
