//! The Service rules as nftables text: a pure function of what the API says (Services,
//! EndpointSlices), this node's name, the cluster CIDR and the cluster DNS redirect, so it can
//! be tested without a kernel. The shape follows kube-proxy's nftables proxier:
//!
//! - `services` (nat, prerouting and output) looks the destination up in the verdict maps
//!   `service-ips` (`address . protocol . port`: ClusterIPs, external IPs, load-balancer
//!   ingress IPs) and, for addresses of this node other than loopback, `service-nodeports`
//!   (`protocol . port`);
//! - a chain per Service port (`svc-…`) DNATs to one of its endpoints picked with `numgen
//!   random mod N` from an anonymous map (one rule, no chain per endpoint: the first sync of
//!   1,000 Services with 10 endpoints each declares about 1,000 chains instead of 11,000, and
//!   the kernel's and `nft`'s time grows with chains and rules). `local-…` does the same over
//!   this node's endpoints, for the `Local` traffic policies, and `ext-…` is the way in of
//!   NodePorts and external addresses (masqueraded under `externalTrafficPolicy: Cluster`;
//!   under `Local` the client's address is kept and only this node's endpoints are used);
//! - traffic to a ClusterIP not from the cluster CIDR gets the masquerade mark, and
//!   `masquerading` (nat postrouting) masquerades what carries it, pod traffic leaving the
//!   cluster CIDR, and hairpin traffic (an endpoint reaching itself through its Service: after
//!   DNAT its source and destination are the same address, looked up in the `hairpin` set of
//!   `endpoint . endpoint` pairs, which kube-proxy does with a rule per endpoint instead);
//! - filter chains at priority -110 (before DNAT) reject connections to Service ports with no
//!   endpoints (`no-endpoint-services`, `no-endpoint-nodeports`): TCP reset, ICMP
//!   port-unreachable otherwise, so clients fail at once instead of timing out;
//! - `sessionAffinity: ClientIP`: those Service ports keep kube-proxy's chain per endpoint
//!   (`ep-…`, DNAT), with one dynamic set per endpoint of the client addresses it served and
//!   the Service's timeout, checked before the random pick;
//! - endpoints that are terminating but still serving are used only when no ready one is left.
//!
//! How the text is applied (one transaction, table kept, only changed chains rewritten,
//! stale ones deleted) is [`transaction`]'s and [`transaction_from`]'s; running it is
//! `tools.rs`'s.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::net::Ipv4Addr;

use super::model::{Cidr, Endpoint, ObjectKey, Protocol, Service, ServicePort, Snapshot};

/// The table the agent owns (family `inet`).
pub const TABLE: &str = "litek8s";
/// The packet mark bit asking `masquerading` to masquerade (kube-proxy's bit).
pub const MASQUERADE_MARK: u32 = 0x4000;
/// The set of `address . address` pairs, one per endpoint, that finds hairpin traffic.
const HAIRPIN_SET: &str = "hairpin";
const HAIRPIN_TYPE: &str = "ipv4_addr . ipv4_addr";

/// The longest chain or set name written (the kernel takes 256 bytes).
const MAX_NAME: usize = 200;

/// Where traffic to the cluster DNS address goes: this node's DNS responder.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DnsRedirect {
    /// The `kube-dns` ClusterIP (`--cluster-dns`).
    pub cluster_ip: Ipv4Addr,
    /// The address the responder listens on (the pod bridge's gateway address).
    pub target: Ipv4Addr,
}

/// What the rules depend on besides the API objects.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RulesetConfig {
    pub node_name: String,
    pub cluster_cidr: Cidr,
    pub dns: Option<DnsRedirect>,
}

