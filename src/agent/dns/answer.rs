//! Answers to questions about the cluster zone, as CoreDNS's kubernetes plugin gives them:
//! records of the [`Zone`], NXDOMAIN with the zone's SOA for a name it does not hold, NODATA
//! (no error, no answer, the SOA) for a name it holds without the type asked, PTR for
//! ClusterIPs and endpoint addresses. Everything else — names outside the zone, reverse
//! names of addresses the zone does not know — is the upstream resolvers' to answer.
//!
//! Every record has a TTL of 5 s: the kubernetes plugin's default `ttl`, short because
//! endpoints change often and clients should not hold on to a deleted pod's address.

use std::net::IpAddr;

use super::wire::{
    RData, Record, Response, RCODE_NOERROR, RCODE_NXDOMAIN, TYPE_A, TYPE_AAAA, TYPE_ANY,
    TYPE_CNAME, TYPE_NS, TYPE_PTR, TYPE_SOA, TYPE_SRV,
};
use super::zone::{undashed, Zone};

/// The TTL of every record of the cluster zone (CoreDNS's default).
pub const TTL: u32 = 5;
/// How many CNAMEs inside the zone are followed before giving up.
const MAX_CNAME_CHAIN: usize = 8;

/// What to do with a question.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// Answered here.
    Local(Response),
    /// Not ours: ask the upstream resolvers.
    Forward,
    /// A CNAME out of the zone (an ExternalName Service): the response so far, to which the
    /// upstreams' answer for `target` is appended, as CoreDNS resolves it.
    Chase { response: Response, target: String },
}

/// Answers `name`/`qtype` from `zone`.
pub fn answer(zone: &Zone, name: &str, qtype: u16) -> Outcome {
    if let Some(ip) = reverse_ip(name) {
        return match zone.reverse.get(&ip) {
            Some(names) => {
                let mut r = authoritative();
                if qtype == TYPE_PTR || qtype == TYPE_ANY {
                    r.answers = names
                        .iter()
                        .map(|n| record(name, RData::Ptr(n.clone())))
                        .collect();
                }
                Outcome::Local(r)
            }
            None => Outcome::Forward,
        };
    }
    if !in_zone(&zone.domain, name) {
        return Outcome::Forward;
    }
    let mut response = authoritative();
    let mut current = name.to_string();
    for _ in 0..MAX_CNAME_CHAIN {
        match lookup(zone, &current, qtype, &mut response) {
            Step::Done => break,
            Step::Cname(target) if in_zone(&zone.domain, &target) => current = target,
            Step::Cname(target) => return Outcome::Chase { response, target },
        }
    }
    if response.answers.is_empty() {
        response.authority.push(soa(zone));
    }
    Outcome::Local(response)
}

enum Step {
    Done,
    Cname(String),
}

/// Adds what `name` holds of `qtype` to `response`; NXDOMAIN when the zone lacks the name.
fn lookup(zone: &Zone, name: &str, qtype: u16, response: &mut Response) -> Step {
    let domain = &zone.domain;
    if name == domain && matches!(qtype, TYPE_SOA | TYPE_NS | TYPE_ANY) {
        if qtype != TYPE_NS {
            response.answers.push(soa(zone));
        }
        if qtype != TYPE_SOA {
            let ns = format!("ns.dns.{domain}");
            response.answers.push(record(name, RData::Ns(ns.clone())));
            if let Some(ip) = zone.dns_ip {
                response.additional.push(address(&ns, ip));
            }
        }
        return Step::Done;
    }
    if name.strip_suffix(domain.as_str()) == Some("ns.dns.") {
        if let Some(ip) = zone.dns_ip {
            push_addrs(response, name, &[ip], qtype);
            return Step::Done;
        }
    }
    if let Some(rest) = name.strip_suffix(&format!(".pod.{domain}")) {
        return pod(zone, name, rest, qtype, response);
    }
    let Some(node) = zone.names.get(name) else {
        response.rcode = RCODE_NXDOMAIN;
        return Step::Done;
    };
    if let Some(target) = &node.cname {
        response
            .answers
            .push(record(name, RData::Cname(target.clone())));
        if qtype == TYPE_CNAME {
            return Step::Done;
        }
        return Step::Cname(target.clone());
    }
    push_addrs(response, name, &node.addrs, qtype);
    if matches!(qtype, TYPE_SRV | TYPE_ANY) && !node.srv.is_empty() {
        // Equal shares of 100 (CoreDNS's weights for records of one priority).
        let weight = (100 / node.srv.len()) as u16;
        for srv in &node.srv {
            response.answers.push(record(
                name,
                RData::Srv {
                    priority: 0,
                    weight,
                    port: srv.port,
                    target: srv.target.clone(),
                },
            ));
            for ip in &srv.addrs {
                let extra = address(&srv.target, *ip);
                if !response.additional.contains(&extra) {
                    response.additional.push(extra);
                }
            }
        }
    }
    Step::Done
}

