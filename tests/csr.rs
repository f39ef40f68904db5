//! CertificateSigningRequests against the real server (docs/guarantees.md, Authentication and
//! authorization), with kubectl 1.27 and 1.33:
//!
//! - openssl makes a key and a CSR for `alice` in `devs`; `kubectl create -f`, `kubectl
//!   certificate approve`, and the issued certificate in a kubeconfig: `kubectl auth whoami`
//!   names alice and devs, a RoleBinding grants exactly its rule (one read allowed, one 403),
//!   the validity is the requested `expirationSeconds`, the requestor is the creating user
//!   whatever the body claimed, and `kubectl get csr` shows kubectl's columns;
//! - bad input: a request that is no CSR (422 with kube-apiserver's text), a signer nobody
//!   runs (stays approved and unissued), approving without `approve` on the signer (403), a
//!   kubelet-signer request for a subject that is no node (Failed with the signer's reason);
//! - nodes' own requests: a node's request for its own name is approved by the approver
//!   (`AutoApproved`, kube-controller-manager's message) and issued; its request for another
//!   node's name stays pending;
//! - on a 3-server cluster, a request created and approved through a follower yields a
//!   certificate every server accepts.

mod cluster_support;
mod support;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use base64::Engine;
use support::kubectl::{apply, ok, run as kubectl, stderr};
use support::Server;

const KUBECTLS: [&str; 2] = [
    "/usr/lib/google-cloud-sdk/bin/kubectl.1.27",
    "/usr/lib/google-cloud-sdk/bin/kubectl.1.33",
];
const KUBECTL_1_33: &str = "/usr/lib/google-cloud-sdk/bin/kubectl.1.33";

/// The namespace, alice's Role (read configmaps in `team`) and its binding; bob may create
/// and approve requests as far as the resource goes, but holds `approve` on no signer.
const SETUP: &str = r#"
apiVersion: v1
kind: Namespace
metadata: {name: team}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata: {name: cm-reader, namespace: team}
rules:
- apiGroups: [""]
  resources: [configmaps]
  verbs: [get, list]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: alice-reads-cms, namespace: team}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: Role, name: cm-reader}
subjects:
- {apiGroup: rbac.authorization.k8s.io, kind: User, name: alice}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: csr-clerk}
rules:
- apiGroups: [certificates.k8s.io]
  resources: [certificatesigningrequests]
  verbs: [create, get, list, watch]
- apiGroups: [certificates.k8s.io]
  resources: [certificatesigningrequests/approval]
  verbs: [update]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: bob-is-a-clerk}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: csr-clerk}
subjects:
- {apiGroup: rbac.authorization.k8s.io, kind: User, name: bob}
"#;

/// A fresh EC key and a CSR for `subject` (openssl's `-subj` form), as PEM files in `dir`.
fn openssl_csr(dir: &Path, subject: &str) -> (PathBuf, String) {
    std::fs::create_dir_all(dir).unwrap();
    let key = dir.join("key.pem");
    let csr = dir.join("csr.pem");
    let status = Command::new("openssl")
        .args([
            "ecparam",
            "-name",
            "prime256v1",
            "-genkey",
            "-noout",
            "-out",
        ])
        .arg(&key)
        .status()
        .unwrap();
    assert!(status.success());
    let status = Command::new("openssl")
        .args(["req", "-new", "-subj", subject, "-key"])
        .arg(&key)
        .arg("-out")
        .arg(&csr)
        .status()
        .unwrap();
    assert!(status.success());
    (key, std::fs::read_to_string(csr).unwrap())
}

/// A CertificateSigningRequest manifest.
fn manifest(name: &str, request: &[u8], signer: &str, usages: &[&str], seconds: u32) -> String {
    let request = base64::engine::general_purpose::STANDARD.encode(request);
    let usages: Vec<String> = usages.iter().map(|u| format!("\"{u}\"")).collect();
    format!(
        "apiVersion: certificates.k8s.io/v1\nkind: CertificateSigningRequest\nmetadata:\n  name: {name}\nspec:\n  request: {request}\n  signerName: {signer}\n  expirationSeconds: {seconds}\n  usages: [{}]\n  username: mallory\n  groups: [system:masters]\n",
        usages.join(", ")
    )
}

