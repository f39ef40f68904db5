//! Malformed requests against the real binary, table-driven: each case is one HTTPS request
//! with the admin token (or a bad one) and the HTTP code and Status reason upstream
//! Kubernetes gives for it. After every case the server must still answer /readyz and a normal
//! GET. All cases run; the test fails listing every case that got another answer.

mod support;

use bytes::Bytes;
use serde_json::json;
use support::{configmap, Api, Server};

/// Which credentials a case sends.
#[derive(Clone, Copy)]
enum Auth {
    Admin,
    None,
    Wrong,
    /// `Authorization: Basic …` instead of a bearer token.
    Basic,
}

struct Case {
    name: &'static str,
    method: &'static str,
    path: String,
    content_type: Option<&'static str>,
    body: Bytes,
    auth: Auth,
    /// Acceptable HTTP codes (upstream's first; a second only where upstream's own answer
    /// depends on configuration).
    codes: &'static [u16],
    /// Expected `reason` of the Status body, where upstream sends a Status.
    reason: Option<&'static str>,
}

const CMS: &str = "/api/v1/namespaces/default/configmaps";
const JSON: Option<&str> = Some("application/json");

fn case(
    name: &'static str,
    method: &'static str,
    path: impl Into<String>,
    content_type: Option<&'static str>,
    body: impl Into<Bytes>,
    codes: &'static [u16],
    reason: Option<&'static str>,
) -> Case {
    Case {
        name,
        method,
        path: path.into(),
        content_type,
        body: body.into(),
        auth: Auth::Admin,
        codes,
        reason,
    }
}

fn with_auth(mut c: Case, auth: Auth) -> Case {
    c.auth = auth;
    c
}

fn js(v: serde_json::Value) -> Bytes {
    Bytes::from(serde_json::to_vec(&v).expect("serialize"))
}

