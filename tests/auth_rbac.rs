//! Authentication and RBAC against the real server (docs/guarantees.md, Authentication and
//! authorization), with kubectl 1.27 and 1.33:
//!
//! - a user certificate signed by the cluster CA, bound to a Role that allows only `get,list
//!   pods` in one namespace: `kubectl auth can-i` answers right for every verb, resource and
//!   namespace asked; listing pods works; secrets and another namespace are 403 with
//!   kube-apiserver's exact text; `kubectl auth whoami` names the user and its groups;
//! - impersonation without the `impersonate` verb, a Role granting more than its writer holds,
//!   a binding to a role the writer does not hold, rules without verbs and a certificate from
//!   another CA are refused as kube-apiserver refuses them;
//! - `--token-auth-file` users, anonymous requests, and the default roles `kubectl auth can-i
//!   --list` shows;
//! - on a 3-server cluster, a write a follower forwards is authorized as the user who sent it,
//!   and a forwarded-user header from a client is ignored.

mod cluster_support;
mod support;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use serde_json::Value;
use support::kubectl::{apply, ok, run as kubectl, stderr, stdout};
use support::Server;

const KUBECTLS: [&str; 2] = [
    "/usr/lib/google-cloud-sdk/bin/kubectl.1.27",
    "/usr/lib/google-cloud-sdk/bin/kubectl.1.33",
];
const KUBECTL_1_33: &str = "/usr/lib/google-cloud-sdk/bin/kubectl.1.33";

/// A client certificate and its key (PEM).
struct Credential {
    cert: String,
    key: String,
}

/// A certificate for `cn` in `orgs`, signed by the CA whose certificate and key are in
/// `data_dir` (the cluster's), or by a CA of its own when `data_dir` is `None`.
fn certificate(data_dir: Option<&Path>, cn: &str, orgs: &[&str]) -> Credential {
    let (ca_key, ca) = match data_dir {
        Some(dir) => {
            let key =
                rcgen::KeyPair::from_pem(&std::fs::read_to_string(dir.join("ca.key")).unwrap())
                    .unwrap();
            let ca = rcgen::CertificateParams::from_ca_cert_pem(
                &std::fs::read_to_string(dir.join("ca.crt")).unwrap(),
            )
            .unwrap()
            .self_signed(&key)
            .unwrap();
            (key, ca)
        }
        None => {
            let key = rcgen::KeyPair::generate().unwrap();
            let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
            params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
            params
                .distinguished_name
                .push(rcgen::DnType::CommonName, "litek8s-ca");
            let ca = params.self_signed(&key).unwrap();
            (key, ca)
        }
    };
    let key = rcgen::KeyPair::generate().unwrap();
    let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
    params
        .distinguished_name
        .push(rcgen::DnType::CommonName, cn);
    for org in orgs {
        params
            .distinguished_name
            .push(rcgen::DnType::OrganizationName, *org);
    }
    params.extended_key_usages = vec![rcgen::ExtendedKeyUsagePurpose::ClientAuth];
    let cert = params.signed_by(&key, &ca, &ca_key).unwrap();
    Credential {
        cert: cert.pem(),
        key: key.serialize_pem(),
    }
}

/// A kubeconfig in `dir` for `server_url` with `credential` (or a bearer `token`).
fn kubeconfig(
    dir: &Path,
    server_url: &str,
    ca: &Path,
    credential: Option<&Credential>,
    token: Option<&str>,
) -> PathBuf {
    std::fs::create_dir_all(dir).unwrap();
    let user = match (credential, token) {
        (Some(c), _) => {
            std::fs::write(dir.join("c.crt"), &c.cert).unwrap();
            std::fs::write(dir.join("c.key"), &c.key).unwrap();
            format!(
                "    client-certificate: {}\n    client-key: {}\n",
                dir.join("c.crt").display(),
                dir.join("c.key").display()
            )
        }
        (None, Some(t)) => format!("    token: {t}\n"),
        (None, None) => "    {}\n".to_string(),
    };
    let text = format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n    server: {server_url}\n    certificate-authority: {}\nusers:\n- name: u\n  user:\n{user}contexts:\n- name: c\n  context:\n    cluster: c\n    user: u\ncurrent-context: c\n",
        ca.display(),
    );
    let path = dir.join("kubeconfig");
    std::fs::write(&path, text).unwrap();
    path
}

