//! A small aggregated API server for the tests: HTTPS with a certificate for
//! [`SERVICE_NAME`]`.`[`SERVICE_NAMESPACE`]`.svc` from a CA of its own ([`certs`]), requiring a
//! client certificate that chains to the CA it is given (the API server's
//! `requestheader-client-ca-file`). [`Aggregated::start`] runs it in the test's process on a
//! loopback port; [`serve_standalone`] runs the same server in a pod
//! (tests/agent_webhook_pods.rs). It serves group version [`GROUP`]/[`VERSION`]:
//!
//! | path | answer |
//! |---|---|
//! | `/apis/GROUP/VERSION` | an APIResourceList with the namespaced resource `flunders` |
//! | `.../namespaces/NS/flunders` | a FlunderList of one Flunder, `first` |
//! | `.../namespaces/NS/flunders?watch=true` | a watch: the [`WATCH_EVENTS`] of `first`, one chunk each, then open until `timeoutSeconds` (an hour without) |
//! | `.../namespaces/NS/flunders/NAME` | that Flunder, or a 404 Status |
//!
//! and, as metrics-server does, [`METRICS_GROUP_VERSION`] for `kubectl top`: `nodes` (a
//! NodeMetrics per name in [`METRICS_NODES`]: 250m CPU, 512Mi memory) and `pods` (one
//! PodMetrics `busy` per namespace asked, one container `main`: 100m, 64Mi).
//!
//! Every request received in process is kept with its front-proxy headers, whether it carried
//! an Authorization header, and the common name of the client certificate
//! ([`Aggregated::requests`]).

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use base64::Engine;
use bytes::Bytes;
use futures::StreamExt;
use http_body_util::combinators::UnsyncBoxBody;
use http_body_util::{BodyExt, Full, StreamBody};
use hyper::body::Frame;
use hyper::{Request, Response};
use hyper_util::rt::{TokioExecutor, TokioIo};
use serde_json::{json, Value};
use tokio_rustls::TlsAcceptor;

use super::serving_tls::ServingCerts;

pub const GROUP: &str = "wardle.example.com";
/// The metrics API version `kubectl top` reads.
pub const METRICS_GROUP_VERSION: &str = "metrics.k8s.io/v1beta1";
/// The nodes the metrics API reports.
pub const METRICS_NODES: [&str; 1] = ["metered"];
pub const VERSION: &str = "v1alpha1";
pub const SERVICE_NAME: &str = "wardle";
pub const SERVICE_NAMESPACE: &str = "default";
/// The events a watch of flunders sends, in order, for the one Flunder `first`.
pub const WATCH_EVENTS: [&str; 3] = ["ADDED", "MODIFIED", "DELETED"];
/// The pause between two events of a watch.
const WATCH_SPACING: Duration = Duration::from_millis(100);
/// How long a watch without `timeoutSeconds` stays open after its events.
const WATCH_HELD: Duration = Duration::from_secs(3600);

/// What one request carried.
#[derive(Debug, Clone)]
pub struct Seen {
    pub path: String,
    pub user: Option<String>,
    pub groups: Vec<String>,
    pub extra: Vec<(String, String)>,
    pub authorization: bool,
    /// The common name of the client certificate the proxy presented.
    pub client_cn: String,
}

/// What the server saw: every request, and the watches open now.
#[derive(Default)]
struct Record {
    requests: Mutex<Vec<Seen>>,
    watching: AtomicUsize,
}

type Log = Arc<Record>;

/// Counts one open watch for as long as it lives (its body is dropped when the watch ends,
/// whichever side ends it).
struct Watching(Log);

impl Watching {
    fn new(log: &Log) -> Watching {
        log.watching.fetch_add(1, Ordering::SeqCst);
        Watching(log.clone())
    }
}

impl Drop for Watching {
    fn drop(&mut self) {
        self.0.watching.fetch_sub(1, Ordering::SeqCst);
    }
}

pub struct Aggregated {
    pub addr: SocketAddr,
    pub ca_pem: String,
    log: Log,
    runtime: Option<tokio::runtime::Runtime>,
}

