//! The Service proxy's rules in a real kernel: a scratch "node" network namespace with a
//! bridge of "pods" (namespaces on veth pairs serving busybox httpd) and an outside client on
//! a second link, the rules applied there by the agent's own sync code (`nft -f -` inside the
//! namespace). Everything is in namespaces named after the process id, removed on drop.
//!
//! Needs root, `nft`, `ip` and `busybox`; with `LITEK8S_SKIP_NETNS=1` a machine without them
//! skips instead of failing.

use std::net::Ipv4Addr;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use litek8s::agent::proxy::model::{Cidr, Node, Service, Slice, Snapshot};
use litek8s::agent::proxy::{self, ruleset, SyncSettings, Syncer, Tools};
use serde_json::{json, Value};

const SKIP_ENV: &str = "LITEK8S_SKIP_NETNS";

fn on_path(tool: &str) -> bool {
    std::env::var_os("PATH")
        .is_some_and(|p| std::env::split_paths(&p).any(|d| d.join(tool).is_file()))
}

/// `true` when the test cannot run here and may be skipped.
fn skipped() -> bool {
    let missing: Vec<&str> = ["nft", "ip", "busybox"]
        .into_iter()
        .filter(|t| !on_path(t))
        .chain((!nix::unistd::geteuid().is_root()).then_some("root"))
        .collect();
    if missing.is_empty() {
        return false;
    }
    if std::env::var(SKIP_ENV).as_deref() == Ok("1") {
        eprintln!("skipping: missing {}", missing.join(", "));
        return true;
    }
    panic!("missing {} (set {SKIP_ENV}=1 to skip)", missing.join(", "));
}

