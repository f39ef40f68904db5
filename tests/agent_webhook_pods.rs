//! An admission webhook and an aggregated API server running in pods, reached by Service
//! reference through the agent tunnel of their node from a server that has neither the tunnel
//! nor a route to pod IPs: a cluster of three servers A, B and C, the agent `n1` connected to
//! B, every request sent to C, so each call goes C → B (relayed `pods/portforward` upgrade)
//! → agent → pod, and TLS ends in the pod.
//!
//! The servers are the ones of `support::webhook` and `support::aggregated`, run in the pods
//! by this very test executable: the busybox test image has no C library, so the pod mounts
//! the host's libraries and the executable's directory (hostPath, read-only) and starts the
//! executable through the host's dynamic loader, with [`POD_SERVER`] set, which makes
//! [`serve_in_pod`] serve instead of returning. Their certificates (a CA of the test's own,
//! `<service>.default.svc`) come through the environment.
//!
//! - webhook: a ValidatingWebhookConfiguration denies (403, the webhook's message) and a
//!   MutatingWebhookConfiguration patches (its JSONPatch) ConfigMaps written to C; once the
//!   pod is deleted, failurePolicy Fail refuses (500) and Ignore lets the write pass;
//! - aggregated server: its APIService turns Available, C lists the group in `/apis` (and its
//!   resources in the aggregated discovery), answers a GET of its object and streams a watch.
//!
//! Requirements are those of tests/agent_pods.rs (root, runc, conmon, CNI plugins,
//! busybox-static; `LITEK8S_SKIP_CONTAINERS=1` skips when they are missing).

mod agent_support;
mod cluster_support;
mod relayed_agent;
mod support;

use std::path::Path;
use std::time::{Duration, Instant};

use agent_support::{missing_pod_tools, Agent};
use base64::Engine;
use relayed_agent::{Setup, IMAGE};
use serde_json::{json, Value};
use support::aggregated::{self, ProxiedWatch, GROUP, VERSION, WATCH_EVENTS};
use support::serving_tls::ServingCerts;
use support::webhook::{self, DENY_MESSAGE};
use support::{runtime, Api};

/// Set in a pod's environment: which server [`serve_in_pod`] runs (`webhook` or `aggregated`).
const POD_SERVER: &str = "LITEK8S_TEST_POD_SERVER";
/// The PEM of the serving certificate, its key, and the CA client certificates must chain to.
const POD_CERT: &str = "LITEK8S_TEST_POD_CERT";
const POD_KEY: &str = "LITEK8S_TEST_POD_KEY";
const POD_CLIENT_CA: &str = "LITEK8S_TEST_POD_CLIENT_CA";
/// The port the servers listen on in their pods.
const POD_PORT: u16 = 8443;
/// The host's libraries and dynamic loader, mounted in the pods.
const HOST_LIBS: &str = "/usr/lib/x86_64-linux-gnu";
const LOADER: &str = "ld-linux-x86-64.so.2";
/// Hang guards, not performance assertions.
const GUARD: Duration = Duration::from_secs(90);
const WATCH_GUARD: Duration = Duration::from_secs(10);

/// Not a test of its own: the entry point of the servers this file runs in pods. Run with
/// [`POD_SERVER`] set (in a pod), it serves until the pod is killed; without (every test
/// run), it returns at once.
#[test]
fn serve_in_pod() {
    let Ok(role) = std::env::var(POD_SERVER) else {
        return;
    };
    let var = |name: &str| std::env::var(name).unwrap_or_default();
    let certs = ServingCerts {
        ca_pem: String::new(),
        cert_pem: var(POD_CERT),
        key_pem: var(POD_KEY),
    };
    let served = match role.as_str() {
        "webhook" => webhook::serve_standalone(POD_PORT, &certs),
        "aggregated" => aggregated::serve_standalone(POD_PORT, &certs, &var(POD_CLIENT_CA)),
        other => Err(format!("no server called {other:?}")),
    };
    if let Err(e) = served {
        eprintln!("{role}: {e}");
        std::process::exit(1);
    }
}

