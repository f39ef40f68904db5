//! NetworkPolicy rules in a real kernel: a scratch "node" network namespace with a bridge of
//! "pods" (namespaces on veth pairs serving busybox httpd on ports 8080 and 9090) in two
//! Kubernetes namespaces, an outside client on a second link, and the policies applied there
//! by the agent's own sync code (`nft -f -` inside the namespace) next to the Service proxy's
//! table. Everything is in namespaces named after the process id, removed on drop.
//!
//! Needs root, `nft`, `ip` and `busybox`; with `LITEK8S_SKIP_NETNS=1` a machine without them
//! skips instead of failing.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use litek8s::agent::netpol::informer::Kind;
use litek8s::agent::netpol::model::Snapshot;
use litek8s::agent::netpol::{self, ruleset};
use litek8s::agent::proxy::{self, Tools};
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

/// Runs a command given as one string of words; panics when it fails.
fn must(command: &str) -> String {
    let args: Vec<&str> = command.split_whitespace().collect();
    run(&args).unwrap_or_else(|e| panic!("{e}"))
}

/// The pods: (Kubernetes namespace, name, labels); pod `k` (1-based) is 10.42.0.<k+1>.
const PODS: [(&str, &str, &str); 4] = [
    ("a", "web", "web"),
    ("a", "client", "client"),
    ("a", "other", "other"),
    ("b", "client", "client"),
];

fn pod_ip(k: usize) -> String {
    format!("10.42.0.{}", k + 1)
}

/// A node namespace `<tag>-n` with bridge `br0` (10.42.0.1/24, where the node also serves
/// ports 53 and 8081) and link `ext0` (192.168.77.1/24) to the outside client `<tag>-x`
/// (192.168.77.2); pods `<tag>-pK` as [`PODS`] says.
struct Lab {
    tag: String,
    namespaces: Vec<String>,
    servers: Vec<Child>,
    dir: PathBuf,
}

impl Lab {
    fn new(test: &str, pods: usize) -> Lab {
        let tag = format!("lkn{}{test}", std::process::id());
        let dir = std::env::temp_dir().join(&tag);
        let mut lab = Lab {
            tag: tag.clone(),
            namespaces: Vec::new(),
            servers: Vec::new(),
            dir,
        };
        let node = lab.ns("n");
        let x = lab.ns("x");
        must(&format!("ip -n {node} link set lo up"));
        must(&format!(
            "ip netns exec {node} sysctl -qw net.ipv4.ip_forward=1"
        ));
        must(&format!(
            "ip netns exec {node} sysctl -qw net.bridge.bridge-nf-call-iptables=1"
        ));
        must(&format!("ip -n {node} link add br0 type bridge"));
        must(&format!("ip -n {node} addr add 10.42.0.1/24 dev br0"));
        must(&format!("ip -n {node} link set br0 up"));
        must(&format!(
            "ip -n {node} link add ext0 type veth peer name eth0 netns {x}"
        ));
        must(&format!("ip -n {node} addr add 192.168.77.1/24 dev ext0"));
        must(&format!("ip -n {node} link set ext0 up"));
        must(&format!("ip -n {node} route add default via 192.168.77.2"));
        must(&format!("ip -n {x} addr add 192.168.77.2/24 dev eth0"));
        must(&format!("ip -n {x} link set eth0 up"));
        must(&format!("ip -n {x} link set lo up"));
        must(&format!("ip -n {x} route add default via 192.168.77.1"));
        lab.serve("n", "10.42.0.1:53", "node53");
        lab.serve("n", "10.42.0.1:8081", "node8081");
        for k in 1..=pods {
            lab.pod(k);
        }
        lab
    }

    fn ns(&mut self, suffix: &str) -> String {
        let name = self.name(suffix);
        let _ = run(&["ip", "netns", "del", &name]);
        must(&format!("ip netns add {name}"));
        self.namespaces.push(name.clone());
        name
    }

    fn name(&self, suffix: &str) -> String {
        format!("{}-{suffix}", self.tag)
    }

