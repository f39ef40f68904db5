//! The cluster zone as names: built from the [`Cache`] after each batch of watch events, then
//! read without locks by every query (an `Arc` swapped in whole). Each name of the zone maps
//! to what it holds, as CoreDNS's kubernetes plugin names things
//! (<https://github.com/kubernetes/dns/blob/master/docs/specification.md>):
//!
//! ```text
//! <svc>.<ns>.svc.<domain>                   A/AAAA ClusterIPs | ready endpoints (headless)
//!                                           | CNAME externalName; SRV for every port
//! _<port>._<proto>.<svc>.<ns>.svc.<domain>  SRV of a named port
//! <host>.<svc>.<ns>.svc.<domain>            A/AAAA of an endpoint; <host> is its hostname,
//!                                           or its address with dashes
//! <a-b-c-d>.<ns>.pod.<domain>               A of a pod with that IP in that namespace
//! ```
//!
//! plus the empty names above them (`<ns>.svc.<domain>`, `svc.<domain>`, …), which exist
//! without records, and a reverse index from ClusterIPs and endpoint addresses to names.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::net::IpAddr;

use super::cache::{Cache, Port, ServiceKind};

/// An endpoint as named: `(hostname or dashed address, address, ready)`.
type EndpointName = (String, IpAddr, bool);
/// An EndpointSlice port: `(name, protocol, port)`.
type PortKey = (String, String, u16);

/// An SRV record's target.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SrvTarget {
    pub port: u16,
    pub target: String,
    /// The target's addresses (the additional section).
    pub addrs: Vec<IpAddr>,
}

/// What a name holds; all empty for a name that only has names below it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Node {
    pub addrs: Vec<IpAddr>,
    pub cname: Option<String>,
    pub srv: Vec<SrvTarget>,
}

/// The zone's fixed parts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ZoneSettings {
    /// `cluster.local`, lower case, no dots at the ends.
    pub domain: String,
    /// The `kube-dns` ClusterIP, the address of `ns.dns.<domain>`.
    pub dns_ip: Option<IpAddr>,
}

/// A built zone.
#[derive(Debug, Clone, Default)]
pub struct Zone {
    pub domain: String,
    pub dns_ip: Option<IpAddr>,
    pub names: HashMap<String, Node>,
    pub reverse: HashMap<IpAddr, Vec<String>>,
    /// `(namespace, pod IP)`.
    pub pods: HashSet<(String, IpAddr)>,
    /// Namespaces holding a Service or a pod.
    pub namespaces: HashSet<String>,
    /// The SOA's serial: when the zone was built (seconds since the epoch), as CoreDNS does.
    pub serial: u32,
}