/// A generated ruleset: the objects it declares and the text declaring them.
#[derive(Debug, Clone, Default)]
pub struct Ruleset {
    /// Every chain of the table with its block (hook and rules): a sync rewrites only the
    /// chains whose block changed.
    pub chains: BTreeMap<String, String>,
    /// Every set of the table (affinity sets) with its block.
    pub sets: BTreeMap<String, String>,
    /// The verdict maps' blocks and the hairpin set's, with their elements (rewritten at
    /// every sync).
    pub maps: Vec<String>,
    /// The whole `table inet litek8s { … }` block.
    pub body: String,
    /// UDP endpoints (`address`, `port`) traffic may be DNATed to: when one goes, its
    /// conntrack entries are flushed.
    pub udp_endpoints: BTreeSet<(Ipv4Addr, u16)>,
    /// What was left out and why, to be logged once.
    pub warnings: Vec<String>,
    pub stats: Stats,
}

/// Counts for the log and the bench.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Stats {
    pub service_ports: usize,
    /// DNAT targets: one per endpoint of each Service port.
    pub endpoints: usize,
    /// Chains per endpoint (Service ports with session affinity only).
    pub endpoint_chains: usize,
    pub rejected: usize,
}

/// The maps and their key types.
const MAPS: [(&str, &str); 4] = [
    ("service-ips", "ipv4_addr . inet_proto . inet_service"),
    ("service-nodeports", "inet_proto . inet_service"),
    (
        "no-endpoint-services",
        "ipv4_addr . inet_proto . inet_service",
    ),
    ("no-endpoint-nodeports", "inet_proto . inet_service"),
];

/// The fixed chains: name, base-chain declaration (if hooked), rules.
fn fixed_chains(cluster: Cidr) -> Vec<(&'static str, Option<&'static str>, Vec<String>)> {
    let not_loopback = "fib daddr type local ip daddr != 127.0.0.0/8";
    vec![
        (
            "filter-input",
            Some("type filter hook input priority -110; policy accept;"),
            vec![
                "ct state new jump nodeport-endpoints-check".into(),
                "ct state new jump service-endpoints-check".into(),
            ],
        ),
        (
            "filter-forward",
            Some("type filter hook forward priority -110; policy accept;"),
            vec!["ct state new jump service-endpoints-check".into()],
        ),
        (
            "filter-output",
            Some("type filter hook output priority -110; policy accept;"),
            vec!["ct state new jump service-endpoints-check".into()],
        ),
        (
            "nat-prerouting",
            Some("type nat hook prerouting priority -100; policy accept;"),
            vec!["jump services".into()],
        ),
        (
            "nat-output",
            Some("type nat hook output priority -100; policy accept;"),
            vec!["jump services".into()],
        ),
        (
            "nat-postrouting",
            Some("type nat hook postrouting priority 100; policy accept;"),
            vec!["jump masquerading".into()],
        ),
        (
            "services",
            None,
            vec![
                "ip daddr . meta l4proto . th dport vmap @service-ips".into(),
                format!("{not_loopback} meta l4proto . th dport vmap @service-nodeports"),
            ],
        ),
        (
            "service-endpoints-check",
            None,
            vec!["ip daddr . meta l4proto . th dport vmap @no-endpoint-services".into()],
        ),
        (
            "nodeport-endpoints-check",
            None,
            vec![format!(
                "{not_loopback} meta l4proto . th dport vmap @no-endpoint-nodeports"
            )],
        ),
        (
            "reject-chain",
            None,
            vec![
                "meta l4proto tcp reject with tcp reset".into(),
                "reject with icmpx port-unreachable".into(),
            ],
        ),
        (
            "mark-for-masquerade",
            None,
            vec![format!("meta mark set meta mark | {MASQUERADE_MARK:#x}")],
        ),
        (
            "masquerading",
            None,
            vec![
                // Pods reaching outside the cluster: pod-to-pod keeps its addresses.
                format!("ip saddr {cluster} ip daddr != {cluster} masquerade fully-random"),
                // Hairpin: the reply must come back through this node to be un-DNATed.
                format!(
                    "ct status dnat ip saddr . ip daddr @{HAIRPIN_SET} masquerade fully-random"
                ),
                format!("meta mark & {MASQUERADE_MARK:#x} == 0 return"),
                format!("meta mark set meta mark ^ {MASQUERADE_MARK:#x}"),
                "masquerade fully-random".into(),
            ],
        ),
    ]
}