    /// busybox httpd in namespace `suffix` on `listen`, answering `/id` with `id`.
    fn serve(&mut self, suffix: &str, listen: &str, id: &str) {
        let root = self.dir.join(id);
        std::fs::create_dir_all(&root).expect("a web root");
        std::fs::write(root.join("id"), format!("{id}\n")).expect("the id file");
        let root = root.to_string_lossy().into_owned();
        let child = Command::new("ip")
            .args([
                "netns",
                "exec",
                &self.name(suffix),
                "busybox",
                "httpd",
                "-f",
                "-p",
                listen,
                "-h",
                &root,
            ])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("busybox httpd");
        self.servers.push(child);
    }

    fn pod(&mut self, k: usize) {
        let node = self.name("n");
        let pod = self.ns(&format!("p{k}"));
        must(&format!(
            "ip -n {node} link add v{k} type veth peer name eth0 netns {pod}"
        ));
        must(&format!("ip -n {node} link set v{k} master br0"));
        must(&format!("ip -n {node} link set v{k} up"));
        must(&format!("ip -n {pod} addr add {}/24 dev eth0", pod_ip(k)));
        must(&format!("ip -n {pod} link set eth0 up"));
        must(&format!("ip -n {pod} link set lo up"));
        must(&format!("ip -n {pod} route add default via 10.42.0.1"));
        for port in [8080, 9090] {
            self.serve(&format!("p{k}"), &port.to_string(), &format!("p{k}-{port}"));
        }
    }

    /// Whether `GET http://{target}/id` from namespace `from` answers what `target` serves.
    fn reaches(&self, from: &str, target: &str) -> bool {
        let url = format!("http://{target}/id");
        run(&[
            "ip",
            "netns",
            "exec",
            &self.name(from),
            "timeout",
            "1.5",
            "busybox",
            "wget",
            "-q",
            "-O",
            "-",
            &url,
        ])
        .is_ok()
    }

