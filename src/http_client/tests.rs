//! The client against real servers on 127.0.0.1:0: hyper servers (plain, TLS, HTTP/2) and
//! raw sockets for answers no correct server gives.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::{Request, Response, StatusCode};
use http_body_util::Full;
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo};
use rcgen::{BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, KeyPair};
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

use super::*;

const LIMITS: Limits = Limits::new(Duration::from_secs(5), 64 << 10);

/// A CA and what it signs.
struct Ca {
    cert: rcgen::Certificate,
    key: KeyPair,
}

impl Ca {
    fn new(name: &str) -> Ca {
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.distinguished_name.push(DnType::CommonName, name);
        let key = KeyPair::generate().unwrap();
        let cert = params.self_signed(&key).unwrap();
        Ca { cert, key }
    }

    fn pem(&self) -> String {
        self.cert.pem()
    }

    /// A certificate for `names` with `usage`, and its key, as PEM.
    fn issue(&self, names: &[&str], usage: ExtendedKeyUsagePurpose) -> (String, String) {
        let names: Vec<String> = names.iter().map(|n| n.to_string()).collect();
        let mut params = CertificateParams::new(names).unwrap();
        params.distinguished_name.push(DnType::CommonName, "leaf");
        params.extended_key_usages = vec![usage];
        let key = KeyPair::generate().unwrap();
        let cert = params.signed_by(&key, &self.cert, &self.key).unwrap();
        (cert.pem(), key.serialize_pem())
    }
}

/// A rustls server configuration serving `cert_pem`, requiring a client certificate signed
/// by `client_ca` when given.
fn server_tls(
    cert_pem: &str,
    key_pem: &str,
    client_ca: Option<&Ca>,
    alpn: &[&[u8]],
) -> tokio_rustls::TlsAcceptor {
    let certs: Vec<CertificateDer<'static>> = rustls_pemfile::certs(&mut cert_pem.as_bytes())
        .collect::<Result<_, _>>()
        .unwrap();
    let key: PrivateKeyDer<'static> = rustls_pemfile::private_key(&mut key_pem.as_bytes())
        .unwrap()
        .unwrap();
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = rustls::ServerConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .unwrap();
    let builder = match client_ca {
        None => builder.with_no_client_auth(),
        Some(ca) => {
            let mut roots = rustls::RootCertStore::empty();
            roots.add(ca.cert.der().clone()).unwrap();
            let verifier =
                rustls::server::WebPkiClientVerifier::builder_with_provider(roots.into(), provider)
                    .build()
                    .unwrap();
            builder.with_client_cert_verifier(verifier)
        }
    };
    let mut config = builder.with_single_cert(certs, key).unwrap();
    config.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
    tokio_rustls::TlsAcceptor::from(Arc::new(config))
}

/// What the test server answers: the request's path and `Authorization` header echoed, or a
/// body of `size` bytes for `/big/<size>`.
async fn answer(req: Request<Incoming>) -> Result<Response<Full<Bytes>>, std::convert::Infallible> {
    let path = req.uri().path().to_string();
    if let Some(size) = path.strip_prefix("/big/") {
        let size: usize = size.parse().unwrap_or(0);
        return Ok(Response::new(Full::new(Bytes::from(vec![b'x'; size]))));
    }
    if path == "/slow" {
        tokio::time::sleep(Duration::from_secs(30)).await;
    }
    let auth = req
        .headers()
        .get(http::header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("-")
        .to_string();
    let mut resp = Response::new(Full::new(Bytes::from(format!("{path} {auth}"))));
    if path == "/missing" {
        *resp.status_mut() = StatusCode::NOT_FOUND;
    }
    Ok(resp)
}

/// A hyper server (HTTP/1.1 and HTTP/2), over TLS when `tls` is given; returns its address
/// and the number of connections it accepted.
async fn serve(tls: Option<tokio_rustls::TlsAcceptor>) -> (SocketAddr, Arc<AtomicUsize>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let accepted = Arc::new(AtomicUsize::new(0));
    let count = accepted.clone();
    tokio::spawn(async move {
        while let Ok((tcp, _)) = listener.accept().await {
            count.fetch_add(1, Ordering::SeqCst);
            let tls = tls.clone();
            tokio::spawn(async move {
                let service = hyper::service::service_fn(answer);
                let builder = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new());
                match tls {
                    None => {
                        let _ = builder.serve_connection(TokioIo::new(tcp), service).await;
                    }
                    Some(acceptor) => {
                        if let Ok(stream) = acceptor.accept(tcp).await {
                            let _ = builder
                                .serve_connection(TokioIo::new(stream), service)
                                .await;
                        }
                    }
                }
            });
        }
    });
    (addr, accepted)
}

