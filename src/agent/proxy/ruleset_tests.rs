//! Checks of specific rules of generated rulesets (not whole-text snapshots).

use super::*;
use crate::agent::proxy::model::{Slice, Snapshot};
use serde_json::{json, Value};

fn config() -> RulesetConfig {
    RulesetConfig {
        node_name: "n1".into(),
        cluster_cidr: Cidr::parse("10.42.0.0/16").expect("cidr"),
        dns: Some(DnsRedirect {
            cluster_ip: Ipv4Addr::new(10, 43, 0, 10),
            target: Ipv4Addr::new(10, 42, 0, 1),
        }),
    }
}

fn service(name: &str, spec: Value) -> Value {
    json!({"metadata": {"namespace": "default", "name": name}, "spec": spec})
}

/// A slice of `svc` with endpoints `(ip, node, ready, terminating)` on port `http` 8080.
fn slice(svc: &str, endpoints: &[(&str, &str, bool, bool)]) -> Value {
    let endpoints: Vec<Value> = endpoints
        .iter()
        .map(|(ip, node, ready, terminating)| {
            json!({"addresses": [ip], "nodeName": node,
                   "conditions": {"ready": ready, "serving": true, "terminating": terminating}})
        })
        .collect();
    json!({
        "metadata": {"namespace": "default", "name": format!("{svc}-abc"),
                     "labels": {"kubernetes.io/service-name": svc}},
        "addressType": "IPv4",
        "ports": [{"name": "http", "port": 8080, "protocol": "TCP"}],
        "endpoints": endpoints,
    })
}

fn snapshot(services: &[Value], slices: &[Value]) -> Snapshot {
    let mut s = Snapshot::default();
    let mut w = Vec::new();
    for o in services {
        let svc = Service::from_json(o, &mut w).expect("service");
        s.services.insert(svc.key.clone(), svc);
    }
    for o in slices {
        let slice = Slice::from_json(o, &mut w).expect("slice");
        s.slices.insert(slice.key.clone(), slice);
    }
    s
}

/// The rules of `chain` in the body.
fn chain<'a>(ruleset: &'a Ruleset, chain: &str) -> Vec<&'a str> {
    let head = format!("\tchain {chain} {{\n");
    let start = ruleset
        .body
        .find(&head)
        .unwrap_or_else(|| panic!("no chain {chain} in\n{}", ruleset.body));
    ruleset.body[start + head.len()..]
        .lines()
        .take_while(|l| l.trim() != "}")
        .map(str::trim)
        .collect()
}

fn web() -> Value {
    service(
        "web",
        json!({"clusterIP": "10.43.0.20", "type": "NodePort",
               "ports": [{"name": "http", "port": 80, "nodePort": 30080}]}),
    )
}

#[test]
fn a_cluster_ip_balances_over_its_ready_endpoints() {
    let s = snapshot(
        &[web()],
        &[slice(
            "web",
            &[
                ("10.42.0.2", "n1", true, false),
                ("10.42.1.2", "n2", true, false),
            ],
        )],
    );
    let r = render(&s, &config());
    assert!(r
        .body
        .contains("10.43.0.20 . tcp . 80 : goto svc-default/web/tcp/80,"));
    let svc = chain(&r, "svc-default/web/tcp/80");
    assert_eq!(svc[0], "ip saddr != 10.42.0.0/16 jump mark-for-masquerade");
    assert_eq!(
        svc[1],
        "meta l4proto tcp dnat ip to numgen random mod 2 map { 0 : 10.42.0.2 . 8080, 1 : 10.42.1.2 . 8080 }"
    );
    assert_eq!(svc.len(), 2);
    // No chain per endpoint; each endpoint is in the hairpin set.
    assert!(!r.body.contains("chain ep-"));
    assert!(r
        .body
        .contains("elements = { 10.42.0.2 . 10.42.0.2, 10.42.1.2 . 10.42.1.2 }"));
    assert_eq!((r.stats.endpoints, r.stats.endpoint_chains), (2, 0));
    // A NodePort under the Cluster policy masquerades.
    assert!(r
        .body
        .contains("tcp . 30080 : goto ext-default/web/tcp/80,"));
    assert_eq!(
        chain(&r, "ext-default/web/tcp/80"),
        ["jump mark-for-masquerade", "goto svc-default/web/tcp/80"]
    );
}

#[test]
fn a_service_without_endpoints_is_rejected() {
    let r = render(&snapshot(&[web()], &[]), &config());
    assert!(r
        .body
        .contains("10.43.0.20 . tcp . 80 : goto reject-chain,"));
    assert!(r.body.contains("tcp . 30080 : goto reject-chain,"));
    assert!(!r.body.contains("chain svc-default/web"));
    assert_eq!(r.stats.rejected, 1);
}

