//! Aggregated API servers against the real server, with the HTTPS test server of
//! `support::aggregated` outside any pod, reached through a Service without selector whose
//! Endpoints point at it (src/api/aggregation has the rules):
//!
//! - the leader publishes `kube-system/extension-apiserver-authentication`, and the test
//!   server trusts exactly its `requestheader-client-ca-file`;
//! - an APIService is validated as kube-aggregator validates it (422 with its field paths);
//! - once the availability check passed (`Available` True, reason `Passed`), kubectl 1.27 and
//!   1.33 find the group in discovery (`api-resources`), `get --raw` and `get` its resource
//!   through the proxy, which states the caller (impersonated too) in `X-Remote-User` and
//!   `X-Remote-Group`, drops the caller's Authorization and presents the `front-proxy-client`
//!   certificate;
//! - a watch through the proxy streams: events arrive while the aggregated server holds the
//!   watch open, the caller leaving closes it at the aggregated server, and the aggregated
//!   server ending it ends it for the caller;
//! - `kubectl get apiservices` prints kube's columns;
//! - the metrics API (`v1beta1.metrics.k8s.io`, served as metrics-server serves it) behind the
//!   same Service: `kubectl top node` and `kubectl top pod` print its figures;
//! - with the test server stopped, `Available` turns False (`FailedDiscoveryCheck`) and
//!   requests get a 503 naming the APIService;
//! - on a 3-server cluster every server proxies (a follower presents a certificate of the
//!   same front-proxy CA the leader published) and lists the group in its discovery.

mod cluster_support;
mod support;

use std::time::{Duration, Instant};

use serde_json::{json, Value};
use support::aggregated::{
    Aggregated, ProxiedWatch, GROUP, METRICS_NODES, SERVICE_NAME, SERVICE_NAMESPACE, VERSION,
    WATCH_EVENTS,
};
use support::kubectl::{ok, run as kubectl, stderr, stdout};
use support::{runtime, Api, Server};

const KUBECTLS: [&str; 2] = [
    "/usr/lib/google-cloud-sdk/bin/kubectl.1.27",
    "/usr/lib/google-cloud-sdk/bin/kubectl.1.33",
];
const APISERVICES: &str = "/apis/apiregistration.k8s.io/v1/apiservices";
/// Hang guard of each step of a watch.
const WATCH_GUARD: Duration = Duration::from_secs(10);

fn post(server: &Server, path: &str, object: &Value) -> (u16, Value) {
    let resp = runtime()
        .block_on(server.api().post_json(path, object))
        .expect("POST");
    (resp.status, resp.json())
}

fn get(server: &Server, path: &str) -> (u16, Value) {
    let resp = runtime().block_on(server.api().get(path)).expect("GET");
    let body = serde_json::from_slice(&resp.body).unwrap_or(Value::Null);
    (resp.status, body)
}

