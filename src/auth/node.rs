//! The Node authorizer, with the name checks of NodeRestriction admission: a node credential
//! (user `system:node:<name>` in `system:nodes`) reaches only what the pods bound to it need
//! and writes only what is its own, as kube-apiserver's Node authorizer
//! (plugin/pkg/auth/authorizer/node) and NodeRestriction plugin decide:
//!
//! - secrets, configmaps and persistentvolumeclaims: read (`get`, or `list`/`watch` of one
//!   object by `fieldSelector=metadata.name=`) only when a pod bound to the node uses them
//!   (volumes, projected sources, environment, image pull secrets); never written;
//! - `serviceaccounts/token`: created only for the service account of a pod bound to the node
//!   (the TokenRequest must also be bound to such a pod: `api::subresource::token`);
//! - leases in `kube-node-lease`: only the one named after the node;
//! - everything else is left to RBAC (the `system:node` role), and the writes of nodes, pods
//!   and node Leases to NodeRestriction admission (`api::write::admission::node_restriction`:
//!   only its own Node and Lease, only its pods' status, deletion and eviction).
//!
//! A refusal says `no relationship found between node '<name>' and this object` (or why the
//! write is not the node's), the reason kube-apiserver gives.

use serde_json::Value;

use super::attributes::RequestInfo;
use super::rbac::Decision;
use super::user::{UserInfo, NODES};
use crate::kube::store::Store;

const NODE_PREFIX: &str = "system:node:";
const NODE_LEASE_NAMESPACE: &str = "kube-node-lease";

/// The node a user is, if it is a node credential.
pub fn node_name(user: &UserInfo) -> Option<&str> {
    let name = user.name.strip_prefix(NODE_PREFIX)?;
    (!name.is_empty() && user.in_group(NODES)).then_some(name)
}

/// The Node authorizer's decision on `info`, or `None` when it has no opinion (not a node,
/// or a request RBAC decides).
pub fn authorize(store: &Store, user: &UserInfo, info: &RequestInfo) -> Option<Decision> {
    let node = node_name(user)?;
    if !info.resource_request {
        return None;
    }
    let allow = || Some(Decision::Allow(String::new()));
    let deny = |reason: String| Some(Decision::Deny(reason));
    let unrelated = || {
        deny(format!(
            "no relationship found between node '{node}' and this object"
        ))
    };
    match (info.api_group.as_str(), info.resource.as_str()) {
        ("", kind @ ("secrets" | "configmaps" | "persistentvolumeclaims")) => {
            if !info.subresource.is_empty()
                || !matches!(info.verb.as_str(), "get" | "list" | "watch")
            {
                return deny(format!("can only read individual {kind}"));
            }
            if info.name.is_empty() {
                return deny(format!("can only read individual {kind}"));
            }
            let used =
                pods_on(store, node, &info.namespace).any(|pod| references(&pod, kind, &info.name));
            if used {
                allow()
            } else {
                unrelated()
            }
        }
        ("", "serviceaccounts") if info.subresource == "token" => {
            if info.verb != "create" {
                return unrelated();
            }
            let used = pods_on(store, node, &info.namespace).any(|pod| {
                pod.pointer("/spec/serviceAccountName")
                    .and_then(Value::as_str)
                    .unwrap_or("default")
                    == info.name
            });
            if used {
                allow()
            } else {
                unrelated()
            }
        }
        ("coordination.k8s.io", "leases") if info.namespace == NODE_LEASE_NAMESPACE => {
            // A create names its Lease in the body: admission holds it to the node's name.
            match info.verb.as_str() {
                "create" if info.name.is_empty() || info.name == node => allow(),
                "get" | "update" | "patch" | "delete" if info.name == node => allow(),
                _ => unrelated(),
            }
        }
        _ => None,
    }
}

/// The pods in `namespace` bound to `node`, parsed.
fn pods_on<'a>(store: &Store, node: &'a str, namespace: &str) -> impl Iterator<Item = Value> + 'a {
    let snapshot = store.snapshot();
    let pods: Vec<Value> = snapshot
        .range("pods", Some(namespace), None)
        .filter(|pod| pod.field("spec.nodeName") == Some(node))
        .map(|pod| pod.value())
        .collect();
    pods.into_iter()
}