/// A server that reads the request head, then writes `answer` and closes.
async fn raw(answer: &'static [u8]) -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((mut tcp, _)) = listener.accept().await {
            tokio::spawn(async move {
                let mut head = Vec::new();
                let mut buf = [0u8; 1024];
                while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                    match tcp.read(&mut buf).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => head.extend_from_slice(&buf[..n]),
                    }
                }
                let _ = tcp.write_all(answer).await;
            });
        }
    });
    addr
}

#[tokio::test]
async fn plain_get_answers_status_body_and_the_address_reached() {
    let (addr, _) = serve(None).await;
    let answer = get(&addr.to_string(), "/readyz", &Transport::Plain, LIMITS)
        .await
        .unwrap();
    assert_eq!(answer.status, StatusCode::OK);
    assert_eq!(answer.body, "/readyz -");
    assert_eq!(answer.reached, addr);
    // A name is resolved, and the address it reached reported.
    let by_name = format!("localhost:{}", addr.port());
    let answer = get(&by_name, "/missing", &Transport::Plain, LIMITS)
        .await
        .unwrap();
    assert_eq!(answer.status, StatusCode::NOT_FOUND, "a status is no error");
    assert_eq!(answer.reached.port(), addr.port());
}

#[tokio::test]
async fn tls_pinned_to_the_ca_reaches_a_server_it_signed() {
    let ca = Ca::new("cluster");
    let (cert, key) = ca.issue(
        &["localhost", "127.0.0.1"],
        ExtendedKeyUsagePurpose::ServerAuth,
    );
    let (addr, _) = serve(Some(server_tls(&cert, &key, None, &[]))).await;
    let pinned = Transport::Tls(TlsConfig::pinned(&ca.pem(), None).unwrap());
    for target in [addr.to_string(), format!("localhost:{}", addr.port())] {
        let answer = get(&target, "/x", &pinned, LIMITS).await.unwrap();
        assert_eq!(
            (answer.status, answer.body),
            (StatusCode::OK, "/x -".into())
        );
    }
}

#[tokio::test]
async fn tls_refuses_another_ca_and_a_name_the_certificate_lacks() {
    let ca = Ca::new("cluster");
    let (cert, key) = ca.issue(&["127.0.0.1"], ExtendedKeyUsagePurpose::ServerAuth);
    let (addr, accepted) = serve(Some(server_tls(&cert, &key, None, &[]))).await;

    let other = Ca::new("another cluster");
    let wrong_ca = Transport::Tls(TlsConfig::pinned(&other.pem(), None).unwrap());
    let e = get(&addr.to_string(), "/x", &wrong_ca, LIMITS)
        .await
        .unwrap_err();
    assert!(matches!(e, ClientError::Tls(_)), "{e}");
    assert!(e.to_string().contains("UnknownIssuer"), "{e}");
    assert!(e.is_unsent());

    let right_ca = Transport::Tls(TlsConfig::pinned(&ca.pem(), None).unwrap());
    let e = get(
        &format!("localhost:{}", addr.port()),
        "/x",
        &right_ca,
        LIMITS,
    )
    .await
    .unwrap_err();
    assert!(matches!(e, ClientError::Tls(_)), "{e}");
    assert!(e.to_string().contains("not valid for name"), "{e}");
    assert_eq!(accepted.load(Ordering::SeqCst), 2);

    // The balancer's --https-check accepts either.
    let any = Transport::Tls(TlsConfig::unverified().unwrap());
    let answer = get(&format!("localhost:{}", addr.port()), "/x", &any, LIMITS)
        .await
        .unwrap();
    assert_eq!(answer.status, StatusCode::OK);
}

