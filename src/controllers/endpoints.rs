//! The endpoints of Services: for every Service with a selector, the EndpointSlices
//! (kube-controller-manager's `endpointslice-controller`) and the legacy Endpoints object
//! (`endpoints-controller`) listing the pods it selects. Services without a selector are left
//! to whoever manages their endpoints (the `kubernetes` Service is the bootstrap's).
//!
//! - A pod is an endpoint once it has an IP and is not Succeeded or Failed. In slices its
//!   conditions are `ready` (pod Ready, or the Service's `publishNotReadyAddresses`),
//!   `serving` (pod Ready) and `terminating` (being deleted); a terminating pod stays listed
//!   with `ready: false` so proxies can drain it. Endpoints list ready pods in `addresses`,
//!   the others in `notReadyAddresses`, terminating pods not at all, as upstream.
//! - A Service port's `targetPort` by name resolves per pod through its containers' ports, so
//!   pods may map one Service port to different numbers: endpoints are grouped by their
//!   resolved ports, one group of slices per port set (at most 100 endpoints per slice), one
//!   subset per port set in Endpoints. A pod without the named port is left out of that set.
//! - Slices carry `kubernetes.io/service-name`, `endpointslice.kubernetes.io/managed-by` and
//!   a controller reference to the Service; Endpoints carry the Service's labels. Existing
//!   objects are updated in place when their content changes and deleted when no longer
//!   needed (also when the Service goes).
//!
//! A pod's change queues the Services of its namespace whose selector matched it before or
//! after the change; a Service's reconcile reads only the pods its selector matches.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use parking_lot::RwLock;
use serde_json::{json, Value};

use super::informer::{Change, Informers, InformersBuilder, KindCache, ObjectName};
use super::objects::{
    is_deleting, map_selector, new_controller_ref, pod_is_ready, pod_is_terminal,
};
use super::queue::WorkQueue;
use super::worker::{Controller, Outcome, ReconcileError};
use super::Shared;
use crate::client::{Client, DeleteOptions};
use crate::kube::object::StoredObject;
use crate::kube::resources::{self, ResourceInfo};
use crate::kube::selectors::LabelSelector;

/// Endpoints per EndpointSlice (kube-controller-manager's default `--max-endpoints-per-slice`).
const MAX_PER_SLICE: usize = 100;
/// Addresses per Endpoints object beyond which it is truncated (upstream: 1000).
const MAX_ENDPOINTS: usize = 1000;
const MANAGED_BY: &str = "endpointslice.kubernetes.io/managed-by";
const CONTROLLER_NAME: &str = "endpointslice-controller.k8s.io";
const SERVICE_NAME: &str = "kubernetes.io/service-name";

fn kind(group: &str, version: &str, plural: &str) -> &'static ResourceInfo {
    resources::find(group, version, plural)
        .unwrap_or_else(|| panic!("built-in kind {plural}.{group} is not registered"))
}

pub struct Endpoints {
    client: Client,
    services: Arc<KindCache>,
    pods: Arc<KindCache>,
    slices: Arc<KindCache>,
    endpoints: Arc<KindCache>,
}

/// Slices by the Service they belong to (`namespace/name`).
const SLICES_BY_SERVICE: &str = "service";

fn slice_service(slice: &StoredObject) -> Vec<String> {
    match (slice.labels.get(SERVICE_NAME), slice.labels.get(MANAGED_BY)) {
        (Some(svc), Some(CONTROLLER_NAME)) => vec![format!("{}/{svc}", slice.key.namespace)],
        _ => Vec::new(),
    }
}

impl Controller for Endpoints {
    /// The Service.
    type Key = ObjectName;
    const NAME: &'static str = "endpointslice-controller";
    const WORKERS: usize = 2;

