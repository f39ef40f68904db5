//! The Service environment variables a container gets, as kubelet computes them
//! (`pkg/kubelet/envvars`): for each Service with a ClusterIP in the pod's namespace (when the
//! pod's `enableServiceLinks` is not false), and always for the `kubernetes` Service of the
//! `default` namespace, which in-cluster clients find the API server by
//! (`KUBERNETES_SERVICE_HOST` and `KUBERNETES_SERVICE_PORT`, read by client-go's and the
//! Python client's in-cluster configuration):
//!
//! - `<NAME>_SERVICE_HOST` the ClusterIP, `<NAME>_SERVICE_PORT` the first port,
//!   `<NAME>_SERVICE_PORT_<PORT NAME>` each named port;
//! - Docker's link variables: `<NAME>_PORT` (`tcp://IP:PORT` of the first port) and, per port,
//!   `<NAME>_PORT_<PORT>_<PROTO>` with `_PROTO`, `_PORT` and `_ADDR`.
//!
//! `<NAME>` is the name upper-cased with `-` as `_`. Headless and ExternalName Services have no
//! ClusterIP and give nothing. A Service of the pod's namespace named `kubernetes` (with
//! links) takes the place of the default namespace's, as kubelet projects a namespace's
//! Services onto the master one. The variables are added after the container's own `env`
//! and never replace one of them (`env::build`).
//!
//! The Services come from the informer the Service proxy already keeps
//! (`agent::proxy::informer`), so the agent follows them once.

use std::collections::BTreeMap;

use crate::agent::proxy::model::{Protocol, Service};

/// The namespace and name of the Service whose variables every pod gets.
const MASTER_SERVICE: (&str, &str) = ("default", "kubernetes");

/// The variables of `services` for a pod of `namespace`; `links`: its `enableServiceLinks`.
pub fn variables<'a>(
    services: impl IntoIterator<Item = &'a Service>,
    namespace: &str,
    links: bool,
) -> BTreeMap<String, String> {
    let mut chosen: BTreeMap<&str, &Service> = BTreeMap::new();
    let mut own: Vec<&Service> = Vec::new();
    for service in services {
        let (ns, name) = (service.key.namespace.as_str(), service.key.name.as_str());
        if (ns, name) == MASTER_SERVICE {
            chosen.insert(name, service);
        } else if ns == namespace && links {
            own.push(service);
        }
    }
    for service in own {
        chosen.insert(service.key.name.as_str(), service);
    }
    let mut vars = BTreeMap::new();
    for service in chosen.values() {
        add(&mut vars, service);
    }
    vars
}

fn variable_name(name: &str) -> String {
    name.replace('-', "_").to_ascii_uppercase()
}

fn protocol(p: Protocol) -> &'static str {
    match p {
        Protocol::Tcp => "TCP",
        Protocol::Udp => "UDP",
        Protocol::Sctp => "SCTP",
    }
}

