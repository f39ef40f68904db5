//! Runs real kubectl binaries (1.27 and 1.33) against a tiny in-process HTTP server that serves
//! litek8s's discovery, OpenAPI and table functions, and checks what kubectl makes of them:
//! `api-resources`, `api-versions`, `get` (tables, `-A`, `-o wide`), `create`/`apply
//! --dry-run=client` (which download OpenAPI to validate) and, on 1.33, `explain` (OpenAPI v3).

use std::convert::Infallible;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use http::{header, Request, Response, StatusCode};
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use litek8s::api::table::{self, IncludeObject};
use litek8s::api::{discovery, openapi, response, ApiBody, ApiContext, ApiSettings};
use litek8s::kube::mutation::Mutation;
use litek8s::kube::resources::{self, RESOURCES};
use litek8s::kube::store::{Store, StoreConfig};
use litek8s::kube::writer::{WriteError, WriteFuture, Writer};
use serde_json::{json, Value};

const KUBECTL_DIR: &str = "/usr/lib/google-cloud-sdk/bin";

struct NoWriter;

impl Writer for NoWriter {
    fn write(&self, _mutation: Mutation) -> WriteFuture<'_> {
        Box::pin(async { Err(WriteError::Timeout) })
    }
}

/// What the server saw: (path?query, Accept, response Content-Type).
type Log = Arc<Mutex<Vec<(String, String, String)>>>;

fn fixtures(plural: &str) -> Vec<Value> {
    let created = (chrono::Utc::now() - chrono::Duration::days(3))
        .to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
    match plural {
        "configmaps" => vec![json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "c1", "namespace": "default", "creationTimestamp": created,
                         "resourceVersion": "5"},
            "data": {"a": "1", "b": "2"}})],
        "pods" => vec![json!({"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "p1", "namespace": "default", "creationTimestamp": created,
                         "resourceVersion": "6"},
            "spec": {"nodeName": "n1", "containers": [{"name": "a", "image": "busybox"}]},
            "status": {"phase": "Running", "podIPs": [{"ip": "10.1.0.7"}],
                "containerStatuses": [{"name": "a", "ready": true, "restartCount": 0,
                                       "state": {"running": {}}}]}})],
        _ => vec![],
    }
}

fn not_found() -> Response<ApiBody> {
    response::json_value(
        StatusCode::NOT_FOUND,
        &json!({"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure",
                "message":"not found","reason":"NotFound","details":{},"code":404}),
    )
}

/// A list (or Table) for `/api/v1/[namespaces/NS/]PLURAL` and `/apis/G/V/[namespaces/NS/]PLURAL`.
fn list(path: &str, accept: &str) -> Option<Response<ApiBody>> {
    let parts: Vec<&str> = path.trim_matches('/').split('/').collect();
    let (group, version, rest) = match parts.as_slice() {
        ["api", v, rest @ ..] => ("", *v, rest),
        ["apis", g, v, rest @ ..] => (*g, *v, rest),
        _ => return None,
    };
    let plural = match rest {
        ["namespaces", _, plural] | [plural] => *plural,
        _ => return None,
    };
    let info = resources::find(group, version, plural)?;
    let objects = fixtures(plural);
    let meta = json!({"resourceVersion": "10"});
    let body = if accept.contains("as=Table") {
        table::render(
            info,
            &objects,
            meta,
            IncludeObject::Metadata,
            chrono::Utc::now(),
        )
    } else {
        json!({"kind": format!("{}List", info.kind), "apiVersion": info.api_version(),
               "metadata": meta, "items": objects})
    };
    Some(response::json_value(StatusCode::OK, &body))
}

