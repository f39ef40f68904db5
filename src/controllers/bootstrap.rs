//! The objects every cluster has, kept by the leader: the four system namespaces, the two
//! system PriorityClasses (`system-node-critical`, `system-cluster-critical`) and the
//! `default/kubernetes` Service with its Endpoints and EndpointSlice listing the API servers
//! that are up to date (kube-apiserver's lease endpoint reconciler does the same). Idempotent:
//! a missing object is created, one whose managed fields drifted (a new port, a member that
//! joined or fell behind) is updated in place, anything else is left alone. Every write goes
//! through the in-process client, so the objects get the API's defaults, validation and
//! managedFields like any other.

use std::net::IpAddr;

use serde_json::{json, Map, Value};

use crate::api::policy_validation::SYSTEM_PRIORITY_CLASSES;
use crate::client::{Client, ClientError};
use crate::kube::object::ObjectKey;
use crate::kube::resources::{self, ResourceInfo};
use crate::kube::store::Store;

/// Namespaces that exist in every cluster.
pub const SYSTEM_NAMESPACES: [&str; 4] =
    ["default", "kube-system", "kube-public", "kube-node-lease"];

/// Whether `store` holds the bootstrap objects clients expect of a running cluster: the system
/// namespaces, the `default/kubernetes` Service and the default RBAC roles and bindings
/// (`rbac_defaults`). A cluster member stays not ready until they
/// have been created (by the leader) and have reached its own store, as kube-apiserver's
/// `/readyz` waits for its bootstrap post-start hook: a client that waits for readiness and
/// then creates something in `default` must not be told the namespace does not exist.
pub fn present(store: &Store) -> bool {
    SYSTEM_NAMESPACES
        .iter()
        .all(|ns| store.get(&ObjectKey::new("namespaces", "", *ns)).is_some())
        && store
            .get(&ObjectKey::new("services", "default", "kubernetes"))
            .is_some()
        && super::rbac_defaults::present(store)
        && SYSTEM_PRIORITY_CLASSES.iter().all(|(name, _)| {
            store
                .get(&ObjectKey::new(PRIORITY_CLASSES, "", *name))
                .is_some()
        })
}

const PRIORITY_CLASSES: &str = "scheduling.k8s.io/priorityclasses";

/// Why the bootstrap objects could not be ensured.
#[derive(Debug, thiserror::Error)]
pub enum BootstrapError {
    #[error("{object}: {error}")]
    Write { object: String, error: ClientError },
}

/// Where the `kubernetes` Service points: the API servers' addresses and port.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiServers {
    pub ips: Vec<IpAddr>,
    pub port: u16,
    /// The Service's ClusterIP: the first address of the service CIDR.
    pub service_ip: IpAddr,
    /// The `kube-system/kube-dns` Service's ClusterIP (`--cluster-dns`); `None`: no such
    /// Service is made.
    pub dns_service_ip: Option<IpAddr>,
}

/// Creates or repairs the bootstrap objects.
pub async fn ensure_all(client: &Client, servers: &ApiServers) -> Result<(), BootstrapError> {
    for ns in SYSTEM_NAMESPACES {
        ensure(client, kind("", "namespaces"), "", ns, namespace(ns), &[]).await?;
    }
    for (name, value) in SYSTEM_PRIORITY_CLASSES {
        ensure(
            client,
            kind("scheduling.k8s.io", "priorityclasses"),
            "",
            name,
            priority_class(name, value),
            &[],
        )
        .await?;
    }
    let service_ip = servers.service_ip;
    ensure(
        client,
        kind("", "services"),
        "default",
        "kubernetes",
        kubernetes_service(service_ip, servers.port),
        &["spec"],
    )
    .await?;
    ensure(
        client,
        kind("", "endpoints"),
        "default",
        "kubernetes",
        kubernetes_endpoints(&servers.ips, servers.port),
        &["subsets"],
    )
    .await?;
    ensure(
        client,
        kind("discovery.k8s.io", "endpointslices"),
        "default",
        "kubernetes",
        kubernetes_endpoint_slice(&servers.ips, servers.port),
        &["addressType", "endpoints", "ports"],
    )
    .await?;
    if let Some(dns_ip) = servers.dns_service_ip {
        // The cluster DNS: answered by every node's agent (the Service rules send its port 53
        // to the node's own responder), so it has no selector and no endpoints. Made once and
        // then left to the cluster's admin, like the DNS add-on's objects; its ClusterIP
        // cannot change anyway.
        ensure(
            client,
            kind("", "serviceaccounts"),
            "kube-system",
            "kube-dns",
            kube_dns_service_account(),
            &[],
        )
        .await?;
        ensure(
            client,
            kind("", "services"),
            "kube-system",
            "kube-dns",
            kube_dns_service(dns_ip),
            &[],
        )
        .await?;
    }
    Ok(())
}

