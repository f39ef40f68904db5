//! Drives `api::router::serve` in process with a real Store and the WAL writer: requests in,
//! Kubernetes responses out, as kubectl and client libraries send them.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::{Method, Request, StatusCode};
use http_body_util::{BodyExt, Full};
use litek8s::api::{router, ApiBody, ApiContext, ApiSettings, UserInfo};
use litek8s::kube::store::{Store, StoreConfig};
use litek8s::kube::wal::{WalConfig, WalWriter};
use serde_json::{json, Value};

struct Harness {
    ctx: Arc<ApiContext>,
    _dir: tempfile::TempDir,
}

fn harness_with(config: StoreConfig) -> Harness {
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(Store::new(config));
    let (writer, _) = WalWriter::open(dir.path(), store.clone(), WalConfig::default()).unwrap();
    let settings = ApiSettings {
        server_name: "test".into(),
        node_ips: vec![],
        api_port: 6443,
        service_cidr: "10.96.0.0/29".into(),
    };
    let ctx = Arc::new(ApiContext::new(store, Arc::new(writer), settings));
    Harness { ctx, _dir: dir }
}

async fn harness() -> Harness {
    let h = harness_with(StoreConfig::default());
    for ns in ["default", "other"] {
        let (code, _) = h
            .call(
                Method::POST,
                "/api/v1/namespaces",
                Some(json!({"metadata":{"name":ns}})),
            )
            .await;
        assert_eq!(code, StatusCode::CREATED);
    }
    h
}

impl Harness {
    async fn raw(&self, req: Request<Full<Bytes>>) -> http::Response<ApiBody> {
        router::serve(self.ctx.clone(), req, UserInfo::admin()).await
    }

    async fn send(
        &self,
        method: Method,
        uri: &str,
        content_type: &str,
        accept: &str,
        body: Bytes,
    ) -> (StatusCode, Value) {
        let req = Request::builder()
            .method(method)
            .uri(uri)
            .header("content-type", content_type)
            .header("accept", accept)
            .body(Full::new(body))
            .unwrap();
        let resp = self.raw(req).await;
        let code = resp.status();
        let bytes = resp.into_body().collect().await.unwrap().to_bytes();
        let value = serde_json::from_slice(&bytes)
            .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&bytes).into_owned()));
        (code, value)
    }

    async fn call(&self, method: Method, uri: &str, body: Option<Value>) -> (StatusCode, Value) {
        let body = body.map(|b| Bytes::from(b.to_string())).unwrap_or_default();
        self.send(method, uri, "application/json", "application/json", body)
            .await
    }
}

fn cm(name: &str, labels: Value) -> Value {
    json!({"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":name,"labels":labels},"data":{"k":"v"}})
}

const CMS: &str = "/api/v1/namespaces/default/configmaps";

#[tokio::test]
async fn health_and_version() {
    let h = harness().await;
    let req = Request::get("/version")
        .body(Full::new(Bytes::new()))
        .unwrap();
    let resp = router::serve_anonymous(h.ctx.clone(), &req).await.unwrap();
    let v: Value =
        serde_json::from_slice(&resp.into_body().collect().await.unwrap().to_bytes()).unwrap();
    assert_eq!(v["gitVersion"], "v1.33.0+litek8s");
    let (code, body) = h.call(Method::GET, "/readyz", None).await;
    assert_eq!(code, StatusCode::INTERNAL_SERVER_ERROR);
    assert!(body.as_str().unwrap().contains("[-]storage failed"));
    h.ctx
        .ready
        .store(true, std::sync::atomic::Ordering::Release);
    let (code, body) = h.call(Method::GET, "/readyz", None).await;
    assert_eq!((code, body), (StatusCode::OK, json!("ok")));
    let req = Request::get("/api/v1/pods")
        .body(Full::new(Bytes::new()))
        .unwrap();
    assert!(router::serve_anonymous(h.ctx.clone(), &req).await.is_none());
}