#[test]
fn terminating_endpoints_serve_only_when_no_ready_one_is_left() {
    let both = [
        ("10.42.0.2", "n1", true, false),
        ("10.42.0.3", "n1", false, true),
    ];
    let r = render(&snapshot(&[web()], &[slice("web", &both)]), &config());
    assert_eq!(
        chain(&r, "svc-default/web/tcp/80")[1],
        "meta l4proto tcp dnat ip to 10.42.0.2:8080"
    );
    let only_terminating = [("10.42.0.3", "n1", false, true)];
    let r = render(
        &snapshot(&[web()], &[slice("web", &only_terminating)]),
        &config(),
    );
    assert_eq!(
        chain(&r, "svc-default/web/tcp/80")[1],
        "meta l4proto tcp dnat ip to 10.42.0.3:8080"
    );
}

#[test]
fn external_traffic_policy_local_keeps_the_client_address() {
    let mut svc = web();
    svc["spec"]["externalTrafficPolicy"] = json!("Local");
    let eps = [
        ("10.42.0.2", "n1", true, false),
        ("10.42.1.2", "n2", true, false),
    ];
    let r = render(&snapshot(&[svc.clone()], &[slice("web", &eps)]), &config());
    let ext = chain(&r, "ext-default/web/tcp/80");
    assert_eq!(ext[0], "ip saddr 10.42.0.0/16 goto svc-default/web/tcp/80");
    assert_eq!(ext[3], "goto local-default/web/tcp/80");
    assert!(!ext.contains(&"jump mark-for-masquerade"));
    assert_eq!(
        chain(&r, "local-default/web/tcp/80"),
        ["meta l4proto tcp dnat ip to 10.42.0.2:8080"]
    );
    // No endpoint on this node: external traffic is dropped, cluster traffic still flows.
    let remote = [("10.42.1.2", "n2", true, false)];
    let r = render(&snapshot(&[svc], &[slice("web", &remote)]), &config());
    assert!(r.body.contains("tcp . 30080 : drop,"));
    assert!(r
        .body
        .contains("10.43.0.20 . tcp . 80 : goto svc-default/web/tcp/80,"));
}

#[test]
fn internal_traffic_policy_local_uses_this_nodes_endpoints() {
    let mut svc = web();
    svc["spec"]["internalTrafficPolicy"] = json!("Local");
    let eps = [
        ("10.42.0.2", "n1", true, false),
        ("10.42.1.2", "n2", true, false),
    ];
    let r = render(&snapshot(&[svc], &[slice("web", &eps)]), &config());
    assert!(r
        .body
        .contains("10.43.0.20 . tcp . 80 : goto local-default/web/tcp/80,"));
    // NodePorts (Cluster policy) still use every endpoint.
    assert_eq!(
        chain(&r, "ext-default/web/tcp/80")[1],
        "goto svc-default/web/tcp/80"
    );
}

#[test]
fn session_affinity_remembers_clients_per_endpoint() {
    let mut svc = web();
    svc["spec"]["sessionAffinity"] = json!("ClientIP");
    svc["spec"]["sessionAffinityConfig"] = json!({"clientIP": {"timeoutSeconds": 60}});
    let eps = [
        ("10.42.0.2", "n1", true, false),
        ("10.42.1.2", "n2", true, false),
    ];
    let r = render(&snapshot(&[svc], &[slice("web", &eps)]), &config());
    let set = "aff-60-default/web/tcp/80__10.42.0.2/8080";
    assert!(r.body.contains(&format!(
        "set {set} {{ type ipv4_addr; flags dynamic,timeout; timeout 60s; }}"
    )));
    let svc_rules = chain(&r, "svc-default/web/tcp/80");
    assert_eq!(
        svc_rules[1],
        format!("ip saddr @{set} goto ep-default/web/tcp/80__10.42.0.2/8080")
    );
    assert!(svc_rules[3].starts_with("numgen random mod 2"));
    assert_eq!(
        chain(&r, "ep-default/web/tcp/80__10.42.0.2/8080"),
        [
            format!("update @{set} {{ ip saddr }}"),
            "meta l4proto tcp dnat ip to 10.42.0.2:8080".to_string()
        ]
    );
    assert_eq!((r.stats.endpoints, r.stats.endpoint_chains), (2, 2));
}

