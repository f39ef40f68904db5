//! The node's own API, apart from the tunnel: the node port (kubelet's 10250, here a free
//! port given with `--kubelet-port`) over TLS with the node's serving certificate from the
//! cluster CA, its callers authenticated and authorized through the API server as kubelet's
//! webhook mode does (a service account's token reviewed, a client certificate, anonymous;
//! 401 and 403 with a body naming what was refused), serving what metrics-server scrapes
//! and the same routes the tunnel serves, and nothing of a pod of another node or outside a
//! pod's files, whatever the path or the tunnel's headers say. One server, one agent, one
//! real pod (the requirements of tests/agent_pods.rs apply; `LITEK8S_SKIP_CONTAINERS=1`
//! skips when they are missing).

mod agent_support;
mod support;

use std::net::SocketAddr;
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use agent_support::{missing_pod_tools, read_dir, Agent, PodCleanup};
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper_util::rt::TokioIo;
use serde_json::{json, Value};
use support::{free_port, runtime, Api, Server};

const IMAGE: &str = "litek8s.test/busybox:1";
/// Hang guards, not performance assertions.
const GUARD: Duration = Duration::from_secs(60);

struct Setup {
    server: Server,
    agent: Agent,
    port: u16,
    _cleanup: PodCleanup,
}

fn start(agent_args: &[&str]) -> Option<Setup> {
    let missing = missing_pod_tools();
    if !agent_support::tools_present_or_skip(&missing, "node API tests need") {
        return None;
    }
    // The tests of this file run at once: each its own bridge and pod network.
    static NEXT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    let pid = std::process::id();
    let bridge = format!("lk8n{}x{n}", pid % 100_000);
    let cidr = format!("10.{}.{}.0/24", 200 + n % 10, pid % 250);
    let server = Server::start(&["--cluster-cidr", &cidr]);
    let token = std::fs::read_to_string(server.data_dir.join("join-token"))
        .expect("join-token")
        .trim()
        .to_string();
    let port = free_port();
    let port_text = port.to_string();
    let mut args = vec!["--cni-bridge", &bridge, "--kubelet-port", &port_text];
    args.extend_from_slice(agent_args);
    let agent = Agent::new("n1", &server.url(), Some(&token), &args);
    let cleanup = PodCleanup {
        node_dir: agent.node_dir.clone(),
        root: agent.root.clone(),
        bridge,
    };
    agent_support::place_test_image(&agent.node_dir, IMAGE);
    let mut agent = agent;
    agent.start();
    Some(Setup {
        server,
        agent,
        port,
        _cleanup: cleanup,
    })
}

async fn apply(api: &Api, path: &str, object: Value) {
    let resp = api.post_json(path, &object).await.expect("POST");
    assert!(
        resp.status == 201 || resp.status == 200,
        "{path}: {} {}",
        resp.status,
        resp.text()
    );
}

