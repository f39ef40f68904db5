//! A byte stream to a Service's port from any server: how the API server reaches what runs
//! behind a Service (admission webhooks by Service reference, aggregated API servers).
//!
//! [`dial`] resolves `namespace/name:port` to the Service's ready endpoints (its
//! EndpointSlices, or its Endpoints object when it has no slices, as for a Service whose
//! endpoints someone writes by hand) and connects to one picked at random, trying the others
//! when it cannot be reached:
//! - an endpoint backed by a pod is reached through the agent tunnel of the pod's node (one
//!   HTTP/2 stream of the tunnel, as `kubectl port-forward` is): the agent dials its own pod.
//!   When that node's agent is connected to another server, the stream is relayed through it
//!   (an HTTP/1.1 upgrade on the cluster transport, see [`serve_relayed`]);
//! - an endpoint that is only an address (no pod) is dialled directly from this server, as
//!   kube-apiserver dials every endpoint.
//!
//! HTTPS over such a stream is `streams::service_http`.

use std::net::SocketAddr;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use http::{header, HeaderValue, Method, Request, Response, StatusCode};
use http_body_util::{BodyExt, Limited};
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use serde_json::Value;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;

use super::route::{self, Route, RELAYED};
use super::{channel_body, POD_UID_HEADER};
use crate::api::{ApiBody, ApiContext, UserInfo};
use crate::kube::object::ObjectKey;

/// Connecting to one endpoint, TCP or through a tunnel, gives up after this.
pub(super) const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// The protocol of the upgrade a server asks another for a stream to a pod's port.
const RAW_UPGRADE: &str = "x-litek8s-pod-port";

/// A byte stream to an endpoint.
pub trait Io: AsyncRead + AsyncWrite + Unpin + Send {}
impl<T: AsyncRead + AsyncWrite + Unpin + Send> Io for T {}

/// An open stream to one of a Service's endpoints.
pub type Connection = Box<dyn Io>;

/// Why no stream to a Service could be opened.
#[derive(Debug, Clone, thiserror::Error)]
pub enum DialError {
    #[error("service \"{namespace}/{name}\" not found")]
    NoService { namespace: String, name: String },
    #[error("service \"{namespace}/{name}\" has no port {port}")]
    NoPort {
        namespace: String,
        name: String,
        port: u16,
    },
    #[error("no endpoints available for service \"{namespace}/{name}\"")]
    NoEndpoints { namespace: String, name: String },
    /// Every endpoint was tried; the last failure.
    #[error("service \"{namespace}/{name}\": {reason}")]
    Unreachable {
        namespace: String,
        name: String,
        reason: String,
    },
}

/// One ready endpoint of a Service.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Backend {
    /// A pod, reached through its node's agent.
    Pod { pod: String, port: u16 },
    /// An address outside any pod this cluster runs.
    Address(SocketAddr),
}

/// The ready endpoints of Service `ns/name` for its port numbered `port`.
fn backends(ctx: &ApiContext, ns: &str, name: &str, port: u16) -> Result<Vec<Backend>, DialError> {
    let service = ctx
        .store
        .get(&ObjectKey::new("services", ns, name))
        .map(|o| o.value())
        .ok_or_else(|| DialError::NoService {
            namespace: ns.into(),
            name: name.into(),
        })?;
    let chosen = service["spec"]["ports"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|p| p["port"].as_u64() == Some(u64::from(port)));
    let Some(chosen) = chosen else {
        return Err(DialError::NoPort {
            namespace: ns.into(),
            name: name.into(),
            port,
        });
    };
    let port_name = chosen["name"].as_str().unwrap_or("");
    let snapshot = ctx.store.snapshot();
    let slices: Vec<Value> = snapshot
        .with_label(
            "discovery.k8s.io/endpointslices",
            Some(ns),
            "kubernetes.io/service-name",
            name,
        )
        .into_iter()
        .map(|s| s.value())
        .collect();
    let mut out = Vec::new();
    if !slices.is_empty() {
        for slice in &slices {
            let number = slice_port(&slice["ports"], port_name);
            let Some(number) = number else { continue };
            for e in slice["endpoints"].as_array().into_iter().flatten() {
                if e["conditions"]["ready"].as_bool() == Some(false) {
                    continue;
                }
                let address = e["addresses"][0].as_str().unwrap_or("");
                out.extend(backend(&e["targetRef"], address, number));
            }
        }
        return Ok(out);
    }
    let endpoints = snapshot
        .get(&ObjectKey::new("endpoints", ns, name))
        .map(|o| o.value());
    for subset in endpoints
        .as_ref()
        .and_then(|e| e["subsets"].as_array())
        .into_iter()
        .flatten()
    {
        let Some(number) = slice_port(&subset["ports"], port_name) else {
            continue;
        };
        for a in subset["addresses"].as_array().into_iter().flatten() {
            out.extend(backend(
                &a["targetRef"],
                a["ip"].as_str().unwrap_or(""),
                number,
            ));
        }
    }
    Ok(out)
}

