//! What the servers offer node agents (docs/agent.md, Joining): on a single server too,
//! `/cacerts`, `/litek8s/v1/apiservers` and `POST /litek8s/v1/node-credential` (the join
//! secret in, a client certificate out, bad requests refused); client certificates signed by
//! the cluster CA authenticate kubectl, while one from another CA or an expired one is 401;
//! RBAC gives a node credential the default `system:node` role; a single server that becomes
//! `--cluster-init` keeps its join token and its agents.

mod agent_support;
mod support;

use std::path::Path;
use std::time::Duration;

use agent_support::{kubectl, write_kubeconfig, Agent, KUBECTLS};
use support::{runtime, Server};

fn secret_of(token: &str) -> String {
    token.rsplit_once(':').expect("K10 token").1.to_string()
}

fn join_token(server: &Server) -> String {
    std::fs::read_to_string(server.data_dir.join("join-token"))
        .expect("join-token")
        .trim()
        .to_string()
}

/// A key and a certificate request for `cn`.
fn csr(cn: &str) -> (rcgen::KeyPair, String) {
    let key = rcgen::KeyPair::generate().unwrap();
    let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
    params
        .distinguished_name
        .push(rcgen::DnType::CommonName, cn);
    let pem = params.serialize_request(&key).unwrap().pem().unwrap();
    (key, pem)
}

