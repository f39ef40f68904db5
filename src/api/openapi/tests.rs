use http_body_util::BodyExt;

use super::*;
use crate::kube::resources::RESOURCES;

fn no_custom_kinds() -> CustomKinds {
    CustomKinds::new(std::sync::Arc::new(crate::kube::store::Store::new(
        Default::default(),
    )))
}

fn get(path: &str, accept: &str) -> (StatusCode, String, Bytes) {
    get_with(path, accept, &no_custom_kinds())
}

fn get_with(path: &str, accept: &str, kinds: &CustomKinds) -> (StatusCode, String, Bytes) {
    let resp = respond(path, accept, kinds).expect("openapi path");
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
fn v2_without_custom_kinds_publishes_no_definition() {
    let (status, ct, body) = get(
        "/openapi/v2",
        "application/com.github.proto-openapi.spec.v2@v1.0+protobuf",
    );
    assert_eq!(status, StatusCode::OK);
    assert_eq!(ct, V2_PROTOBUF);
    // swagger "2.0" (field 1), info (2), then an empty definitions message (field 9).
    assert!(body.starts_with(b"\x0a\x032.0"), "{body:?}");
    assert!(body.ends_with(b"\x4a\x00"), "{body:?}");
    let (_, ct, body) = get("/openapi/v2", "application/json");
    assert_eq!(ct, "application/json");
    let doc: Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(doc["swagger"], "2.0");
    assert_eq!(doc["definitions"], json!({}), "no built-in kind");
}

#[test]
fn v2_publishes_the_served_custom_kinds() {
    let (_, kinds) = widget_kinds();
    let (status, _, body) = get_with("/openapi/v2", "application/json", &kinds);
    assert_eq!(status, StatusCode::OK);
    let doc: Value = serde_json::from_slice(&body).unwrap();
    let definitions = doc["definitions"].as_object().unwrap();
    let widget = &definitions["com.example.v1.Widget"];
    assert_eq!(
        widget["x-kubernetes-group-version-kind"][0]["kind"],
        "Widget"
    );
    assert_eq!(
        widget["properties"]["spec"]["properties"]["color"]["enum"],
        json!(["red"])
    );
    let meta = widget["properties"]["metadata"]["$ref"].as_str().unwrap();
    let meta = meta.strip_prefix("#/definitions/").unwrap();
    assert!(definitions.contains_key(meta), "{meta}");
    assert!(definitions.contains_key("com.example.v1.WidgetList"));
    assert!(
        !definitions.contains_key("com.example.v2.Widget"),
        "not served"
    );
    assert!(!definitions.keys().any(|k| k.starts_with("io.k8s.api.")));
    // Every reference resolves: kubectl refuses a document with a dangling one.
    let text = body.escape_ascii().to_string();
    for part in text.split("#/definitions/").skip(1) {
        let name = part.split('\\').next().unwrap().split('"').next().unwrap();
        assert!(definitions.contains_key(name), "dangling {name}");
    }
    let (_, ct, protobuf) = get_with(
        "/openapi/v2",
        "application/json;q=0.9,application/com.github.proto-openapi.spec.v2@v1.0+protobuf",
        &kinds,
    );
    assert_eq!(ct, V2_PROTOBUF);
    assert!(protobuf
        .windows(b"com.example.v1.Widget".len())
        .any(|w| w == b"com.example.v1.Widget"));
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
    assert!(respond("/openapi", "", &no_custom_kinds()).is_none());
    assert!(respond("/api/v1", "", &no_custom_kinds()).is_none());
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

/// A registry serving `widgets.example.com` in v1 and v2 (v2 not served), with descriptions.
fn widget_kinds() -> (std::sync::Arc<crate::kube::store::Store>, CustomKinds) {
    use crate::kube::mutation::Mutation;
    use crate::kube::object::ObjectKey;
    let store = std::sync::Arc::new(crate::kube::store::Store::new(Default::default()));
    let kinds = CustomKinds::new(store.clone());
    let schema = json!({"openAPIV3Schema": {"type": "object", "description": "A widget.",
        "properties": {"spec": {"type": "object", "properties": {
            "color": {"type": "string", "description": "The colour.", "enum": ["red"]}}}}}});
    store
        .apply(Mutation::Create {
            key: ObjectKey::new(crate::api::crd::CRDS, "", "widgets.example.com"),
            object: json!({"apiVersion": "apiextensions.k8s.io/v1",
                "kind": "CustomResourceDefinition",
                "metadata": {"name": "widgets.example.com", "uid": "u1"},
                "spec": {"group": "example.com", "scope": "Namespaced",
                    "names": {"plural": "widgets", "kind": "Widget"},
                    "versions": [
                        {"name": "v1", "served": true, "storage": true, "schema": schema},
                        {"name": "v2", "served": false, "storage": false, "schema": schema}]},
                "status": {"conditions": [{"type": "Established", "status": "True"}]}}),
            requires_open_namespace: false,
        })
        .expect("create");
    (store, kinds)
}

#[test]
fn custom_kinds_get_a_document_per_served_group_version() {
    let (store, kinds) = widget_kinds();
    let (_, _, body) = get_with("/openapi/v3", "application/json", &kinds);
    let root: Value = serde_json::from_slice(&body).unwrap();
    let url = root["paths"]["apis/example.com/v1"]["serverRelativeURL"]
        .as_str()
        .expect("the custom group version is listed")
        .to_string();
    assert!(
        root["paths"].get("apis/example.com/v2").is_none(),
        "not served"
    );
    assert!(
        root["paths"].get("api/v1").is_some(),
        "built-in documents stay"
    );
    let (status, _, body) = get_with(&url, "application/json", &kinds);
    assert_eq!(status, StatusCode::OK);
    let doc: Value = serde_json::from_slice(&body).unwrap();
    let widget = &doc["components"]["schemas"]["com.example.v1.Widget"];
    assert_eq!(
        widget["x-kubernetes-group-version-kind"],
        json!([{"group": "example.com", "version": "v1", "kind": "Widget"}])
    );
    assert_eq!(widget["description"], "A widget.");
    assert_eq!(
        widget["properties"]["spec"]["properties"]["color"]["description"],
        "The colour."
    );
    let meta = widget["properties"]["metadata"]["allOf"][0]["$ref"]
        .as_str()
        .expect("metadata refers to ObjectMeta");
    let meta = meta.strip_prefix("#/components/schemas/").unwrap();
    assert!(doc["components"]["schemas"].get(meta).is_some());
    assert!(doc["components"]["schemas"]
        .get("com.example.v1.WidgetList")
        .is_some());
    // kubectl leaves field validation to the server when the patch operation lists it.
    let patch =
        &doc["paths"]["/apis/example.com/v1/namespaces/{namespace}/widgets/{name}"]["patch"];
    assert_eq!(patch["x-kubernetes-group-version-kind"]["kind"], "Widget");
    assert!(patch["parameters"]
        .as_array()
        .unwrap()
        .iter()
        .any(|p| p["name"] == "fieldValidation"));

    // The document follows the registry: the definition gone, so is the document.
    store
        .apply(crate::kube::mutation::Mutation::Delete {
            key: crate::kube::object::ObjectKey::new(
                crate::api::crd::CRDS,
                "",
                "widgets.example.com",
            ),
            precondition: Default::default(),
        })
        .expect("delete");
    let (_, _, body) = get_with("/openapi/v3", "application/json", &kinds);
    let root: Value = serde_json::from_slice(&body).unwrap();
    assert!(root["paths"].get("apis/example.com/v1").is_none());
    let (status, _, _) = get_with(&url, "application/json", &kinds);
    assert_eq!(status, StatusCode::NOT_FOUND);
}

#[test]
fn the_index_locates_every_embedded_document() {
    // The index the generator writes with v3.json: each document's exact bytes, every one.
    let parsed: std::collections::BTreeMap<String, &serde_json::value::RawValue> =
        serde_json::from_str(V3_DOCUMENTS).expect("v3.json parses");
    let located: Vec<(&str, usize, usize)> = parsed
        .iter()
        .map(|(path, raw)| {
            let start = raw.get().as_ptr() as usize - V3_DOCUMENTS.as_ptr() as usize;
            (path.as_str(), start, start + raw.get().len())
        })
        .collect();
    assert_eq!(V3_INDEX, located.as_slice());
    assert_eq!(documents().len(), parsed.len());
}