/// The number of the port named `name` in an EndpointSlice's or subset's ports.
fn slice_port(ports: &Value, name: &str) -> Option<u16> {
    ports
        .as_array()
        .into_iter()
        .flatten()
        .find(|p| p["name"].as_str().unwrap_or("") == name)
        .and_then(|p| p["port"].as_u64())
        .and_then(|p| u16::try_from(p).ok())
}

fn backend(target_ref: &Value, address: &str, port: u16) -> Option<Backend> {
    if target_ref["kind"].as_str() == Some("Pod") {
        let pod = target_ref["name"].as_str()?;
        return Some(Backend::Pod {
            pod: pod.to_string(),
            port,
        });
    }
    let ip: std::net::IpAddr = address.parse().ok()?;
    Some(Backend::Address(SocketAddr::new(ip, port)))
}

/// A stream to port `port` of Service `ns/name`: one of its ready endpoints, picked at
/// random, the others tried in turn when it cannot be reached.
pub async fn dial(
    ctx: &ApiContext,
    ns: &str,
    name: &str,
    port: u16,
) -> Result<Connection, DialError> {
    let backends = backends(ctx, ns, name, port)?;
    if backends.is_empty() {
        return Err(DialError::NoEndpoints {
            namespace: ns.into(),
            name: name.into(),
        });
    }
    let start = rand::random::<usize>() % backends.len();
    let mut last = String::new();
    for i in 0..backends.len() {
        let result = match &backends[(start + i) % backends.len()] {
            Backend::Address(addr) => connect_tcp(*addr).await,
            Backend::Pod { pod, port } => dial_pod(ctx, ns, pod, *port, false).await,
        };
        match result {
            Ok(connection) => return Ok(connection),
            Err(reason) => last = reason,
        }
    }
    Err(DialError::Unreachable {
        namespace: ns.into(),
        name: name.into(),
        reason: last,
    })
}

async fn connect_tcp(addr: SocketAddr) -> Result<Connection, String> {
    let tcp = tokio::time::timeout(CONNECT_TIMEOUT, TcpStream::connect(addr))
        .await
        .map_err(|_| format!("connect {addr}: no answer in {CONNECT_TIMEOUT:?}"))?
        .map_err(|e| format!("connect {addr}: {e}"))?;
    let _ = tcp.set_nodelay(true);
    Ok(Box::new(tcp))
}

/// The message of a refused dial: the `message` of the Status the agent or the other server
/// answered, else `<what> <status code>`.
async fn refusal(answer: http::Response<hyper::body::Incoming>, what: &str) -> String {
    let status = answer.status();
    let body = Limited::new(answer.into_body(), 64 * 1024)
        .collect()
        .await
        .map(|c| c.to_bytes())
        .unwrap_or_default();
    serde_json::from_slice::<Value>(&body)
        .ok()
        .and_then(|v| v["message"].as_str().map(str::to_string))
        .unwrap_or_else(|| format!("{what} {status}"))
}

/// A stream to `port` of pod `ns/pod` through its node's agent, here or relayed (`relayed`:
/// the request came from another server, which must not be asked back).
async fn dial_pod(
    ctx: &ApiContext,
    ns: &str,
    pod: &str,
    port: u16,
    relayed: bool,
) -> Result<Connection, String> {
    let object = super::find_pod(ctx, ns, pod).map_err(|e| e.to_string())?;
    let (uid, node) = super::placement(&object, pod).map_err(|e| e.to_string())?;
    match route::route(ctx, &node, relayed) {
        Route::Local(mut tunnel) => {
            let (tx, rx) = tokio::sync::mpsc::channel::<Bytes>(8);
            let request = Request::builder()
                .method(Method::POST)
                .uri(format!("http://{node}/portforward/{ns}/{pod}?port={port}"))
                .header(POD_UID_HEADER, uid)
                .body(channel_body(rx))
                .map_err(|e| e.to_string())?;
            let answer =
                tokio::time::timeout(CONNECT_TIMEOUT, route::send(&mut tunnel, &node, request))
                    .await
                    .map_err(|_| format!("pod {ns}/{pod}: no answer from node {node:?}"))?
                    .map_err(|e| e.to_string())?;
            if !answer.status().is_success() {
                let message = refusal(answer, &format!("node {node:?} answered")).await;
                return Err(format!("pod {ns}/{pod} port {port}: {message}"));
            }
            Ok(pump(tx, answer.into_body()))
        }
        Route::Relay { server, addr } => {
            let peers = ctx.streams.peers.get().ok_or("no peers")?;
            relay_dial(peers, &server, &addr, ns, pod, port).await
        }
        Route::Unavailable(why) => Err(why),
    }
}

