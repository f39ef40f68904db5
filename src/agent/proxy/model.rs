//! The proxy's view of the API objects: Services, EndpointSlices and Nodes read from their
//! JSON into the few fields the rules and routes need. Reading never fails on odd input: what
//! cannot be used (an IPv6 address, an unknown protocol, a port out of range) is left out, and
//! what is too large is cut to a bound with a warning the caller logs once.

use std::collections::BTreeMap;
use std::net::Ipv4Addr;

use serde_json::Value;

/// The most ports of one Service the rules carry; the API does not bound them, and a Service
/// with tens of thousands of ports would make every sync of every node slow.
pub const MAX_SERVICE_PORTS: usize = 256;
/// The most endpoints of one EndpointSlice read (the API's own limit is 1,000).
pub const MAX_SLICE_ENDPOINTS: usize = 1000;

/// A transport protocol a Service port may use.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Protocol {
    Tcp,
    Udp,
    Sctp,
}

impl Protocol {
    fn parse(text: Option<&str>) -> Option<Protocol> {
        match text.unwrap_or("TCP") {
            "TCP" => Some(Protocol::Tcp),
            "UDP" => Some(Protocol::Udp),
            "SCTP" => Some(Protocol::Sctp),
            _ => None,
        }
    }

    /// The name nft knows it by.
    pub fn nft(self) -> &'static str {
        match self {
            Protocol::Tcp => "tcp",
            Protocol::Udp => "udp",
            Protocol::Sctp => "sctp",
        }
    }
}

/// `namespace/name` of a namespaced object.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ObjectKey {
    pub namespace: String,
    pub name: String,
}

impl ObjectKey {
    pub fn of(object: &Value) -> Option<ObjectKey> {
        let meta = &object["metadata"];
        Some(ObjectKey {
            namespace: meta["namespace"].as_str().unwrap_or("default").to_string(),
            name: meta["name"].as_str()?.to_string(),
        })
    }
}

impl std::fmt::Display for ObjectKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.namespace, self.name)
    }
}

/// One port of a Service.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServicePort {
    /// Empty for the single unnamed port a Service may have.
    pub name: String,
    pub protocol: Protocol,
    pub port: u16,
    pub node_port: Option<u16>,
}

/// A Service as the proxy sees it. Services without a ClusterIP (headless, ExternalName) have
/// no rules: they are DNS's.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Service {
    pub key: ObjectKey,
    pub cluster_ips: Vec<Ipv4Addr>,
    pub ports: Vec<ServicePort>,
    /// `spec.externalIPs` and `status.loadBalancer.ingress[].ip`: reached like a NodePort.
    pub external_ips: Vec<Ipv4Addr>,
    /// `externalTrafficPolicy: Local`: external traffic only to this node's endpoints, with
    /// the client's address kept.
    pub external_local: bool,
    /// `internalTrafficPolicy: Local`: cluster traffic only to this node's endpoints.
    pub internal_local: bool,
    /// `sessionAffinity: ClientIP`: the timeout in seconds.
    pub affinity_seconds: Option<u32>,
}

impl Service {
    /// Reads a Service; `warnings` gets what was cut. `None`: nothing for the proxy.
    pub fn from_json(object: &Value, warnings: &mut Vec<String>) -> Option<Service> {
        let key = ObjectKey::of(object)?;
        let spec = &object["spec"];
        if spec["type"].as_str() == Some("ExternalName") {
            return None;
        }
        let mut cluster_ips: Vec<Ipv4Addr> = match spec["clusterIPs"].as_array() {
            Some(ips) => ips.iter().filter_map(ipv4).collect(),
            None => Vec::new(),
        };
        if cluster_ips.is_empty() {
            cluster_ips.extend(ipv4(&spec["clusterIP"]));
        }
        if cluster_ips.is_empty() {
            return None;
        }
        let given = spec["ports"].as_array().map(Vec::as_slice).unwrap_or(&[]);
        if given.len() > MAX_SERVICE_PORTS {
            warnings.push(format!(
                "Service {key} has {} ports: only the first {MAX_SERVICE_PORTS} are proxied",
                given.len()
            ));
        }
        let ports = given
            .iter()
            .take(MAX_SERVICE_PORTS)
            .filter_map(|p| {
                Some(ServicePort {
                    name: p["name"].as_str().unwrap_or_default().to_string(),
                    protocol: Protocol::parse(p["protocol"].as_str())?,
                    port: port(&p["port"])?,
                    node_port: port(&p["nodePort"]),
                })
            })
            .collect();
        let mut external_ips: Vec<Ipv4Addr> = spec["externalIPs"]
            .as_array()
            .map(|ips| ips.iter().filter_map(ipv4).collect())
            .unwrap_or_default();
        if let Some(ingress) = object["status"]["loadBalancer"]["ingress"].as_array() {
            external_ips.extend(ingress.iter().filter_map(|i| ipv4(&i["ip"])));
        }
        external_ips.sort();
        external_ips.dedup();
        let affinity_seconds = (spec["sessionAffinity"].as_str() == Some("ClientIP")).then(|| {
            spec["sessionAffinityConfig"]["clientIP"]["timeoutSeconds"]
                .as_u64()
                .filter(|s| (1..=86_400).contains(s))
                .map_or(10_800, |s| s as u32)
        });
        Some(Service {
            key,
            cluster_ips,
            ports,
            external_ips,
            external_local: spec["externalTrafficPolicy"].as_str() == Some("Local"),
            internal_local: spec["internalTrafficPolicy"].as_str() == Some("Local"),
            affinity_seconds,
        })
    }
}