    fn register(builder: &mut InformersBuilder, queue: &WorkQueue<ObjectName>) {
        builder.index(
            "discovery.k8s.io/endpointslices",
            SLICES_BY_SERVICE,
            slice_service,
        );
        builder.watch("endpoints");
        // The selectors of the Services of each namespace, kept by the Service handler and
        // read by the pod handler (both run on the informers' task), so a pod's change queues
        // exactly the Services that selected it before or after.
        let selectors: Arc<RwLock<Selectors>> = Arc::default();
        let (q, known) = (queue.clone(), selectors.clone());
        builder.on_change(
            "services",
            Arc::new(move |change: Change<'_>| {
                let svc = change.object();
                let name = ObjectName::of(svc);
                let mut known = known.write();
                let in_namespace = known.entry(name.namespace.clone()).or_default();
                match change {
                    Change::Deleted(_) => {
                        in_namespace.remove(&name.name);
                    }
                    _ => {
                        match map_selector(svc.value().pointer("/spec/selector")) {
                            Some(selector) => in_namespace.insert(name.name.clone(), selector),
                            None => in_namespace.remove(&name.name),
                        };
                    }
                }
                q.add(name);
            }),
        );
        let q = queue.clone();
        builder.on_change(
            "pods",
            Arc::new(move |change: Change<'_>| {
                let pod = change.object();
                let known = selectors.read();
                let Some(services) = known.get(&pod.key.namespace) else {
                    return;
                };
                for (svc, selector) in services {
                    let before = change
                        .old()
                        .is_some_and(|old| selector.matches(&old.labels));
                    if before || selector.matches(&pod.labels) {
                        q.add(ObjectName::new(pod.key.namespace.clone(), svc.clone()));
                    }
                }
            }),
        );
        let q = queue.clone();
        builder.on_change(
            "discovery.k8s.io/endpointslices",
            Arc::new(move |change: Change<'_>| {
                // Someone changed or deleted a managed slice: put it right.
                if let Some(svc) = slice_service(change.object()).pop() {
                    if let Some((ns, name)) = svc.split_once('/') {
                        if !matches!(change, Change::Added(_)) {
                            q.add(ObjectName::new(ns, name));
                        }
                    }
                }
            }),
        );
    }

    fn new(shared: &Shared, informers: &Arc<Informers>, _queue: WorkQueue<ObjectName>) -> Self {
        let cache = |r: &str| informers.cache(r).expect("registered in `register`");
        Endpoints {
            client: shared.controller_manager.clone(),
            services: cache("services"),
            pods: cache("pods"),
            slices: cache("discovery.k8s.io/endpointslices"),
            endpoints: cache("endpoints"),
        }
    }

    async fn reconcile(&self, key: &ObjectName) -> Result<Outcome, ReconcileError> {
        self.sync(key).await?;
        Ok(Outcome::Done)
    }
}

/// Service selectors by namespace, then Service name.
type Selectors = HashMap<String, BTreeMap<String, LabelSelector>>;

/// One endpoint of a Service.
#[derive(Debug, Clone, PartialEq)]
struct Endpoint {
    ip: String,
    pod: String,
    uid: String,
    node: Option<String>,
    hostname: Option<String>,
    ready: bool,
    serving: bool,
    terminating: bool,
}

/// A Service port resolved for a pod: (name, protocol, number).
type ResolvedPort = (String, String, i64);

impl Endpoints {
    async fn sync(&self, key: &ObjectName) -> Result<(), ReconcileError> {
        let Some(svc_ref) = self.services.get(&key.namespace, &key.name) else {
            return self.remove_all(key).await;
        };
        let svc = svc_ref.value();
        let Some(selector) = map_selector(svc.pointer("/spec/selector")) else {
            // Without a selector the endpoints are someone else's.
            return Ok(());
        };
        if svc.pointer("/spec/type").and_then(Value::as_str) == Some("ExternalName") {
            return self.remove_all(key).await;
        }
        let publish_not_ready = svc
            .pointer("/spec/publishNotReadyAddresses")
            .and_then(Value::as_bool)
            .unwrap_or(false);
        let service_ports: Vec<Value> = svc
            .pointer("/spec/ports")
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default();
        // Endpoints grouped by their resolved ports.
        let mut groups: BTreeMap<Vec<ResolvedPort>, Vec<Endpoint>> = BTreeMap::new();
        for pod_ref in self.pods.list(Some(&key.namespace)) {
            if !selector.matches(&pod_ref.labels) {
                continue;
            }
            let pod = pod_ref.value();
            let Some(ip) = pod
                .pointer("/status/podIP")
                .and_then(Value::as_str)
                .filter(|ip| !ip.is_empty())
            else {
                continue;
            };
            if pod_is_terminal(&pod) {
                continue;
            }
            let ready = pod_is_ready(&pod);
            let terminating = is_deleting(&pod);
            let ports = resolve_ports(&service_ports, &pod);
            let hostname = match (
                pod.pointer("/spec/hostname").and_then(Value::as_str),
                pod.pointer("/spec/subdomain").and_then(Value::as_str),
            ) {
                (Some(h), Some(sub)) if sub == key.name => Some(h.to_string()),
                _ => None,
            };
            groups.entry(ports).or_default().push(Endpoint {
                ip: ip.to_string(),
                pod: pod_ref.key.name.clone(),
                uid: pod_ref.uid.clone(),
                node: pod
                    .pointer("/spec/nodeName")
                    .and_then(Value::as_str)
                    .map(str::to_string),
                hostname,
                ready: (ready || publish_not_ready) && !terminating,
                serving: ready,
                terminating,
            });
        }
        for endpoints in groups.values_mut() {
            endpoints.sort_by(|a, b| a.ip.cmp(&b.ip).then_with(|| a.pod.cmp(&b.pod)));
        }
        self.sync_slices(&svc, key, &groups).await?;
        self.sync_endpoints(&svc, key, &groups, publish_not_ready)
            .await
    }

