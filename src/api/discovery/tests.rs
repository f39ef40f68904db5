use std::sync::Arc;

use http_body_util::BodyExt;

use super::*;
use crate::api::ApiSettings;
use crate::kube::mutation::Mutation;
use crate::kube::store::{Store, StoreConfig};
use crate::kube::writer::{WriteError, WriteFuture, Writer};

struct NoWriter;

impl Writer for NoWriter {
    fn write(&self, _mutation: Mutation) -> WriteFuture<'_> {
        Box::pin(async { Err(WriteError::Timeout) })
    }
}

fn ctx() -> ApiContext {
    ApiContext::new(
        Arc::new(Store::new(StoreConfig::default())),
        Arc::new(NoWriter),
        ApiSettings {
            server_name: "test".into(),
            node_ips: vec!["10.0.0.5".parse().unwrap()],
            api_port: 6443,
            service_cidr: "10.96.0.0/12".into(),
        },
    )
}

fn get(path: &str, accept: &str) -> (StatusCode, String, Value) {
    let resp = respond(&ctx(), path, accept).expect("discovery path");
    let status = resp.status();
    let ct = resp.headers()[header::CONTENT_TYPE]
        .to_str()
        .unwrap()
        .to_string();
    let bytes = futures::executor::block_on(resp.into_body().collect())
        .unwrap()
        .to_bytes();
    (status, ct, serde_json::from_slice(&bytes).unwrap())
}

const V2: &str = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList";
const V2BETA1: &str = "application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList";

#[test]
fn negotiation_follows_order_and_q() {
    use AggregatedVersion::{V2Beta1 as TwoBeta1, V2 as Two};
    assert_eq!(negotiate("", true), Some(Format::Plain));
    assert_eq!(negotiate("application/json", true), Some(Format::Plain));
    assert_eq!(negotiate(V2, true), Some(Format::Aggregated(Two)));
    // kubectl 1.27 and 1.33 headers.
    let k127 = format!("{V2BETA1},application/json");
    assert_eq!(negotiate(&k127, true), Some(Format::Aggregated(TwoBeta1)));
    let k133 = format!("{V2};charset=utf-8, {V2BETA1};charset=utf-8, application/json");
    assert_eq!(negotiate(&k133, true), Some(Format::Aggregated(Two)));
    // q-values reorder the list.
    let q = format!("{V2};q=0.5,application/json;q=0.9");
    assert_eq!(negotiate(&q, true), Some(Format::Plain));
    let q = format!("application/json;q=0.5,{V2BETA1}");
    assert_eq!(negotiate(&q, true), Some(Format::Aggregated(TwoBeta1)));
    // Aggregated is only offered for /api and /apis.
    assert_eq!(negotiate(&k127, false), Some(Format::Plain));
    // Unknown aggregated versions and foreign types are skipped; nothing acceptable is None.
    assert_eq!(
        negotiate(
            "application/json;g=apidiscovery.k8s.io;v=v9;as=APIGroupDiscoveryList",
            true
        ),
        None
    );
    assert_eq!(negotiate("application/vnd.kubernetes.protobuf", true), None);
    assert_eq!(
        negotiate("application/vnd.kubernetes.protobuf,*/*", true),
        Some(Format::Plain)
    );
    assert_eq!(negotiate(&format!("{V2};q=0"), true), None);
}

#[test]
fn api_versions_plain() {
    let (status, ct, body) = get("/api", "application/json");
    assert_eq!(status, StatusCode::OK);
    assert_eq!(ct, "application/json");
    assert_eq!(body["kind"], "APIVersions");
    assert_eq!(body["versions"], json!(["v1"]));
    assert_eq!(
        body["serverAddressByClientCIDRs"][0],
        json!({"clientCIDR":"0.0.0.0/0","serverAddress":"10.0.0.5:6443"})
    );
}

#[test]
fn aggregated_content_type_is_echoed() {
    for (accept, version) in [(V2, "v2"), (V2BETA1, "v2beta1")] {
        let (_, ct, body) = get("/api", &format!("{accept},application/json"));
        assert_eq!(ct, accept);
        assert_eq!(body["kind"], "APIGroupDiscoveryList");
        assert_eq!(body["apiVersion"], format!("apidiscovery.k8s.io/{version}"));
        let items = body["items"].as_array().unwrap();
        assert_eq!(items.len(), 1);
        assert_eq!(items[0]["metadata"]["name"], "");
    }
}

#[test]
fn aggregated_core_resources() {
    let (_, _, body) = get("/api", V2);
    let version = &body["items"][0]["versions"][0];
    assert_eq!(version["version"], "v1");
    assert_eq!(version["freshness"], "Current");
    let resources = version["resources"].as_array().unwrap();
    let pods = resources.iter().find(|r| r["resource"] == "pods").unwrap();
    assert_eq!(
        pods["responseKind"],
        json!({"group":"","version":"v1","kind":"Pod"})
    );
    assert_eq!(pods["scope"], "Namespaced");
    assert_eq!(pods["singularResource"], "pod");
    assert_eq!(pods["shortNames"], json!(["po"]));
    assert_eq!(pods["categories"], json!(["all"]));
    assert_eq!(
        pods["subresources"],
        json!([
            {"subresource":"binding","responseKind":{"group":"","version":"v1","kind":"Binding"},
             "verbs":["create"]},
            {"subresource":"eviction","responseKind":{"group":"policy","version":"v1","kind":"Eviction"},
             "verbs":["create"]},
            {"subresource":"status","responseKind":{"group":"","version":"v1","kind":"Pod"},
             "verbs":["get","patch","update"]}])
    );
    // The legacy `bindings` collection only takes creates.
    let bindings = resources
        .iter()
        .find(|r| r["resource"] == "bindings")
        .unwrap();
    assert_eq!(bindings["verbs"], json!(["create"]));
    assert_eq!(bindings["scope"], "Namespaced");
    let ns = resources
        .iter()
        .find(|r| r["resource"] == "namespaces")
        .unwrap();
    assert_eq!(ns["scope"], "Cluster");
    assert!(!ns["verbs"]
        .as_array()
        .unwrap()
        .contains(&json!("deletecollection")));
    let cm = resources
        .iter()
        .find(|r| r["resource"] == "configmaps")
        .unwrap();
    assert!(cm.get("subresources").is_none());
    assert!(cm.get("categories").is_none());
}