#[tokio::test]
async fn create_get_and_errors() {
    let h = harness().await;
    let (code, created) = h.call(Method::POST, CMS, Some(cm("a", json!({})))).await;
    assert_eq!(code, StatusCode::CREATED);
    let md = &created["metadata"];
    assert_eq!(md["namespace"], "default");
    assert_eq!(md["uid"].as_str().unwrap().len(), 36);
    assert!(md["creationTimestamp"].as_str().unwrap().ends_with('Z'));
    assert!(md.get("generation").is_none());
    let (code, got) = h.call(Method::GET, &format!("{CMS}/a"), None).await;
    assert_eq!(code, StatusCode::OK);
    assert_eq!(got, created);

    let (code, s) = h.call(Method::GET, &format!("{CMS}/missing"), None).await;
    assert_eq!(code, StatusCode::NOT_FOUND);
    assert_eq!(s["message"], "configmaps \"missing\" not found");
    assert_eq!(s["details"], json!({"name":"missing","kind":"configmaps"}));
    let (code, s) = h.call(Method::POST, CMS, Some(cm("a", json!({})))).await;
    assert_eq!(
        (code, s["reason"].as_str()),
        (StatusCode::CONFLICT, Some("AlreadyExists"))
    );
    let (code, s) = h
        .call(
            Method::POST,
            "/api/v1/namespaces/nope/configmaps",
            Some(cm("b", json!({}))),
        )
        .await;
    assert_eq!(code, StatusCode::NOT_FOUND);
    assert_eq!(s["message"], "namespaces \"nope\" not found");
    let (code, s) = h
        .call(Method::POST, CMS, Some(cm("Bad_Name", json!({}))))
        .await;
    assert_eq!(code, StatusCode::UNPROCESSABLE_ENTITY);
    assert_eq!(s["details"]["kind"], "ConfigMap");
    assert_eq!(s["details"]["causes"][0]["field"], "metadata.name");
    let (code, _) = h
        .call(
            Method::POST,
            CMS,
            Some(json!({"apiVersion":"v1","kind":"Secret","metadata":{"name":"x"}})),
        )
        .await;
    assert_eq!(code, StatusCode::BAD_REQUEST);
    let (code, s) = h
        .call(
            Method::POST,
            CMS,
            Some(json!({"metadata":{"generateName":"gen-"}})),
        )
        .await;
    assert_eq!(code, StatusCode::CREATED);
    let name = s["metadata"]["name"].as_str().unwrap();
    assert!(name.starts_with("gen-") && name.len() == 9);
    assert_eq!(s["kind"], "ConfigMap");
    let (code, _) = h
        .call(Method::POST, &format!("{CMS}/a"), Some(cm("a", json!({}))))
        .await;
    assert_eq!(code, StatusCode::METHOD_NOT_ALLOWED);
    let (code, s) = h.call(Method::GET, "/api/v1/widgets", None).await;
    assert_eq!(
        (code, s["reason"].as_str()),
        (StatusCode::NOT_FOUND, Some("NotFound"))
    );
}

#[tokio::test]
async fn bodies_are_limited() {
    let h = harness().await;
    let big = Bytes::from(vec![b' '; 3 * 1024 * 1024 + 1]);
    let (code, s) = h.send(Method::POST, CMS, "application/json", "", big).await;
    assert_eq!(
        (code, s["reason"].as_str()),
        (StatusCode::PAYLOAD_TOO_LARGE, Some("RequestEntityTooLarge"))
    );
    let deep = Bytes::from("[".repeat(200_000));
    let (code, _) = h
        .send(Method::POST, CMS, "application/json", "", deep)
        .await;
    assert_eq!(code, StatusCode::BAD_REQUEST);
    let (code, _) = h
        .send(
            Method::POST,
            CMS,
            "application/json",
            "",
            Bytes::from_static(b"{\"a\":\"\xff\"}"),
        )
        .await;
    assert_eq!(code, StatusCode::BAD_REQUEST);
    let (code, _) = h
        .send(
            Method::POST,
            CMS,
            "application/json",
            "",
            Bytes::from_static(b"{\"metadata\":{\"name\":7}}"),
        )
        .await;
    assert!(code == StatusCode::BAD_REQUEST || code == StatusCode::UNPROCESSABLE_ENTITY);
    let yaml = Bytes::from_static(b"apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: y\n");
    let (code, _) = h
        .send(Method::POST, CMS, "application/yaml", "", yaml)
        .await;
    assert_eq!(code, StatusCode::CREATED);
    let (code, _) = h
        .send(
            Method::POST,
            CMS,
            "application/vnd.kubernetes.protobuf",
            "",
            Bytes::from_static(b"k8s"),
        )
        .await;
    assert_eq!(
        code,
        StatusCode::BAD_REQUEST,
        "a cut-short protobuf envelope"
    );
    let (code, _) = h
        .send(
            Method::POST,
            CMS,
            "text/plain",
            "",
            Bytes::from_static(b"hello"),
        )
        .await;
    assert_eq!(code, StatusCode::UNSUPPORTED_MEDIA_TYPE);
}

