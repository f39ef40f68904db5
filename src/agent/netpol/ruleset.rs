//! NetworkPolicy as nftables text: a pure function of the policies, pods and namespaces the
//! API holds and this node's name, so it can be tested without a kernel. Only this node's
//! pods are guarded here (every node guards its own); the peers a rule names are pods
//! anywhere in the cluster.
//!
//! The table `inet litek8s-netpol`:
//! - `forward-ingress`, `forward-egress` (filter, hook forward, priority 0) and
//!   `input-egress` (hook input: a pod reaching an address of the node, such as the cluster
//!   DNS responder on the bridge's gateway) accept what conntrack knows (`established`,
//!   `related`: replies to allowed connections), then send traffic to a pod isolated for
//!   ingress (set `ingress-isolated`) through `ingress`, and traffic from a pod isolated for
//!   egress (`egress-isolated`) through `egress`. Being two base chains, each direction is
//!   judged on its own: an `accept` in one does not skip the other. The hooks come after nat
//!   prerouting (-100), so Service traffic is judged on the pod the proxy's DNAT chose.
//! - `ingress` has one rule per policy: `ip daddr @in/<ns>/<name>/pods jump in/<ns>/<name>`,
//!   then `drop`: a connection no selecting policy allows is dropped (the union of policies).
//!   `egress` is the same on the source address with `out/…` chains.
//! - A policy's chain has a rule per (rule, protocol): the peers as an interval set
//!   (`…/<r>/peers`: pod addresses and `ipBlock`s with their `except` cut out, merged into
//!   ranges, so a `/0` is one range), numeric ports and `endPort` ranges as an anonymous set,
//!   named ports as a set of `address . protocol . port` (`…/<r>/named`) resolved from the
//!   containers' ports of the pods that name them. The rule count follows the policies' own
//!   rules, never pods × peers: pods are set elements. Sets with the same elements are
//!   declared once, under the first policy's name, and shared.
//! - Nothing hooks `output`: the node itself reaches its pods whatever the policies say, as
//!   kubelet's probes need.
//!
//! How it is applied: one transaction that creates, deletes and declares the table again
//! ([`transaction`]): the kernel swaps it at once; no state lives in this table.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fmt::Write as _;
use std::net::Ipv4Addr;

use super::model::{Namespaces, Peer, Pod, Policy, PortRule, Ports, Rule, Snapshot};
use crate::agent::proxy::model::{Cidr, Protocol};
use crate::kube::labels::Labels;
use crate::kube::selectors::LabelSelector;

/// The table the policies live in (family `inet`), apart from the proxy's `inet litek8s`:
/// each can be turned off (`--disable-proxy`, `--disable-network-policy`) and fail to apply
/// without touching the other, and the filter hooks do not need the proxy's chains.
pub const TABLE: &str = "litek8s-netpol";
/// Names past this are cut and end in a hash (the kernel takes 256 bytes).
const MAX_NAME: usize = 180;

/// A generated ruleset.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Ruleset {
    /// The whole `table inet litek8s-netpol { … }` block.
    pub body: String,
    /// Policies left out and why, to be logged once.
    pub warnings: Vec<String>,
    pub stats: Stats,
}

/// Counts for the log and the bench.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Stats {
    /// Policies selecting at least one pod of this node.
    pub policies: usize,
    pub skipped: usize,
    /// Rules in the policies' chains.
    pub rules: usize,
    /// Elements of every set.
    pub elements: usize,
    pub isolated_ingress: usize,
    pub isolated_egress: usize,
}

/// Ingress or egress.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Direction {
    Ingress,
    Egress,
}

impl Direction {
    fn prefix(self) -> &'static str {
        match self {
            Direction::Ingress => "in",
            Direction::Egress => "out",
        }
    }

    /// The address of the guarded pod.
    fn own(self) -> &'static str {
        match self {
            Direction::Ingress => "daddr",
            Direction::Egress => "saddr",
        }
    }

    /// The address of the peer.
    fn peer(self) -> &'static str {
        match self {
            Direction::Ingress => "saddr",
            Direction::Egress => "daddr",
        }
    }
}

