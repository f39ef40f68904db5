//! A small HTTPS admission webhook for the tests: a certificate for 127.0.0.1 and
//! [`SERVICE_NAME`]`.`[`SERVICE_NAMESPACE`]`.svc` from a CA of its own ([`certs`]), HTTP/1.1
//! and h2. [`Webhook::start`] runs it in the test's process on a loopback port;
//! [`serve_standalone`] runs the same server in a pod (tests/agent_webhook_pods.rs). One
//! behaviour per path:
//!
//! | path | answer |
//! |---|---|
//! | `/allow` | allowed, and not kept (the benchmark's no-op webhook, called many times) |
//! | `/deny` | refused with code 403 and [`DENY_MESSAGE`] |
//! | `/label` | allowed, with a JSONPatch adding the label `webhook: patched` |
//! | `/warn` | allowed, with the warning [`WARNING`] |
//! | `/hang` | no answer for a minute |
//! | `/garbage` | 200 with a body that is not JSON |
//! | `/wrong-uid` | an AdmissionReview answering another uid |
//! | `/fail` | 500 |
//!
//! Every review received in process is kept ([`Webhook::reviews`]) so tests see what was sent.

use std::convert::Infallible;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use base64::Engine;
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::{Request, Response};
use hyper_util::rt::{TokioExecutor, TokioIo};
use serde_json::{json, Value};
use tokio_rustls::TlsAcceptor;

use super::serving_tls::ServingCerts;

pub const DENY_MESSAGE: &str = "the test webhook refuses this object";
pub const WARNING: &str = "the test webhook warns about this object";
/// The Service the tests put in front of the webhook (`<name>.<namespace>.svc` is in its
/// certificate, as kube-apiserver checks for a webhook called by Service reference).
pub const SERVICE_NAME: &str = "test-webhook";
pub const SERVICE_NAMESPACE: &str = "default";

type Reviews = Arc<Mutex<Vec<(String, Value)>>>;

pub struct Webhook {
    pub addr: SocketAddr,
    /// The PEM of the CA that signed the webhook's certificate.
    pub ca_pem: String,
    reviews: Reviews,
    handshakes: Arc<AtomicUsize>,
    runtime: Option<tokio::runtime::Runtime>,
}

impl Webhook {
    /// Starts the webhook on a free loopback port.
    pub fn start() -> Webhook {
        super::install_crypto_provider();
        let certs = certs(&[IpAddr::V4(Ipv4Addr::LOCALHOST)]);
        let runtime = super::runtime();
        let listener = runtime
            .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
            .unwrap();
        let addr = listener.local_addr().unwrap();
        let reviews: Reviews = Arc::default();
        let handshakes = Arc::new(AtomicUsize::new(0));
        let acceptor = acceptor(&certs).unwrap();
        runtime.spawn(serve(
            listener,
            acceptor,
            reviews.clone(),
            handshakes.clone(),
        ));
        Webhook {
            addr,
            ca_pem: certs.ca_pem,
            reviews,
            handshakes,
            runtime: Some(runtime),
        }
    }

    /// The TLS handshakes completed so far (a kept connection is one).
    pub fn handshakes(&self) -> usize {
        self.handshakes.load(Ordering::SeqCst)
    }

    /// `https://127.0.0.1:PORT/PATH`.
    pub fn url(&self, path: &str) -> String {
        format!("https://{}{path}", self.addr)
    }

    /// The CA as a configuration's `caBundle` (base64 of the PEM).
    pub fn ca_bundle(&self) -> String {
        base64::engine::general_purpose::STANDARD.encode(&self.ca_pem)
    }

    /// The `request`s of the reviews received on `path`, oldest first.
    pub fn reviews(&self, path: &str) -> Vec<Value> {
        self.reviews
            .lock()
            .unwrap()
            .iter()
            .filter(|(p, _)| p == path)
            .map(|(_, r)| r["request"].clone())
            .collect()
    }

    pub fn clear(&self) {
        self.reviews.lock().unwrap().clear();
    }

    /// Stops answering: the port refuses connections from now on.
    pub fn stop(&mut self) {
        if let Some(runtime) = self.runtime.take() {
            runtime.shutdown_timeout(Duration::from_secs(1));
        }
    }
}

impl Drop for Webhook {
    fn drop(&mut self) {
        self.stop();
    }
}

