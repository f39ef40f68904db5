//! kubectl 1.33 sends built-in kinds as Kubernetes protobuf (client-go ≥ 1.32); kubectl 1.27
//! sends JSON. The same `kubectl create ...` commands through both must store the same objects.

mod support;

use std::process::Output;

use serde_json::Value;

const NEW: &str = "/usr/lib/google-cloud-sdk/bin/kubectl.1.33";
const OLD: &str = "/usr/lib/google-cloud-sdk/bin/kubectl.1.27";

fn run(server: &support::Server, kubectl: &str, args: &[&str]) -> Output {
    let out = std::process::Command::new(kubectl)
        .arg("--kubeconfig")
        .arg(server.kubeconfig_path())
        .args(args)
        .output()
        .expect("run kubectl");
    assert!(
        out.status.success(),
        "{kubectl} {args:?} failed: {}\nserver logs:\n{}",
        String::from_utf8_lossy(&out.stderr),
        server.logs()
    );
    out
}

fn get(server: &support::Server, args: &[&str]) -> Value {
    let mut all = args.to_vec();
    all.extend(["-o", "json"]);
    let out = run(server, NEW, &all);
    serde_json::from_slice(&out.stdout).expect("kubectl get -o json")
}

/// The object without what differs between any two creations, with the namespace (and the
/// namespace's own name) replaced by a placeholder.
fn normalize(mut v: Value, ns: &str) -> String {
    if let Some(meta) = v.get_mut("metadata").and_then(Value::as_object_mut) {
        for k in [
            "uid",
            "resourceVersion",
            "creationTimestamp",
            "managedFields",
        ] {
            meta.remove(k);
        }
    }
    if let Some(spec) = v.get_mut("spec").and_then(Value::as_object_mut) {
        for k in ["clusterIP", "clusterIPs"] {
            spec.remove(k);
        }
    }
    // Conditions a controller wrote (the scheduler's PodScheduled) carry the second they were
    // written, which two creates need not share.
    if let Some(conditions) = v
        .pointer_mut("/status/conditions")
        .and_then(Value::as_array_mut)
    {
        for c in conditions.iter_mut().filter_map(Value::as_object_mut) {
            c.remove("lastTransitionTime");
        }
    }
    let text = serde_json::to_string(&v)
        .unwrap_or_default()
        .replace(&format!("\"{ns}\""), "\"NS\"");
    // A pod's token volume has a random suffix (`kube-api-access-xxxxx`).
    let prefix = "kube-api-access-";
    let mut out = String::with_capacity(text.len());
    let mut rest = text.as_str();
    while let Some(at) = rest.find(prefix) {
        let after = at + prefix.len();
        out.push_str(&rest[..after]);
        out.push_str("SUFFIX");
        rest = rest[after..].get(5..).unwrap_or("");
    }
    out.push_str(rest);
    out
}

#[test]
fn protobuf_creates_match_json_creates() {
    let server = support::Server::start(&[]);
    let dir = tempfile::tempdir().expect("temp dir");
    let bin = dir.path().join("blob");
    std::fs::write(&bin, [0u8, 1, 2, 0xfe, 0xff, b'\n']).expect("write blob");
    let from_file = format!("--from-file=blob={}", bin.display());

    // The new client really sends protobuf.
    let verbose = run(&server, NEW, &["create", "namespace", "pb", "-v=8"]);
    let log = String::from_utf8_lossy(&verbose.stderr);
    assert!(
        log.contains("Content-Type: application/vnd.kubernetes.protobuf")
            || log.contains("Content-Type\" value=\"application/vnd.kubernetes.protobuf"),
        "kubectl 1.33 did not send protobuf:\n{log}"
    );
    run(&server, OLD, &["create", "namespace", "js"]);

    let commands: Vec<(Vec<&str>, [&str; 2])> = vec![
        (
            vec![
                "create",
                "configmap",
                "cm",
                "--from-literal=a=b",
                &from_file,
            ],
            ["configmap", "cm"],
        ),
        (
            vec![
                "create",
                "secret",
                "generic",
                "s",
                "--from-literal=user=pw",
                &from_file,
            ],
            ["secret", "s"],
        ),
        (
            vec!["create", "serviceaccount", "sa"],
            ["serviceaccount", "sa"],
        ),
        (
            vec![
                "create",
                "service",
                "clusterip",
                "svc",
                "--tcp=80:8080",
                "--tcp=443:https",
            ],
            ["service", "svc"],
        ),
        (
            vec![
                "run",
                "p",
                "--image=nginx",
                "--port=80",
                "--labels=app=web",
                "--env=A=1",
                r#"--overrides={"spec":{"containers":[{"name":"p","image":"nginx","resources":{"limits":{"cpu":"500m","memory":"64Mi"}}}]}}"#,
            ],
            ["pod", "p"],
        ),
    ];
    for (args, [kind, name]) in &commands {
        for (kubectl, ns) in [(NEW, "pb"), (OLD, "js")] {
            let mut all = args.clone();
            all.extend(["-n", ns]);
            run(&server, kubectl, &all);
        }
        let pb = normalize(get(&server, &["get", kind, name, "-n", "pb"]), "pb");
        let js = normalize(get(&server, &["get", kind, name, "-n", "js"]), "js");
        assert_eq!(
            pb, js,
            "{kind}/{name} differs between protobuf and JSON creates"
        );
    }
    let ns_pb = normalize(get(&server, &["get", "namespace", "pb"]), "pb");
    let ns_js = normalize(get(&server, &["get", "namespace", "js"]), "js");
    assert_eq!(ns_pb, ns_js);

    // Spot checks of the protobuf-created objects' content.
    let cm = get(&server, &["get", "configmap", "cm", "-n", "pb"]);
    assert_eq!(cm["data"]["a"], "b");
    assert_eq!(cm["binaryData"]["blob"], "AAEC/v8K");
    let secret = get(&server, &["get", "secret", "s", "-n", "pb"]);
    assert_eq!(secret["data"]["user"], "cHc=");
    assert_eq!(secret["type"], "Opaque");
    let svc = get(&server, &["get", "service", "svc", "-n", "pb"]);
    assert_eq!(svc["spec"]["ports"][0]["targetPort"], 8080);
    assert_eq!(svc["spec"]["ports"][1]["targetPort"], "https");

    // Deleting through the new client sends protobuf DeleteOptions.
    run(
        &server,
        NEW,
        &[
            "delete",
            "configmap",
            "cm",
            "-n",
            "pb",
            "--grace-period=0",
            "--force",
        ],
    );
    let gone = std::process::Command::new(NEW)
        .arg("--kubeconfig")
        .arg(server.kubeconfig_path())
        .args(["get", "configmap", "cm", "-n", "pb"])
        .output()
        .expect("run kubectl");
    assert!(!gone.status.success());
}