async fn handle(ctx: Arc<ApiContext>, log: Log, req: Request<Incoming>) -> Response<ApiBody> {
    use http_body_util::BodyExt;
    let path = req.uri().path().to_string();
    let query = req.uri().query().unwrap_or("").to_string();
    let accept = req
        .headers()
        .get(header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_string();
    let resp = if path == "/version" {
        response::json_value(
            StatusCode::OK,
            &json!({"major": "1", "minor": "33", "gitVersion": "v1.33.0-litek8s",
                    "gitCommit": "", "gitTreeState": "clean", "buildDate": "2026-01-01T00:00:00Z",
                    "goVersion": "none", "compiler": "rustc", "platform": "linux/amd64"}),
        )
    } else if let Some(resp) = discovery::respond(&ctx, &path, &accept) {
        resp
    } else if let Some(resp) = openapi::respond(&path, &accept, &ctx.custom_kinds) {
        resp
    } else if req.method() == http::Method::GET {
        list(&path, &accept).unwrap_or_else(not_found)
    } else if req.method() == http::Method::POST {
        // Strict field validation as the real router does it, else echo the object back as
        // created; the log keeps the query for the assertions.
        let strict = query.contains("fieldValidation=Strict");
        let body = req
            .into_body()
            .collect()
            .await
            .map(|b| b.to_bytes())
            .unwrap_or_default();
        let object: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
        let (group, version) = match object["apiVersion"].as_str().unwrap_or("").split_once('/') {
            Some((g, v)) => (g.to_string(), v.to_string()),
            None => (
                String::new(),
                object["apiVersion"].as_str().unwrap_or("").to_string(),
            ),
        };
        let kind = object["kind"].as_str().unwrap_or("");
        let unknown = openapi::unknown_fields(&group, &version, kind, &object).unwrap_or_default();
        if strict && !unknown.is_empty() {
            response::json_value(
                StatusCode::BAD_REQUEST,
                &json!({"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure",
                        "message": openapi::strict_decoding_message(kind, &version, &unknown),
                        "reason":"BadRequest","code":400}),
            )
        } else {
            response::json(StatusCode::CREATED, body)
        }
    } else {
        not_found()
    };
    let path = if query.is_empty() {
        path
    } else {
        format!("{path}?{query}")
    };
    let ct = resp
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_string();
    log.lock().unwrap().push((path, accept, ct));
    resp
}

async fn start_server(log: Log) -> SocketAddr {
    let ctx = Arc::new(ApiContext::new(
        Arc::new(Store::new(StoreConfig::default())),
        Arc::new(NoWriter),
        ApiSettings {
            server_name: "test".into(),
            node_ips: vec!["127.0.0.1".parse().unwrap()],
            api_port: 6443,
            service_cidr: "10.96.0.0/12".into(),
        },
    ));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                return;
            };
            let (ctx, log) = (ctx.clone(), log.clone());
            tokio::spawn(async move {
                let service = hyper::service::service_fn(move |req| {
                    let (ctx, log) = (ctx.clone(), log.clone());
                    async move { Ok::<_, Infallible>(handle(ctx, log, req).await) }
                });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), service)
                    .await;
            });
        }
    });
    addr
}

struct Kubectl {
    binary: PathBuf,
    server: String,
    home: tempfile::TempDir,
}

impl Kubectl {
    /// Runs kubectl with `args` (and `-f file`); returns stdout, panicking with stderr on failure.
    async fn run(&self, args: &[&str], file: Option<&Path>) -> String {
        let mut cmd = tokio::process::Command::new(&self.binary);
        cmd.args(["--server", &self.server])
            .args(args)
            .env("HOME", self.home.path())
            .env("KUBECONFIG", self.home.path().join("no-kubeconfig"))
            .env_remove("KUBERNETES_SERVICE_HOST");
        if let Some(file) = file {
            cmd.arg("-f").arg(file);
        }
        let out = cmd.output().await.unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout).to_string();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            out.status.success(),
            "{} {args:?} failed: {stderr}\n{stdout}",
            self.binary.display()
        );
        stdout
    }

    /// Runs kubectl expecting failure; returns stderr.
    async fn run_fail(&self, args: &[&str], file: &Path) -> String {
        let out = tokio::process::Command::new(&self.binary)
            .args(["--server", &self.server])
            .args(args)
            .arg("-f")
            .arg(file)
            .env("HOME", self.home.path())
            .env("KUBECONFIG", self.home.path().join("no-kubeconfig"))
            .output()
            .await
            .unwrap();
        assert!(
            !out.status.success(),
            "{} {args:?} succeeded",
            self.binary.display()
        );
        String::from_utf8_lossy(&out.stderr).to_string()
    }
}

fn without_query(path: &str) -> &str {
    path.split('?').next().unwrap_or(path)
}

fn rows(output: &str) -> Vec<Vec<String>> {
    output
        .lines()
        .map(|l| l.split_whitespace().map(str::to_string).collect())
        .collect()
}

fn has_row(output: &str, want: &[&str]) -> bool {
    rows(output).iter().any(|r| r == want)
}

