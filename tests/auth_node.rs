//! The Node authorizer and NodeRestriction against the real server, with kubectl 1.33 and a
//! node certificate (`system:node:n1` in `system:nodes`, signed by the cluster CA, as an
//! agent holds one): the node reads the secrets and configmaps its pods use and nothing else,
//! gets service-account tokens only for its pods, and writes only its own Node, Lease and
//! pods' status, with kube-apiserver's refusal texts.

mod support;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use support::Server;

const KUBECTL: &str = "/usr/lib/google-cloud-sdk/bin/kubectl.1.33";

const SETUP: &str = r#"
apiVersion: v1
kind: Namespace
metadata: {name: team}
---
apiVersion: v1
kind: Node
metadata: {name: n1}
---
apiVersion: v1
kind: Node
metadata: {name: n2}
---
apiVersion: v1
kind: ServiceAccount
metadata: {name: sa1, namespace: team}
---
apiVersion: v1
kind: ServiceAccount
metadata: {name: sa2, namespace: team}
---
apiVersion: v1
kind: Secret
metadata: {name: used, namespace: team}
stringData: {k: v}
---
apiVersion: v1
kind: Secret
metadata: {name: unused, namespace: team}
stringData: {k: v}
---
apiVersion: v1
kind: Secret
metadata: {name: elsewhere, namespace: team}
stringData: {k: v}
---
apiVersion: v1
kind: ConfigMap
metadata: {name: env, namespace: team}
data: {k: v}
---
apiVersion: v1
kind: Pod
metadata: {name: p1, namespace: team}
spec:
  nodeName: n1
  serviceAccountName: sa1
  volumes: [{name: s, secret: {secretName: used}}]
  containers: [{name: c, image: busybox, envFrom: [{configMapRef: {name: env}}]}]
---
apiVersion: v1
kind: Pod
metadata: {name: p2, namespace: team}
spec:
  nodeName: n2
  serviceAccountName: sa2
  volumes: [{name: s, secret: {secretName: elsewhere}}]
  containers: [{name: c, image: busybox}]
"#;

fn kubectl(kubeconfig: &Path, args: &[&str]) -> Output {
    support::kubectl::run(KUBECTL, kubeconfig, args)
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).trim().to_string()
}

fn ok(kubeconfig: &Path, args: &[&str]) -> String {
    support::kubectl::ok(KUBECTL, kubeconfig, args)
}

fn refused(kubeconfig: &Path, args: &[&str], message: &str) {
    let out = kubectl(kubeconfig, args);
    assert!(!out.status.success(), "{args:?} succeeded");
    assert_eq!(stderr(&out), message, "{args:?}");
}

fn apply(kubeconfig: &Path, manifest: &str) {
    let out = support::kubectl::apply(KUBECTL, kubeconfig, manifest);
    assert!(out.status.success(), "apply: {}", stderr(&out));
}

/// A kubeconfig with a certificate for `system:node:<node>` signed by the cluster CA.
fn node_kubeconfig(server: &Server, dir: &Path, node: &str) -> PathBuf {
    let data = &server.data_dir;
    let ca_key =
        rcgen::KeyPair::from_pem(&std::fs::read_to_string(data.join("ca.key")).unwrap()).unwrap();
    let ca = rcgen::CertificateParams::from_ca_cert_pem(
        &std::fs::read_to_string(data.join("ca.crt")).unwrap(),
    )
    .unwrap()
    .self_signed(&ca_key)
    .unwrap();
    let key = rcgen::KeyPair::generate().unwrap();
    let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
    params
        .distinguished_name
        .push(rcgen::DnType::CommonName, format!("system:node:{node}"));
    params
        .distinguished_name
        .push(rcgen::DnType::OrganizationName, "system:nodes");
    params.extended_key_usages = vec![rcgen::ExtendedKeyUsagePurpose::ClientAuth];
    let cert = params.signed_by(&key, &ca, &ca_key).unwrap();
    std::fs::create_dir_all(dir).unwrap();
    std::fs::write(dir.join("n.crt"), cert.pem()).unwrap();
    std::fs::write(dir.join("n.key"), key.serialize_pem()).unwrap();
    let text = format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n    server: {}\n    certificate-authority: {}\nusers:\n- name: u\n  user:\n    client-certificate: {}\n    client-key: {}\ncontexts:\n- name: c\n  context:\n    cluster: c\n    user: u\ncurrent-context: c\n",
        server.url(),
        data.join("ca.crt").display(),
        dir.join("n.crt").display(),
        dir.join("n.key").display(),
    );
    let path = dir.join("kubeconfig");
    std::fs::write(&path, text).unwrap();
    path
}