/// Polls `what` every 200 ms until it gives a value, for at most `limit`.
fn wait_for<T>(limit: Duration, what: &str, mut f: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + limit;
    loop {
        if let Some(v) = f() {
            return v;
        }
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// A Service `name` in front of `port` of 127.0.0.1: no selector, its Endpoints by hand.
fn manual_service(server: &Server, name: &str, port: u16) {
    let ns = SERVICE_NAMESPACE;
    let service = json!({
        "apiVersion": "v1", "kind": "Service", "metadata": {"name": name},
        "spec": {"ports": [{"name": "https", "port": 443, "targetPort": port}]},
    });
    let (status, body) = post(
        server,
        &format!("/api/v1/namespaces/{ns}/services"),
        &service,
    );
    assert_eq!(status, 201, "{body}");
    let endpoints = json!({
        "apiVersion": "v1", "kind": "Endpoints", "metadata": {"name": name},
        "subsets": [{"addresses": [{"ip": "127.0.0.1"}], "ports": [{"name": "https", "port": port}]}],
    });
    let (status, body) = post(
        server,
        &format!("/api/v1/namespaces/{ns}/endpoints"),
        &endpoints,
    );
    assert_eq!(status, 201, "{body}");
}

fn api_service(ca_bundle: &str) -> Value {
    json!({
        "apiVersion": "apiregistration.k8s.io/v1", "kind": "APIService",
        "metadata": {"name": format!("{VERSION}.{GROUP}")},
        "spec": {
            "group": GROUP, "version": VERSION,
            "groupPriorityMinimum": 1000, "versionPriority": 15,
            "caBundle": ca_bundle,
            "service": {"namespace": SERVICE_NAMESPACE, "name": SERVICE_NAME},
        },
    })
}

/// The APIService of the metrics API `kubectl top` reads.
const METRICS_API_SERVICE: &str = "v1beta1.metrics.k8s.io";

fn available(server: &Server) -> Option<Value> {
    available_named(server, &format!("{VERSION}.{GROUP}"))
}

fn available_named(server: &Server, name: &str) -> Option<Value> {
    let (status, body) = get(server, &format!("{APISERVICES}/{name}"));
    assert_eq!(status, 200, "{body}");
    body["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == "Available")
        .cloned()
}

#[test]
fn an_aggregated_api_server_is_served_through_its_service() {
    let server = Server::start(&[]);
    let kc = server.kubeconfig_path();
    let config_map = "/api/v1/namespaces/kube-system/configmaps/extension-apiserver-authentication";
    let data = wait_for(Duration::from_secs(30), "the front-proxy ConfigMap", || {
        let (status, body) = get(&server, config_map);
        (status == 200).then(|| body["data"].clone())
    });
    assert_eq!(
        data["requestheader-allowed-names"],
        "[\"front-proxy-client\"]"
    );
    assert_eq!(
        data["requestheader-username-headers"],
        "[\"X-Remote-User\"]"
    );
    assert_eq!(data["requestheader-group-headers"], "[\"X-Remote-Group\"]");
    assert_eq!(
        data["requestheader-extra-headers-prefix"],
        "[\"X-Remote-Extra-\"]"
    );
    let cluster_ca = std::fs::read_to_string(server.ca_cert()).unwrap();
    assert_eq!(
        data["client-ca-file"].as_str().unwrap().trim(),
        cluster_ca.trim()
    );
    let front_proxy_ca = data["requestheader-client-ca-file"].as_str().unwrap();
    assert_ne!(front_proxy_ca.trim(), cluster_ca.trim());

    let mut aggregated = Aggregated::start(front_proxy_ca);
    manual_service(&server, SERVICE_NAME, aggregated.addr.port());

    // kube-aggregator's validation.
    let mut wrong = api_service(&aggregated.ca_bundle());
    wrong["metadata"]["name"] = json!("v1.wrong.example.com");
    wrong["spec"]["versionPriority"] = json!(0);
    wrong["spec"]["insecureSkipTLSVerify"] = json!(true);
    let (status, body) = post(&server, APISERVICES, &wrong);
    assert_eq!(status, 422, "{body}");
    let fields: Vec<&str> = body["details"]["causes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["field"].as_str().unwrap())
        .collect();
    assert_eq!(
        fields,
        [
            "metadata.name",
            "spec.versionPriority",
            "spec.insecureSkipTLSVerify"
        ],
        "{body}"
    );

    let (status, body) = post(&server, APISERVICES, &api_service(&aggregated.ca_bundle()));
    assert_eq!(status, 201, "{body}");
    assert_eq!(body["spec"]["service"]["port"], 443, "defaulted: {body}");
    let condition = wait_for(Duration::from_secs(20), "Available True", || {
        available(&server).filter(|c| c["status"] == "True")
    });
    assert_eq!(condition["reason"], "Passed", "{condition}");

    let object = format!("/apis/{GROUP}/{VERSION}/namespaces/default/flunders/first");
    for binary in KUBECTLS {
        let raw = ok(binary, &kc, &["get", "--raw", &object]);
        let flunder: Value = serde_json::from_str(&raw).unwrap();
        assert_eq!(flunder["kind"], "Flunder", "{binary}: {raw}");
        let resources = ok(binary, &kc, &["api-resources", "--api-group", GROUP]);
        assert!(resources.contains("flunders"), "{binary}: {resources}");
        let listed = ok(binary, &kc, &["get", "flunders", "-n", "default"]);
        assert!(listed.contains("first"), "{binary}: {listed}");
        let one = ok(
            binary,
            &kc,
            &["get", "fl", "first", "-n", "default", "-o", "json"],
        );
        assert!(
            one.contains("the test aggregated server"),
            "{binary}: {one}"
        );
        let printed = ok(
            binary,
            &kc,
            &["get", "apiservices", &format!("{VERSION}.{GROUP}")],
        );
        let header: Vec<&str> = printed.lines().next().unwrap().split_whitespace().collect();
        assert_eq!(header, ["NAME", "SERVICE", "AVAILABLE", "AGE"], "{printed}");
        assert!(printed.contains("default/wardle   True"), "{printed}");
    }
    let impersonated = kubectl(
        KUBECTLS[1],
        &kc,
        &[
            "--as",
            "alice",
            "--as-group",
            "system:masters",
            "get",
            "--raw",
            &object,
        ],
    );
    assert!(impersonated.status.success(), "{}", stderr(&impersonated));

    let seen = aggregated.requests();
    let proxied: Vec<_> = seen
        .iter()
        .filter(|s| s.path.contains("/flunders"))
        .collect();
    assert!(!proxied.is_empty());
    for s in &seen {
        assert_eq!(s.client_cn, "front-proxy-client", "{s:?}");
        assert!(
            !s.authorization,
            "the caller's Authorization was passed on: {s:?}"
        );
    }
    let admin = proxied[0];
    assert_eq!(admin.user.as_deref(), Some("admin"), "{admin:?}");
    assert_eq!(
        admin.groups,
        ["system:masters", "system:authenticated"],
        "{admin:?}"
    );
    let alice = seen.last().unwrap();
    assert_eq!(alice.user.as_deref(), Some("alice"), "{alice:?}");
    assert_eq!(
        alice.groups,
        ["system:masters", "system:authenticated"],
        "{alice:?}"
    );

    // A watch streams through the proxy: its events come while the aggregated server holds
    // it open; the caller leaving ends it at the aggregated server too; the aggregated server
    // ending it (timeoutSeconds) ends it for the caller.
    runtime().block_on(async {
        let api = server.api();
        let mut watch = ProxiedWatch::open(&api, "default", "").await;
        assert_eq!(watch.status, 200);
        for expected in WATCH_EVENTS {
            let (kind, object) = watch.next(WATCH_GUARD).await.expect("an event");
            assert_eq!(kind, expected, "{object}");
            assert_eq!(object["metadata"]["name"], "first", "{object}");
        }
        assert_eq!(aggregated.watching(), 1);
        drop(watch);
        wait_async(
            WATCH_GUARD,
            "the watch closed at the aggregated server",
            || async { (aggregated.watching() == 0).then_some(()) },
        )
        .await;
        let mut bounded = ProxiedWatch::open(&api, "default", "&timeoutSeconds=1").await;
        for expected in WATCH_EVENTS {
            let (kind, _) = bounded.next(WATCH_GUARD).await.expect("an event");
            assert_eq!(kind, expected);
        }
        assert!(bounded.next(WATCH_GUARD).await.is_none(), "the watch ends");
    });

    // The metrics API's shape, served as metrics-server serves it, behind the same Service:
    // `kubectl top` reads a node's and a namespace's pods' usage through the proxy.
    let mut metrics = api_service(&aggregated.ca_bundle());
    metrics["metadata"]["name"] = json!(METRICS_API_SERVICE);
    metrics["spec"]["group"] = json!("metrics.k8s.io");
    metrics["spec"]["version"] = json!("v1beta1");
    metrics["spec"]["groupPriorityMinimum"] = json!(100);
    metrics["spec"]["versionPriority"] = json!(100);
    let (status, body) = post(&server, APISERVICES, &metrics);
    assert_eq!(status, 201, "{body}");
    wait_for(Duration::from_secs(20), "the metrics API Available", || {
        available_named(&server, METRICS_API_SERVICE).filter(|c| c["status"] == "True")
    });
    let node = json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": METRICS_NODES[0]},
        "status": {"capacity": {"cpu": "2", "memory": "4Gi"},
                   "allocatable": {"cpu": "2", "memory": "4Gi"}}});
    let (status, body) = post(&server, "/api/v1/nodes", &node);
    assert_eq!(status, 201, "{body}");
    for binary in KUBECTLS {
        let top = ok(binary, &kc, &["top", "node", METRICS_NODES[0]]);
        let row: Vec<&str> = top
            .lines()
            .nth(1)
            .unwrap_or("")
            .split_whitespace()
            .collect();
        assert_eq!(row.first(), Some(&METRICS_NODES[0]), "{binary}: {top}");
        assert!(
            row.contains(&"250m") && row.contains(&"512Mi"),
            "{binary}: {top}"
        );
        let top = ok(binary, &kc, &["top", "pod", "-n", "default"]);
        let row: Vec<&str> = top
            .lines()
            .nth(1)
            .unwrap_or("")
            .split_whitespace()
            .collect();
        assert_eq!(row, ["busy", "100m", "64Mi"], "{binary}: {top}");
    }

    // Stopped: the next check fails, and requests are refused with 503 naming the APIService.
    aggregated.stop();
    let condition = wait_for(Duration::from_secs(45), "Available False", || {
        available(&server).filter(|c| c["status"] == "False")
    });
    assert_eq!(condition["reason"], "FailedDiscoveryCheck", "{condition}");
    let (status, body) = get(&server, &object);
    assert_eq!(status, 503, "{body}");
    let message = body["message"].as_str().unwrap();
    assert!(message.starts_with("service unavailable"), "{message}");
    assert!(message.contains(&format!("{VERSION}.{GROUP}")), "{message}");
    let refused = kubectl(KUBECTLS[0], &kc, &["get", "--raw", &object]);
    assert!(!refused.status.success());
    let printed = ok(KUBECTLS[1], &kc, &["get", "apiservices"]);
    assert!(
        printed.contains("False (FailedDiscoveryCheck)"),
        "{printed}"
    );
    let _ = stdout(&refused);
}

async fn api_json(api: &Api, path: &str) -> (u16, Value) {
    let resp = api.get(path).await.expect("GET");
    (
        resp.status,
        serde_json::from_slice(&resp.body).unwrap_or(Value::Null),
    )
}

async fn wait_async<T, F>(limit: Duration, what: &str, mut f: impl FnMut() -> F) -> T
where
    F: std::future::Future<Output = Option<T>>,
{
    let deadline = Instant::now() + limit;
    loop {
        if let Some(v) = f().await {
            return v;
        }
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[test]
fn every_server_of_a_cluster_proxies() {
    let mut cluster = cluster_support::Cluster::start(3);
    let rt = runtime();
    let leader = rt.block_on(cluster.wait_leader());
    let follower = (leader + 1) % 3;
    let api = cluster.api(follower);
    let config_map = "/api/v1/namespaces/kube-system/configmaps/extension-apiserver-authentication";
    let front_proxy_ca = rt.block_on(wait_async(
        Duration::from_secs(30),
        "the ConfigMap",
        || async {
            let (status, body) = api_json(&api, config_map).await;
            (status == 200).then(|| {
                body["data"]["requestheader-client-ca-file"]
                    .as_str()
                    .unwrap()
                    .to_string()
            })
        },
    ));
    let aggregated = Aggregated::start(&front_proxy_ca);
    let port = aggregated.addr.port();
    rt.block_on(async {
        let ns = SERVICE_NAMESPACE;
        let service = json!({
            "apiVersion": "v1", "kind": "Service", "metadata": {"name": SERVICE_NAME},
            "spec": {"ports": [{"name": "https", "port": 443, "targetPort": port}]},
        });
        let r = api.post_json(&format!("/api/v1/namespaces/{ns}/services"), &service).await.unwrap();
        assert_eq!(r.status, 201, "{}", r.text());
        let endpoints = json!({
            "apiVersion": "v1", "kind": "Endpoints", "metadata": {"name": SERVICE_NAME},
            "subsets": [{"addresses": [{"ip": "127.0.0.1"}], "ports": [{"name": "https", "port": port}]}],
        });
        let r = api.post_json(&format!("/api/v1/namespaces/{ns}/endpoints"), &endpoints).await.unwrap();
        assert_eq!(r.status, 201, "{}", r.text());
        let r = api.post_json(APISERVICES, &api_service(&aggregated.ca_bundle())).await.unwrap();
        assert_eq!(r.status, 201, "{}", r.text());
        let name = format!("{APISERVICES}/{VERSION}.{GROUP}");
        wait_async(Duration::from_secs(20), "Available True", || async {
            let (_, body) = api_json(&api, &name).await;
            body["status"]["conditions"]
                .as_array()
                .and_then(|c| c.iter().find(|c| c["type"] == "Available" && c["status"] == "True").cloned())
        })
        .await;
        let object = format!("/apis/{GROUP}/{VERSION}/namespaces/default/flunders/first");
        for i in 0..3 {
            let api = cluster.api(i);
            let (status, body) = api_json(&api, &object).await;
            assert_eq!(status, 200, "server {i}: {body}");
            assert_eq!(body["kind"], "Flunder", "server {i}");
            let r = api
                .request("GET", "/apis", None, Vec::new())
                .await
                .expect("discovery");
            assert!(r.text().contains(GROUP), "server {i}: {}", r.text());
        }
    });
    let proxied = aggregated
        .requests()
        .into_iter()
        .filter(|s| s.path.contains("/flunders"))
        .count();
    assert_eq!(proxied, 3);
    assert!(aggregated
        .requests()
        .iter()
        .all(|s| s.client_cn == "front-proxy-client"));
}
