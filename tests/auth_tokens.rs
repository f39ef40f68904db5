//! Service-account tokens against the real server (docs/guarantees.md, Authentication and
//! authorization), with kubectl 1.27 and 1.33:
//!
//! - a ServiceAccount bound to a Role that allows only `get,list pods` in one namespace: with
//!   its token from `kubectl create token`, listing pods works, secrets and another namespace
//!   are 403 with kube-apiserver's exact text, `kubectl auth whoami` names the account;
//! - a token dies with its service account and with the pod it is bound to; an expired token,
//!   one signed with another key, `alg: none`, a 1 MiB token and garbage are 401, and the
//!   server keeps serving;
//! - the TokenRequest's bounds and errors, TokenReview, the OIDC discovery documents;
//! - on a 3-server cluster, a token issued through one server is accepted by every other.

mod cluster_support;
mod support;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::time::Duration;

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use rustls::pki_types::ServerName;
use serde_json::{json, Value};
use support::kubectl::{ok, run as kubectl, stderr};
use support::Server;

const KUBECTLS: [&str; 2] = [
    "/usr/lib/google-cloud-sdk/bin/kubectl.1.27",
    "/usr/lib/google-cloud-sdk/bin/kubectl.1.33",
];
const KUBECTL_1_33: &str = "/usr/lib/google-cloud-sdk/bin/kubectl.1.33";
const ISSUER: &str = "https://kubernetes.default.svc.cluster.local";

/// Namespaces `team` and `other`, the ServiceAccount `bot` in `team`, and a Role allowing
/// only `get,list pods` in `team` bound to it.
const SETUP: &str = r#"
apiVersion: v1
kind: Namespace
metadata: {name: team}
---
apiVersion: v1
kind: Namespace
metadata: {name: other}
---
apiVersion: v1
kind: ServiceAccount
metadata: {name: bot, namespace: team}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata: {name: pod-reader, namespace: team}
rules:
- apiGroups: [""]
  resources: [pods]
  verbs: [get, list]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: bot-reads-pods, namespace: team}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: Role, name: pod-reader}
subjects:
- {kind: ServiceAccount, name: bot, namespace: team}
"#;

fn apply(binary: &str, kubeconfig: &Path, manifest: &str) {
    let out = support::kubectl::apply(binary, kubeconfig, manifest);
    assert!(out.status.success(), "apply: {}", stderr(&out));
}

/// A kubeconfig in `dir` for `server_url` with the bearer `token`.
fn token_kubeconfig(dir: &Path, server_url: &str, ca: &Path, token: &str) -> PathBuf {
    std::fs::create_dir_all(dir).unwrap();
    let text = format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n    server: {server_url}\n    certificate-authority: {}\nusers:\n- name: u\n  user:\n    token: {token}\ncontexts:\n- name: c\n  context:\n    cluster: c\n    user: u\ncurrent-context: c\n",
        ca.display(),
    );
    let path = dir.join("kubeconfig");
    std::fs::write(&path, text).unwrap();
    path
}

/// One HTTPS/1.1 request with a bearer token: (status, body), or `None` when the server
/// closed the connection without an answer.
fn request(
    addr: SocketAddr,
    ca: &Path,
    method: &str,
    path: &str,
    token: Option<&[u8]>,
    body: &str,
) -> Option<(u16, String)> {
    let config = support::client_config(ca, &[b"http/1.1"]);
    let conn = rustls::ClientConnection::new(
        config,
        ServerName::try_from("localhost".to_string()).unwrap(),
    )
    .unwrap();
    let sock = TcpStream::connect(addr).unwrap();
    sock.set_read_timeout(Some(Duration::from_secs(20)))
        .unwrap();
    let mut tls = rustls::StreamOwned::new(conn, sock);
    let mut head = format!(
        "{method} {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\nContent-Type: application/json\r\nContent-Length: {}\r\n",
        body.len()
    )
    .into_bytes();
    if let Some(token) = token {
        head.extend_from_slice(b"Authorization: Bearer ");
        head.extend_from_slice(token);
        head.extend_from_slice(b"\r\n");
    }
    head.extend_from_slice(b"\r\n");
    head.extend_from_slice(body.as_bytes());
    tls.write_all(&head).ok()?;
    let mut raw = Vec::new();
    match tls.read_to_end(&mut raw) {
        Ok(_) => {}
        Err(_) if !raw.is_empty() => {}
        Err(_) => return None,
    }
    let text = String::from_utf8_lossy(&raw).into_owned();
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let status = head.split_whitespace().nth(1)?.parse().ok()?;
    Some((status, body.to_string()))
}