/// A service account `name` bound to a ClusterRole of `nodes/<subresources>`; its token.
async fn account(api: &Api, name: &str, subresources: &[&str]) -> String {
    apply(
        api,
        "/api/v1/namespaces/default/serviceaccounts",
        json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": name}}),
    )
    .await;
    let resources: Vec<String> = subresources.iter().map(|s| format!("nodes/{s}")).collect();
    apply(
        api,
        "/apis/rbac.authorization.k8s.io/v1/clusterroles",
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
               "metadata": {"name": name},
               "rules": [{"apiGroups": [""], "resources": resources, "verbs": ["get", "create"]}]}),
    )
    .await;
    apply(
        api,
        "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings",
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
               "metadata": {"name": name},
               "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": name},
               "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": "default"}]}),
    )
    .await;
    let resp = api
        .post_json(
            &format!("/api/v1/namespaces/default/serviceaccounts/{name}/token"),
            &json!({"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {}}),
        )
        .await
        .expect("token");
    assert_eq!(resp.status, 201, "{}", resp.text());
    resp.json()["status"]["token"]
        .as_str()
        .expect("a token")
        .to_string()
}

/// One GET to the node port with a client certificate (`cert`, `key` PEM).
async fn get_with_cert(
    addr: SocketAddr,
    ca: &Path,
    cert: &str,
    key: &str,
    path: &str,
) -> (u16, String) {
    let pem = std::fs::read(ca).expect("ca");
    let mut roots = rustls::RootCertStore::empty();
    for c in rustls_pemfile::certs(&mut pem.as_slice()) {
        roots.add(c.expect("ca cert")).expect("add CA");
    }
    let chain = rustls_pemfile::certs(&mut cert.as_bytes())
        .collect::<Result<Vec<_>, _>>()
        .expect("cert");
    let key = rustls_pemfile::private_key(&mut key.as_bytes())
        .expect("key")
        .expect("a key");
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .expect("versions")
        .with_root_certificates(roots)
        .with_client_auth_cert(chain, key)
        .expect("client identity");
    let tcp = tokio::net::TcpStream::connect(addr).await.expect("connect");
    let name = rustls::pki_types::ServerName::IpAddress(addr.ip().into());
    let tls = tokio_rustls::TlsConnector::from(Arc::new(config))
        .connect(name, tcp)
        .await
        .expect("TLS handshake with a client certificate");
    let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(tls))
        .await
        .expect("HTTP handshake");
    tokio::spawn(connection);
    let req = http::Request::get(path)
        .header("host", addr.to_string())
        .body(Full::new(Bytes::new()))
        .expect("request");
    let resp = sender.send_request(req).await.expect("answer");
    let status = resp.status().as_u16();
    let body = resp.into_body().collect().await.expect("body").to_bytes();
    (status, String::from_utf8_lossy(&body).into_owned())
}

/// One GET to the node port with a bearer `token` and `headers` of the caller's choice (the
/// tunnel's own headers, forged).
async fn get_with_headers(
    addr: SocketAddr,
    ca: &Path,
    token: &str,
    path: &str,
    headers: &[(&str, &str)],
) -> (u16, String) {
    let config = support::client_config(ca, &[b"http/1.1"]);
    let tcp = tokio::net::TcpStream::connect(addr).await.expect("connect");
    let name = rustls::pki_types::ServerName::IpAddress(addr.ip().into());
    let tls = tokio_rustls::TlsConnector::from(config)
        .connect(name, tcp)
        .await
        .expect("TLS handshake");
    let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(tls))
        .await
        .expect("HTTP handshake");
    tokio::spawn(connection);
    let mut req = http::Request::get(path)
        .header("host", addr.to_string())
        .header("authorization", format!("Bearer {token}"));
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    let req = req.body(Full::new(Bytes::new())).expect("request");
    let resp = sender.send_request(req).await.expect("answer");
    let status = resp.status().as_u16();
    let body = resp.into_body().collect().await.expect("body").to_bytes();
    (status, String::from_utf8_lossy(&body).into_owned())
}

/// What a WebSocket exec through the node port gave: the messages by channel, or the HTTP
/// answer that refused the upgrade.
#[derive(Debug)]
enum Exec {
    Session(Vec<(u8, Vec<u8>)>),
    Refused(u16, String),
}