/// Plain-HTTP GET on the API port: (status, body).
fn plain_get(server: &Server, path: &str) -> (u16, String) {
    use std::io::{Read, Write};
    let mut tcp = std::net::TcpStream::connect(server.addr).unwrap();
    tcp.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    write!(
        tcp,
        "GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut text = String::new();
    let _ = tcp.read_to_string(&mut text);
    let status = text
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    let body = text.split_once("\r\n\r\n").map(|(_, b)| b).unwrap_or("");
    (status, body.to_string())
}

/// Writes a certificate (PEM) and key into `dir` and a kubeconfig using them.
fn kubeconfig_for(dir: &Path, server: &Server, cert: &str, key: &str) -> std::path::PathBuf {
    std::fs::write(dir.join("c.crt"), cert).unwrap();
    std::fs::write(dir.join("c.key"), key).unwrap();
    let path = dir.join("kubeconfig");
    write_kubeconfig(
        &path,
        &format!("https://{}", server.addr),
        &server.data_dir.join("ca.crt"),
        &dir.join("c.crt"),
        &dir.join("c.key"),
    );
    path
}

#[test]
fn a_single_server_serves_the_join_endpoints() {
    let server = Server::start(&[]);
    let token = join_token(&server);
    let secret = secret_of(&token);
    let (status, ca) = plain_get(&server, "/cacerts");
    assert_eq!(status, 200);
    assert_eq!(
        ca,
        std::fs::read_to_string(server.data_dir.join("ca.crt")).unwrap()
    );
    let (status, listing) = plain_get(&server, "/litek8s/v1/apiservers");
    assert_eq!(status, 200);
    let listing: serde_json::Value = serde_json::from_str(&listing).unwrap();
    assert_eq!(
        listing["servers"],
        serde_json::json!([server.addr.to_string()])
    );
    let (status, _) = plain_get(&server, "/litek8s/v1/node-credential");
    assert_eq!(status, 404, "never over plain HTTP");

    let rt = runtime();
    let api = server.api();
    let (_, good_csr) = csr("anything");
    rt.block_on(async {
        let request = serde_json::json!({"nodeName": "n1", "csr": good_csr});
        for (token, body, want) in [
            (None, &request, 401),
            (Some("wrong-secret-0123456789"), &request, 401),
            // The admin token is not the join secret.
            (Some(server.token().as_str()), &request, 401),
            (
                Some(secret.as_str()),
                &serde_json::json!({"nodeName": "N_1", "csr": good_csr}),
                400,
            ),
            (
                Some(secret.as_str()),
                &serde_json::json!({"nodeName": "n1", "csr": "junk"}),
                400,
            ),
            (
                Some(secret.as_str()),
                &serde_json::json!({"node": "n1"}),
                400,
            ),
        ] {
            let resp = api
                .with_token(token)
                .post_json("/litek8s/v1/node-credential", body)
                .await
                .unwrap();
            assert_eq!(resp.status, want, "{token:?} {body}: {}", resp.text());
        }
        let resp = api
            .with_token(Some(&secret))
            .post_json("/litek8s/v1/node-credential", &request)
            .await
            .unwrap();
        assert_eq!(resp.status, 200, "{}", resp.text());
        let answer = resp.json();
        assert_eq!(answer["ca"], serde_json::json!(ca));
        assert_eq!(answer["servers"], listing["servers"]);
        let pem = answer["certificate"].as_str().unwrap();
        let der = rustls_pemfile::certs(&mut pem.as_bytes())
            .next()
            .unwrap()
            .unwrap();
        let (_, cert) = x509_parser::parse_x509_certificate(&der).unwrap();
        assert_eq!(
            cert.subject().to_string(),
            "CN=system:node:n1, O=system:nodes"
        );
        let days =
            (cert.validity().not_after.timestamp() - chrono::Utc::now().timestamp()) / 86_400;
        assert!((364..=365).contains(&days), "valid a year: {days} days");
        // Membership endpoints exist on cluster members only.
        let resp = api
            .with_token(Some(&secret))
            .post_json("/litek8s/v1/members", &serde_json::json!(null))
            .await
            .unwrap();
        assert_eq!(resp.status, 404);
        assert!(resp.text().contains("single server"), "{}", resp.text());
    });
}

#[test]
fn client_certificates_authenticate_and_bad_ones_are_401() {
    let server = Server::start(&[]);
    let secret = secret_of(&join_token(&server));
    let rt = runtime();
    let (key, request) = csr("n1");
    let cert = rt.block_on(async {
        let resp = server
            .api()
            .with_token(Some(&secret))
            .post_json(
                "/litek8s/v1/node-credential",
                &serde_json::json!({"nodeName": "n1", "csr": request}),
            )
            .await
            .unwrap();
        assert_eq!(resp.status, 200, "{}", resp.text());
        resp.json()["certificate"].as_str().unwrap().to_string()
    });
    let tmp = tempfile::tempdir().unwrap();
    let good = tmp.path().join("good");
    std::fs::create_dir(&good).unwrap();
    let good = kubeconfig_for(&good, &server, &cert, &key.serialize_pem());
    for bin in KUBECTLS {
        // The node role lets it read nodes and services, not RBAC's objects. (Namespaces it
        // reads: NetworkPolicy's namespaceSelector needs their labels.)
        let out = kubectl(bin, &good, &["get", "services", "-A", "-o", "name"]);
        assert!(
            out.status.success(),
            "{bin}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(String::from_utf8_lossy(&out.stdout).contains("service/kubernetes"));
        let out = kubectl(bin, &good, &["get", "clusterroles", "-o", "name"]);
        assert!(
            !out.status.success(),
            "{bin}: a node may not list clusterroles"
        );
        assert!(
            String::from_utf8_lossy(&out.stderr).contains(
                r#"clusterroles.rbac.authorization.k8s.io is forbidden: User "system:node:n1" cannot list resource "clusterroles" in API group "rbac.authorization.k8s.io" at the cluster scope"#
            ),
            "{bin}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    // Signed by another CA.
    let other_key = rcgen::KeyPair::generate().unwrap();
    let mut other_ca = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
    other_ca.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    other_ca
        .distinguished_name
        .push(rcgen::DnType::CommonName, "litek8s-ca");
    let other_ca = other_ca.self_signed(&other_key).unwrap();
    // Signed by the cluster's CA, but expired.
    let ca_key =
        rcgen::KeyPair::from_pem(&std::fs::read_to_string(server.data_dir.join("ca.key")).unwrap())
            .unwrap();
    let ca = rcgen::CertificateParams::from_ca_cert_pem(
        &std::fs::read_to_string(server.data_dir.join("ca.crt")).unwrap(),
    )
    .unwrap()
    .self_signed(&ca_key)
    .unwrap();
    let issue = |issuer: &rcgen::Certificate, issuer_key: &rcgen::KeyPair, years: (i32, i32)| {
        let key = rcgen::KeyPair::generate().unwrap();
        let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, "system:node:n1");
        params
            .distinguished_name
            .push(rcgen::DnType::OrganizationName, "system:nodes");
        params.extended_key_usages = vec![rcgen::ExtendedKeyUsagePurpose::ClientAuth];
        params.not_before = rcgen::date_time_ymd(years.0, 1, 1);
        params.not_after = rcgen::date_time_ymd(years.1, 1, 1);
        let cert = params.signed_by(&key, issuer, issuer_key).unwrap();
        (cert.pem(), key.serialize_pem())
    };
    use chrono::Datelike;
    let year = chrono::Utc::now().year();
    for (name, (cert, key)) in [
        (
            "another CA",
            issue(&other_ca, &other_key, (year - 1, year + 1)),
        ),
        ("expired", issue(&ca, &ca_key, (year - 3, year - 1))),
    ] {
        let dir = tmp.path().join(name.replace(' ', "-"));
        std::fs::create_dir(&dir).unwrap();
        let kubeconfig = kubeconfig_for(&dir, &server, &cert, &key);
        for bin in KUBECTLS {
            let out = kubectl(bin, &kubeconfig, &["get", "namespaces"]);
            let stderr = String::from_utf8_lossy(&out.stderr);
            assert!(!out.status.success(), "{name} ({bin}) must be refused");
            assert!(
                stderr.contains("Unauthorized"),
                "{name} ({bin}): a 401, not a TLS error: {stderr}"
            );
        }
    }
}

#[test]
fn a_single_server_keeps_its_token_and_agents_when_it_forms_a_cluster() {
    let mut server = Server::start(&[]);
    let token = join_token(&server);
    let url = format!("https://{}", server.addr);
    let mut agent = Agent::new("n1", &url, Some(&token), &[]);
    agent.start();
    agent.terminate();
    server.terminate();
    server.extra_args = vec!["--cluster-init".into()];
    server.spawn_and_wait();
    assert_eq!(
        join_token(&server),
        token,
        "the same token after --cluster-init"
    );
    assert!(
        server.data_dir.join("raft/member.json").exists(),
        "now a member"
    );
    // The agent comes back with its stored credential and no token.
    agent.token = None;
    agent.start();
    let out = kubectl(KUBECTLS[1], &agent.kubeconfig(&url), &["get", "node", "n1"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}