fn missing_tools() -> Vec<String> {
    let mut missing = missing_pod_tools();
    if !Path::new("/bin/busybox").exists() {
        missing.push("busybox-static".into());
    }
    if !Path::new(HOST_LIBS).join(LOADER).exists() {
        missing.push(format!("{HOST_LIBS}/{LOADER}"));
    }
    missing
}

/// The three servers and the agent `n1` on B (`relayed_agent`), with what these tests need.
fn start() -> Option<Setup> {
    relayed_agent::start(missing_tools(), "lk8w", 200)
}

/// Polls `f` every 200 ms until it gives a value; panics after `limit` with `what` and the
/// last thing `f` saw.
async fn wait_for<T, F>(limit: Duration, what: &str, mut f: impl FnMut() -> F) -> T
where
    F: std::future::Future<Output = Result<T, String>>,
{
    let deadline = Instant::now() + limit;
    loop {
        let last = match f().await {
            Ok(v) => return v,
            Err(last) => last,
        };
        assert!(
            Instant::now() < deadline,
            "timed out waiting for {what}; last: {last}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

async fn get(api: &Api, path: &str) -> (u16, Value) {
    let resp = api.get(path).await.expect("GET");
    (
        resp.status,
        serde_json::from_slice(&resp.body).unwrap_or(Value::Null),
    )
}

async fn post(api: &Api, path: &str, object: &Value) -> (u16, Value) {
    let resp = api.post_json(path, object).await.expect("POST");
    (
        resp.status,
        serde_json::from_slice(&resp.body).unwrap_or(Value::Null),
    )
}

async fn create(api: &Api, path: &str, object: &Value) {
    let (status, body) = post(api, path, object).await;
    assert_eq!(status, 201, "{path}: {body}");
}

/// The node whose agent's tunnel ends at a server: that server's index.
async fn tunnel_server(setup: &Setup) -> usize {
    let api = setup.cluster.api(0);
    let name = wait_for(Duration::from_secs(30), "the agent's tunnel", || async {
        let node = agent_support::node(&api, "n1").await;
        node.as_ref()
            .and_then(|n| n["metadata"]["annotations"]["litek8s.io/tunnel-server"].as_str())
            .map(str::to_string)
            .ok_or_else(|| format!("Node: {node:?}"))
    })
    .await;
    (0..3)
        .find(|&i| setup.cluster.members[i].name == name)
        .expect("the tunnel's server is a member")
}

/// A pod `name` (labelled `app: name`) on `n1` running [`serve_in_pod`] as `role`: the test
/// executable started through the host's loader, its certificates in the environment, ready
/// once its port accepts connections.
fn server_pod(name: &str, role: &str, certs: &ServingCerts, client_ca: &str) -> Value {
    let exe = std::env::current_exe().expect("the test executable");
    let dir = exe.parent().expect("its directory").display().to_string();
    let file = exe
        .file_name()
        .expect("its name")
        .to_string_lossy()
        .into_owned();
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "labels": {"app": name}},
        "spec": {
            "nodeName": "n1",
            "terminationGracePeriodSeconds": 1,
            "volumes": [
                {"name": "hostlib", "hostPath": {"path": HOST_LIBS, "type": "Directory"}},
                {"name": "hostbin", "hostPath": {"path": dir, "type": "Directory"}},
            ],
            "containers": [{
                "name": "server", "image": IMAGE,
                "command": [
                    format!("/hostlib/{LOADER}"), "--library-path", "/hostlib",
                    format!("/hostbin/{file}"), "--exact", "serve_in_pod", "--nocapture",
                ],
                "env": [
                    {"name": POD_SERVER, "value": role},
                    {"name": POD_CERT, "value": certs.cert_pem},
                    {"name": POD_KEY, "value": certs.key_pem},
                    {"name": POD_CLIENT_CA, "value": client_ca},
                ],
                "ports": [{"name": "https", "containerPort": POD_PORT}],
                "readinessProbe": {"tcpSocket": {"port": POD_PORT}, "periodSeconds": 1},
                "volumeMounts": [
                    {"name": "hostlib", "mountPath": "/hostlib", "readOnly": true},
                    {"name": "hostbin", "mountPath": "/hostbin", "readOnly": true},
                ],
            }],
        },
    })
}

