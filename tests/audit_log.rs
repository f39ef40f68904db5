//! The audit log against the real server (docs/guarantees.md, Audit log), with kubectl 1.27
//! and 1.33: a create at Request level carries its body, a Secret read at Metadata level
//! carries none, a 403 is recorded with its Status and the `forbid` decision, a 401 without
//! a user, a watch is
//! recorded when its answer starts and when it ends, impersonation names both users, the log
//! rotates into kube-apiserver's backup names, and an invalid policy stops start-up naming
//! the file and the reason. On a 3-server cluster a write sent to a follower is recorded by
//! that follower alone, not by the leader it is forwarded to, with the annotations the
//! leader's authorization and PodSecurity admission made.

mod cluster_support;
mod support;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;
use support::kubectl::{apply, ok, run as kubectl, stderr};
use support::Server;

const KUBECTLS: [&str; 2] = [
    "/usr/lib/google-cloud-sdk/bin/kubectl.1.27",
    "/usr/lib/google-cloud-sdk/bin/kubectl.1.33",
];

const POLICY: &str = r#"
apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: ["RequestReceived"]
rules:
  - level: None
    nonResourceURLs: ["/openapi*", "/api", "/apis*", "/version"]
  - level: Metadata
    resources:
      - group: ""
        resources: ["secrets"]
  - level: RequestResponse
    resources:
      - group: ""
        resources: ["configmaps"]
    omitManagedFields: true
  - level: Request
    verbs: ["create", "update", "patch", "delete"]
  - level: Metadata
"#;

/// Every event in the log and its backups, oldest file first.
fn events(dir: &Path) -> Vec<Value> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| {
            p.file_name()
                .unwrap()
                .to_string_lossy()
                .starts_with("audit")
        })
        .collect();
    // Backups sort by their time; the live file (`audit.log`) sorts last.
    files.sort_by_key(|p| {
        let name = p.file_name().unwrap().to_string_lossy().into_owned();
        (name == "audit.log", name)
    });
    files
        .iter()
        .flat_map(|f| {
            std::fs::read_to_string(f)
                .unwrap()
                .lines()
                .map(|l| serde_json::from_str::<Value>(l).expect("a JSON line"))
                .collect::<Vec<_>>()
        })
        .collect()
}