#[tokio::test]
async fn updates_and_conflicts() {
    let h = harness().await;
    let (_, a) = h.call(Method::POST, CMS, Some(cm("a", json!({})))).await;
    let mut stale = a.clone();
    stale["data"]["k"] = json!("2");
    let (code, b) = h
        .call(Method::PUT, &format!("{CMS}/a"), Some(stale.clone()))
        .await;
    assert_eq!(code, StatusCode::OK);
    assert_eq!(b["metadata"]["uid"], a["metadata"]["uid"]);
    assert_ne!(
        b["metadata"]["resourceVersion"],
        a["metadata"]["resourceVersion"]
    );
    stale["data"]["k"] = json!("3");
    let (code, s) = h
        .call(Method::PUT, &format!("{CMS}/a"), Some(stale.clone()))
        .await;
    assert_eq!(code, StatusCode::CONFLICT);
    assert_eq!(s["message"], "Operation cannot be fulfilled on configmaps \"a\": the object has been modified; please apply your changes to the latest version and try again");
    // No resourceVersion: unconditional.
    stale["metadata"]
        .as_object_mut()
        .unwrap()
        .remove("resourceVersion");
    let (code, c) = h
        .call(Method::PUT, &format!("{CMS}/a"), Some(stale.clone()))
        .await;
    assert_eq!((code, &c["data"]["k"]), (StatusCode::OK, &json!("3")));
    // Unchanged object: no new resourceVersion.
    let (code, d) = h
        .call(Method::PUT, &format!("{CMS}/a"), Some(c.clone()))
        .await;
    assert_eq!(
        (code, &d["metadata"]["resourceVersion"]),
        (StatusCode::OK, &c["metadata"]["resourceVersion"])
    );
    let (code, _) = h
        .call(Method::PUT, &format!("{CMS}/b"), Some(stale.clone()))
        .await;
    assert_eq!(code, StatusCode::BAD_REQUEST, "name mismatch");
    let (code, _) = h
        .call(
            Method::PUT,
            &format!("{CMS}/zzz"),
            Some(cm("zzz", json!({}))),
        )
        .await;
    assert_eq!(
        code,
        StatusCode::NOT_FOUND,
        "configmaps are not created on update"
    );
}

#[tokio::test]
async fn leases_like_client_go() {
    let h = harness().await;
    let url = "/apis/coordination.k8s.io/v1/namespaces/default/leases/lock";
    let lease = json!({"apiVersion":"coordination.k8s.io/v1","kind":"Lease","metadata":{"name":"lock"},
        "spec":{"holderIdentity":"a","leaseDurationSeconds":15,"acquireTime":"2024-05-01T10:00:00Z",
                "renewTime":"2024-05-01T10:00:00.5+00:00","leaseTransitions":0}});
    let (code, created) = h.call(Method::PUT, url, Some(lease.clone())).await;
    assert_eq!(code, StatusCode::CREATED, "{created}");
    assert_eq!(
        created["spec"]["acquireTime"],
        "2024-05-01T10:00:00.000000Z"
    );
    assert_eq!(created["spec"]["renewTime"], "2024-05-01T10:00:00.500000Z");
    let (code, s) = h.call(Method::PUT, url, Some(lease.clone())).await;
    assert_eq!(code, StatusCode::UNPROCESSABLE_ENTITY);
    assert_eq!(
        s["details"]["causes"][0]["field"],
        "metadata.resourceVersion"
    );
    let mut renew = created.clone();
    renew["spec"]["renewTime"] = json!("2024-05-01T10:00:10.123456Z");
    let (code, renewed) = h.call(Method::PUT, url, Some(renew.clone())).await;
    assert_eq!(code, StatusCode::OK);
    assert_ne!(
        renewed["metadata"]["resourceVersion"],
        created["metadata"]["resourceVersion"]
    );
    let (code, s) = h.call(Method::PUT, url, Some(renew)).await;
    assert_eq!(code, StatusCode::CONFLICT);
    assert!(s["message"].as_str().unwrap().starts_with(
        "Operation cannot be fulfilled on leases.coordination.k8s.io \"lock\": the object has been modified"
    ));
    let mut bad = renewed.clone();
    bad["spec"]["leaseDurationSeconds"] = json!(0);
    let (code, _) = h.call(Method::PUT, url, Some(bad)).await;
    assert_eq!(code, StatusCode::UNPROCESSABLE_ENTITY);
    let (code, _) = h
        .call(
            Method::POST,
            "/apis/coordination.k8s.io/v1/namespaces/default/leases",
            Some(lease),
        )
        .await;
    assert_eq!(code, StatusCode::CONFLICT);
}