/// One HTTPS/1.1 request with extra `headers`, as `credential` (a client certificate) or with
/// a bearer token: (status, body).
fn raw_request(
    addr: SocketAddr,
    ca: &Path,
    credential: Option<&Credential>,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &str,
) -> (u16, String) {
    let pem = std::fs::read(ca).unwrap();
    let mut roots = rustls::RootCertStore::empty();
    for cert in rustls_pemfile::certs(&mut pem.as_slice()) {
        roots.add(cert.unwrap()).unwrap();
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots);
    let config = match credential {
        Some(c) => {
            let certs: Vec<CertificateDer<'static>> = rustls_pemfile::certs(&mut c.cert.as_bytes())
                .map(|c| c.unwrap())
                .collect();
            let key: PrivateKeyDer<'static> = rustls_pemfile::private_key(&mut c.key.as_bytes())
                .unwrap()
                .unwrap();
            builder.with_client_auth_cert(certs, key).unwrap()
        }
        None => builder.with_no_client_auth(),
    };
    let conn = rustls::ClientConnection::new(
        Arc::new(config),
        ServerName::try_from("localhost".to_string()).unwrap(),
    )
    .unwrap();
    let sock = TcpStream::connect(addr).unwrap();
    sock.set_read_timeout(Some(Duration::from_secs(20)))
        .unwrap();
    let mut tls = rustls::StreamOwned::new(conn, sock);
    let mut request = format!(
        "{method} {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\nContent-Length: {}\r\n",
        body.len()
    );
    for (k, v) in headers {
        request.push_str(&format!("{k}: {v}\r\n"));
    }
    request.push_str("\r\n");
    request.push_str(body);
    tls.write_all(request.as_bytes()).unwrap();
    let mut raw = Vec::new();
    match tls.read_to_end(&mut raw) {
        Ok(_) => {}
        Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof && !raw.is_empty() => {}
        Err(e) => panic!("reading the response: {e}"),
    }
    let text = String::from_utf8_lossy(&raw).into_owned();
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    // Bodies without Content-Length come chunked; the JSON is one chunk here.
    let body = if head
        .to_ascii_lowercase()
        .contains("transfer-encoding: chunked")
    {
        body.split_once("\r\n")
            .map(|(_, rest)| {
                rest.rsplit_once("\r\n0\r\n")
                    .map(|(b, _)| b)
                    .unwrap_or(rest)
            })
            .unwrap_or(body)
            .trim_end()
            .to_string()
    } else {
        body.to_string()
    };
    (status, body)
}

/// The namespaces, the Role that allows only `get,list pods` in `team`, and its binding to
/// the user `jane`; `jane` may also create Roles and RoleBindings in `team` (to try to
/// escalate).
const SETUP: &str = r#"
apiVersion: v1
kind: Namespace
metadata: {name: team}
---
apiVersion: v1
kind: Namespace
metadata: {name: other}
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
metadata: {name: jane-reads-pods, namespace: team}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: Role, name: pod-reader}
subjects:
- {apiGroup: rbac.authorization.k8s.io, kind: User, name: jane}
"#;

/// (verb, resource, namespace flag, allowed) as `kubectl auth can-i` is asked.
const CAN_I: &[(&str, &str, &str, bool)] = &[
    ("get", "pods", "-n=team", true),
    ("list", "pods", "-n=team", true),
    ("get", "pods/p1", "-n=team", true),
    ("watch", "pods", "-n=team", false),
    ("create", "pods", "-n=team", false),
    ("delete", "pods", "-n=team", false),
    ("update", "pods", "-n=team", false),
    ("patch", "pods", "-n=team", false),
    ("deletecollection", "pods", "-n=team", false),
    ("get", "pods", "-n=other", false),
    ("list", "pods", "-n=other", false),
    ("list", "pods", "--all-namespaces", false),
    ("get", "pods", "-n=default", false),
    ("list", "secrets", "-n=team", false),
    ("get", "secrets", "-n=team", false),
    ("get", "configmaps", "-n=team", false),
    ("list", "deployments.apps", "-n=team", false),
    ("list", "nodes", "-n=team", false),
    ("list", "namespaces", "-n=team", false),
    (
        "create",
        "selfsubjectaccessreviews.authorization.k8s.io",
        "-n=team",
        true,
    ),
    ("get", "/api", "-n=team", true),
    ("get", "/healthz", "-n=team", true),
    ("get", "/logs", "-n=team", false),
];