fn create(bin: &str, config: &Path, dir: &Path, text: &str) -> std::process::Output {
    std::fs::create_dir_all(dir).unwrap();
    let path = dir.join("csr.yaml");
    std::fs::write(&path, text).unwrap();
    kubectl(bin, config, &["create", "-f", path.to_str().unwrap()])
}

/// `.status.certificate` of `name` decoded, once the signer wrote it.
fn wait_certificate(bin: &str, config: &Path, name: &str) -> String {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let out = ok(
            bin,
            config,
            &["get", "csr", name, "-o", "jsonpath={.status.certificate}"],
        );
        if !out.trim().is_empty() {
            let pem = base64::engine::general_purpose::STANDARD
                .decode(out.trim())
                .unwrap();
            return String::from_utf8(pem).unwrap();
        }
        assert!(Instant::now() < deadline, "{name} was never issued");
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// The CONDITION column of `kubectl get csr name`, once it is `wanted`.
fn wait_condition(bin: &str, config: &Path, name: &str, wanted: &str) -> String {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let table = ok(bin, config, &["get", "csr", name]);
        let row = table.lines().nth(1).unwrap_or_default().to_string();
        if row.split_whitespace().last() == Some(wanted) {
            return table;
        }
        assert!(Instant::now() < deadline, "{name}: {table}");
        std::thread::sleep(Duration::from_millis(200));
    }
}

fn kubeconfig(dir: &Path, server_url: &str, ca: &Path, cert: &str, key: &Path) -> PathBuf {
    std::fs::create_dir_all(dir).unwrap();
    let cert_path = dir.join("c.crt");
    std::fs::write(&cert_path, cert).unwrap();
    let text = format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n    server: {server_url}\n    certificate-authority: {}\nusers:\n- name: u\n  user:\n    client-certificate: {}\n    client-key: {}\ncontexts:\n- name: c\n  context:\n    cluster: c\n    user: u\ncurrent-context: c\n",
        ca.display(),
        cert_path.display(),
        key.display()
    );
    let path = dir.join("kubeconfig");
    std::fs::write(&path, text).unwrap();
    path
}

fn token_kubeconfig(dir: &Path, server_url: &str, ca: &Path, token: &str) -> PathBuf {
    std::fs::create_dir_all(dir).unwrap();
    let text = format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n    server: {server_url}\n    certificate-authority: {}\nusers:\n- name: u\n  user:\n    token: {token}\ncontexts:\n- name: c\n  context:\n    cluster: c\n    user: u\ncurrent-context: c\n",
        ca.display()
    );
    let path = dir.join("kubeconfig");
    std::fs::write(&path, text).unwrap();
    path
}

/// Seconds the PEM certificate is valid for.
fn lifetime(pem: &str) -> i64 {
    let (_, block) = x509_parser::pem::parse_x509_pem(pem.as_bytes()).unwrap();
    let cert = block.parse_x509().unwrap();
    cert.validity().not_after.timestamp() - cert.validity().not_before.timestamp()
}