fn add(vars: &mut BTreeMap<String, String>, service: &Service) {
    let (Some(ip), Some(first)) = (service.cluster_ips.first(), service.ports.first()) else {
        return;
    };
    let prefix = variable_name(&service.key.name);
    vars.insert(format!("{prefix}_SERVICE_HOST"), ip.to_string());
    vars.insert(format!("{prefix}_SERVICE_PORT"), first.port.to_string());
    for port in &service.ports {
        if !port.name.is_empty() {
            vars.insert(
                format!("{prefix}_SERVICE_PORT_{}", variable_name(&port.name)),
                port.port.to_string(),
            );
        }
    }
    for (i, port) in service.ports.iter().enumerate() {
        let upper = protocol(port.protocol);
        let lower = upper.to_ascii_lowercase();
        let url = format!("{lower}://{ip}:{}", port.port);
        if i == 0 {
            vars.insert(format!("{prefix}_PORT"), url.clone());
        }
        let port_prefix = format!("{prefix}_PORT_{}_{upper}", port.port);
        vars.insert(format!("{port_prefix}_PROTO"), lower);
        vars.insert(format!("{port_prefix}_PORT"), port.port.to_string());
        vars.insert(format!("{port_prefix}_ADDR"), ip.to_string());
        vars.insert(port_prefix, url);
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn service(namespace: &str, name: &str, spec: serde_json::Value) -> Service {
        let object = json!({"metadata": {"namespace": namespace, "name": name}, "spec": spec});
        Service::from_json(&object, &mut Vec::new()).expect("a Service with a ClusterIP")
    }

    /// `default/kubernetes`, as the bootstrap controller makes it.
    fn api_server() -> Service {
        service(
            "default",
            "kubernetes",
            json!({"clusterIP": "10.43.0.1", "ports": [{"name": "https", "port": 443}]}),
        )
    }

    #[test]
    fn kubelets_variables_for_the_namespace_and_the_api_server() {
        let services = [
            api_server(),
            service(
                "shop",
                "web-front",
                json!({"clusterIP": "10.43.7.8", "ports": [
                    {"name": "http", "port": 80},
                    {"name": "dns-udp", "port": 53, "protocol": "UDP"}]}),
            ),
            service(
                "other",
                "db",
                json!({"clusterIP": "10.43.9.9", "ports": [{"port": 5432}]}),
            ),
        ];
        let vars = variables(&services, "shop", true);
        let expected: BTreeMap<String, String> = [
            ("KUBERNETES_SERVICE_HOST", "10.43.0.1"),
            ("KUBERNETES_SERVICE_PORT", "443"),
            ("KUBERNETES_SERVICE_PORT_HTTPS", "443"),
            ("KUBERNETES_PORT", "tcp://10.43.0.1:443"),
            ("KUBERNETES_PORT_443_TCP", "tcp://10.43.0.1:443"),
            ("KUBERNETES_PORT_443_TCP_PROTO", "tcp"),
            ("KUBERNETES_PORT_443_TCP_PORT", "443"),
            ("KUBERNETES_PORT_443_TCP_ADDR", "10.43.0.1"),
            ("WEB_FRONT_SERVICE_HOST", "10.43.7.8"),
            ("WEB_FRONT_SERVICE_PORT", "80"),
            ("WEB_FRONT_SERVICE_PORT_HTTP", "80"),
            ("WEB_FRONT_SERVICE_PORT_DNS_UDP", "53"),
            ("WEB_FRONT_PORT", "tcp://10.43.7.8:80"),
            ("WEB_FRONT_PORT_80_TCP", "tcp://10.43.7.8:80"),
            ("WEB_FRONT_PORT_80_TCP_PROTO", "tcp"),
            ("WEB_FRONT_PORT_80_TCP_PORT", "80"),
            ("WEB_FRONT_PORT_80_TCP_ADDR", "10.43.7.8"),
            ("WEB_FRONT_PORT_53_UDP", "udp://10.43.7.8:53"),
            ("WEB_FRONT_PORT_53_UDP_PROTO", "udp"),
            ("WEB_FRONT_PORT_53_UDP_PORT", "53"),
            ("WEB_FRONT_PORT_53_UDP_ADDR", "10.43.7.8"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
        assert_eq!(vars, expected);
    }

    #[test]
    fn without_links_only_the_api_server_with_links_the_namespace_wins() {
        let services = [
            api_server(),
            service(
                "shop",
                "kubernetes",
                json!({"clusterIP": "10.43.5.5", "ports": [{"port": 8443}]}),
            ),
            service(
                "shop",
                "web",
                json!({"clusterIP": "10.43.7.8", "ports": [{"port": 80}]}),
            ),
        ];
        let without = variables(&services, "shop", false);
        assert_eq!(without["KUBERNETES_SERVICE_HOST"], "10.43.0.1");
        assert!(
            !without.keys().any(|k| k.starts_with("WEB_")),
            "{without:?}"
        );
        let with = variables(&services, "shop", true);
        assert_eq!(with["KUBERNETES_SERVICE_HOST"], "10.43.5.5");
        assert_eq!(with["WEB_SERVICE_HOST"], "10.43.7.8");
        // Headless Services have no ClusterIP: nothing (the proxy's model skips them).
        let headless = json!({"metadata": {"namespace": "shop", "name": "h"},
                              "spec": {"clusterIP": "None", "ports": [{"port": 80}]}});
        assert!(Service::from_json(&headless, &mut Vec::new()).is_none());
    }
}