    /// Waits until every server answers the node.
    fn wait_for_servers(&self, pods: usize) {
        let mut targets = vec!["10.42.0.1:53".to_string(), "10.42.0.1:8081".to_string()];
        for k in 1..=pods {
            targets.push(format!("{}:8080", pod_ip(k)));
            targets.push(format!("{}:9090", pod_ip(k)));
        }
        for target in targets {
            let deadline = Instant::now() + Duration::from_secs(10);
            while !self.reaches("n", &target) {
                assert!(Instant::now() < deadline, "{target} never served");
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

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime")
}

fn policy(ns: &str, name: &str, spec: Value) -> Value {
    json!({"metadata": {"namespace": ns, "name": name}, "spec": spec})
}

/// The lab's namespaces and pods (pod `web` names its port 8080 `http`), with `policies`.
fn world(policies: &[Value]) -> Snapshot {
    let mut s = Snapshot::default();
    for (name, team) in [("a", "a"), ("b", "b")] {
        let ns = json!({"metadata": {"name": name, "labels": {"team": team}}});
        Kind::Namespaces.apply(&mut s, &ns, false);
    }
    for (i, (ns, name, app)) in PODS.iter().enumerate() {
        let pod = json!({
            "metadata": {"namespace": ns, "name": name, "labels": {"app": app}},
            "spec": {"nodeName": "n1", "containers": [{"name": "c", "ports": [
                {"name": "http", "containerPort": 8080},
                {"name": "alt", "containerPort": 9090},
            ]}]},
            "status": {"phase": "Running", "podIP": pod_ip(i + 1)},
        });
        Kind::Pods.apply(&mut s, &pod, false);
    }
    for p in policies {
        Kind::Policies.apply(&mut s, p, false);
    }
    s
}

/// The Service `web` (ClusterIP 10.43.0.20:80) in front of pod 1's port 8080, in the proxy's
/// table: policies must judge Service traffic on the pod the DNAT chose.
fn proxy_world() -> proxy::model::Snapshot {
    let mut s = proxy::model::Snapshot::default();
    let mut w = Vec::new();
    let svc = proxy::model::Service::from_json(
        &json!({"metadata": {"namespace": "a", "name": "web"},
                "spec": {"clusterIP": "10.43.0.20", "ports": [{"name": "http", "port": 80}]}}),
        &mut w,
    )
    .expect("a service");
    s.services.insert(svc.key.clone(), svc);
    let slice = proxy::model::Slice::from_json(
        &json!({
            "metadata": {"namespace": "a", "name": "web-1",
                         "labels": {"kubernetes.io/service-name": "web"}},
            "addressType": "IPv4",
            "ports": [{"name": "http", "port": 8080, "protocol": "TCP"}],
            "endpoints": [{"addresses": [pod_ip(1)], "nodeName": "n1",
                           "conditions": {"ready": true}}],
        }),
        &mut w,
    )
    .expect("a slice");
    s.slices.insert(slice.key.clone(), slice);
    s
}

/// Who reaches what, as (from, target, expected) triples checked in one go.
fn expect(lab: &Lab, phase: &str, cases: &[(&str, &str, bool)]) {
    let wrong: Vec<String> = cases
        .iter()
        .filter(|(from, target, want)| lab.reaches(from, target) != *want)
        .map(|(from, target, want)| {
            format!(
                "{from} -> {target}: {}",
                if *want { "refused" } else { "let through" }
            )
        })
        .collect();
    assert!(wrong.is_empty(), "{phase}: {wrong:?}");
}

const WEB: &str = "10.42.0.2:8080";
const WEB_ALT: &str = "10.42.0.2:9090";
const WEB_SERVICE: &str = "10.43.0.20:80";

#[test]
fn policies_work_through_the_applied_rules() {
    if skipped() {
        return;
    }
    let lab = Lab::new("p", PODS.len());
    lab.wait_for_servers(PODS.len());
    let tools = lab.tools();
    let rt = rt();
    let mut proxy_settings = proxy::SyncSettings::new(
        "n1",
        proxy::model::Cidr::parse("10.42.0.0/16").expect("cidr"),
        None,
    );
    proxy_settings.routes = false;
    let mut services = proxy::Syncer::new(tools.clone(), proxy_settings);
    rt.block_on(services.sync(&proxy_world()))
        .expect("the Service rules");
    let mut syncer = netpol::Syncer::new(tools.clone(), netpol::SyncSettings::new("n1"));
    let mut apply = |policies: &[Value]| {
        let report = rt
            .block_on(syncer.sync(&world(policies), false))
            .expect("the policy rules apply");
        report.stats
    };

    // p1: a/web, p2: a/client, p3: a/other, p4: b/client, x: outside, n: the node.
    let stats = apply(&[]);
    assert_eq!(stats.policies, 0);
    expect(
        &lab,
        "no policy",
        &[
            ("p2", WEB, true),
            ("p4", WEB, true),
            ("x", WEB, true),
            ("p2", WEB_SERVICE, true),
        ],
    );

    let deny = policy(
        "a",
        "deny",
        json!({"podSelector": {"matchLabels": {"app": "web"}}}),
    );
    apply(std::slice::from_ref(&deny));
    expect(
        &lab,
        "default deny",
        &[
            ("p2", WEB, false),
            ("p4", WEB, false),
            ("x", WEB, false),
            ("p2", WEB_SERVICE, false),
            // The node itself (kubelet's probes) is never judged.
            ("n", WEB, true),
            // Not isolated for egress: web reaches others and their replies come back.
            ("p1", "10.42.0.3:8080", true),
            // Other pods are not selected.
            ("p1", "10.42.0.4:8080", true),
        ],
    );

    let by_label = policy(
        "a",
        "from-clients",
        json!({"podSelector": {"matchLabels": {"app": "web"}},
               "ingress": [{"from": [{"podSelector": {"matchLabels": {"app": "client"}}}]}]}),
    );
    apply(&[deny.clone(), by_label.clone()]);
    expect(
        &lab,
        "allow by pod label",
        &[
            ("p2", WEB, true),
            ("p2", WEB_SERVICE, true),
            ("p3", WEB, false),
            ("p3", WEB_SERVICE, false),
            // The same label in another namespace: a podSelector alone is the policy's own.
            ("p4", WEB, false),
        ],
    );

    let by_namespace = policy(
        "a",
        "from-team-b",
        json!({"podSelector": {"matchLabels": {"app": "web"}},
               "ingress": [{"from": [{"namespaceSelector": {"matchLabels": {"team": "b"}}}]}]}),
    );
    apply(&[deny.clone(), by_label.clone(), by_namespace]);
    expect(
        &lab,
        "allow by namespace label",
        &[("p4", WEB, true), ("p2", WEB, true), ("p3", WEB, false)],
    );

    let block = |cidr: &str, except: &[&str]| {
        policy(
            "a",
            "block",
            json!({"podSelector": {"matchLabels": {"app": "web"}},
                   "ingress": [{"from": [{"ipBlock": {"cidr": cidr, "except": except}}]}]}),
        )
    };
    apply(&[deny.clone(), block("192.168.0.0/16", &["192.168.77.2/32"])]);
    expect(
        &lab,
        "ipBlock with its client excepted",
        &[("x", WEB, false), ("p2", WEB, false)],
    );
    apply(&[deny.clone(), block("0.0.0.0/0", &["10.42.0.4/32"])]);
    expect(
        &lab,
        "ipBlock /0 except one pod",
        &[("x", WEB, true), ("p2", WEB, true), ("p3", WEB, false)],
    );

    let port_only = policy(
        "a",
        "http-only",
        json!({"podSelector": {"matchLabels": {"app": "web"}},
               "ingress": [{"ports": [{"port": "http"}]}]}),
    );
    apply(&[deny.clone(), port_only]);
    expect(
        &lab,
        "a named port allowed, the other refused",
        &[
            ("p2", WEB, true),
            ("x", WEB, true),
            ("p2", WEB_SERVICE, true),
            ("p2", WEB_ALT, false),
            ("x", WEB_ALT, false),
        ],
    );

    let egress_deny = policy(
        "a",
        "client-egress",
        json!({"podSelector": {"matchLabels": {"app": "client"}}, "policyTypes": ["Egress"]}),
    );
    apply(std::slice::from_ref(&egress_deny));
    expect(
        &lab,
        "egress deny",
        &[
            ("p2", WEB, false),
            ("p2", WEB_SERVICE, false),
            ("p2", "10.42.0.1:53", false),
            // b/client is in another namespace: not selected.
            ("p4", WEB, true),
        ],
    );
    let dns = policy(
        "a",
        "client-dns",
        json!({"podSelector": {"matchLabels": {"app": "client"}}, "policyTypes": ["Egress"],
               "egress": [{"ports": [{"protocol": "UDP", "port": 53},
                                     {"protocol": "TCP", "port": 53}]}]}),
    );
    let stats = apply(&[egress_deny.clone(), dns]);
    assert_eq!(stats.isolated_egress, 1);
    expect(
        &lab,
        "egress deny with DNS allowed",
        &[
            ("p2", "10.42.0.1:53", true),
            ("p2", "10.42.0.1:8081", false),
            ("p2", WEB, false),
        ],
    );

    // A policy that cannot be enforced is left out; the others keep working.
    let bad = policy(
        "a",
        "bad",
        json!({"podSelector": {}, "ingress": [{"ports": [{"protocol": "ICMP"}]}]}),
    );
    let stats = apply(&[deny.clone(), bad]);
    assert_eq!(stats.skipped, 1);
    expect(&lab, "beside a bad policy", &[("p2", WEB, false)]);

    apply(&[]);
    expect(
        &lab,
        "every policy removed",
        &[
            ("p2", WEB, true),
            ("p3", WEB, true),
            ("p4", WEB, true),
            ("x", WEB, true),
            ("p2", WEB_SERVICE, true),
            ("p2", "10.42.0.1:8081", true),
            ("p2", WEB_ALT, true),
        ],
    );

    // `agent --cleanup`'s removal.
    assert!(rt.block_on(netpol::cleanup(&tools)).expect("cleanup"));
    assert!(!rt.block_on(netpol::cleanup(&tools)).expect("cleanup again"));
}

/// 200 policies over 1,000 pods (500 on this node) in 20 namespaces: every peer kind, numeric
/// ports, ranges and named ports. The sync's time is printed for bench/netpol.sh.
#[test]
fn two_hundred_policies_over_a_thousand_pods() {
    if skipped() {
        return;
    }
    let lab = Lab::new("b", 0);
    let tools = lab.tools();
    let mut s = Snapshot::default();
    for n in 0..20 {
        let ns = json!({"metadata": {"name": format!("ns{n}"),
                                     "labels": {"team": format!("t{}", n % 5)}}});
        Kind::Namespaces.apply(&mut s, &ns, false);
    }
    for k in 0..1000u32 {
        let node = if (k / 20) % 2 == 0 { "n1" } else { "n2" };
        let pod = json!({
            "metadata": {"namespace": format!("ns{}", k % 20), "name": format!("pod{k}"),
                         "labels": {"app": format!("app{}", k % 10), "tier": format!("t{}", k % 3)}},
            "spec": {"nodeName": node, "containers": [{"name": "c", "ports": [
                {"name": "http", "containerPort": 8000 + k % 50}]}]},
            "status": {"phase": "Running",
                       "podIP": format!("10.42.{}.{}", k / 250, 2 + k % 250)},
        });
        Kind::Pods.apply(&mut s, &pod, false);
    }
    for p in 0..200u32 {
        let spec = json!({
            "podSelector": {"matchLabels": {"app": format!("app{}", p % 10)}},
            "policyTypes": ["Ingress", "Egress"],
            "ingress": [
                {"from": [{"podSelector": {"matchLabels": {"tier": format!("t{}", p % 3)}}},
                          {"namespaceSelector": {"matchLabels": {"team": format!("t{}", p % 5)}}}],
                 "ports": [{"port": 80}, {"port": 8000, "endPort": 8100}, {"port": "http"}]},
                {"from": [{"ipBlock": {"cidr": "0.0.0.0/0", "except": ["10.42.0.0/16"]}}]},
            ],
            "egress": [
                {"to": [{"namespaceSelector": {}, "podSelector": {"matchLabels": {"app": "app1"}}}],
                 "ports": [{"port": "http"}]},
                {"ports": [{"protocol": "UDP", "port": 53}, {"protocol": "TCP", "port": 53}]},
            ],
        });
        let policy = policy(&format!("ns{}", p % 20), &format!("policy{p}"), spec);
        Kind::Policies.apply(&mut s, &policy, false);
    }
    let rt = rt();
    let mut syncer = netpol::Syncer::new(tools.clone(), netpol::SyncSettings::new("n1"));
    for round in 0..3 {
        if round > 0 {
            // One pod comes back with a new address: the whole table is generated and
            // applied again.
            let pod = json!({
                "metadata": {"namespace": "ns0", "name": "pod0",
                             "labels": {"app": "app0", "tier": "t0"}},
                "spec": {"nodeName": "n1"},
                "status": {"phase": "Running", "podIP": format!("10.42.9.{round}")},
            });
            Kind::Pods.apply(&mut s, &pod, false);
        }
        let started = Instant::now();
        let report = rt.block_on(syncer.sync(&s, false)).expect("applied");
        let apply = report.apply.expect("a changed table is applied");
        println!(
            "sync {round}: {} policies, {} rules, {} set elements, {} pods isolated; generate {:?}, nft {:?}, total {:?}",
            report.stats.policies,
            report.stats.rules,
            report.stats.elements,
            report.stats.isolated_ingress,
            report.generate,
            apply,
            started.elapsed()
        );
        assert_eq!(report.stats.policies, 200);
        assert!(report.stats.rules < 200 * 10, "{:?}", report.stats);
    }
    let listing = must(&format!(
        "ip netns exec {} nft list table inet {}",
        lab.name("n"),
        ruleset::TABLE
    ));
    assert!(listing.contains("chain in/ns0/policy0"));
    // Nothing changed: nothing applied.
    let report = rt.block_on(syncer.sync(&s, false)).expect("a sync");
    assert!(report.apply.is_none());
}
