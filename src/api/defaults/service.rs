//! Service defaults (core/v1 `SetDefaults_Service` and `SetDefaults_ServicePort`). The
//! ClusterIP and NodePorts are not defaults: `api::service` allocates them.

use serde_json::{json, Value};

use super::{child, default, each};

/// Whether a Service of this type gets NodePorts.
pub fn needs_node_ports(svc_type: &str) -> bool {
    matches!(svc_type, "NodePort" | "LoadBalancer")
}

/// `SetDefaults_Service` (and `SetDefaults_ServicePort`).
pub fn defaults(object: &mut Value) {
    let spec = child(object, "spec");
    default(spec, "type", json!("ClusterIP"));
    default(spec, "sessionAffinity", json!("None"));
    let svc_type = spec["type"].as_str().unwrap_or("ClusterIP").to_string();
    if spec["sessionAffinity"] == "ClientIP" {
        let config = child(child(spec, "sessionAffinityConfig"), "clientIP");
        default(config, "timeoutSeconds", json!(10800));
    }
    each(spec, "ports", |p| {
        default(p, "protocol", json!("TCP"));
        let unset = match p.get("targetPort") {
            None | Some(Value::Null) => true,
            Some(Value::Number(n)) => n.as_i64() == Some(0),
            Some(Value::String(s)) => s.is_empty(),
            _ => false,
        };
        if unset {
            if let Some(port) = p.get("port").cloned() {
                p["targetPort"] = port;
            }
        }
    });
    if needs_node_ports(&svc_type) {
        default(spec, "externalTrafficPolicy", json!("Cluster"));
    }
    if svc_type != "ExternalName" {
        default(spec, "internalTrafficPolicy", json!("Cluster"));
    }
    if svc_type == "LoadBalancer" {
        default(spec, "allocateLoadBalancerNodePorts", json!(true));
    }
}
