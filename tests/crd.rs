//! CustomResourceDefinitions against the real server (docs/crds.md), with kubectl 1.27 and
//! 1.33:
//!
//! - cert-manager's Certificate definition (tests/fixtures/cert-manager, Apache-2.0) applied
//!   client-side and server-side, its kind in discovery, valid Certificates created and
//!   invalid ones refused with kube-apiserver's 422 field paths, an undeclared field refused by
//!   strict field validation, `kubectl get` with its printer columns, `kubectl explain` of the
//!   kind and of nested fields;
//! - a definition with status and scale subresources: defaults, pruning, `kubectl scale`,
//!   status written only through `/status`, strategic merge refused with 415;
//! - a definition with two versions: objects stored in the storage version and served in the
//!   requested one (get, list, watch, create, patch, update, delete), a conversion webhook
//!   refused;
//! - deleting a definition deletes its objects first, then the kind is gone;
//! - bad input: non-structural schemas (kube-apiserver's messages), a 10 MiB schema, names
//!   colliding with a built-in kind (`pods` in the core group, `ingresses` in
//!   networking.k8s.io) or with another definition;
//! - on a 3-server cluster the kind is served by every server within a second of the create.

mod cluster_support;
mod support;

use std::time::{Duration, Instant};

use serde_json::{json, Value};
use support::kubectl::{apply, ok, run as kubectl, stderr, stdout};
use support::{Api, Server};

const KUBECTLS: [&str; 2] = [
    "/usr/lib/google-cloud-sdk/bin/kubectl.1.27",
    "/usr/lib/google-cloud-sdk/bin/kubectl.1.33",
];

const CERTIFICATES_CRD: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/tests/fixtures/cert-manager/certificates.yaml"
);

/// A namespaced Widget kind with status and scale subresources, defaults and printer columns.
fn widget_crd(group: &str) -> Value {
    json!({
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": format!("widgets.{group}")},
        "spec": {"group": group, "scope": "Namespaced",
            "names": {"plural": "widgets", "kind": "Widget", "shortNames": ["wd"]},
            "versions": [{"name": "v1", "served": true, "storage": true,
                "subresources": {"status": {}, "scale": {"specReplicasPath": ".spec.replicas",
                    "statusReplicasPath": ".status.replicas", "labelSelectorPath": ".status.selector"}},
                "additionalPrinterColumns": [
                    {"name": "Replicas", "type": "integer", "jsonPath": ".spec.replicas"},
                    {"name": "Color", "type": "string", "jsonPath": ".spec.color"},
                    {"name": "Ready", "type": "integer", "jsonPath": ".status.replicas"}],
                "schema": {"openAPIV3Schema": {"type": "object", "properties": {
                    "spec": {"type": "object", "properties": {
                        "replicas": {"type": "integer", "minimum": 0, "default": 1},
                        "color": {"type": "string", "enum": ["red", "blue"], "default": "red"},
                        "size": {"type": "string", "pattern": "^[0-9]+(cm|m)$"},
                        "free": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}},
                    "status": {"type": "object", "properties": {
                        "replicas": {"type": "integer"}, "selector": {"type": "string"}}}}}}}]}})
}

fn runtime() -> tokio::runtime::Runtime {
    support::runtime()
}

async fn send(
    api: &Api,
    method: &str,
    path: &str,
    content_type: &str,
    body: &Value,
) -> support::Resp {
    api.request(
        method,
        path,
        Some(content_type),
        serde_json::to_vec(body).expect("serialize"),
    )
    .await
    .expect("request")
}

