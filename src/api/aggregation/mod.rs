//! Aggregated API servers: a group version registered by an APIService
//! (apiregistration.k8s.io/v1) with a Service is served by whatever runs behind that Service,
//! as kube-aggregator serves it.
//!
//! - [`apiservice`]: the kind's defaults and validation, and the [`apiservice::Backend`] a
//!   Service-backed one names;
//! - [`front_proxy`]: the client certificate the proxy presents, its CA (derived from the
//!   cluster CA's key, so every server has the same) and the
//!   `kube-system/extension-apiserver-authentication` ConfigMap;
//! - [`discovery`]: the Available aggregated group versions in `/apis`;
//! - [`proxy`]: a request under `/apis/<group>/<version>` passed to the Service, the caller's
//!   identity in the `X-Remote-*` headers, the answer streamed back (watches included);
//! - the [`Aggregator`] every server holds: the connections to the Services and the resources
//!   each one's discovery document lists (refreshed by the availability controller on the
//!   leader, and by any server when its copy is older than [`DISCOVERY_TTL`]), which
//!   `api::discovery` merges into `/apis`.
//!
//! The `Available` condition is the leader's `controllers::apiservice_availability`; requests
//! to a group version whose APIService is not Available are answered 503.

pub mod apiservice;
pub mod discovery;
pub mod front_proxy;
pub mod proxy;

use std::collections::HashMap;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::{header, Method, Request, StatusCode};
use http_body_util::Full;
use parking_lot::Mutex;
use serde_json::Value;

use self::apiservice::Backend;
use self::front_proxy::FrontProxy;
use super::ApiContext;
use crate::http_client::{Limits, TlsConfig};
use crate::streams::service_http::{ServiceHttp, ServiceHttpError, ServiceTarget};

/// A discovery document older than this is fetched again before `/apis` is answered.
pub const DISCOVERY_TTL: Duration = Duration::from_secs(30);
/// How long a discovery fetch (the availability probe) may take.
const PROBE_TIMEOUT: Duration = Duration::from_secs(5);
/// The largest discovery document read.
const MAX_DISCOVERY: usize = 4 << 20;

/// Why an APIService's Service did not answer its discovery as it should; the reason and
/// message of its `Available=False` condition.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unavailable {
    pub reason: &'static str,
    pub message: String,
}

/// The aggregation state of one server (shared by every context of the process).
#[derive(Default)]
pub struct Aggregator {
    http: ServiceHttp,
    front_proxy: OnceLock<FrontProxy>,
    /// TLS configurations by (CA bundle or insecure).
    tls: Mutex<HashMap<String, TlsConfig>>,
    /// APIResourceList by `group/version`, with when it was fetched.
    discovery: Mutex<HashMap<String, (Instant, Value)>>,
    /// When each `group/version`'s discovery was last asked for, answered or not: a Service
    /// that does not answer is asked again after [`DISCOVERY_TTL`], not on every `/apis`.
    attempted: Mutex<HashMap<String, Instant>>,
}

impl Aggregator {
    /// Gives the server its front-proxy identity (once; later calls are ignored).
    pub fn set_front_proxy(&self, front_proxy: FrontProxy) {
        let _ = self.front_proxy.set(front_proxy);
    }

    pub fn front_proxy(&self) -> Option<&FrontProxy> {
        self.front_proxy.get()
    }

    /// Where `backend`'s requests go, with the TLS it asks for.
    fn target(&self, backend: &Backend) -> Result<ServiceTarget, Unavailable> {
        let failed = |message: String| Unavailable {
            reason: "FailedDiscoveryCheck",
            message,
        };
        let front_proxy = self
            .front_proxy
            .get()
            .ok_or_else(|| failed("this server has no front-proxy client certificate".into()))?;
        let key = match (&backend.ca_bundle, backend.insecure) {
            (_, true) => "insecure".to_string(),
            (Some(pem), false) => format!("ca:{pem}"),
            (None, false) => {
                return Err(failed(
                    "no caBundle and insecureSkipTLSVerify false: the serving certificate cannot be checked".into(),
                ))
            }
        };
        let cached = self.tls.lock().get(&key).cloned();
        let tls = match cached {
            Some(tls) => tls,
            None => {
                let identity = front_proxy.identity().map_err(|e| failed(e.to_string()))?;
                let tls = match &backend.ca_bundle {
                    Some(pem) if !backend.insecure => TlsConfig::pinned(pem, Some(identity)),
                    _ => TlsConfig::unverified_presenting(identity),
                }
                .map_err(|e| failed(format!("caBundle: {e}")))?;
                self.tls.lock().insert(key.clone(), tls.clone());
                tls
            }
        };
        Ok(ServiceTarget {
            namespace: backend.namespace.clone(),
            name: backend.service.clone(),
            port: backend.port,
            tls,
            key: format!("{:016x}", fingerprint(&key)),
        })
    }

