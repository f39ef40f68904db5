//! The policy enforcer's view of the API objects: NetworkPolicies (`networking.k8s.io/v1`),
//! Pods and Namespaces read from their JSON into what the rules need. A policy the agent
//! cannot enforce (an unknown protocol, a peer of no kind, an address that is not one) is
//! read as [`Unenforceable`] with the reason, so the renderer can log it once and leave it
//! out while every other policy keeps working.

use std::collections::BTreeMap;
use std::net::Ipv4Addr;

use serde_json::Value;

use crate::agent::proxy::model::{Cidr, ObjectKey, Protocol};
use crate::kube::labels::Labels;
use crate::kube::selectors::LabelSelector;

/// The most rules (ingress or egress) of one policy read; the API does not bound them.
pub const MAX_RULES: usize = 256;
/// The most peers or ports of one rule read.
pub const MAX_PER_RULE: usize = 256;

/// Why a policy is left out.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unenforceable(pub String);

/// A container port with a name, which a policy's port may refer to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NamedPort {
    pub name: String,
    pub protocol: Protocol,
    pub port: u16,
}

/// A pod with an IPv4 address on the pod network (host-network pods and pods that have
/// finished are left out: the first share the node's address, the second's address may be
/// given to another pod already).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pod {
    pub key: ObjectKey,
    pub labels: Labels,
    pub ip: Ipv4Addr,
    pub node: Option<String>,
    pub ports: Vec<NamedPort>,
}

impl Pod {
    pub fn from_json(object: &Value) -> Option<Pod> {
        let key = ObjectKey::of(object)?;
        let spec = &object["spec"];
        if spec["hostNetwork"].as_bool() == Some(true) {
            return None;
        }
        if matches!(
            object["status"]["phase"].as_str(),
            Some("Succeeded" | "Failed")
        ) {
            return None;
        }
        let ip: Ipv4Addr = object["status"]["podIP"].as_str()?.parse().ok()?;
        let mut ports = Vec::new();
        for container in spec["containers"].as_array().into_iter().flatten() {
            for p in container["ports"].as_array().into_iter().flatten() {
                let (Some(name), Some(port), Some(protocol)) = (
                    p["name"].as_str().filter(|n| !n.is_empty()),
                    port_number(&p["containerPort"]),
                    parse_protocol(&p["protocol"]),
                ) else {
                    continue;
                };
                ports.push(NamedPort {
                    name: name.to_string(),
                    protocol,
                    port,
                });
            }
        }
        Some(Pod {
            key,
            labels: labels(object),
            ip,
            node: spec["nodeName"].as_str().map(str::to_string),
            ports,
        })
    }

    /// The port `name` of `protocol` in one of the pod's containers.
    pub fn named_port(&self, name: &str, protocol: Protocol) -> Option<u16> {
        self.ports
            .iter()
            .find(|p| p.name == name && p.protocol == protocol)
            .map(|p| p.port)
    }
}

/// A namespace's labels (`kubernetes.io/metadata.name` is always among them: the API server
/// sets it, and it is added here for a namespace read without it).
pub fn namespace_labels(object: &Value) -> Option<(String, Labels)> {
    let name = object["metadata"]["name"].as_str()?.to_string();
    let mut pairs: Vec<(String, String)> = labels(object)
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    if !pairs
        .iter()
        .any(|(k, _)| k == "kubernetes.io/metadata.name")
    {
        pairs.push(("kubernetes.io/metadata.name".into(), name.clone()));
    }
    Some((name, pairs.into_iter().collect()))
}

fn labels(object: &Value) -> Labels {
    object["metadata"]["labels"]
        .as_object()
        .map(|m| {
            m.iter()
                .filter_map(|(k, v)| Some((k.as_str(), v.as_str()?)))
                .collect()
        })
        .unwrap_or_default()
}

/// Where the pods of a pod peer are looked for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Namespaces {
    /// The policy's own namespace (a peer with only a `podSelector`).
    Own,
    /// Every namespace whose labels match.
    Matching(LabelSelector),
}