/// Whether `pod` uses the object `name` of `kind` (`secrets`, `configmaps`,
/// `persistentvolumeclaims`).
pub fn references(pod: &Value, kind: &str, name: &str) -> bool {
    let mut found = false;
    let is = |candidate: Option<&Value>| candidate.and_then(Value::as_str) == Some(name);
    let spec = pod.get("spec").unwrap_or(&Value::Null);
    let list = |v: &Value, key: &str| -> Vec<Value> {
        v.get(key)
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default()
    };
    let pod_name = pod
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or_default();
    for volume in list(spec, "volumes") {
        match kind {
            "secrets" => {
                found |= is(volume.pointer("/secret/secretName"));
                for source in list(volume.get("projected").unwrap_or(&Value::Null), "sources") {
                    found |= is(source.pointer("/secret/name"));
                }
            }
            "configmaps" => {
                found |= is(volume.pointer("/configMap/name"));
                for source in list(volume.get("projected").unwrap_or(&Value::Null), "sources") {
                    found |= is(source.pointer("/configMap/name"));
                }
            }
            _ => {
                found |= is(volume.pointer("/persistentVolumeClaim/claimName"));
                if volume.get("ephemeral").is_some() {
                    let volume_name = volume.get("name").and_then(Value::as_str).unwrap_or("");
                    found |= format!("{pod_name}-{volume_name}") == name;
                }
            }
        }
    }
    if kind == "secrets" {
        for pull in list(spec, "imagePullSecrets") {
            found |= is(pull.get("name"));
        }
    }
    let (key_ref, env_from_ref) = match kind {
        "secrets" => ("secretKeyRef", "secretRef"),
        "configmaps" => ("configMapKeyRef", "configMapRef"),
        _ => return found,
    };
    for group in ["containers", "initContainers", "ephemeralContainers"] {
        for container in list(spec, group) {
            for env in list(&container, "env") {
                found |= is(env
                    .get("valueFrom")
                    .and_then(|v| v.get(key_ref))
                    .and_then(|r| r.get("name")));
            }
            for from in list(&container, "envFrom") {
                found |= is(from.get(env_from_ref).and_then(|r| r.get("name")));
            }
        }
    }
    found
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::kube::mutation::Mutation;
    use crate::kube::object::ObjectKey;
    use crate::kube::store::StoreConfig;

    fn put(store: &Store, resource: &str, ns: &str, name: &str, body: Value) {
        let mut body = body;
        body["metadata"] = json!({"name": name, "namespace": ns, "uid": name});
        store
            .apply(Mutation::Create {
                key: ObjectKey::new(resource, ns, name),
                object: body,
                requires_open_namespace: false,
            })
            .unwrap();
    }

    fn req(method: &str, url: &str) -> RequestInfo {
        let (path, query) = match url.split_once('?') {
            Some((p, q)) => (p, Some(q)),
            None => (url, None),
        };
        RequestInfo::from_request(&method.parse().unwrap(), path, query)
    }

    #[test]
    fn a_node_reaches_only_what_its_pods_use() {
        let store = Store::new(StoreConfig::default());
        put(
            &store,
            "pods",
            "ns",
            "mine",
            json!({"spec": {"nodeName": "n1", "serviceAccountName": "sa1",
                "imagePullSecrets": [{"name": "pull"}],
                "volumes": [{"name": "v", "secret": {"secretName": "vol"}},
                            {"name": "p", "projected": {"sources": [{"configMap": {"name": "proj"}}]}},
                            {"name": "c", "persistentVolumeClaim": {"claimName": "claim"}}],
                "containers": [{"name": "c", "env": [{"name": "E", "valueFrom":
                    {"secretKeyRef": {"name": "env", "key": "k"}}}],
                    "envFrom": [{"configMapRef": {"name": "envfrom"}}]}]}}),
        );
        put(
            &store,
            "pods",
            "ns",
            "theirs",
            json!({"spec": {"nodeName": "n2", "serviceAccountName": "sa2",
                "volumes": [{"name": "v", "secret": {"secretName": "other"}}]}}),
        );
        let n1 = UserInfo::new("system:node:n1", &[NODES]);
        let decide = |method: &str, url: &str| authorize(&store, &n1, &req(method, url));
        let allowed = |method: &str, url: &str| decide(method, url).is_some_and(|d| d.allowed());
        for url in [
            "/api/v1/namespaces/ns/secrets/pull",
            "/api/v1/namespaces/ns/secrets/vol",
            "/api/v1/namespaces/ns/secrets/env",
            "/api/v1/namespaces/ns/configmaps/proj",
            "/api/v1/namespaces/ns/configmaps/envfrom",
            "/api/v1/namespaces/ns/persistentvolumeclaims/claim",
            "/api/v1/namespaces/ns/secrets?watch=true&fieldSelector=metadata.name%3Dvol",
        ] {
            assert!(allowed("GET", url), "{url}");
        }
        for (method, url) in [
            ("GET", "/api/v1/namespaces/ns/secrets/other"),
            ("GET", "/api/v1/namespaces/ns/secrets"),
            ("GET", "/api/v1/namespaces/other/secrets/vol"),
            ("PUT", "/api/v1/namespaces/ns/secrets/vol"),
            ("GET", "/api/v1/namespaces/ns/configmaps/vol"),
            ("POST", "/api/v1/namespaces/ns/serviceaccounts/sa2/token"),
            (
                "PUT",
                "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/n2",
            ),
            (
                "GET",
                "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases",
            ),
        ] {
            let decision = decide(method, url);
            assert!(
                decision.as_ref().is_some_and(|d| !d.allowed()),
                "{method} {url}: {decision:?}"
            );
        }
        assert_eq!(
            decide("GET", "/api/v1/namespaces/ns/secrets/other"),
            Some(Decision::Deny(
                "no relationship found between node 'n1' and this object".into()
            ))
        );
        assert!(allowed(
            "POST",
            "/api/v1/namespaces/ns/serviceaccounts/sa1/token"
        ));
        assert!(allowed(
            "PUT",
            "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/n1"
        ));
        // Left to RBAC and admission: nodes, pods.
        for (method, url) in [
            ("PATCH", "/api/v1/nodes/n1/status"),
            ("POST", "/api/v1/nodes"),
            ("PATCH", "/api/v1/namespaces/ns/pods/mine/status"),
            ("DELETE", "/api/v1/namespaces/ns/pods/mine"),
            ("GET", "/api/v1/pods?fieldSelector=spec.nodeName%3Dn1"),
            ("GET", "/api/v1/nodes/n2"),
            ("PATCH", "/api/v1/nodes/n2"),
            ("DELETE", "/api/v1/namespaces/ns/pods/theirs"),
        ] {
            assert_eq!(decide(method, url), None, "{method} {url}");
        }
        // Not a node: no opinion.
        let alice = UserInfo::new("alice", &[]);
        assert_eq!(
            authorize(
                &store,
                &alice,
                &req("GET", "/api/v1/namespaces/ns/secrets/other")
            ),
            None
        );
    }
}