/// A duplex stream whose writes become the tunnel request's body (`to_pod`) and whose reads
/// are the tunnel answer's body (`from_pod`).
fn pump(to_pod: tokio::sync::mpsc::Sender<Bytes>, from_pod: Incoming) -> Connection {
    let (mine, theirs) = tokio::io::duplex(64 * 1024);
    tokio::spawn(async move {
        let (mut rd, mut wr) = tokio::io::split(theirs);
        let up = async move {
            loop {
                let mut buf = BytesMut::with_capacity(16 * 1024);
                match rd.read_buf(&mut buf).await {
                    Ok(0) | Err(_) => return,
                    Ok(_) => {
                        if to_pod.send(buf.freeze()).await.is_err() {
                            return;
                        }
                    }
                }
            }
        };
        let down = async move {
            let mut body = from_pod;
            while let Some(Ok(frame)) = body.frame().await {
                if let Ok(data) = frame.into_data() {
                    if wr.write_all(&data).await.is_err() {
                        return;
                    }
                }
            }
            let _ = wr.shutdown().await;
        };
        tokio::join!(up, down);
    });
    Box::new(mine)
}

/// Asks server `server` (API address `addr`), which holds the tunnel of the pod's node, for
/// the stream: an HTTP/1.1 upgrade on the cluster transport, the bytes after it the pod's.
async fn relay_dial(
    peers: &super::Peers,
    server: &str,
    addr: &str,
    ns: &str,
    pod: &str,
    port: u16,
) -> Result<Connection, String> {
    let fail = |what: String| format!("relaying to server {server:?} ({addr}): {what}");
    let host = addr
        .rsplit_once(':')
        .map(|(h, _)| h.trim_start_matches('[').trim_end_matches(']'))
        .unwrap_or(addr);
    let server_name = rustls::pki_types::ServerName::try_from(host.to_string())
        .map_err(|e| fail(format!("bad address: {e}")))?;
    let tcp = tokio::time::timeout(CONNECT_TIMEOUT, TcpStream::connect(addr))
        .await
        .map_err(|_| fail("connect timed out".into()))?
        .map_err(|e| fail(e.to_string()))?;
    let _ = tcp.set_nodelay(true);
    let tls = tokio::time::timeout(
        CONNECT_TIMEOUT,
        peers.tls.connector().connect(server_name, tcp),
    )
    .await
    .map_err(|_| fail("TLS handshake timed out".into()))?
    .map_err(|e| fail(e.to_string()))?;
    let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(tls))
        .await
        .map_err(|e| fail(e.to_string()))?;
    tokio::spawn(async move {
        let _ = connection.with_upgrades().await;
    });
    let mut request = Request::builder()
        .method(Method::POST)
        .uri(format!(
            "/api/v1/namespaces/{ns}/pods/{pod}/portforward?port={port}"
        ))
        .header(header::HOST, addr)
        .header(header::CONNECTION, "Upgrade")
        .header(header::UPGRADE, RAW_UPGRADE)
        .header(RELAYED, "1")
        .body(http_body_util::Empty::<Bytes>::new())
        .map_err(|e| fail(e.to_string()))?;
    let headers = request.headers_mut();
    if let Ok(v) = HeaderValue::from_str(&format!("Bearer {}", peers.node.secret.as_str())) {
        headers.insert(header::AUTHORIZATION, v);
    }
    if let Some(v) = crate::cluster::forward::user_header(&server_user()) {
        headers.insert(crate::cluster::forward::FORWARDED_USER, v);
    }
    let mut answer = tokio::time::timeout(CONNECT_TIMEOUT, sender.send_request(request))
        .await
        .map_err(|_| fail("no answer".into()))?
        .map_err(|e| fail(e.to_string()))?;
    if answer.status() != StatusCode::SWITCHING_PROTOCOLS {
        return Err(fail(refusal(answer, "answered").await));
    }
    let upgraded = hyper::upgrade::on(&mut answer)
        .await
        .map_err(|e| fail(e.to_string()))?;
    Ok(Box::new(TokioIo::new(upgraded)))
}