#[tokio::test]
async fn a_client_certificate_is_presented_when_given() {
    let ca = Ca::new("cluster");
    let clients = Ca::new("clients");
    let (cert, key) = ca.issue(&["127.0.0.1"], ExtendedKeyUsagePurpose::ServerAuth);
    let acceptor = server_tls(&cert, &key, Some(&clients), &[]);
    let (addr, _) = serve(Some(acceptor)).await;
    let (node_cert, node_key) = clients.issue(&[], ExtendedKeyUsagePurpose::ClientAuth);
    let identity = ClientIdentity::from_pem(&node_cert, &node_key).unwrap();
    let with_cert = Transport::Tls(TlsConfig::pinned(&ca.pem(), Some(identity)).unwrap());
    let answer = get(&addr.to_string(), "/x", &with_cert, LIMITS)
        .await
        .unwrap();
    assert_eq!(answer.status, StatusCode::OK);

    let without = Transport::Tls(TlsConfig::pinned(&ca.pem(), None).unwrap());
    assert!(get(&addr.to_string(), "/x", &without, LIMITS)
        .await
        .is_err());
}

#[tokio::test]
async fn pem_text_without_certificates_or_keys_is_refused() {
    assert!(matches!(
        TlsConfig::pinned("not pem", None),
        Err(TlsError::Missing { .. })
    ));
    let ca = Ca::new("c");
    assert!(matches!(
        ClientIdentity::from_pem(&ca.pem(), "no key here"),
        Err(TlsError::Missing { what: "client key" })
    ));
}

#[tokio::test]
async fn a_server_that_never_answers_times_out_within_the_limit() {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let _held = tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((tcp, _)) = listener.accept().await {
            held.push(tcp);
        }
    });
    let limits = Limits::new(Duration::from_millis(300), 1024);
    let started = Instant::now();
    let e = get(&addr.to_string(), "/readyz", &Transport::Plain, limits)
        .await
        .unwrap_err();
    assert_eq!(e, ClientError::Timeout(Duration::from_millis(300)));
    assert_eq!(e.to_string(), "no answer in 300ms");
    assert!(!e.is_unsent(), "the request may have been read");
    assert!(started.elapsed() < Duration::from_secs(2));
}