#[test]
fn a_user_certificate_gets_exactly_what_its_role_grants() {
    let tmp = tempfile::tempdir().unwrap();
    let tokens = tmp.path().join("tokens.csv");
    std::fs::write(&tokens, "bob-token-0123456789,bob,1001,\"viewers,ops\"\n").unwrap();
    let server = Server::start(&["--token-auth-file", tokens.to_str().unwrap()]);
    let admin = server.kubeconfig_path();
    let out = apply(KUBECTL_1_33, &admin, SETUP);
    assert!(out.status.success(), "{}", stderr(&out));
    let ca = server.data_dir.join("ca.crt");
    let jane = certificate(Some(&server.data_dir), "jane", &["devs"]);
    let jane_config = kubeconfig(
        &tmp.path().join("jane"),
        &server.url(),
        &ca,
        Some(&jane),
        None,
    );

    for bin in KUBECTLS {
        for (verb, resource, scope, allowed) in CAN_I {
            let out = kubectl(bin, &jane_config, &["auth", "can-i", verb, resource, scope]);
            let answer = stdout(&out);
            assert_eq!(
                (answer.trim(), out.status.success()),
                (if *allowed { "yes" } else { "no" }, *allowed),
                "{bin} auth can-i {verb} {resource} {scope}: {}",
                stderr(&out)
            );
        }
        // Listing pods works; secrets and another namespace are 403 with upstream's text.
        let out = kubectl(bin, &jane_config, &["get", "pods", "-n", "team"]);
        assert!(out.status.success(), "{bin}: {}", stderr(&out));
        let out = kubectl(bin, &jane_config, &["get", "secrets", "-n", "team"]);
        assert!(!out.status.success());
        assert!(
            stderr(&out).contains(r#"Error from server (Forbidden): secrets is forbidden: User "jane" cannot list resource "secrets" in API group "" in the namespace "team""#),
            "{bin}: {}",
            stderr(&out)
        );
        let out = kubectl(bin, &jane_config, &["get", "pods", "-n", "other"]);
        assert!(
            stderr(&out).contains(r#"Error from server (Forbidden): pods is forbidden: User "jane" cannot list resource "pods" in API group "" in the namespace "other""#),
            "{bin}: {}",
            stderr(&out)
        );
        let out = kubectl(
            bin,
            &jane_config,
            &["get", "pod", "p1", "-n", "team", "-o", "name"],
        );
        assert!(
            stderr(&out).contains(r#"pods "p1" not found"#),
            "{bin}: get is allowed, so a missing pod is 404: {}",
            stderr(&out)
        );
        // Impersonation without the `impersonate` verb.
        let out = kubectl(
            bin,
            &jane_config,
            &["get", "pods", "-n", "team", "--as", "admin"],
        );
        assert!(
            stderr(&out).contains(r#"users "admin" is forbidden: User "jane" cannot impersonate resource "users" in API group "" at the cluster scope"#),
            "{bin}: {}",
            stderr(&out)
        );
        // `can-i --list` lists the Role's rule and the defaults every user has.
        let list = ok(
            bin,
            &jane_config,
            &["auth", "can-i", "--list", "-n", "team"],
        );
        assert!(
            list.lines()
                .any(|l| l.starts_with("pods ") && l.contains("[get list]")),
            "{bin}: {list}"
        );
        assert!(
            list.contains("selfsubjectaccessreviews.authorization.k8s.io"),
            "{list}"
        );
        assert!(!list.contains("secrets"), "{list}");
    }

    // whoami (authentication.k8s.io/v1, which kubectl 1.28 and later ask for).
    let who = ok(
        KUBECTL_1_33,
        &jane_config,
        &["auth", "whoami", "-o", "json"],
    );
    let who: Value = serde_json::from_str(&who).unwrap();
    assert_eq!(who["kind"], "SelfSubjectReview");
    assert_eq!(who["status"]["userInfo"]["username"], "jane");
    assert_eq!(
        who["status"]["userInfo"]["groups"],
        serde_json::json!(["devs", "system:authenticated"])
    );
    let who = ok(
        KUBECTL_1_33,
        &admin,
        &["auth", "whoami", "--as", "jane", "--as-group", "devs"],
    );
    assert!(
        who.contains("jane") && who.contains("[devs system:authenticated]"),
        "{who}"
    );

    // A static token's user, its uid and groups; its group is granted `view` everywhere.
    ok(
        KUBECTL_1_33,
        &admin,
        &[
            "create",
            "clusterrolebinding",
            "viewers",
            "--clusterrole=view",
            "--group=viewers",
        ],
    );
    let bob = kubeconfig(
        &tmp.path().join("bob"),
        &server.url(),
        &ca,
        None,
        Some("bob-token-0123456789"),
    );
    let who: Value =
        serde_json::from_str(&ok(KUBECTL_1_33, &bob, &["auth", "whoami", "-o", "json"])).unwrap();
    assert_eq!(who["status"]["userInfo"]["uid"], "1001");
    assert_eq!(
        who["status"]["userInfo"]["groups"],
        serde_json::json!(["viewers", "ops", "system:authenticated"])
    );
    // `view` is aggregated from `system:aggregate-to-view` by the leader's controller.
    let mut listed = false;
    for _ in 0..100 {
        if kubectl(KUBECTL_1_33, &bob, &["get", "configmaps", "-n", "other"])
            .status
            .success()
        {
            listed = true;
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(listed, "the view role lets bob list configmaps");
    let out = kubectl(KUBECTL_1_33, &bob, &["get", "secrets", "-n", "other"]);
    assert!(
        stderr(&out).contains(r#"User "bob" cannot list resource "secrets""#),
        "{}",
        stderr(&out)
    );
    // A token nobody issued is 401.
    let stranger = kubeconfig(
        &tmp.path().join("stranger"),
        &server.url(),
        &ca,
        None,
        Some("not-a-token-0123456789"),
    );
    let out = kubectl(KUBECTL_1_33, &stranger, &["get", "pods"]);
    assert!(stderr(&out).contains("Unauthorized"), "{}", stderr(&out));

    // No credential: system:anonymous sees /version and nothing else.
    let (status, version) = raw_request(server.addr, &ca, None, "GET", "/version", &[], "");
    assert_eq!(status, 200, "{version}");
    let (status, text) = raw_request(server.addr, &ca, None, "GET", "/api/v1/namespaces", &[], "");
    assert_eq!(status, 403, "{text}");
    assert_eq!(
        serde_json::from_str::<Value>(&text).unwrap(),
        serde_json::json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
            "message": "namespaces is forbidden: User \"system:anonymous\" cannot list resource \"namespaces\" in API group \"\" at the cluster scope",
            "reason": "Forbidden", "details": {"kind": "namespaces"}, "code": 403})
    );

    // A certificate from another CA is 401, not a TLS error.
    let foreign = certificate(None, "jane", &["system:masters"]);
    let foreign = kubeconfig(
        &tmp.path().join("foreign"),
        &server.url(),
        &ca,
        Some(&foreign),
        None,
    );
    for bin in KUBECTLS {
        let out = kubectl(bin, &foreign, &["get", "pods", "-n", "team"]);
        assert!(!out.status.success());
        assert!(
            stderr(&out).contains("Unauthorized"),
            "{bin}: {}",
            stderr(&out)
        );
    }
}

#[test]
fn roles_and_bindings_grant_only_what_their_writer_holds() {
    let server = Server::start(&[]);
    let admin = server.kubeconfig_path();
    let tmp = tempfile::tempdir().unwrap();
    let out = apply(KUBECTL_1_33, &admin, SETUP);
    assert!(out.status.success(), "{}", stderr(&out));
    // jane may also manage Roles and RoleBindings in `team`.
    let out = apply(
        KUBECTL_1_33,
        &admin,
        r#"
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata: {name: rbac-editor, namespace: team}
rules:
- apiGroups: [rbac.authorization.k8s.io]
  resources: [roles, rolebindings]
  verbs: [create, get, list, update, patch, delete]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: jane-edits-rbac, namespace: team}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: Role, name: rbac-editor}
subjects:
- {apiGroup: rbac.authorization.k8s.io, kind: User, name: jane}
"#,
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let ca = server.data_dir.join("ca.crt");
    let jane = certificate(Some(&server.data_dir), "jane", &["devs"]);
    let jane_config = kubeconfig(
        &tmp.path().join("jane"),
        &server.url(),
        &ca,
        Some(&jane),
        None,
    );

    for bin in KUBECTLS {
        // A Role with what jane holds is fine; one granting more is refused.
        ok(
            bin,
            &jane_config,
            &[
                "create",
                "role",
                "readers-copy",
                "--verb=get",
                "--resource=pods",
                "-n",
                "team",
            ],
        );
        ok(
            bin,
            &jane_config,
            &["delete", "role", "readers-copy", "-n", "team"],
        );
        let out = kubectl(
            bin,
            &jane_config,
            &[
                "create",
                "role",
                "escalate",
                "--verb=get,delete",
                "--resource=pods,secrets",
                "-n",
                "team",
            ],
        );
        assert!(!out.status.success());
        assert!(
            stderr(&out).contains(
                "roles.rbac.authorization.k8s.io \"escalate\" is forbidden: user \"jane\" (groups=[\"devs\" \"system:authenticated\"]) is attempting to grant RBAC permissions not currently held:\n\
                 {APIGroups:[\"\"], Resources:[\"pods\"], Verbs:[\"delete\"]}\n\
                 {APIGroups:[\"\"], Resources:[\"secrets\"], Verbs:[\"get\" \"delete\"]}"
            ),
            "{bin}: {}",
            stderr(&out)
        );
        // Binding a role jane does not hold (cluster-admin) is refused the same way.
        let out = kubectl(
            bin,
            &jane_config,
            &[
                "create",
                "rolebinding",
                "jane-admin",
                "--clusterrole=cluster-admin",
                "--user=jane",
                "-n",
                "team",
            ],
        );
        assert!(!out.status.success());
        assert!(
            stderr(&out).contains(r#"rolebindings.rbac.authorization.k8s.io "jane-admin" is forbidden: user "jane" (groups=["devs" "system:authenticated"]) is attempting to grant RBAC permissions not currently held:"#),
            "{bin}: {}",
            stderr(&out)
        );
        // Binding what jane holds is fine.
        ok(
            bin,
            &jane_config,
            &[
                "create",
                "rolebinding",
                "tom-reads",
                "--role=pod-reader",
                "--user=tom",
                "-n",
                "team",
            ],
        );
        ok(
            bin,
            &jane_config,
            &["delete", "rolebinding", "tom-reads", "-n", "team"],
        );
    }

    // With `escalate` on roles and `bind` on cluster-admin, the same writes pass.
    let out = apply(
        KUBECTL_1_33,
        &admin,
        r#"
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata: {name: escalator, namespace: team}
rules:
- apiGroups: [rbac.authorization.k8s.io]
  resources: [roles]
  verbs: [escalate]
- apiGroups: [rbac.authorization.k8s.io]
  resources: [clusterroles]
  resourceNames: [cluster-admin]
  verbs: [bind]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: jane-escalates, namespace: team}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: Role, name: escalator}
subjects:
- {apiGroup: rbac.authorization.k8s.io, kind: User, name: jane}
"#,
    );
    assert!(out.status.success(), "{}", stderr(&out));
    ok(
        KUBECTL_1_33,
        &jane_config,
        &[
            "create",
            "role",
            "escalate",
            "--verb=get,delete",
            "--resource=pods,secrets",
            "-n",
            "team",
        ],
    );
    ok(
        KUBECTL_1_33,
        &jane_config,
        &[
            "create",
            "rolebinding",
            "jane-admin",
            "--clusterrole=cluster-admin",
            "--user=jane",
            "-n",
            "team",
        ],
    );
    // jane is now admin of `team`, and of nothing else.
    assert_eq!(
        ok(
            KUBECTL_1_33,
            &jane_config,
            &["auth", "can-i", "delete", "secrets", "-n", "team"]
        )
        .trim(),
        "yes"
    );
    let out = kubectl(
        KUBECTL_1_33,
        &jane_config,
        &["auth", "can-i", "delete", "secrets", "-n", "other"],
    );
    assert_eq!(stdout(&out).trim(), "no");

    // Rules without verbs are invalid, as kube-apiserver says.
    let out = apply(
        KUBECTL_1_33,
        &admin,
        "apiVersion: rbac.authorization.k8s.io/v1\nkind: Role\nmetadata: {name: bad, namespace: team}\nrules:\n- apiGroups: [\"\"]\n  resources: [pods]\n  verbs: []\n",
    );
    assert!(!out.status.success());
    assert!(
        stderr(&out).contains(r#"The Role "bad" is invalid: rules[0].verbs: Required value: verbs must contain at least one value"#),
        "{}",
        stderr(&out)
    );
    // A binding's role reference may not change.
    let out = kubectl(
        KUBECTL_1_33,
        &admin,
        &[
            "patch",
            "rolebinding",
            "jane-reads-pods",
            "-n",
            "team",
            "--type=merge",
            "-p",
            r#"{"roleRef":{"name":"escalator"}}"#,
        ],
    );
    assert!(
        stderr(&out).contains("cannot change roleRef"),
        "{}",
        stderr(&out)
    );
}

/// SubjectAccessReview and LocalSubjectAccessReview answer for the user they name.
#[test]
fn subject_access_reviews() {
    let server = Server::start(&[]);
    let admin = server.kubeconfig_path();
    let out = apply(KUBECTL_1_33, &admin, SETUP);
    assert!(out.status.success(), "{}", stderr(&out));
    let rt = support::runtime();
    let api = server.api();
    rt.block_on(async {
        let review = |kind: &str, spec: Value| {
            serde_json::json!({"apiVersion": "authorization.k8s.io/v1", "kind": kind, "spec": spec})
        };
        let sar = "/apis/authorization.k8s.io/v1/subjectaccessreviews";
        let resp = api
            .post_json(sar, &review("SubjectAccessReview", serde_json::json!({
                "user": "jane",
                "resourceAttributes": {"namespace": "team", "verb": "list", "resource": "pods"}})))
            .await
            .unwrap();
        assert_eq!(resp.status, 201, "{}", resp.text());
        assert_eq!(
            resp.json()["status"],
            serde_json::json!({"allowed": true, "reason": "RBAC: allowed by RoleBinding \"jane-reads-pods/team\" of Role \"pod-reader\" to User \"jane\""})
        );
        let resp = api
            .post_json(sar, &review("SubjectAccessReview", serde_json::json!({
                "user": "jane",
                "resourceAttributes": {"namespace": "other", "verb": "list", "resource": "pods"}})))
            .await
            .unwrap();
        assert_eq!(resp.json()["status"], serde_json::json!({"allowed": false}));
        let resp = api
            .post_json(sar, &review("SubjectAccessReview", serde_json::json!({
                "resourceAttributes": {"verb": "list", "resource": "pods"}})))
            .await
            .unwrap();
        assert_eq!(resp.status, 422, "{}", resp.text());
        assert_eq!(
            resp.json()["message"],
            "SubjectAccessReview.authorization.k8s.io \"\" is invalid: spec.user: Invalid value: \"\": at least one of user or group must be specified"
        );
        let local = "/apis/authorization.k8s.io/v1/namespaces/team/localsubjectaccessreviews";
        let resp = api
            .post_json(local, &review("LocalSubjectAccessReview", serde_json::json!({
                "user": "jane",
                "resourceAttributes": {"namespace": "other", "verb": "get", "resource": "pods"}})))
            .await
            .unwrap();
        assert_eq!(resp.status, 400, "{}", resp.text());
        assert_eq!(resp.json()["message"], "spec.resourceAttributes.namespace must match namespace: team");
        let resp = api
            .post_json(local, &review("LocalSubjectAccessReview", serde_json::json!({
                "user": "jane",
                "resourceAttributes": {"namespace": "team", "verb": "get", "resource": "pods", "name": "p1"}})))
            .await
            .unwrap();
        assert_eq!(resp.json()["status"]["allowed"], true, "{}", resp.text());
        // Reviews are posted, never listed.
        let resp = api.get(sar).await.unwrap();
        assert_eq!(resp.status, 405, "{}", resp.text());
    });
    // Discovery and OpenAPI know them.
    let resources = ok(
        KUBECTL_1_33,
        &admin,
        &[
            "api-resources",
            "--api-group=authorization.k8s.io",
            "-o",
            "name",
        ],
    );
    for kind in [
        "localsubjectaccessreviews",
        "selfsubjectaccessreviews",
        "selfsubjectrulesreviews",
        "subjectaccessreviews",
    ] {
        assert!(resources.contains(kind), "{resources}");
    }
    let explained = ok(
        KUBECTL_1_33,
        &admin,
        &["explain", "selfsubjectaccessreview.spec.resourceAttributes"],
    );
    assert!(explained.contains("verb"), "{explained}");
}

/// On a 3-server cluster, a client certificate works against every server, a write reaching a
/// follower is authorized on the leader as the user who sent it, and a client cannot claim to
/// be someone else with the forwarding header.
#[test]
fn followers_forward_the_authenticated_user_and_never_a_claimed_one() {
    let mut cluster = cluster_support::Cluster::start(3);
    let rt = support::runtime();
    let leader = rt.block_on(cluster.wait_leader());
    let follower = (0..3).find(|&i| i != leader).unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let data0 = cluster.members[0].data_dir.clone();
    let ca = data0.join("ca.crt");
    // The admin kubeconfig of member 0, pointed at the follower.
    let admin = kubeconfig(
        &tmp.path().join("admin"),
        &cluster.url(follower),
        &ca,
        None,
        Some(
            std::fs::read_to_string(data0.join("admin-token"))
                .unwrap()
                .trim(),
        ),
    );
    let out = apply(KUBECTL_1_33, &admin, &format!(
        "{SETUP}\n---\napiVersion: rbac.authorization.k8s.io/v1\nkind: Role\nmetadata: {{name: cm-writer, namespace: team}}\nrules:\n- apiGroups: [\"\"]\n  resources: [configmaps]\n  verbs: [create, get]\n---\napiVersion: rbac.authorization.k8s.io/v1\nkind: RoleBinding\nmetadata: {{name: jane-writes-cms, namespace: team}}\nroleRef: {{apiGroup: rbac.authorization.k8s.io, kind: Role, name: cm-writer}}\nsubjects:\n- {{apiGroup: rbac.authorization.k8s.io, kind: User, name: jane}}\n"
    ));
    assert!(out.status.success(), "{}", stderr(&out));
    let jane = certificate(Some(&data0), "jane", &["devs"]);
    for i in 0..3 {
        let config = kubeconfig(
            &tmp.path().join(format!("jane{i}")),
            &cluster.url(i),
            &ca,
            Some(&jane),
            None,
        );
        // A read on every server; a write through every server (forwarded by followers).
        ok(KUBECTL_1_33, &config, &["get", "pods", "-n", "team"]);
        ok(
            KUBECTL_1_33,
            &config,
            &["create", "configmap", &format!("from-{i}"), "-n", "team"],
        );
        let out = kubectl(
            KUBECTL_1_33,
            &config,
            &["create", "configmap", "x", "-n", "other"],
        );
        assert!(
            stderr(&out).contains(r#"configmaps is forbidden: User "jane" cannot create resource "configmaps" in API group "" in the namespace "other""#),
            "server {i}: {}",
            stderr(&out)
        );
    }
    // A forged forwarded-user header, to the follower and to the leader: ignored.
    let forged = r#"{"name":"admin","groups":["system:masters","system:authenticated"]}"#;
    let body = r#"{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"forged"}}"#;
    for i in [follower, leader] {
        let addr: SocketAddr = cluster.members[i].api;
        let (status, text) = raw_request(
            addr,
            &ca,
            Some(&jane),
            "POST",
            "/api/v1/namespaces/other/configmaps",
            &[
                ("Content-Type", "application/json"),
                ("x-litek8s-forwarded-user", forged),
            ],
            body,
        );
        assert_eq!(status, 403, "server {i}: {text}");
        assert!(
            text.contains(r#"User \"jane\" cannot create resource \"configmaps\""#),
            "{text}"
        );
        let (status, text) = raw_request(
            addr,
            &ca,
            None,
            "GET",
            "/api/v1/namespaces/other/configmaps",
            &[("x-litek8s-forwarded-user", forged)],
            "",
        );
        assert_eq!(status, 403, "server {i}: anonymous stays anonymous: {text}");
        assert!(text.contains("system:anonymous"), "{text}");
        assert!(
            cluster.logs(i).contains("ignored a forwarded-user header"),
            "server {i} logs the forged header"
        );
    }
    // whoami on a follower reports jane, as on the leader.
    let config = kubeconfig(
        &tmp.path().join("jane-who"),
        &cluster.url(follower),
        &ca,
        Some(&jane),
        None,
    );
    let who = ok(KUBECTL_1_33, &config, &["auth", "whoami"]);
    assert!(who.contains("jane"), "{who}");
}