/// A built-in kind of the registry.
fn kind(group: &str, plural: &str) -> &'static ResourceInfo {
    resources::RESOURCES
        .iter()
        .find(|r| r.group == group && r.plural == plural)
        .unwrap_or_else(|| panic!("built-in kind {plural}.{group} is not registered"))
}

/// Makes the object exist with `desired`'s labels and top-level `managed` fields.
async fn ensure(
    client: &Client,
    info: &'static ResourceInfo,
    namespace: &str,
    name: &str,
    desired: Value,
    managed: &[&str],
) -> Result<(), BootstrapError> {
    let failed = |error: ClientError| BootstrapError::Write {
        object: ObjectKey::new(info.store_key(), namespace, name).to_string(),
        error,
    };
    let Some(current) = client.get(info, namespace, name) else {
        return match client.create(info, namespace, &desired).await {
            // Another writer (a client racing start-up) created it first: theirs stands.
            Ok(_) => Ok(()),
            Err(e) if e.is_already_exists() => Ok(()),
            Err(e) => Err(failed(e)),
        };
    };
    let mut object = current.value();
    let mut changed = false;
    for field in managed {
        if object.get(*field) != desired.get(*field) {
            if let (Some(obj), Some(value)) = (object.as_object_mut(), desired.get(*field)) {
                obj.insert(field.to_string(), value.clone());
                changed = true;
            }
        }
    }
    if let Some(labels) = desired
        .pointer("/metadata/labels")
        .and_then(Value::as_object)
    {
        changed |= merge_labels(&mut object, labels);
    }
    if !changed {
        return Ok(());
    }
    tracing::info!(component = "controllers", kind = info.kind, %namespace, %name, "updating bootstrap object");
    client
        .update(info, namespace, name, &object)
        .await
        .map(|_| ())
        .map_err(failed)
}

/// Adds `labels` to `object`'s labels; whether anything changed.
fn merge_labels(object: &mut Value, labels: &Map<String, Value>) -> bool {
    let Some(metadata) = object.get_mut("metadata").and_then(Value::as_object_mut) else {
        return false;
    };
    let existing = metadata
        .entry("labels")
        .or_insert_with(|| Value::Object(Map::new()));
    let Some(existing) = existing.as_object_mut() else {
        return false;
    };
    let mut changed = false;
    for (k, v) in labels {
        if existing.get(k) != Some(v) {
            existing.insert(k.clone(), v.clone());
            changed = true;
        }
    }
    changed
}

fn namespace(name: &str) -> Value {
    json!({
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {"name": name, "labels": {"kubernetes.io/metadata.name": name}},
        "spec": {"finalizers": ["kubernetes"]},
        "status": {"phase": "Active"},
    })
}

/// A system PriorityClass as kube-apiserver creates it.
fn priority_class(name: &str, value: i64) -> Value {
    let description = if name == "system-node-critical" {
        "Used for system critical pods that must not be moved from their current node."
    } else {
        "Used for system critical pods that must run in the cluster, but can be moved to another node if necessary."
    };
    json!({
        "apiVersion": "scheduling.k8s.io/v1",
        "kind": "PriorityClass",
        "metadata": {"name": name},
        "value": value,
        "description": description,
        "preemptionPolicy": "PreemptLowerPriority",
    })
}

fn family(ip: &IpAddr) -> &'static str {
    if ip.is_ipv4() {
        "IPv4"
    } else {
        "IPv6"
    }
}

fn kubernetes_service(cluster_ip: IpAddr, api_port: u16) -> Value {
    json!({
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {
            "name": "kubernetes",
            "namespace": "default",
            "labels": {"component": "apiserver", "provider": "kubernetes"},
        },
        "spec": {
            "clusterIP": cluster_ip.to_string(),
            "clusterIPs": [cluster_ip.to_string()],
            "ports": [{"name": "https", "port": 443, "protocol": "TCP", "targetPort": api_port}],
            "sessionAffinity": "None",
            "type": "ClusterIP",
            "ipFamilies": [family(&cluster_ip)],
            "ipFamilyPolicy": "SingleStack",
            "internalTrafficPolicy": "Cluster",
        },
        "status": {"loadBalancer": {}},
    })
}