/// A token with `header` and `claims`, signed ES256 with the PKCS#8 PEM key in `key_path`.
fn sign(key_path: &Path, header: &Value, claims: &Value) -> String {
    use ring::signature::{EcdsaKeyPair, ECDSA_P256_SHA256_FIXED_SIGNING};
    let pem = std::fs::read_to_string(key_path).unwrap();
    let der = rustls_pemfile::private_key(&mut pem.as_bytes())
        .unwrap()
        .unwrap();
    let rng = ring::rand::SystemRandom::new();
    let pair =
        EcdsaKeyPair::from_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, der.secret_der(), &rng).unwrap();
    let signed = format!(
        "{}.{}",
        URL_SAFE_NO_PAD.encode(header.to_string()),
        URL_SAFE_NO_PAD.encode(claims.to_string())
    );
    let signature = pair.sign(&rng, signed.as_bytes()).unwrap();
    format!("{signed}.{}", URL_SAFE_NO_PAD.encode(signature.as_ref()))
}

/// The claims kube-apiserver puts in a token of `team/bot` (uid `uid`) valid `from`..`until`.
fn bot_claims(uid: &str, from: i64, until: i64) -> Value {
    json!({
        "iss": ISSUER, "sub": "system:serviceaccount:team:bot", "aud": [ISSUER],
        "iat": from, "nbf": from, "exp": until,
        "kubernetes.io": {"namespace": "team", "serviceaccount": {"name": "bot", "uid": uid}},
    })
}

fn now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64
}

