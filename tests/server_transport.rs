//! The API port of `litek8s apiserver`: TLS verified against the cluster CA, plain HTTP for
//! health endpoints only, bearer-token authentication with Kubernetes Status errors,
//! kubectl with the generated kubeconfig, and graceful exit on SIGTERM.

mod support;

use std::io::Write;

use support::Server;

const UNAUTHORIZED: &str = r#"{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"Unauthorized","reason":"Unauthorized","code":401}"#;
const FORBIDDEN_API: &str = r#"{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"forbidden: User \"system:anonymous\" cannot get path \"/api\"","reason":"Forbidden","details":{},"code":403}"#;

#[test]
fn tls_verifies_against_ca_for_local_names() {
    let server = Server::start(&[]);
    for name in [
        "localhost",
        "127.0.0.1",
        "::1",
        "kubernetes.default.svc",
        "10.43.0.1",
    ] {
        if let Err(e) = server.tls_connect(name, &[b"http/1.1"]) {
            panic!("{name}: {e}");
        }
    }
    let Err(err) = server.tls_connect("example.com", &[b"http/1.1"]) else {
        panic!("a name outside the certificate must fail");
    };
    assert!(err.contains("not valid for name"), "{err}");
}

#[test]
fn tls_negotiates_h2_and_http11() {
    let server = Server::start(&[]);
    let tls = server
        .tls_connect("localhost", &[b"h2", b"http/1.1"])
        .unwrap();
    assert_eq!(tls.conn.alpn_protocol(), Some(&b"h2"[..]));
    let tls = server.tls_connect("localhost", &[b"http/1.1"]).unwrap();
    assert_eq!(tls.conn.alpn_protocol(), Some(&b"http/1.1"[..]));
}

#[test]
fn plain_http_serves_only_health() {
    let server = Server::start(&[]);
    let ready = server.plain_get("/readyz");
    assert_eq!((ready.status, ready.body.as_str()), (200, "ok"));
    for path in ["/livez", "/healthz"] {
        assert_eq!(server.plain_get(path).status, 200, "{path}");
    }
    for path in ["/api", "/api/v1/namespaces", "/"] {
        let resp = server.plain_get(path);
        assert!(resp.status == 404 || resp.status == 400, "{path}: {resp:?}");
        assert_eq!(resp.json()["kind"], "Status", "{path}");
    }
}

#[test]
fn plain_http_ignores_bearer_tokens() {
    let server = Server::start(&[]);
    let mut sock = std::net::TcpStream::connect(server.addr).unwrap();
    let req = format!(
        "GET /api HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {}\r\nConnection: close\r\n\r\n",
        server.token()
    );
    sock.write_all(req.as_bytes()).unwrap();
    let mut out = String::new();
    std::io::Read::read_to_string(&mut sock, &mut out).unwrap();
    assert!(out.starts_with("HTTP/1.1 404"), "{out}");
}

#[test]
fn https_refuses_bad_tokens_and_authorizes_anonymous_requests() {
    let server = Server::start(&[]);
    // No credential: `system:anonymous`, allowed only what RBAC allows it.
    let anonymous = server.https_get("/api", None);
    assert_eq!(anonymous.status, 403);
    assert_eq!(anonymous.body, FORBIDDEN_API);
    assert!(anonymous
        .headers
        .to_ascii_lowercase()
        .contains("content-type: application/json"));
    let version = server.https_get("/version", None);
    assert_eq!(version.status, 200, "{version:?}");

    let wrong = server.https_get(
        "/api/v1/namespaces",
        Some("0123456789abcdef0123456789abcdef"),
    );
    assert_eq!(wrong.status, 401);
    assert_eq!(wrong.body, UNAUTHORIZED);

    // Anonymous health checks over HTTPS are served.
    let ready = server.https_get("/readyz", None);
    assert_eq!((ready.status, ready.body.as_str()), (200, "ok"));

    // The admin token gets past authentication (what the router answers is not ours).
    let admin = server.https_get("/api", Some(&server.token()));
    assert_ne!(admin.status, 401, "{admin:?}");
}

#[test]
fn kubectl_works_with_generated_kubeconfig() {
    let server = Server::start(&[]);
    let out = server.kubectl(&["get", "--raw", "/readyz"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "ok");
}

#[test]
fn garbage_and_idle_connections_do_not_stop_the_listener() {
    let server = Server::start(&[]);
    // A TLS-looking first byte followed by garbage, a half-sent request left open, and a
    // connection closed before its first byte.
    let mut bad_tls = std::net::TcpStream::connect(server.addr).unwrap();
    bad_tls.write_all(&[0x16, 0xff, 0xff, 0, 0, 0]).unwrap();
    let mut idle = std::net::TcpStream::connect(server.addr).unwrap();
    idle.write_all(b"GET /readyz HTTP/1.1\r\n").unwrap();
    drop(std::net::TcpStream::connect(server.addr).unwrap());
    let ready = server.plain_get("/readyz");
    assert_eq!(ready.status, 200);
    assert!(server.tls_connect("localhost", &[b"http/1.1"]).is_ok());
}

#[test]
fn sigterm_exits_zero() {
    let mut server = Server::start(&[]);
    // An open keep-alive connection must not hold the process past the drain.
    let _open = server.tls_connect("localhost", &[b"h2"]).unwrap();
    let status = server.terminate();
    assert!(
        status.is_some_and(|s| s.success()),
        "{status:?}\n{}",
        server.logs()
    );
}