fn kube_dns_service_account() -> Value {
    json!({
        "apiVersion": "v1",
        "kind": "ServiceAccount",
        "metadata": {"name": "kube-dns", "namespace": "kube-system"},
    })
}

/// The Service the DNS add-on of kubeadm and k3s installs, under the same name and labels
/// (clients look for `k8s-app=kube-dns`), without the metrics port (no metrics are served).
fn kube_dns_service(cluster_ip: IpAddr) -> Value {
    json!({
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {
            "name": "kube-dns",
            "namespace": "kube-system",
            "labels": {"k8s-app": "kube-dns", "kubernetes.io/cluster-service": "true",
                       "kubernetes.io/name": "KubeDNS"},
        },
        "spec": {
            "clusterIP": cluster_ip.to_string(),
            "clusterIPs": [cluster_ip.to_string()],
            "ports": [
                {"name": "dns", "port": 53, "protocol": "UDP", "targetPort": 53},
                {"name": "dns-tcp", "port": 53, "protocol": "TCP", "targetPort": 53},
            ],
            "type": "ClusterIP",
            "ipFamilies": [family(&cluster_ip)],
            "ipFamilyPolicy": "SingleStack",
        },
    })
}

fn kubernetes_endpoints(node_ips: &[IpAddr], api_port: u16) -> Value {
    let addresses: Vec<Value> = node_ips
        .iter()
        .map(|ip| json!({"ip": ip.to_string()}))
        .collect();
    json!({
        "apiVersion": "v1",
        "kind": "Endpoints",
        "metadata": {
            "name": "kubernetes",
            "namespace": "default",
            "labels": {"endpointslice.kubernetes.io/skip-mirror": "true"},
        },
        "subsets": [{
            "addresses": addresses,
            "ports": [{"name": "https", "port": api_port, "protocol": "TCP"}],
        }],
    })
}

