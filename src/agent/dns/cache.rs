//! The cluster objects DNS answers from, kept as the watches report them: of Services their
//! ClusterIPs (or headless, or ExternalName) and ports, of EndpointSlices the addresses with
//! their hostname and readiness and the ports, of Pods their IPs. Nothing else of an object
//! is kept. A list replaces everything of its kind (what is missing from it is gone).

use std::collections::HashMap;
use std::net::IpAddr;

use serde_json::Value;

/// The kinds the cache follows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Kind {
    Services,
    EndpointSlices,
    Pods,
}

/// A Service or EndpointSlice port.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Port {
    /// `""` for an unnamed port.
    pub name: String,
    pub port: u16,
    /// `tcp`, `udp` or `sctp`.
    pub protocol: String,
}

/// What a Service resolves to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ServiceKind {
    /// `spec.clusterIPs` (one per family).
    ClusterIp(Vec<IpAddr>),
    /// `clusterIP: None`: the ready endpoints' addresses.
    Headless,
    /// `type: ExternalName`: a CNAME to `spec.externalName`.
    ExternalName(String),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Service {
    pub kind: ServiceKind,
    pub ports: Vec<Port>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Endpoint {
    pub ips: Vec<IpAddr>,
    /// `hostname` (StatefulSet pods, pods with a subdomain).
    pub hostname: Option<String>,
    /// `conditions.ready`; absent counts as ready, as the API documents.
    pub ready: bool,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Slice {
    /// The `kubernetes.io/service-name` label.
    pub service: String,
    pub endpoints: Vec<Endpoint>,
    pub ports: Vec<Port>,
}

/// `(namespace, name)`.
pub type Key = (String, String);

/// The objects, by kind.
#[derive(Debug, Clone, Default)]
pub struct Cache {
    pub services: HashMap<Key, Service>,
    pub slices: HashMap<Key, Slice>,
    pub pods: HashMap<Key, Vec<IpAddr>>,
}

impl Cache {
    /// A list of `kind`: the whole truth about it.
    pub fn replace(&mut self, kind: Kind, items: &[Value]) {
        match kind {
            Kind::Services => self.services.clear(),
            Kind::EndpointSlices => self.slices.clear(),
            Kind::Pods => self.pods.clear(),
        }
        for item in items {
            self.changed(kind, item);
        }
    }

    /// An object was added or changed.
    pub fn changed(&mut self, kind: Kind, object: &Value) {
        let Some(key) = key(object) else { return };
        match kind {
            Kind::Services => match service(object) {
                Some(s) => drop(self.services.insert(key, s)),
                None => drop(self.services.remove(&key)),
            },
            Kind::EndpointSlices => match slice(object) {
                Some(s) => drop(self.slices.insert(key, s)),
                None => drop(self.slices.remove(&key)),
            },
            Kind::Pods => {
                let ips = pod_ips(object);
                if ips.is_empty() {
                    self.pods.remove(&key);
                } else {
                    self.pods.insert(key, ips);
                }
            }
        }
    }

    /// An object was deleted.
    pub fn deleted(&mut self, kind: Kind, object: &Value) {
        let Some(key) = key(object) else { return };
        match kind {
            Kind::Services => drop(self.services.remove(&key)),
            Kind::EndpointSlices => drop(self.slices.remove(&key)),
            Kind::Pods => drop(self.pods.remove(&key)),
        }
    }
}

fn key(object: &Value) -> Option<Key> {
    let meta = &object["metadata"];
    Some((
        meta["namespace"].as_str()?.to_string(),
        meta["name"].as_str()?.to_string(),
    ))
}

fn service(object: &Value) -> Option<Service> {
    let spec = &object["spec"];
    let ports = ports(&spec["ports"]);
    let kind = if spec["type"] == "ExternalName" {
        let target = spec["externalName"].as_str()?.trim_end_matches('.');
        if target.is_empty() {
            return None;
        }
        ServiceKind::ExternalName(target.to_ascii_lowercase())
    } else if spec["clusterIP"] == "None" {
        ServiceKind::Headless
    } else {
        let mut ips: Vec<IpAddr> = spec["clusterIPs"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|ip| ip.as_str()?.parse().ok())
            .collect();
        if ips.is_empty() {
            ips.extend(
                spec["clusterIP"]
                    .as_str()
                    .and_then(|ip| ip.parse::<IpAddr>().ok()),
            );
        }
        if ips.is_empty() {
            return None;
        }
        ServiceKind::ClusterIp(ips)
    };
    Some(Service { kind, ports })
}

fn ports(list: &Value) -> Vec<Port> {
    list.as_array()
        .into_iter()
        .flatten()
        .filter_map(|p| {
            Some(Port {
                name: p["name"].as_str().unwrap_or("").to_ascii_lowercase(),
                port: u16::try_from(p["port"].as_u64()?).ok()?,
                protocol: p["protocol"].as_str().unwrap_or("TCP").to_ascii_lowercase(),
            })
        })
        .collect()
}

fn slice(object: &Value) -> Option<Slice> {
    let service = object["metadata"]["labels"]["kubernetes.io/service-name"].as_str()?;
    let endpoints = object["endpoints"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|e| Endpoint {
            ips: e["addresses"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|a| a.as_str()?.parse().ok())
                .collect(),
            hostname: e["hostname"]
                .as_str()
                .filter(|h| !h.is_empty())
                .map(str::to_ascii_lowercase),
            ready: e["conditions"]["ready"].as_bool() != Some(false),
        })
        .collect();
    Some(Slice {
        service: service.to_string(),
        endpoints,
        ports: ports(&object["ports"]),
    })
}

fn pod_ips(object: &Value) -> Vec<IpAddr> {
    let status = &object["status"];
    let mut ips: Vec<IpAddr> = status["podIPs"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|ip| ip["ip"].as_str()?.parse().ok())
        .collect();
    if ips.is_empty() {
        ips.extend(
            status["podIP"]
                .as_str()
                .and_then(|ip| ip.parse::<IpAddr>().ok()),
        );
    }
    // A hostNetwork pod's IP is its node's: it gets no pod name.
    if object["spec"]["hostNetwork"] == true {
        ips.clear();
    }
    ips
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn objects_keep_only_what_dns_needs() {
        let mut cache = Cache::default();
        cache.replace(
            Kind::Services,
            &[
                json!({"metadata": {"namespace": "default", "name": "web"},
                       "spec": {"clusterIP": "10.43.0.20", "clusterIPs": ["10.43.0.20", "fd00::20"],
                                "ports": [{"name": "HTTP", "port": 80}, {"port": 53, "protocol": "UDP"}]}}),
                json!({"metadata": {"namespace": "default", "name": "db"},
                       "spec": {"clusterIP": "None"}}),
                json!({"metadata": {"namespace": "default", "name": "ext"},
                       "spec": {"type": "ExternalName", "externalName": "Example.COM."}}),
                json!({"metadata": {"namespace": "default", "name": "pending"}, "spec": {}}),
            ],
        );
        let web = &cache.services[&("default".into(), "web".into())];
        assert_eq!(
            web.kind,
            ServiceKind::ClusterIp(vec![
                "10.43.0.20".parse().unwrap(),
                "fd00::20".parse().unwrap()
            ])
        );
        assert_eq!(web.ports[0].name, "http");
        assert_eq!(web.ports[1].protocol, "udp");
        assert_eq!(
            cache.services[&("default".into(), "ext".into())].kind,
            ServiceKind::ExternalName("example.com".into())
        );
        assert_eq!(cache.services.len(), 3);

        cache.changed(
            Kind::EndpointSlices,
            &json!({"metadata": {"namespace": "default", "name": "db-x",
                                 "labels": {"kubernetes.io/service-name": "db"}},
                    "addressType": "IPv4",
                    "endpoints": [{"addresses": ["10.42.0.5"], "hostname": "db-0"},
                                  {"addresses": ["10.42.0.6"], "conditions": {"ready": false}}],
                    "ports": [{"name": "pg", "port": 5432, "protocol": "TCP"}]}),
        );
        let slice = &cache.slices[&("default".into(), "db-x".into())];
        assert!(slice.endpoints[0].ready && !slice.endpoints[1].ready);
        assert_eq!(slice.endpoints[0].hostname.as_deref(), Some("db-0"));

        cache.changed(
            Kind::Pods,
            &json!({"metadata": {"namespace": "default", "name": "p"},
                    "status": {"podIP": "10.42.0.9", "podIPs": [{"ip": "10.42.0.9"}]}}),
        );
        cache.changed(
            Kind::Pods,
            &json!({"metadata": {"namespace": "default", "name": "h"}, "spec": {"hostNetwork": true},
                    "status": {"podIP": "192.168.1.2"}}),
        );
        assert_eq!(cache.pods.len(), 1);
        cache.deleted(
            Kind::Pods,
            &json!({"metadata": {"namespace": "default", "name": "p"}}),
        );
        assert!(cache.pods.is_empty());
        cache.replace(Kind::Services, &[]);
        assert!(cache.services.is_empty());
    }
}