/// Waits until `path` answers `want`.
async fn wait_status(api: &Api, path: &str, want: u16) {
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut last = 0;
    while Instant::now() < deadline {
        last = api.get(path).await.expect("get").status;
        if last == want {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("{path}: {last}, want {want}");
}

fn header_of(table: &str) -> Vec<String> {
    table
        .lines()
        .next()
        .unwrap_or("")
        .split_whitespace()
        .map(str::to_string)
        .collect()
}

const CERT: &str = "apiVersion: cert-manager.io/v1
kind: Certificate
metadata:
  name: NAME
  namespace: default
spec:
  secretName: NAME-tls
  dnsNames: [example.com]
  issuerRef: {name: ca-issuer, kind: Issuer}
";

const BAD_CERT: &str = "apiVersion: cert-manager.io/v1
kind: Certificate
metadata:
  name: bad
  namespace: default
spec:
  secretName: 5
  duration: true
  privateKey: {algorithm: DSA}
  issuerRef: {kind: Issuer}
";

#[test]
fn kubectl_applies_cert_managers_certificate_definition_and_its_objects() {
    let server = Server::start(&[]);
    let kc = server.kubeconfig_path();
    for binary in KUBECTLS {
        // 1.27 applies client-side (create, then a patch on the second run); 1.33 server-side.
        let args: &[&str] = if binary.ends_with("1.27") {
            &["apply", "-f", CERTIFICATES_CRD]
        } else {
            &["apply", "--server-side", "-f", CERTIFICATES_CRD]
        };
        let out = ok(binary, &kc, args);
        assert!(
            out.contains("certificates.cert-manager.io"),
            "{binary}: {out}"
        );
        let resources = ok(
            binary,
            &kc,
            &["api-resources", "--api-group=cert-manager.io"],
        );
        let line = resources
            .lines()
            .find(|l| l.starts_with("certificates"))
            .unwrap_or_else(|| panic!("{binary}: {resources}"));
        let words: Vec<&str> = line.split_whitespace().collect();
        assert_eq!(
            words,
            [
                "certificates",
                "cert,certs",
                "cert-manager.io/v1",
                "true",
                "Certificate"
            ],
            "{binary}"
        );
        let crd = ok(binary, &kc, &["get", "crd", "certificates.cert-manager.io", "-o",
            "jsonpath={.status.conditions[?(@.type==\"Established\")].status} {.status.acceptedNames.kind}"]);
        assert_eq!(crd, "True Certificate", "{binary}");

        // Definitions print as kube-apiserver prints them: NAME and CREATED AT.
        let table = ok(binary, &kc, &["get", "crd"]);
        assert_eq!(header_of(&table), ["NAME", "CREATED", "AT"], "{table}");
        assert!(table.contains("certificates.cert-manager.io"), "{table}");

        let name = format!("web{}", binary.rsplit('.').next().unwrap_or("x"));
        let out = apply(binary, &kc, &CERT.replace("NAME", &name));
        assert!(out.status.success(), "{binary}: {}", stderr(&out));
        assert_eq!(
            stdout(&out).trim(),
            format!("certificate.cert-manager.io/{name} created")
        );

        let table = ok(binary, &kc, &["get", "certificates", &name]);
        assert_eq!(
            header_of(&table),
            ["NAME", "READY", "SECRET", "AGE"],
            "{table}"
        );
        let row: Vec<&str> = table
            .lines()
            .nth(1)
            .unwrap_or("")
            .split_whitespace()
            .collect();
        // READY is empty until an issuer reports; AGE is an age, not a timestamp.
        assert_eq!(row[..2], [name.as_str(), &format!("{name}-tls")], "{table}");
        assert!(row[2].ends_with('s') || row[2].ends_with('m'), "{table}");
        let wide = ok(binary, &kc, &["get", "cert", &name, "-o", "wide"]);
        assert_eq!(
            header_of(&wide),
            [
                "NAME",
                "READY",
                "SECRET",
                "ISSUER",
                "STATUS",
                "EXPIRATION",
                "AGE"
            ],
            "{wide}"
        );
        assert!(wide.contains("ca-issuer"), "{wide}");

        // `kubectl explain` reads the kind's schema from /openapi/v3/apis/cert-manager.io/v1.
        let explained = ok(binary, &kc, &["explain", "certificates"]);
        assert!(
            explained
                .lines()
                .any(|l| l.split_whitespace().eq(["KIND:", "Certificate"])),
            "{binary}: {explained}"
        );
        assert!(
            explained.contains("A Certificate resource should be created"),
            "{binary}: {explained}"
        );
        let explained = ok(binary, &kc, &["explain", "certificate.spec.issuerRef.name"]);
        assert!(
            explained.contains("FIELD: name <string>"),
            "{binary}: {explained}"
        );
        assert!(
            explained.contains("Name of the issuer being referred to."),
            "{binary}: {explained}"
        );
        let explained = ok(binary, &kc, &["explain", "certificates.metadata.labels"]);
        assert!(
            explained.contains("FIELD: labels <map[string]string>"),
            "{binary}: {explained}"
        );

        let out = apply(binary, &kc, BAD_CERT);
        assert!(!out.status.success(), "{binary}");
        let err = stderr(&out);
        for want in [
            "The Certificate \"bad\" is invalid",
            "spec.secretName: Invalid value: \"integer\": spec.secretName in body must be of type string: \"integer\"",
            "spec.duration: Invalid value: \"boolean\": spec.duration in body must be of type string: \"boolean\"",
            "spec.privateKey.algorithm: Unsupported value: \"DSA\": supported values: \"RSA\", \"ECDSA\", \"Ed25519\"",
            "spec.issuerRef.name: Required value",
        ] {
            assert!(err.contains(want), "{binary}: {want}\n{err}");
        }
        let unknown = CERT
            .replace("NAME", "unknown")
            .replace("  dnsNames", "  bogus: 1\n  dnsNames");
        let out = apply(binary, &kc, &unknown);
        assert!(!out.status.success(), "{binary}");
        assert!(
            stderr(&out).contains("strict decoding error: unknown field \"spec.bogus\""),
            "{binary}: {}",
            stderr(&out)
        );
    }
    // Both kubectls' objects are there; the list is a CertificateList.
    let list = ok(KUBECTLS[1], &kc, &["get", "certificates", "-o", "json"]);
    let list: Value = serde_json::from_str(&list).expect("json");
    assert_eq!(list["kind"], "List");
    let names: Vec<&str> = list["items"]
        .as_array()
        .expect("items")
        .iter()
        .filter_map(|i| i["metadata"]["name"].as_str())
        .collect();
    assert_eq!(names, ["web27", "web33"]);
    runtime().block_on(async {
        let api = server.api();
        let raw = api.get("/apis/cert-manager.io/v1/certificates").await.expect("list");
        assert_eq!(raw.status, 200);
        assert_eq!(raw.json()["kind"], "CertificateList");
        // A label selector and a field selector on metadata.name.
        let by_name = api
            .get("/apis/cert-manager.io/v1/namespaces/default/certificates?fieldSelector=metadata.name%3Dweb33")
            .await
            .expect("list");
        assert_eq!(by_name.json()["items"].as_array().map(Vec::len), Some(1));
    });
}

#[test]
fn status_and_scale_subresources_defaults_and_pruning() {
    let server = Server::start(&[]);
    let kc = server.kubeconfig_path();
    runtime().block_on(async {
        let api = server.api();
        let r = api
            .post_json("/apis/apiextensions.k8s.io/v1/customresourcedefinitions", &widget_crd("example.com"))
            .await
            .expect("create crd");
        assert_eq!(r.status, 201, "{}", r.text());
        // Served at once: the 201 came after the store applied the definition.
        let path = "/apis/example.com/v1/namespaces/default/widgets";
        let r = api.get(path).await.expect("list");
        assert_eq!(r.status, 200, "{}", r.text());
        let w = json!({"apiVersion": "example.com/v1", "kind": "Widget",
            "metadata": {"name": "w1", "namespace": "default"},
            "spec": {"replicas": 2, "bogus": true, "free": {"any": {"thing": 1}}},
            "status": {"replicas": 9}});
        let r = api.post_json(path, &w).await.expect("create");
        assert_eq!(r.status, 201, "{}", r.text());
        let created = r.json();
        // Defaulted, pruned, status dropped on create (status is a subresource), generation 1.
        assert_eq!(
            created["spec"],
            json!({"replicas": 2, "color": "red", "free": {"any": {"thing": 1}}})
        );
        assert!(created.get("status").is_none(), "{created}");
        assert_eq!(created["metadata"]["generation"], 1);
        let bad = json!({"apiVersion": "example.com/v1", "kind": "Widget",
            "metadata": {"name": "w2"}, "spec": {"replicas": -1, "color": "green", "size": "big"}});
        let r = api.post_json(path, &bad).await.expect("create");
        assert_eq!(r.status, 422, "{}", r.text());
        let causes: Vec<String> = r.json()["details"]["causes"]
            .as_array()
            .expect("causes")
            .iter()
            .map(|c| format!("{}: {}", c["field"].as_str().unwrap_or(""), c["message"].as_str().unwrap_or("")))
            .collect();
        for want in [
            "spec.replicas: Invalid value: -1: spec.replicas in body should be greater than or equal to 0",
            "spec.color: Unsupported value: \"green\": supported values: \"red\", \"blue\"",
            "spec.size: Invalid value: \"big\": spec.size in body should match '^[0-9]+(cm|m)$'",
        ] {
            assert!(causes.iter().any(|c| c == want), "{want}\n{causes:?}");
        }
        // A write of the object does not change its status; /status does, and only status.
        let r = send(&api, "PATCH", &format!("{path}/w1"), "application/merge-patch+json",
            &json!({"status": {"replicas": 3}})).await;
        assert_eq!(r.status, 200, "{}", r.text());
        assert!(r.json().get("status").is_none(), "{}", r.text());
        let r = send(&api, "PATCH", &format!("{path}/w1/status"), "application/merge-patch+json",
            &json!({"spec": {"replicas": 7}, "status": {"replicas": 3, "selector": "app=w"}})).await;
        assert_eq!(r.status, 200, "{}", r.text());
        assert_eq!(r.json()["status"]["replicas"], 3);
        assert_eq!(r.json()["spec"]["replicas"], 2);
        assert_eq!(r.json()["metadata"]["generation"], 1, "a status write is no spec change");
        // Strategic merge is not for custom kinds: 415, as kube-apiserver answers.
        let r = send(&api, "PATCH", &format!("{path}/w1"), "application/strategic-merge-patch+json",
            &json!({"spec": {"replicas": 3}})).await;
        assert_eq!(r.status, 415, "{}", r.text());
        let r = send(&api, "PATCH", &format!("{path}/w1"), "application/json-patch+json",
            &json!([{"op": "replace", "path": "/spec/color", "value": "blue"}])).await;
        assert_eq!(r.status, 200, "{}", r.text());
        assert_eq!(r.json()["metadata"]["generation"], 2);
        // Watch sees a change; label selectors and deletecollection work on custom objects.
        let mut labelled = w.clone();
        labelled["metadata"] = json!({"name": "w3", "labels": {"tier": "gone"}});
        let r = api.post_json(path, &labelled).await.expect("create");
        assert_eq!(r.status, 201, "{}", r.text());
        let rv = r.json()["metadata"]["resourceVersion"].as_str().expect("rv").to_string();
        let selected = api.get(&format!("{path}?labelSelector=tier%3Dgone")).await.expect("list");
        assert_eq!(selected.json()["items"].as_array().map(Vec::len), Some(1));
        let r = api
            .request("DELETE", &format!("{path}?labelSelector=tier%3Dgone"), None, Vec::new())
            .await
            .expect("deletecollection");
        assert_eq!(r.status, 200, "{}", r.text());
        let events = api
            .get(&format!("{path}?watch=true&resourceVersion={rv}&timeoutSeconds=1"))
            .await
            .expect("watch");
        assert!(events.text().contains("\"type\":\"DELETED\""), "{}", events.text());
        assert_eq!(api.get(&format!("{path}/w3")).await.expect("get").status, 404);
        let scale = api.get(&format!("{path}/w1/scale")).await.expect("scale");
        assert_eq!(scale.status, 200);
        let scale = scale.json();
        assert_eq!(scale["kind"], "Scale");
        assert_eq!(scale["spec"]["replicas"], 2);
        assert_eq!(scale["status"], json!({"replicas": 3, "selector": "app=w"}));
    });
    for binary in KUBECTLS {
        let replicas = if binary.ends_with("1.27") { "4" } else { "5" };
        let out = ok(
            binary,
            &kc,
            &["scale", "widget", "w1", &format!("--replicas={replicas}")],
        );
        assert_eq!(out.trim(), "widget.example.com/w1 scaled", "{binary}");
        let table = ok(binary, &kc, &["get", "wd"]);
        assert_eq!(
            header_of(&table),
            ["NAME", "REPLICAS", "COLOR", "READY"],
            "{table}"
        );
        let row: Vec<&str> = table
            .lines()
            .nth(1)
            .unwrap_or("")
            .split_whitespace()
            .collect();
        assert_eq!(row, ["w1", replicas, "blue", "3"], "{binary}: {table}");
        // The subresources are in discovery (scale and status).
        let raw = ok(binary, &kc, &["get", "--raw", "/apis/example.com/v1"]);
        let list: Value = serde_json::from_str(&raw).expect("json");
        let names: Vec<&str> = list["resources"]
            .as_array()
            .expect("resources")
            .iter()
            .filter_map(|r| r["name"].as_str())
            .collect();
        assert_eq!(
            names,
            ["widgets", "widgets/scale", "widgets/status"],
            "{raw}"
        );
        // kubectl's status writes need --subresource (1.24+); a plain patch leaves status.
        let out = kubectl(
            binary,
            &kc,
            &[
                "patch",
                "wd",
                "w1",
                "--type=merge",
                "-p",
                r#"{"status":{"replicas":1}}"#,
            ],
        );
        assert!(out.status.success(), "{}", stderr(&out));
        let status = ok(
            binary,
            &kc,
            &["get", "wd", "w1", "-o", "jsonpath={.status.replicas}"],
        );
        assert_eq!(status, "3", "{binary}");
    }
}

/// Gadgets in two versions: v1beta1 served, v1 served and stored.
fn gadget_crd(conversion: &str) -> Value {
    let schema = json!({"openAPIV3Schema": {"type": "object", "properties": {
        "spec": {"type": "object", "properties": {"size": {"type": "integer"}}}}}});
    json!({
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": "gadgets.conv.example.com"},
        "spec": {"group": "conv.example.com", "scope": "Namespaced",
            "names": {"plural": "gadgets", "kind": "Gadget"},
            "conversion": {"strategy": conversion},
            "versions": [
                {"name": "v1beta1", "served": true, "storage": false, "schema": schema},
                {"name": "v1", "served": true, "storage": true, "schema": schema}]}})
}

#[test]
fn objects_are_stored_in_the_storage_version_and_served_in_the_requested_one() {
    let server = Server::start(&[]);
    let kc = server.kubeconfig_path();
    let beta = "/apis/conv.example.com/v1beta1/namespaces/default/gadgets";
    let v1 = "/apis/conv.example.com/v1/namespaces/default/gadgets";
    runtime().block_on(async {
        let api = server.api();
        let crds = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions";
        // A conversion webhook is refused: only `None` conversion is served.
        let r = send(
            &api,
            "POST",
            crds,
            "application/json",
            &gadget_crd("Webhook"),
        )
        .await;
        assert_eq!(r.status, 422, "{}", r.text());
        assert!(
            r.text().contains(
                "spec.conversion.strategy: Forbidden: conversion webhooks are not supported"
            ),
            "{}",
            r.text()
        );
        let r = send(&api, "POST", crds, "application/json", &gadget_crd("None")).await;
        assert_eq!(r.status, 201, "{}", r.text());
        assert_eq!(r.json()["status"]["storedVersions"], json!(["v1"]));
        wait_status(&api, beta, 200).await;

        let gadget = json!({"apiVersion": "conv.example.com/v1beta1", "kind": "Gadget",
            "metadata": {"name": "g1"}, "spec": {"size": 1}});
        let r = send(&api, "POST", beta, "application/json", &gadget).await;
        assert_eq!(r.status, 201, "{}", r.text());
        assert_eq!(r.json()["apiVersion"], "conv.example.com/v1beta1");
        for (path, want) in [
            (beta, "conv.example.com/v1beta1"),
            (v1, "conv.example.com/v1"),
        ] {
            let got = api.get(&format!("{path}/g1")).await.expect("get");
            assert_eq!(got.json()["apiVersion"], want, "{path}");
            assert_eq!(got.json()["spec"]["size"], 1, "{path}");
            let list = api.get(path).await.expect("list").json();
            assert_eq!(list["apiVersion"], want, "{path}");
            assert_eq!(list["items"][0]["apiVersion"], want, "{path}");
            let watch = api
                .get(&format!(
                    "{path}?watch=true&resourceVersion=0&timeoutSeconds=1"
                ))
                .await
                .expect("watch");
            let first: Value =
                serde_json::from_str(watch.text().lines().next().unwrap_or("")).expect("event");
            assert_eq!(first["type"], "ADDED", "{path}");
            assert_eq!(first["object"]["apiVersion"], want, "{path}");
        }

        // A merge patch and a PUT through v1beta1 answer v1beta1 and are stored as v1 (the
        // list of v1 shows the stored object's own version).
        let r = send(
            &api,
            "PATCH",
            &format!("{beta}/g1"),
            "application/merge-patch+json",
            &json!({"spec": {"size": 2}}),
        )
        .await;
        assert_eq!(r.status, 200, "{}", r.text());
        assert_eq!(r.json()["apiVersion"], "conv.example.com/v1beta1");
        let mut current = api.get(&format!("{beta}/g1")).await.expect("get").json();
        current["spec"]["size"] = json!(3);
        let r = send(
            &api,
            "PUT",
            &format!("{beta}/g1"),
            "application/json",
            &current,
        )
        .await;
        assert_eq!(r.status, 200, "{}", r.text());
        assert_eq!(r.json()["apiVersion"], "conv.example.com/v1beta1");
        assert_eq!(r.json()["spec"]["size"], 3);
        // The same object again through v1 changes nothing: it is the stored object.
        let stored = api.get(&format!("{v1}/g1")).await.expect("get").json();
        let r = send(
            &api,
            "PUT",
            &format!("{v1}/g1"),
            "application/json",
            &stored,
        )
        .await;
        assert_eq!(
            r.json()["metadata"]["resourceVersion"],
            stored["metadata"]["resourceVersion"]
        );
        // A create through v1 is read back through v1beta1.
        let gadget = json!({"apiVersion": "conv.example.com/v1", "kind": "Gadget",
            "metadata": {"name": "g2"}, "spec": {"size": 5}});
        let r = send(&api, "POST", v1, "application/json", &gadget).await;
        assert_eq!(r.status, 201, "{}", r.text());
        let got = api.get(&format!("{beta}/g2")).await.expect("get").json();
        assert_eq!(got["apiVersion"], "conv.example.com/v1beta1");
        let r = api
            .request("DELETE", &format!("{beta}/g2"), None, Vec::new())
            .await
            .expect("delete");
        assert_eq!(r.status, 200, "{}", r.text());
        // As kube-apiserver answers the delete of a custom object: a Status.
        assert_eq!(r.json()["kind"], "Status", "{}", r.text());
    });
    // kubectl asks for a version by its full resource name.
    for binary in KUBECTLS {
        let version = ok(
            binary,
            &kc,
            &[
                "get",
                "gadgets.v1beta1.conv.example.com",
                "g1",
                "-o",
                "jsonpath={.apiVersion} {.spec.size}",
            ],
        );
        assert_eq!(version, "conv.example.com/v1beta1 3", "{binary}");
        let version = ok(
            binary,
            &kc,
            &[
                "get",
                "gadgets.v1.conv.example.com",
                "g1",
                "-o",
                "jsonpath={.apiVersion}",
            ],
        );
        assert_eq!(version, "conv.example.com/v1", "{binary}");
    }
}

#[test]
fn deleting_a_definition_deletes_its_objects_first() {
    let server = Server::start(&[]);
    let kc = server.kubeconfig_path();
    runtime().block_on(async {
        let api = server.api();
        let r = api
            .post_json(
                "/apis/apiextensions.k8s.io/v1/customresourcedefinitions",
                &widget_crd("example.com"),
            )
            .await
            .expect("create crd");
        assert_eq!(r.status, 201, "{}", r.text());
        for ns in ["default", "kube-system"] {
            for i in 0..3 {
                let w = json!({"apiVersion": "example.com/v1", "kind": "Widget",
                    "metadata": {"name": format!("w{i}")}, "spec": {}});
                let r = api
                    .post_json(&format!("/apis/example.com/v1/namespaces/{ns}/widgets"), &w)
                    .await
                    .expect("create");
                assert_eq!(r.status, 201, "{}", r.text());
            }
        }
    });
    // kubectl waits for the definition to be gone (its finalizer held it until then).
    let out = ok(
        KUBECTLS[1],
        &kc,
        &["delete", "crd", "widgets.example.com", "--timeout=30s"],
    );
    assert!(out.contains("deleted"), "{out}");
    runtime().block_on(async {
        let api = server.api();
        wait_status(
            &api,
            "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/widgets.example.com",
            404,
        )
        .await;
        assert_eq!(
            api.get("/apis/example.com/v1/widgets")
                .await
                .expect("get")
                .status,
            404
        );
        // Defined again, the kind starts empty: the old objects were deleted, not hidden.
        let r = api
            .post_json(
                "/apis/apiextensions.k8s.io/v1/customresourcedefinitions",
                &widget_crd("example.com"),
            )
            .await
            .expect("create crd");
        assert_eq!(r.status, 201, "{}", r.text());
        let list = api.get("/apis/example.com/v1/widgets").await.expect("list");
        assert_eq!(list.status, 200);
        assert_eq!(list.json()["items"], json!([]), "{}", list.text());

        // An object with a finalizer of its own holds the definition; meanwhile nothing new
        // is created (405, as kube-apiserver answers).
        let path = "/apis/example.com/v1/namespaces/default/widgets";
        let held = json!({"apiVersion": "example.com/v1", "kind": "Widget",
            "metadata": {"name": "held", "finalizers": ["example.com/hold"]}, "spec": {}});
        let r = api.post_json(path, &held).await.expect("create");
        assert_eq!(r.status, 201, "{}", r.text());
        let crd_path =
            "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/widgets.example.com";
        let r = api
            .request("DELETE", crd_path, None, Vec::new())
            .await
            .expect("delete");
        assert_eq!(r.status, 200, "{}", r.text());
        let late = json!({"apiVersion": "example.com/v1", "kind": "Widget",
            "metadata": {"name": "late"}, "spec": {}});
        let r = api.post_json(path, &late).await.expect("create");
        assert_eq!(r.status, 405, "{}", r.text());
        assert_eq!(
            r.json()["message"],
            "create not allowed while custom resource definition is terminating"
        );
        // The cleanup asked for the held object's deletion; the definition waits for it.
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let o = api.get(&format!("{path}/held")).await.expect("get").json();
            if o["metadata"]["deletionTimestamp"].is_string() {
                break;
            }
            assert!(Instant::now() < deadline, "held was not deleted: {o}");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        assert_eq!(api.get(crd_path).await.expect("get").status, 200);
        let r = send(
            &api,
            "PATCH",
            &format!("{path}/held"),
            "application/merge-patch+json",
            &json!({"metadata": {"finalizers": null}}),
        )
        .await;
        assert_eq!(r.status, 200, "{}", r.text());
        wait_status(&api, crd_path, 404).await;
    });
}

fn causes_of(r: &support::Resp) -> Vec<String> {
    r.json()["details"]["causes"]
        .as_array()
        .map(|a| {
            a.iter()
                .map(|c| {
                    format!(
                        "{}: {}",
                        c["field"].as_str().unwrap_or(""),
                        c["message"].as_str().unwrap_or("")
                    )
                })
                .collect()
        })
        .unwrap_or_default()
}

#[test]
fn bad_definitions_are_refused_or_not_accepted() {
    let server = Server::start(&[]);
    runtime().block_on(async {
        let api = server.api();
        let crds = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions";
        // Non-structural: an object field without a type; properties with additionalProperties.
        let mut crd = widget_crd("example.com");
        crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
            .as_object_mut()
            .expect("spec schema")
            .remove("type");
        crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["status"]["additionalProperties"] =
            json!({"type": "string"});
        let r = api.post_json(crds, &crd).await.expect("create");
        assert_eq!(r.status, 422, "{}", r.text());
        let causes = causes_of(&r);
        for want in [
            "spec.versions[0].schema.openAPIV3Schema.properties[spec].type: Required value: must not be empty for specified object fields",
            "spec.versions[0].schema.openAPIV3Schema.properties[status].additionalProperties: Forbidden: additionalProperties and properties are mutual exclusive",
        ] {
            assert!(causes.iter().any(|c| c == want), "{want}\n{causes:?}");
        }
        assert!(
            r.json()["message"]
                .as_str()
                .unwrap_or("")
                .starts_with("CustomResourceDefinition.apiextensions.k8s.io \"widgets.example.com\" is invalid: "),
            "{}",
            r.text()
        );
        // Two storage versions.
        let mut crd = widget_crd("example.com");
        let mut v2 = crd["spec"]["versions"][0].clone();
        v2["name"] = json!("v2");
        crd["spec"]["versions"].as_array_mut().expect("versions").push(v2);
        let r = api.post_json(crds, &crd).await.expect("create");
        assert_eq!(r.status, 422, "{}", r.text());
        assert!(
            causes_of(&r).iter().any(|c| c.ends_with("must have exactly one version marked as storage version")),
            "{}",
            r.text()
        );
        // A schema over the 3 MiB request body limit is refused before it is parsed. Just
        // over: the server answers 413 without reading the rest, and a client still sending
        // megabytes then can see the connection reset before it reads the answer.
        let mut crd = widget_crd("example.com");
        crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["description"] =
            json!("x".repeat(3 * 1024 * 1024 + 1024));
        let r = api.post_json(crds, &crd).await.expect("create");
        assert_eq!(r.status, 413, "{}", r.text());
        // `pods` in the core group: not a definition kube-apiserver accepts at all.
        let mut crd = widget_crd("example.com");
        crd["metadata"]["name"] = json!("pods");
        crd["spec"]["group"] = json!("");
        crd["spec"]["names"] = json!({"plural": "pods", "kind": "Pod"});
        let r = api.post_json(crds, &crd).await.expect("create");
        assert_eq!(r.status, 422, "{}", r.text());
        let causes = causes_of(&r);
        assert!(causes.iter().any(|c| c == "spec.group: Required value"), "{causes:?}");
        assert!(
            causes.iter().any(|c| c == "metadata.name: Invalid value: \"pods\": must be spec.names.plural+\".\"+spec.group"),
            "{causes:?}"
        );
        // `ingresses` in networking.k8s.io (approved): stored, names not accepted, not served.
        let mut crd = widget_crd("networking.k8s.io");
        crd["metadata"]["name"] = json!("ingresses.networking.k8s.io");
        crd["metadata"]["annotations"] = json!({"api-approved.kubernetes.io": "unapproved, test"});
        crd["spec"]["names"] = json!({"plural": "ingresses", "kind": "Gateway"});
        let r = api.post_json(crds, &crd).await.expect("create");
        assert_eq!(r.status, 201, "{}", r.text());
        let conditions = &r.json()["status"]["conditions"];
        assert_eq!(
            conditions[0],
            json!({"type": "NamesAccepted", "status": "False", "reason": "PluralConflict",
                   "message": "\"ingresses\" is already in use",
                   "lastTransitionTime": conditions[0]["lastTransitionTime"]})
        );
        assert_eq!(conditions[1]["type"], "Established");
        assert_eq!(conditions[1]["status"], "False");
        let ingresses = api.get("/apis/networking.k8s.io/v1/ingresses").await.expect("list");
        assert_eq!(ingresses.json()["kind"], "IngressList", "the built-in kind is still served");
        // A kind another definition of the group already has.
        let r = api.post_json(crds, &widget_crd("example.com")).await.expect("create");
        assert_eq!(r.status, 201, "{}", r.text());
        let mut gadgets = widget_crd("example.com");
        gadgets["metadata"]["name"] = json!("gadgets.example.com");
        gadgets["spec"]["names"] =
            json!({"plural": "gadgets", "singular": "gadget", "kind": "Widget"});
        let r = api.post_json(crds, &gadgets).await.expect("create");
        assert_eq!(r.status, 201, "{}", r.text());
        assert_eq!(r.json()["status"]["conditions"][0]["reason"], "KindConflict");
        assert_eq!(api.get("/apis/example.com/v1/gadgets").await.expect("get").status, 404);
        assert_eq!(api.get("/apis/example.com/v1/widgets").await.expect("get").status, 200);
    });
}

#[test]
fn three_servers_serve_a_new_definition_within_a_second() {
    let mut cluster = cluster_support::Cluster::start(3);
    runtime().block_on(async {
        cluster.wait_leader().await;
        // Create through a member that is not the leader too: the write is forwarded.
        let leader = cluster.leader(0).await.expect("a leader");
        let via = (leader + 1) % 3;
        let api = cluster.api(via);
        let r = api
            .post_json("/apis/apiextensions.k8s.io/v1/customresourcedefinitions", &widget_crd("example.com"))
            .await
            .expect("create crd");
        assert_eq!(r.status, 201, "{}", r.text());
        let created = Instant::now();
        for i in 0..3 {
            let api = cluster.api(i);
            loop {
                let r = api.get("/apis/example.com/v1/namespaces/default/widgets").await.expect("get");
                if r.status == 200 {
                    break;
                }
                assert!(created.elapsed() < Duration::from_secs(1), "server {i} not serving: {}", r.text());
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            // Discovery on every server lists it too (aggregated, as kubectl 1.33 asks).
            let r = api
                .request("GET", "/apis", None, bytes_empty())
                .await
                .expect("discovery");
            assert!(r.text().contains("example.com"), "server {i}");
        }
        assert!(created.elapsed() < Duration::from_secs(1), "{:?}", created.elapsed());
        // Objects written on one server are read on another, validated the same way.
        let w = json!({"apiVersion": "example.com/v1", "kind": "Widget",
            "metadata": {"name": "w1"}, "spec": {"replicas": -1}});
        let r = cluster.api(leader).post_json("/apis/example.com/v1/namespaces/default/widgets", &w).await.expect("create");
        assert_eq!(r.status, 422, "{}", r.text());
        let w = json!({"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w1"}, "spec": {}});
        let r = cluster.api(via).post_json("/apis/example.com/v1/namespaces/default/widgets", &w).await.expect("create");
        assert_eq!(r.status, 201, "{}", r.text());
        let other = (via + 1) % 3;
        wait_status(&cluster.api(other), "/apis/example.com/v1/namespaces/default/widgets/w1", 200).await;
    });
}

fn bytes_empty() -> Vec<u8> {
    Vec::new()
}