#[tokio::test]
async fn lists_selectors_and_paging() {
    let h = harness().await;
    let (code, empty) = h.call(Method::GET, CMS, None).await;
    assert_eq!(code, StatusCode::OK);
    assert_eq!(empty["kind"], "ConfigMapList");
    assert_eq!(empty["items"], json!([]));
    for (name, app) in [
        ("a", "web"),
        ("b", "db"),
        ("c", "web"),
        ("d", "web"),
        ("e", "x"),
    ] {
        h.call(Method::POST, CMS, Some(cm(name, json!({"app": app}))))
            .await;
    }
    h.call(
        Method::POST,
        "/api/v1/namespaces/other/configmaps",
        Some(cm("z", json!({"app":"web"}))),
    )
    .await;
    let names = |list: &Value| -> Vec<String> {
        list["items"]
            .as_array()
            .unwrap()
            .iter()
            .map(|i| i["metadata"]["name"].as_str().unwrap().to_string())
            .collect()
    };
    let (_, l) = h
        .call(Method::GET, &format!("{CMS}?labelSelector=app%3Dweb"), None)
        .await;
    assert_eq!(names(&l), ["a", "c", "d"]);
    assert_eq!(l["items"][0]["kind"], "ConfigMap");
    let (_, l) = h
        .call(
            Method::GET,
            "/api/v1/configmaps?labelSelector=app+in+(web)",
            None,
        )
        .await;
    assert_eq!(names(&l), ["a", "c", "d", "z"]);
    let (_, l) = h
        .call(
            Method::GET,
            &format!("{CMS}?labelSelector=app!%3Dweb"),
            None,
        )
        .await;
    assert_eq!(names(&l), ["b", "e"]);
    let (_, l) = h
        .call(
            Method::GET,
            &format!("{CMS}?fieldSelector=metadata.name%3Dd"),
            None,
        )
        .await;
    assert_eq!(names(&l), ["d"]);
    let (code, s) = h
        .call(
            Method::GET,
            &format!("{CMS}?fieldSelector=spec.x%3D1"),
            None,
        )
        .await;
    assert_eq!(code, StatusCode::BAD_REQUEST);
    assert_eq!(s["message"], "field label not supported: spec.x");
    let (code, _) = h
        .call(Method::GET, &format!("{CMS}?labelSelector=a+b"), None)
        .await;
    assert_eq!(code, StatusCode::BAD_REQUEST);

    // Paging: 2 + 2 + 1, every page at the first page's resourceVersion.
    let (_, p1) = h.call(Method::GET, &format!("{CMS}?limit=2"), None).await;
    assert_eq!(names(&p1), ["a", "b"]);
    let rv = p1["metadata"]["resourceVersion"].clone();
    let token = p1["metadata"]["continue"].as_str().unwrap().to_string();
    // A change elsewhere does not break the list…
    h.call(
        Method::POST,
        "/api/v1/namespaces/other/configmaps",
        Some(cm("y", json!({}))),
    )
    .await;
    let (code, p2) = h
        .call(
            Method::GET,
            &format!("{CMS}?limit=2&continue={token}"),
            None,
        )
        .await;
    assert_eq!(code, StatusCode::OK);
    assert_eq!(names(&p2), ["c", "d"]);
    assert_eq!(p2["metadata"]["resourceVersion"], rv);
    let token2 = p2["metadata"]["continue"].as_str().unwrap().to_string();
    // …a change inside the listed range does.
    h.call(Method::DELETE, &format!("{CMS}/e"), None).await;
    let (code, s) = h
        .call(
            Method::GET,
            &format!("{CMS}?limit=2&continue={token2}"),
            None,
        )
        .await;
    assert_eq!(
        (code, s["reason"].as_str()),
        (StatusCode::GONE, Some("Expired"))
    );
    let (code, _) = h
        .call(Method::GET, &format!("{CMS}?continue=garbage"), None)
        .await;
    assert_eq!(code, StatusCode::BAD_REQUEST);

    for bad in [
        "resourceVersionMatch=Exact",
        "resourceVersion=0&resourceVersionMatch=Exact",
        "resourceVersion=1&resourceVersionMatch=Sometimes",
        "resourceVersion=1&resourceVersionMatch=NotOlderThan&continue=x",
    ] {
        let (code, s) = h.call(Method::GET, &format!("{CMS}?{bad}"), None).await;
        assert_eq!(code, StatusCode::UNPROCESSABLE_ENTITY, "{bad}: {s}");
    }
    let (code, _) = h
        .call(
            Method::GET,
            &format!("{CMS}?resourceVersion=1&resourceVersionMatch=NotOlderThan"),
            None,
        )
        .await;
    assert_eq!(code, StatusCode::OK);
}