/// kubelet's `/exec/…` on the node port over WebSocket (`v5.channel.k8s.io`), as
/// kube-apiserver or a tool dialing the node speaks it, with `token`.
async fn exec_over_websocket(addr: SocketAddr, ca: &Path, token: &str, path: &str) -> Exec {
    use futures::StreamExt;
    use tokio_tungstenite::tungstenite::client::IntoClientRequest;
    use tokio_tungstenite::tungstenite::{Error, Message};

    let config = support::client_config(ca, &[b"http/1.1"]);
    let tcp = tokio::net::TcpStream::connect(addr).await.expect("connect");
    let name = rustls::pki_types::ServerName::IpAddress(addr.ip().into());
    let tls = tokio_rustls::TlsConnector::from(config)
        .connect(name, tcp)
        .await
        .expect("TLS handshake");
    let mut req = format!("wss://{addr}{path}")
        .into_client_request()
        .expect("request");
    let headers = req.headers_mut();
    headers.insert(
        "sec-websocket-protocol",
        http::HeaderValue::from_static("v5.channel.k8s.io"),
    );
    headers.insert(
        "authorization",
        http::HeaderValue::from_str(&format!("Bearer {token}")).expect("header"),
    );
    let mut ws = match tokio_tungstenite::client_async(req, tls).await {
        Ok((ws, _)) => ws,
        Err(Error::Http(resp)) => {
            let body = resp.body().as_deref().unwrap_or_default();
            return Exec::Refused(
                resp.status().as_u16(),
                String::from_utf8_lossy(body).into_owned(),
            );
        }
        Err(e) => panic!("WebSocket exec: {e}"),
    };
    let mut got = Vec::new();
    while let Some(message) = tokio::time::timeout(GUARD, ws.next())
        .await
        .expect("the session never ended")
    {
        match message {
            Ok(Message::Binary(data)) if !data.is_empty() => {
                got.push((data[0], data[1..].to_vec()));
            }
            Ok(Message::Close(_)) | Err(_) => break,
            Ok(_) => {}
        }
    }
    Exec::Session(got)
}