fn run(args: &[&str]) -> Result<String, String> {
    let out = Command::new(args[0])
        .args(&args[1..])
        .output()
        .map_err(|e| format!("{}: {e}", args.join(" ")))?;
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        Err(format!(
            "{}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

fn must(args: &[&str]) -> String {
    run(args).unwrap_or_else(|e| panic!("{e}"))
}

/// A node namespace `<tag>-n` with bridge `br0` (10.42.0.1/24) and link `ext0`
/// (192.168.77.1/24) to the outside client `<tag>-x` (192.168.77.2); pods `<tag>-pK` at
/// 10.42.0.K+1 serving `cgi-bin/ip` (their name and the client address they saw).
struct Lab {
    tag: String,
    namespaces: Vec<String>,
    servers: Vec<Child>,
    dir: PathBuf,
}

impl Lab {
    fn new(test: &str, pods: usize) -> Lab {
        let tag = format!("lkx{}{test}", std::process::id());
        let dir = std::env::temp_dir().join(&tag);
        let mut lab = Lab {
            tag: tag.clone(),
            namespaces: Vec::new(),
            servers: Vec::new(),
            dir,
        };
        let node = lab.ns("n");
        let outside = lab.ns("x");
        must(&["ip", "-n", &node, "link", "set", "lo", "up"]);
        must(&[
            "ip",
            "netns",
            "exec",
            &node,
            "sysctl",
            "-qw",
            "net.ipv4.ip_forward=1",
        ]);
        must(&[
            "ip",
            "netns",
            "exec",
            &node,
            "sysctl",
            "-qw",
            "net.bridge.bridge-nf-call-iptables=1",
        ]);
        must(&["ip", "-n", &node, "link", "add", "br0", "type", "bridge"]);
        must(&[
            "ip",
            "-n",
            &node,
            "addr",
            "add",
            "10.42.0.1/24",
            "dev",
            "br0",
        ]);
        must(&["ip", "-n", &node, "link", "set", "br0", "up"]);
        must(&[
            "ip", "-n", &node, "link", "add", "ext0", "type", "veth", "peer", "name", "eth0",
            "netns", &outside,
        ]);
        must(&[
            "ip",
            "-n",
            &node,
            "addr",
            "add",
            "192.168.77.1/24",
            "dev",
            "ext0",
        ]);
        must(&["ip", "-n", &node, "link", "set", "ext0", "up"]);
        // A node has a default route: without one, traffic to a ClusterIP the rules do not
        // catch is refused by routing before any filter sees it.
        must(&[
            "ip",
            "-n",
            &node,
            "route",
            "add",
            "default",
            "via",
            "192.168.77.2",
        ]);
        must(&[
            "ip",
            "-n",
            &outside,
            "addr",
            "add",
            "192.168.77.2/24",
            "dev",
            "eth0",
        ]);
        must(&["ip", "-n", &outside, "link", "set", "eth0", "up"]);
        must(&["ip", "-n", &outside, "link", "set", "lo", "up"]);
        must(&[
            "ip",
            "-n",
            &outside,
            "route",
            "add",
            "default",
            "via",
            "192.168.77.1",
        ]);
        for k in 1..=pods {
            lab.pod(k);
        }
        lab
    }

    fn ns(&mut self, suffix: &str) -> String {
        let name = format!("{}-{suffix}", self.tag);
        let _ = run(&["ip", "netns", "del", &name]);
        must(&["ip", "netns", "add", &name]);
        self.namespaces.push(name.clone());
        name
    }

    fn name(&self, suffix: &str) -> String {
        format!("{}-{suffix}", self.tag)
    }

    fn pod(&mut self, k: usize) {
        let node = self.name("n");
        let pod = self.ns(&format!("p{k}"));
        let host_end = format!("v{k}");
        let addr = format!("10.42.0.{}/24", k + 1);
        must(&[
            "ip", "-n", &node, "link", "add", &host_end, "type", "veth", "peer", "name", "eth0",
            "netns", &pod,
        ]);
        must(&["ip", "-n", &node, "link", "set", &host_end, "master", "br0"]);
        must(&[
            "ip",
            "-n",
            &node,
            "link",
            "set",
            &host_end,
            "type",
            "bridge_slave",
            "hairpin",
            "on",
        ]);
        must(&["ip", "-n", &node, "link", "set", &host_end, "up"]);
        must(&["ip", "-n", &pod, "addr", "add", &addr, "dev", "eth0"]);
        must(&["ip", "-n", &pod, "link", "set", "eth0", "up"]);
        must(&["ip", "-n", &pod, "link", "set", "lo", "up"]);
        must(&[
            "ip",
            "-n",
            &pod,
            "route",
            "add",
            "default",
            "via",
            "10.42.0.1",
        ]);
        let root = self.dir.join(format!("p{k}"));
        let cgi = root.join("cgi-bin");
        std::fs::create_dir_all(&cgi).expect("the pod's web root");
        let script = cgi.join("ip");
        std::fs::write(
            &script,
            format!("#!/bin/sh\necho 'Content-Type: text/plain'\necho\na=${{REMOTE_ADDR##*:}}\necho \"p{k} ${{a%]}}\"\n"),
        )
        .expect("the cgi script");
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).expect("chmod");
        let root = root.to_string_lossy().into_owned();
        let child = Command::new("ip")
            .args([
                "netns", "exec", &pod, "busybox", "httpd", "-f", "-p", "8080", "-h", &root,
            ])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("busybox httpd");
        self.servers.push(child);
    }

    /// `GET url` from namespace `suffix`: the body, or the client's error.
    fn get(&self, suffix: &str, url: &str) -> Result<String, String> {
        run(&[
            "ip",
            "netns",
            "exec",
            &self.name(suffix),
            "timeout",
            "3",
            "busybox",
            "wget",
            "-q",
            "-O",
            "-",
            url,
        ])
        .map(|s| s.trim().to_string())
    }

    /// Waits until every pod answers on its own address.
    fn wait_for_pods(&self, pods: usize) {
        for k in 1..=pods {
            let url = format!("http://10.42.0.{}:8080/cgi-bin/ip", k + 1);
            let deadline = Instant::now() + Duration::from_secs(10);
            while self.get("n", &url).is_err() {
                assert!(Instant::now() < deadline, "pod {k} never served");
                std::thread::sleep(Duration::from_millis(100));
            }
        }
    }

    fn tools(&self) -> Tools {
        Tools::in_netns(&self.name("n"))
    }
}

impl Drop for Lab {
    fn drop(&mut self) {
        for child in &mut self.servers {
            let _ = child.kill();
            let _ = child.wait();
        }
        for ns in self.namespaces.iter().rev() {
            let _ = run(&["ip", "netns", "del", ns]);
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn service(name: &str, spec: Value) -> Value {
    json!({"metadata": {"namespace": "default", "name": name}, "spec": spec})
}

/// A slice of `svc` on port `http` 8080 with the pods `(k, node)` ready.
fn slice(svc: &str, pods: &[(usize, &str)]) -> Value {
    let endpoints: Vec<Value> = pods
        .iter()
        .map(|(k, node)| {
            json!({"addresses": [format!("10.42.0.{}", k + 1)], "nodeName": node,
                   "conditions": {"ready": true}})
        })
        .collect();
    json!({
        "metadata": {"namespace": "default", "name": format!("{svc}-1"),
                     "labels": {"kubernetes.io/service-name": svc}},
        "addressType": "IPv4",
        "ports": [{"name": "http", "port": 8080, "protocol": "TCP"}],
        "endpoints": endpoints,
    })
}

fn snapshot(services: &[Value], slices: &[Value], nodes: &[Node]) -> Snapshot {
    let mut s = Snapshot::default();
    let mut w = Vec::new();
    for o in services {
        let svc = Service::from_json(o, &mut w).expect("service");
        s.services.insert(svc.key.clone(), svc);
    }
    for o in slices {
        let sl = Slice::from_json(o, &mut w).expect("slice");
        s.slices.insert(sl.key.clone(), sl);
    }
    for n in nodes {
        s.nodes.insert(n.name.clone(), n.clone());
    }
    s
}

fn local_node() -> Node {
    Node {
        name: "n1".into(),
        pod_cidr: Cidr::parse("10.42.0.0/24"),
        internal_ip: Some(Ipv4Addr::new(192, 168, 77, 1)),
    }
}

fn settings() -> SyncSettings {
    let mut s = SyncSettings::new(
        "n1",
        Cidr::parse("10.42.0.0/16").expect("cidr"),
        Some(Ipv4Addr::new(10, 43, 0, 10)),
    );
    s.min_interval = Duration::from_millis(10);
    s
}

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime")
}

/// The Services of the main test: `web` (ClusterIP 10.43.0.20:80, NodePort 30080) over
/// `web_pods`, `sticky` (ClientIP affinity) over pods 1 and 2, `local` (NodePort 30081,
/// externalTrafficPolicy Local) over pod 1 on this node and pod 2 "elsewhere", `empty` with no
/// endpoints, `self` over pod 1 alone (hairpin).
fn world(web_pods: &[(usize, &str)], nodes: &[Node]) -> Snapshot {
    snapshot(
        &[
            service(
                "web",
                json!({"clusterIP": "10.43.0.20", "type": "NodePort",
                       "ports": [{"name": "http", "port": 80, "nodePort": 30080}]}),
            ),
            service(
                "sticky",
                json!({"clusterIP": "10.43.0.21", "sessionAffinity": "ClientIP",
                       "ports": [{"name": "http", "port": 80}]}),
            ),
            service(
                "local",
                json!({"clusterIP": "10.43.0.22", "type": "NodePort",
                       "externalTrafficPolicy": "Local",
                       "ports": [{"name": "http", "port": 80, "nodePort": 30081}]}),
            ),
            service(
                "empty",
                json!({"clusterIP": "10.43.0.23", "ports": [{"name": "http", "port": 80}]}),
            ),
            service(
                "self",
                json!({"clusterIP": "10.43.0.24", "ports": [{"name": "http", "port": 80}]}),
            ),
        ],
        &[
            slice("web", web_pods),
            slice("sticky", &[(1, "n1"), (2, "n1")]),
            slice("local", &[(1, "n1"), (2, "n2")]),
            slice("self", &[(1, "n1")]),
        ],
        nodes,
    )
}

/// Which pods answered `n` requests for `url` from `from`.
fn answers(lab: &Lab, from: &str, url: &str, n: usize) -> Vec<String> {
    (0..n)
        .map(|_| {
            lab.get(from, url)
                .unwrap_or_else(|e| panic!("GET {url}: {e}"))
        })
        .collect()
}

#[test]
fn services_work_through_the_applied_rules() {
    if skipped() {
        return;
    }
    let lab = Lab::new("s", 3);
    lab.wait_for_pods(3);
    let tools = lab.tools();
    let other = Node {
        name: "n2".into(),
        pod_cidr: Cidr::parse("10.42.1.0/24"),
        internal_ip: Some(Ipv4Addr::new(192, 168, 77, 2)),
    };
    let nodes = [local_node(), other.clone()];
    let rt = rt();
    let mut syncer = Syncer::new(tools.clone(), settings());
    rt.block_on(syncer.sync(&world(&[(1, "n1"), (2, "n1")], &nodes)))
        .expect("the first sync");

    // ClusterIP from a pod on the same bridge: both backends answer.
    let seen = answers(&lab, "p3", "http://10.43.0.20/cgi-bin/ip", 24);
    let p1 = seen.iter().filter(|a| a.starts_with("p1 ")).count();
    let p2 = seen.iter().filter(|a| a.starts_with("p2 ")).count();
    assert!(p1 > 0 && p2 > 0 && p1 + p2 == 24, "{seen:?}");
    // Pod to pod through a Service keeps the client's address.
    assert!(seen.iter().all(|a| a.ends_with(" 10.42.0.4")), "{seen:?}");

    // NodePort on the node's address from outside: masqueraded under the Cluster policy.
    let outside = answers(&lab, "x", "http://192.168.77.1:30080/cgi-bin/ip", 4);
    assert!(
        outside.iter().all(|a| !a.ends_with(" 192.168.77.2")),
        "{outside:?}"
    );

    // externalTrafficPolicy Local: only this node's endpoint, the client's address kept.
    let local = answers(&lab, "x", "http://192.168.77.1:30081/cgi-bin/ip", 6);
    assert!(local.iter().all(|a| a == "p1 192.168.77.2"), "{local:?}");

    // No endpoints: refused at once, not a timeout.
    let started = Instant::now();
    let refused = lab
        .get("p3", "http://10.43.0.23/")
        .expect_err("no endpoints");
    assert!(started.elapsed() < Duration::from_secs(2), "{refused}");
    assert!(refused.contains("refused"), "{refused}");

    // Session affinity: one client sticks to one backend.
    let sticky = answers(&lab, "p3", "http://10.43.0.21/cgi-bin/ip", 10);
    assert!(sticky.iter().all(|a| *a == sticky[0]), "{sticky:?}");

    // Hairpin: a pod reaches itself through its Service.
    let hairpin = lab
        .get("p1", "http://10.43.0.24/cgi-bin/ip")
        .expect("hairpin");
    assert!(hairpin.starts_with("p1 "), "{hairpin}");

    // A route to the other node's pods.
    let routes = must(&["ip", "-n", &lab.name("n"), "route", "show", "proto", "147"]);
    assert!(routes.contains("10.42.1.0/24 via 192.168.77.2"), "{routes}");

    // An endpoint removed: after one sync no request reaches it.
    rt.block_on(syncer.sync(&world(&[(1, "n1")], &[local_node()])))
        .expect("the second sync");
    let after = answers(&lab, "p3", "http://10.43.0.20/cgi-bin/ip", 12);
    assert!(after.iter().all(|a| a.starts_with("p1 ")), "{after:?}");
    let routes = must(&["ip", "-n", &lab.name("n"), "route", "show", "proto", "147"]);
    assert!(routes.trim().is_empty(), "{routes}");

    // A restarted agent (nothing known of the table) replaces it while clients keep going:
    // no request fails, and the affinity entries survive.
    let stop = Arc::new(AtomicBool::new(false));
    let failures = Arc::new(AtomicUsize::new(0));
    let done = Arc::new(AtomicUsize::new(0));
    let client = {
        let (stop, failures, done) = (stop.clone(), failures.clone(), done.clone());
        let ns = lab.name("p3");
        std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                let ok = run(&[
                    "ip",
                    "netns",
                    "exec",
                    &ns,
                    "timeout",
                    "3",
                    "busybox",
                    "wget",
                    "-q",
                    "-O",
                    "-",
                    "http://10.43.0.20/cgi-bin/ip",
                ])
                .is_ok();
                if !ok {
                    failures.fetch_add(1, Ordering::Relaxed);
                }
                done.fetch_add(1, Ordering::Relaxed);
            }
        })
    };
    for _ in 0..10 {
        let mut restarted = Syncer::new(tools.clone(), settings());
        rt.block_on(restarted.sync(&world(&[(1, "n1")], &[local_node()])))
            .expect("a restarted sync");
    }
    while done.load(Ordering::Relaxed) < 20 {
        std::thread::sleep(Duration::from_millis(20));
    }
    stop.store(true, Ordering::Relaxed);
    client.join().expect("the client");
    assert_eq!(failures.load(Ordering::Relaxed), 0);
    let again = answers(&lab, "p3", "http://10.43.0.21/cgi-bin/ip", 3);
    assert!(
        again.iter().all(|a| *a == sticky[0]),
        "{again:?} vs {}",
        sticky[0]
    );

    // Cleanup removes the table and the routes.
    rt.block_on(syncer.sync(&world(&[(1, "n1")], &nodes)))
        .expect("a sync with routes");
    let (table, routes) = rt.block_on(proxy::cleanup(&tools)).expect("cleanup");
    assert!(table);
    assert_eq!(routes, 1);
    let listing = run(&[
        "ip",
        "netns",
        "exec",
        &lab.name("n"),
        "nft",
        "list",
        "ruleset",
    ])
    .expect("nft list");
    assert!(!listing.contains("litek8s"), "{listing}");
    let (table, _) = rt
        .block_on(proxy::cleanup(&tools))
        .expect("a second cleanup");
    assert!(!table, "nothing left to remove");
}

/// 1,000 Services of 10 endpoints each (a quarter NodePorts, a tenth with affinity): the
/// kernel takes the generated transaction, twice in a row (the second one replacing the
/// first), and the times are printed for bench/NET.md.
#[test]
fn a_thousand_services_are_accepted_by_the_kernel() {
    if skipped() {
        return;
    }
    let mut lab = Lab::new("k", 0);
    let _ = &mut lab;
    let tools = lab.tools();
    let snapshot = big_snapshot(1000, 10);
    let mut syncer = Syncer::new(tools.clone(), settings());
    let rt = rt();
    let config = settings().ruleset_config(&snapshot);
    let rules = ruleset::render(&snapshot, &config);
    assert!(rules.warnings.is_empty(), "{:?}", rules.warnings);
    let check = ruleset::transaction(&rules, &ruleset::Existing::default());
    rt.block_on(tools.nft_apply(&check, true)).expect("nft -c");
    if let Some(path) = std::env::var_os("LITEK8S_PROXY_DUMP") {
        std::fs::write(path, &check).expect("the dump");
    }
    for round in 0..3 {
        let started = Instant::now();
        let report = rt.block_on(syncer.sync(&snapshot)).expect("a sync");
        eprintln!(
            "sync {round}: {} service ports, {} endpoints: generate {:?}, nft {:?}, total {:?}",
            report.ruleset.service_ports,
            report.ruleset.endpoints,
            report.generate,
            report.apply,
            started.elapsed()
        );
        assert_eq!(report.ruleset.endpoints, 10_000);
    }
    let listing = must(&[
        "ip",
        "netns",
        "exec",
        &lab.name("n"),
        "nft",
        "-t",
        "list",
        "table",
        "inet",
        "litek8s",
    ]);
    // A chain per Service port; chains per endpoint only for the tenth with session affinity.
    assert_eq!(listing.matches("chain svc-").count(), 1_000);
    assert_eq!(listing.matches("chain ep-").count(), 1_000);
}

fn big_snapshot(services: usize, endpoints: usize) -> Snapshot {
    let mut svcs = Vec::new();
    let mut slices = Vec::new();
    for i in 0..services {
        let name = format!("svc{i}");
        let mut spec = json!({
            "clusterIP": format!("10.43.{}.{}", i / 250, i % 250 + 1),
            "ports": [{"name": "http", "port": 80}],
        });
        if i % 4 == 0 {
            spec["type"] = json!("NodePort");
            spec["ports"][0]["nodePort"] = json!(30000 + i);
        }
        if i % 10 == 0 {
            spec["sessionAffinity"] = json!("ClientIP");
        }
        svcs.push(service(&name, spec));
        let eps: Vec<Value> = (0..endpoints)
            .map(|e| {
                let n = i * endpoints + e;
                json!({"addresses": [format!("10.42.{}.{}", n / 250, n % 250 + 1)],
                       "nodeName": if e % 2 == 0 { "n1" } else { "n2" },
                       "conditions": {"ready": true}})
            })
            .collect();
        slices.push(json!({
            "metadata": {"namespace": "default", "name": format!("{name}-1"),
                         "labels": {"kubernetes.io/service-name": name}},
            "addressType": "IPv4",
            "ports": [{"name": "http", "port": 8080, "protocol": "TCP"}],
            "endpoints": eps,
        }));
    }
    snapshot(&svcs, &slices, &[local_node()])
}

/// A Service with 65,535 ports is proxied on its first ports only, with one warning, and the
/// kernel takes the result.
#[test]
fn a_service_with_every_port_is_bounded() {
    if skipped() {
        return;
    }
    let lab = Lab::new("b", 0);
    let ports: Vec<Value> = (1..=65_535u32)
        .map(|p| json!({"name": format!("p{p}"), "port": p}))
        .collect();
    let snapshot = snapshot(
        &[service(
            "big",
            json!({"clusterIP": "10.43.0.99", "ports": ports}),
        )],
        &[],
        &[local_node()],
    );
    let mut syncer = Syncer::new(lab.tools(), settings());
    let report = rt().block_on(syncer.sync(&snapshot)).expect("a sync");
    assert_eq!(
        report.ruleset.service_ports,
        litek8s::agent::proxy::model::MAX_SERVICE_PORTS
    );
}

/// The CPU the latency client and server run on (`taskset`).
const LATENCY_CPU: usize = 1;

/// A plain TCP server answering each connection with a fixed HTTP response (no fork per
/// connection, unlike busybox httpd, so the network path is a visible part of the time).
const LATENCY_SERVER: &str = r#"
import socket, threading
answer = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"
def serve(c):
    # One answer per request read, until the client closes (HTTP/1.1 keep-alive).
    while c.recv(4096):
        c.sendall(answer)
    c.close()
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("0.0.0.0", 9090))
s.listen(1024)
while True:
    c, _ = s.accept()
    c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    threading.Thread(target=serve, args=(c,), daemon=True).start()