#[tokio::test]
async fn too_large_resource_version_times_out() {
    let h = harness().await;
    let (code, s) = h
        .call(Method::GET, &format!("{CMS}?resourceVersion=999"), None)
        .await;
    assert_eq!(code, StatusCode::GATEWAY_TIMEOUT);
    assert_eq!(
        s["message"],
        format!(
            "Too large resource version: 999, current: {}",
            h.ctx.store.resource_version()
        )
    );
    assert_eq!(
        s["details"]["causes"][0]["reason"],
        "ResourceVersionTooLarge"
    );
    assert_eq!(s["details"]["retryAfterSeconds"], 1);
    let (code, _) = h
        .call(
            Method::GET,
            &format!("{CMS}?watch=1&resourceVersion=999"),
            None,
        )
        .await;
    assert_eq!(code, StatusCode::GATEWAY_TIMEOUT);
}

#[tokio::test]
async fn table_accept_calls_the_table_renderer() {
    let h = harness().await;
    h.call(Method::POST, CMS, Some(cm("a", json!({})))).await;
    let accept = "application/json;as=Table;v=v1;g=meta.k8s.io,application/json;as=Table;v=v1beta1;g=meta.k8s.io,application/json";
    let (code, t) = h
        .send(
            Method::GET,
            &format!("{CMS}?limit=500"),
            "",
            accept,
            Bytes::new(),
        )
        .await;
    assert_eq!(code, StatusCode::OK);
    assert_eq!(t["kind"], "Table");
    assert_eq!(t["apiVersion"], "meta.k8s.io/v1");
    assert!(t["metadata"]["resourceVersion"].is_string());
    let (_, t) = h
        .send(Method::GET, &format!("{CMS}/a"), "", accept, Bytes::new())
        .await;
    assert_eq!(t["kind"], "Table");
}

#[tokio::test]
async fn deletes_finalizers_and_preconditions() {
    let h = harness().await;
    let (_, a) = h.call(Method::POST, CMS, Some(cm("a", json!({})))).await;
    let (code, s) = h
        .call(
            Method::DELETE,
            &format!("{CMS}/a"),
            Some(json!({"preconditions":{"uid":"nope"}})),
        )
        .await;
    assert_eq!(code, StatusCode::CONFLICT, "{s}");
    let (code, s) = h
        .call(
            Method::DELETE,
            &format!("{CMS}/a"),
            Some(json!({"propagationPolicy":"Background"})),
        )
        .await;
    assert_eq!(code, StatusCode::OK);
    assert_eq!(s["kind"], "Status");
    assert_eq!(s["status"], "Success");
    assert_eq!(s["details"]["uid"], a["metadata"]["uid"]);
    let (code, _) = h.call(Method::DELETE, &format!("{CMS}/a"), None).await;
    assert_eq!(code, StatusCode::NOT_FOUND);
    let (code, _) = h
        .call(
            Method::DELETE,
            &format!("{CMS}/a"),
            Some(json!({"propagationPolicy":"Sideways"})),
        )
        .await;
    assert_eq!(code, StatusCode::UNPROCESSABLE_ENTITY);

    // Pods answer with the object.
    let pods = "/api/v1/namespaces/default/pods";
    let (code, p) = h
        .call(Method::POST, pods, Some(json!({"metadata":{"name":"p"},"spec":{"containers":[{"name":"c","image":"x"}]},"status":{"phase":"Running"}})))
        .await;
    assert_eq!(code, StatusCode::CREATED);
    assert_eq!(p["status"]["phase"], "Pending");
    let (code, d) = h.call(Method::DELETE, &format!("{pods}/p"), None).await;
    assert_eq!((code, &d["kind"]), (StatusCode::OK, &json!("Pod")));

    // Finalizers hold the object until the last one is removed.
    let mut f = cm("f", json!({}));
    f["metadata"]["finalizers"] = json!(["example.com/hold"]);
    h.call(Method::POST, CMS, Some(f)).await;
    let (code, pending) = h.call(Method::DELETE, &format!("{CMS}/f"), None).await;
    assert_eq!(code, StatusCode::OK);
    assert!(pending["metadata"]["deletionTimestamp"].is_string());
    let (code, again) = h.call(Method::GET, &format!("{CMS}/f"), None).await;
    assert_eq!(code, StatusCode::OK);
    let mut cleared = again.clone();
    cleared["metadata"]["finalizers"] = json!([]);
    let (code, _) = h
        .call(Method::PUT, &format!("{CMS}/f"), Some(cleared))
        .await;
    assert_eq!(code, StatusCode::OK);
    let (code, _) = h.call(Method::GET, &format!("{CMS}/f"), None).await;
    assert_eq!(code, StatusCode::NOT_FOUND);

    // Collections.
    for name in ["x1", "x2", "y1"] {
        let app = if name.starts_with('x') { "x" } else { "y" };
        h.call(Method::POST, CMS, Some(cm(name, json!({"app": app}))))
            .await;
    }
    let (code, l) = h
        .call(
            Method::DELETE,
            &format!("{CMS}?labelSelector=app%3Dx"),
            None,
        )
        .await;
    assert_eq!(code, StatusCode::OK);
    assert_eq!(l["items"].as_array().unwrap().len(), 2);
    let (_, rest) = h.call(Method::GET, CMS, None).await;
    assert_eq!(rest["items"].as_array().unwrap().len(), 1);
}