/// An nft identifier for `text`: characters nft would misread replaced, long names cut and
/// made unique again with a hash of the whole.
fn ident(text: &str) -> String {
    let mut out: String = text
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || "-_./".contains(c) {
                c
            } else {
                '_'
            }
        })
        .collect();
    if out.len() > MAX_NAME {
        // FNV-1a: stable across runs and builds, unlike the std hasher.
        let hash = text.bytes().fold(0xcbf2_9ce4_8422_2325_u64, |h, b| {
            (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3)
        });
        out.truncate(MAX_NAME - 17);
        let _ = write!(out, "~{hash:016x}");
    }
    out
}

/// Whether the namespace `ns` has labels `selector` matches.
fn namespace_matches(snapshot: &Snapshot, selector: &LabelSelector, ns: &str) -> bool {
    match snapshot.namespaces.get(ns) {
        Some(labels) => selector.matches(labels),
        // Not seen (yet): it has at least the label the API server always sets.
        None => {
            let labels: Labels = [("kubernetes.io/metadata.name", ns)].into_iter().collect();
            selector.matches(&labels)
        }
    }
}

/// Disjoint, sorted address ranges (inclusive) covering `ranges`.
pub fn merge(mut ranges: Vec<(u32, u32)>) -> Vec<(u32, u32)> {
    ranges.sort_unstable();
    let mut out: Vec<(u32, u32)> = Vec::with_capacity(ranges.len());
    for (a, b) in ranges {
        match out.last_mut() {
            Some(last) if u64::from(a) <= u64::from(last.1) + 1 => last.1 = last.1.max(b),
            _ => out.push((a, b)),
        }
    }
    out
}

fn cidr_range(c: Cidr) -> (u32, u32) {
    let first = u32::from(c.addr);
    let size = if c.prefix == 0 {
        u32::MAX
    } else {
        (1u32 << (32 - u32::from(c.prefix))) - 1
    };
    (first, first.saturating_add(size))
}

/// `cidr` without `except`, as disjoint ranges.
pub fn block_ranges(cidr: Cidr, except: &[Cidr]) -> Vec<(u32, u32)> {
    let mut ranges = vec![cidr_range(cidr)];
    for hole in merge(except.iter().map(|c| cidr_range(*c)).collect()) {
        let mut next = Vec::with_capacity(ranges.len() + 1);
        for (a, b) in ranges {
            if hole.1 < a || hole.0 > b {
                next.push((a, b));
                continue;
            }
            if hole.0 > a {
                next.push((a, hole.0 - 1));
            }
            if hole.1 < b {
                next.push((hole.1 + 1, b));
            }
        }
        ranges = next;
    }
    ranges
}

/// Whether `ip` is in `ranges` (sorted, disjoint).
fn contains(ranges: &[(u32, u32)], ip: Ipv4Addr) -> bool {
    let ip = u32::from(ip);
    let at = ranges.partition_point(|(_, b)| *b < ip);
    ranges.get(at).is_some_and(|(a, _)| *a <= ip)
}

fn range_text((a, b): (u32, u32)) -> String {
    if a == b {
        Ipv4Addr::from(a).to_string()
    } else {
        format!("{}-{}", Ipv4Addr::from(a), Ipv4Addr::from(b))
    }
}