"#;

/// Alternates requests to the pod's address and to the ClusterIP, `N` of each per round and
/// mode, and prints each round's percentiles: on new connections (connect, request, answer,
/// close) and on one kept connection per address.
const LATENCY_CLIENT: &str = r#"
import socket, sys, time
n = int(sys.argv[1])
targets = [("pod-ip", ("10.42.0.2", 9090)), ("cluster-ip", ("10.43.200.30", 80))]
request = b"GET / HTTP/1.1\r\nHost: x\r\n\r\n"
def fresh(addr):
    # A new connection: the first packet goes through the NAT rules.
    t = time.perf_counter()
    c = socket.create_connection(addr, timeout=3)
    c.sendall(request)
    c.recv(4096)
    c.close()
    return time.perf_counter() - t
open_conns = {}
def reused(name, addr):
    # A request on an established connection: conntrack's fast path only.
    c = open_conns.get(name)
    if c is None:
        c = open_conns[name] = socket.create_connection(addr, timeout=3)
        c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    t = time.perf_counter()
    c.sendall(request)
    c.recv(4096)
    return time.perf_counter() - t
for r in range(3):
    for mode in ("new", "keepalive"):
        lat = {name: [] for name, _ in targets}
        for i in range(n):
            for name, addr in (targets if i % 2 == 0 else targets[::-1]):
                lat[name].append(fresh(addr) if mode == "new" else reused(name, addr))
        for name, _ in targets:
            v = sorted(lat[name])
            print(f"round {r} {mode} {name} p50 {v[n // 2] * 1e6:.1f} us p99 {v[int(n * 0.99)] * 1e6:.1f} us", flush=True)