/// Returns the kubectl for `version`, or `None` (test skipped, with a note) when not installed.
fn kubectl_binary(version: &str) -> Option<PathBuf> {
    let binary = PathBuf::from(KUBECTL_DIR).join(format!("kubectl.{version}"));
    if binary.exists() {
        Some(binary)
    } else {
        eprintln!("skipping: {} not installed", binary.display());
        None
    }
}

async fn check_kubectl(binary: PathBuf, version: &str, aggregated: &str) {
    let log: Log = Default::default();
    let addr = start_server(log.clone()).await;
    let kubectl = Kubectl {
        binary,
        server: format!("http://{addr}"),
        home: tempfile::tempdir().unwrap(),
    };

    let out = kubectl.run(&["api-resources"], None).await;
    for want in [
        &["pods", "po", "v1", "true", "Pod"][..],
        &["namespaces", "ns", "v1", "false", "Namespace"],
        &["nodes", "no", "v1", "false", "Node"],
        &["services", "svc", "v1", "true", "Service"],
        &["endpoints", "ep", "v1", "true", "Endpoints"],
        &["configmaps", "cm", "v1", "true", "ConfigMap"],
        &["secrets", "v1", "true", "Secret"],
        &["serviceaccounts", "sa", "v1", "true", "ServiceAccount"],
        &["events", "ev", "v1", "true", "Event"],
        &["events", "ev", "events.k8s.io/v1", "true", "Event"],
        &[
            "endpointslices",
            "discovery.k8s.io/v1",
            "true",
            "EndpointSlice",
        ],
        &["leases", "coordination.k8s.io/v1", "true", "Lease"],
        &["deployments", "deploy", "apps/v1", "true", "Deployment"],
        &["cronjobs", "cj", "batch/v1", "true", "CronJob"],
        &["persistentvolumes", "pv", "v1", "false", "PersistentVolume"],
        &[
            "certificatesigningrequests",
            "csr",
            "certificates.k8s.io/v1",
            "false",
            "CertificateSigningRequest",
        ],
    ] {
        assert!(
            has_row(&out, want),
            "kubectl {version} api-resources lacks {want:?}:\n{out}"
        );
    }
    // One row per served resource, plus the header.
    assert_eq!(out.lines().count(), RESOURCES.len() + 1, "{out}");

    // Aggregated discovery was negotiated, in the version this kubectl asks for first.
    let want_ct =
        format!("application/json;g=apidiscovery.k8s.io;v={aggregated};as=APIGroupDiscoveryList");
    {
        let log = log.lock().unwrap();
        for path in ["/api", "/apis"] {
            assert!(
                log.iter()
                    .any(|(p, _, ct)| without_query(p) == path && *ct == want_ct),
                "kubectl {version}: {path} was not served as {want_ct}: {log:?}"
            );
        }
    }

    let out = kubectl.run(&["api-versions"], None).await;
    let versions: Vec<&str> = out.lines().collect();
    assert_eq!(
        versions,
        [
            "admissionregistration.k8s.io/v1",
            "apiextensions.k8s.io/v1",
            "apiregistration.k8s.io/v1",
            "apps/v1",
            "authentication.k8s.io/v1",
            "authorization.k8s.io/v1",
            "autoscaling/v2",
            "batch/v1",
            "certificates.k8s.io/v1",
            "coordination.k8s.io/v1",
            "discovery.k8s.io/v1",
            "events.k8s.io/v1",
            "networking.k8s.io/v1",
            "policy/v1",
            "rbac.authorization.k8s.io/v1",
            "scheduling.k8s.io/v1",
            "storage.k8s.io/v1",
            "v1"
        ],
        "kubectl {version} api-versions"
    );

    let out = kubectl
        .run(&["get", "configmaps", "-n", "default"], None)
        .await;
    assert_eq!(
        rows(&out),
        [vec!["NAME", "DATA", "AGE"], vec!["c1", "2", "3d"]],
        "{out}"
    );
    let out = kubectl.run(&["get", "cm", "-A"], None).await;
    assert_eq!(rows(&out)[1], ["default", "c1", "2", "3d"], "{out}");
    let out = kubectl
        .run(&["get", "pods", "-n", "default", "-o", "wide"], None)
        .await;
    let table = rows(&out);
    assert_eq!(
        table[0],
        [
            "NAME",
            "READY",
            "STATUS",
            "RESTARTS",
            "AGE",
            "IP",
            "NODE",
            "NOMINATED",
            "NODE",
            "READINESS",
            "GATES"
        ],
        "{out}"
    );
    assert_eq!(
        table[1],
        ["p1", "1/1", "Running", "0", "3d", "10.1.0.7", "n1", "<none>", "<none>"],
        "{out}"
    );

    // create/apply validate against OpenAPI first (the default is --validate=strict).
    let dir = tempfile::tempdir().unwrap();
    let manifest = dir.path().join("objects.yaml");
    std::fs::write(
        &manifest,
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: cm1\n  namespace: default\n\
         data:\n  a: b\n---\n\
         apiVersion: coordination.k8s.io/v1\nkind: Lease\nmetadata:\n  name: l1\n  namespace: default\n\
         spec:\n  holderIdentity: me\n  leaseDurationSeconds: 10\n---\n\
         apiVersion: v1\nkind: Pod\nmetadata:\n  name: p2\n  namespace: default\n\
         spec:\n  containers:\n  - name: a\n    image: busybox\n",
    )
    .unwrap();
    let out = kubectl
        .run(&["create", "--dry-run=client"], Some(&manifest))
        .await;
    for want in [
        "configmap/cm1 created",
        "lease.coordination.k8s.io/l1 created",
        "pod/p2 created",
    ] {
        assert!(out.contains(want), "kubectl {version} create: {out}");
    }
    let out = kubectl
        .run(&["apply", "--dry-run=client"], Some(&manifest))
        .await;
    assert!(
        out.contains("pod/p2 created"),
        "kubectl {version} apply: {out}"
    );

    // A real create: kubectl leaves field validation to the server, as with kube-apiserver
    // (which then rejects unknown fields; see openapi::unknown_fields).
    let out = kubectl.run(&["create"], Some(&manifest)).await;
    assert!(
        out.contains("pod/p2 created"),
        "kubectl {version} create: {out}"
    );
    {
        let seen = log.lock().unwrap();
        let posts: Vec<&String> = seen
            .iter()
            .map(|(p, _, _)| p)
            .filter(|p| p.contains("fieldManager=kubectl-create"))
            .collect();
        assert_eq!(posts.len(), 3, "{seen:?}");
        for post in posts {
            assert!(post.contains("fieldValidation=Strict"), "{post}");
        }
    }

    // An unknown field is rejected the way kube-apiserver rejects it.
    let bad = dir.path().join("bad.yaml");
    std::fs::write(
        &bad,
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: p3\n  namespace: default\n\
         spec:\n  containers:\n  - name: a\n    image: busybox\n    imagePullPolcy: Always\n",
    )
    .unwrap();
    let err = kubectl.run_fail(&["create"], &bad).await;
    assert!(
        err.contains("Error from server (BadRequest): error when creating \"",)
            && err.contains(
                "Pod in version \"v1\" cannot be handled as a Pod: strict decoding error: \
             unknown field \"spec.containers[0].imagePullPolcy\""
            ),
        "kubectl {version}: {err}"
    );

    // Each version read the OpenAPI document it validates with.
    let seen = log.lock().unwrap();
    let openapi = if version == "1.27" {
        "/openapi/v2"
    } else {
        "/openapi/v3/api/v1"
    };
    assert!(
        seen.iter().any(|(p, _, _)| without_query(p) == openapi),
        "kubectl {version} never fetched {openapi}: {seen:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_1_27_discovery_tables_and_openapi() {
    let Some(binary) = kubectl_binary("1.27") else {
        return;
    };
    check_kubectl(binary, "1.27", "v2beta1").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_1_33_discovery_tables_and_openapi() {
    let Some(binary) = kubectl_binary("1.33") else {
        return;
    };
    check_kubectl(binary.clone(), "1.33", "v2").await;

    // explain reads the OpenAPI v3 documents.
    let addr = start_server(Default::default()).await;
    let kubectl = Kubectl {
        binary,
        server: format!("http://{addr}"),
        home: tempfile::tempdir().unwrap(),
    };
    let out = kubectl
        .run(&["explain", "pods.spec.containers"], None)
        .await;
    assert!(out.contains("KIND:") && out.contains("Pod"), "{out}");
    assert!(out.contains("imagePullPolicy"), "{out}");
    let out = kubectl.run(&["explain", "leases.spec"], None).await;
    assert!(out.contains("holderIdentity"), "{out}");
}