/// `<a-b-c-d>.<ns>.pod.<domain>`: the A record of a pod of that namespace with that IP
/// (CoreDNS's `pods verified`: no record for an address no pod has).
fn pod(zone: &Zone, name: &str, rest: &str, qtype: u16, response: &mut Response) -> Step {
    match rest.split_once('.') {
        Some((label, ns)) if !ns.contains('.') => {
            match undashed(label).filter(|ip| zone.pods.contains(&(ns.to_string(), *ip))) {
                Some(ip) => push_addrs(response, name, &[ip], qtype),
                None => response.rcode = RCODE_NXDOMAIN,
            }
        }
        // `<ns>.pod.<domain>`: a name while the namespace has something in it.
        None if zone.namespaces.contains(rest) => {}
        _ => response.rcode = RCODE_NXDOMAIN,
    }
    Step::Done
}

fn push_addrs(response: &mut Response, name: &str, addrs: &[IpAddr], qtype: u16) {
    for ip in addrs {
        let wanted = match ip {
            IpAddr::V4(_) => matches!(qtype, TYPE_A | TYPE_ANY),
            IpAddr::V6(_) => matches!(qtype, TYPE_AAAA | TYPE_ANY),
        };
        if wanted {
            response.answers.push(address(name, *ip));
        }
    }
}

fn authoritative() -> Response {
    Response {
        rcode: RCODE_NOERROR,
        authoritative: true,
        ..Response::default()
    }
}

/// The zone's SOA, in CoreDNS's shape: `ns.dns.<domain>`, `hostmaster.<domain>`, the build
/// time as serial, 7200 1800 86400, and the TTL as the negative-caching minimum.
pub fn soa(zone: &Zone) -> Record {
    let domain = &zone.domain;
    record(
        domain,
        RData::Soa {
            mname: format!("ns.dns.{domain}"),
            rname: format!("hostmaster.{domain}"),
            serial: zone.serial,
            refresh: 7200,
            retry: 1800,
            expire: 86400,
            minimum: TTL,
        },
    )
}

fn record(name: &str, data: RData) -> Record {
    Record {
        name: name.to_string(),
        ttl: TTL,
        data,
    }
}

fn address(name: &str, ip: IpAddr) -> Record {
    record(
        name,
        match ip {
            IpAddr::V4(v4) => RData::A(v4),
            IpAddr::V6(v6) => RData::Aaaa(v6),
        },
    )
}

fn in_zone(domain: &str, name: &str) -> bool {
    name == domain
        || name
            .strip_suffix(domain)
            .is_some_and(|head| head.ends_with('.'))
}

/// The address of a full reverse name (`4.3.2.1.in-addr.arpa`, 32 nibbles `.ip6.arpa`).
pub fn reverse_ip(name: &str) -> Option<IpAddr> {
    if let Some(head) = name.strip_suffix(".in-addr.arpa") {
        let mut octets = [0u8; 4];
        let labels: Vec<&str> = head.split('.').collect();
        if labels.len() != 4 {
            return None;
        }
        for (i, label) in labels.iter().rev().enumerate() {
            octets[i] = label.parse().ok()?;
        }
        return Some(IpAddr::from(octets));
    }
    let head = name.strip_suffix(".ip6.arpa")?;
    let nibbles: Vec<&str> = head.split('.').collect();
    if nibbles.len() != 32 {
        return None;
    }
    let mut bytes = [0u8; 16];
    for (i, nibble) in nibbles.iter().rev().enumerate() {
        let v = u8::from_str_radix(nibble, 16)
            .ok()
            .filter(|_| nibble.len() == 1)?;
        bytes[i / 2] |= if i % 2 == 0 { v << 4 } else { v };
    }
    Some(IpAddr::from(bytes))
}

#[cfg(test)]
mod tests;