/// The identity a server's own calls to pods carry when relayed: the API server itself.
fn server_user() -> UserInfo {
    UserInfo::new(
        "system:apiserver",
        &["system:masters", "system:authenticated"],
    )
}

/// Whether `req` is another server asking for a stream to a pod's port (see [`relay_dial`]).
pub fn is_relayed_dial<B>(req: &Request<B>) -> bool {
    super::relayed(req)
        && req
            .headers()
            .get(header::UPGRADE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.eq_ignore_ascii_case(RAW_UPGRADE))
}

/// Serves another server's request for a stream to port `?port=` of pod `ns/pod`, whose node's
/// tunnel is here: the upgrade is accepted once the pod's port is connected.
pub async fn serve_relayed<B: Send + 'static>(
    ctx: &ApiContext,
    ns: &str,
    pod: &str,
    mut req: Request<B>,
) -> Result<Response<ApiBody>, crate::api::status::ApiError> {
    use crate::api::status::ApiError;
    let port = req
        .uri()
        .query()
        .and_then(|q| {
            q.split('&')
                .find_map(|kv| kv.strip_prefix("port="))
                .and_then(|p| p.parse::<u16>().ok())
        })
        .ok_or_else(|| ApiError::BadRequest("port is required".into()))?;
    let mut pod_side = dial_pod(ctx, ns, pod, port, true)
        .await
        .map_err(ApiError::ServiceUnavailable)?;
    let upgrade = hyper::upgrade::on(&mut req);
    tokio::spawn(async move {
        if let Ok(upgraded) = upgrade.await {
            let _ = tokio::io::copy_bidirectional(&mut TokioIo::new(upgraded), &mut pod_side).await;
        }
    });
    let mut resp = Response::new(http_body_util::Empty::new().map_err(|e| match e {}).boxed());
    *resp.status_mut() = StatusCode::SWITCHING_PROTOCOLS;
    resp.headers_mut()
        .insert(header::CONNECTION, HeaderValue::from_static("Upgrade"));
    resp.headers_mut()
        .insert(header::UPGRADE, HeaderValue::from_static(RAW_UPGRADE));
    Ok(resp)
}