async fn wait_running(api: &Api, agent: &Agent, name: &str) {
    let deadline = Instant::now() + GUARD;
    loop {
        let p = api
            .get(&format!("/api/v1/namespaces/default/pods/{name}"))
            .await
            .expect("GET")
            .json();
        if p["status"]["containerStatuses"][0]["state"]["running"].is_object() {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "pod {name} never ran: {:#}\nagent log:\n{}",
            p["status"],
            agent.logs()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[test]
fn the_node_port_authenticates_authorizes_and_serves_the_tunnels_routes() {
    let Some(mut setup) = start(&[]) else { return };
    setup
        .agent
        .wait_for_log("node port listening", Duration::from_secs(30));
    let addr = SocketAddr::from(([127, 0, 0, 1], setup.port));
    let ca = setup.server.ca_cert();
    let admin = setup.server.api();
    // The serving certificate chains to the cluster CA and names the node's IP: a client
    // verifying it against the CA connects by address.
    let node_port = |token: Option<&str>| Api::new(addr, &ca, token.map(str::to_string));
    let other = support::node_credentials(&setup.server, "n2");
    let rt = runtime();
    rt.block_on(async {
        apply(
            &admin,
            "/api/v1/namespaces/default/pods",
            agent_support::pod(
                "talker",
                IMAGE,
                &["sh", "-c", "echo hello-node-port; exec sleep 3600"],
                0,
                json!({}),
            ),
        )
        .await;
        wait_running(&admin, &setup.agent, "talker").await;

        // Anonymous: authenticated as system:anonymous, which may not use the node.
        let resp = node_port(None).get("/healthz").await.expect("GET");
        assert_eq!(resp.status, 403, "{}", resp.text());
        assert!(
            resp.text()
                .contains("user=system:anonymous, verb=get, resource=nodes, subresource=proxy"),
            "{}",
            resp.text()
        );
        // A token the API server does not know.
        let resp = node_port(Some("not-a-token"))
            .get("/stats/summary")
            .await
            .expect("GET");
        assert_eq!(resp.status, 401, "{}", resp.text());

        // What metrics-server is granted (stats and metrics) is all it gets.
        let scraper = account(&admin, "scraper", &["stats", "metrics"]).await;
        let resp = node_port(Some(&scraper))
            .get("/metrics/resource")
            .await
            .expect("GET");
        assert_eq!(resp.status, 200, "{}", resp.text());
        let metrics = resp.text();
        for name in [
            "node_cpu_usage_seconds_total",
            "node_memory_working_set_bytes",
            "scrape_error 0",
        ] {
            assert!(metrics.contains(name), "{name} in\n{metrics}");
        }
        assert!(
            metrics.contains("pod=\"talker\""),
            "the running pod in\n{metrics}"
        );
        let resp = node_port(Some(&scraper))
            .get("/stats/summary")
            .await
            .expect("GET");
        assert_eq!(resp.status, 200, "{}", resp.text());
        assert_eq!(resp.json()["node"]["nodeName"], "n1");
        let resp = node_port(Some(&scraper)).get("/pods").await.expect("GET");
        assert_eq!(resp.status, 403, "{}", resp.text());
        assert!(resp.text().contains("subresource=proxy"), "{}", resp.text());

        // nodes/proxy reaches the pods and their logs, kubelet's paths.
        let operator = account(&admin, "operator", &["proxy"]).await;
        let resp = node_port(Some(&operator)).get("/pods").await.expect("GET");
        assert_eq!(resp.status, 200, "{}", resp.text());
        assert_eq!(resp.json()["items"][0]["metadata"]["name"], "talker");
        let resp = node_port(Some(&operator))
            .get("/containerLogs/default/talker/c")
            .await
            .expect("GET");
        assert_eq!(resp.status, 200, "{}", resp.text());
        assert_eq!(resp.text(), "hello-node-port\n");
        let resp = node_port(Some(&operator))
            .get("/containerLogs/default/nobody/c")
            .await
            .expect("GET");
        assert_eq!(resp.status, 404, "{}", resp.text());

        // kubelet's exec over WebSocket: nodes/proxy runs a command in the pod's container.
        let exec_path = "/exec/default/talker/c?command=echo&command=from-the-node-port&stdout=true&stderr=true";
        let Exec::Session(messages) = exec_over_websocket(addr, &ca, &operator, exec_path).await
        else {
            panic!("the exec was refused\nagent log:\n{}", setup.agent.logs());
        };
        let stdout: Vec<u8> = messages
            .iter()
            .filter(|(c, _)| *c == 1)
            .flat_map(|(_, d)| d.clone())
            .collect();
        assert_eq!(String::from_utf8_lossy(&stdout), "from-the-node-port\n");
        let status = messages
            .iter()
            .find(|(c, _)| *c == 3)
            .map(|(_, d)| serde_json::from_slice::<Value>(d).expect("Status JSON"))
            .expect("a Status message");
        assert_eq!(status["status"], "Success", "{status}");
        // The exit code reaches the caller as kubectl reads it.
        let Exec::Session(messages) = exec_over_websocket(
            addr,
            &ca,
            &operator,
            "/exec/default/talker/c?command=sh&command=-c&command=exit%203&stdout=true",
        )
        .await
        else {
            panic!("the exec was refused");
        };
        let status = messages
            .iter()
            .find(|(c, _)| *c == 3)
            .map(|(_, d)| serde_json::from_slice::<Value>(d).expect("Status JSON"))
            .expect("a Status message");
        assert_eq!(status["details"]["causes"][0]["message"], "3", "{status}");
        // A token without nodes/proxy runs nothing; a pod not on this node is a 404.
        match exec_over_websocket(addr, &ca, &scraper, exec_path).await {
            Exec::Refused(403, body) => assert!(
                body.contains("verb=get, resource=nodes, subresource=proxy"),
                "{body}"
            ),
            other => panic!("scraper's exec: {other:?}"),
        }
        match exec_over_websocket(
            addr,
            &ca,
            &operator,
            "/exec/default/nobody/c?command=echo&stdout=true",
        )
        .await
        {
            Exec::Refused(404, _) => {}
            other => panic!("exec into a pod of no node: {other:?}"),
        }

        // A pod bound to another node, and paths that would leave a pod's own files: nothing
        // of them is reached through this node's port, by kubelet's paths or by the tunnel's
        // own routes with their headers forged; each is refused with a status saying why.
        apply(
            &admin,
            "/api/v1/namespaces/default/pods",
            agent_support::pod("elsewhere", IMAGE, &["sleep", "3600"], 0, json!({"nodeName": "n2"})),
        )
        .await;
        let uid_of = |name: &'static str| {
            let admin = admin.clone();
            async move {
                admin
                    .get(&format!("/api/v1/namespaces/default/pods/{name}"))
                    .await
                    .expect("GET")
                    .json()["metadata"]["uid"]
                    .as_str()
                    .expect("a uid")
                    .to_string()
            }
        };
        let elsewhere = uid_of("elsewhere").await;
        let talker = uid_of("talker").await;
        let uid = "x-litek8s-pod-uid";
        let container = "x-litek8s-container";
        for (path, headers, code) in [
            ("/containerLogs/default/elsewhere/c", vec![], 404),
            (
                "/logs/default/elsewhere",
                vec![(uid, elsewhere.as_str()), (container, "c")],
                404,
            ),
            // talker's name with another pod's uid: talker's log is not served for it.
            (
                "/logs/default/talker",
                vec![(uid, elsewhere.as_str()), (container, "c")],
                404,
            ),
            ("/logs/default/talker", vec![(uid, "../../.."), (container, "c")], 400),
            ("/logs/default/talker", vec![(uid, talker.as_str()), (container, "../c")], 400),
            ("/containerLogs/default/talker/c/../../../../../etc/passwd", vec![], 400),
            ("/containerLogs/default/talker/..%2F..%2F..%2Fetc%2Fpasswd", vec![], 404),
            ("/containerLogs/..%2Fdefault/talker/c", vec![], 404),
            (
                "/portforward/default/elsewhere?port=80",
                vec![(uid, elsewhere.as_str())],
                404,
            ),
            (
                "/podproxy/default/elsewhere/80/",
                vec![(uid, elsewhere.as_str())],
                404,
            ),
        ] {
            let (status, body) = get_with_headers(addr, &ca, &operator, path, &headers).await;
            assert_eq!(status, code, "{path} {headers:?}: {body}");
            assert!(
                !body.contains("hello-node-port") && !body.contains("root:"),
                "{path}: {body}"
            );
        }
        match exec_over_websocket(
            addr,
            &ca,
            &operator,
            "/exec/default/elsewhere/c?command=echo&stdout=true",
        )
        .await
        {
            Exec::Refused(404, body) => assert!(body.contains("not on this node"), "{body}"),
            other => panic!("exec into a pod of another node: {other:?}"),
        }

        // A client certificate of the cluster CA names its user: another node's may not.
        let (status, body) =
            get_with_cert(addr, &ca, &other.cert_pem, &other.key_pem, "/pods").await;
        assert_eq!(status, 403, "{body}");
        assert!(body.contains("user=system:node:n2"), "{body}");

        // The tunnel serves the same routes: the API's node proxy reaches the new ones.
        let resp = admin
            .get("/api/v1/nodes/n1/proxy/metrics/resource")
            .await
            .expect("GET");
        assert_eq!(resp.status, 200, "{}", resp.text());
        assert!(resp.text().contains("node_cpu_usage_seconds_total"));

        // The Node advertises the port.
        let node = agent_support::node(&admin, "n1").await.expect("the Node");
        assert_eq!(
            node["status"]["daemonEndpoints"]["kubeletEndpoint"]["Port"],
            setup.port
        );
    });
}

/// Bytes and names of the files in `dir`.
fn files(dir: &Path) -> Vec<(String, u64)> {
    let mut found: Vec<(String, u64)> = read_dir(dir)
        .into_iter()
        .map(|p| {
            let size = std::fs::metadata(&p).map(|m| m.len()).unwrap_or(0);
            (
                p.file_name()
                    .unwrap_or_default()
                    .to_string_lossy()
                    .into_owned(),
                size,
            )
        })
        .collect();
    found.sort();
    found
}

#[test]
fn container_logs_rotate_within_their_cap_and_follow_goes_on_in_the_new_file() {
    const MAX_SIZE: u64 = 64 << 10;
    const MAX_FILES: usize = 3;
    let Some(setup) = start(&[
        "--container-log-max-size",
        "64Ki",
        "--container-log-max-files",
        "3",
    ]) else {
        return;
    };
    let admin = setup.server.api();
    // 40 bursts of 1,000 numbered lines (about 60 KiB each), a fifth of a second apart:
    // some 2.4 MiB, over 12 times what the cap of 3 files of 64 KiB allows.
    let writer = "sleep 2; b=0; while [ $b -lt 40 ]; do i=0; while [ $i -lt 1000 ]; do echo \"line $((b*1000+i)) padding-padding-padding\"; i=$((i+1)); done; b=$((b+1)); sleep 0.2; done; echo end-of-writing; exec sleep 3600";
    let rt = runtime();
    rt.block_on(async {
        apply(
            &admin,
            "/api/v1/namespaces/default/pods",
            agent_support::pod("writer", IMAGE, &["sh", "-c", writer], 0, json!({})),
        )
        .await;
        wait_running(&admin, &setup.agent, "writer").await;
    });
    // `kubectl logs -f` from before the first rotation to the end of the writing.
    let kubectl = agent_support::KUBECTLS[1];
    let mut follow = Command::new(kubectl)
        .arg("--kubeconfig")
        .arg(setup.server.kubeconfig_path())
        .args(["logs", "-f", "writer"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("kubectl logs -f");
    let stdout = follow.stdout.take().expect("stdout");
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        use std::io::BufRead;
        for line in std::io::BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            let end = line == "end-of-writing";
            if tx.send(line).is_err() || end {
                break;
            }
        }
    });
    let deadline = Instant::now() + GUARD;
    let mut numbers = Vec::new();
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        let line = rx
            .recv_timeout(left)
            .unwrap_or_else(|_| panic!("logs -f stopped after {} lines", numbers.len()));
        if line == "end-of-writing" {
            break;
        }
        if let Some(n) = line
            .strip_prefix("line ")
            .and_then(|r| r.split(' ').next())
            .and_then(|n| n.parse::<u64>().ok())
        {
            numbers.push(n);
        }
    }
    let _ = follow.kill();
    let _ = follow.wait();
    // Every line, in order, across every rotation.
    let expected: Vec<u64> = (0..40_000).collect();
    assert!(
        numbers == expected,
        "logs -f read {} lines, first gap after {:?}",
        numbers.len(),
        numbers.windows(2).find(|w| w[1] != w[0] + 1)
    );

    // The next check leaves at most 3 files: the one written, the newest rotated one plain,
    // older ones compressed.
    std::thread::sleep(Duration::from_millis(2500));
    let log_dir = read_dir(&setup.agent.node_dir.join("logs"))
        .into_iter()
        .find(|p| p.to_string_lossy().contains("_writer_"))
        .expect("the writer's log directory")
        .join("c");
    let found = files(&log_dir);
    let total: u64 = found.iter().map(|(_, s)| s).sum();
    eprintln!("after ~2.4 MiB written: {found:?}, {total} bytes");
    assert!(found.len() <= MAX_FILES, "{found:?}");
    assert!(found.iter().any(|(n, _)| n.ends_with(".gz")), "{found:?}");
    // What one check period lets a writer add on top of the size, at this writer's pace.
    let bound = MAX_FILES as u64 * (MAX_SIZE + (400 << 10));
    assert!(total <= bound, "{total} > {bound}: {found:?}");
    // The last lines are in the plain files (the one written or the newest rotated one):
    // compression never touches a file a reader may still be in.
    let plain: String = found
        .iter()
        .filter(|(n, _)| !n.ends_with(".gz"))
        .map(|(n, _)| std::fs::read_to_string(log_dir.join(n)).unwrap_or_default())
        .collect();
    assert!(plain.contains(" F end-of-writing\n"), "{found:?}");
}