impl Aggregated {
    /// Starts on a free loopback port, trusting clients whose certificate chains to
    /// `client_ca_pem`.
    pub fn start(client_ca_pem: &str) -> Aggregated {
        super::install_crypto_provider();
        let certs = certs();
        let acceptor = acceptor(&certs, client_ca_pem).unwrap();
        let runtime = super::runtime();
        let listener = runtime
            .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
            .unwrap();
        let addr = listener.local_addr().unwrap();
        let log: Log = Arc::default();
        runtime.spawn(serve(listener, acceptor, log.clone()));
        Aggregated {
            addr,
            ca_pem: certs.ca_pem,
            log,
            runtime: Some(runtime),
        }
    }

    /// The CA as an APIService's `caBundle` (base64 of the PEM).
    pub fn ca_bundle(&self) -> String {
        base64::engine::general_purpose::STANDARD.encode(&self.ca_pem)
    }

    /// The requests received so far, oldest first.
    pub fn requests(&self) -> Vec<Seen> {
        self.log.requests.lock().unwrap().clone()
    }

    /// The watches open now.
    pub fn watching(&self) -> usize {
        self.log.watching.load(Ordering::SeqCst)
    }

    /// Stops answering: the port refuses connections from now on.
    pub fn stop(&mut self) {
        if let Some(runtime) = self.runtime.take() {
            runtime.shutdown_timeout(Duration::from_secs(1));
        }
    }
}

impl Drop for Aggregated {
    fn drop(&mut self) {
        self.stop();
    }
}

/// A new CA and a certificate for `<SERVICE_NAME>.<SERVICE_NAMESPACE>.svc`: the server's TLS
/// material.
pub fn certs() -> ServingCerts {
    ServingCerts::new(
        "test-aggregated-ca",
        &[format!("{SERVICE_NAME}.{SERVICE_NAMESPACE}.svc")],
        &[],
    )
}

fn acceptor(certs: &ServingCerts, client_ca_pem: &str) -> Result<TlsAcceptor, String> {
    let config = certs.server_config(Some(client_ca_pem), &[b"http/1.1"])?;
    Ok(TlsAcceptor::from(Arc::new(config)))
}

/// Runs the server on `0.0.0.0:port` with `certs`, trusting clients whose certificate chains
/// to `client_ca_pem`, until the process ends: the same server, started by a test inside a
/// pod. Requests are not kept (nobody could read them).
pub fn serve_standalone(
    port: u16,
    certs: &ServingCerts,
    client_ca_pem: &str,
) -> Result<(), String> {
    super::install_crypto_provider();
    let acceptor = acceptor(certs, client_ca_pem)?;
    let runtime = super::runtime();
    runtime.block_on(async {
        let listener = tokio::net::TcpListener::bind(("0.0.0.0", port))
            .await
            .map_err(|e| format!("listen on port {port}: {e}"))?;
        serve(listener, acceptor, Arc::default()).await;
        Ok(())
    })
}

/// Accepts connections on `listener` forever, each served on a task of its own.
async fn serve(listener: tokio::net::TcpListener, acceptor: TlsAcceptor, log: Log) {
    loop {
        let Ok((tcp, _)) = listener.accept().await else {
            continue;
        };
        let acceptor = acceptor.clone();
        let log = log.clone();
        tokio::spawn(async move {
            let Ok(tls) = acceptor.accept(tcp).await else {
                return;
            };
            let client_cn = tls
                .get_ref()
                .1
                .peer_certificates()
                .and_then(|chain| chain.first())
                .map(|der| common_name(der.as_ref()))
                .unwrap_or_default();
            let service = hyper::service::service_fn(move |req| {
                let seen = seen(&req, &client_cn);
                log.requests.lock().unwrap().push(seen);
                let answer = answer(req, &log);
                async move { Ok::<_, Infallible>(answer) }
            });
            let _ = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new())
                .serve_connection(TokioIo::new(tls), service)
                .await;
        });
    }
}

fn common_name(der: &[u8]) -> String {
    let Ok((_, cert)) = x509_parser::parse_x509_certificate(der) else {
        return String::new();
    };
    let cn = cert
        .subject()
        .iter_common_name()
        .next()
        .and_then(|cn| cn.as_str().ok())
        .unwrap_or_default()
        .to_string();
    cn
}

fn seen<B>(req: &Request<B>, client_cn: &str) -> Seen {
    let headers = req.headers();
    let text = |v: &http::HeaderValue| v.to_str().unwrap_or("").to_string();
    Seen {
        path: req.uri().path().to_string(),
        user: headers.get("x-remote-user").map(text),
        groups: headers.get_all("x-remote-group").iter().map(text).collect(),
        extra: headers
            .iter()
            .filter_map(|(name, value)| {
                let key = name.as_str().strip_prefix("x-remote-extra-")?;
                Some((key.to_string(), text(value)))
            })
            .collect(),
        authorization: headers.contains_key(http::header::AUTHORIZATION),
        client_cn: client_cn.to_string(),
    }
}