/// An nft identifier made of `parts` (API names are DNS labels already; anything else is
/// replaced so a name can never break the text).
fn name(prefix: &str, parts: &str) -> String {
    let mut out = String::with_capacity(prefix.len() + parts.len());
    out.push_str(prefix);
    out.extend(parts.chars().map(|c| {
        if c.is_ascii_alphanumeric() || "-_./".contains(c) {
            c
        } else {
            '_'
        }
    }));
    out.truncate(MAX_NAME);
    out
}

/// The endpoints a Service port uses: the ready ones, or when none is ready the ones still
/// serving while terminating (kube-proxy's rule).
fn usable<'a>(endpoints: &[&'a Endpoint]) -> Vec<&'a Endpoint> {
    let ready: Vec<_> = endpoints.iter().copied().filter(|e| e.ready).collect();
    if !ready.is_empty() {
        return ready;
    }
    endpoints
        .iter()
        .copied()
        .filter(|e| e.serving && e.terminating)
        .collect()
}

/// The endpoints (address, target port) of `port` of `service`, deduplicated.
fn endpoints_of<'a>(
    snapshot: &'a Snapshot,
    service: &ObjectKey,
    port: &ServicePort,
) -> Vec<(&'a Endpoint, u16)> {
    let mut seen = BTreeSet::new();
    let mut out = Vec::new();
    let from = ObjectKey {
        namespace: service.namespace.clone(),
        name: String::new(),
    };
    for slice in snapshot.slices.range(from..).map(|(_, s)| s) {
        if slice.key.namespace != service.namespace {
            break;
        }
        if slice.service != *service {
            continue;
        }
        let Some(target) = slice
            .ports
            .iter()
            .find(|p| p.name == port.name && p.protocol == port.protocol)
        else {
            continue;
        };
        for e in &slice.endpoints {
            if seen.insert((e.ip, target.port)) {
                out.push((e, target.port));
            }
        }
    }
    out
}

/// What a lookup key leads to.
enum Verdict {
    Goto(String),
    Reject,
    Drop,
}

impl Verdict {
    fn text(&self) -> String {
        match self {
            Verdict::Goto(chain) => format!("goto {chain}"),
            Verdict::Reject => "goto reject-chain".into(),
            Verdict::Drop => "drop".into(),
        }
    }
}

/// The ruleset under construction.
#[derive(Default)]
struct Builder {
    chains: BTreeMap<String, Vec<String>>,
    sets: BTreeMap<String, String>,
    service_ips: BTreeMap<(Ipv4Addr, Protocol, u16), String>,
    nodeports: BTreeMap<(Protocol, u16), String>,
    no_endpoint_ips: BTreeMap<(Ipv4Addr, Protocol, u16), String>,
    no_endpoint_nodeports: BTreeMap<(Protocol, u16), String>,
    /// Every endpoint address DNATed to (the hairpin set's elements).
    hairpin: BTreeSet<Ipv4Addr>,
    out: Ruleset,
}

impl Builder {
    /// Routes `(ip, protocol, port)` to `verdict`; the first Service to claim a key keeps it.
    fn address(&mut self, owner: &str, key: (Ipv4Addr, Protocol, u16), verdict: Verdict) {
        let taken = self.service_ips.contains_key(&key) || self.no_endpoint_ips.contains_key(&key);
        if taken {
            self.out.warnings.push(format!(
                "{owner}: {}:{}/{} is already another Service's: left out",
                key.0,
                key.2,
                key.1.nft()
            ));
            return;
        }
        match verdict {
            Verdict::Goto(_) => self.service_ips.insert(key, verdict.text()),
            _ => self.no_endpoint_ips.insert(key, verdict.text()),
        };
    }

    fn node_port(&mut self, owner: &str, key: (Protocol, u16), verdict: Verdict) {
        let taken =
            self.nodeports.contains_key(&key) || self.no_endpoint_nodeports.contains_key(&key);
        if taken {
            self.out.warnings.push(format!(
                "{owner}: node port {}/{} is already another Service's: left out",
                key.1,
                key.0.nft()
            ));
            return;
        }
        match verdict {
            Verdict::Goto(_) => self.nodeports.insert(key, verdict.text()),
            _ => self.no_endpoint_nodeports.insert(key, verdict.text()),
        };
    }

