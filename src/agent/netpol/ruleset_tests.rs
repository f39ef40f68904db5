use serde_json::{json, Value};

use super::*;
use crate::agent::netpol::informer::Kind;
use crate::agent::netpol::model::Unenforceable;

const NODE: &str = "n1";

fn pod(ns: &str, name: &str, ip: &str, node: &str, labels: Value, ports: Value) -> Value {
    json!({
        "metadata": {"namespace": ns, "name": name, "labels": labels},
        "spec": {"nodeName": node, "containers": [{"name": "c", "ports": ports}]},
        "status": {"phase": "Running", "podIP": ip},
    })
}

fn policy(ns: &str, name: &str, spec: Value) -> Value {
    json!({"metadata": {"namespace": ns, "name": name}, "spec": spec})
}

fn namespace(name: &str, labels: Value) -> Value {
    json!({"metadata": {"name": name, "labels": labels}})
}

/// Namespaces `a` (team=a) and `b` (team=b); pods a/web (10.42.0.2, this node, app=web,
/// port http 8080), a/web2 (10.42.0.3, this node, app=web, port http 9090), a/client
/// (10.42.1.2, another node), b/client (10.42.1.3, another node, app=client).
fn world(policies: &[Value]) -> Snapshot {
    let mut s = Snapshot::default();
    for ns in [
        namespace("a", json!({"team": "a"})),
        namespace("b", json!({"team": "b"})),
    ] {
        Kind::Namespaces.apply(&mut s, &ns, false);
    }
    for p in [
        pod(
            "a",
            "web",
            "10.42.0.2",
            NODE,
            json!({"app": "web"}),
            json!([{"name": "http", "containerPort": 8080}]),
        ),
        pod(
            "a",
            "web2",
            "10.42.0.3",
            NODE,
            json!({"app": "web"}),
            json!([{"name": "http", "containerPort": 9090}]),
        ),
        pod(
            "a",
            "client",
            "10.42.1.2",
            "n2",
            json!({"app": "client"}),
            json!([]),
        ),
        pod(
            "b",
            "client",
            "10.42.1.3",
            "n2",
            json!({"app": "client"}),
            json!([]),
        ),
    ] {
        Kind::Pods.apply(&mut s, &p, false);
    }
    for p in policies {
        Kind::Policies.apply(&mut s, p, false);
    }
    s
}

/// The rules of chain `name` in `body`.
fn chain<'a>(body: &'a str, name: &str) -> Vec<&'a str> {
    let start = format!("\tchain {name} {{");
    let Some(at) = body.find(&start) else {
        panic!("no chain {name} in\n{body}");
    };
    body[at + start.len()..]
        .lines()
        .skip(1)
        .take_while(|l| l.trim() != "}")
        .map(str::trim)
        .collect()
}

/// The elements of set `name` in `body`.
fn elements<'a>(body: &'a str, name: &str) -> Vec<&'a str> {
    let start = format!("\tset {name} {{");
    let Some(at) = body.find(&start) else {
        panic!("no set {name} in\n{body}");
    };
    body[at..]
        .lines()
        .skip(1)
        .take_while(|l| l.trim() != "}")
        .map(str::trim)
        .filter(|l| l.ends_with(','))
        .map(|l| l.trim_end_matches(','))
        .collect()
}

fn read(spec: Value) -> Result<Policy, Unenforceable> {
    Policy::from_json(&policy("a", "p", spec)).expect("a policy")
}

#[test]
fn policy_types_default_as_the_api_does() {
    let p = read(json!({"podSelector": {}})).expect("enforceable");
    assert!(p.ingress.is_some() && p.egress.is_none());
    let p = read(json!({"podSelector": {}, "egress": []})).expect("enforceable");
    assert!(p.ingress.is_some() && p.egress.is_some());
    let p = read(json!({"podSelector": {}, "policyTypes": ["Egress"], "ingress": [{}]}))
        .expect("enforceable");
    assert!(p.ingress.is_none() && p.egress == Some(Vec::new()));
}

#[test]
fn what_cannot_be_enforced_is_a_value_with_its_reason() {
    for spec in [
        json!({"podSelector": {}, "ingress": [{"ports": [{"protocol": "ICMP", "port": 1}]}]}),
        json!({"podSelector": {}, "ingress": [{"from": [{}]}]}),
        json!({"podSelector": {}, "ingress": [{"from": [
            {"ipBlock": {"cidr": "10.0.0.0/8"}, "podSelector": {}}]}]}),
        json!({"podSelector": {}, "ingress": [{"from": [{"ipBlock": {"cidr": "nonsense"}}]}]}),
        json!({"podSelector": {}, "ingress": [{"ports": [{"port": 90, "endPort": 80}]}]}),
        json!({"podSelector": {}, "policyTypes": ["Sideways"]}),
    ] {
        assert!(read(spec.clone()).is_err(), "{spec}");
    }
}