impl Zone {
    pub fn build(cache: &Cache, settings: &ZoneSettings, serial: u32) -> Zone {
        let domain = settings.domain.clone();
        let mut zone = Zone {
            domain: domain.clone(),
            dns_ip: settings.dns_ip,
            serial,
            ..Zone::default()
        };
        for apex in [
            domain.clone(),
            format!("svc.{domain}"),
            format!("pod.{domain}"),
        ] {
            zone.names.insert(apex, Node::default());
        }
        // Endpoints by service, sorted so that answers are stable.
        let mut endpoints: HashMap<(&str, &str), Vec<EndpointName>> = HashMap::new();
        let mut endpoint_ports: HashMap<(&str, &str), BTreeSet<PortKey>> = HashMap::new();
        for ((ns, _), slice) in &cache.slices {
            let list = endpoints.entry((ns, &slice.service)).or_default();
            for e in &slice.endpoints {
                for ip in &e.ips {
                    let host = e.hostname.clone().unwrap_or_else(|| dashed(ip));
                    list.push((host, *ip, e.ready));
                }
            }
            let ports = endpoint_ports.entry((ns, &slice.service)).or_default();
            for p in &slice.ports {
                ports.insert((p.name.clone(), p.protocol.clone(), p.port));
            }
        }
        for list in endpoints.values_mut() {
            list.sort();
            list.dedup();
        }
        for ((ns, name), service) in &cache.services {
            zone.namespaces.insert(ns.clone());
            let svc = format!("{name}.{ns}.svc.{domain}");
            zone.names.entry(format!("{ns}.svc.{domain}")).or_default();
            let eps = endpoints
                .get(&(ns.as_str(), name.as_str()))
                .cloned()
                .unwrap_or_default();
            let ready: Vec<&(String, IpAddr, bool)> = eps.iter().filter(|e| e.2).collect();
            let mut node = Node::default();
            match &service.kind {
                ServiceKind::ClusterIp(ips) => {
                    node.addrs = ips.clone();
                    for ip in ips {
                        zone.reverse.entry(*ip).or_default().push(svc.clone());
                    }
                    for p in &service.ports {
                        let srv = SrvTarget {
                            port: p.port,
                            target: svc.clone(),
                            addrs: ips.clone(),
                        };
                        node.srv.push(srv.clone());
                        zone.add_port(&svc, p, vec![srv]);
                    }
                }
                ServiceKind::Headless => {
                    let mut addrs: Vec<IpAddr> = ready.iter().map(|e| e.1).collect();
                    addrs.sort();
                    addrs.dedup();
                    node.addrs = addrs;
                    let ports: Vec<Port> = endpoint_ports
                        .get(&(ns.as_str(), name.as_str()))
                        .into_iter()
                        .flatten()
                        .map(|(name, protocol, port)| Port {
                            name: name.clone(),
                            protocol: protocol.clone(),
                            port: *port,
                        })
                        .collect();
                    for p in &ports {
                        let targets: Vec<SrvTarget> = ready
                            .iter()
                            .map(|(host, ip, _)| SrvTarget {
                                port: p.port,
                                target: format!("{host}.{svc}"),
                                addrs: vec![*ip],
                            })
                            .collect();
                        node.srv.extend(targets.iter().cloned());
                        zone.add_port(&svc, p, targets);
                    }
                }
                ServiceKind::ExternalName(target) => node.cname = Some(target.clone()),
            }
            // Endpoint names, for a Service of any kind but ExternalName.
            if !matches!(service.kind, ServiceKind::ExternalName(_)) {
                for (host, ip, is_ready) in &eps {
                    let fqdn = format!("{host}.{svc}");
                    zone.reverse.entry(*ip).or_default().push(fqdn.clone());
                    if *is_ready {
                        let e = zone.names.entry(fqdn).or_default();
                        if !e.addrs.contains(ip) {
                            e.addrs.push(*ip);
                        }
                    }
                }
            }
            zone.names.insert(svc, node);
        }
        for ((ns, _), ips) in &cache.pods {
            zone.namespaces.insert(ns.clone());
            for ip in ips {
                zone.pods.insert((ns.clone(), *ip));
            }
        }
        for names in zone.reverse.values_mut() {
            names.sort();
            names.dedup();
        }
        zone
    }

    /// `_<port>._<proto>.<svc>` for a named port, and the empty `_<proto>.<svc>` above it.
    fn add_port(&mut self, svc: &str, port: &Port, targets: Vec<SrvTarget>) {
        if port.name.is_empty() {
            return;
        }
        let proto = format!("_{}.{svc}", port.protocol);
        self.names
            .entry(format!("_{}.{proto}", port.name))
            .or_default()
            .srv
            .extend(targets);
        self.names.entry(proto).or_default();
    }
}

/// An address as a DNS label: `10-42-0-5`, or the IPv6 text with `-` for `:`.
pub fn dashed(ip: &IpAddr) -> String {
    match ip {
        IpAddr::V4(v4) => v4.to_string().replace('.', "-"),
        IpAddr::V6(v6) => v6.to_string().replace(':', "-"),
    }
}

/// The address a dashed label names.
pub fn undashed(label: &str) -> Option<IpAddr> {
    if label.matches('-').count() == 3 && !label.contains(':') {
        if let Ok(ip) = label.replace('-', ".").parse::<std::net::Ipv4Addr>() {
            return Some(IpAddr::V4(ip));
        }
    }
    label
        .replace('-', ":")
        .parse::<std::net::Ipv6Addr>()
        .ok()
        .map(IpAddr::V6)
}
