//! A small aggregated API server for the tests, outside any pod: HTTPS with a certificate for
//! [`SERVICE_NAME`]`.`[`SERVICE_NAMESPACE`]`.svc` from a CA of its own (rcgen), requiring a
//! client certificate that chains to the CA it is given (the API server's
//! `requestheader-client-ca-file`). It serves group version [`GROUP`]/[`VERSION`]:
//!
//! | path | answer |
//! |---|---|
//! | `/apis/GROUP/VERSION` | an APIResourceList with the namespaced resource `flunders` |
//! | `.../namespaces/NS/flunders` | a FlunderList of one Flunder, `first` |
//! | `.../namespaces/NS/flunders/NAME` | that Flunder, or a 404 Status |
//!
//! Every request is kept with its front-proxy headers, whether it carried an Authorization
//! header, and the common name of the client certificate ([`Aggregated::requests`]).

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use base64::Engine;
use bytes::Bytes;
use http_body_util::Full;
use hyper::{Request, Response};
use hyper_util::rt::{TokioExecutor, TokioIo};
use serde_json::{json, Value};
use tokio_rustls::TlsAcceptor;

pub const GROUP: &str = "wardle.example.com";
pub const VERSION: &str = "v1alpha1";
pub const SERVICE_NAME: &str = "wardle";
pub const SERVICE_NAMESPACE: &str = "default";

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

type Log = Arc<Mutex<Vec<Seen>>>;

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
        let ca_key = rcgen::KeyPair::generate().unwrap();
        let mut ca_params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        ca_params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        ca_params
            .distinguished_name
            .push(rcgen::DnType::CommonName, "test-aggregated-ca");
        let ca = ca_params.self_signed(&ca_key).unwrap();
        let key = rcgen::KeyPair::generate().unwrap();
        let params =
            rcgen::CertificateParams::new(vec![format!("{SERVICE_NAME}.{SERVICE_NAMESPACE}.svc")])
                .unwrap();
        let cert = params.signed_by(&key, &ca, &ca_key).unwrap();

        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut roots = rustls::RootCertStore::empty();
        for c in rustls_pemfile::certs(&mut client_ca_pem.as_bytes()) {
            roots.add(c.unwrap()).unwrap();
        }
        let verifier = rustls::server::WebPkiClientVerifier::builder_with_provider(
            Arc::new(roots),
            provider.clone(),
        )
        .build()
        .unwrap();
        let config = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_client_cert_verifier(verifier)
            .with_single_cert(
                vec![cert.der().clone()],
                rustls::pki_types::PrivateKeyDer::Pkcs8(key.serialize_der().into()),
            )
            .unwrap();
        let acceptor = TlsAcceptor::from(Arc::new(config));
        let runtime = super::runtime();
        let listener = runtime
            .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
            .unwrap();
        let addr = listener.local_addr().unwrap();
        let log: Log = Arc::default();
        let kept = log.clone();
        runtime.spawn(async move {
            loop {
                let Ok((tcp, _)) = listener.accept().await else {
                    continue;
                };
                let acceptor = acceptor.clone();
                let log = kept.clone();
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
                        log.lock().unwrap().push(seen);
                        async move { Ok::<_, Infallible>(answer(req)) }
                    });
                    let _ = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new())
                        .serve_connection(TokioIo::new(tls), service)
                        .await;
                });
            }
        });
        Aggregated {
            addr,
            ca_pem: ca.pem(),
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
        self.log.lock().unwrap().clone()
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

fn flunder(namespace: &str, name: &str) -> Value {
    json!({
        "apiVersion": format!("{GROUP}/{VERSION}"),
        "kind": "Flunder",
        "metadata": {"name": name, "namespace": namespace,
                     "creationTimestamp": "2024-01-01T00:00:00Z", "uid": "f1", "resourceVersion": "1"},
        "spec": {"reference": "the test aggregated server"},
    })
}

fn answer<B>(req: Request<B>) -> Response<Full<Bytes>> {
    let base = format!("/apis/{GROUP}/{VERSION}");
    let path = req.uri().path().trim_end_matches('/').to_string();
    let rest = path.strip_prefix(&base);
    let (code, body) = match rest.map(|r| r.split('/').skip(1).collect::<Vec<_>>()) {
        Some(parts) if parts.is_empty() => (
            200,
            json!({
                "kind": "APIResourceList", "apiVersion": "v1",
                "groupVersion": format!("{GROUP}/{VERSION}"),
                "resources": [{"name": "flunders", "singularName": "flunder", "namespaced": true,
                               "kind": "Flunder", "verbs": ["get", "list"], "shortNames": ["fl"]}],
            }),
        ),
        Some(parts) => match parts.as_slice() {
            ["namespaces", ns, "flunders"] => (
                200,
                json!({
                    "apiVersion": format!("{GROUP}/{VERSION}"), "kind": "FlunderList",
                    "metadata": {"resourceVersion": "1"},
                    "items": [flunder(ns, "first")],
                }),
            ),
            ["namespaces", ns, "flunders", "first"] => (200, flunder(ns, "first")),
            _ => (404, not_found()),
        },
        None => (404, not_found()),
    };
    let mut resp = Response::new(Full::new(Bytes::from(body.to_string())));
    *resp.status_mut() = hyper::StatusCode::from_u16(code).unwrap();
    resp.headers_mut().insert(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_static("application/json"),
    );
    resp
}

fn not_found() -> Value {
    json!({"kind": "Status", "apiVersion": "v1", "status": "Failure",
           "message": "the test aggregated server has no such path", "reason": "NotFound", "code": 404})
}