#[test]
fn a_node_reaches_only_what_its_pods_use_and_writes_only_its_own() {
    let tmp = tempfile::tempdir().unwrap();
    let server = Server::start(&[]);
    let admin = server.kubeconfig_path();
    apply(&admin, SETUP);
    let n1 = node_kubeconfig(&server, &tmp.path().join("n1"), "n1");
    let team = ["-n", "team"];
    let with = |args: &[&'static str]| [args, &team[..]].concat();

    // Reads: what p1 uses, nothing else.
    ok(&n1, &with(&["get", "secret", "used"]));
    ok(&n1, &with(&["get", "configmap", "env"]));
    ok(&n1, &with(&["get", "pods"]));
    let no_relationship = ": no relationship found between node 'n1' and this object";
    for secret in ["unused", "elsewhere"] {
        refused(
            &n1,
            &with(&["get", "secret", secret]),
            &format!(
                "Error from server (Forbidden): secrets {secret:?} is forbidden: User \"system:node:n1\" cannot get resource \"secrets\" in API group \"\" in the namespace \"team\"{no_relationship}"
            ),
        );
    }
    refused(
        &n1,
        &with(&["get", "secrets"]),
        "Error from server (Forbidden): secrets is forbidden: User \"system:node:n1\" cannot list resource \"secrets\" in API group \"\" in the namespace \"team\": can only read individual secrets",
    );

    // Tokens: only for its pods' accounts, bound to its pods.
    ok(
        &n1,
        &with(&[
            "create",
            "token",
            "sa1",
            "--bound-object-kind=Pod",
            "--bound-object-name=p1",
        ]),
    );
    refused(
        &n1,
        &with(&["create", "token", "sa1"]),
        "error: failed to create token: serviceaccounts \"sa1\" is forbidden: node requested token not bound to a pod",
    );
    refused(
        &n1,
        &with(&["create", "token", "sa2"]),
        &format!("error: failed to create token: serviceaccounts \"sa2\" is forbidden: User \"system:node:n1\" cannot create resource \"serviceaccounts/token\" in API group \"\" in the namespace \"team\"{no_relationship}"),
    );

    // Writes: its own Node, Lease and pods' status.
    ok(&n1, &["label", "node", "n1", "a=b"]);
    refused(
        &n1,
        &["label", "node", "n2", "a=b"],
        "Error from server (Forbidden): nodes \"n2\" is forbidden: node \"n1\" is not allowed to modify node \"n2\"",
    );
    // kubectl patch --subresource reads the subresource first, which a node may not; the agent
    // patches it directly, as here.
    let patch_status = |pod: &str| {
        let dir = tmp.path().join("n1");
        let out = Command::new("curl")
            .args(["-sS", "--max-time", "20", "-X", "PATCH", "--cacert"])
            .arg(server.data_dir.join("ca.crt"))
            .arg("--cert")
            .arg(dir.join("n.crt"))
            .arg("--key")
            .arg(dir.join("n.key"))
            .args([
                "-H",
                "Content-Type: application/merge-patch+json",
                "-d",
                r#"{"status":{"message":"hello"}}"#,
                "-w",
                "\n%{http_code}",
            ])
            .arg(format!(
                "{}/api/v1/namespaces/team/pods/{pod}/status",
                server.url()
            ))
            .output()
            .expect("run curl");
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        let (body, code) = text.rsplit_once('\n').unwrap_or((&text, ""));
        (code.to_string(), body.to_string())
    };
    let (code, body) = patch_status("p1");
    assert_eq!(code, "200", "{body}");
    let (code, body) = patch_status("p2");
    assert_eq!(code, "403", "{body}");
    assert!(
        body.contains(r#"pods \"p2\" is forbidden: node \"n1\" can only update pod status for pods with spec.nodeName set to itself"#),
        "{body}"
    );
    refused(
        &n1,
        &with(&["delete", "pod", "p2"]),
        "Error from server (Forbidden): pods \"p2\" is forbidden: node \"n1\" can only delete pods with spec.nodeName set to itself",
    );
    let lease = |name: &str| {
        format!(
            "apiVersion: coordination.k8s.io/v1\nkind: Lease\nmetadata: {{name: {name}, namespace: kube-node-lease}}\nspec: {{holderIdentity: {name}}}\n"
        )
    };
    let leases = tmp.path().join("leases");
    std::fs::create_dir_all(&leases).unwrap();
    for name in ["n1", "n2"] {
        std::fs::write(leases.join(format!("{name}.yaml")), lease(name)).unwrap();
    }
    let n1_lease = leases.join("n1.yaml");
    let n2_lease = leases.join("n2.yaml");
    ok(&n1, &["create", "-f", n1_lease.to_str().unwrap()]);
    let out = kubectl(&n1, &["create", "-f", n2_lease.to_str().unwrap()]);
    assert!(
        stderr(&out).ends_with(r#"leases.coordination.k8s.io "n2" is forbidden: can only access node lease with the same name as the requesting node"#),
        "{}",
        stderr(&out)
    );
}