#[test]
fn aggregated_groups() {
    let (_, _, body) = get("/apis", V2);
    let names: Vec<&str> = body["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["metadata"]["name"].as_str().unwrap())
        .collect();
    for group in ["events.k8s.io", "discovery.k8s.io", "coordination.k8s.io"] {
        assert!(names.contains(&group), "{group} missing from {names:?}");
    }
    assert!(!names.contains(&""));
}

#[test]
fn group_list_and_group() {
    let (_, ct, body) = get("/apis/", &format!("{V2};q=0.1,application/json"));
    assert_eq!(ct, "application/json");
    assert_eq!(body["kind"], "APIGroupList");
    let lease = body["groups"]
        .as_array()
        .unwrap()
        .iter()
        .find(|g| g["name"] == "coordination.k8s.io")
        .unwrap();
    assert_eq!(
        lease["preferredVersion"],
        json!({"groupVersion":"coordination.k8s.io/v1","version":"v1"})
    );
    // Only the aggregated type is acceptable, and a group has no aggregated form.
    let (status, _, _) = get("/apis/coordination.k8s.io", V2);
    assert_eq!(status, StatusCode::NOT_ACCEPTABLE);
    let (status, _, group) = get("/apis/coordination.k8s.io", "application/json");
    assert_eq!(status, StatusCode::OK);
    assert_eq!(group["kind"], "APIGroup");
    assert_eq!(group["name"], "coordination.k8s.io");
    let (status, _, body) = get("/apis/nope.example.com", "");
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert_eq!(body["kind"], "Status");
}

#[test]
fn resource_lists() {
    // Aggregated Accept on a group version path still gets the plain list.
    let (_, ct, body) = get("/api/v1", &format!("{V2},application/json"));
    assert_eq!(ct, "application/json");
    assert_eq!(body["kind"], "APIResourceList");
    assert_eq!(body["groupVersion"], "v1");
    let resources = body["resources"].as_array().unwrap();
    let names: Vec<&str> = resources
        .iter()
        .map(|r| r["name"].as_str().unwrap())
        .collect();
    for name in [
        "pods",
        "pods/status",
        "nodes/status",
        "namespaces/status",
        "services/status",
        "configmaps",
        "secrets",
        "events",
    ] {
        assert!(names.contains(&name), "{name} missing");
    }
    let pods = resources.iter().find(|r| r["name"] == "pods").unwrap();
    assert_eq!(pods["namespaced"], true);
    // storageVersionHash of core/v1 Pod as kube-apiserver reports it.
    assert_eq!(pods["storageVersionHash"], "xPOwRZ+Yhw8=");
    let status = resources
        .iter()
        .find(|r| r["name"] == "pods/status")
        .unwrap();
    assert_eq!(status["kind"], "Pod");
    assert_eq!(status["verbs"], json!(["get", "patch", "update"]));
    // As kube-apiserver lists the scheduler's two ways to bind a pod.
    let binding = resources
        .iter()
        .find(|r| r["name"] == "pods/binding")
        .unwrap();
    assert_eq!(
        *binding,
        json!({"name": "pods/binding", "singularName": "", "namespaced": true,
               "kind": "Binding", "verbs": ["create"]})
    );
    let bindings = resources.iter().find(|r| r["name"] == "bindings").unwrap();
    assert_eq!(
        *bindings,
        json!({"name": "bindings", "singularName": "binding", "namespaced": true,
               "kind": "Binding", "verbs": ["create"]})
    );

    let (_, _, body) = get("/apis/coordination.k8s.io/v1", "");
    assert_eq!(body["groupVersion"], "coordination.k8s.io/v1");
    assert_eq!(body["resources"][0]["name"], "leases");
    assert_eq!(body["resources"][0]["storageVersionHash"], "gqkMMb/YqFM=");
    let (status, _, _) = get("/apis/coordination.k8s.io/v2", "");
    assert_eq!(status, StatusCode::NOT_FOUND);
}

#[test]
fn not_discovery_paths() {
    assert!(respond(&ctx(), "/api/v1/pods", "").is_none());
    assert!(respond(&ctx(), "/apis/apps/v1/deployments", "").is_none());
    assert!(respond(&ctx(), "/version", "").is_none());
}

#[test]
fn refusals_are_statuses() {
    let body = |path: &str, accept: &str| {
        let resp = respond(&ctx(), path, accept).expect("discovery path");
        let bytes = futures::executor::block_on(resp.into_body().collect())
            .unwrap()
            .to_bytes();
        String::from_utf8(bytes.to_vec()).unwrap()
    };
    assert_eq!(
        body("/apis/coordination.k8s.io", V2),
        r#"{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"only the following media types are accepted: application/json, application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList","reason":"NotAcceptable","details":{},"code":406}"#
    );
    assert_eq!(
        body("/apis/nope.example.com", ""),
        r#"{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"the server could not find the requested resource","reason":"NotFound","details":{},"code":404}"#
    );
}