fn cases() -> Vec<Case> {
    let cm = |name: &str| configmap("default", name, json!({"k": "v"}));
    let long_name = "a".repeat(254);
    let mut big = json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "too-big"}, "data": {}});
    big["data"]["blob"] = json!("x".repeat(3 * 1024 * 1024 + 1024));
    let mut invalid_utf8 =
        br#"{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"utf8"},"data":{"k":""#
            .to_vec();
    invalid_utf8.extend_from_slice(&[0xff, 0xfe, 0xc3]);
    invalid_utf8.extend_from_slice(br#""}}"#);
    let yaml_with_tab =
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n\tname: tabbed\ndata:\n  k: v\n";
    let lease_without_rv = json!({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
        "metadata": {"name": "bad-input-lease", "namespace": "default"},
        "spec": {"holderIdentity": "x", "leaseDurationSeconds": 10}});
    let leases = "/apis/coordination.k8s.io/v1/namespaces/default/leases";

    vec![
        // --- bodies that do not decode
        case(
            "invalid JSON",
            "POST",
            CMS,
            JSON,
            r#"{"apiVersion": "v1", "kind": "#,
            &[400],
            Some("BadRequest"),
        ),
        case(
            "empty body",
            "POST",
            CMS,
            JSON,
            "",
            &[400],
            Some("BadRequest"),
        ),
        case(
            "JSON array instead of object",
            "POST",
            CMS,
            JSON,
            "[1,2,3]",
            &[400],
            Some("BadRequest"),
        ),
        case(
            "invalid UTF-8 in a string",
            "POST",
            CMS,
            JSON,
            invalid_utf8,
            &[400],
            Some("BadRequest"),
        ),
        case(
            "body over 3 MiB",
            "POST",
            CMS,
            JSON,
            js(big),
            &[413],
            Some("RequestEntityTooLarge"),
        ),
        case(
            "100000 nested arrays",
            "POST",
            CMS,
            JSON,
            "[".repeat(100_000),
            &[400],
            Some("BadRequest"),
        ),
        case(
            "100000 nested objects",
            "POST",
            CMS,
            JSON,
            r#"{"a":"#.repeat(100_000),
            &[400],
            Some("BadRequest"),
        ),
        case(
            "metadata is a number",
            "POST",
            CMS,
            JSON,
            js(json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": 5})),
            &[400],
            Some("BadRequest"),
        ),
        case(
            "configmap data is an array",
            "POST",
            CMS,
            JSON,
            js(
                json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "arr"}, "data": []}),
            ),
            &[400],
            Some("BadRequest"),
        ),
        case(
            "configmap data value is a number",
            "POST",
            CMS,
            JSON,
            js(
                json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "num"}, "data": {"k": 5}}),
            ),
            &[400],
            Some("BadRequest"),
        ),
        case(
            "secret data not base64",
            "POST",
            "/api/v1/namespaces/default/secrets",
            JSON,
            js(
                json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "b64"}, "data": {"k": "%%%"}}),
            ),
            &[400],
            Some("BadRequest"),
        ),
        case(
            "YAML with a tab",
            "POST",
            CMS,
            Some("application/yaml"),
            yaml_with_tab,
            &[400],
            Some("BadRequest"),
        ),
        case(
            "unsupported request content type",
            "POST",
            CMS,
            Some("text/plain"),
            js(cm("plain")),
            &[415],
            Some("UnsupportedMediaType"),
        ),
        // --- names and metadata that do not validate
        case(
            "uppercase name",
            "POST",
            CMS,
            JSON,
            js(cm("Bad-Name")),
            &[422],
            Some("Invalid"),
        ),
        case(
            "name of 254 characters",
            "POST",
            CMS,
            JSON,
            js(cm(&long_name)),
            &[422],
            Some("Invalid"),
        ),
        case(
            "name '..'",
            "POST",
            CMS,
            JSON,
            js(cm("..")),
            &[422],
            Some("Invalid"),
        ),
        case(
            "name with a slash",
            "POST",
            CMS,
            JSON,
            js(cm("a/b")),
            &[422],
            Some("Invalid"),
        ),
        case(
            "no name and no generateName",
            "POST",
            CMS,
            JSON,
            js(json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {}})),
            &[422],
            Some("Invalid"),
        ),
        case(
            "namespace name with a dot",
            "POST",
            "/api/v1/namespaces",
            JSON,
            js(json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "a.b"}})),
            &[422],
            Some("Invalid"),
        ),
        case(
            "invalid label key",
            "POST",
            CMS,
            JSON,
            js(json!({"apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": "badlabel", "labels": {"bad key": "v"}}})),
            &[422],
            Some("Invalid"),
        ),
        case(
            "label value of 64 characters",
            "POST",
            CMS,
            JSON,
            js(json!({"apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": "longlabel", "labels": {"k": "v".repeat(64)}}})),
            &[422],
            Some("Invalid"),
        ),
        case(
            "lease duration 0",
            "POST",
            leases,
            JSON,
            js(
                json!({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                "metadata": {"name": "zero"}, "spec": {"leaseDurationSeconds": 0}}),
            ),
            &[422],
            Some("Invalid"),
        ),
        // --- body and URL disagree
        case(
            "kind mismatch",
            "POST",
            CMS,
            JSON,
            js(json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "kind"}})),
            &[400],
            Some("BadRequest"),
        ),
        case(
            "apiVersion mismatch",
            "POST",
            CMS,
            JSON,
            js(json!({"apiVersion": "apps/v1", "kind": "ConfigMap", "metadata": {"name": "apiv"}})),
            &[400],
            Some("BadRequest"),
        ),
        case(
            "namespace mismatch",
            "POST",
            CMS,
            JSON,
            js(configmap("kube-system", "nsmismatch", json!({}))),
            &[400],
            Some("BadRequest"),
        ),
        case(
            "name mismatch on PUT",
            "PUT",
            format!("{CMS}/existing"),
            JSON,
            js(cm("other-name")),
            &[400],
            Some("BadRequest"),
        ),
        // --- things that do not exist
        case(
            "missing namespace",
            "POST",
            "/api/v1/namespaces/does-not-exist/configmaps",
            JSON,
            js(configmap("does-not-exist", "x", json!({}))),
            &[404],
            Some("NotFound"),
        ),
        case(
            "missing object",
            "GET",
            format!("{CMS}/does-not-exist"),
            None,
            "",
            &[404],
            Some("NotFound"),
        ),
        case(
            "unknown resource",
            "GET",
            "/api/v1/namespaces/default/widgets",
            None,
            "",
            &[404],
            Some("NotFound"),
        ),
        case(
            "unknown group",
            "GET",
            "/apis/nope.example.com/v1/things",
            None,
            "",
            &[404],
            Some("NotFound"),
        ),
        case(
            "unknown core version",
            "GET",
            "/api/v2/namespaces",
            None,
            "",
            &[404],
            Some("NotFound"),
        ),
        case(
            "duplicate create",
            "POST",
            CMS,
            JSON,
            js(cm("existing")),
            &[409],
            Some("AlreadyExists"),
        ),
        // --- query parameters
        case(
            "bad labelSelector",
            "GET",
            format!("{CMS}?labelSelector=a%20in%20(b"),
            None,
            "",
            &[400],
            Some("BadRequest"),
        ),
        case(
            "labelSelector '=='",
            "GET",
            format!("{CMS}?labelSelector=%3D%3D"),
            None,
            "",
            &[400],
            Some("BadRequest"),
        ),
        case(
            "unsupported fieldSelector",
            "GET",
            format!("{CMS}?fieldSelector=spec.foo%3Dbar"),
            None,
            "",
            &[400],
            Some("BadRequest"),
        ),
        case(
            "fieldSelector without operator",
            "GET",
            format!("{CMS}?fieldSelector=metadata.name"),
            None,
            "",
            &[400],
            Some("BadRequest"),
        ),
        case(
            "resourceVersion abc on list",
            "GET",
            format!("{CMS}?resourceVersion=abc"),
            None,
            "",
            &[400],
            Some("BadRequest"),
        ),
        case(
            "resourceVersion abc on watch",
            "GET",
            format!("{CMS}?watch=true&resourceVersion=abc"),
            None,
            "",
            &[400],
            Some("BadRequest"),
        ),
        case(
            "resourceVersionMatch without resourceVersion",
            "GET",
            format!("{CMS}?resourceVersionMatch=NotOlderThan"),
            None,
            "",
            &[422],
            Some("Invalid"),
        ),
        case(
            "unknown resourceVersionMatch",
            "GET",
            format!("{CMS}?resourceVersion=1&resourceVersionMatch=Sometimes"),
            None,
            "",
            &[422],
            Some("Invalid"),
        ),
        // Upstream parses limit as int64 and treats a non-positive limit as "no limit".
        case(
            "limit=-1",
            "GET",
            format!("{CMS}?limit=-1"),
            None,
            "",
            &[200, 400],
            None,
        ),
        case(
            "limit=abc",
            "GET",
            format!("{CMS}?limit=abc"),
            None,
            "",
            &[400],
            Some("BadRequest"),
        ),
        case(
            "timeoutSeconds=abc on watch",
            "GET",
            format!("{CMS}?watch=true&timeoutSeconds=abc"),
            None,
            "",
            &[400],
            Some("BadRequest"),
        ),
        // --- patches
        case(
            "unsupported patch content type",
            "PATCH",
            format!("{CMS}/existing"),
            Some("text/plain"),
            r#"{"data":{"k":"v2"}}"#,
            &[415],
            Some("UnsupportedMediaType"),
        ),
        case(
            "PATCH with application/json",
            "PATCH",
            format!("{CMS}/existing"),
            JSON,
            r#"{"data":{"k":"v2"}}"#,
            &[415],
            Some("UnsupportedMediaType"),
        ),
        case(
            "JSON patch that is not an array",
            "PATCH",
            format!("{CMS}/existing"),
            Some("application/json-patch+json"),
            r#"{"op":"add"}"#,
            &[400],
            Some("BadRequest"),
        ),
        case(
            "JSON patch with unknown op",
            "PATCH",
            format!("{CMS}/existing"),
            Some("application/json-patch+json"),
            r#"[{"op":"frobnicate","path":"/data/k"}]"#,
            &[400, 422],
            None,
        ),
        case(
            "JSON patch test that fails",
            "PATCH",
            format!("{CMS}/existing"),
            Some("application/json-patch+json"),
            r#"[{"op":"test","path":"/data/k","value":"nope"}]"#,
            &[422],
            Some("Invalid"),
        ),
        case(
            "JSON patch removing a missing path",
            "PATCH",
            format!("{CMS}/existing"),
            Some("application/json-patch+json"),
            r#"[{"op":"remove","path":"/data/missing"}]"#,
            &[422],
            Some("Invalid"),
        ),
        case(
            "merge patch that is not JSON",
            "PATCH",
            format!("{CMS}/existing"),
            Some("application/merge-patch+json"),
            "{not json",
            &[400],
            Some("BadRequest"),
        ),
        case(
            "strategic merge patch that is not JSON",
            "PATCH",
            format!("{CMS}/existing"),
            Some("application/strategic-merge-patch+json"),
            "{not json",
            &[400],
            Some("BadRequest"),
        ),
        case(
            "patch of a missing object",
            "PATCH",
            format!("{CMS}/does-not-exist"),
            Some("application/merge-patch+json"),
            r#"{"data":{"k":"v"}}"#,
            &[404],
            Some("NotFound"),
        ),
        case(
            "patch changing metadata.uid",
            "PATCH",
            format!("{CMS}/existing"),
            Some("application/merge-patch+json"),
            r#"{"metadata":{"uid":"00000000-0000-0000-0000-000000000000"}}"#,
            &[422],
            Some("Invalid"),
        ),
        case(
            "patch changing metadata.name",
            "PATCH",
            format!("{CMS}/existing"),
            Some("application/merge-patch+json"),
            r#"{"metadata":{"name":"other"}}"#,
            &[400],
            Some("BadRequest"),
        ),
        case(
            "patch changing metadata.namespace",
            "PATCH",
            format!("{CMS}/existing"),
            Some("application/merge-patch+json"),
            r#"{"metadata":{"namespace":"kube-system"}}"#,
            &[400],
            Some("BadRequest"),
        ),
        case(
            "apply body that is a list",
            "PATCH",
            format!("{CMS}/existing?fieldManager=m"),
            Some("application/apply-patch+yaml"),
            "- a\n- b\n",
            &[400],
            Some("BadRequest"),
        ),
        case(
            "apply without apiVersion",
            "PATCH",
            format!("{CMS}/existing?fieldManager=m"),
            Some("application/apply-patch+yaml"),
            "kind: ConfigMap\nmetadata:\n  name: existing\n",
            &[400],
            Some("BadRequest"),
        ),
        case(
            "apply without kind",
            "PATCH",
            format!("{CMS}/existing?fieldManager=m"),
            Some("application/apply-patch+yaml"),
            "apiVersion: v1\nmetadata:\n  name: existing\n",
            &[400],
            Some("BadRequest"),
        ),
        case(
            "apply carrying managedFields",
            "PATCH",
            format!("{CMS}/existing?fieldManager=m"),
            Some("application/apply-patch+yaml"),
            r#"{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"existing","managedFields":[{"manager":"x"}]}}"#,
            &[400],
            Some("BadRequest"),
        ),
        case(
            "apply without fieldManager",
            "PATCH",
            format!("{CMS}/existing"),
            Some("application/apply-patch+yaml"),
            r#"{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"existing"}}"#,
            &[422],
            Some("Invalid"),
        ),
        case(
            "force on a merge patch",
            "PATCH",
            format!("{CMS}/existing?force=true"),
            Some("application/merge-patch+json"),
            r#"{"data":{"k":"v"}}"#,
            &[422],
            Some("Invalid"),
        ),
        case(
            "dryRun with an unknown value",
            "POST",
            format!("{CMS}?dryRun=Some"),
            JSON,
            js(cm("dry-bad")),
            &[422],
            Some("Invalid"),
        ),
        case(
            "fieldValidation with an unknown value",
            "POST",
            format!("{CMS}?fieldValidation=Loose"),
            JSON,
            js(cm("fv-bad")),
            &[422],
            Some("Invalid"),
        ),
        case(
            "strict create with a duplicate field",
            "POST",
            format!("{CMS}?fieldValidation=Strict"),
            JSON,
            r#"{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"dup"},"data":{"a":"1","a":"2"}}"#,
            &[400],
            Some("BadRequest"),
        ),
        // --- updates
        case(
            "PUT Lease without resourceVersion",
            "PUT",
            format!("{leases}/bad-input-lease"),
            JSON,
            js(lease_without_rv),
            &[422],
            Some("Invalid"),
        ),
        case(
            "PUT with stale resourceVersion",
            "PUT",
            format!("{CMS}/existing"),
            JSON,
            js(json!({"apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": "existing", "namespace": "default", "resourceVersion": "1"},
                "data": {"k": "stale"}})),
            &[409],
            Some("Conflict"),
        ),
        case(
            "PUT with resourceVersion abc",
            "PUT",
            format!("{CMS}/existing"),
            JSON,
            js(json!({"apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": "existing", "namespace": "default", "resourceVersion": "abc"},
                "data": {"k": "abc"}})),
            &[400, 409, 422],
            None,
        ),
        case(
            "DELETE with a body that is not JSON",
            "DELETE",
            format!("{CMS}/existing"),
            JSON,
            "{oops",
            &[400],
            Some("BadRequest"),
        ),
        case(
            "DELETE with a stale uid precondition",
            "DELETE",
            format!("{CMS}/existing"),
            JSON,
            js(json!({"preconditions": {"uid": "00000000-0000-0000-0000-000000000000"}})),
            &[409],
            Some("Conflict"),
        ),
        // --- methods
        case(
            "PUT on a collection",
            "PUT",
            CMS,
            JSON,
            js(cm("coll")),
            &[405],
            Some("MethodNotAllowed"),
        ),
        case(
            "POST on a named object",
            "POST",
            format!("{CMS}/existing"),
            JSON,
            js(cm("existing")),
            &[405],
            Some("MethodNotAllowed"),
        ),
        case(
            "unknown method",
            "FROB",
            format!("{CMS}/existing"),
            None,
            "",
            &[405, 400],
            None,
        ),
        // --- authentication
        // No credential (or one of another scheme) is `system:anonymous`, which RBAC allows
        // nothing here; a bearer token nobody issued is refused.
        with_auth(
            case("no token", "GET", CMS, None, "", &[403], Some("Forbidden")),
            Auth::None,
        ),
        with_auth(
            case(
                "wrong token",
                "GET",
                CMS,
                None,
                "",
                &[401],
                Some("Unauthorized"),
            ),
            Auth::Wrong,
        ),
        with_auth(
            case(
                "basic auth",
                "GET",
                CMS,
                None,
                "",
                &[403],
                Some("Forbidden"),
            ),
            Auth::Basic,
        ),
        with_auth(
            case(
                "no token on create",
                "POST",
                CMS,
                JSON,
                js(cm("anon")),
                &[403],
                Some("Forbidden"),
            ),
            Auth::None,
        ),
    ]
}