fn flunder(namespace: &str, name: &str, resource_version: u64) -> Value {
    json!({
        "apiVersion": format!("{GROUP}/{VERSION}"),
        "kind": "Flunder",
        "metadata": {"name": name, "namespace": namespace,
                     "creationTimestamp": "2024-01-01T00:00:00Z", "uid": "f1",
                     "resourceVersion": resource_version.to_string()},
        "spec": {"reference": "the test aggregated server"},
    })
}

type Body = UnsyncBoxBody<Bytes, Infallible>;

/// The answer of the metrics API for the path after `/apis/metrics.k8s.io/v1beta1`.
fn metrics(parts: &[&str]) -> (u16, Value) {
    let window = json!({"timestamp": "2024-01-01T00:00:00Z", "window": "20s"});
    let node = |name: &str| {
        json!({"metadata": {"name": name, "creationTimestamp": "2024-01-01T00:00:00Z"},
               "timestamp": window["timestamp"], "window": window["window"],
               "usage": {"cpu": "250m", "memory": "512Mi"}})
    };
    let pod = |ns: &str| {
        json!({"metadata": {"name": "busy", "namespace": ns, "creationTimestamp": "2024-01-01T00:00:00Z"},
               "timestamp": window["timestamp"], "window": window["window"],
               "containers": [{"name": "main", "usage": {"cpu": "100m", "memory": "64Mi"}}]})
    };
    let list = |kind: &str, items: Vec<Value>| {
        json!({"kind": kind, "apiVersion": METRICS_GROUP_VERSION,
               "metadata": {}, "items": items})
    };
    match parts {
        [] => (
            200,
            json!({
                "kind": "APIResourceList", "apiVersion": "v1",
                "groupVersion": METRICS_GROUP_VERSION,
                "resources": [
                    {"name": "nodes", "singularName": "", "namespaced": false,
                     "kind": "NodeMetrics", "verbs": ["get", "list"]},
                    {"name": "pods", "singularName": "", "namespaced": true,
                     "kind": "PodMetrics", "verbs": ["get", "list"]}],
            }),
        ),
        ["nodes"] => (
            200,
            list(
                "NodeMetricsList",
                METRICS_NODES.iter().map(|n| node(n)).collect(),
            ),
        ),
        ["nodes", name] if METRICS_NODES.contains(name) => (200, node(name)),
        ["namespaces", ns, "pods"] => (200, list("PodMetricsList", vec![pod(ns)])),
        ["namespaces", ns, "pods", "busy"] => (200, pod(ns)),
        _ => (404, not_found()),
    }
}

fn answer<B>(req: Request<B>, log: &Log) -> Response<Body> {
    let base = format!("/apis/{GROUP}/{VERSION}");
    let path = req.uri().path().trim_end_matches('/').to_string();
    if let Some(rest) = path.strip_prefix(&format!("/apis/{METRICS_GROUP_VERSION}")) {
        let parts: Vec<&str> = rest.split('/').skip(1).collect();
        let (code, body) = metrics(&parts);
        return json_response(
            code,
            Full::new(Bytes::from(body.to_string())).boxed_unsync(),
        );
    }
    let query = req.uri().query().unwrap_or("");
    let param = |name: &str| {
        query
            .split('&')
            .find_map(|kv| kv.strip_prefix(name)?.strip_prefix('='))
    };
    let rest = path.strip_prefix(&base);
    let (code, body) = match rest.map(|r| r.split('/').skip(1).collect::<Vec<_>>()) {
        Some(parts) if parts.is_empty() => (
            200,
            json!({
                "kind": "APIResourceList", "apiVersion": "v1",
                "groupVersion": format!("{GROUP}/{VERSION}"),
                "resources": [{"name": "flunders", "singularName": "flunder", "namespaced": true,
                               "kind": "Flunder", "verbs": ["get", "list", "watch"],
                               "shortNames": ["fl"]}],
            }),
        ),
        Some(parts) => match parts.as_slice() {
            ["namespaces", ns, "flunders"] if matches!(param("watch"), Some("true" | "1")) => {
                let lasts = param("timeoutSeconds")
                    .and_then(|s| s.parse().ok())
                    .map(Duration::from_secs)
                    .unwrap_or(WATCH_HELD);
                return json_response(200, watch(ns, lasts, Watching::new(log)));
            }
            ["namespaces", ns, "flunders"] => (
                200,
                json!({
                    "apiVersion": format!("{GROUP}/{VERSION}"), "kind": "FlunderList",
                    "metadata": {"resourceVersion": "1"},
                    "items": [flunder(ns, "first", 1)],
                }),
            ),
            ["namespaces", ns, "flunders", "first"] => (200, flunder(ns, "first", 1)),
            _ => (404, not_found()),
        },
        None => (404, not_found()),
    };
    json_response(
        code,
        Full::new(Bytes::from(body.to_string())).boxed_unsync(),
    )
}

