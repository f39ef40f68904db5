//! Write-path semantics against the real binary: server-side apply ownership (a table of
//! steps by two managers: conflict, force, release), Update entries of ordinary writes,
//! `dryRun=All` on every verb, `fieldValidation` Strict/Warn/Ignore, `generation`, and the
//! answer to a JSON patch whose `test` fails.

mod support;

use serde_json::{json, Value};
use support::{configmap, Api, Server};

const CMS: &str = "/api/v1/namespaces/default/configmaps";
const APPLY: Option<&str> = Some("application/apply-patch+yaml");

/// One request of the ownership table and what it must produce.
struct Step {
    what: &'static str,
    manager: &'static str,
    force: bool,
    data: Value,
    code: u16,
    /// Expected `data` after the step (success only).
    data_after: Option<Value>,
    /// Managers (Apply entries) and the `data` keys each must own afterwards.
    owners: &'static [(&'static str, &'static [&'static str])],
    /// (manager as printed, field) of each conflict cause (409 only).
    conflicts: &'static [(&'static str, &'static str)],
}

fn apply_body(data: &Value) -> Vec<u8> {
    serde_json::to_vec(&json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "owned"}, "data": data}))
    .expect("serialize")
}

fn owned_keys(object: &Value, manager: &str) -> Vec<String> {
    let entries = object["metadata"]["managedFields"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let entry = entries
        .iter()
        .find(|e| e["manager"] == manager && e["operation"] == "Apply");
    let mut keys: Vec<String> = entry
        .and_then(|e| e["fieldsV1"]["f:data"].as_object())
        .map(|m| {
            m.keys()
                .filter_map(|k| k.strip_prefix("f:"))
                .map(str::to_string)
                .collect()
        })
        .unwrap_or_default();
    keys.sort();
    keys
}

async fn patch(
    api: &Api,
    path: &str,
    content_type: &str,
    body: impl Into<bytes::Bytes>,
) -> support::Resp {
    api.request("PATCH", path, Some(content_type), body)
        .await
        .expect("patch")
}

#[test]
fn server_side_apply_ownership_table() {
    let server = Server::start(&[]);
    let rt = support::runtime();
    let api = server.api();
    let steps = vec![
        Step {
            what: "A creates by applying x and y",
            manager: "mgr-a",
            force: false,
            data: json!({"x": "1", "y": "1"}),
            code: 201,
            data_after: Some(json!({"x": "1", "y": "1"})),
            owners: &[("mgr-a", &["x", "y"])],
            conflicts: &[],
        },
        Step {
            what: "B applies the same x: shared, no conflict",
            manager: "mgr-b",
            force: false,
            data: json!({"x": "1"}),
            code: 200,
            data_after: Some(json!({"x": "1", "y": "1"})),
            owners: &[("mgr-a", &["x", "y"]), ("mgr-b", &["x"])],
            conflicts: &[],
        },
        Step {
            what: "B changes y: conflict naming A",
            manager: "mgr-b",
            force: false,
            data: json!({"x": "1", "y": "2"}),
            code: 409,
            data_after: None,
            owners: &[],
            conflicts: &[("conflict with \"mgr-a\"", ".data.y")],
        },
        Step {
            what: "B forces: y moves to B",
            manager: "mgr-b",
            force: true,
            data: json!({"x": "1", "y": "2"}),
            code: 200,
            data_after: Some(json!({"x": "1", "y": "2"})),
            owners: &[("mgr-a", &["x"]), ("mgr-b", &["x", "y"])],
            conflicts: &[],
        },
        Step {
            what: "A re-applies without x and y: x stays (B owns it), nothing of A's goes",
            manager: "mgr-a",
            force: false,
            data: json!({"z": "3"}),
            code: 200,
            data_after: Some(json!({"x": "1", "y": "2", "z": "3"})),
            owners: &[("mgr-a", &["z"]), ("mgr-b", &["x", "y"])],
            conflicts: &[],
        },
        Step {
            what: "B re-applies without y: y has no other owner and is removed",
            manager: "mgr-b",
            force: false,
            data: json!({"x": "1"}),
            code: 200,
            data_after: Some(json!({"x": "1", "z": "3"})),
            owners: &[("mgr-a", &["z"]), ("mgr-b", &["x"])],
            conflicts: &[],
        },
    ];
    rt.block_on(async {
        for step in steps {
            let path = format!(
                "{CMS}/owned?fieldManager={}{}",
                step.manager,
                if step.force { "&force=true" } else { "" }
            );
            let resp = patch(
                &api,
                &path,
                "application/apply-patch+yaml",
                apply_body(&step.data),
            )
            .await;
            assert_eq!(resp.status, step.code, "{}: {}", step.what, resp.text());
            let body = resp.json();
            if step.code == 409 {
                assert_eq!(body["reason"], "Conflict", "{}", step.what);
                let causes: Vec<(String, String)> = body["details"]["causes"]
                    .as_array()
                    .cloned()
                    .unwrap_or_default()
                    .iter()
                    .map(|c| {
                        assert_eq!(c["reason"], "FieldManagerConflict");
                        (
                            c["message"].as_str().unwrap_or("").to_string(),
                            c["field"].as_str().unwrap_or("").to_string(),
                        )
                    })
                    .collect();
                let want: Vec<(String, String)> = step
                    .conflicts
                    .iter()
                    .map(|(m, f)| (m.to_string(), f.to_string()))
                    .collect();
                assert_eq!(causes, want, "{}", step.what);
                assert_eq!(
                    body["message"],
                    "Apply failed with 1 conflict: conflict with \"mgr-a\": .data.y"
                );
                continue;
            }
            assert_eq!(
                Some(&body["data"]),
                step.data_after.as_ref(),
                "{}",
                step.what
            );
            for (manager, keys) in step.owners {
                assert_eq!(
                    owned_keys(&body, manager),
                    keys.to_vec(),
                    "{}: {manager}",
                    step.what
                );
            }
            // What the server answered is what it stored.
            let stored = api.get(&format!("{CMS}/owned")).await.expect("get").json();
            assert_eq!(stored["data"], body["data"], "{}", step.what);
            assert_eq!(
                stored["metadata"]["managedFields"],
                body["metadata"]["managedFields"]
            );
        }
    });
}

#[test]
fn ordinary_writes_record_update_entries() {
    let server = Server::start(&[]);
    let rt = support::runtime();
    let api = server.api();
    rt.block_on(async {
        let resp = api
            .request(
                "POST",
                &format!("{CMS}?fieldManager=kubectl-create"),
                Some("application/json"),
                serde_json::to_vec(&configmap("default", "upd", json!({"a": "1"}))).expect("json"),
            )
            .await
            .expect("create");
        assert_eq!(resp.status, 201, "{}", resp.text());
        let entries = resp.json()["metadata"]["managedFields"].clone();
        assert_eq!(entries[0]["manager"], "kubectl-create");
        assert_eq!(entries[0]["operation"], "Update");
        assert_eq!(entries[0]["apiVersion"], "v1");
        assert_eq!(entries[0]["fieldsType"], "FieldsV1");
        assert_eq!(
            entries[0]["fieldsV1"],
            json!({"f:data": {".": {}, "f:a": {}}})
        );
        // A strategic merge patch by kubectl-patch owns what it added.
        let resp = patch(
            &api,
            &format!("{CMS}/upd?fieldManager=kubectl-patch"),
            "application/strategic-merge-patch+json",
            r#"{"data":{"b":"2"}}"#,
        )
        .await;
        assert_eq!(resp.status, 200, "{}", resp.text());
        let entries = resp.json()["metadata"]["managedFields"].clone();
        let by = |m: &str| {
            entries
                .as_array()
                .and_then(|a| a.iter().find(|e| e["manager"] == m).cloned())
        };
        assert_eq!(
            by("kubectl-patch").map(|e| e["fieldsV1"].clone()),
            Some(json!({"f:data": {"f:b": {}}}))
        );
        // Applying a different value of a field an updater owns conflicts, naming it with its
        // version, as kube-apiserver prints updaters.
        let resp = patch(
            &api,
            &format!("{CMS}/upd?fieldManager=applier"),
            "application/apply-patch+yaml",
            r#"{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"upd"},"data":{"a":"9"}}"#,
        )
        .await;
        assert_eq!(resp.status, 409, "{}", resp.text());
        assert_eq!(
            resp.json()["details"]["causes"][0]["message"],
            "conflict with \"kubectl-create\" using v1"
        );
    });
}

/// (method, path, content type, body, expected code)
type DryRunCase = (&'static str, String, Option<&'static str>, Vec<u8>, u16);

#[test]
fn dry_run_validates_without_persisting() {
    let server = Server::start(&[]);
    let rt = support::runtime();
    let api = server.api();
    rt.block_on(async {
        let created = api
            .post_json(CMS, &configmap("default", "kept", json!({"a": "1"})))
            .await
            .expect("create");
        assert_eq!(created.status, 201);
        // The control plane writes in the background (leases every 2 s), so the store's
        // resourceVersion moves: what must not move is the ConfigMap's own.
        let rv = created.json()["metadata"]["resourceVersion"].clone();
        let generated =
            json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"generateName": "gen-"}});
        let cases: Vec<DryRunCase> = vec![
            (
                "POST",
                format!("{CMS}?dryRun=All"),
                Some("application/json"),
                serde_json::to_vec(&generated).expect("json"),
                201,
            ),
            (
                "PUT",
                format!("{CMS}/kept?dryRun=All"),
                Some("application/json"),
                serde_json::to_vec(&configmap("default", "kept", json!({"a": "2"}))).expect("json"),
                200,
            ),
            (
                "PATCH",
                format!("{CMS}/kept?dryRun=All"),
                Some("application/merge-patch+json"),
                br#"{"data":{"a":"3"}}"#.to_vec(),
                200,
            ),
            (
                "PATCH",
                format!("{CMS}/new-by-apply?dryRun=All&fieldManager=m"),
                APPLY,
                br#"{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"new-by-apply"}}"#
                    .to_vec(),
                201,
            ),
            (
                "DELETE",
                format!("{CMS}/kept?dryRun=All"),
                None,
                Vec::new(),
                200,
            ),
            ("DELETE", format!("{CMS}?dryRun=All"), None, Vec::new(), 200),
            (
                "POST",
                format!("{CMS}?dryRun=All"),
                Some("application/json"),
                serde_json::to_vec(&configmap("default", "Bad_Name", json!({}))).expect("json"),
                422,
            ),
        ];
        for (method, path, ct, body, code) in cases {
            let resp = api.request(method, &path, ct, body).await.expect("request");
            assert_eq!(resp.status, code, "{method} {path}: {}", resp.text());
            if method == "POST" && code == 201 {
                let md = &resp.json()["metadata"];
                assert!(
                    md["name"]
                        .as_str()
                        .is_some_and(|n| n.starts_with("gen-") && n.len() == 9),
                    "{md}"
                );
                assert!(md["uid"].as_str().is_some_and(|u| u.len() == 36), "{md}");
            }
        }
        let after = api.get(CMS).await.expect("list").json();
        // Every namespace also holds the root CA the control plane publishes.
        let items: Vec<&serde_json::Value> = after["items"]
            .as_array()
            .map(|a| {
                a.iter()
                    .filter(|i| i["metadata"]["name"] != "kube-root-ca.crt")
                    .collect()
            })
            .unwrap_or_default();
        let names: Vec<&str> = items
            .iter()
            .filter_map(|i| i["metadata"]["name"].as_str())
            .collect();
        assert_eq!(names, vec!["kept"]);
        assert_eq!(items[0]["data"], json!({"a": "1"}));
        assert_eq!(
            items[0]["metadata"]["resourceVersion"], rv,
            "dry runs wrote something"
        );
    });
}