/// One address of an EndpointSlice with its conditions.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Endpoint {
    pub ip: Ipv4Addr,
    pub ready: bool,
    pub serving: bool,
    pub terminating: bool,
    pub node: Option<String>,
}

/// A port of an EndpointSlice: the Service port of that name goes to `port`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SlicePort {
    pub name: String,
    pub protocol: Protocol,
    pub port: u16,
}

/// An IPv4 EndpointSlice of a Service.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Slice {
    pub key: ObjectKey,
    /// The Service it belongs to (`kubernetes.io/service-name`).
    pub service: ObjectKey,
    pub ports: Vec<SlicePort>,
    pub endpoints: Vec<Endpoint>,
}

impl Slice {
    /// Reads an EndpointSlice; `None` for other address types and slices of no Service.
    pub fn from_json(object: &Value, warnings: &mut Vec<String>) -> Option<Slice> {
        let key = ObjectKey::of(object)?;
        if object["addressType"].as_str() != Some("IPv4") {
            return None;
        }
        let service = ObjectKey {
            namespace: key.namespace.clone(),
            name: object["metadata"]["labels"]["kubernetes.io/service-name"]
                .as_str()?
                .to_string(),
        };
        let ports = object["ports"]
            .as_array()
            .map(|ports| {
                ports
                    .iter()
                    .take(MAX_SERVICE_PORTS)
                    .filter_map(|p| {
                        Some(SlicePort {
                            name: p["name"].as_str().unwrap_or_default().to_string(),
                            protocol: Protocol::parse(p["protocol"].as_str())?,
                            port: port(&p["port"])?,
                        })
                    })
                    .collect()
            })
            .unwrap_or_default();
        let given = object["endpoints"]
            .as_array()
            .map(Vec::as_slice)
            .unwrap_or(&[]);
        if given.len() > MAX_SLICE_ENDPOINTS {
            warnings.push(format!(
                "EndpointSlice {key} has {} endpoints: only the first {MAX_SLICE_ENDPOINTS} are used",
                given.len()
            ));
        }
        let mut endpoints = Vec::new();
        for e in given.iter().take(MAX_SLICE_ENDPOINTS) {
            let conditions = &e["conditions"];
            // The API's rule: an unknown readiness is read as ready, serving as ready.
            let ready = conditions["ready"].as_bool().unwrap_or(true);
            let serving = conditions["serving"].as_bool().unwrap_or(ready);
            let terminating = conditions["terminating"].as_bool().unwrap_or(false);
            let node = e["nodeName"].as_str().map(str::to_string);
            // Every address of an endpoint is the same pod: the first is enough.
            if let Some(ip) = e["addresses"]
                .as_array()
                .and_then(|a| a.first())
                .and_then(ipv4)
            {
                endpoints.push(Endpoint {
                    ip,
                    ready,
                    serving,
                    terminating,
                    node,
                });
            }
        }
        Some(Slice {
            key,
            service,
            ports,
            endpoints,
        })
    }
}

/// A Node as the routes need it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Node {
    pub name: String,
    /// `spec.podCIDR`, IPv4 only.
    pub pod_cidr: Option<Cidr>,
    /// The first `InternalIP` of `status.addresses`.
    pub internal_ip: Option<Ipv4Addr>,
}

