//! The node agent joining (docs/agent.md): against a single server and a 3-server cluster with
//! the join token from `<data-dir>/join-token`; the Node it registers (labels, taints,
//! addresses, capacity and allocatable, conditions, nodeInfo, podCIDR read back) and its Lease
//! renewed; a restart that needs no token; bad tokens refused with a clear error and a
//! non-zero exit; a re-join under the same name from a new node directory; what the agent
//! tells systemd (`READY=1` once the Node is Ready, `STATUS=` with the server in use,
//! `STOPPING=1`).

mod agent_support;
mod cluster_support;
mod support;

use std::os::unix::fs::PermissionsExt;
use std::time::{Duration, Instant};

use agent_support::{condition, kubectl, lease, node, wait_node, Agent, KUBECTLS};
use cluster_support::Cluster;
use support::{runtime, Server};

fn join_token(data_dir: &std::path::Path) -> String {
    std::fs::read_to_string(data_dir.join("join-token"))
        .expect("every server writes join-token")
        .trim()
        .to_string()
}

fn mode(path: &std::path::Path) -> u32 {
    std::fs::metadata(path).expect("stat").permissions().mode() & 0o777
}

#[test]
fn joins_a_single_server_and_registers_its_node() {
    let server = Server::start(&[]);
    let token = join_token(&server.data_dir);
    assert!(token.starts_with("K10"), "{token}");
    assert_eq!(mode(&server.data_dir.join("join-token")), 0o600);
    let url = format!("https://{}", server.addr);
    let mut agent = Agent::new(
        "worker-1",
        &url,
        Some(&token),
        &[
            "--node-label",
            "tier=web",
            "--node-taint",
            "dedicated=gpu:NoSchedule",
            "--system-reserved",
            "cpu=500m,memory=256Mi",
            "--node-lease-duration-seconds",
            "2",
        ],
    );
    let started = Instant::now();
    agent.start();
    println!("join + registration: {:?}", started.elapsed());
    let rt = runtime();
    let api = server.api();
    rt.block_on(async {
        let node = wait_node(&api, "worker-1", Duration::from_secs(30), |n| {
            n["spec"]["podCIDR"].is_string()
        })
        .await;
        let labels = &node["metadata"]["labels"];
        assert_eq!(labels["kubernetes.io/hostname"], "worker-1");
        assert_eq!(labels["kubernetes.io/os"], "linux");
        assert!(labels["kubernetes.io/arch"].is_string());
        assert_eq!(labels["tier"], "web");
        assert!(
            labels
                .as_object()
                .unwrap()
                .keys()
                .all(|k| !k.starts_with("node-role.kubernetes.io/")),
            "no role label"
        );
        assert_eq!(
            node["spec"]["taints"],
            serde_json::json!([{"key": "dedicated", "value": "gpu", "effect": "NoSchedule"}])
        );
        assert!(node["spec"]["podCIDR"]
            .as_str()
            .unwrap()
            .starts_with("10.42."));
        let status = &node["status"];
        assert_eq!(
            status["addresses"],
            serde_json::json!([
                {"type": "InternalIP", "address": "127.0.0.1"},
                {"type": "Hostname", "address": "worker-1"},
            ])
        );
        assert_eq!(status["capacity"]["pods"], "110");
        let cpus = std::thread::available_parallelism().unwrap().get();
        assert_eq!(status["capacity"]["cpu"], cpus.to_string());
        assert_eq!(
            status["allocatable"]["cpu"],
            format!("{}m", cpus * 1000 - 500)
        );
        for field in ["memory", "ephemeral-storage"] {
            assert!(status["capacity"][field].is_string(), "{field}");
            assert!(status["allocatable"][field].is_string(), "{field}");
        }
        for (kind, want, reason) in [
            ("MemoryPressure", "False", "KubeletHasSufficientMemory"),
            ("DiskPressure", "False", "KubeletHasNoDiskPressure"),
            ("PIDPressure", "False", "KubeletHasSufficientPID"),
            ("Ready", "True", "KubeletReady"),
        ] {
            assert_eq!(condition(&node, kind), Some(want), "{kind}");
            let c = status["conditions"]
                .as_array()
                .unwrap()
                .iter()
                .find(|c| c["type"] == kind)
                .unwrap();
            assert_eq!(c["reason"], reason);
        }
        // Test agents run with their node port off (`--kubelet-port 0`, tests/agent_support), which
        // the Node advertises as 0; tests/agent_node_api checks a port in use.
        assert_eq!(status["daemonEndpoints"]["kubeletEndpoint"]["Port"], 0);
        let version = api.get("/version").await.unwrap().json();
        let info = &status["nodeInfo"];
        assert_eq!(info["kubeletVersion"], version["gitVersion"]);
        assert_eq!(info["operatingSystem"], "linux");
        for field in [
            "kernelVersion",
            "osImage",
            "bootID",
            "containerRuntimeVersion",
        ] {
            assert!(
                !info[field].as_str().unwrap_or("").is_empty(),
                "nodeInfo.{field}"
            );
        }

        // The Lease: held by the node, owned by the Node, renewed every quarter of 2 s.
        let first = lease(&api, "worker-1").await.expect("node lease");
        assert_eq!(first["spec"]["holderIdentity"], "worker-1");
        assert_eq!(first["spec"]["leaseDurationSeconds"], 2);
        assert_eq!(
            first["metadata"]["ownerReferences"][0]["uid"],
            node["metadata"]["uid"]
        );
        let t0 = first["spec"]["renewTime"].as_str().unwrap().to_string();
        tokio::time::sleep(Duration::from_millis(1500)).await;
        let later = lease(&api, "worker-1").await.unwrap();
        let t1 = later["spec"]["renewTime"].as_str().unwrap().to_string();
        assert!(t1 > t0, "renewed: {t0} -> {t1}");
    });

    // The node directory: owner-only credentials and the remembered servers.
    let creds = agent.credentials();
    assert_eq!(mode(&agent.node_dir), 0o700);
    assert_eq!(mode(&creds), 0o700);
    for file in ["ca.crt", "node.crt", "node.key"] {
        assert_eq!(mode(&creds.join(file)), 0o600, "{file}");
    }
    let servers: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(agent.node_dir.join("servers.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(
        servers["servers"],
        serde_json::json!([server.addr.to_string()])
    );

    // kubectl with the node's own certificate.
    let kubeconfig = agent.kubeconfig(&url);
    for kubectl_bin in KUBECTLS {
        let out = kubectl(kubectl_bin, &kubeconfig, &["get", "node", "worker-1"]);
        assert!(
            out.status.success(),
            "{kubectl_bin}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    // A restart needs no token: the stored credential is used, the same Node kept.
    let uid = rt.block_on(node(&api, "worker-1")).unwrap()["metadata"]["uid"].clone();
    assert_eq!(agent.terminate().map(|s| s.success()), Some(true));
    agent.token = None;
    agent.start();
    assert!(
        !agent.last_log().contains("joining:"),
        "{}",
        agent.last_log()
    );
    let again = rt.block_on(node(&api, "worker-1")).unwrap();
    assert_eq!(again["metadata"]["uid"], uid);
}

#[test]
fn bad_tokens_are_refused_with_a_clear_error() {
    let server = Server::start(&[]);
    let token = join_token(&server.data_dir);
    let url = format!("https://{}", server.addr);
    let (hash, secret) = token
        .strip_prefix("K10")
        .unwrap()
        .split_once("::server:")
        .unwrap();
    let wrong_hash = format!("K10{}::server:{secret}", "0".repeat(hash.len()));
    let wrong_secret = format!("K10{hash}::server:{}", "x".repeat(32));
    for (token, want) in [
        (
            Some(wrong_hash.as_str()),
            "refusing it (wrong server or wrong token)",
        ),
        (
            Some(wrong_secret.as_str()),
            "refused the join token's secret",
        ),
        (Some("K10abc"), "LITEK8S_TOKEN"),
        (Some("just-a-secret-without-the-hash"), "full join token"),
        (None, "no join token is given"),
    ] {
        let mut agent = Agent::new("n1", &url, token, &[]);
        let (status, log) = agent.run_to_exit(Duration::from_secs(30));
        assert!(!status.success(), "{token:?} must fail: {log}");
        let last = log.lines().last().unwrap_or("");
        assert!(
            last.starts_with("litek8s-agent: ") && last.contains(want),
            "{token:?}: the last line names the problem ({want:?}):\n{log}"
        );
        assert!(
            !agent.credentials().join("node.key").exists(),
            "nothing is stored"
        );
    }
    // Nothing was registered.
    let rt = runtime();
    assert!(rt.block_on(node(&server.api(), "n1")).is_none());
}

#[test]
fn rejoining_from_a_new_node_dir_gets_a_new_certificate() {
    let server = Server::start(&[]);
    let token = join_token(&server.data_dir);
    let url = format!("https://{}", server.addr);
    let mut first = Agent::new("n1", &url, Some(&token), &[]);
    first.start();
    first.terminate();
    let rt = runtime();
    let uid = rt.block_on(node(&server.api(), "n1")).unwrap()["metadata"]["uid"].clone();
    let mut second = Agent::new("n1", &url, Some(&token), &[]);
    second.start();
    let read = |a: &Agent| std::fs::read_to_string(a.credentials().join("node.crt")).unwrap();
    assert_ne!(read(&first), read(&second), "a new certificate");
    let key = |a: &Agent| std::fs::read_to_string(a.credentials().join("node.key")).unwrap();
    assert_ne!(key(&first), key(&second), "for a new key");
    // The Node is the same object, brought up to date by the new agent.
    let node_now = rt.block_on(node(&server.api(), "n1")).unwrap();
    assert_eq!(node_now["metadata"]["uid"], uid);
    assert!(
        second.last_log().contains("the Node exists"),
        "{}",
        second.last_log()
    );
    // Nothing revokes the old certificate: it works until it expires (docs/agent.md).
    let out = kubectl(KUBECTLS[1], &first.kubeconfig(&url), &["get", "node", "n1"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn joins_a_three_server_cluster_through_a_follower() {
    let mut cluster = Cluster::start(3);
    let rt = runtime();
    let leader = rt.block_on(cluster.wait_leader());
    let follower = (0..3).find(|&i| i != leader).unwrap();
    let token = cluster.token();
    for i in 0..3 {
        assert_eq!(
            join_token(&cluster.members[i].data_dir),
            token,
            "every member writes the same join token"
        );
    }
    let mut agent = Agent::new(
        "n1",
        &cluster.url(follower),
        Some(&token),
        &["--node-lease-duration-seconds", "2"],
    );
    agent.start();
    // The join answer listed every member, remembered in servers.json.
    let saved: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(agent.node_dir.join("servers.json")).unwrap(),
    )
    .unwrap();
    let mut listed: Vec<String> = saved["servers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s.as_str().unwrap().to_string())
        .collect();
    listed.sort();
    let mut members: Vec<String> = cluster.members.iter().map(|m| m.api.to_string()).collect();
    members.sort();
    assert_eq!(listed, members);
    rt.block_on(async {
        for i in 0..3 {
            let api = cluster.api(i);
            let n = wait_node(&api, "n1", Duration::from_secs(30), |n| {
                condition(n, "Ready") == Some("True") && n["spec"]["podCIDR"].is_string()
            })
            .await;
            assert_eq!(n["metadata"]["labels"]["kubernetes.io/hostname"], "n1");
        }
        let api = cluster.api(leader);
        let t0 = lease(&api, "n1").await.unwrap()["spec"]["renewTime"].clone();
        tokio::time::sleep(Duration::from_millis(1500)).await;
        let t1 = lease(&api, "n1").await.unwrap()["spec"]["renewTime"].clone();
        assert_ne!(t0, t1, "the Lease is renewed through the cluster");
    });
    // The node's certificate works against every member, writes through a follower too, and
    // the leader authorizes them as the node (the default `system:node` role).
    let kubeconfig = agent.kubeconfig(&cluster.url(follower));
    let out = kubectl(
        KUBECTLS[1],
        &kubeconfig,
        &["label", "node", "n1", "written-through=follower"],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = kubectl(
        KUBECTLS[1],
        &kubeconfig,
        &["create", "configmap", "from-a-node", "-n", "default"],
    );
    assert!(
        String::from_utf8_lossy(&out.stderr).contains(
            r#"configmaps is forbidden: User "system:node:n1" cannot create resource "configmaps" in API group "" in the namespace "default""#
        ),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn the_agent_tells_systemd_when_its_node_is_ready() {
    use std::os::unix::net::UnixDatagram;
    let server = Server::start(&[]);
    let token = join_token(&server.data_dir);
    let url = format!("https://{}", server.addr);
    let mut agent = Agent::new("n1", &url, Some(&token), &[]);
    let socket_path = agent.root.join("notify.sock");
    let socket = UnixDatagram::bind(&socket_path).unwrap();
    socket
        .set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    let mut cmd = agent.command();
    cmd.env("NOTIFY_SOCKET", &socket_path);
    agent.spawn_with(cmd);
    let mut lines = Vec::new();
    let mut buf = [0u8; 4096];
    while !lines.iter().any(|l: &String| l == "READY=1") {
        let n = socket
            .recv(&mut buf)
            .unwrap_or_else(|e| panic!("no READY=1 ({e}); got {lines:?}\n{}", agent.logs()));
        lines.extend(
            String::from_utf8_lossy(&buf[..n])
                .lines()
                .map(str::to_string),
        );
    }
    let status = lines
        .iter()
        .rev()
        .find(|l| l.starts_with("STATUS="))
        .unwrap();
    assert_eq!(
        status,
        &format!(
            "STATUS=node n1 Ready; server {}; 0 pods running",
            server.addr
        )
    );
    assert!(
        lines.iter().any(|l| l == "STATUS=registering node n1"),
        "{lines:?}"
    );
    // The Node is Ready when READY=1 arrives.
    let rt = runtime();
    let n = rt.block_on(node(&server.api(), "n1")).unwrap();
    assert_eq!(condition(&n, "Ready"), Some("True"));
    assert_eq!(agent.terminate().map(|s| s.success()), Some(true));
    let mut rest = Vec::new();
    socket
        .set_read_timeout(Some(Duration::from_millis(500)))
        .unwrap();
    while let Ok(n) = socket.recv(&mut buf) {
        rest.push(String::from_utf8_lossy(&buf[..n]).into_owned());
    }
    assert!(rest.iter().any(|m| m.contains("STOPPING=1")), "{rest:?}");
}