    async fn sync_slices(
        &self,
        svc: &Value,
        key: &ObjectName,
        groups: &BTreeMap<Vec<ResolvedPort>, Vec<Endpoint>>,
    ) -> Result<(), ReconcileError> {
        let slices_kind = kind("discovery.k8s.io", "v1", "endpointslices");
        let mut existing: Vec<Arc<StoredObject>> = self.slices.by_index(
            SLICES_BY_SERVICE,
            &format!("{}/{}", key.namespace, key.name),
        );
        existing.sort_by(|a, b| a.key.name.cmp(&b.key.name));
        // Existing slices by their port set, so a slice keeps serving the same ports.
        let mut by_ports: HashMap<String, Vec<Value>> = HashMap::new();
        for s in &existing {
            let v = s.value();
            by_ports
                .entry(v.get("ports").cloned().unwrap_or(json!([])).to_string())
                .or_default()
                .push(v);
        }
        let address_type = family_of(svc);
        let mut desired: Vec<(Value, Value)> = Vec::new(); // (ports, endpoints) per slice
        for (ports, endpoints) in groups {
            let ports_json = Value::Array(
                ports
                    .iter()
                    .map(|(name, protocol, port)| json!({"name": name, "protocol": protocol, "port": port}))
                    .collect(),
            );
            let matching: Vec<&Endpoint> = endpoints
                .iter()
                .filter(|e| ip_family(&e.ip) == address_type)
                .collect();
            for chunk in matching.chunks(MAX_PER_SLICE) {
                desired.push((
                    ports_json.clone(),
                    Value::Array(chunk.iter().map(|e| slice_endpoint(e)).collect()),
                ));
            }
        }
        if desired.is_empty() {
            // A Service without endpoints still has one (empty) slice, as upstream.
            desired.push((json!([]), json!([])));
        }
        let mut used: Vec<String> = Vec::new();
        for (ports, endpoints) in desired {
            let candidates = by_ports.get_mut(&ports.to_string());
            let reuse = candidates.and_then(|c| {
                if c.is_empty() {
                    None
                } else {
                    Some(c.remove(0))
                }
            });
            match reuse {
                Some(mut slice) => {
                    used.push(super::objects::name(&slice).to_string());
                    if slice.get("endpoints") == Some(&endpoints)
                        && slice.get("addressType").and_then(Value::as_str) == Some(address_type)
                    {
                        continue;
                    }
                    slice["endpoints"] = endpoints;
                    slice["addressType"] = json!(address_type);
                    let name = super::objects::name(&slice).to_string();
                    self.client
                        .update(slices_kind, &key.namespace, &name, &slice)
                        .await?;
                }
                None => {
                    let slice = json!({
                        "apiVersion": "discovery.k8s.io/v1",
                        "kind": "EndpointSlice",
                        "metadata": {
                            "generateName": format!("{}-", key.name),
                            "namespace": key.namespace,
                            "labels": {SERVICE_NAME: key.name, MANAGED_BY: CONTROLLER_NAME},
                            "ownerReferences": [new_controller_ref(svc, "v1", "Service")],
                        },
                        "addressType": address_type,
                        "ports": ports,
                        "endpoints": endpoints,
                    });
                    match self
                        .client
                        .create(slices_kind, &key.namespace, &slice)
                        .await
                    {
                        Ok(created) => used.push(super::objects::name(&created).to_string()),
                        // The namespace is going away.
                        Err(e) if e.code() == 403 || e.is_not_found() => return Ok(()),
                        Err(e) => return Err(e.into()),
                    }
                }
            }
        }
        for s in existing {
            if !used.contains(&s.key.name) {
                self.delete(slices_kind, &s).await?;
            }
        }
        Ok(())
    }