#[test]
fn default_deny_isolates_the_selected_pods_of_this_node_only() {
    let s = world(&[policy(
        "a",
        "deny",
        json!({"podSelector": {"matchLabels": {"app": "web"}}}),
    )]);
    let r = render(&s, NODE);
    assert_eq!(
        elements(&r.body, "ingress-isolated"),
        ["10.42.0.2", "10.42.0.3"]
    );
    assert!(elements(&r.body, "egress-isolated").is_empty());
    assert_eq!(
        chain(&r.body, "ingress"),
        ["ip daddr @in/a/deny/pods jump in/a/deny", "drop"]
    );
    assert!(chain(&r.body, "in/a/deny").is_empty());
    // Another node guards nothing: its pods are not selected.
    let other = render(&s, "n2");
    assert!(elements(&other.body, "ingress-isolated").is_empty());
    assert_eq!(other.stats.policies, 0);
    // Replies, and the node itself (no output hook), are never judged.
    assert_eq!(
        chain(&r.body, "forward-ingress")[1],
        "ct state established,related accept"
    );
    assert!(!r.body.contains("hook output"));
}

#[test]
fn peers_by_pod_label_by_namespace_label_and_both() {
    let from = |peer: Value| {
        policy(
            "a",
            "allow",
            json!({"podSelector": {}, "ingress": [{"from": [peer]}]}),
        )
    };
    let peers = |peer: Value| {
        let r = render(&world(&[from(peer)]), NODE);
        elements(&r.body, "in/a/allow/0/peers")
            .into_iter()
            .map(str::to_string)
            .collect::<Vec<_>>()
    };
    // A podSelector alone: the policy's namespace only.
    assert_eq!(
        peers(json!({"podSelector": {"matchLabels": {"app": "client"}}})),
        ["10.42.1.2"]
    );
    // A namespaceSelector alone: every pod there.
    assert_eq!(
        peers(json!({"namespaceSelector": {"matchLabels": {"team": "b"}}})),
        ["10.42.1.3"]
    );
    // Both: pods matching in namespaces matching.
    assert_eq!(
        peers(json!({"namespaceSelector": {}, "podSelector": {"matchLabels": {"app": "client"}}})),
        ["10.42.1.2-10.42.1.3"]
    );
    // The label the API server sets on every namespace.
    assert_eq!(
        peers(json!({"namespaceSelector": {"matchExpressions": [
            {"key": "kubernetes.io/metadata.name", "operator": "In", "values": ["b"]}]}})),
        ["10.42.1.3"]
    );
}

#[test]
fn a_rule_whose_peers_match_nothing_allows_nothing() {
    let s = world(&[policy(
        "a",
        "allow",
        json!({"podSelector": {}, "ingress": [{"from": [
            {"podSelector": {"matchLabels": {"app": "nobody"}}}]}]}),
    )]);
    let r = render(&s, NODE);
    assert!(chain(&r.body, "in/a/allow").is_empty());
    assert!(!r.body.contains("in/a/allow/0/peers"));
}

#[test]
fn ip_blocks_cut_their_exceptions_and_a_slash_zero_is_one_range() {
    let ranges = |cidr: &str, except: &[&str]| -> Vec<String> {
        let except: Vec<Cidr> = except.iter().filter_map(|c| Cidr::parse(c)).collect();
        block_ranges(Cidr::parse(cidr).expect("cidr"), &except)
            .into_iter()
            .map(range_text)
            .collect()
    };
    assert_eq!(
        ranges("10.0.0.0/8", &["10.1.0.0/16", "10.0.0.0/24"]),
        ["10.0.1.0-10.0.255.255", "10.2.0.0-10.255.255.255"]
    );
    assert_eq!(ranges("0.0.0.0/0", &[]), ["0.0.0.0-255.255.255.255"]);
    assert_eq!(
        ranges("0.0.0.0/0", &["10.42.0.0/16"]),
        ["0.0.0.0-10.41.255.255", "10.43.0.0-255.255.255.255"]
    );
    assert!(ranges("10.0.0.0/24", &["10.0.0.0/16"]).is_empty());
    assert_eq!(ranges("10.0.0.7/32", &[]), ["10.0.0.7"]);
    // Overlapping peers merge into disjoint ranges (an interval set refuses overlaps).
    assert_eq!(
        merge(vec![(5, 9), (1, 3), (4, 4), (20, 30), (25, 26)]),
        [(1, 9), (20, 30)]
    );
}

#[test]
fn ports_ranges_and_named_ports_resolved_per_pod() {
    let s = world(&[policy(
        "a",
        "ports",
        json!({"podSelector": {"matchLabels": {"app": "web"}}, "ingress": [{"ports": [
            {"port": 80},
            {"port": 8000, "endPort": 8010},
            {"protocol": "UDP", "port": 53},
            {"protocol": "SCTP"},
            {"port": "http"},
        ]}]}),
    )]);
    let r = render(&s, NODE);
    assert_eq!(
        chain(&r.body, "in/a/ports"),
        [
            "meta l4proto sctp accept",
            "meta l4proto tcp th dport { 80, 8000-8010 } accept",
            "meta l4proto udp th dport { 53 } accept",
            "ip daddr . meta l4proto . th dport @in/a/ports/0/named accept",
        ]
    );
    // Each guarded pod's own number for `http`.
    assert_eq!(
        elements(&r.body, "in/a/ports/0/named"),
        ["10.42.0.2 . tcp . 8080", "10.42.0.3 . tcp . 9090"]
    );
}