/// The slice upstream's endpoints adapter writes: one address family (that of the first node
/// IP), every address ready, labelled only with the service name.
fn kubernetes_endpoint_slice(node_ips: &[IpAddr], api_port: u16) -> Value {
    let address_type = node_ips.first().map(family).unwrap_or("IPv4");
    let endpoints: Vec<Value> = node_ips
        .iter()
        .filter(|ip| family(ip) == address_type)
        .map(|ip| json!({"addresses": [ip.to_string()], "conditions": {"ready": true}}))
        .collect();
    json!({
        "apiVersion": "discovery.k8s.io/v1",
        "kind": "EndpointSlice",
        "metadata": {
            "name": "kubernetes",
            "namespace": "default",
            "labels": {"kubernetes.io/service-name": "kubernetes"},
        },
        "addressType": address_type,
        "endpoints": endpoints,
        "ports": [{"name": "https", "port": api_port, "protocol": "TCP"}],
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::client::testing::{apiserver_client, wal_context};

    fn servers(port: u16) -> ApiServers {
        ApiServers {
            ips: vec!["127.0.0.1".parse().unwrap()],
            port,
            service_ip: "10.43.0.1".parse().unwrap(),
            dns_service_ip: None,
        }
    }

    #[tokio::test]
    async fn creates_objects_once_through_the_api_and_repairs_drift() {
        let dir = tempfile::tempdir().unwrap();
        let ctx = wal_context(dir.path());
        let client = apiserver_client(&ctx);
        ensure_all(&client, &servers(6443)).await.unwrap();
        let rv = ctx.store.resource_version();
        // Four namespaces, two PriorityClasses, the Service, its Endpoints and EndpointSlice.
        assert_eq!(rv, 9);
        let critical = ctx
            .store
            .get(&ObjectKey::new(
                "scheduling.k8s.io/priorityclasses",
                "",
                "system-node-critical",
            ))
            .unwrap()
            .value();
        assert_eq!(critical["value"], 2_000_001_000);
        assert_eq!(critical["preemptionPolicy"], "PreemptLowerPriority");
        ensure_all(&client, &servers(6443)).await.unwrap();
        assert_eq!(
            ctx.store.resource_version(),
            rv,
            "second run must not write"
        );
        assert!(
            !present(&ctx.store),
            "the default RBAC objects are part of it"
        );
        super::super::rbac_defaults::reconcile(&client)
            .await
            .unwrap();
        assert!(present(&ctx.store));
        let rv = ctx.store.resource_version();

        let ns = ctx
            .store
            .get(&ObjectKey::new("namespaces", "", "kube-system"))
            .unwrap()
            .value();
        assert_eq!(
            ns["metadata"]["labels"]["kubernetes.io/metadata.name"],
            "kube-system"
        );
        assert_eq!(ns["spec"]["finalizers"], json!(["kubernetes"]));
        assert_eq!(ns["status"]["phase"], "Active");
        // Written through the API pipeline: managedFields name the API server.
        assert_eq!(
            ns["metadata"]["managedFields"][0]["manager"],
            "kube-apiserver"
        );
        let uid = ns["metadata"]["uid"].as_str().unwrap();
        assert_eq!(uuid::Uuid::parse_str(uid).unwrap().get_version_num(), 4);
        let created = ns["metadata"]["creationTimestamp"].as_str().unwrap();
        assert!(
            chrono::DateTime::parse_from_rfc3339(created).is_ok()
                && created.ends_with('Z')
                && created.len() == 20,
            "{created}"
        );

        let svc_key = ObjectKey::new("services", "default", "kubernetes");
        let svc = ctx.store.get(&svc_key).unwrap().value();
        assert_eq!(svc["spec"]["clusterIP"], "10.43.0.1");
        assert_eq!(
            svc["spec"]["ports"][0],
            json!({"name": "https", "port": 443, "protocol": "TCP", "targetPort": 6443})
        );
        assert!(svc["spec"].get("selector").is_none());
        let ep = ctx
            .store
            .get(&ObjectKey::new("endpoints", "default", "kubernetes"))
            .unwrap()
            .value();
        assert_eq!(ep["subsets"][0]["addresses"][0]["ip"], "127.0.0.1");

        // A new port (a restart with another --listen) updates in place, keeping the uid.
        ensure_all(&client, &servers(7443)).await.unwrap();
        assert_eq!(ctx.store.resource_version(), rv + 3);
        let svc2 = ctx.store.get(&svc_key).unwrap().value();
        assert_eq!(svc2["spec"]["ports"][0]["targetPort"], 7443);
        assert_eq!(svc2["metadata"]["uid"], svc["metadata"]["uid"]);
        let slice = ctx
            .store
            .get(&ObjectKey::new(
                "discovery.k8s.io/endpointslices",
                "default",
                "kubernetes",
            ))
            .unwrap()
            .value();
        assert_eq!(slice["ports"][0]["port"], 7443);
        assert_eq!(slice["endpoints"][0]["conditions"]["ready"], true);
    }

    #[tokio::test]
    async fn the_cluster_dns_service_and_its_account_are_made_once() {
        let dir = tempfile::tempdir().unwrap();
        let ctx = wal_context(dir.path());
        let client = apiserver_client(&ctx);
        let with_dns = ApiServers {
            dns_service_ip: Some("10.43.0.10".parse().unwrap()),
            ..servers(6443)
        };
        ensure_all(&client, &with_dns).await.unwrap();
        let rv = ctx.store.resource_version();
        ensure_all(&client, &with_dns).await.unwrap();
        assert_eq!(
            ctx.store.resource_version(),
            rv,
            "second run must not write"
        );
        let svc = ctx
            .store
            .get(&ObjectKey::new("services", "kube-system", "kube-dns"))
            .unwrap()
            .value();
        assert_eq!(svc["spec"]["clusterIP"], "10.43.0.10");
        assert_eq!(svc["metadata"]["labels"]["k8s-app"], "kube-dns");
        let ports: Vec<(&str, &str)> = svc["spec"]["ports"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| (p["name"].as_str().unwrap(), p["protocol"].as_str().unwrap()))
            .collect();
        assert_eq!(ports, [("dns", "UDP"), ("dns-tcp", "TCP")]);
        assert!(ctx
            .store
            .get(&ObjectKey::new(
                "serviceaccounts",
                "kube-system",
                "kube-dns"
            ))
            .is_some());
    }

    #[test]
    fn slice_keeps_one_family() {
        let ips: Vec<IpAddr> = vec!["10.0.0.5".parse().unwrap(), "fd00::5".parse().unwrap()];
        let slice = kubernetes_endpoint_slice(&ips, 6443);
        assert_eq!(slice["addressType"], "IPv4");
        assert_eq!(slice["endpoints"].as_array().unwrap().len(), 1);
        assert_eq!(slice["ports"][0]["port"], 6443);
    }
}
