use http_body_util::BodyExt;

use super::*;
use crate::kube::resources::RESOURCES;

fn get(path: &str, accept: &str) -> (StatusCode, String, Bytes) {
    let resp = respond(path, accept).expect("openapi path");
    let status = resp.status();
    let ct = resp.headers()[header::CONTENT_TYPE]
        .to_str()
        .unwrap()
        .to_string();
    let body = futures::executor::block_on(resp.into_body().collect())
        .unwrap()
        .to_bytes();
    (status, ct, body)
}

#[test]
fn v2_is_empty_protobuf_for_kubectl() {
    let (status, ct, body) = get(
        "/openapi/v2",
        "application/com.github.proto-openapi.spec.v2@v1.0+protobuf",
    );
    assert_eq!(status, StatusCode::OK);
    assert_eq!(ct, V2_PROTOBUF);
    assert!(body.is_empty());
    let (_, ct, body) = get("/openapi/v2", "application/json");
    assert_eq!(ct, "application/json");
    let doc: Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(doc["swagger"], "2.0");
}

#[test]
fn v3_lists_every_served_group_version() {
    let (status, _, body) = get("/openapi/v3", "application/json");
    assert_eq!(status, StatusCode::OK);
    let root: Value = serde_json::from_slice(&body).unwrap();
    for r in RESOURCES {
        let gv = if r.group.is_empty() {
            format!("api/{}", r.version)
        } else {
            format!("apis/{}/{}", r.group, r.version)
        };
        let url = root["paths"][&gv]["serverRelativeURL"].as_str().unwrap();
        assert!(url.starts_with(&format!("/openapi/v3/{gv}?hash=")), "{url}");
        // The document has the kind's schema, tagged with its GVK, and a PATCH path that
        // advertises fieldValidation for that GVK.
        let (status, ct, body) = get(url, "application/json");
        assert_eq!(status, StatusCode::OK);
        assert_eq!(ct, "application/json");
        let doc: Value = serde_json::from_slice(&body).unwrap();
        let gvk = json!({"group": r.group, "version": r.version, "kind": r.kind});
        let schemas = doc["components"]["schemas"].as_object().unwrap();
        assert!(
            schemas
                .values()
                .any(|s| s["x-kubernetes-group-version-kind"] == json!([gvk.clone()])),
            "{} schema missing",
            r.kind
        );
        if r.is_create_only() {
            // `bindings` is only posted to: its collection has a POST path, no PATCH.
            assert!(doc["paths"]
                .as_object()
                .unwrap()
                .values()
                .any(|p| p["post"]["x-kubernetes-group-version-kind"] == gvk));
            continue;
        }
        let patch = doc["paths"]
            .as_object()
            .unwrap()
            .values()
            .find(|p| p["patch"]["x-kubernetes-group-version-kind"] == gvk)
            .unwrap_or_else(|| panic!("no PATCH path for {}", r.kind));
        assert!(patch["patch"]["parameters"]
            .as_array()
            .unwrap()
            .iter()
            .any(|p| p["name"] == "fieldValidation" && p["in"] == "query"));
        // kubectl must not build strategic merge patches from these schemas.
        assert!(patch["patch"]["requestBody"]["content"]
            .get("application/strategic-merge-patch+json")
            .is_none());
        // Every $ref resolves inside the document.
        let text = serde_json::to_string(&doc).unwrap();
        for piece in text.split("\"$ref\":\"#/components/schemas/").skip(1) {
            let name = &piece[..piece.find('"').unwrap()];
            assert!(schemas.contains_key(name), "dangling $ref {name} in {gv}");
        }
    }
    let (status, _, _) = get("/openapi/v3/apis/nope/v1", "application/json");
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert!(respond("/openapi", "").is_none());
    assert!(respond("/api/v1", "").is_none());
}

#[test]
fn unknown_fields_are_found() {
    let pod = json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "p", "labels": {"a": "b"}, "bogus": 1},
        "spec": {"containers": [{"name": "a", "image": "x", "imagePullPolcy": "Always",
                                 "resources": {"limits": {"cpu": "1"}}}],
                 "nodeSelector": {"k": "v"}},
        "extra": true});
    let mut found = unknown_fields("", "v1", "Pod", &pod).unwrap();
    found.sort();
    assert_eq!(
        found,
        [
            "extra",
            "metadata.bogus",
            "spec.containers[0].imagePullPolcy"
        ]
    );
    let lease = json!({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
        "metadata": {"name": "l"}, "spec": {"holderIdentity": "me", "leaseDurationSeconds": 10}});
    assert_eq!(
        unknown_fields("coordination.k8s.io", "v1", "Lease", &lease).unwrap(),
        Vec::<String>::new()
    );
    assert!(unknown_fields("example.com", "v1", "Widget", &lease).is_none());
}

#[test]
fn strict_message_matches_kube_apiserver() {
    assert_eq!(
        strict_decoding_message("Pod", "v1", &["spec.foo".into(), "bar".into()]),
        "Pod in version \"v1\" cannot be handled as a Pod: strict decoding error: \
         unknown field \"spec.foo\", unknown field \"bar\""
    );
}

#[test]
fn lookup_agrees_with_json_pointer() {
    let doc = serde_json::json!({
        "definitions": {"a.b/c": {"type": "string"}, "x~y": [1, {"z": 2}]},
        "list": [10, 20]
    });
    for pointer in [
        "",
        "/definitions",
        "/definitions/a.b~1c",
        "/definitions/x~0y/1/z",
        "/list/1",
        "/list/2",
        "/list/x",
        "/missing",
        "/definitions/a.b~1c/type/deeper",
        "nope",
    ] {
        assert_eq!(lookup(&doc, pointer), doc.pointer(pointer), "{pointer}");
    }
}