/// The ruleset under construction.
#[derive(Default)]
struct Builder {
    /// Set name → (type and flags, elements).
    sets: BTreeMap<String, (&'static str, Vec<String>)>,
    set_names: HashMap<(&'static str, Vec<String>), String>,
    chains: BTreeMap<String, Vec<String>>,
    ingress: Vec<String>,
    egress: Vec<String>,
    isolated_ingress: BTreeSet<Ipv4Addr>,
    isolated_egress: BTreeSet<Ipv4Addr>,
    /// Peer addresses already computed, by the policy's namespace and its peers: policies
    /// often repeat their selectors.
    peer_memo: HashMap<String, Vec<(u32, u32)>>,
    out: Ruleset,
}

impl Builder {
    /// The addresses of `peers` (of a policy in namespace `own`), merged.
    fn peer_ranges(&mut self, snapshot: &Snapshot, own: &str, peers: &[Peer]) -> Vec<(u32, u32)> {
        let memo = format!("{own}\0{peers:?}");
        if let Some(ranges) = self.peer_memo.get(&memo) {
            return ranges.clone();
        }
        let mut ranges = Vec::new();
        for peer in peers {
            match peer {
                Peer::Pods { namespaces, pods } => {
                    // Each namespace's labels are matched once, not once per pod.
                    let mut namespace_ok: HashMap<&str, bool> = HashMap::new();
                    for pod in snapshot.pods.values() {
                        let ns = pod.key.namespace.as_str();
                        let in_scope = match namespaces {
                            Namespaces::Own => ns == own,
                            Namespaces::Matching(selector) => *namespace_ok
                                .entry(ns)
                                .or_insert_with(|| namespace_matches(snapshot, selector, ns)),
                        };
                        if in_scope && pods.matches(&pod.labels) {
                            let ip = u32::from(pod.ip);
                            ranges.push((ip, ip));
                        }
                    }
                }
                Peer::Block { cidr, except } => ranges.extend(block_ranges(*cidr, except)),
                Peer::Nothing => {}
            }
        }
        let ranges = merge(ranges);
        self.peer_memo.insert(memo, ranges.clone());
        ranges
    }

    /// Declares set `name`, or finds one declared already with the same elements: the name
    /// to refer to. Policies with the same selectors share their sets, so the kernel holds
    /// each group of addresses once.
    fn set(&mut self, name: String, kind: &'static str, elements: Vec<String>) -> String {
        let content = (kind, elements);
        if let Some(existing) = self.set_names.get(&content) {
            return existing.clone();
        }
        self.out.stats.elements += content.1.len();
        self.sets.insert(name.clone(), content.clone());
        self.set_names.insert(content, name.clone());
        name
    }

    /// The chain of one direction of `policy` over its `targets` (pods of this node).
    fn direction(
        &mut self,
        snapshot: &Snapshot,
        policy: &Policy,
        targets: &[&Pod],
        direction: Direction,
        rules: &[Rule],
    ) {
        let key = &policy.key;
        let chain = ident(&format!(
            "{}/{}/{}",
            direction.prefix(),
            key.namespace,
            key.name
        ));
        let target_ips: Vec<String> = targets.iter().map(|p| p.ip.to_string()).collect();
        let pods_set = self.set(format!("{chain}/pods"), "type ipv4_addr;", target_ips);
        let (dispatch, isolated) = match direction {
            Direction::Ingress => (&mut self.ingress, &mut self.isolated_ingress),
            Direction::Egress => (&mut self.egress, &mut self.isolated_egress),
        };
        dispatch.push(format!("ip {} @{pods_set} jump {chain}", direction.own()));
        isolated.extend(targets.iter().map(|p| p.ip));

        let mut lines = Vec::new();
        for (r, rule) in rules.iter().enumerate() {
            let mut peer_ranges = None;
            let peer = if rule.peers.is_empty() {
                String::new()
            } else {
                let ranges = self.peer_ranges(snapshot, &key.namespace, &rule.peers);
                if ranges.is_empty() {
                    continue; // No peer exists: the rule allows nothing now.
                }
                let elements = ranges.iter().copied().map(range_text).collect();
                let set = self.set(
                    format!("{chain}/{r}/peers"),
                    "type ipv4_addr; flags interval;",
                    elements,
                );
                peer_ranges = Some(ranges);
                format!("ip {} @{set} ", direction.peer())
            };
            if rule.ports.is_empty() {
                lines.push(format!("{peer}accept"));
                continue;
            }
            // Egress: a named port is looked up in the pods reached, which are the peers.
            let reached = |pod: &Pod| match &peer_ranges {
                None => true,
                Some(ranges) => contains(ranges, pod.ip),
            };
            let candidates: Vec<&Pod> = match direction {
                Direction::Ingress => targets.to_vec(),
                Direction::Egress => snapshot.pods.values().filter(|p| reached(p)).collect(),
            };
            self.ports(&chain, r, &peer, rule, &candidates, &mut lines);
        }
        self.out.stats.rules += lines.len();
        self.chains.insert(chain, lines);
    }

    /// The rules of `rule`'s ports (with the peer match `peer` before each); named ports
    /// are resolved in the containers of `pods`.
    fn ports(
        &mut self,
        chain: &str,
        r: usize,
        peer: &str,
        rule: &Rule,
        pods: &[&Pod],
        lines: &mut Vec<String>,
    ) {
        let mut all: BTreeSet<Protocol> = BTreeSet::new();
        let mut numbered: BTreeMap<Protocol, Vec<(u32, u32)>> = BTreeMap::new();
        let mut named: BTreeSet<(Ipv4Addr, Protocol, u16)> = BTreeSet::new();
        for PortRule { protocol, ports } in &rule.ports {
            match ports {
                Ports::All => {
                    all.insert(*protocol);
                }
                Ports::Range(a, b) => numbered
                    .entry(*protocol)
                    .or_default()
                    .push((u32::from(*a), u32::from(*b))),
                Ports::Named(name) => {
                    for pod in pods {
                        if let Some(port) = pod.named_port(name, *protocol) {
                            named.insert((pod.ip, *protocol, port));
                        }
                    }
                }
            }
        }
        for protocol in &all {
            lines.push(format!("{peer}meta l4proto {} accept", protocol.nft()));
        }
        for (protocol, ranges) in numbered {
            if all.contains(&protocol) {
                continue;
            }
            let ports: Vec<String> = merge(ranges)
                .into_iter()
                .map(|(a, b)| {
                    if a == b {
                        a.to_string()
                    } else {
                        format!("{a}-{b}")
                    }
                })
                .collect();
            lines.push(format!(
                "{peer}meta l4proto {} th dport {{ {} }} accept",
                protocol.nft(),
                ports.join(", ")
            ));
        }
        named.retain(|(_, protocol, _)| !all.contains(protocol));
        if !named.is_empty() {
            let elements = named
                .into_iter()
                .map(|(ip, protocol, port)| format!("{ip} . {} . {port}", protocol.nft()))
                .collect();
            let set = self.set(
                format!("{chain}/{r}/named"),
                "type ipv4_addr . inet_proto . inet_service;",
                elements,
            );
            lines.push(format!(
                "{peer}ip daddr . meta l4proto . th dport @{set} accept"
            ));
        }
    }

    fn finish(mut self) -> Ruleset {
        self.out.stats.isolated_ingress = self.isolated_ingress.len();
        self.out.stats.isolated_egress = self.isolated_egress.len();
        let isolated = |ips: &BTreeSet<Ipv4Addr>| -> Vec<String> {
            ips.iter().map(Ipv4Addr::to_string).collect()
        };
        let ingress = isolated(&self.isolated_ingress);
        let egress = isolated(&self.isolated_egress);
        // Declared under their own names even when another set holds the same addresses.
        self.out.stats.elements += ingress.len() + egress.len();
        self.sets
            .insert("ingress-isolated".into(), ("type ipv4_addr;", ingress));
        self.sets
            .insert("egress-isolated".into(), ("type ipv4_addr;", egress));

        let known = "ct state established,related accept";
        let mut chains: Vec<(String, Option<&str>, Vec<String>)> = vec![
            (
                "forward-ingress".into(),
                Some("type filter hook forward priority 0; policy accept;"),
                vec![
                    known.into(),
                    "ip daddr @ingress-isolated jump ingress".into(),
                ],
            ),
            (
                "forward-egress".into(),
                Some("type filter hook forward priority 0; policy accept;"),
                vec![known.into(), "ip saddr @egress-isolated jump egress".into()],
            ),
            (
                "input-egress".into(),
                Some("type filter hook input priority 0; policy accept;"),
                vec![known.into(), "ip saddr @egress-isolated jump egress".into()],
            ),
        ];
        let mut ingress = std::mem::take(&mut self.ingress);
        ingress.push("drop".into());
        let mut egress = std::mem::take(&mut self.egress);
        egress.push("drop".into());
        chains.push(("ingress".into(), None, ingress));
        chains.push(("egress".into(), None, egress));
        for (name, rules) in std::mem::take(&mut self.chains) {
            chains.push((name, None, rules));
        }

        let mut body = String::with_capacity(64 * 1024);
        let _ = writeln!(body, "table inet {TABLE} {{");
        for (name, (kind, elements)) in &self.sets {
            let _ = writeln!(body, "\tset {name} {{\n\t\t{kind}");
            if !elements.is_empty() {
                body.push_str("\t\telements = {\n");
                for e in elements {
                    let _ = writeln!(body, "\t\t\t{e},");
                }
                body.push_str("\t\t}\n");
            }
            body.push_str("\t}\n");
        }
        for (name, hook, rules) in chains {
            let _ = writeln!(body, "\tchain {name} {{");
            if let Some(hook) = hook {
                let _ = writeln!(body, "\t\t{hook}");
            }
            for rule in rules {
                let _ = writeln!(body, "\t\t{rule}");
            }
            body.push_str("\t}\n");
        }
        body.push_str("}\n");
        self.out.body = body;
        self.out
    }
}

/// Whether `policy` applies to `pod`.
pub fn selects(policy: &Policy, pod: &Pod) -> bool {
    pod.key.namespace == policy.key.namespace && policy.pod_selector.matches(&pod.labels)
}

/// The ruleset guarding the pods of node `node_name`.
pub fn render(snapshot: &Snapshot, node_name: &str) -> Ruleset {
    let mut b = Builder::default();
    let local: Vec<&Pod> = snapshot
        .pods
        .values()
        .filter(|p| p.node.as_deref() == Some(node_name))
        .collect();
    for (key, policy) in &snapshot.policies {
        let policy = match policy {
            Ok(policy) => policy,
            Err(why) => {
                b.out.stats.skipped += 1;
                b.out
                    .warnings
                    .push(format!("NetworkPolicy {key} is not enforced: {}", why.0));
                continue;
            }
        };
        let targets: Vec<&Pod> = local
            .iter()
            .copied()
            .filter(|p| selects(policy, p))
            .collect();
        if targets.is_empty() {
            continue;
        }
        b.out.stats.policies += 1;
        if let Some(rules) = &policy.ingress {
            b.direction(snapshot, policy, &targets, Direction::Ingress, rules);
        }
        if let Some(rules) = &policy.egress {
            b.direction(snapshot, policy, &targets, Direction::Egress, rules);
        }
    }
    b.finish()
}

/// The one transaction replacing whatever table is there (a crashed agent's, an older
/// ruleset, none) with `ruleset`: created if missing so the delete cannot fail, deleted,
/// declared again. The kernel applies it at once.
pub fn transaction(ruleset: &Ruleset) -> String {
    let mut text = String::with_capacity(ruleset.body.len() + 128);
    let _ = writeln!(text, "add table inet {TABLE}");
    let _ = writeln!(text, "delete table inet {TABLE}");
    text.push_str(&ruleset.body);
    text
}

#[cfg(test)]
#[path = "ruleset_tests.rs"]
mod tests;