/// One `from` / `to` entry of a rule.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Peer {
    /// Pods matching `pods` in the namespaces `namespaces` names (`podSelector`,
    /// `namespaceSelector`, or both: both must match).
    Pods {
        namespaces: Namespaces,
        pods: LabelSelector,
    },
    /// `ipBlock`: `cidr` without the `except` blocks. An IPv6 block never matches the IPv4
    /// traffic the rules see, and is kept as [`Peer::Nothing`].
    Block {
        cidr: Cidr,
        except: Vec<Cidr>,
    },
    Nothing,
}

/// Which destination ports of a protocol a rule allows.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Ports {
    All,
    /// `port` to `endPort` (one port: both the same).
    Range(u16, u16),
    /// A container port's name, resolved per pod.
    Named(String),
}

/// One entry of a rule's `ports`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PortRule {
    pub protocol: Protocol,
    pub ports: Ports,
}

/// One ingress or egress rule: traffic from (to) any of `peers` (none: anywhere) to any of
/// `ports` (none: every port and protocol).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rule {
    pub peers: Vec<Peer>,
    pub ports: Vec<PortRule>,
}

/// A NetworkPolicy the agent can enforce.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Policy {
    pub key: ObjectKey,
    /// The pods of the policy's namespace it applies to (empty: all of them).
    pub pod_selector: LabelSelector,
    /// The ingress rules when `policyTypes` has `Ingress` (an empty list isolates only).
    pub ingress: Option<Vec<Rule>>,
    /// The egress rules when `policyTypes` has `Egress`.
    pub egress: Option<Vec<Rule>>,
}

impl Policy {
    /// Reads a NetworkPolicy. `policyTypes` defaults as the API server defaults it:
    /// `Ingress`, and `Egress` too when the spec has an `egress` section.
    pub fn from_json(object: &Value) -> Option<Result<Policy, Unenforceable>> {
        let key = ObjectKey::of(object)?;
        Some(Self::read(key, &object["spec"]))
    }

    fn read(key: ObjectKey, spec: &Value) -> Result<Policy, Unenforceable> {
        let bad = |why: String| Unenforceable(why);
        let pod_selector = selector(&spec["podSelector"])
            .map_err(|e| bad(format!("podSelector: {e}")))?
            .unwrap_or_default();
        let (mut ingress, mut egress) = (false, false);
        match spec["policyTypes"].as_array() {
            Some(types) => {
                for t in types {
                    match t.as_str() {
                        Some("Ingress") => ingress = true,
                        Some("Egress") => egress = true,
                        _ => return Err(bad(format!("unknown policyType {t}"))),
                    }
                }
            }
            None => {
                ingress = true;
                egress = !spec["egress"].is_null();
            }
        }
        let rules = |field: &str, peers: &str| -> Result<Vec<Rule>, Unenforceable> {
            let given = spec[field].as_array().map(Vec::as_slice).unwrap_or(&[]);
            if given.len() > MAX_RULES {
                return Err(bad(format!("more than {MAX_RULES} {field} rules")));
            }
            given
                .iter()
                .enumerate()
                .map(|(i, r)| read_rule(r, peers).map_err(|e| bad(format!("{field}[{i}]: {e}"))))
                .collect()
        };
        Ok(Policy {
            key,
            pod_selector,
            ingress: ingress.then(|| rules("ingress", "from")).transpose()?,
            egress: egress.then(|| rules("egress", "to")).transpose()?,
        })
    }
}

fn selector(value: &Value) -> Result<Option<LabelSelector>, String> {
    LabelSelector::from_object(Some(value)).map_err(|e| e.0)
}