/// A new CA and a certificate for `localhost`, `<SERVICE_NAME>.<SERVICE_NAMESPACE>.svc` and
/// `ips`: the webhook's TLS material.
pub fn certs(ips: &[IpAddr]) -> ServingCerts {
    ServingCerts::new(
        "test-webhook-ca",
        &[
            "localhost".to_string(),
            format!("{SERVICE_NAME}.{SERVICE_NAMESPACE}.svc"),
        ],
        ips,
    )
}

fn acceptor(certs: &ServingCerts) -> Result<TlsAcceptor, String> {
    let config = certs.server_config(None, &[b"h2", b"http/1.1"])?;
    Ok(TlsAcceptor::from(Arc::new(config)))
}

/// Runs the webhook on `0.0.0.0:port` with `certs` until the process ends: the same server,
/// started by a test inside a pod. Reviews are not kept (nobody could read them).
pub fn serve_standalone(port: u16, certs: &ServingCerts) -> Result<(), String> {
    super::install_crypto_provider();
    let acceptor = acceptor(certs)?;
    let runtime = super::runtime();
    runtime.block_on(async {
        let listener = tokio::net::TcpListener::bind(("0.0.0.0", port))
            .await
            .map_err(|e| format!("listen on port {port}: {e}"))?;
        serve(listener, acceptor, Arc::default(), Arc::default()).await;
        Ok(())
    })
}

/// Accepts connections on `listener` forever, each served on a task of its own.
async fn serve(
    listener: tokio::net::TcpListener,
    acceptor: TlsAcceptor,
    reviews: Reviews,
    handshakes: Arc<AtomicUsize>,
) {
    loop {
        let Ok((tcp, _)) = listener.accept().await else {
            continue;
        };
        let _ = tcp.set_nodelay(true);
        let acceptor = acceptor.clone();
        let reviews = reviews.clone();
        let handshakes = handshakes.clone();
        tokio::spawn(async move {
            let Ok(tls) = acceptor.accept(tcp).await else {
                return;
            };
            handshakes.fetch_add(1, Ordering::SeqCst);
            let service = hyper::service::service_fn(move |req| {
                let reviews = reviews.clone();
                async move { Ok::<_, Infallible>(answer(req, reviews).await) }
            });
            let _ = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new())
                .serve_connection(TokioIo::new(tls), service)
                .await;
        });
    }
}

fn review_answer(uid: &Value, response: Value) -> Value {
    let mut response = response;
    response["uid"] = uid.clone();
    json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "response": response})
}

async fn answer(req: Request<hyper::body::Incoming>, reviews: Reviews) -> Response<Full<Bytes>> {
    let path = req.uri().path().to_string();
    let body = req.into_body().collect().await.map(|b| b.to_bytes());
    let review: Value = body
        .ok()
        .and_then(|b| serde_json::from_slice(&b).ok())
        .unwrap_or(Value::Null);
    if path != "/allow" {
        reviews.lock().unwrap().push((path.clone(), review.clone()));
    }
    let uid = &review["request"]["uid"];
    let reply = match path.as_str() {
        "/allow" => review_answer(uid, json!({"allowed": true})),
        "/deny" => review_answer(
            uid,
            json!({"allowed": false, "status": {"code": 403, "message": DENY_MESSAGE}}),
        ),
        "/label" => {
            let has_labels = review["request"]["object"]["metadata"]["labels"].is_object();
            let patch = if has_labels {
                json!([{"op": "add", "path": "/metadata/labels/webhook", "value": "patched"}])
            } else {
                json!([{"op": "add", "path": "/metadata/labels", "value": {"webhook": "patched"}}])
            };
            let patch = base64::engine::general_purpose::STANDARD.encode(patch.to_string());
            review_answer(
                uid,
                json!({"allowed": true, "patchType": "JSONPatch", "patch": patch}),
            )
        }
        "/warn" => review_answer(uid, json!({"allowed": true, "warnings": [WARNING]})),
        "/hang" => {
            tokio::time::sleep(Duration::from_secs(60)).await;
            review_answer(uid, json!({"allowed": true}))
        }
        "/garbage" => return Response::new(Full::new(Bytes::from_static(b"this is no review"))),
        "/wrong-uid" => review_answer(&json!("not-the-uid"), json!({"allowed": true})),
        _ => {
            let mut response = Response::new(Full::new(Bytes::from_static(b"failing")));
            *response.status_mut() = http::StatusCode::INTERNAL_SERVER_ERROR;
            return response;
        }
    };
    let mut response = Response::new(Full::new(Bytes::from(reply.to_string())));
    response.headers_mut().insert(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_static("application/json"),
    );
    response
}