#[test]
fn egress_named_ports_are_the_destination_pods_and_peers_are_destinations() {
    let s = world(&[policy(
        "a",
        "out",
        json!({"podSelector": {"matchLabels": {"app": "web"}}, "policyTypes": ["Egress"],
               "egress": [{"to": [{"namespaceSelector": {}}], "ports": [{"port": "http"}]}]}),
    )]);
    let r = render(&s, NODE);
    assert_eq!(
        chain(&r.body, "egress"),
        ["ip saddr @out/a/out/pods jump out/a/out", "drop"]
    );
    assert_eq!(
        chain(&r.body, "out/a/out"),
        ["ip daddr @out/a/out/0/peers ip daddr . meta l4proto . th dport @out/a/out/0/named accept"]
    );
    assert_eq!(
        elements(&r.body, "egress-isolated"),
        ["10.42.0.2", "10.42.0.3"]
    );
}

#[test]
fn an_unenforceable_policy_is_skipped_with_a_warning_and_the_rest_kept() {
    let s = world(&[
        policy(
            "a",
            "bad",
            json!({"podSelector": {}, "ingress": [{"ports": [{"protocol": "ICMP"}]}]}),
        ),
        policy("a", "good", json!({"podSelector": {}, "ingress": [{}]})),
    ]);
    let r = render(&s, NODE);
    assert_eq!(r.stats.skipped, 1);
    assert_eq!(r.warnings.len(), 1);
    assert!(r.warnings[0].contains("a/bad"), "{:?}", r.warnings);
    assert_eq!(chain(&r.body, "in/a/good"), ["accept"]);
    assert!(!r.body.contains("in/a/bad"));
}

#[test]
fn the_rule_count_does_not_grow_with_pods() {
    let spec = json!({"podSelector": {}, "ingress": [{"from": [{"namespaceSelector": {}}],
                                                     "ports": [{"port": 80}]}]});
    let count = |pods: u32| {
        let mut s = world(&[policy("a", "p", spec.clone())]);
        for k in 0..pods {
            let ip = format!("10.42.{}.{}", 2 + k / 200, 10 + k % 200);
            let p = pod("a", &format!("x{k}"), &ip, NODE, json!({}), json!([]));
            Kind::Pods.apply(&mut s, &p, false);
        }
        render(&s, NODE).stats
    };
    let (few, many) = (count(10), count(1000));
    assert_eq!(few.rules, many.rules);
    assert!(many.elements > few.elements);
}

#[test]
fn hostnetwork_finished_and_unaddressed_pods_are_nobodys() {
    let mut s = world(&[]);
    let mut host = pod("a", "h", "192.168.1.5", NODE, json!({}), json!([]));
    host["spec"]["hostNetwork"] = json!(true);
    let mut done = pod("a", "d", "10.42.0.9", NODE, json!({}), json!([]));
    done["status"]["phase"] = json!("Succeeded");
    let mut pending = pod("a", "p", "10.42.0.8", NODE, json!({}), json!([]));
    pending["status"] = json!({"phase": "Pending"});
    for p in [&host, &done, &pending] {
        Kind::Pods.apply(&mut s, p, false);
    }
    assert_eq!(s.pods.len(), 4);
}

#[test]
fn long_names_stay_unique_and_within_bounds() {
    let a = ident(&format!("in/a/{}", "x".repeat(300)));
    let b = ident(&format!("in/a/{}y", "x".repeat(300)));
    assert!(a.len() <= 180 && b.len() <= 180);
    assert_ne!(a, b);
    assert_eq!(ident("in/a/b c"), "in/a/b_c");
}

#[test]
fn the_transaction_replaces_the_table_whatever_was_there() {
    let r = render(&world(&[]), NODE);
    let t = transaction(&r);
    assert!(t.starts_with(
        "add table inet litek8s-netpol\ndelete table inet litek8s-netpol\ntable inet litek8s-netpol {"
    ));
}

#[test]
fn policies_with_the_same_selectors_share_their_sets() {
    let spec = json!({"podSelector": {"matchLabels": {"app": "web"}},
                      "ingress": [{"from": [{"namespaceSelector": {}}]}]});
    let r = render(
        &world(&[policy("a", "one", spec.clone()), policy("a", "two", spec)]),
        NODE,
    );
    assert_eq!(
        chain(&r.body, "ingress"),
        [
            "ip daddr @in/a/one/pods jump in/a/one",
            "ip daddr @in/a/one/pods jump in/a/two",
            "drop",
        ]
    );
    assert_eq!(
        chain(&r.body, "in/a/two"),
        ["ip saddr @in/a/one/0/peers accept"]
    );
    assert!(!r.body.contains("set in/a/two"));
}