#[tokio::test]
async fn namespace_deletion_waits_for_its_finalizers() {
    let h = harness().await;
    h.call(
        Method::POST,
        "/api/v1/namespaces",
        Some(json!({"metadata":{"name":"doomed"}})),
    )
    .await;
    let (_, ns) = h.call(Method::GET, "/api/v1/namespaces/doomed", None).await;
    assert_eq!(ns["status"]["phase"], "Active");
    assert_eq!(ns["spec"]["finalizers"], json!(["kubernetes"]));
    assert_eq!(
        ns["metadata"]["labels"]["kubernetes.io/metadata.name"],
        "doomed"
    );
    let url = "/api/v1/namespaces/doomed/configmaps";
    let mut held = cm("held", json!({}));
    held["metadata"]["finalizers"] = json!(["example.com/hold"]);
    h.call(Method::POST, url, Some(held)).await;
    h.call(Method::POST, url, Some(cm("plain", json!({}))))
        .await;
    let (code, ns) = h
        .call(Method::DELETE, "/api/v1/namespaces/doomed", None)
        .await;
    assert_eq!(code, StatusCode::OK);
    assert_eq!(ns["status"]["phase"], "Terminating");
    let (code, s) = h.call(Method::POST, url, Some(cm("late", json!({})))).await;
    assert_eq!(code, StatusCode::FORBIDDEN, "{s}");
    let (code, _) = h
        .call(Method::DELETE, "/api/v1/namespaces/doomed", None)
        .await;
    assert_eq!(code, StatusCode::CONFLICT);
    // Emptying it is the namespace controller's job (tests/controllers/scenarios/70-gc.sh):
    // the API only keeps it while `kubernetes` is in spec.finalizers, and removes it once the
    // finalize subresource has taken the last finalizer away.
    let (_, ns) = h.call(Method::GET, "/api/v1/namespaces/doomed", None).await;
    let mut finalized = ns.clone();
    finalized["spec"]["finalizers"] = json!(["example.com/other", "kubernetes"]);
    let (code, after) = h
        .call(
            Method::PUT,
            "/api/v1/namespaces/doomed/finalize",
            Some(finalized.clone()),
        )
        .await;
    assert_eq!(code, StatusCode::OK, "{after}");
    assert_eq!(
        after["spec"]["finalizers"],
        json!(["example.com/other", "kubernetes"])
    );
    finalized["spec"]["finalizers"] = json!([]);
    finalized["metadata"]["resourceVersion"] = after["metadata"]["resourceVersion"].clone();
    let (code, after) = h
        .call(
            Method::PUT,
            "/api/v1/namespaces/doomed/finalize",
            Some(finalized),
        )
        .await;
    assert_eq!(code, StatusCode::OK, "{after}");
    let (code, _) = h.call(Method::GET, "/api/v1/namespaces/doomed", None).await;
    assert_eq!(code, StatusCode::NOT_FOUND);
}