    async fn sync_endpoints(
        &self,
        svc: &Value,
        key: &ObjectName,
        groups: &BTreeMap<Vec<ResolvedPort>, Vec<Endpoint>>,
        publish_not_ready: bool,
    ) -> Result<(), ReconcileError> {
        let endpoints_kind = kind("", "v1", "endpoints");
        let mut subsets = Vec::new();
        let mut total = 0usize;
        let mut truncated = false;
        for (ports, endpoints) in groups {
            let mut ready = Vec::new();
            let mut not_ready = Vec::new();
            for e in endpoints.iter().filter(|e| !e.terminating) {
                if total >= MAX_ENDPOINTS {
                    truncated = true;
                    break;
                }
                total += 1;
                let address = endpoints_address(e, &key.namespace);
                if e.serving || publish_not_ready {
                    ready.push(address);
                } else {
                    not_ready.push(address);
                }
            }
            if ready.is_empty() && not_ready.is_empty() {
                continue;
            }
            let mut subset = json!({
                "ports": ports.iter().map(|(name, protocol, port)| {
                    let mut p = json!({"protocol": protocol, "port": port});
                    if !name.is_empty() {
                        p["name"] = json!(name);
                    }
                    p
                }).collect::<Vec<_>>(),
            });
            if !ready.is_empty() {
                subset["addresses"] = Value::Array(ready);
            }
            if !not_ready.is_empty() {
                subset["notReadyAddresses"] = Value::Array(not_ready);
            }
            subsets.push(subset);
        }
        let mut labels = svc
            .pointer("/metadata/labels")
            .cloned()
            .unwrap_or_else(|| json!({}));
        // Upstream marks the Endpoints of headless Services.
        if svc.pointer("/spec/clusterIP").and_then(Value::as_str) == Some("None") {
            labels["service.kubernetes.io/headless"] = json!("");
        }
        let mut annotations = json!({});
        if truncated {
            annotations["endpoints.kubernetes.io/over-capacity"] = json!("truncated");
        }
        // From the store rather than the cache: this controller's own last write may not have
        // reached the informer yet, and its resourceVersion is the precondition.
        let existing = self.client.get(endpoints_kind, &key.namespace, &key.name);
        let result = match existing {
            None => {
                let object = json!({
                    "apiVersion": "v1",
                    "kind": "Endpoints",
                    "metadata": {"name": key.name, "namespace": key.namespace, "labels": labels,
                        "annotations": annotations},
                    "subsets": subsets,
                });
                self.client
                    .create(endpoints_kind, &key.namespace, &object)
                    .await
            }
            Some(current) => {
                let mut object = current.value();
                let same = object.get("subsets").cloned().unwrap_or(json!([])) == json!(subsets)
                    && object
                        .pointer("/metadata/labels")
                        .cloned()
                        .unwrap_or(json!({}))
                        == labels;
                if same && !truncated {
                    return Ok(());
                }
                object["subsets"] = json!(subsets);
                object["metadata"]["labels"] = labels;
                if truncated {
                    object["metadata"]["annotations"] = annotations;
                }
                self.client
                    .update(endpoints_kind, &key.namespace, &key.name, &object)
                    .await
            }
        };
        match result {
            Ok(_) => Ok(()),
            Err(e) if e.code() == 403 || e.is_not_found() || e.is_already_exists() => Ok(()),
            Err(e) => Err(e.into()),
        }
    }

    /// The Service is gone (or became ExternalName): its Endpoints and slices go too.
    async fn remove_all(&self, key: &ObjectName) -> Result<(), ReconcileError> {
        if let Some(ep) = self.endpoints.get(&key.namespace, &key.name) {
            self.delete(kind("", "v1", "endpoints"), &ep).await?;
        }
        let slices_kind = kind("discovery.k8s.io", "v1", "endpointslices");
        for s in self.slices.by_index(
            SLICES_BY_SERVICE,
            &format!("{}/{}", key.namespace, key.name),
        ) {
            self.delete(slices_kind, &s).await?;
        }
        Ok(())
    }