    /// A chain DNATing to one of `targets` (address, port), picked at random.
    fn dnat_chain(
        &mut self,
        chain: &str,
        first_rules: Vec<String>,
        proto: &str,
        targets: &[(Ipv4Addr, u16)],
    ) {
        let mut rules = first_rules;
        match targets {
            [(ip, port)] => rules.push(format!("meta l4proto {proto} dnat ip to {ip}:{port}")),
            _ => {
                let arms: Vec<String> = targets
                    .iter()
                    .enumerate()
                    .map(|(i, (ip, port))| format!("{i} : {ip} . {port}"))
                    .collect();
                rules.push(format!(
                    "meta l4proto {proto} dnat ip to numgen random mod {} map {{ {} }}",
                    targets.len(),
                    arms.join(", ")
                ));
            }
        }
        self.chains.insert(chain.to_string(), rules);
    }

    /// A chain picking one of `endpoints` (endpoint chain, affinity set), at random.
    fn balancing_chain(
        &mut self,
        chain: &str,
        first_rules: Vec<String>,
        endpoints: &[(String, Option<String>)],
    ) {
        let mut rules = first_rules;
        for (ep_chain, affinity) in endpoints {
            if let Some(set) = affinity {
                rules.push(format!("ip saddr @{set} goto {ep_chain}"));
            }
        }
        match endpoints {
            [(only, _)] => rules.push(format!("goto {only}")),
            _ => {
                let arms: Vec<String> = endpoints
                    .iter()
                    .enumerate()
                    .map(|(i, (c, _))| format!("{i} : goto {c}"))
                    .collect();
                rules.push(format!(
                    "numgen random mod {} vmap {{ {} }}",
                    endpoints.len(),
                    arms.join(", ")
                ));
            }
        }
        self.chains.insert(chain.to_string(), rules);
    }