impl Node {
    pub fn from_json(object: &Value) -> Option<Node> {
        let name = object["metadata"]["name"].as_str()?.to_string();
        let pod_cidr = object["spec"]["podCIDR"].as_str().and_then(Cidr::parse);
        let internal_ip = object["status"]["addresses"].as_array().and_then(|a| {
            a.iter()
                .filter(|a| a["type"].as_str() == Some("InternalIP"))
                .find_map(|a| ipv4(&a["address"]))
        });
        Some(Node {
            name,
            pod_cidr,
            internal_ip,
        })
    }
}

/// An IPv4 network, `addr/prefix` with the host bits cleared.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Cidr {
    pub addr: Ipv4Addr,
    pub prefix: u8,
}

impl Cidr {
    pub fn parse(text: &str) -> Option<Cidr> {
        let (addr, prefix) = text.split_once('/')?;
        let addr: Ipv4Addr = addr.parse().ok()?;
        let prefix: u8 = prefix.parse().ok()?;
        if prefix > 32 {
            return None;
        }
        let mask = u32::MAX.checked_shl(32 - u32::from(prefix)).unwrap_or(0);
        Some(Cidr {
            addr: Ipv4Addr::from(u32::from(addr) & mask),
            prefix,
        })
    }

    /// The first address of the network: the pod bridge's gateway in a podCIDR.
    pub fn first_host(self) -> Ipv4Addr {
        Ipv4Addr::from(u32::from(self.addr).wrapping_add(1))
    }
}

impl std::fmt::Display for Cidr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.addr, self.prefix)
    }
}

fn ipv4(value: &Value) -> Option<Ipv4Addr> {
    value.as_str()?.parse().ok()
}

fn port(value: &Value) -> Option<u16> {
    value
        .as_u64()
        .and_then(|p| u16::try_from(p).ok())
        .filter(|p| *p != 0)
}

/// Everything the proxy follows, keyed for stable output.
#[derive(Debug, Clone, Default)]
pub struct Snapshot {
    pub services: BTreeMap<ObjectKey, Service>,
    pub slices: BTreeMap<ObjectKey, Slice>,
    pub nodes: BTreeMap<String, Node>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_service_with_too_many_ports_is_cut_with_one_warning() {
        let ports: Vec<Value> = (1..=65_535u32)
            .map(|p| json!({"name": format!("p{p}"), "port": p}))
            .collect();
        let object = json!({
            "metadata": {"namespace": "ns", "name": "big"},
            "spec": {"clusterIP": "10.43.0.5", "ports": ports},
        });
        let mut warnings = Vec::new();
        let service = Service::from_json(&object, &mut warnings).expect("a service");
        assert_eq!(service.ports.len(), MAX_SERVICE_PORTS);
        assert_eq!(warnings.len(), 1, "{warnings:?}");
    }

    #[test]
    fn headless_external_name_and_ipv6_services_are_not_proxied() {
        let mut w = Vec::new();
        for spec in [
            json!({"clusterIP": "None"}),
            json!({"type": "ExternalName", "externalName": "example.com"}),
            json!({"clusterIP": "fd00::1", "clusterIPs": ["fd00::1"]}),
        ] {
            let object = json!({"metadata": {"namespace": "a", "name": "b"}, "spec": spec});
            assert_eq!(Service::from_json(&object, &mut w), None);
        }
    }

    #[test]
    fn endpoint_conditions_default_as_the_api_says() {
        let object = json!({
            "metadata": {"namespace": "a", "name": "web-x",
                         "labels": {"kubernetes.io/service-name": "web"}},
            "addressType": "IPv4",
            "ports": [{"name": "http", "port": 8080, "protocol": "TCP"}],
            "endpoints": [
                {"addresses": ["10.42.0.2"], "nodeName": "n1"},
                {"addresses": ["10.42.0.3"], "conditions": {"ready": false, "serving": true, "terminating": true}},
                {"addresses": ["not-an-ip"]},
            ],
        });
        let slice = Slice::from_json(&object, &mut Vec::new()).expect("a slice");
        assert_eq!(slice.service.name, "web");
        assert_eq!(slice.endpoints.len(), 2);
        assert!(slice.endpoints[0].ready && slice.endpoints[0].serving);
        assert!(!slice.endpoints[1].ready && slice.endpoints[1].terminating);
    }

    #[test]
    fn cidrs_clear_their_host_bits() {
        let cidr = Cidr::parse("10.42.3.7/24").expect("a cidr");
        assert_eq!(cidr.to_string(), "10.42.3.0/24");
        assert_eq!(cidr.first_host(), Ipv4Addr::new(10, 42, 3, 1));
        assert_eq!(Cidr::parse("10.0.0.0/33"), None);
        assert_eq!(Cidr::parse("0.0.0.0/0").map(|c| c.prefix), Some(0));
    }
}