#[test]
fn field_validation_strict_warn_ignore() {
    let server = Server::start(&[]);
    let rt = support::runtime();
    let api = server.api();
    let body = r#"{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"NAME"},"data":{"a":"1"},"spec":{"foo":1},"data":{"a":"2"}}"#;
    rt.block_on(async {
        let send = |mode: &'static str, name: &'static str| {
            let api = api.clone();
            async move {
                api.request("POST", &format!("{CMS}?fieldValidation={mode}"), Some("application/json"),
                    body.replace("NAME", name)).await.expect("post")
            }
        };
        let strict = send("Strict", "strict").await;
        assert_eq!(strict.status, 400, "{}", strict.text());
        assert_eq!(
            strict.json()["message"],
            "ConfigMap in version \"v1\" cannot be handled as a ConfigMap: strict decoding error: unknown field \"spec\", duplicate field \"data\""
        );
        let warn = send("Warn", "warn").await;
        assert_eq!(warn.status, 201, "{}", warn.text());
        let warnings: Vec<String> = warn.headers.get_all("warning").iter().filter_map(|v| v.to_str().ok().map(str::to_string)).collect();
        assert_eq!(warnings, vec![
            "299 - \"unknown field \\\"spec\\\"\"".to_string(),
            "299 - \"duplicate field \\\"data\\\"\"".to_string(),
        ]);
        let ignore = send("Ignore", "ignore").await;
        assert_eq!(ignore.status, 201, "{}", ignore.text());
        assert!(ignore.headers.get("warning").is_none());
        assert_eq!(ignore.json()["data"], json!({"a": "2"}));
    });
}

