//! Kept connections for traffic between servers: HTTP/2 over TLS, one connection per peer
//! address shared by every concurrent request to it, so a request its caller stopped waiting
//! for only resets its own stream and the connection stays. Raft RPCs, forwarded writes and
//! the join's admission go through one of these.
//!
//! A pool's connections are driven by tasks on the runtime that opened them: make one pool
//! per runtime (the Raft runtime's RPCs must not depend on the API runtime's workers).
//!
//! [`Pool::send`] reads whole answers; [`Pool::stream`] hands back the answer's head and a
//! body still arriving, for watches (the node agent's API client).

use std::time::Duration;

use bytes::Bytes;
use http::{header, HeaderValue, Request, Response};
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::Incoming;
use hyper_util::client::legacy::{connect::HttpConnector, Client};
use hyper_util::rt::{TokioExecutor, TokioTimer};

use super::error::{chain, ClientError};
use super::tls::TlsConfig;
use super::Limits;

/// A bearer token that is not a valid header value (it must be visible ASCII).
#[derive(Debug, thiserror::Error)]
#[error("the bearer token is not a valid HTTP header value")]
pub struct BadToken;

/// HTTP/2 connections over TLS, kept per peer.
#[derive(Clone)]
pub struct Pool {
    client: Client<hyper_rustls::HttpsConnector<HttpConnector>, Full<Bytes>>,
    /// `Authorization: Bearer …` added to every request, built once.
    authorization: Option<HeaderValue>,
}

impl Pool {
    /// A pool whose connections use `tls` (ALPN h2 only) and, with `bearer`, send it as the
    /// `Authorization: Bearer` header of every request. Connecting gives up after 2 s; HTTP/2
    /// pings every 5 s detect a dead peer on an idle connection; a connection idle for 90 s
    /// is closed.
    pub fn http2(tls: &TlsConfig, bearer: Option<&str>) -> Result<Pool, BadToken> {
        let authorization = match bearer {
            Some(token) => {
                let mut value =
                    HeaderValue::from_str(&format!("Bearer {token}")).map_err(|_| BadToken)?;
                value.set_sensitive(true);
                Some(value)
            }
            None => None,
        };
        let mut http = HttpConnector::new();
        http.enforce_http(false);
        http.set_nodelay(true);
        http.set_connect_timeout(Some(Duration::from_secs(2)));
        let connector = hyper_rustls::HttpsConnectorBuilder::new()
            .with_tls_config((*tls.0).clone())
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
        Ok(Pool {
            client,
            authorization,
        })
    }

    /// A pool for HTTPS servers outside litek8s that may speak either HTTP version (ALPN
    /// offers h2 and http/1.1): admission webhooks. HTTP/1.1 connections are kept idle for
    /// reuse (up to `idle_per_host` per host) and closed after 90 s idle; connecting gives up
    /// after `connect_timeout`.
    pub fn https(tls: &TlsConfig, connect_timeout: Duration, idle_per_host: usize) -> Pool {
        let mut http = HttpConnector::new();
        http.enforce_http(false);
        http.set_nodelay(true);
        http.set_connect_timeout(Some(connect_timeout));
        let connector = hyper_rustls::HttpsConnectorBuilder::new()
            .with_tls_config((*tls.0).clone())
            .https_only()
            .enable_all_versions()
            .wrap_connector(http);
        let client = Client::builder(TokioExecutor::new())
            .timer(TokioTimer::new())
            .pool_timer(TokioTimer::new())
            .pool_max_idle_per_host(idle_per_host)
            .pool_idle_timeout(Duration::from_secs(90))
            .build(connector);
        Pool {
            client,
            authorization: None,
        }
    }

    fn authorize(&self, request: &mut Request<Full<Bytes>>) {
        if let Some(value) = &self.authorization {
            request
                .headers_mut()
                .insert(header::AUTHORIZATION, value.clone());
        }
    }

    async fn head(&self, request: Request<Full<Bytes>>) -> Result<Response<Incoming>, ClientError> {
        self.client.request(request).await.map_err(|e| {
            if e.is_connect() {
                ClientError::from_connect(&e)
            } else {
                ClientError::Lost(chain(&e))
            }
        })
    }

    /// Sends `request` (an absolute `https://` URI) and returns the answer's head within
    /// `timeout`, its body still streaming: the caller bounds how long and how much it reads
    /// (a watch reads events until the server ends it or the caller drops the body, which
    /// resets only this stream).
    pub async fn stream(
        &self,
        mut request: Request<Full<Bytes>>,
        timeout: Duration,
    ) -> Result<Response<Incoming>, ClientError> {
        self.authorize(&mut request);
        match tokio::time::timeout(timeout, self.head(request)).await {
            Ok(result) => result,
            Err(_) => Err(ClientError::Timeout(timeout)),
        }
    }

    /// Sends `request` (an absolute `https://` URI) and returns the whole answer, whatever
    /// its status, within `limits`.
    pub async fn send(
        &self,
        mut request: Request<Full<Bytes>>,
        limits: Limits,
    ) -> Result<Response<Bytes>, ClientError> {
        self.authorize(&mut request);
        let exchange = async {
            let response = self.head(request).await?;
            let (parts, body) = response.into_parts();
            let body = Limited::new(body, limits.max_body)
                .collect()
                .await
                .map_err(|e| {
                    if e.is::<http_body_util::LengthLimitError>() {
                        ClientError::TooLarge {
                            limit: limits.max_body,
                        }
                    } else {
                        ClientError::Lost(chain(&*e))
                    }
                })?
                .to_bytes();
            Ok(Response::from_parts(parts, body))
        };
        match tokio::time::timeout(limits.timeout, exchange).await {
            Ok(result) => result,
            Err(_) => Err(ClientError::Timeout(limits.timeout)),
        }
    }
}