"#;

/// The cost of the Service rules on a request from a pod to another pod's address and to a
/// ClusterIP leading to it (in a table of 1,000 other Services), on new and kept connections,
/// alternated (run by bench/net.sh; it prints and
/// asserts nothing about time).
#[test]
#[ignore = "a benchmark: bench/net.sh runs it"]
fn cluster_ip_latency_against_the_pod_address() {
    if skipped() || !on_path("python3") {
        return;
    }
    let lab = Lab::new("l", 2);
    lab.wait_for_pods(2);
    // Client and server share one CPU: every request then costs the same two task switches
    // on either path, instead of depending on where the scheduler put each connection's
    // server thread (on two CPUs the per-round medians of kept connections flipped between
    // the two addresses by tens of microseconds).
    let cpu = LATENCY_CPU.to_string();
    let mut server = Command::new("taskset")
        .args([
            "-c",
            &cpu,
            "ip",
            "netns",
            "exec",
            &lab.name("p1"),
            "python3",
            "-c",
            LATENCY_SERVER,
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("the latency server");
    // The Service measured, among the 1,000 Services x 10 endpoints of the sync benchmark.
    let mut snapshot = big_snapshot(1000, 10);
    let mut warnings = Vec::new();
    let lat = Service::from_json(
        &service(
            "lat",
            json!({"clusterIP": "10.43.200.30", "ports": [{"name": "tcp", "port": 80}]}),
        ),
        &mut warnings,
    )
    .expect("the Service");
    let lat_slice = Slice::from_json(
        &json!({
            "metadata": {"namespace": "default", "name": "lat-1",
                         "labels": {"kubernetes.io/service-name": "lat"}},
            "addressType": "IPv4",
            "ports": [{"name": "tcp", "port": 9090, "protocol": "TCP"}],
            "endpoints": [{"addresses": ["10.42.0.2"], "nodeName": "n1",
                           "conditions": {"ready": true}}],
        }),
        &mut warnings,
    )
    .expect("the slice");
    snapshot.services.insert(lat.key.clone(), lat);
    snapshot.slices.insert(lat_slice.key.clone(), lat_slice);
    let mut syncer = Syncer::new(lab.tools(), settings());
    rt().block_on(syncer.sync(&snapshot)).expect("a sync");
    let deadline = Instant::now() + Duration::from_secs(10);
    // Through the ClusterIP before measuring (one byte sent, so the server does not wait).
    let probe =
        "import socket; socket.create_connection(('10.43.200.30', 80), timeout=1).sendall(b'x')";
    while run(&[
        "ip",
        "netns",
        "exec",
        &lab.name("p2"),
        "python3",
        "-c",
        probe,
    ])
    .is_err()
    {
        assert!(
            Instant::now() < deadline,
            "the latency server never answered through the ClusterIP"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let n = std::env::var("LITEK8S_LATENCY_N")
        .ok()
        .and_then(|v| v.parse::<usize>().ok())
        .unwrap_or(10_000);
    let out = must(&[
        "taskset",
        "-c",
        &cpu,
        "ip",
        "netns",
        "exec",
        &lab.name("p2"),
        "python3",
        "-c",
        LATENCY_CLIENT,
        &n.to_string(),
    ]);
    for line in out.lines() {
        eprintln!("latency {line}");
    }
    let _ = server.kill();
    let _ = server.wait();
}