#[test]
fn generation_and_json_patch_test_failure() {
    let server = Server::start(&[]);
    let rt = support::runtime();
    let api = server.api();
    let slices = "/apis/discovery.k8s.io/v1/namespaces/default/endpointslices";
    rt.block_on(async {
        let resp = api
            .post_json(
                slices,
                &json!({"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
            "metadata": {"name": "s"}, "addressType": "IPv4", "endpoints": []}),
            )
            .await
            .expect("create");
        assert_eq!(resp.status, 201, "{}", resp.text());
        assert_eq!(resp.json()["metadata"]["generation"], 1);
        // (patch, generation after)
        let steps = [
            (r#"{"metadata":{"labels":{"a":"b"}}}"#, 1),
            (r#"{"endpoints":[{"addresses":["10.0.0.1"]}]}"#, 2),
            (r#"{"metadata":{"annotations":{"x":"y"}}}"#, 2),
            (r#"{"metadata":{"generation":10}}"#, 2),
            (r#"{"ports":[{"port":80}]}"#, 3),
        ];
        for (body, generation) in steps {
            let resp = patch(
                &api,
                &format!("{slices}/s"),
                "application/merge-patch+json",
                body,
            )
            .await;
            assert_eq!(resp.status, 200, "{body}: {}", resp.text());
            assert_eq!(resp.json()["metadata"]["generation"], generation, "{body}");
        }
        let resp = patch(
            &api,
            &format!("{slices}/s"),
            "application/json-patch+json",
            r#"[{"op":"test","path":"/addressType","value":"IPv6"}]"#,
        )
        .await;
        assert_eq!(resp.status, 422, "{}", resp.text());
        let status = resp.json();
        assert_eq!(status["reason"], "Invalid");
        assert_eq!(
            status["message"],
            "the server rejected our request due to an error in our request"
        );
    });
}