/// Waits until the log holds an event `matches` accepts.
fn wait_for(dir: &Path, what: &str, matches: impl Fn(&Value) -> bool) -> Value {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        if let Some(e) = events(dir).into_iter().find(|e| matches(e)) {
            return e;
        }
        if Instant::now() > deadline {
            let all: Vec<String> = events(dir).iter().map(Value::to_string).collect();
            panic!("no audit event for {what}; the log:\n{}", all.join("\n"));
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn is(e: &Value, stage: &str, verb: &str, resource: &str, name: &str) -> bool {
    e["stage"] == stage
        && e["verb"] == verb
        && e["objectRef"]["resource"] == resource
        && (name.is_empty() || e["objectRef"]["name"] == name)
}

fn token_kubeconfig(dir: &Path, server: &Server, token: &str) -> PathBuf {
    let path = dir.join("bob.kubeconfig");
    std::fs::write(
        &path,
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n    server: {}\n    certificate-authority: {}\nusers:\n- name: u\n  user:\n    token: {token}\ncontexts:\n- name: c\n  context:\n    cluster: c\n    user: u\ncurrent-context: c\n",
            server.url(),
            server.ca_cert().display()
        ),
    )
    .unwrap();
    path
}

#[test]
fn requests_are_recorded_as_the_policy_says() {
    let tmp = tempfile::tempdir().unwrap();
    let logs = tmp.path().join("logs");
    let policy = tmp.path().join("policy.yaml");
    std::fs::write(&policy, POLICY).unwrap();
    let tokens = tmp.path().join("tokens.csv");
    std::fs::write(&tokens, "bob-token-0123456789,bob,1001,\"viewers\"\n").unwrap();
    let log = logs.join("audit.log");
    let server = Server::start(&[
        "--token-auth-file",
        tokens.to_str().unwrap(),
        "--audit-policy-file",
        policy.to_str().unwrap(),
        "--audit-log-path",
        log.to_str().unwrap(),
        "--audit-log-maxsize",
        "1",
        "--audit-log-maxbackup",
        "2",
    ]);
    let admin = server.kubeconfig_path();
    let bob = token_kubeconfig(tmp.path(), &server, "bob-token-0123456789");
    ok(
        KUBECTLS[1],
        &admin,
        &[
            "create",
            "secret",
            "generic",
            "s",
            "--from-literal=password=hunter2",
        ],
    );

    for (i, bin) in KUBECTLS.iter().enumerate() {
        // A create at Request level: the body, no response body.
        let sa = format!("sa-{i}");
        ok(bin, &admin, &["create", "serviceaccount", &sa]);
        let e = wait_for(&logs, "the create", |e| {
            is(e, "ResponseComplete", "create", "serviceaccounts", &sa)
        });
        assert_eq!(e["apiVersion"], "audit.k8s.io/v1", "{e}");
        assert_eq!(e["kind"], "Event");
        assert_eq!(e["level"], "Request");
        assert_eq!(e["requestObject"]["metadata"]["name"], sa.as_str(), "{e}");
        assert!(e.get("responseObject").is_none(), "{e}");
        assert_eq!(e["responseStatus"]["code"], 201);
        assert_eq!(e["user"]["username"], "admin");
        assert_eq!(e["sourceIPs"], serde_json::json!(["127.0.0.1"]));
        assert!(
            e["userAgent"].as_str().unwrap().starts_with("kubectl"),
            "{e}"
        );
        assert_eq!(e["objectRef"]["namespace"], "default");
        assert_eq!(e["objectRef"]["apiVersion"], "v1");
        assert_eq!(e["annotations"]["authorization.k8s.io/decision"], "allow");
        assert!(
            e["requestURI"].as_str().unwrap().starts_with(
                "/api/v1/namespaces/default/serviceaccounts?fieldManager=kubectl-create"
            ),
            "{e}"
        );
        let received = e["requestReceivedTimestamp"].as_str().unwrap();
        assert_eq!(
            received.len(),
            "2006-01-02T15:04:05.000000Z".len(),
            "{received}"
        );
        assert!(e["stageTimestamp"].as_str().unwrap() >= received);
        // RequestReceived is omitted by the policy.
        assert!(!events(&logs)
            .iter()
            .any(|e| e["stage"] == "RequestReceived"));

        // RequestResponse: both bodies, without managedFields.
        let cm = format!("cm-{i}");
        ok(
            bin,
            &admin,
            &["create", "configmap", &cm, "--from-literal=k=v"],
        );
        let e = wait_for(&logs, "the configmap", |e| {
            is(e, "ResponseComplete", "create", "configmaps", &cm)
        });
        assert_eq!(e["level"], "RequestResponse");
        assert_eq!(e["requestObject"]["data"]["k"], "v", "{e}");
        assert_eq!(e["responseObject"]["data"]["k"], "v", "{e}");
        assert!(e["responseObject"]["metadata"]["uid"].is_string(), "{e}");
        assert!(
            e["responseObject"]["metadata"]
                .get("managedFields")
                .is_none(),
            "{e}"
        );

        // A Secret read at Metadata level: no bodies.
        ok(bin, &admin, &["get", "secret", "s", "-o", "yaml"]);
        let e = wait_for(&logs, "the secret", |e| {
            is(e, "ResponseComplete", "get", "secrets", "s")
        });
        assert_eq!(e["level"], "Metadata");
        assert_eq!(e["responseStatus"]["code"], 200);
        assert!(e.get("requestObject").is_none() && e.get("responseObject").is_none());
        assert!(!std::fs::read_to_string(&log).unwrap().contains("hunter2"));

        // A 403: the Status in responseStatus, the forbid decision.
        let out = kubectl(bin, &bob, &["get", "pods", "-n", "kube-system"]);
        assert!(!out.status.success(), "{}", stderr(&out));
        let e = wait_for(&logs, "the 403", |e| {
            e["user"]["username"] == "bob" && is(e, "ResponseComplete", "list", "pods", "")
        });
        assert_eq!(e["responseStatus"]["code"], 403, "{e}");
        assert_eq!(e["responseStatus"]["reason"], "Forbidden", "{e}");
        assert_eq!(e["responseStatus"]["status"], "Failure", "{e}");
        assert!(
            e["responseStatus"]["message"]
                .as_str()
                .unwrap()
                .contains(r#"User "bob" cannot list resource "pods""#),
            "{e}"
        );
        assert_eq!(e["annotations"]["authorization.k8s.io/decision"], "forbid");
        assert_eq!(
            e["user"]["groups"],
            serde_json::json!(["viewers", "system:authenticated"])
        );

        // Impersonation: the user who asked and the one it acted as.
        ok(
            bin,
            &admin,
            &[
                "get",
                "namespaces",
                "--as=carol",
                "--as-group=system:masters",
            ],
        );
        let e = wait_for(&logs, "the impersonation", |e| {
            e["impersonatedUser"]["username"] == "carol"
                && is(e, "ResponseComplete", "list", "namespaces", "")
        });
        assert_eq!(e["user"]["username"], "admin");
        assert_eq!(e["impersonatedUser"]["groups"][0], "system:masters", "{e}");

        // A watch: ResponseStarted when it starts, ResponseComplete when it ends, one auditID.
        let before = events(&logs).len();
        let mut watch = Command::new(bin)
            .args([
                "--kubeconfig",
                admin.to_str().unwrap(),
                "get",
                "configmaps",
                "--watch",
            ])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let started = wait_for(&logs, "the watch starting", |e| {
            is(e, "ResponseStarted", "watch", "configmaps", "")
                && e["userAgent"].as_str().unwrap_or("").starts_with("kubectl")
                && !events(&logs)[..before].contains(e)
        });
        assert_eq!(started["responseStatus"]["code"], 200, "{started}");
        watch.kill().unwrap();
        watch.wait().unwrap();
        let done = wait_for(&logs, "the watch ending", |e| {
            e["auditID"] == started["auditID"] && e["stage"] == "ResponseComplete"
        });
        assert!(done.get("responseObject").is_none(), "{done}");
    }

    // A credential refused with 401: recorded without a user.
    let refused = server.https_get("/api/v1/namespaces/default/pods", Some("not-a-token"));
    assert_eq!(refused.status, 401, "{}", refused.body);
    let e = wait_for(&logs, "the 401", |e| {
        e["responseStatus"]["code"] == 401 && is(e, "ResponseComplete", "list", "pods", "")
    });
    assert_eq!(e["user"], serde_json::json!({}), "{e}");
    assert!(e.get("annotations").is_none(), "{e}");

    // Rotation: past 1 MB the log is renamed to audit-<time>.log, and two backups are kept.
    let big = "x".repeat(100_000);
    let mut manifest = String::new();
    for i in 0..15 {
        manifest.push_str(&format!(
            "---\napiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: big-{i}\ndata:\n  x: {big}\n"
        ));
    }
    let out = apply(KUBECTLS[1], &admin, &manifest);
    assert!(out.status.success(), "{}", stderr(&out));
    wait_for(&logs, "the last big configmap", |e| {
        is(e, "ResponseComplete", "create", "configmaps", "big-14")
    });
    let names: Vec<String> = std::fs::read_dir(&logs)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    let backups: Vec<&String> = names.iter().filter(|n| *n != "audit.log").collect();
    assert_eq!(backups.len(), 2, "{names:?}");
    for name in backups {
        // audit-2006-01-02T15-04-05.000.log
        let stamp = name
            .strip_prefix("audit-")
            .and_then(|n| n.strip_suffix(".log"))
            .unwrap_or_else(|| panic!("{name}"));
        assert!(
            chrono::NaiveDateTime::parse_from_str(stamp, "%Y-%m-%dT%H-%M-%S%.3f").is_ok(),
            "{name}"
        );
        let size = std::fs::metadata(logs.join(name)).unwrap().len();
        assert!(size <= 1 << 20, "{name}: {size}");
    }
    let mode =
        std::os::unix::fs::PermissionsExt::mode(&std::fs::metadata(&log).unwrap().permissions());
    assert_eq!(mode & 0o777, 0o600);
}

#[test]
fn an_invalid_policy_stops_the_start() {
    let tmp = tempfile::tempdir().unwrap();
    let policy = tmp.path().join("bad-policy.yaml");
    std::fs::write(
        &policy,
        "apiVersion: audit.k8s.io/v1\nkind: Policy\nrules:\n- level: Loud\n",
    )
    .unwrap();
    let addr = std::net::SocketAddr::from(([127, 0, 0, 1], support::free_port()));
    let out = Command::new("timeout")
        .arg("30")
        .arg(support::bin())
        .args(["apiserver", "--listen", &addr.to_string(), "--data-dir"])
        .arg(tmp.path().join("data"))
        .arg("--audit-policy-file")
        .arg(&policy)
        .arg("--audit-log-path")
        .arg(tmp.path().join("audit.log"))
        .output()
        .unwrap();
    assert!(!out.status.success());
    let text =
        String::from_utf8_lossy(&out.stderr).into_owned() + &String::from_utf8_lossy(&out.stdout);
    assert!(text.contains(&policy.display().to_string()), "{text}");
    assert!(
        text.contains("rules[0].level: Unsupported value: \"Loud\""),
        "{text}"
    );
    assert!(!tmp.path().join("audit.log").exists());
}

#[test]
fn a_forwarded_write_is_audited_once_by_the_server_the_client_reached() {
    let mut cluster = cluster_support::Cluster::start(3);
    let tmp = tempfile::tempdir().unwrap();
    let policy = tmp.path().join("policy.yaml");
    std::fs::write(
        &policy,
        "apiVersion: audit.k8s.io/v1\nkind: Policy\nrules:\n- level: Request\n  resources:\n  - group: \"\"\n    resources: [configmaps]\n- level: Metadata\n  resources:\n  - group: \"\"\n    resources: [pods]\n",
    )
    .unwrap();
    let log = |i: usize| tmp.path().join(format!("audit-{i}")).join("audit.log");
    // Every member restarts with its own audit log.
    for i in 0..3 {
        cluster.kill(i);
        let mut cmd = cluster.command(i);
        cmd.arg("--audit-policy-file")
            .arg(&policy)
            .arg("--audit-log-path")
            .arg(log(i));
        cluster.spawn_command(i, cmd);
        cluster.wait_ready(i);
    }
    let rt = support::runtime();
    let leader = rt.block_on(cluster.wait_leader());
    let follower = (0..3).find(|&i| i != leader).unwrap();
    let data0 = cluster.members[0].data_dir.clone();
    let token = std::fs::read_to_string(data0.join("admin-token")).unwrap();
    let config = tmp.path().join("admin.kubeconfig");
    std::fs::write(
        &config,
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n    server: {}\n    certificate-authority: {}\nusers:\n- name: u\n  user:\n    token: {}\ncontexts:\n- name: c\n  context:\n    cluster: c\n    user: u\ncurrent-context: c\n",
            cluster.url(follower),
            data0.join("ca.crt").display(),
            token.trim()
        ),
    )
    .unwrap();
    ok(
        KUBECTLS[1],
        &config,
        &["create", "configmap", "via-follower", "--from-literal=a=b"],
    );
    let dir = log(follower).parent().unwrap().to_path_buf();
    let e = wait_for(&dir, "the follower's event", |e| {
        is(
            e,
            "ResponseComplete",
            "create",
            "configmaps",
            "via-follower",
        )
    });
    assert_eq!(e["responseStatus"]["code"], 201, "{e}");
    assert_eq!(e["user"]["username"], "admin");
    assert_eq!(e["requestObject"]["data"]["a"], "b", "{e}");
    // The leader applied it, and wrote nothing about it.
    std::thread::sleep(Duration::from_millis(500));
    let leader_log = std::fs::read_to_string(log(leader)).unwrap_or_default();
    assert!(!leader_log.contains("via-follower"), "{leader_log}");
    let third = (0..3).find(|&i| i != leader && i != follower).unwrap();
    let third_log = std::fs::read_to_string(log(third)).unwrap_or_default();
    assert!(!third_log.contains("via-follower"), "{third_log}");
    // Each server audits what reaches it: a read from the leader is in the leader's log.
    let leader_config = tmp.path().join("leader.kubeconfig");
    std::fs::write(
        &leader_config,
        std::fs::read_to_string(&config)
            .unwrap()
            .replace(&cluster.url(follower), &cluster.url(leader)),
    )
    .unwrap();
    ok(
        KUBECTLS[0],
        &leader_config,
        &["get", "configmap", "via-follower"],
    );
    let dir = log(leader).parent().unwrap().to_path_buf();
    wait_for(&dir, "the leader's read", |e| {
        is(e, "ResponseComplete", "get", "configmaps", "via-follower")
    });

    // Authorization and admission run on the leader, yet their annotations belong to the event
    // the follower writes, as they would on a single server: a privileged pod in a namespace
    // that audits the restricted level.
    let api = cluster.api(follower);
    let resp = rt.block_on(async {
        let ns = api
            .post_json(
                "/api/v1/namespaces",
                &serde_json::json!({"metadata": {"name": "audited",
                    "labels": {"pod-security.kubernetes.io/audit": "restricted"}}}),
            )
            .await
            .unwrap();
        assert_eq!(ns.status, 201, "{}", ns.text());
        api.post_json(
            "/api/v1/namespaces/audited/pods",
            &serde_json::json!({"metadata": {"name": "root"}, "spec": {"containers": [
                {"name": "c", "image": "busybox", "securityContext": {"privileged": true}}]}}),
        )
        .await
        .unwrap()
    });
    assert_eq!(resp.status, 201, "{}", resp.text());
    assert!(
        !resp.headers.contains_key("x-litek8s-audit-annotations"),
        "the leader's annotations are for the follower, not the client: {:?}",
        resp.headers
    );
    let dir = log(follower).parent().unwrap().to_path_buf();
    let e = wait_for(&dir, "the follower's event of the pod", |e| {
        e["stage"] == "ResponseComplete"
            && e["verb"] == "create"
            && e["objectRef"]["resource"] == "pods"
            && e["objectRef"]["namespace"] == "audited"
    });
    let annotations = &e["annotations"];
    assert_eq!(
        annotations["pod-security.kubernetes.io/enforce-policy"], "privileged:latest",
        "{e}"
    );
    let violations = annotations["pod-security.kubernetes.io/audit-violations"]
        .as_str()
        .unwrap_or_default();
    assert!(
        violations.starts_with("would violate PodSecurity \"restricted:latest\": ")
            && violations.contains(
                "privileged (container \"c\" must not set securityContext.privileged=true)"
            ),
        "{e}"
    );
    assert_eq!(annotations["authorization.k8s.io/decision"], "allow", "{e}");
    std::thread::sleep(Duration::from_millis(500));
    let leader_log = std::fs::read_to_string(log(leader)).unwrap_or_default();
    assert!(!leader_log.contains("audited"), "{leader_log}");
}