fn json_response(code: u16, body: Body) -> Response<Body> {
    let mut resp = Response::new(body);
    *resp.status_mut() = hyper::StatusCode::from_u16(code).unwrap();
    resp.headers_mut().insert(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_static("application/json"),
    );
    resp
}

/// A watch of namespace `ns`'s flunders: the [`WATCH_EVENTS`] of `first`, one chunk each
/// [`WATCH_SPACING`] apart, then nothing until `lasts` has passed, when the answer ends;
/// `watching` counts it open until then or until the client leaves.
fn watch(ns: &str, lasts: Duration, watching: Watching) -> Body {
    let ns = ns.to_string();
    let events = futures::stream::unfold(0usize, move |sent| {
        let ns = ns.clone();
        async move {
            let kind = WATCH_EVENTS.get(sent)?;
            if sent > 0 {
                tokio::time::sleep(WATCH_SPACING).await;
            }
            let object = flunder(&ns, "first", sent as u64 + 1);
            let line = format!("{}\n", json!({"type": kind, "object": object}));
            Some((
                Ok::<_, Infallible>(Frame::data(Bytes::from(line))),
                sent + 1,
            ))
        }
    });
    let held = futures::stream::once(async move {
        tokio::time::sleep(lasts).await;
        drop(watching);
    })
    .filter_map(|()| async { None::<Result<Frame<Bytes>, Infallible>> });
    StreamBody::new(events.chain(held)).boxed_unsync()
}

fn not_found() -> Value {
    json!({"kind": "Status", "apiVersion": "v1", "status": "Failure",
           "message": "the test aggregated server has no such path", "reason": "NotFound", "code": 404})
}

/// A watch of flunders opened through an API server's aggregation proxy, read event by event
/// as the answer streams in. Dropping it closes its connection.
pub struct ProxiedWatch {
    pub status: u16,
    body: hyper::body::Incoming,
    buffer: Vec<u8>,
    _conn: super::Conn,
}

impl ProxiedWatch {
    /// `GET /apis/GROUP/VERSION/namespaces/NS/flunders?watch=true` plus `extra_query` (such as
    /// `&timeoutSeconds=1`) through `api`.
    pub async fn open(api: &super::Api, namespace: &str, extra_query: &str) -> ProxiedWatch {
        let path = format!(
            "/apis/{GROUP}/{VERSION}/namespaces/{namespace}/flunders?watch=true{extra_query}"
        );
        let mut conn = api.connect().await.expect("connect to the API server");
        let answer = conn
            .send("GET", &path, None, Bytes::new())
            .await
            .expect("the watch's head");
        ProxiedWatch {
            status: answer.status().as_u16(),
            body: answer.into_body(),
            buffer: Vec::new(),
            _conn: conn,
        }
    }

    /// The next event's type and object; `None` when the answer ended. Panics when nothing
    /// came within `guard` (a hang guard: an unstreamed answer would come at its end only).
    pub async fn next(&mut self, guard: Duration) -> Option<(String, Value)> {
        let read = async {
            loop {
                if let Some(end) = self.buffer.iter().position(|b| *b == b'\n') {
                    let line: Vec<u8> = self.buffer.drain(..=end).collect();
                    let mut event: Value = serde_json::from_slice(&line).expect("a JSON event");
                    let kind = event["type"].as_str().unwrap_or_default().to_string();
                    return Some((kind, event["object"].take()));
                }
                let frame = self.body.frame().await?.expect("the watch's body");
                if let Ok(data) = frame.into_data() {
                    self.buffer.extend_from_slice(&data);
                }
            }
        };
        tokio::time::timeout(guard, read)
            .await
            .expect("no event nor end of the watch in time")
    }
}