#[tokio::test]
async fn services_secrets_and_status() {
    let h = harness().await;
    let svcs = "/api/v1/namespaces/default/services";
    let mut ips = std::collections::HashSet::new();
    // A /29 has 5 allocatable addresses: not the network, first or broadcast address.
    for i in 0..5 {
        let (code, s) = h
            .call(
                Method::POST,
                svcs,
                Some(json!({"metadata":{"name":format!("s{i}")},"spec":{"ports":[{"port":80}]}})),
            )
            .await;
        assert_eq!(code, StatusCode::CREATED, "{s}");
        let ip = s["spec"]["clusterIP"].as_str().unwrap().to_string();
        assert!(ip.starts_with("10.96.0.") && ip != "10.96.0.1" && ip != "10.96.0.0");
        assert!(ips.insert(ip));
    }
    let (code, s) = h
        .call(
            Method::POST,
            svcs,
            Some(json!({"metadata":{"name":"full"},"spec":{"ports":[{"port":80}]}})),
        )
        .await;
    assert_eq!(code, StatusCode::INTERNAL_SERVER_ERROR, "{s}");
    let (code, _) = h
        .call(
            Method::POST,
            svcs,
            Some(json!({"metadata":{"name":"a.b"},"spec":{"ports":[{"port":80}]}})),
        )
        .await;
    assert_eq!(code, StatusCode::UNPROCESSABLE_ENTITY);

    let (code, s) = h
        .call(
            Method::POST,
            "/api/v1/namespaces/default/secrets",
            Some(json!({"metadata":{"name":"s"},"stringData":{"u":"admin"}})),
        )
        .await;
    assert_eq!(code, StatusCode::CREATED);
    assert_eq!(s["data"]["u"], "YWRtaW4=");
    assert!(s.get("stringData").is_none());
    assert_eq!(s["type"], "Opaque");

    let pods = "/api/v1/namespaces/default/pods";
    let (_, p) = h
        .call(
            Method::POST,
            pods,
            Some(json!({"metadata":{"name":"p"},"spec":{"containers":[{"name":"c","image":"x"}]}})),
        )
        .await;
    let mut st = p.clone();
    st["status"] = json!({"phase":"Running"});
    st["spec"]["nodeName"] = json!("ignored");
    let (code, p2) = h
        .call(Method::PUT, &format!("{pods}/p/status"), Some(st))
        .await;
    assert_eq!(code, StatusCode::OK);
    assert_eq!(p2["status"]["phase"], "Running");
    assert!(p2["spec"].get("nodeName").is_none());
    let mut main = p2.clone();
    main["status"] = json!({"phase":"Failed"});
    main["metadata"]["labels"] = json!({"a":"b"});
    let (code, p3) = h.call(Method::PUT, &format!("{pods}/p"), Some(main)).await;
    assert_eq!(code, StatusCode::OK);
    assert_eq!(p3["status"]["phase"], "Running");
    assert_eq!(p3["metadata"]["labels"]["a"], "b");
}

#[tokio::test]
async fn patch_content_types() {
    let h = harness().await;
    h.call(Method::POST, CMS, Some(cm("a", json!({})))).await;
    let (code, _) = h
        .send(
            Method::PATCH,
            &format!("{CMS}/a"),
            "application/json",
            "",
            Bytes::from_static(b"{}"),
        )
        .await;
    assert_eq!(code, StatusCode::UNSUPPORTED_MEDIA_TYPE);
    let (code, _) = h
        .send(
            Method::PATCH,
            &format!("{CMS}/zz"),
            "application/merge-patch+json",
            "",
            Bytes::from_static(b"{}"),
        )
        .await;
    assert_eq!(code, StatusCode::NOT_FOUND);
    // Server-side apply creates a missing object.
    let body = Bytes::from(cm("applied", json!({})).to_string());
    let (code, s) = h
        .send(
            Method::PATCH,
            &format!("{CMS}/applied?fieldManager=kubectl&force=false"),
            "application/apply-patch+yaml",
            "",
            body,
        )
        .await;
    assert_eq!(code, StatusCode::CREATED, "{s}");
    assert_eq!(s["metadata"]["name"], "applied");
}

/// Reads watch lines until `n` have arrived.
async fn read_lines(body: &mut ApiBody, n: usize) -> Vec<Value> {
    let mut lines = Vec::new();
    let mut buf = Vec::new();
    tokio::time::timeout(Duration::from_secs(30), async {
        while lines.len() < n {
            let Some(frame) = body.frame().await else {
                break;
            };
            let frame = frame.unwrap();
            if let Some(data) = frame.data_ref() {
                buf.extend_from_slice(data);
            }
            while let Some(pos) = buf.iter().position(|b| *b == b'\n') {
                let line: Vec<u8> = buf.drain(..=pos).collect();
                lines.push(serde_json::from_slice(&line[..line.len() - 1]).unwrap());
            }
        }
    })
    .await
    .expect("watch stalled");
    lines
}

async fn open_watch(h: &Harness, uri: &str) -> (StatusCode, ApiBody) {
    let req = Request::get(uri).body(Full::new(Bytes::new())).unwrap();
    let resp = h.raw(req).await;
    (resp.status(), resp.into_body())
}