#[test]
fn cluster_dns_goes_to_this_nodes_responder_before_any_service() {
    let dns = service(
        "kube-dns",
        json!({"clusterIP": "10.43.0.10", "ports": [{"name": "dns", "port": 53, "protocol": "UDP"}]}),
    );
    let r = render(&snapshot(&[dns], &[]), &config());
    assert!(r.body.contains("10.43.0.10 . udp . 53 : goto cluster-dns,"));
    assert!(r.body.contains("10.43.0.10 . tcp . 53 : goto cluster-dns,"));
    assert!(!r.body.contains("10.43.0.10 . udp . 53 : goto reject-chain"));
    assert_eq!(
        chain(&r, "cluster-dns"),
        [
            "meta l4proto udp dnat ip to 10.42.0.1:53",
            "meta l4proto tcp dnat ip to 10.42.0.1:53"
        ]
    );
}

#[test]
fn a_node_port_claimed_twice_is_kept_by_one_service() {
    let mut other = web();
    other["metadata"]["name"] = json!("zzz");
    other["spec"]["clusterIP"] = json!("10.43.0.21");
    let r = render(&snapshot(&[web(), other], &[]), &config());
    assert_eq!(r.body.matches("tcp . 30080 :").count(), 1);
    assert_eq!(r.warnings.len(), 1, "{:?}", r.warnings);
}

#[test]
fn pod_egress_is_masqueraded_and_pod_to_pod_is_not() {
    let r = render(&Snapshot::default(), &config());
    assert_eq!(
        chain(&r, "masquerading")[0],
        "ip saddr 10.42.0.0/16 ip daddr != 10.42.0.0/16 masquerade fully-random"
    );
    // Hairpin traffic (source and destination the same endpoint after DNAT) is masqueraded.
    assert_eq!(
        chain(&r, "masquerading")[1],
        "ct status dnat ip saddr . ip daddr @hairpin masquerade fully-random"
    );
    assert_eq!(
        chain(&r, "services")[1],
        "fib daddr type local ip daddr != 127.0.0.0/8 meta l4proto . th dport vmap @service-nodeports"
    );
}

#[test]
fn udp_endpoints_are_listed_for_conntrack() {
    let svc = service(
        "dns2",
        json!({"clusterIP": "10.43.0.30", "ports": [{"name": "http", "port": 53, "protocol": "UDP"}]}),
    );
    let mut sl = slice("dns2", &[("10.42.0.9", "n1", true, false)]);
    sl["ports"][0]["protocol"] = json!("UDP");
    let r = render(&snapshot(&[svc], &[sl]), &config());
    assert!(r
        .udp_endpoints
        .contains(&(Ipv4Addr::new(10, 42, 0, 9), 8080)));
}

#[test]
fn a_transaction_deletes_only_what_is_gone() {
    let r = render(&snapshot(&[web()], &[]), &config());
    let existing = Existing::parse(
        "table inet litek8s {\n\tmap service-ips {\n\t}\n\tset aff-1-x {\n\t}\n\tset hairpin {\n\t}\n\tchain services {\n\t}\n\tchain svc-old {\n\t}\n}\n",
    );
    let t = transaction(&r, &existing);
    assert!(t.contains("delete chain inet litek8s svc-old\n"));
    assert!(t.contains("delete set inet litek8s aff-1-x\n"));
    assert!(!t.contains("delete set inet litek8s hairpin"));
    assert!(t.contains("flush set inet litek8s hairpin\n"));
    assert!(!t.contains("delete chain inet litek8s services"));
    let flush = t.find("flush table").expect("a flush");
    assert!(flush < t.find("chain services").expect("the chains"));
}

#[test]
fn a_later_sync_rewrites_only_the_chains_that_changed() {
    let two = [
        ("10.42.0.2", "n1", true, false),
        ("10.42.1.2", "n2", true, false),
    ];
    let before = render(&snapshot(&[web()], &[slice("web", &two)]), &config());
    let one = [("10.42.0.2", "n1", true, false)];
    let after = render(&snapshot(&[web()], &[slice("web", &one)]), &config());
    let t = transaction_from(&after, &before);
    assert!(t.contains("flush chain inet litek8s svc-default/web/tcp/80\n"));
    assert!(t.contains("flush map inet litek8s service-ips\n"));
    assert!(t.contains("flush set inet litek8s hairpin\n"));
    assert!(t.contains("elements = { 10.42.0.2 . 10.42.0.2 }"));
    // Unchanged chains are not written again.
    assert!(!t.contains("chain ext-default/web/tcp/80 {"));
    assert!(!t.contains("chain services {"));
    assert!(!t.contains("flush table"));
    // Nothing changed: only the maps are refilled.
    let same = transaction_from(&after, &after);
    assert!(!same.contains("chain "), "{same}");
}