/// A Service `name` in front of port [`POD_PORT`] of the pods labelled `app: name`.
fn service(name: &str) -> Value {
    json!({
        "apiVersion": "v1", "kind": "Service", "metadata": {"name": name},
        "spec": {"selector": {"app": name}, "ports": [{"port": 443, "targetPort": POD_PORT}]},
    })
}

/// Waits until pod `name` is Ready.
async fn wait_ready(api: &Api, agent: &Agent, name: &str) {
    let path = format!("/api/v1/namespaces/default/pods/{name}");
    let ready = |pod: &Value| {
        pod["status"]["conditions"]
            .as_array()
            .into_iter()
            .flatten()
            .any(|c| c["type"] == "Ready" && c["status"] == "True")
    };
    wait_for(GUARD, &format!("pod {name} Ready"), || async {
        let (_, pod) = get(api, &path).await;
        if ready(&pod) {
            Ok(())
        } else {
            Err(format!(
                "{:#}\nagent log:\n{}",
                pod["status"],
                agent.last_log()
            ))
        }
    })
    .await;
}

/// One webhook of the configurations below: ConfigMaps labelled `check: <check>`, called by
/// reference to the webhook pod's Service at `path`.
fn hook(name: &str, check: &str, path: &str, policy: &str, ca_bundle: &str) -> Value {
    json!({
        "name": name,
        "clientConfig": {
            "service": {"namespace": webhook::SERVICE_NAMESPACE, "name": webhook::SERVICE_NAME, "path": path},
            "caBundle": ca_bundle,
        },
        "rules": [{"operations": ["CREATE"], "apiGroups": [""], "apiVersions": ["v1"], "resources": ["configmaps"]}],
        "objectSelector": {"matchLabels": {"check": check}},
        "failurePolicy": policy,
        "sideEffects": "None",
        "admissionReviewVersions": ["v1"],
    })
}

const CONFIG_MAPS: &str = "/api/v1/namespaces/default/configmaps";

/// POSTs a ConfigMap labelled `check: <check>` with a name of its own; (status, body).
async fn write_checked(api: &Api, check: &str) -> (u16, Value) {
    use std::sync::atomic::{AtomicUsize, Ordering};
    static WRITTEN: AtomicUsize = AtomicUsize::new(0);
    let name = format!("{check}-{}", WRITTEN.fetch_add(1, Ordering::SeqCst));
    let config_map = json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": name, "labels": {"check": check}},
        "data": {"k": "v"},
    });
    post(api, CONFIG_MAPS, &config_map).await
}

