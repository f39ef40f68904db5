//! The node port: kubelet's 10250 (`--kubelet-port`, 0 turns it off), for tools that dial
//! nodes directly (metrics-server scrapes `/metrics/resource` at the Node's
//! `daemonEndpoints.kubeletEndpoint`). The agent's own router ([`super::handle`], the one
//! the tunnel serves) answers over TLS, after each caller is authenticated and authorized
//! through the API server (`webhook`):
//!
//! - a client certificate of the cluster CA names the user (CN) and groups (O); a bearer
//!   token is reviewed; a caller with neither is `system:anonymous`;
//! - a refused token answers 401, a refused request 403, each with a plain-text body
//!   naming the user, verb and subresource; no answer from the API server 503;
//! - kubelet's `/exec`, `/attach` and `/portForward` (`nodes/proxy`) speak kubectl's
//!   protocols on the upgraded connection (`node_streams`).
//!
//! The serving certificate is the node's, signed by the cluster CA for the node's name and
//! IP (`cluster::node_credential`), asked for at every start with the node certificate and
//! kept next to it (`serving.crt`, `serving.key`): a start without a server to ask serves
//! with the kept one.

use std::net::{IpAddr, Ipv6Addr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use http::{header, Request, Response, StatusCode};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use rcgen::{CertificateParams, DnType, KeyPair};
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::ServerConfig;
use serde_json::json;
use tokio::net::TcpListener;
use tokio::sync::Semaphore;
use tokio_rustls::TlsAcceptor;
use tokio_util::sync::CancellationToken;

use super::webhook::{Attributes, Reviewer, Verdict};
use super::{handle, node_streams, StreamsDeps};
use crate::agent::api::ApiClient;
use crate::agent::join::CredentialFiles;
use crate::api::ApiBody;
use crate::auth::UserInfo;
use crate::cluster::node_credential::{node_user, NODES_GROUP};
use crate::cluster::protocol::api_paths;
use crate::storage::fsutil::{read_text_optional, write_file, SECRET_MODE};

/// The most connections served at once.
const MAX_CONNECTIONS: usize = 1024;
/// Bound of the TLS handshake.
const HANDSHAKE: Duration = Duration::from_secs(10);
const FIRST_PAUSE: Duration = Duration::from_millis(500);
const LONGEST_PAUSE: Duration = Duration::from_secs(30);

/// What the node port needs.
pub struct NodePort {
    pub port: u16,
    pub api: ApiClient,
    pub node_name: String,
    /// The node's IP, in the serving certificate.
    pub node_ip: IpAddr,
    /// The cluster CA (client certificates) and where the serving certificate is kept.
    pub ca_pem: String,
    pub files: CredentialFiles,
}

/// Serves the node port until `stop` (returns at once when the port is 0).
pub async fn run(port: NodePort, deps: Arc<StreamsDeps>, stop: CancellationToken) {
    if port.port == 0 {
        return;
    }
    let (cert_pem, key_pem) = tokio::select! {
        _ = stop.cancelled() => return,
        pair = serving_certificate(&port) => pair,
    };
    let config = match server_config(&cert_pem, &key_pem, &port.ca_pem) {
        Ok(config) => config,
        Err(e) => {
            tracing::error!(component = "streams", "node port: {e}");
            return;
        }
    };
    let addr = SocketAddr::from((IpAddr::V6(Ipv6Addr::UNSPECIFIED), port.port));
    let listener = match bind(addr).await {
        Ok(l) => l,
        Err(e) => {
            tracing::error!(
                component = "streams",
                "node port: cannot listen on {}: {e} (--kubelet-port 0 turns it off)",
                port.port
            );
            return;
        }
    };
    tracing::info!(
        component = "streams",
        "node port listening on {}",
        port.port
    );
    let acceptor = TlsAcceptor::from(config);
    let reviewer = Arc::new(Reviewer::new(port.api.clone(), port.node_name.clone()));
    let slots = Arc::new(Semaphore::new(MAX_CONNECTIONS));
    loop {
        let permit = tokio::select! {
            _ = stop.cancelled() => return,
            permit = slots.clone().acquire_owned() => match permit {
                Ok(p) => p,
                Err(_) => return,
            },
        };
        let (tcp, _) = tokio::select! {
            _ = stop.cancelled() => return,
            accepted = listener.accept() => match accepted {
                Ok(pair) => pair,
                Err(e) => {
                    tracing::debug!(component = "streams", "node port accept: {e}");
                    continue;
                }
            },
        };
        let (acceptor, reviewer, deps, stop) = (
            acceptor.clone(),
            reviewer.clone(),
            deps.clone(),
            stop.clone(),
        );
        tokio::spawn(async move {
            let _permit = permit;
            let _ = tcp.set_nodelay(true);
            let tls = match tokio::time::timeout(HANDSHAKE, acceptor.accept(tcp)).await {
                Ok(Ok(tls)) => tls,
                Ok(Err(e)) => {
                    tracing::debug!(component = "streams", "node port handshake: {e}");
                    return;
                }
                Err(_) => return,
            };
            let cert_user = tls
                .get_ref()
                .1
                .peer_certificates()
                .and_then(|chain| chain.first())
                .and_then(certificate_user);
            let service = service_fn(move |req| {
                serve(reviewer.clone(), deps.clone(), cert_user.clone(), req)
            });
            let mut builder = auto::Builder::new(TokioExecutor::new());
            builder.http1().timer(TokioTimer::new());
            builder.http2().timer(TokioTimer::new());
            let connection = builder.serve_connection_with_upgrades(TokioIo::new(tls), service);
            tokio::select! {
                _ = stop.cancelled() => {}
                result = connection => {
                    if let Err(e) = result {
                        tracing::debug!(component = "streams", "node port connection: {e}");
                    }
                }
            }
        });
    }
}

/// Listens on `addr` (all addresses, IPv6 and IPv4), or on IPv4's when the host has no IPv6.
async fn bind(addr: SocketAddr) -> std::io::Result<TcpListener> {
    match TcpListener::bind(addr).await {
        Ok(l) => Ok(l),
        Err(_) => TcpListener::bind(SocketAddr::from(([0, 0, 0, 0], addr.port()))).await,
    }
}

/// Authenticates, authorizes and answers one request.
async fn serve(
    reviewer: Arc<Reviewer>,
    deps: Arc<StreamsDeps>,
    cert_user: Option<UserInfo>,
    req: Request<Incoming>,
) -> Result<Response<ApiBody>, std::convert::Infallible> {
    let bearer = req
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .map(|t| t.trim().to_string())
        .filter(|t| !t.is_empty());
    let user = match (cert_user, bearer) {
        (Some(user), _) => user,
        (None, Some(token)) => match reviewer.authenticate(&token).await {
            Verdict::Yes(user) => user,
            Verdict::No(reason) => {
                return Ok(text(
                    StatusCode::UNAUTHORIZED,
                    format!("Unauthorized: {reason}"),
                ))
            }
            Verdict::Unavailable(reason) => {
                return Ok(text(StatusCode::SERVICE_UNAVAILABLE, reason));
            }
        },
        (None, None) => UserInfo::new("system:anonymous", &["system:unauthenticated"]),
    };
    let attributes = Attributes::of(req.method(), req.uri().path());
    let what = format!(
        "user={}, verb={}, resource=nodes, subresource={}",
        user.name, attributes.verb, attributes.subresource
    );
    match reviewer.authorize(&user, &attributes).await {
        Verdict::Yes(()) if node_streams::owns(req.uri().path()) => {
            Ok(node_streams::serve(deps, req).await)
        }
        Verdict::Yes(()) => handle(deps, req).await,
        Verdict::No(reason) if reason.is_empty() => {
            Ok(text(StatusCode::FORBIDDEN, format!("Forbidden ({what})")))
        }
        Verdict::No(reason) => Ok(text(
            StatusCode::FORBIDDEN,
            format!("Forbidden ({what}): {reason}"),
        )),
        Verdict::Unavailable(reason) => Ok(text(
            StatusCode::SERVICE_UNAVAILABLE,
            format!("Authorization error ({what}): {reason}"),
        )),
    }
}

fn text(code: StatusCode, body: String) -> Response<ApiBody> {
    crate::api::response::with_type(code, "text/plain; charset=utf-8", format!("{body}\n"))
}

/// The user a client certificate names (the handshake checked its chain and validity).
fn certificate_user(der: &CertificateDer<'_>) -> Option<UserInfo> {
    let (_, cert) = x509_parser::parse_x509_certificate(der).ok()?;
    let subject = cert.subject();
    let name = subject.iter_common_name().next()?.as_str().ok()?;
    if name.is_empty() {
        return None;
    }
    let groups: Vec<String> = subject
        .iter_organization()
        .filter_map(|o| o.as_str().ok())
        .map(str::to_string)
        .chain(std::iter::once("system:authenticated".to_string()))
        .collect();
    Some(UserInfo {
        name: name.to_string(),
        groups,
        ..UserInfo::default()
    })
}

/// TLS with the serving certificate; client certificates of the cluster CA asked for, not
/// required (a bearer token or anonymous is the other way in).
fn server_config(cert_pem: &str, key_pem: &str, ca_pem: &str) -> Result<Arc<ServerConfig>, String> {
    let certs = rustls_pemfile::certs(&mut cert_pem.as_bytes())
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| format!("serving.crt: {e}"))?;
    let key: PrivateKeyDer<'static> = rustls_pemfile::private_key(&mut key_pem.as_bytes())
        .map_err(|e| format!("serving.key: {e}"))?
        .ok_or("serving.key holds no key")?;
    let verifier = crate::server::tls::client_cert_verifier(ca_pem)?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?
        .with_client_cert_verifier(verifier)
        .with_single_cert(certs, key)
        .map_err(|e| format!("the serving certificate: {e}"))?;
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}