    /// Sends `request` (its URI a path) to `backend`'s Service.
    pub async fn send(
        &self,
        ctx: &ApiContext,
        backend: &Backend,
        request: Request<Full<Bytes>>,
        limits: Limits,
    ) -> Result<http::Response<Bytes>, Unavailable> {
        let target = self.target(backend)?;
        self.http
            .send(ctx, &target, request, limits)
            .await
            .map_err(|e| unavailable(backend, e))
    }

    /// Sends `request` (its URI a path) to `backend`'s Service and hands the answer on once
    /// its head arrived within `head_timeout`, its body streamed (a watch included).
    pub async fn stream(
        &self,
        ctx: &ApiContext,
        backend: &Backend,
        request: Request<Full<Bytes>>,
        head_timeout: Duration,
    ) -> Result<http::Response<super::ApiBody>, Unavailable> {
        let target = self.target(backend)?;
        self.http
            .stream(ctx, &target, request, head_timeout)
            .await
            .map_err(|e| unavailable(backend, e))
    }

    /// Fetches `backend`'s discovery (`GET /apis/<group>/<version>`) and keeps it: the
    /// availability check.
    pub async fn probe(&self, ctx: &ApiContext, backend: &Backend) -> Result<(), Unavailable> {
        let path = format!("/apis/{}/{}", backend.group, backend.version);
        let request = Request::builder()
            .method(Method::GET)
            .uri(&path)
            .header(header::ACCEPT, "application/json")
            .body(Full::new(Bytes::new()))
            .map_err(|e| Unavailable {
                reason: "FailedDiscoveryCheck",
                message: e.to_string(),
            })?;
        self.attempted
            .lock()
            .insert(backend.group_version(), Instant::now());
        let answer = self
            .send(
                ctx,
                backend,
                request,
                Limits::new(PROBE_TIMEOUT, MAX_DISCOVERY),
            )
            .await?;
        let url = format!(
            "https://{}.{}.svc:{}{path}",
            backend.service, backend.namespace, backend.port
        );
        if answer.status() != StatusCode::OK {
            return Err(Unavailable {
                reason: "FailedDiscoveryCheck",
                message: format!(
                    "failing or missing response from {url}: bad status from {url}: {}",
                    answer.status().as_u16()
                ),
            });
        }
        let list: Value = serde_json::from_slice(answer.body()).map_err(|e| Unavailable {
            reason: "FailedDiscoveryCheck",
            message: format!("failing or missing response from {url}: {e}"),
        })?;
        self.discovery
            .lock()
            .insert(backend.group_version(), (Instant::now(), list));
        Ok(())
    }

    /// Fetches the discovery of every Available Service-backed APIService not asked for in
    /// the last [`DISCOVERY_TTL`] (a failure keeps the old copy).
    pub async fn refresh_discovery(&self, ctx: &ApiContext) {
        let stale: Vec<Backend> = apiservice::backends(&ctx.store)
            .into_iter()
            .filter(|b| b.available)
            .filter(|b| {
                self.attempted
                    .lock()
                    .get(&b.group_version())
                    .is_none_or(|at| at.elapsed() > DISCOVERY_TTL)
            })
            .collect();
        let fetches = stale.iter().map(|b| self.probe(ctx, b));
        futures::future::join_all(fetches).await;
    }

    /// The kept APIResourceList of `group/version`, if any.
    pub fn resources(&self, group_version: &str) -> Option<Value> {
        self.discovery
            .lock()
            .get(group_version)
            .map(|(_, list)| list.clone())
    }
}

/// The condition a failed exchange with `backend`'s Service sets, in kube-aggregator's words.
fn unavailable(backend: &Backend, error: ServiceHttpError) -> Unavailable {
    use crate::streams::dial::DialError;
    let service = format!("{}/{}", backend.namespace, backend.service);
    match error {
        ServiceHttpError::Dial(DialError::NoService { .. }) => Unavailable {
            reason: "ServiceNotFound",
            message: format!(
                "service/{} in \"{}\" is not present",
                backend.service, backend.namespace
            ),
        },
        ServiceHttpError::Dial(DialError::NoPort { port, .. }) => Unavailable {
            reason: "ServicePortError",
            message: format!(
                "service/{} in \"{}\" is not listening on port {port}",
                backend.service, backend.namespace
            ),
        },
        ServiceHttpError::Dial(DialError::NoEndpoints { .. }) => Unavailable {
            reason: "MissingEndpoints",
            message: format!(
                "endpoints for service/{} in \"{}\" have no addresses with port name \"\"",
                backend.service, backend.namespace
            ),
        },
        other => Unavailable {
            reason: "FailedDiscoveryCheck",
            message: format!(
                "failing or missing response from https://{service}:{}/apis/{}/{}: {other}",
                backend.port, backend.group, backend.version
            ),
        },
    }
}

fn fingerprint(text: &str) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    text.hash(&mut hasher);
    hasher.finish()
}