#[test]
fn a_webhook_and_an_aggregated_server_in_pods_serve_another_server() {
    let Some(setup) = start() else { return };
    let rt = runtime();
    let b = rt.block_on(tunnel_server(&setup));
    let c_index = (b + 1) % 3;
    println!(
        "the agent's tunnel goes to {}, the requests to {}",
        setup.cluster.members[b].name, setup.cluster.members[c_index].name
    );
    let c = setup.cluster.api(c_index);
    let agent = &setup.agent;

    let webhook_certs = webhook::certs(&[]);
    let webhook_bundle = base64::engine::general_purpose::STANDARD.encode(&webhook_certs.ca_pem);
    let aggregated_certs = aggregated::certs();
    rt.block_on(async {
        let authentication =
            "/api/v1/namespaces/kube-system/configmaps/extension-apiserver-authentication";
        let front_proxy_ca = wait_for(GUARD, "the front-proxy ConfigMap", || async {
            let (status, body) = get(&c, authentication).await;
            body["data"]["requestheader-client-ca-file"]
                .as_str()
                .map(str::to_string)
                .ok_or(format!("{status} {body}"))
        })
        .await;
        let pods = "/api/v1/namespaces/default/pods";
        let services = "/api/v1/namespaces/default/services";
        let webhook_pod = server_pod(webhook::SERVICE_NAME, "webhook", &webhook_certs, "");
        create(&c, pods, &webhook_pod).await;
        create(&c, services, &service(webhook::SERVICE_NAME)).await;
        let aggregated_pod = server_pod(
            aggregated::SERVICE_NAME,
            "aggregated",
            &aggregated_certs,
            &front_proxy_ca,
        );
        create(&c, pods, &aggregated_pod).await;
        create(&c, services, &service(aggregated::SERVICE_NAME)).await;
        wait_ready(&c, agent, webhook::SERVICE_NAME).await;
        wait_ready(&c, agent, aggregated::SERVICE_NAME).await;
    });

    // The webhook: denials and patches of writes to C.
    rt.block_on(async {
        let admission = "/apis/admissionregistration.k8s.io/v1";
        let validating = json!({
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "ValidatingWebhookConfiguration",
            "metadata": {"name": "pod-webhook"},
            "webhooks": [
                hook("deny.pods.test", "deny", "/deny", "Fail", &webhook_bundle),
                hook("closed.pods.test", "fail-closed", "/allow", "Fail", &webhook_bundle),
                hook("open.pods.test", "fail-open", "/allow", "Ignore", &webhook_bundle),
            ],
        });
        let mutating = json!({
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "MutatingWebhookConfiguration",
            "metadata": {"name": "pod-webhook"},
            "webhooks": [hook("label.pods.test", "patch", "/label", "Fail", &webhook_bundle)],
        });
        create(
            &c,
            &format!("{admission}/validatingwebhookconfigurations"),
            &validating,
        )
        .await;
        create(
            &c,
            &format!("{admission}/mutatingwebhookconfigurations"),
            &mutating,
        )
        .await;
        // C may see the Service's endpoint a moment after the pod is Ready.
        let denied = wait_for(GUARD, "the webhook's denial", || async {
            match write_checked(&c, "deny").await {
                (403, body) => Ok(body),
                (status, body) => Err(format!("{status} {body}")),
            }
        })
        .await;
        assert_eq!(
            denied["message"],
            format!("admission webhook \"deny.pods.test\" denied the request: {DENY_MESSAGE}"),
            "{denied}"
        );
        let (status, patched) = write_checked(&c, "patch").await;
        assert_eq!(status, 201, "{patched}");
        assert_eq!(
            patched["metadata"]["labels"]["webhook"], "patched",
            "{patched}"
        );
        assert_eq!(patched["metadata"]["labels"]["check"], "patch", "{patched}");
        for check in ["fail-closed", "fail-open"] {
            let (status, body) = write_checked(&c, check).await;
            assert_eq!(status, 201, "{check}: {body}");
        }
    });

    // The aggregated server: Available, in C's discovery, a GET and a watch through C.
    rt.block_on(async {
        let apiservice = json!({
            "apiVersion": "apiregistration.k8s.io/v1", "kind": "APIService",
            "metadata": {"name": format!("{VERSION}.{GROUP}")},
            "spec": {
                "group": GROUP, "version": VERSION,
                "groupPriorityMinimum": 1000, "versionPriority": 15,
                "caBundle": base64::engine::general_purpose::STANDARD.encode(&aggregated_certs.ca_pem),
                "service": {"namespace": aggregated::SERVICE_NAMESPACE, "name": aggregated::SERVICE_NAME},
            },
        });
        let apiservices = "/apis/apiregistration.k8s.io/v1/apiservices";
        create(&c, apiservices, &apiservice).await;
        let path = format!("{apiservices}/{VERSION}.{GROUP}");
        wait_for(GUARD, "the APIService Available", || async {
            let (_, body) = get(&c, &path).await;
            let available = body["status"]["conditions"]
                .as_array()
                .into_iter()
                .flatten()
                .find(|condition| condition["type"] == "Available")
                .cloned();
            match available {
                Some(a) if a["status"] == "True" => Ok(()),
                other => Err(format!("{other:?}")),
            }
        })
        .await;
        let (status, groups) = get(&c, "/apis").await;
        assert_eq!(status, 200, "{groups}");
        let listed = groups["groups"]
            .as_array()
            .into_iter()
            .flatten()
            .any(|g| g["name"] == GROUP);
        assert!(listed, "{GROUP} not in /apis: {groups}");
        let accept = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList";
        wait_for(WATCH_GUARD, "flunders in the aggregated discovery", || async {
            let mut conn = c.connect().await?;
            let resp = conn.request_accept("GET", "/apis", accept).await?;
            let list = resp.json();
            let resources: Vec<Value> = list["items"]
                .as_array()
                .into_iter()
                .flatten()
                .filter(|g| g["metadata"]["name"] == GROUP)
                .flat_map(|g| g["versions"].as_array().cloned().unwrap_or_default())
                .flat_map(|v| v["resources"].as_array().cloned().unwrap_or_default())
                .collect();
            resources
                .iter()
                .any(|r| r["resource"] == "flunders")
                .then_some(())
                .ok_or(format!("{list}"))
        })
        .await;
        let object = format!("/apis/{GROUP}/{VERSION}/namespaces/default/flunders/first");
        let (status, flunder) = get(&c, &object).await;
        assert_eq!(status, 200, "{flunder}");
        assert_eq!(flunder["kind"], "Flunder", "{flunder}");
        // A watch streams from the pod: its events come while the server holds it open, and
        // it ends when the server ends it.
        let mut watch = ProxiedWatch::open(&c, "default", "").await;
        assert_eq!(watch.status, 200);
        for expected in WATCH_EVENTS {
            let (kind, object) = watch.next(WATCH_GUARD).await.expect("an event");
            assert_eq!(kind, expected, "{object}");
        }
        drop(watch);
        let mut bounded = ProxiedWatch::open(&c, "default", "&timeoutSeconds=1").await;
        for expected in WATCH_EVENTS {
            let (kind, _) = bounded.next(WATCH_GUARD).await.expect("an event");
            assert_eq!(kind, expected);
        }
        assert!(bounded.next(WATCH_GUARD).await.is_none(), "the watch ends");
    });

    // The webhook's pod deleted: Fail refuses, Ignore lets the write pass.
    rt.block_on(async {
        let path = format!(
            "/api/v1/namespaces/default/pods/{}?gracePeriodSeconds=0",
            webhook::SERVICE_NAME
        );
        let resp = c
            .request("DELETE", &path, None, bytes::Bytes::new())
            .await
            .expect("DELETE");
        assert!(resp.status == 200 || resp.status == 202, "{}", resp.text());
        let refused = wait_for(GUARD, "failurePolicy Fail refusing", || async {
            match write_checked(&c, "fail-closed").await {
                (500, body) => Ok(body),
                (status, body) => Err(format!("{status} {body}")),
            }
        })
        .await;
        let message = refused["message"].as_str().unwrap_or_default();
        assert!(
            message.starts_with(
                "Internal error occurred: failed calling webhook \"closed.pods.test\""
            ),
            "{refused}"
        );
        let (status, body) = write_checked(&c, "fail-open").await;
        assert_eq!(status, 201, "failurePolicy Ignore: {body}");
    });
}