#[tokio::test]
async fn a_body_over_the_limit_is_refused() {
    let (addr, _) = serve(None).await;
    let limits = Limits::new(Duration::from_secs(5), 1000);
    let fits = get(&addr.to_string(), "/big/1000", &Transport::Plain, limits)
        .await
        .unwrap();
    assert_eq!(fits.body.len(), 1000);
    let e = get(&addr.to_string(), "/big/1001", &Transport::Plain, limits)
        .await
        .unwrap_err();
    assert_eq!(e, ClientError::TooLarge { limit: 1000 });
    // Chunked, without a length announced: refused as it arrives.
    let chunked = raw(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n400\r\n").await;
    let limits = Limits::new(Duration::from_secs(5), 16);
    let e = get(&chunked.to_string(), "/", &Transport::Plain, limits)
        .await
        .unwrap_err();
    assert!(
        matches!(e, ClientError::TooLarge { .. } | ClientError::Lost(_)),
        "{e}"
    );
}

#[tokio::test]
async fn a_chunked_body_is_joined() {
    let addr = raw(
        b"HTTP/1.1 503 Service Unavailable\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n1;ext=1\r\nd\r\n0\r\n\r\n",
    )
    .await;
    let answer = get(&addr.to_string(), "/readyz", &Transport::Plain, LIMITS)
        .await
        .unwrap();
    assert_eq!(answer.status, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(answer.body, "abcd");
    // A server that keeps the connection open after a whole answer has still answered.
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let open = listener.local_addr().unwrap();
    tokio::spawn(async move {
        let (mut tcp, _) = listener.accept().await.unwrap();
        let mut buf = [0u8; 1024];
        let _ = tcp.read(&mut buf).await;
        let _ = tcp
            .write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
            .await;
        tokio::time::sleep(Duration::from_secs(30)).await;
    });
    let answer = get(&open.to_string(), "/", &Transport::Plain, LIMITS)
        .await
        .unwrap();
    assert_eq!(answer.body, "ok");
}

#[tokio::test]
async fn answers_that_are_not_http_are_named_with_their_first_bytes() {
    for (sent, want) in [
        (
            &b"SSH-2.0-OpenSSH_9.2p1\r\n"[..],
            "SSH-2.0-OpenSSH_9.2p1\r\n",
        ),
        (b"hello\r\n\r\n", "hello\r\n\r\n"),
        (b"HTTP/1.1 abc\r\n\r\n", "HTTP/1.1 abc\r\n\r\n"),
        (b"HTTP/1.1 99 no\r\n\r\n", "HTTP/1.1 99 no\r\n\r\n"),
    ] {
        let sent: &'static [u8] = Box::leak(sent.to_vec().into_boxed_slice());
        let addr = raw(sent).await;
        let e = get(&addr.to_string(), "/readyz", &Transport::Plain, LIMITS)
            .await
            .unwrap_err();
        assert_eq!(
            e,
            ClientError::NotHttp {
                preview: want.to_string()
            }
        );
    }
    let addr = raw(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n").await;
    assert!(get(&addr.to_string(), "/", &Transport::Plain, LIMITS)
        .await
        .is_err());
}

#[tokio::test]
async fn refused_and_silent_closes_are_told_apart() {
    let free = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let nobody = free.local_addr().unwrap();
    drop(free);
    let e = get(&nobody.to_string(), "/", &Transport::Plain, LIMITS)
        .await
        .unwrap_err();
    assert!(matches!(e, ClientError::Refused(_)), "{e}");
    assert!(e.to_string().starts_with("connect: "), "{e}");
    assert!(e.is_unsent());

    let closes = raw(b"").await;
    let e = get(&closes.to_string(), "/", &Transport::Plain, LIMITS)
        .await
        .unwrap_err();
    assert_eq!(e, ClientError::Closed);

    let e = connect(nobody, Duration::from_secs(1)).await.unwrap_err();
    assert!(matches!(e, ClientError::Refused(_)), "{e}");
}

#[tokio::test]
async fn a_pool_reuses_one_http2_connection_and_sends_the_bearer_token() {
    let ca = Ca::new("cluster");
    let (cert, key) = ca.issue(&["127.0.0.1"], ExtendedKeyUsagePurpose::ServerAuth);
    let (addr, accepted) = serve(Some(server_tls(&cert, &key, None, &[b"h2"]))).await;
    let tls = TlsConfig::pinned(&ca.pem(), None).unwrap();
    let pool = Pool::http2(&tls, Some("s3cret")).unwrap();
    let request = |path: &str| {
        Request::post(format!("https://{addr}{path}"))
            .body(Full::new(Bytes::new()))
            .unwrap()
    };
    let (a, b) = tokio::join!(
        pool.send(request("/a"), LIMITS),
        pool.send(request("/b"), LIMITS)
    );
    assert_eq!(a.unwrap().into_body(), "/a Bearer s3cret");
    assert_eq!(b.unwrap().into_body(), "/b Bearer s3cret");
    let c = pool.send(request("/c"), LIMITS).await.unwrap();
    assert_eq!(c.version(), http::Version::HTTP_2);
    assert_eq!(accepted.load(Ordering::SeqCst), 1, "one connection for all");

    // A stream given up on leaves the connection to the others.
    let limits = Limits::new(Duration::from_millis(200), 1024);
    let e = pool.send(request("/slow"), limits).await.unwrap_err();
    assert_eq!(e, ClientError::Timeout(Duration::from_millis(200)));
    let e = pool
        .send(
            request("/big/2000"),
            Limits::new(Duration::from_secs(5), 1999),
        )
        .await
        .unwrap_err();
    assert_eq!(e, ClientError::TooLarge { limit: 1999 });
    pool.send(request("/d"), LIMITS).await.unwrap();
    assert_eq!(accepted.load(Ordering::SeqCst), 1);

    let other = Ca::new("another cluster");
    let stranger = Pool::http2(&TlsConfig::pinned(&other.pem(), None).unwrap(), None).unwrap();
    let e = stranger.send(request("/a"), LIMITS).await.unwrap_err();
    assert!(matches!(e, ClientError::Tls(_)), "{e}");
    assert!(e.is_unsent());

    let free = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let nobody = free.local_addr().unwrap();
    drop(free);
    let e = pool
        .send(
            Request::post(format!("https://{nobody}/"))
                .body(Full::new(Bytes::new()))
                .unwrap(),
            LIMITS,
        )
        .await
        .unwrap_err();
    assert!(matches!(e, ClientError::Refused(_)), "{e}");

    assert!(Pool::http2(&tls, Some("line\nbreak")).is_err());
}

#[tokio::test]
async fn a_pool_streams_an_answer_on_the_shared_connection() {
    use http_body_util::BodyExt;
    let ca = Ca::new("cluster");
    let (cert, key) = ca.issue(&["127.0.0.1"], ExtendedKeyUsagePurpose::ServerAuth);
    let (addr, accepted) = serve(Some(server_tls(&cert, &key, None, &[b"h2"]))).await;
    let pool = Pool::http2(&TlsConfig::pinned(&ca.pem(), None).unwrap(), None).unwrap();
    let request = |path: &str| {
        Request::get(format!("https://{addr}{path}"))
            .body(Full::new(Bytes::new()))
            .unwrap()
    };
    let head = pool
        .stream(request("/big/100000"), Duration::from_secs(5))
        .await
        .unwrap();
    assert_eq!(head.status(), StatusCode::OK);
    let mut body = head.into_body();
    let mut read = 0;
    while let Some(frame) = body.frame().await {
        if let Ok(data) = frame.unwrap().into_data() {
            read += data.len();
        }
    }
    assert_eq!(read, 100_000);
    // The head is bounded; the connection stays shared.
    let e = pool
        .stream(request("/slow"), Duration::from_millis(200))
        .await
        .unwrap_err();
    assert_eq!(e, ClientError::Timeout(Duration::from_millis(200)));
    pool.send(request("/a"), LIMITS).await.unwrap();
    assert_eq!(accepted.load(Ordering::SeqCst), 1);
}

const STREAM: StreamLimits = StreamLimits {
    head: Duration::from_secs(5),
    idle: Duration::from_millis(300),
};

fn stream_get(path: &str) -> Request<Full<Bytes>> {
    Request::get(path).body(Full::new(Bytes::new())).unwrap()
}

#[tokio::test]
async fn a_streamed_body_arrives_in_pieces_of_any_total_size() {
    let (addr, _) = serve(None).await;
    let size = 5 << 20;
    let mut answer = open(
        &addr.to_string(),
        &Transport::Plain,
        stream_get(&format!("/big/{size}")),
        STREAM,
    )
    .await
    .unwrap();
    assert_eq!((answer.status, answer.reached), (StatusCode::OK, addr));
    let (mut total, mut pieces) = (0, 0);
    while let Some(piece) = answer.chunk().await.unwrap() {
        assert!(piece.iter().all(|b| *b == b'x'));
        total += piece.len();
        pieces += 1;
    }
    assert_eq!(total, size);
    assert!(pieces > 1, "read piece by piece, not whole");
    // A small body read whole, within a limit.
    let small = open(
        &addr.to_string(),
        &Transport::Plain,
        stream_get("/missing"),
        STREAM,
    )
    .await
    .unwrap();
    assert_eq!(small.status, StatusCode::NOT_FOUND);
    assert_eq!(small.collect(100).await.unwrap(), "/missing -");
    let big = open(
        &addr.to_string(),
        &Transport::Plain,
        stream_get("/big/1000"),
        STREAM,
    )
    .await
    .unwrap();
    assert_eq!(
        big.collect(999).await.unwrap_err(),
        ClientError::TooLarge { limit: 999 }
    );
}

#[tokio::test]
async fn a_streamed_body_that_stops_coming_is_stalled_and_a_silent_head_times_out() {
    // Announces 1000 bytes, sends 5, then holds the connection open.
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let _server = tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((mut tcp, _)) = listener.accept().await {
            let mut buf = [0u8; 1024];
            let _ = tcp.read(&mut buf).await;
            let _ = tcp
                .write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 1000\r\n\r\nhello")
                .await;
            held.push(tcp);
        }
    });
    let started = Instant::now();
    let mut answer = open(
        &addr.to_string(),
        &Transport::Plain,
        stream_get("/"),
        STREAM,
    )
    .await
    .unwrap();
    assert_eq!(answer.chunk().await.unwrap().unwrap(), "hello");
    let e = answer.chunk().await.unwrap_err();
    assert_eq!(e, ClientError::Stalled(Duration::from_millis(300)));
    assert_eq!(e.to_string(), "answer stalled: nothing received in 300ms");
    assert!(started.elapsed() < Duration::from_secs(2));

    // A server that accepts and never answers: the head's limit.
    let silent = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let silent_addr = silent.local_addr().unwrap();
    let _silent = tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((tcp, _)) = silent.accept().await {
            held.push(tcp);
        }
    });
    let limits = StreamLimits {
        head: Duration::from_millis(200),
        idle: Duration::from_secs(5),
    };
    let e = open(
        &silent_addr.to_string(),
        &Transport::Plain,
        stream_get("/"),
        limits,
    )
    .await
    .unwrap_err();
    assert_eq!(e, ClientError::Timeout(Duration::from_millis(200)));
}