/// The serving certificate and its key: a new one from a server, else the kept one; waits
/// (asking again) while there is neither.
async fn serving_certificate(port: &NodePort) -> (String, String) {
    let (crt, key) = (
        port.files.dir().join("serving.crt"),
        port.files.dir().join("serving.key"),
    );
    let mut pause = FIRST_PAUSE;
    loop {
        match ask(port).await {
            Ok((cert_pem, key_pem)) => {
                for (path, text) in [(&key, &key_pem), (&crt, &cert_pem)] {
                    if let Err(e) = write_file(path, text.as_bytes(), SECRET_MODE) {
                        tracing::warn!(component = "streams", "{}: {e}", path.display());
                    }
                }
                return (cert_pem, key_pem);
            }
            Err(e) => {
                if let (Ok(Some(c)), Ok(Some(k))) =
                    (read_text_optional(&crt), read_text_optional(&key))
                {
                    tracing::warn!(
                        component = "streams",
                        "no new serving certificate ({e}): serving with the kept one"
                    );
                    return (c, k);
                }
                tracing::warn!(component = "streams", "no serving certificate yet: {e}");
            }
        }
        tokio::time::sleep(pause).await;
        pause = (pause * 2).min(LONGEST_PAUSE);
    }
}

/// Asks a server to sign a new serving key for the node's name and IP.
async fn ask(port: &NodePort) -> Result<(String, String), String> {
    let key = KeyPair::generate().map_err(|e| e.to_string())?;
    let mut params = CertificateParams::new(Vec::<String>::new()).map_err(|e| e.to_string())?;
    params
        .distinguished_name
        .push(DnType::CommonName, node_user(&port.node_name));
    params
        .distinguished_name
        .push(DnType::OrganizationName, NODES_GROUP);
    let csr = params
        .serialize_request(&key)
        .and_then(|csr| csr.pem())
        .map_err(|e| e.to_string())?;
    let request = json!({"csr": csr, "addresses": [port.node_ip.to_string()]});
    let answer = port
        .api
        .create(api_paths::NODE_SERVING_CERTIFICATE, &request)
        .await
        .map_err(|e| e.to_string())?;
    let cert = answer["certificate"]
        .as_str()
        .ok_or("the answer holds no certificate")?;
    Ok((cert.to_string(), key.serialize_pem()))
}
