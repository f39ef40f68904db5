//! The answers for every kind of cluster name, from a hand-built cache.

use serde_json::json;

use super::*;
use crate::agent::dns::cache::{Cache, Kind};
use crate::agent::dns::zone::ZoneSettings;

fn zone() -> Zone {
    let mut cache = Cache::default();
    cache.replace(
        Kind::Services,
        &[
            json!({"metadata": {"namespace": "default", "name": "web"},
                   "spec": {"clusterIP": "10.43.0.20", "clusterIPs": ["10.43.0.20"],
                            "ports": [{"name": "http", "port": 80, "protocol": "TCP"},
                                      {"name": "dns", "port": 53, "protocol": "UDP"}]}}),
            json!({"metadata": {"namespace": "default", "name": "db"},
                   "spec": {"clusterIP": "None", "ports": [{"name": "pg", "port": 5432}]}}),
            json!({"metadata": {"namespace": "default", "name": "ext"},
                   "spec": {"type": "ExternalName", "externalName": "example.org"}}),
            json!({"metadata": {"namespace": "default", "name": "alias"},
                   "spec": {"type": "ExternalName", "externalName": "web.default.svc.cluster.local"}}),
        ],
    );
    cache.replace(
        Kind::EndpointSlices,
        &[
            json!({"metadata": {"namespace": "default", "name": "db-abc",
                                "labels": {"kubernetes.io/service-name": "db"}},
                   "endpoints": [{"addresses": ["10.42.0.5"], "hostname": "db-0"},
                                 {"addresses": ["10.42.1.6"], "conditions": {"ready": true}},
                                 {"addresses": ["10.42.1.7"], "conditions": {"ready": false}}],
                   "ports": [{"name": "pg", "port": 5432, "protocol": "TCP"}]}),
            json!({"metadata": {"namespace": "default", "name": "web-abc",
                                "labels": {"kubernetes.io/service-name": "web"}},
                   "endpoints": [{"addresses": ["10.42.0.8"]}],
                   "ports": [{"name": "http", "port": 8080, "protocol": "TCP"}]}),
        ],
    );
    cache.replace(
        Kind::Pods,
        &[json!({"metadata": {"namespace": "default", "name": "p"},
                 "status": {"podIPs": [{"ip": "10.42.0.9"}]}})],
    );
    let settings = ZoneSettings {
        domain: "cluster.local".into(),
        dns_ip: Some("10.43.0.10".parse().unwrap()),
    };
    Zone::build(&cache, &settings, 1_700_000_000)
}

fn local(outcome: Outcome) -> Response {
    match outcome {
        Outcome::Local(r) => r,
        other => panic!("not answered here: {other:?}"),
    }
}

fn data(r: &Response) -> Vec<RData> {
    r.answers.iter().map(|a| a.data.clone()).collect()
}

fn a(ip: &str) -> RData {
    RData::A(ip.parse().unwrap())
}

fn assert_soa_only(r: &Response, rcode: u8) {
    assert_eq!(r.rcode, rcode);
    assert!(r.answers.is_empty(), "{r:?}");
    assert_eq!(r.authority.len(), 1);
    assert!(matches!(
        &r.authority[0].data,
        RData::Soa { mname, rname, serial: 1_700_000_000, minimum: 5, .. }
            if mname == "ns.dns.cluster.local" && rname == "hostmaster.cluster.local"
    ));
    assert_eq!(r.authority[0].name, "cluster.local");
}

#[test]
fn a_cluster_ip_service() {
    let z = zone();
    let r = local(answer(&z, "web.default.svc.cluster.local", TYPE_A));
    assert!(r.authoritative);
    assert_eq!(data(&r), [a("10.43.0.20")]);
    assert!(r.answers.iter().all(|a| a.ttl == 5));
    // The service exists, without an IPv6 address: NODATA.
    assert_soa_only(
        &local(answer(&z, "web.default.svc.cluster.local", TYPE_AAAA)),
        RCODE_NOERROR,
    );
    // Its endpoints have names too (the address, dashed).
    let r = local(answer(
        &z,
        "10-42-0-8.web.default.svc.cluster.local",
        TYPE_A,
    ));
    assert_eq!(data(&r), [a("10.42.0.8")]);
}

#[test]
fn a_headless_service_gives_its_ready_endpoints() {
    let z = zone();
    let r = local(answer(&z, "db.default.svc.cluster.local", TYPE_A));
    assert_eq!(data(&r), [a("10.42.0.5"), a("10.42.1.6")]);
    let r = local(answer(&z, "db-0.db.default.svc.cluster.local", TYPE_A));
    assert_eq!(data(&r), [a("10.42.0.5")]);
    // A not-ready endpoint has no name.
    assert_soa_only(
        &local(answer(&z, "10-42-1-7.db.default.svc.cluster.local", TYPE_A)),
        RCODE_NXDOMAIN,
    );
}