#[tokio::test]
async fn a_streamed_request_to_a_closed_port_is_refused_unsent() {
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let addr: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
    let e = open(
        &addr.to_string(),
        &Transport::Plain,
        stream_get("/"),
        STREAM,
    )
    .await
    .unwrap_err();
    assert!(matches!(e, ClientError::Refused(_)), "{e}");
    assert!(e.is_unsent());
}

#[tokio::test]
async fn public_roots_add_an_extra_ca_to_the_system_bundle() {
    let ca = Ca::new("registry-ca");
    let (cert, key) = ca.issue(&["127.0.0.1"], ExtendedKeyUsagePurpose::ServerAuth);
    let (addr, _) = serve(Some(server_tls(&cert, &key, None, &[]))).await;
    let with_ca = Transport::Tls(TlsConfig::public_roots(Some(&ca.pem())).unwrap());
    let answer = get(&addr.to_string(), "/v2/", &with_ca, LIMITS)
        .await
        .unwrap();
    assert_eq!(answer.status, StatusCode::OK);
    // The system's bundle alone does not know the test CA.
    let system = Transport::Tls(TlsConfig::public_roots(None).unwrap());
    let e = get(&addr.to_string(), "/v2/", &system, LIMITS)
        .await
        .unwrap_err();
    assert!(matches!(e, ClientError::Tls(_)), "{e}");
}