    fn service(&mut self, snapshot: &Snapshot, config: &RulesetConfig, service: &Service) {
        let cluster = config.cluster_cidr;
        for port in &service.ports {
            self.out.stats.service_ports += 1;
            let proto = port.protocol.nft();
            let id = format!("{}/{proto}/{}", service.key, port.port);
            let found = endpoints_of(snapshot, &service.key, port);
            let all: Vec<&Endpoint> = found.iter().map(|(e, _)| *e).collect();
            let all = usable(&all);
            let local_candidates: Vec<&Endpoint> = found
                .iter()
                .map(|(e, _)| *e)
                .filter(|e| e.node.as_deref() == Some(config.node_name.as_str()))
                .collect();
            let local = usable(&local_candidates);
            let target = |e: &Endpoint| {
                found
                    .iter()
                    .find(|(f, _)| std::ptr::eq(*f, e))
                    .map_or(0, |(_, p)| *p)
            };

            for e in all.iter().chain(local.iter()) {
                self.hairpin.insert(e.ip);
                if port.protocol == Protocol::Udp {
                    self.out.udp_endpoints.insert((e.ip, target(e)));
                }
            }
            self.out.stats.endpoints += all.len();
            let svc_chain = name("svc-", &id);
            let local_chain = name("local-", &id);
            let ext_chain = name("ext-", &id);
            let wants_local = service.external_local || service.internal_local;
            let masquerade = format!("ip saddr != {cluster} jump mark-for-masquerade");
            match service.affinity_seconds {
                None => {
                    let targets = |eps: &[&Endpoint]| -> Vec<(Ipv4Addr, u16)> {
                        eps.iter().map(|e| (e.ip, target(e))).collect()
                    };
                    if !all.is_empty() {
                        self.dnat_chain(&svc_chain, vec![masquerade], proto, &targets(&all));
                    }
                    if wants_local && !local.is_empty() {
                        self.dnat_chain(&local_chain, Vec::new(), proto, &targets(&local));
                    }
                }
                Some(seconds) => {
                    // The endpoint chains, with their affinity sets.
                    let endpoint_chain = |b: &mut Builder, e: &Endpoint| {
                        let port_to = target(e);
                        let suffix = format!("{id}__{}/{port_to}", e.ip);
                        let chain = name("ep-", &suffix);
                        let set = name(&format!("aff-{seconds}-"), &suffix);
                        if !b.chains.contains_key(&chain) {
                            b.sets.insert(
                                set.clone(),
                                format!(
                                    "type ipv4_addr; flags dynamic,timeout; timeout {seconds}s;"
                                ),
                            );
                            let rules = vec![
                                format!("update @{set} {{ ip saddr }}"),
                                format!("meta l4proto {proto} dnat ip to {}:{port_to}", e.ip),
                            ];
                            b.chains.insert(chain.clone(), rules);
                            b.out.stats.endpoint_chains += 1;
                        }
                        (chain, Some(set))
                    };
                    let all_eps: Vec<_> = all.iter().map(|e| endpoint_chain(self, e)).collect();
                    let local_eps: Vec<_> = local.iter().map(|e| endpoint_chain(self, e)).collect();
                    if !all_eps.is_empty() {
                        self.balancing_chain(&svc_chain, vec![masquerade], &all_eps);
                    }
                    if wants_local && !local_eps.is_empty() {
                        self.balancing_chain(&local_chain, Vec::new(), &local_eps);
                    }
                }
            }

            // Cluster IPs.
            let internal = match (service.internal_local, all.is_empty(), local.is_empty()) {
                (_, true, _) => Verdict::Reject,
                (true, false, true) => Verdict::Drop,
                (true, false, false) => Verdict::Goto(local_chain.clone()),
                (false, false, _) => Verdict::Goto(svc_chain.clone()),
            };
            for ip in &service.cluster_ips {
                let verdict = match &internal {
                    Verdict::Goto(c) => Verdict::Goto(c.clone()),
                    Verdict::Reject => Verdict::Reject,
                    Verdict::Drop => Verdict::Drop,
                };
                self.address(&id, (*ip, port.protocol, port.port), verdict);
            }
            if matches!(internal, Verdict::Reject) {
                self.out.stats.rejected += 1;
            }

            // The ways in from outside: node ports, external and load-balancer addresses.
            if port.node_port.is_none() && service.external_ips.is_empty() {
                continue;
            }
            let external = if all.is_empty() {
                Verdict::Reject
            } else if service.external_local && local.is_empty() {
                Verdict::Drop
            } else {
                let rules = if service.external_local {
                    vec![
                        // Pods and this node itself may use every endpoint.
                        format!("ip saddr {cluster} goto {svc_chain}"),
                        "fib saddr type local jump mark-for-masquerade".into(),
                        format!("fib saddr type local goto {svc_chain}"),
                        format!("goto {local_chain}"),
                    ]
                } else {
                    vec![
                        "jump mark-for-masquerade".into(),
                        format!("goto {svc_chain}"),
                    ]
                };
                self.chains.insert(ext_chain.clone(), rules);
                Verdict::Goto(ext_chain.clone())
            };
            let again = |v: &Verdict| match v {
                Verdict::Goto(c) => Verdict::Goto(c.clone()),
                Verdict::Reject => Verdict::Reject,
                Verdict::Drop => Verdict::Drop,
            };
            if let Some(node_port) = port.node_port {
                self.node_port(&id, (port.protocol, node_port), again(&external));
            }
            for ip in &service.external_ips {
                self.address(&id, (*ip, port.protocol, port.port), again(&external));
            }
        }
    }