#[test]
fn srv_records_name_ports_and_targets() {
    let z = zone();
    let r = local(answer(
        &z,
        "_http._tcp.web.default.svc.cluster.local",
        TYPE_SRV,
    ));
    assert_eq!(
        data(&r),
        [RData::Srv {
            priority: 0,
            weight: 100,
            port: 80,
            target: "web.default.svc.cluster.local".into()
        }]
    );
    assert_eq!(r.additional[0].data, a("10.43.0.20"));
    let r = local(answer(
        &z,
        "_dns._udp.web.default.svc.cluster.local",
        TYPE_SRV,
    ));
    assert_eq!(r.answers.len(), 1);
    // The wrong protocol for a port: no such name.
    assert_soa_only(
        &local(answer(
            &z,
            "_dns._tcp.web.default.svc.cluster.local",
            TYPE_SRV,
        )),
        RCODE_NXDOMAIN,
    );
    // Headless: one record per ready endpoint, its hostname or dashed address as target.
    let r = local(answer(
        &z,
        "_pg._tcp.db.default.svc.cluster.local",
        TYPE_SRV,
    ));
    assert_eq!(
        data(&r),
        [
            RData::Srv {
                priority: 0,
                weight: 50,
                port: 5432,
                target: "10-42-1-6.db.default.svc.cluster.local".into()
            },
            RData::Srv {
                priority: 0,
                weight: 50,
                port: 5432,
                target: "db-0.db.default.svc.cluster.local".into()
            },
        ]
    );
    assert_eq!(r.additional.len(), 2);
    // The service name itself answers SRV for every port.
    let r = local(answer(&z, "web.default.svc.cluster.local", TYPE_SRV));
    assert_eq!(r.answers.len(), 2);
    // The empty name above a port record exists.
    assert_soa_only(
        &local(answer(&z, "_tcp.web.default.svc.cluster.local", TYPE_SRV)),
        RCODE_NOERROR,
    );
}

#[test]
fn pods_by_dashed_address_when_a_pod_has_it() {
    let z = zone();
    let r = local(answer(&z, "10-42-0-9.default.pod.cluster.local", TYPE_A));
    assert_eq!(data(&r), [a("10.42.0.9")]);
    for missing in [
        "10-42-0-99.default.pod.cluster.local",
        "10-42-0-9.other.pod.cluster.local",
        "not-an-ip.default.pod.cluster.local",
        "a.b.default.pod.cluster.local",
    ] {
        assert_soa_only(&local(answer(&z, missing, TYPE_A)), RCODE_NXDOMAIN);
    }
    assert_soa_only(
        &local(answer(&z, "default.pod.cluster.local", TYPE_A)),
        RCODE_NOERROR,
    );
}

#[test]
fn ptr_for_cluster_ips_and_endpoints_others_forwarded() {
    let z = zone();
    let r = local(answer(&z, "20.0.43.10.in-addr.arpa", TYPE_PTR));
    assert_eq!(
        data(&r),
        [RData::Ptr("web.default.svc.cluster.local".into())]
    );
    let r = local(answer(&z, "5.0.42.10.in-addr.arpa", TYPE_PTR));
    assert_eq!(
        data(&r),
        [RData::Ptr("db-0.db.default.svc.cluster.local".into())]
    );
    assert_eq!(
        answer(&z, "1.1.168.192.in-addr.arpa", TYPE_PTR),
        Outcome::Forward
    );
    assert_eq!(answer(&z, "43.10.in-addr.arpa", TYPE_PTR), Outcome::Forward);
    let v6 = "1.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.d.f.ip6.arpa";
    assert_eq!(reverse_ip(v6), Some("fd00::1".parse().unwrap()));
}

#[test]
fn external_names_are_cnames_chased_upstream_or_in_the_zone() {
    let z = zone();
    match answer(&z, "ext.default.svc.cluster.local", TYPE_A) {
        Outcome::Chase { response, target } => {
            assert_eq!(target, "example.org");
            assert_eq!(data(&response), [RData::Cname("example.org".into())]);
        }
        other => panic!("{other:?}"),
    }
    let r = local(answer(&z, "ext.default.svc.cluster.local", TYPE_CNAME));
    assert_eq!(data(&r), [RData::Cname("example.org".into())]);
    // A CNAME into the zone is followed here.
    let r = local(answer(&z, "alias.default.svc.cluster.local", TYPE_A));
    assert_eq!(
        data(&r),
        [
            RData::Cname("web.default.svc.cluster.local".into()),
            a("10.43.0.20")
        ]
    );
}

#[test]
fn unknown_names_get_nxdomain_and_the_soa_and_the_apex_answers() {
    let z = zone();
    for name in [
        "nope.default.svc.cluster.local",
        "web.other.svc.cluster.local",
        "web.default.svc.cluster.local.default.svc.cluster.local",
        "x.cluster.local",
    ] {
        assert_soa_only(&local(answer(&z, name, TYPE_A)), RCODE_NXDOMAIN);
    }
    for name in [
        "cluster.local",
        "svc.cluster.local",
        "default.svc.cluster.local",
    ] {
        assert_soa_only(&local(answer(&z, name, TYPE_A)), RCODE_NOERROR);
    }
    let r = local(answer(&z, "cluster.local", TYPE_SOA));
    assert!(matches!(r.answers[0].data, RData::Soa { .. }));
    let r = local(answer(&z, "cluster.local", TYPE_NS));
    assert_eq!(data(&r), [RData::Ns("ns.dns.cluster.local".into())]);
    assert_eq!(r.additional[0].data, a("10.43.0.10"));
    let r = local(answer(&z, "ns.dns.cluster.local", TYPE_A));
    assert_eq!(data(&r), [a("10.43.0.10")]);
    assert_eq!(answer(&z, "example.org", TYPE_A), Outcome::Forward);
    assert_eq!(answer(&z, "notcluster.local", TYPE_A), Outcome::Forward);
}

#[test]
fn answers_encode_within_the_udp_limit() {
    use crate::agent::dns::wire::{build_query, encode, parse_query, parse_upstream, Parsed};
    let z = zone();
    let packet = build_query(3, "DB.default.svc.cluster.local", TYPE_A, None);
    let Parsed::Query(q) = parse_query(&packet) else {
        panic!()
    };
    let r = local(answer(&z, &q.question.name, q.question.qtype));
    let out = encode(&q, &r, q.udp_limit());
    let shape = parse_upstream(&out, 3).unwrap();
    assert_eq!(shape.rcode, 0);
    assert_eq!(shape.ttl_offsets.len(), 2);
    // The question's case is echoed.
    assert_eq!(&out[13..15], b"DB");
}