async fn send(api: &Api, c: &Case) -> Result<support::Resp, String> {
    match c.auth {
        Auth::Admin => {
            api.request(c.method, &c.path, c.content_type, c.body.clone())
                .await
        }
        Auth::None => {
            api.with_token(None)
                .request(c.method, &c.path, c.content_type, c.body.clone())
                .await
        }
        Auth::Wrong => {
            api.with_token(Some("not-the-admin-token"))
                .request(c.method, &c.path, c.content_type, c.body.clone())
                .await
        }
        Auth::Basic => {
            // A bearer-less Authorization header: the token field carries the whole value.
            let mut conn = api.with_token(None).connect().await?;
            conn.request_with_auth(c.method, &c.path, "Basic YWRtaW46YWRtaW4=")
                .await
        }
    }
}

#[test]
fn malformed_requests_get_the_right_status() {
    let server = Server::start(&[]);
    let rt = support::runtime();
    let api = server.api();
    let failures = rt.block_on(async {
        let resp = api
            .post_json(CMS, &configmap("default", "existing", json!({"k": "v"})))
            .await
            .expect("create existing");
        assert_eq!(resp.status, 201, "{}", resp.text());
        // No case touches the canary: it is the "normal GET" after every case.
        let resp = api
            .post_json(CMS, &configmap("default", "canary", json!({"k": "v"})))
            .await
            .expect("create canary");
        assert_eq!(resp.status, 201, "{}", resp.text());
        // The Lease exists, so that a PUT without resourceVersion is an update, not a create.
        let resp = api
            .post_json(
                "/apis/coordination.k8s.io/v1/namespaces/default/leases",
                &json!({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                    "metadata": {"name": "bad-input-lease"},
                    "spec": {"holderIdentity": "x", "leaseDurationSeconds": 10}}),
            )
            .await
            .expect("create lease");
        assert_eq!(resp.status, 201, "{}", resp.text());

        let table = cases();
        assert!(table.len() >= 30, "table has {} cases", table.len());
        let mut failures = Vec::new();
        for c in &table {
            let verdict = match send(&api, c).await {
                Err(e) => Err(format!("no response: {e}")),
                Ok(resp) => {
                    let reason = resp.reason();
                    if !c.codes.contains(&resp.status) {
                        Err(format!(
                            "HTTP {} (want {:?}): {}",
                            resp.status,
                            c.codes,
                            truncate(&resp.text())
                        ))
                    } else if c.reason.is_some_and(|want| want != reason) {
                        Err(format!(
                            "HTTP {} but reason {reason:?} (want {:?}): {}",
                            resp.status,
                            c.reason.unwrap_or(""),
                            truncate(&resp.text())
                        ))
                    } else if resp.status >= 400 && resp.json()["kind"] != "Status" {
                        Err(format!(
                            "HTTP {} without a Status body: {}",
                            resp.status,
                            truncate(&resp.text())
                        ))
                    } else {
                        Ok(resp.status)
                    }
                }
            };
            match verdict {
                Ok(code) => println!("PASS {}: HTTP {code}", c.name),
                Err(e) => {
                    println!("FAIL {}: {} {} -> {e}", c.name, c.method, c.path_short());
                    failures.push(format!("{} ({} {}): {e}", c.name, c.method, c.path_short()));
                }
            }
            // The server is still healthy after every case.
            let ready = support::readyz(api.addr);
            let get = api.get(&format!("{CMS}/canary")).await;
            let healthy = ready == Some(200) && get.as_ref().is_ok_and(|r| r.status == 200);
            if !healthy {
                failures.push(format!(
                    "after {}: /readyz {ready:?}, GET canary {:?}",
                    c.name,
                    get.map(|r| r.status)
                ));
                break;
            }
        }
        println!(
            "bad input: {} passed, {} failed",
            table.len() - failures.len(),
            failures.len()
        );
        failures
    });
    assert!(
        failures.is_empty(),
        "{} malformed requests got the wrong answer:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

fn truncate(s: &str) -> String {
    s.chars().take(300).collect()
}

impl Case {
    fn path_short(&self) -> String {
        truncate(&self.path)
    }
}