#[test]
fn a_service_account_token_gets_exactly_what_its_role_grants() {
    let tmp = tempfile::tempdir().unwrap();
    let server = Server::start(&[]);
    let admin = server.kubeconfig_path();
    apply(KUBECTL_1_33, &admin, SETUP);
    let ca = server.data_dir.join("ca.crt");

    for bin in KUBECTLS {
        let token = ok(bin, &admin, &["create", "token", "bot", "-n", "team"]);
        let token = token.trim();
        assert!(token.starts_with("eyJ"), "{token}");
        let config = token_kubeconfig(&tmp.path().join("bot"), &server.url(), &ca, token);
        ok(bin, &config, &["get", "pods", "-n", "team"]);
        for (args, message) in [
            (
                &["get", "secrets", "-n", "team"][..],
                r#"Error from server (Forbidden): secrets is forbidden: User "system:serviceaccount:team:bot" cannot list resource "secrets" in API group "" in the namespace "team""#,
            ),
            (
                &["get", "pods", "-n", "other"][..],
                r#"Error from server (Forbidden): pods is forbidden: User "system:serviceaccount:team:bot" cannot list resource "pods" in API group "" in the namespace "other""#,
            ),
        ] {
            let out = kubectl(bin, &config, args);
            assert!(!out.status.success(), "{bin} {args:?}");
            assert_eq!(stderr(&out).trim(), message, "{bin} {args:?}");
        }
        for (args, answer) in [
            (&["auth", "can-i", "list", "pods", "-n", "team"][..], "yes"),
            (&["auth", "can-i", "watch", "pods", "-n", "team"][..], "no"),
            (&["auth", "can-i", "get", "secrets", "-n", "team"][..], "no"),
            (&["auth", "can-i", "list", "pods", "-n", "other"][..], "no"),
        ] {
            let out = kubectl(bin, &config, args);
            assert_eq!(
                String::from_utf8_lossy(&out.stdout).trim(),
                answer,
                "{bin} {args:?}"
            );
        }
        // kubectl 1.27 asks authentication.k8s.io/v1beta1, which is not served.
        let who: Value = serde_json::from_str(&ok(
            KUBECTL_1_33,
            &config,
            &["auth", "whoami", "-o", "json"],
        ))
        .unwrap();
        let info = &who["status"]["userInfo"];
        assert_eq!(info["username"], "system:serviceaccount:team:bot");
        assert_eq!(
            info["groups"],
            json!([
                "system:serviceaccounts",
                "system:serviceaccounts:team",
                "system:authenticated"
            ])
        );
        // Too short a duration is refused with kube-apiserver's message.
        let out = kubectl(
            bin,
            &admin,
            &["create", "token", "bot", "-n", "team", "--duration=1m"],
        );
        assert!(
            stderr(&out).contains(r#"TokenRequest.authentication.k8s.io "" is invalid: spec.expirationSeconds: Invalid value: 60: may not specify a duration less than 10 minutes"#),
            "{bin}: {}",
            stderr(&out)
        );
    }
    let out = kubectl(
        KUBECTL_1_33,
        &admin,
        &["create", "token", "nobody", "-n", "team"],
    );
    assert!(
        stderr(&out).contains(r#"serviceaccounts "nobody" not found"#),
        "{}",
        stderr(&out)
    );

    // A token bound to a pod lives as long as the pod.
    apply(
        KUBECTL_1_33,
        &admin,
        "apiVersion: v1\nkind: Pod\nmetadata: {name: p1, namespace: team}\nspec:\n  serviceAccountName: bot\n  containers: [{name: c, image: busybox}]\n",
    );
    let pod_token = ok(
        KUBECTL_1_33,
        &admin,
        &[
            "create",
            "token",
            "bot",
            "-n",
            "team",
            "--bound-object-kind=Pod",
            "--bound-object-name=p1",
        ],
    );
    let pod_token = pod_token.trim().as_bytes().to_vec();
    let pods = "/api/v1/namespaces/team/pods";
    let get = |token: &[u8]| request(server.addr, &ca, "GET", pods, Some(token), "");
    assert_eq!(get(&pod_token).unwrap().0, 200);
    let who = request(
        server.addr,
        &ca,
        "POST",
        "/apis/authentication.k8s.io/v1/selfsubjectreviews",
        Some(&pod_token),
        r#"{"apiVersion":"authentication.k8s.io/v1","kind":"SelfSubjectReview"}"#,
    )
    .unwrap();
    let who: Value = serde_json::from_str(&who.1).unwrap();
    assert_eq!(
        who["status"]["userInfo"]["extra"]["authentication.kubernetes.io/pod-name"],
        json!(["p1"]),
        "{who}"
    );
    ok(
        KUBECTL_1_33,
        &admin,
        &[
            "delete",
            "pod",
            "p1",
            "-n",
            "team",
            "--grace-period=0",
            "--force",
        ],
    );
    assert_eq!(get(&pod_token).unwrap().0, 401, "the pod is gone");

    // Tokens made here with the cluster key: valid ones are accepted (so the refusals below
    // are about what they change), expired and foreign ones are not.
    let uid = ok(
        KUBECTL_1_33,
        &admin,
        &[
            "get",
            "sa",
            "bot",
            "-n",
            "team",
            "-o",
            "jsonpath={.metadata.uid}",
        ],
    );
    let key = server.data_dir.join("ca.key");
    let es256 = json!({"alg": "ES256"});
    let t = now();
    let valid = sign(&key, &es256, &bot_claims(&uid, t - 10, t + 600));
    assert_eq!(get(valid.as_bytes()).unwrap().0, 200);
    let other_key = tmp.path().join("other.key");
    std::fs::write(
        &other_key,
        rcgen::KeyPair::generate().unwrap().serialize_pem(),
    )
    .unwrap();
    let mut vault_claims = bot_claims(&uid, t - 10, t + 600);
    vault_claims["aud"] = json!(["vault"]);
    let valid_claims = URL_SAFE_NO_PAD.encode(bot_claims(&uid, t - 10, t + 600).to_string());
    let bad: Vec<(&str, Vec<u8>)> = vec![
        (
            "expired",
            sign(&key, &es256, &bot_claims(&uid, t - 4000, t - 120)).into_bytes(),
        ),
        (
            "another audience",
            sign(&key, &es256, &vault_claims).into_bytes(),
        ),
        (
            "another key",
            sign(&other_key, &es256, &bot_claims(&uid, t - 10, t + 600)).into_bytes(),
        ),
        (
            "alg none",
            format!(
                "{}.{valid_claims}.",
                URL_SAFE_NO_PAD.encode(r#"{"alg":"none"}"#)
            )
            .into_bytes(),
        ),
        (
            "HS256 with the public key",
            format!(
                "{}.{valid_claims}.c2ln",
                URL_SAFE_NO_PAD.encode(r#"{"alg":"HS256"}"#)
            )
            .into_bytes(),
        ),
        ("garbage base64", b"eyJ!!!.@@@.###".to_vec()),
        ("not a JWT", b"hello".to_vec()),
    ];
    for (what, token) in &bad {
        assert_eq!(get(token).map(|r| r.0), Some(401), "{what}");
    }
    // A 1 MiB token: refused (401, or the transport's 431 for a header that big), never served.
    let huge = vec![b'e'; 1 << 20];
    if let Some((status, _)) = get(&huge) {
        assert!(status == 401 || status == 431, "1 MiB token: {status}");
    }
    assert_eq!(get(valid.as_bytes()).unwrap().0, 200, "still serving");

    // TokenReview and the OIDC documents.
    let review = |token: &str| {
        let body = json!({"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview",
                          "spec": {"token": token}});
        let (status, text) = request(
            server.addr,
            &ca,
            "POST",
            "/apis/authentication.k8s.io/v1/tokenreviews",
            Some(server.token().as_bytes()),
            &body.to_string(),
        )
        .unwrap();
        assert_eq!(status, 201, "{text}");
        serde_json::from_str::<Value>(&text).unwrap()["status"].clone()
    };
    let status = review(&valid);
    assert_eq!(status["authenticated"], true);
    assert_eq!(status["user"]["username"], "system:serviceaccount:team:bot");
    assert_eq!(status["audiences"], json!([ISSUER]));
    let status = review(std::str::from_utf8(&bad[0].1).unwrap());
    assert_eq!(status["authenticated"], Value::Null, "{status}");
    assert!(
        status["error"].as_str().unwrap().contains("expired"),
        "{status}"
    );
    let (status, text) = request(
        server.addr,
        &ca,
        "GET",
        "/.well-known/openid-configuration",
        Some(valid.as_bytes()),
        "",
    )
    .unwrap();
    assert_eq!(status, 200, "{text}");
    let discovery: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(discovery["issuer"], ISSUER);
    let (status, text) = request(
        server.addr,
        &ca,
        "GET",
        "/openid/v1/jwks",
        Some(valid.as_bytes()),
        "",
    )
    .unwrap();
    assert_eq!(status, 200, "{text}");
    let jwks: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(jwks["keys"][0]["crv"], "P-256");
    assert_eq!(jwks["keys"][0]["alg"], "ES256");

    // The service account's deletion ends all its tokens, kubectl's included.
    let token = ok(
        KUBECTL_1_33,
        &admin,
        &["create", "token", "bot", "-n", "team"],
    );
    assert_eq!(get(token.trim().as_bytes()).unwrap().0, 200);
    ok(KUBECTL_1_33, &admin, &["delete", "sa", "bot", "-n", "team"]);
    for token in [token.trim().as_bytes(), valid.as_bytes()] {
        assert_eq!(get(token).unwrap().0, 401, "the service account is gone");
    }
    let config = token_kubeconfig(&tmp.path().join("gone"), &server.url(), &ca, token.trim());
    for bin in KUBECTLS {
        let out = kubectl(bin, &config, &["get", "pods", "-n", "team"]);
        assert!(
            stderr(&out).contains("Unauthorized"),
            "{bin}: {}",
            stderr(&out)
        );
    }
}

#[test]
fn a_token_issued_by_one_server_is_accepted_by_every_server() {
    let mut cluster = cluster_support::Cluster::start(3);
    let rt = support::runtime();
    let leader = rt.block_on(cluster.wait_leader());
    let tmp = tempfile::tempdir().unwrap();
    let data0 = cluster.members[0].data_dir.clone();
    let ca = data0.join("ca.crt");
    let admin_token = std::fs::read_to_string(data0.join("admin-token")).unwrap();
    for issuer in 0..3 {
        let admin = token_kubeconfig(
            &tmp.path().join(format!("admin{issuer}")),
            &cluster.url(issuer),
            &ca,
            admin_token.trim(),
        );
        if issuer == 0 {
            apply(KUBECTL_1_33, &admin, SETUP);
        }
        let token = ok(
            KUBECTL_1_33,
            &admin,
            &["create", "token", "bot", "-n", "team"],
        );
        for (i, member) in cluster.members.iter().enumerate() {
            // A follower may not have applied the service account yet: wait for it.
            let deadline = std::time::Instant::now() + Duration::from_secs(10);
            loop {
                let (status, text) = request(
                    member.api,
                    &ca,
                    "GET",
                    "/api/v1/namespaces/team/pods",
                    Some(token.trim().as_bytes()),
                    "",
                )
                .unwrap();
                if status == 200 {
                    break;
                }
                assert!(
                    std::time::Instant::now() < deadline,
                    "issued by {issuer}, used on {i} (leader {leader}): {status} {text}"
                );
                std::thread::sleep(Duration::from_millis(100));
            }
            let (status, _) = request(
                member.api,
                &ca,
                "GET",
                "/api/v1/namespaces/team/secrets",
                Some(token.trim().as_bytes()),
                "",
            )
            .unwrap();
            assert_eq!(status, 403, "issued by {issuer}, used on {i}");
        }
    }
    // Every server publishes the same key.
    let jwks: Vec<String> = (0..3)
        .map(|i| {
            request(
                cluster.members[i].api,
                &ca,
                "GET",
                "/openid/v1/jwks",
                Some(admin_token.trim().as_bytes()),
                "",
            )
            .unwrap()
            .1
        })
        .collect();
    assert!(jwks.iter().all(|j| j == &jwks[0]), "{jwks:?}");
}

#[test]
fn a_legacy_token_lives_in_its_secret() {
    let server = Server::start(&[]);
    let admin = server.kubeconfig_path();
    apply(KUBECTL_1_33, &admin, SETUP);
    apply(
        KUBECTL_1_33,
        &admin,
        "apiVersion: v1\nkind: Secret\nmetadata:\n  name: bot-token\n  namespace: team\n  annotations: {kubernetes.io/service-account.name: bot}\ntype: kubernetes.io/service-account-token\n",
    );
    let ca = server.data_dir.join("ca.crt");
    // The token controller fills the Secret.
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    let secret = loop {
        let out = ok(
            KUBECTL_1_33,
            &admin,
            &["get", "secret", "bot-token", "-n", "team", "-o", "json"],
        );
        let secret: Value = serde_json::from_str(&out).unwrap();
        if secret["data"]["token"].is_string() {
            break secret;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "never filled: {secret}"
        );
        std::thread::sleep(Duration::from_millis(200));
    };
    let decode = |field: &str| {
        base64::engine::general_purpose::STANDARD
            .decode(secret["data"][field].as_str().unwrap())
            .unwrap()
    };
    assert_eq!(decode("namespace"), b"team");
    assert_eq!(decode("ca.crt"), std::fs::read(&ca).unwrap());
    let uid = ok(
        KUBECTL_1_33,
        &admin,
        &[
            "get",
            "sa",
            "bot",
            "-n",
            "team",
            "-o",
            "jsonpath={.metadata.uid}",
        ],
    );
    assert_eq!(
        secret["metadata"]["annotations"]["kubernetes.io/service-account.uid"],
        uid.as_str()
    );
    let token = decode("token");
    let get = |path: &str| {
        request(server.addr, &ca, "GET", path, Some(&token), "")
            .unwrap()
            .0
    };
    assert_eq!(get("/api/v1/namespaces/team/pods"), 200);
    assert_eq!(get("/api/v1/namespaces/team/secrets"), 403);
    ok(
        KUBECTL_1_33,
        &admin,
        &["delete", "secret", "bot-token", "-n", "team"],
    );
    assert_eq!(
        get("/api/v1/namespaces/team/pods"),
        401,
        "its Secret is gone"
    );
}

#[test]
fn pods_get_their_service_account_token_volume() {
    let server = Server::start(&[]);
    let admin = server.kubeconfig_path();
    apply(KUBECTL_1_33, &admin, SETUP);
    apply(
        KUBECTL_1_33,
        &admin,
        "apiVersion: v1\nkind: ServiceAccount\nmetadata: {name: quiet, namespace: team}\nautomountServiceAccountToken: false\n---\napiVersion: v1\nkind: Pod\nmetadata: {name: p1, namespace: team}\nspec:\n  serviceAccountName: bot\n  initContainers: [{name: i, image: busybox}]\n  containers: [{name: c, image: busybox}]\n---\napiVersion: v1\nkind: Pod\nmetadata: {name: p2, namespace: team}\nspec:\n  serviceAccountName: quiet\n  containers: [{name: c, image: busybox}]\n---\napiVersion: v1\nkind: Pod\nmetadata: {name: p3, namespace: team}\nspec:\n  containers: [{name: c, image: busybox}]\n",
    );
    let pod = |name: &str| -> Value {
        serde_json::from_str(&ok(
            KUBECTL_1_33,
            &admin,
            &["get", "pod", name, "-n", "team", "-o", "json"],
        ))
        .unwrap()
    };
    let p1 = pod("p1");
    let volume = &p1["spec"]["volumes"][0];
    let name = volume["name"].as_str().unwrap();
    assert!(name.starts_with("kube-api-access-"), "{volume}");
    assert_eq!(
        volume["projected"]["sources"][0]["serviceAccountToken"],
        json!({"expirationSeconds": 3607, "path": "token"})
    );
    assert_eq!(
        volume["projected"]["sources"][1]["configMap"]["name"],
        "kube-root-ca.crt"
    );
    for group in ["initContainers", "containers"] {
        assert_eq!(
            p1["spec"][group][0]["volumeMounts"][0],
            json!({"name": name, "readOnly": true,
                   "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount"}),
            "{group}"
        );
    }
    assert!(pod("p2")["spec"].get("volumes").is_none(), "automount off");
    let p3 = pod("p3");
    assert_eq!(p3["spec"]["serviceAccountName"], "default");
    assert!(p3["spec"]["volumes"][0]["name"]
        .as_str()
        .unwrap()
        .starts_with("kube-api-access-"));
}