fn read_rule(rule: &Value, peers_field: &str) -> Result<Rule, String> {
    let given_peers = rule[peers_field]
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or(&[]);
    let given_ports = rule["ports"].as_array().map(Vec::as_slice).unwrap_or(&[]);
    if given_peers.len() > MAX_PER_RULE || given_ports.len() > MAX_PER_RULE {
        return Err(format!("more than {MAX_PER_RULE} peers or ports"));
    }
    let peers = given_peers
        .iter()
        .enumerate()
        .map(|(i, p)| read_peer(p).map_err(|e| format!("{peers_field}[{i}]: {e}")))
        .collect::<Result<_, _>>()?;
    let ports = given_ports
        .iter()
        .enumerate()
        .map(|(i, p)| read_port(p).map_err(|e| format!("ports[{i}]: {e}")))
        .collect::<Result<_, _>>()?;
    Ok(Rule { peers, ports })
}

fn read_peer(peer: &Value) -> Result<Peer, String> {
    let pods = selector(&peer["podSelector"]).map_err(|e| format!("podSelector: {e}"))?;
    let namespaces =
        selector(&peer["namespaceSelector"]).map_err(|e| format!("namespaceSelector: {e}"))?;
    let block = &peer["ipBlock"];
    if !block.is_null() {
        if pods.is_some() || namespaces.is_some() {
            return Err("ipBlock together with a selector".into());
        }
        let cidr_text = block["cidr"].as_str().unwrap_or_default();
        if cidr_text.contains(':') {
            return Ok(Peer::Nothing);
        }
        let cidr = Cidr::parse(cidr_text).ok_or(format!("ipBlock.cidr {cidr_text:?}"))?;
        let mut except = Vec::new();
        for e in block["except"].as_array().into_iter().flatten() {
            let text = e.as_str().unwrap_or_default();
            if text.contains(':') {
                continue;
            }
            except.push(Cidr::parse(text).ok_or(format!("ipBlock.except {text:?}"))?);
        }
        return Ok(Peer::Block { cidr, except });
    }
    match (pods, namespaces) {
        (None, None) => Err("a peer with no podSelector, namespaceSelector or ipBlock".into()),
        (pods, Some(namespaces)) => Ok(Peer::Pods {
            namespaces: Namespaces::Matching(namespaces),
            pods: pods.unwrap_or_default(),
        }),
        (Some(pods), None) => Ok(Peer::Pods {
            namespaces: Namespaces::Own,
            pods,
        }),
    }
}

fn read_port(port: &Value) -> Result<PortRule, String> {
    let protocol = parse_protocol(&port["protocol"])
        .ok_or_else(|| format!("protocol {} is not TCP, UDP or SCTP", port["protocol"]))?;
    let end = &port["endPort"];
    let ports = match &port["port"] {
        Value::Null => Ports::All,
        Value::String(name) if name.parse::<u16>().is_err() => {
            if !end.is_null() {
                return Err("endPort with a named port".into());
            }
            Ports::Named(name.clone())
        }
        value => {
            let first = port_number(value)
                .or_else(|| value.as_str().and_then(|s| s.parse().ok()))
                .filter(|p| *p != 0)
                .ok_or_else(|| format!("port {value}"))?;
            let last = match end {
                Value::Null => first,
                end => port_number(end)
                    .filter(|e| *e >= first)
                    .ok_or_else(|| format!("endPort {end} below port {first}"))?,
            };
            Ports::Range(first, last)
        }
    };
    Ok(PortRule { protocol, ports })
}

fn parse_protocol(value: &Value) -> Option<Protocol> {
    match value.as_str().unwrap_or("TCP") {
        "TCP" => Some(Protocol::Tcp),
        "UDP" => Some(Protocol::Udp),
        "SCTP" => Some(Protocol::Sctp),
        _ => None,
    }
}

fn port_number(value: &Value) -> Option<u16> {
    value
        .as_u64()
        .and_then(|p| u16::try_from(p).ok())
        .filter(|p| *p != 0)
}

/// Everything the enforcer follows, keyed for stable output.
#[derive(Debug, Clone, Default)]
pub struct Snapshot {
    pub policies: BTreeMap<ObjectKey, Result<Policy, Unenforceable>>,
    pub pods: BTreeMap<ObjectKey, Pod>,
    /// Namespace name → labels.
    pub namespaces: BTreeMap<String, Labels>,
}