    async fn delete(
        &self,
        info: &ResourceInfo,
        object: &StoredObject,
    ) -> Result<(), ReconcileError> {
        let options = DeleteOptions {
            uid: Some(object.uid.clone()),
            ..Default::default()
        };
        match self
            .client
            .delete(info, &object.key.namespace, &object.key.name, &options)
            .await
        {
            Ok(_) => Ok(()),
            Err(e) if e.is_not_found() || e.is_conflict() => Ok(()),
            Err(e) => Err(e.into()),
        }
    }
}

/// The Service's address family for slices (its first ipFamily; IPv4 by default).
fn family_of(svc: &Value) -> &'static str {
    match svc.pointer("/spec/ipFamilies/0").and_then(Value::as_str) {
        Some("IPv6") => "IPv6",
        _ => "IPv4",
    }
}

fn ip_family(ip: &str) -> &'static str {
    if ip.contains(':') {
        "IPv6"
    } else {
        "IPv4"
    }
}

/// The Service's ports as this pod serves them; a port whose named target the pod lacks is
/// left out.
fn resolve_ports(service_ports: &[Value], pod: &Value) -> Vec<ResolvedPort> {
    let mut out = Vec::new();
    for sp in service_ports {
        let name = sp
            .get("name")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string();
        let protocol = sp
            .get("protocol")
            .and_then(Value::as_str)
            .unwrap_or("TCP")
            .to_string();
        let target = sp.get("targetPort").or_else(|| sp.get("port"));
        let number = match target {
            Some(Value::Number(n)) => n.as_i64(),
            Some(Value::String(s)) => match s.parse::<i64>() {
                Ok(n) => Some(n),
                Err(_) => named_port(pod, s, &protocol),
            },
            _ => None,
        };
        if let Some(number) = number {
            out.push((name, protocol, number));
        }
    }
    out
}

fn named_port(pod: &Value, name: &str, protocol: &str) -> Option<i64> {
    pod.pointer("/spec/containers")?
        .as_array()?
        .iter()
        .filter_map(|c| c.get("ports").and_then(Value::as_array))
        .flatten()
        .find(|p| {
            p.get("name").and_then(Value::as_str) == Some(name)
                && p.get("protocol").and_then(Value::as_str).unwrap_or("TCP") == protocol
        })
        .and_then(|p| p.get("containerPort"))
        .and_then(Value::as_i64)
}

fn slice_endpoint(e: &Endpoint) -> Value {
    let mut v = json!({
        "addresses": [e.ip],
        "conditions": {"ready": e.ready, "serving": e.serving, "terminating": e.terminating},
        "targetRef": {"kind": "Pod", "name": e.pod, "uid": e.uid},
    });
    if let Some(node) = &e.node {
        v["nodeName"] = json!(node);
    }
    if let Some(h) = &e.hostname {
        v["hostname"] = json!(h);
    }
    v
}

fn endpoints_address(e: &Endpoint, namespace: &str) -> Value {
    let mut v = json!({
        "ip": e.ip,
        "targetRef": {"kind": "Pod", "namespace": namespace, "name": e.pod, "uid": e.uid},
    });
    if let Some(node) = &e.node {
        v["nodeName"] = json!(node);
    }
    if let Some(h) = &e.hostname {
        v["hostname"] = json!(h);
    }
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn named_target_ports_resolve_per_pod() {
        let service_ports = vec![
            json!({"name": "http", "port": 80, "targetPort": "web"}),
            json!({"name": "metrics", "port": 9090, "targetPort": 9100}),
            json!({"name": "dns", "port": 53, "protocol": "UDP", "targetPort": "dns"}),
        ];
        let pod = json!({"spec": {"containers": [{"ports": [
            {"name": "web", "containerPort": 8080},
            {"name": "dns", "containerPort": 5353, "protocol": "UDP"},
        ]}]}});
        assert_eq!(
            resolve_ports(&service_ports, &pod),
            vec![
                ("http".into(), "TCP".into(), 8080),
                ("metrics".into(), "TCP".into(), 9100),
                ("dns".into(), "UDP".into(), 5353),
            ]
        );
        // A pod without the named port serves the others only.
        let bare = json!({"spec": {"containers": [{}]}});
        assert_eq!(
            resolve_ports(&service_ports, &bare),
            vec![("metrics".into(), "TCP".into(), 9100)]
        );
    }
}