#[test]
fn an_approved_request_yields_a_certificate_that_gets_exactly_its_roles() {
    let tmp = tempfile::tempdir().unwrap();
    let tokens = tmp.path().join("tokens.csv");
    std::fs::write(&tokens, "bob-token-0123456789,bob,1002,\"clerks\"\n").unwrap();
    let server = Server::start(&["--token-auth-file", tokens.to_str().unwrap()]);
    let admin = server.kubeconfig_path();
    let out = apply(KUBECTL_1_33, &admin, SETUP);
    assert!(out.status.success(), "{}", stderr(&out));
    let ca = server.data_dir.join("ca.crt");
    let bob = token_kubeconfig(
        &tmp.path().join("bob"),
        &server.url(),
        &ca,
        "bob-token-0123456789",
    );
    let admin_name = ok(
        KUBECTL_1_33,
        &admin,
        &[
            "auth",
            "whoami",
            "-o",
            "jsonpath={.status.userInfo.username}",
        ],
    );

    for (n, bin) in KUBECTLS.iter().enumerate() {
        let dir = tmp.path().join(format!("k{n}"));
        let name = format!("alice-{n}");
        let (key, request) = openssl_csr(&dir.join("alice"), "/CN=alice/O=devs");
        let text = manifest(
            &name,
            request.as_bytes(),
            "kubernetes.io/kube-apiserver-client",
            &["client auth"],
            86_400,
        );
        let out = create(bin, &admin, &dir.join("alice"), &text);
        assert!(out.status.success(), "{bin}: {}", stderr(&out));

        // The requestor is who created it, whatever the body claimed.
        let username = ok(
            bin,
            &admin,
            &["get", "csr", &name, "-o", "jsonpath={.spec.username}"],
        );
        assert_eq!(username, admin_name, "{bin}");
        assert_ne!(username, "mallory", "{bin}");
        let table = ok(bin, &admin, &["get", "csr", &name]);
        let mut lines = table.lines();
        let header: Vec<&str> = lines.next().unwrap().split_whitespace().collect();
        assert_eq!(
            header,
            [
                "NAME",
                "AGE",
                "SIGNERNAME",
                "REQUESTOR",
                "REQUESTEDDURATION",
                "CONDITION"
            ],
            "{bin}: {table}"
        );
        let row: Vec<&str> = lines.next().unwrap().split_whitespace().collect();
        assert_eq!(
            (row[0], row[2], row[3], row[4], row[5]),
            (
                name.as_str(),
                "kubernetes.io/kube-apiserver-client",
                admin_name.as_str(),
                "24h",
                "Pending"
            ),
            "{bin}: {table}"
        );

        // bob may update the approval subresource but holds `approve` on no signer.
        let out = kubectl(bin, &bob, &["certificate", "approve", &name]);
        assert!(!out.status.success(), "{bin}");
        assert!(
            stderr(&out).contains(&format!(r#"certificatesigningrequests.certificates.k8s.io "{name}" is forbidden: user not permitted to approve requests with signerName "kubernetes.io/kube-apiserver-client""#)),
            "{bin}: {}",
            stderr(&out)
        );

        let out = ok(bin, &admin, &["certificate", "approve", &name]);
        assert!(out.contains("approved"), "{bin}: {out}");
        let cert = wait_certificate(bin, &admin, &name);
        assert_eq!(
            lifetime(&cert),
            86_400 + 300,
            "{bin}: valid from 5 minutes ago for the requested day"
        );
        wait_condition(bin, &admin, &name, "Approved,Issued");

        let alice = kubeconfig(&dir.join("alice-config"), &server.url(), &ca, &cert, &key);
        // kubectl 1.27 asks for SelfSubjectReview in v1alpha1/v1beta1 only; v1 is served.
        let whoami = ok(KUBECTL_1_33, &alice, &["auth", "whoami"]);
        assert!(
            whoami.contains("alice") && whoami.contains("devs"),
            "{bin}: {whoami}"
        );
        ok(bin, &alice, &["get", "configmaps", "-n", "team"]);
        let out = kubectl(bin, &alice, &["get", "secrets", "-n", "team"]);
        assert!(!out.status.success(), "{bin}");
        assert!(
            stderr(&out).contains(r#"Error from server (Forbidden): secrets is forbidden: User "alice" cannot list resource "secrets" in API group "" in the namespace "team""#),
            "{bin}: {}",
            stderr(&out)
        );

        // A request that is no CSR: 422 with kube-apiserver's text.
        let text = manifest(
            &format!("garbage-{n}"),
            b"hello",
            "kubernetes.io/kube-apiserver-client",
            &["client auth"],
            3600,
        );
        let out = create(bin, &admin, &dir.join("garbage"), &text);
        assert!(!out.status.success(), "{bin}");
        assert!(
            stderr(&out).contains(&format!(r#"The CertificateSigningRequest "garbage-{n}" is invalid: spec.request: Invalid value: []byte{{0x68, 0x65, 0x6c, 0x6c, 0x6f}}: PEM block type must be CERTIFICATE REQUEST"#)),
            "{bin}: {}",
            stderr(&out)
        );
        // Too short a lifetime and a signer name that is not qualified.
        let text = manifest(
            &format!("short-{n}"),
            request.as_bytes(),
            "nobody",
            &["client auth"],
            60,
        );
        let out = create(bin, &admin, &dir.join("short"), &text);
        let err = stderr(&out);
        assert!(
            err.contains(r#"spec.signerName: Invalid value: "nobody": must be a fully qualified domain and path of the form 'example.com/signer-name'"#)
                && err.contains("spec.expirationSeconds: Invalid value: 60: may not specify a duration less than 600 seconds (10 minutes)"),
            "{bin}: {err}"
        );

        // A signer nobody runs: approved, never issued.
        let other = format!("other-signer-{n}");
        let text = manifest(
            &other,
            request.as_bytes(),
            "example.com/nobody",
            &["client auth"],
            3600,
        );
        let out = create(bin, &admin, &dir.join("other"), &text);
        assert!(out.status.success(), "{bin}: {}", stderr(&out));
        ok(bin, &admin, &["certificate", "approve", &other]);

        // The kubelet signer for a subject that is no node: Failed with the signer's reason.
        let (_, node_request) = openssl_csr(&dir.join("node"), "/CN=alice/O=system:nodes");
        let kubelet = format!("not-a-node-{n}");
        let text = manifest(
            &kubelet,
            node_request.as_bytes(),
            "kubernetes.io/kube-apiserver-client-kubelet",
            &["digital signature", "client auth"],
            3600,
        );
        let out = create(bin, &admin, &dir.join("node"), &text);
        assert!(out.status.success(), "{bin}: {}", stderr(&out));
        ok(bin, &admin, &["certificate", "approve", &kubelet]);
        wait_condition(bin, &admin, &kubelet, "Approved,Failed");
        let reason = ok(
            bin,
            &admin,
            &[
                "get",
                "csr",
                &kubelet,
                "-o",
                r#"jsonpath={.status.conditions[?(@.type=="Failed")].reason}: {.status.conditions[?(@.type=="Failed")].message}"#,
            ],
        );
        assert_eq!(
            reason, "SignerValidationFailure: subject common name does not begin with system:node:",
            "{bin}"
        );
        assert_eq!(
            ok(
                bin,
                &admin,
                &[
                    "get",
                    "csr",
                    &kubelet,
                    "-o",
                    "jsonpath={.status.certificate}"
                ]
            ),
            ""
        );

        // By now the signer has long handled the other signer's request: it is left alone.
        let table = wait_condition(bin, &admin, &other, "Approved");
        assert!(table.contains("example.com/nobody"), "{bin}: {table}");
        assert_eq!(
            ok(
                bin,
                &admin,
                &["get", "csr", &other, "-o", "jsonpath={.status.certificate}"]
            ),
            ""
        );
    }
}

#[test]
fn the_certificate_works_against_every_server_of_a_cluster() {
    let mut cluster = cluster_support::Cluster::start(3);
    let rt = support::runtime();
    let leader = rt.block_on(cluster.wait_leader());
    let follower = (0..3).find(|&i| i != leader).unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let data0 = cluster.members[0].data_dir.clone();
    let ca = data0.join("ca.crt");
    let token = std::fs::read_to_string(data0.join("admin-token")).unwrap();
    let admin = token_kubeconfig(
        &tmp.path().join("admin"),
        &cluster.url(follower),
        &ca,
        token.trim(),
    );
    let out = apply(KUBECTL_1_33, &admin, SETUP);
    assert!(out.status.success(), "{}", stderr(&out));
    let (key, request) = openssl_csr(&tmp.path().join("alice"), "/CN=alice/O=devs");
    let text = manifest(
        "alice",
        request.as_bytes(),
        "kubernetes.io/kube-apiserver-client",
        &["client auth", "digital signature"],
        3600,
    );
    let out = create(KUBECTL_1_33, &admin, &tmp.path().join("alice"), &text);
    assert!(out.status.success(), "{}", stderr(&out));
    ok(KUBECTL_1_33, &admin, &["certificate", "approve", "alice"]);
    let cert = wait_certificate(KUBECTL_1_33, &admin, "alice");
    for i in 0..3 {
        let config = kubeconfig(
            &tmp.path().join(format!("alice{i}")),
            &cluster.url(i),
            &ca,
            &cert,
            &key,
        );
        let whoami = ok(KUBECTL_1_33, &config, &["auth", "whoami"]);
        assert!(
            whoami.contains("alice") && whoami.contains("devs"),
            "server {i}: {whoami}"
        );
        ok(KUBECTL_1_33, &config, &["get", "configmaps", "-n", "team"]);
        let out = kubectl(KUBECTL_1_33, &config, &["get", "secrets", "-n", "team"]);
        assert!(
            stderr(&out)
                .contains(r#"secrets is forbidden: User "alice" cannot list resource "secrets""#),
            "server {i}: {}",
            stderr(&out)
        );
    }
}

/// A `kube-apiserver-client-kubelet` request (the usages a node asks for, no duration).
fn node_manifest(name: &str, request: &[u8]) -> String {
    let request = base64::engine::general_purpose::STANDARD.encode(request);
    format!(
        "apiVersion: certificates.k8s.io/v1\nkind: CertificateSigningRequest\nmetadata:\n  name: {name}\nspec:\n  request: {request}\n  signerName: kubernetes.io/kube-apiserver-client-kubelet\n  usages: [\"digital signature\", \"client auth\"]\n"
    )
}

#[test]
fn a_node_gets_its_own_certificate_approved_and_not_another_nodes() {
    let server = Server::start(&[]);
    let admin = server.kubeconfig_path();
    let tmp = tempfile::tempdir().unwrap();
    for bin in KUBECTLS {
        let v = bin.rsplit('.').next().unwrap_or("x");
        let (n1, n2) = (format!("n1-{v}"), format!("n2-{v}"));
        // n1's first certificate, asked for by the admin (as a join would) and approved.
        let dir = tmp.path().join(format!("first-{v}"));
        let (key, request) = openssl_csr(&dir, &format!("/CN=system:node:{n1}/O=system:nodes"));
        let first = format!("first-{v}");
        let out = create(
            bin,
            &admin,
            &dir,
            &node_manifest(&first, request.as_bytes()),
        );
        assert!(out.status.success(), "{}", stderr(&out));
        let cert = wait_certificate(bin, &admin, &first);
        let node = kubeconfig(&dir, &server.url(), &server.ca_cert(), &cert, &key);
        // kubectl 1.27 asks for the SelfSubjectReview's beta version.
        let whoami = ok(
            KUBECTL_1_33,
            &node,
            &[
                "auth",
                "whoami",
                "-o",
                "jsonpath={.status.userInfo.username}",
            ],
        );
        assert_eq!(whoami, format!("system:node:{n1}"));

        // Renewing: n1 asks for n1 and gets it without anyone approving.
        let dir = tmp.path().join(format!("renew-{v}"));
        let (_, request) = openssl_csr(&dir, &format!("/CN=system:node:{n1}/O=system:nodes"));
        let renew = format!("renew-{v}");
        let out = create(bin, &node, &dir, &node_manifest(&renew, request.as_bytes()));
        assert!(out.status.success(), "{}", stderr(&out));
        wait_condition(bin, &admin, &renew, "Approved,Issued");
        let approved = ok(
            bin,
            &admin,
            &[
                "get",
                "csr",
                &renew,
                "-o",
                "jsonpath={.status.conditions[0].reason}: {.status.conditions[0].message}",
            ],
        );
        assert_eq!(
            approved,
            "AutoApproved: Auto approving self kubelet client certificate after SubjectAccessReview."
        );

        // n1 asking for n2's certificate is left pending.
        let dir = tmp.path().join(format!("steal-{v}"));
        let (_, request) = openssl_csr(&dir, &format!("/CN=system:node:{n2}/O=system:nodes"));
        let steal = format!("steal-{v}");
        let out = create(bin, &node, &dir, &node_manifest(&steal, request.as_bytes()));
        assert!(out.status.success(), "{}", stderr(&out));
        // The approver saw it long before the renewal above was issued; give it a moment more.
        std::thread::sleep(Duration::from_secs(2));
        let table = ok(bin, &admin, &["get", "csr", &steal]);
        let row = table.lines().nth(1).unwrap_or_default().to_string();
        assert_eq!(row.split_whitespace().last(), Some("Pending"), "{table}");
    }
}