    fn finish(mut self, cluster: Cidr) -> Ruleset {
        let elements = |entries: Vec<(String, &String)>| -> String {
            if entries.is_empty() {
                return String::new();
            }
            let mut text = String::from("\t\telements = {\n");
            for (key, verdict) in entries {
                let _ = writeln!(text, "\t\t\t{key} : {verdict},");
            }
            text.push_str("\t\t}\n");
            text
        };
        let ip_key = |(ip, proto, port): &(Ipv4Addr, Protocol, u16)| {
            format!("{ip} . {} . {port}", proto.nft())
        };
        let port_key = |(proto, port): &(Protocol, u16)| format!("{} . {port}", proto.nft());
        for (map, key_type) in MAPS {
            let entries = match map {
                "service-ips" => self
                    .service_ips
                    .iter()
                    .map(|(k, v)| (ip_key(k), v))
                    .collect(),
                "service-nodeports" => self
                    .nodeports
                    .iter()
                    .map(|(k, v)| (port_key(k), v))
                    .collect(),
                "no-endpoint-services" => self
                    .no_endpoint_ips
                    .iter()
                    .map(|(k, v)| (ip_key(k), v))
                    .collect(),
                _ => self
                    .no_endpoint_nodeports
                    .iter()
                    .map(|(k, v)| (port_key(k), v))
                    .collect(),
            };
            self.out.maps.push(format!(
                "\tmap {map} {{\n\t\ttype {key_type} : verdict;\n{}\t}}\n",
                elements(entries)
            ));
        }
        let pairs: Vec<String> = self
            .hairpin
            .iter()
            .map(|ip| format!("{ip} . {ip}"))
            .collect();
        let elements = if pairs.is_empty() {
            String::new()
        } else {
            format!("\t\telements = {{ {} }}\n", pairs.join(", "))
        };
        self.out.maps.push(format!(
            "\tset {HAIRPIN_SET} {{\n\t\ttype {HAIRPIN_TYPE};\n{elements}\t}}\n"
        ));
        for (set, declaration) in &self.sets {
            self.out
                .sets
                .insert(set.clone(), format!("\tset {set} {{ {declaration} }}\n"));
        }
        for (chain, hook, rules) in fixed_chains(cluster) {
            self.out
                .chains
                .insert(chain.to_string(), chain_block(chain, hook, &rules));
        }
        for (chain, rules) in &self.chains {
            self.out
                .chains
                .insert(chain.clone(), chain_block(chain, None, rules));
        }
        let blocks = self
            .out
            .maps
            .iter()
            .chain(self.out.sets.values())
            .chain(self.out.chains.values());
        self.out.body = table_block(blocks);
        self.out
    }
}

/// `table inet litek8s { blocks }`.
fn table_block<'a>(blocks: impl Iterator<Item = &'a String>) -> String {
    let mut body = format!("table inet {TABLE} {{\n");
    for block in blocks {
        body.push_str(block);
    }
    body.push_str("}\n");
    body
}

/// One chain block; every statement on its own line (nft 1.0.6 wants a newline or `;`
/// before a closing brace).
fn chain_block(chain: &str, hook: Option<&str>, rules: &[String]) -> String {
    let mut body = String::with_capacity(64 + 64 * rules.len());
    let _ = writeln!(body, "\tchain {chain} {{");
    if let Some(hook) = hook {
        let _ = writeln!(body, "\t\t{hook}");
    }
    for rule in rules {
        let _ = writeln!(body, "\t\t{rule}");
    }
    body.push_str("\t}\n");
    body
}

/// The ruleset for `snapshot` on the node `config` describes.
pub fn render(snapshot: &Snapshot, config: &RulesetConfig) -> Ruleset {
    let mut b = Builder::default();
    if let Some(dns) = config.dns {
        // Before any Service: the DNS address belongs to this node's responder whatever
        // endpoints a `kube-dns` Service may list.
        let chain = "cluster-dns".to_string();
        b.chains.insert(
            chain.clone(),
            ["udp", "tcp"]
                .iter()
                .map(|p| format!("meta l4proto {p} dnat ip to {}:53", dns.target))
                .collect(),
        );
        for proto in [Protocol::Udp, Protocol::Tcp] {
            b.address(
                "cluster DNS",
                (dns.cluster_ip, proto, 53),
                Verdict::Goto(chain.clone()),
            );
        }
    }
    for service in snapshot.services.values() {
        b.service(snapshot, config, service);
    }
    b.finish(config.cluster_cidr)
}

/// What the table holds now (read back from the kernel): what a sync must delete.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Existing {
    pub chains: BTreeSet<String>,
    pub sets: BTreeSet<String>,
}