#[tokio::test]
async fn watch_events_and_transitions() {
    let h = harness().await;
    let (_, a) = h
        .call(Method::POST, CMS, Some(cm("a", json!({"app":"web"}))))
        .await;
    // kubectl get a -w
    let (code, mut single) = open_watch(
        &h,
        &format!("{CMS}?fieldSelector=metadata.name%3Da&resourceVersion=0&watch=true"),
    )
    .await;
    assert_eq!(code, StatusCode::OK);
    let first = read_lines(&mut single, 1).await;
    assert_eq!(first[0]["type"], "ADDED");
    assert_eq!(first[0]["object"], a);

    let rv = a["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .to_string();
    let (_, mut labeled) = open_watch(
        &h,
        &format!("{CMS}?watch=1&labelSelector=app%3Dweb&resourceVersion={rv}"),
    )
    .await;
    h.call(Method::POST, CMS, Some(cm("b", json!({"app":"db"}))))
        .await;
    let mut moved = a.clone();
    moved["metadata"]["labels"]["app"] = json!("db");
    h.call(Method::PUT, &format!("{CMS}/a"), Some(moved)).await;
    h.call(
        Method::PUT,
        &format!("{CMS}/b"),
        Some(cm("b", json!({"app":"web"}))),
    )
    .await;
    h.call(Method::DELETE, &format!("{CMS}/b"), None).await;
    let events = read_lines(&mut labeled, 3).await;
    let summary: Vec<(String, String)> = events
        .iter()
        .map(|e| {
            (
                e["type"].as_str().unwrap().into(),
                e["object"]["metadata"]["name"].as_str().unwrap().into(),
            )
        })
        .collect();
    assert_eq!(
        summary,
        [
            ("DELETED".into(), "a".into()),
            ("ADDED".into(), "b".into()),
            ("DELETED".into(), "b".into())
        ]
    );
    let single_events = read_lines(&mut single, 1).await;
    assert_eq!(single_events[0]["type"], "MODIFIED");

    let (code, s) = h
        .call(
            Method::GET,
            &format!("{CMS}?watch=1&sendInitialEvents=true"),
            None,
        )
        .await;
    assert_eq!(code, StatusCode::UNPROCESSABLE_ENTITY, "{s}");
    let (_, mut streaming) = open_watch(&h, &format!("{CMS}?watch=1&sendInitialEvents=true&resourceVersionMatch=NotOlderThan&allowWatchBookmarks=true")).await;
    let events = read_lines(&mut streaming, 2).await;
    assert_eq!(events[0]["type"], "ADDED");
    assert_eq!(events[1]["type"], "BOOKMARK");
    assert_eq!(events[1]["object"]["kind"], "ConfigMap");
    assert_eq!(
        events[1]["object"]["metadata"]["annotations"]["k8s.io/initial-events-end"],
        "true"
    );

    let (_, mut timed) = open_watch(&h, &format!("{CMS}?watch=1&timeoutSeconds=1")).await;
    let lines = read_lines(&mut timed, 10).await;
    assert_eq!(lines.len(), 1, "one ADDED, then the stream ends");
}

#[tokio::test]
async fn watch_from_expired_version_gets_error_event() {
    let h = harness_with(StoreConfig {
        history_window: 4,
        live_buffer: 16,
    });
    h.call(
        Method::POST,
        "/api/v1/namespaces",
        Some(json!({"metadata":{"name":"default"}})),
    )
    .await;
    for i in 0..8 {
        h.call(Method::POST, CMS, Some(cm(&format!("c{i}"), json!({}))))
            .await;
    }
    let (code, mut body) = open_watch(&h, &format!("{CMS}?watch=1&resourceVersion=1")).await;
    assert_eq!(code, StatusCode::OK);
    let lines = read_lines(&mut body, 5).await;
    assert_eq!(lines.len(), 1);
    assert_eq!(lines[0]["type"], "ERROR");
    assert_eq!(lines[0]["object"]["code"], 410);
    assert_eq!(lines[0]["object"]["reason"], "Expired");
    assert!(lines[0]["object"]["message"]
        .as_str()
        .unwrap()
        .starts_with("too old resource version: 1 ("));
}

#[tokio::test]
async fn lagging_watcher_gets_error_and_close() {
    let h = harness_with(StoreConfig {
        history_window: 1000,
        live_buffer: 16,
    });
    h.call(
        Method::POST,
        "/api/v1/namespaces",
        Some(json!({"metadata":{"name":"default"}})),
    )
    .await;
    let (_, mut body) = open_watch(&h, &format!("{CMS}?watch=1&resourceVersion=1")).await;
    // Nobody reads while 200 events happen: more than the stream buffer plus the live buffer.
    for i in 0..200 {
        h.call(Method::POST, CMS, Some(cm(&format!("c{i}"), json!({}))))
            .await;
    }
    let lines = read_lines(&mut body, 1000).await;
    assert!(
        lines.len() < 200,
        "the stream was cut short ({} lines)",
        lines.len()
    );
    let last = lines.last().unwrap();
    assert_eq!(last["type"], "ERROR");
    assert_eq!(last["object"]["code"], 410);
}