#[cfg(test)]
pub(super) mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::api::ApiSettings;
    use crate::kube::mutation::Mutation;
    use crate::kube::store::{Store, StoreConfig};
    use crate::kube::writer::{WriteError, WriteFuture, Writer};
    use serde_json::json;

    struct NoWriter;

    impl Writer for NoWriter {
        fn write(&self, _mutation: Mutation) -> WriteFuture<'_> {
            Box::pin(async { Err(WriteError::Timeout) })
        }
    }

    /// A context whose store holds `objects` (resource, name, body) in namespace `ns`.
    pub(in crate::streams) fn ctx(objects: &[(&str, &str, Value)]) -> ApiContext {
        let store = Arc::new(Store::new(StoreConfig::default()));
        for (resource, name, body) in objects {
            let mut body = body.clone();
            body["metadata"]["name"] = json!(name);
            body["metadata"]["namespace"] = json!("ns");
            body["metadata"]["uid"] = json!(format!("{resource}/{name}"));
            store
                .apply(Mutation::Create {
                    key: ObjectKey::new(*resource, "ns", *name),
                    object: body,
                    requires_open_namespace: false,
                })
                .unwrap();
        }
        ApiContext::new(
            store,
            Arc::new(NoWriter),
            ApiSettings {
                server_name: "test".into(),
                node_ips: vec!["10.0.0.5".parse().unwrap()],
                api_port: 6443,
                service_cidr: "10.96.0.0/12".into(),
            },
        )
    }

    pub(in crate::streams) fn service(ports: Value) -> Value {
        json!({"spec": {"ports": ports}})
    }

    #[test]
    fn ready_endpoints_of_the_port_are_chosen_from_slices_before_endpoints() {
        let ports = json!([{"name": "https", "port": 443}, {"name": "m", "port": 80}]);
        let slice = json!({
            "metadata": {"labels": {"kubernetes.io/service-name": "web"}},
            "ports": [{"name": "https", "port": 8443}],
            "endpoints": [
                {"addresses": ["10.1.0.1"], "conditions": {"ready": true}, "targetRef": {"kind": "Pod", "name": "p1"}},
                {"addresses": ["10.1.0.2"], "conditions": {"ready": false}, "targetRef": {"kind": "Pod", "name": "p2"}},
                {"addresses": ["127.0.0.1"]},
            ],
        });
        let endpoints = json!({"subsets": [{"addresses": [{"ip": "10.9.9.9"}], "ports": [{"name": "https", "port": 1}]}]});
        let manual = json!({"subsets": [{
            "addresses": [{"ip": "127.0.0.2"}],
            "notReadyAddresses": [{"ip": "127.0.0.3"}],
            "ports": [{"name": "https", "port": 9443}],
        }]});
        let ctx = ctx(&[
            ("services", "web", service(ports.clone())),
            ("discovery.k8s.io/endpointslices", "web-1", slice),
            ("endpoints", "web", endpoints),
            ("services", "manual", service(ports)),
            ("endpoints", "manual", manual),
        ]);
        assert_eq!(
            backends(&ctx, "ns", "web", 443).unwrap(),
            [
                Backend::Pod {
                    pod: "p1".into(),
                    port: 8443
                },
                Backend::Address("127.0.0.1:8443".parse().unwrap()),
            ]
        );
        // The slices carry no port named `m`: nothing behind it.
        assert_eq!(backends(&ctx, "ns", "web", 80).unwrap(), []);
        assert_eq!(
            backends(&ctx, "ns", "manual", 443).unwrap(),
            [Backend::Address("127.0.0.2:9443".parse().unwrap())]
        );
        assert!(matches!(
            backends(&ctx, "ns", "web", 444),
            Err(DialError::NoPort { port: 444, .. })
        ));
        assert!(matches!(
            backends(&ctx, "ns", "gone", 443),
            Err(DialError::NoService { .. })
        ));
    }

    #[tokio::test]
    async fn an_address_endpoint_is_dialled_directly_and_a_dead_one_skipped() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        tokio::spawn(async move {
            let (mut tcp, _) = listener.accept().await.unwrap();
            let mut buf = [0u8; 4];
            tcp.read_exact(&mut buf).await.unwrap();
            tcp.write_all(&buf).await.unwrap();
        });
        // A port nothing listens on: bound, then closed.
        let dead = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let dead_port = dead.local_addr().unwrap().port();
        drop(dead);
        let endpoints = json!({"subsets": [
            {"addresses": [{"ip": "127.0.0.1"}], "ports": [{"port": port}]},
            {"addresses": [{"ip": "127.0.0.1"}], "ports": [{"port": dead_port}]},
        ]});
        let ctx = ctx(&[
            ("services", "echo", service(json!([{"port": 443}]))),
            ("endpoints", "echo", endpoints),
            ("services", "empty", service(json!([{"port": 443}]))),
        ]);
        // Whichever is picked first, the live one answers.
        let mut io = dial(&ctx, "ns", "echo", 443).await.unwrap();
        io.write_all(b"ping").await.unwrap();
        let mut buf = [0u8; 4];
        io.read_exact(&mut buf).await.unwrap();
        assert_eq!(&buf, b"ping");
        let err = dial(&ctx, "ns", "empty", 443).await.err().unwrap();
        assert_eq!(
            err.to_string(),
            "no endpoints available for service \"ns/empty\""
        );
    }

    #[test]
    fn endpoints_are_pods_or_addresses() {
        assert_eq!(
            backend(&json!({"kind": "Pod", "name": "w"}), "10.0.0.1", 8443),
            Some(Backend::Pod {
                pod: "w".into(),
                port: 8443
            })
        );
        assert_eq!(
            backend(&Value::Null, "127.0.0.1", 9443),
            Some(Backend::Address("127.0.0.1:9443".parse().unwrap()))
        );
        assert_eq!(backend(&Value::Null, "not-an-ip", 1), None);
        let ports = json!([{"name": "https", "port": 8443}, {"port": 80}]);
        assert_eq!(slice_port(&ports, "https"), Some(8443));
        assert_eq!(slice_port(&ports, ""), Some(80));
        assert_eq!(slice_port(&ports, "metrics"), None);
    }
}