impl Existing {
    /// Reads `nft -t list table inet litek8s` output (terse: no set elements).
    pub fn parse(listing: &str) -> Existing {
        let mut out = Existing::default();
        for line in listing.lines() {
            let words: Vec<&str> = line.split_whitespace().collect();
            match words.as_slice() {
                ["chain", name, "{", ..] => {
                    out.chains.insert((*name).to_string());
                }
                ["set" | "map", name, "{", ..] => {
                    out.sets.insert((*name).to_string());
                }
                _ => {}
            }
        }
        out
    }
}

/// The one transaction bringing the table from `existing` (read from the kernel) to
/// `ruleset`: the table and its maps declared (so the flushes that follow cannot fail), every
/// rule and map element removed, the whole ruleset added, what is no longer declared deleted.
/// The kernel applies it at once: no packet ever sees an empty table, and the affinity sets
/// keep their entries.
pub fn transaction(ruleset: &Ruleset, existing: &Existing) -> String {
    let mut text = String::with_capacity(ruleset.body.len() + 1024);
    let _ = writeln!(text, "table inet {TABLE} {{");
    for (map, key_type) in MAPS {
        let _ = writeln!(text, "\tmap {map} {{\n\t\ttype {key_type} : verdict;\n\t}}");
    }
    let _ = writeln!(
        text,
        "\tset {HAIRPIN_SET} {{\n\t\ttype {HAIRPIN_TYPE};\n\t}}"
    );
    text.push_str("}\n");
    let _ = writeln!(text, "flush table inet {TABLE}");
    flush_refilled(&mut text);
    text.push_str(&ruleset.body);
    for chain in existing
        .chains
        .iter()
        .filter(|c| !ruleset.chains.contains_key(*c))
    {
        let _ = writeln!(text, "delete chain inet {TABLE} {chain}");
    }
    for set in existing.sets.iter().filter(|s| !is_declared(ruleset, s)) {
        let _ = writeln!(text, "delete set inet {TABLE} {set}");
    }
    text
}

/// Whether `set` (a set or a map) is one of `ruleset`'s.
fn is_declared(ruleset: &Ruleset, set: &str) -> bool {
    set == HAIRPIN_SET || ruleset.sets.contains_key(set) || MAPS.iter().any(|(m, _)| *m == set)
}

/// Empties the maps and the set every sync fills again.
fn flush_refilled(text: &mut String) {
    for (map, _) in MAPS {
        let _ = writeln!(text, "flush map inet {TABLE} {map}");
    }
    let _ = writeln!(text, "flush set inet {TABLE} {HAIRPIN_SET}");
}

/// The transaction from `previous` (the last ruleset applied) to `ruleset`: the maps
/// refilled, only the chains whose block changed flushed and written again, new sets added,
/// what is gone deleted. A sync after one endpoint changed touches a few chains instead of
/// every chain of every Service.
pub fn transaction_from(ruleset: &Ruleset, previous: &Ruleset) -> String {
    let mut text = String::with_capacity(16 * 1024);
    flush_refilled(&mut text);
    let mut blocks: Vec<&String> = ruleset.maps.iter().collect();
    for (set, block) in &ruleset.sets {
        if !previous.sets.contains_key(set) {
            blocks.push(block);
        }
    }
    for (chain, block) in &ruleset.chains {
        match previous.chains.get(chain) {
            Some(old) if old == block => continue,
            Some(_) => {
                let _ = writeln!(text, "flush chain inet {TABLE} {chain}");
            }
            None => {}
        }
        blocks.push(block);
    }
    text.push_str(&table_block(blocks.into_iter()));
    for chain in previous.chains.keys() {
        if !ruleset.chains.contains_key(chain) {
            let _ = writeln!(text, "delete chain inet {TABLE} {chain}");
        }
    }
    for set in previous.sets.keys() {
        if !ruleset.sets.contains_key(set) {
            let _ = writeln!(text, "delete set inet {TABLE} {set}");
        }
    }
    text
}

#[cfg(test)]
#[path = "ruleset_tests.rs"]
mod tests;
