//! What a Service write decides before it becomes a Mutation (after its defaults,
//! `defaults::service`): the ClusterIP (`cluster_ip`) and the NodePorts (`node_port`), and the rules that
//! keep them: the ClusterIP may not change once set, a NodePort the client did not repeat on
//! update stays (matched by port name), ports are dropped when the type no longer needs them.

use std::collections::HashSet;
use std::net::IpAddr;

use serde_json::{json, Value};

use super::cluster_ip::{AllocError, Reservation};
use super::defaults::service::needs_node_ports;
use super::defaults::{child, each};
use super::node_port::{PortError, PortReservation};
use super::status::{ApiError, Cause};
use super::ApiContext;
use crate::kube::object::ObjectKey;
use crate::kube::resources::ResourceInfo;

/// Addresses and ports held for a Service write in flight; dropped once the write is applied
/// (the store is then the record) or failed.
#[derive(Default)]
pub struct Reservations<'a> {
    _cluster_ip: Option<Reservation<'a>>,
    _node_ports: Vec<PortReservation<'a>>,
}

/// Prepares a defaulted Service: keeps (update) or allocates (create) its ClusterIP and
/// NodePorts. The returned reservations must live until the write completes.
pub fn prepare<'a>(
    ctx: &'a ApiContext,
    info: &ResourceInfo,
    key: &ObjectKey,
    old: Option<&Value>,
    object: &mut Value,
) -> Result<Reservations<'a>, ApiError> {
    let held = Reservations {
        _cluster_ip: cluster_ip(ctx, info, &key.name, old, object)?,
        _node_ports: node_ports(ctx, info, key, old, object)?,
    };
    if old.is_none() {
        object["status"] = json!({"loadBalancer": {}});
    }
    Ok(held)
}

fn used_cluster_ips(ctx: &ApiContext) -> HashSet<IpAddr> {
    let snapshot = ctx.store.snapshot();
    snapshot
        .range("services", None, None)
        .filter_map(|s| s.field("spec.clusterIP"))
        .filter_map(|ip| ip.parse().ok())
        .collect()
}

/// Go's `%#v` of a `[]string`, as field errors print a slice value.
fn go_string_slice(values: &Value) -> String {
    let items: Vec<String> = values
        .as_array()
        .map(|a| {
            a.iter()
                .map(|v| format!("{:?}", v.as_str().unwrap_or("")))
                .collect()
        })
        .unwrap_or_default();
    format!("[]string{{{}}}", items.join(", "))
}

fn cluster_ip<'a>(
    ctx: &'a ApiContext,
    info: &ResourceInfo,
    name: &str,
    old: Option<&Value>,
    object: &mut Value,
) -> Result<Option<Reservation<'a>>, ApiError> {
    let spec = child(object, "spec");
    let svc_type = spec["type"].as_str().unwrap_or("ClusterIP").to_string();
    let requested = spec
        .get("clusterIP")
        .and_then(Value::as_str)
        .or_else(|| spec.pointer("/clusterIPs/0").and_then(Value::as_str))
        .unwrap_or("")
        .to_string();
    if svc_type == "ExternalName" {
        return Ok(None);
    }
    if let Some(old) = old {
        let old_spec = old.get("spec").cloned().unwrap_or_else(|| json!({}));
        let old_ip = old_spec
            .get("clusterIP")
            .and_then(Value::as_str)
            .unwrap_or("");
        if !old_ip.is_empty() {
            if requested.is_empty() || requested == old_ip {
                for field in ["clusterIP", "clusterIPs", "ipFamilies", "ipFamilyPolicy"] {
                    if let Some(v) = old_spec.get(field) {
                        spec[field] = v.clone();
                    }
                }
                return Ok(None);
            }
            let wanted = json!([requested]);
            return Err(ApiError::invalid(
                info,
                name,
                vec![Cause {
                    reason: "FieldValueInvalid",
                    field: "spec.clusterIPs[0]".into(),
                    message: format!(
                        "Invalid value: {}: may not change once set",
                        go_string_slice(&wanted)
                    ),
                }],
            ));
        }
        // An ExternalName Service turning into another type gets its address now.
    }
    let reservation = if requested == "None" {
        None
    } else {
        // The mark comes before the snapshot of addresses in use (see `api::in_flight`).
        let as_of = ctx.cluster_ips.as_of();
        let used = used_cluster_ips(ctx);
        let result = if requested.is_empty() {
            ctx.cluster_ips.allocate(&used, as_of)
        } else {
            let ip: IpAddr = requested.parse().map_err(|_| {
                ApiError::invalid(
                    info,
                    name,
                    vec![Cause::invalid(
                        "spec.clusterIPs[0]",
                        &json!(requested),
                        "must be a valid IP address, (e.g. 10.9.8.7 or 2001:db8::ffff)",
                    )],
                )
            })?;
            ctx.cluster_ips.reserve(ip, &used, as_of)
        };
        match result {
            Ok(r) => Some(r),
            Err(e @ (AllocError::BadCidr(_) | AllocError::Full | AllocError::Stale)) => {
                return Err(ApiError::Internal(format!(
                    "failed to allocate a serviceIP: {e}"
                )))
            }
            Err(e) => {
                return Err(ApiError::invalid(
                    info,
                    name,
                    vec![Cause::invalid(
                        "spec.clusterIPs",
                        &json!([requested]),
                        &format!("failed to allocate IP {requested}: {e}"),
                    )],
                ))
            }
        }
    };
    let ip = reservation
        .as_ref()
        .map(|r| r.ip.to_string())
        .unwrap_or_else(|| "None".into());
    let family = match reservation.as_ref().map(|r| r.ip) {
        Some(IpAddr::V6(_)) => "IPv6",
        _ => "IPv4",
    };
    let spec = child(object, "spec");
    spec["clusterIP"] = json!(ip);
    spec["clusterIPs"] = json!([ip]);
    spec["ipFamilies"] = json!([family]);
    spec["ipFamilyPolicy"] = json!("SingleStack");
    Ok(reservation)
}

/// NodePorts held by Services other than `except`, as the store records them. Only NodePort
/// and LoadBalancer Services (a selectable field) are parsed.
fn used_node_ports(ctx: &ApiContext, except: &ObjectKey) -> HashSet<u16> {
    let snapshot = ctx.store.snapshot();
    snapshot
        .range("services", None, None)
        .filter(|s| s.field("spec.type").is_some_and(needs_node_ports))
        .filter(|s| s.key != *except)
        .flat_map(|s| {
            let value = s.value();
            value
                .pointer("/spec/ports")
                .and_then(Value::as_array)
                .map(|ports| {
                    ports
                        .iter()
                        .filter_map(|p| p.get("nodePort").and_then(Value::as_u64))
                        .filter_map(|p| u16::try_from(p).ok())
                        .collect::<Vec<_>>()
                })
                .unwrap_or_default()
        })
        .collect()
}

fn node_port_list(svc: &Value) -> Vec<(String, i64)> {
    svc.pointer("/spec/ports")
        .and_then(Value::as_array)
        .map(|ports| {
            ports
                .iter()
                .filter_map(|p| {
                    let port = p
                        .get("nodePort")
                        .and_then(Value::as_i64)
                        .filter(|n| *n != 0)?;
                    let name = p.get("name").and_then(Value::as_str).unwrap_or("");
                    Some((name.to_string(), port))
                })
                .collect()
        })
        .unwrap_or_default()
}

fn node_ports<'a>(
    ctx: &'a ApiContext,
    info: &ResourceInfo,
    key: &ObjectKey,
    old: Option<&Value>,
    object: &mut Value,
) -> Result<Vec<PortReservation<'a>>, ApiError> {
    let svc_type = object
        .pointer("/spec/type")
        .and_then(Value::as_str)
        .unwrap_or("ClusterIP")
        .to_string();
    let old_type = old
        .and_then(|o| o.pointer("/spec/type"))
        .and_then(Value::as_str)
        .unwrap_or("");
    let old_ports = old.map(node_port_list).unwrap_or_default();
    if !needs_node_ports(&svc_type) {
        // Switching away from NodePort: the ports the old version held go with it.
        if needs_node_ports(old_type) {
            each(child(object, "spec"), "ports", |p| {
                let np = p.get("nodePort").and_then(Value::as_i64);
                if np.is_some_and(|n| old_ports.iter().any(|(_, o)| *o == n)) {
                    if let Some(m) = p.as_object_mut() {
                        m.remove("nodePort");
                    }
                }
            });
        }
        let causes: Vec<Cause> = node_port_list(object)
            .iter()
            .enumerate()
            .map(|(i, _)| {
                Cause::forbidden(
                    &format!("spec.ports[{i}].nodePort"),
                    &format!("may not be used when `type` is '{svc_type}'"),
                )
            })
            .collect();
        if !causes.is_empty() {
            return Err(ApiError::invalid(info, &key.name, causes));
        }
        return Ok(Vec::new());
    }
    if svc_type == "LoadBalancer"
        && object.pointer("/spec/allocateLoadBalancerNodePorts") == Some(&json!(false))
    {
        return Ok(Vec::new());
    }
    // On update, a port without a nodePort keeps the one its namesake had.
    if needs_node_ports(old_type) {
        let kept: HashSet<i64> = node_port_list(object).iter().map(|(_, p)| *p).collect();
        each(child(object, "spec"), "ports", |p| {
            if p.get("nodePort").and_then(Value::as_i64).unwrap_or(0) == 0 {
                let name = p.get("name").and_then(Value::as_str).unwrap_or("");
                if let Some((_, port)) = old_ports
                    .iter()
                    .find(|(n, port)| n == name && !kept.contains(port))
                {
                    p["nodePort"] = json!(port);
                }
            }
        });
    }
    // The mark comes before the snapshot of ports in use (see `api::in_flight`).
    let as_of = ctx.node_ports.as_of();
    let used = used_node_ports(ctx, key);
    let own: HashSet<i64> = old_ports.iter().map(|(_, p)| *p).collect();
    let mut held = Vec::new();
    let mut seen = HashSet::new();
    let mut causes = Vec::new();
    let ports_len = object
        .pointer("/spec/ports")
        .and_then(Value::as_array)
        .map_or(0, Vec::len);
    for i in 0..ports_len {
        let pointer = format!("/spec/ports/{i}/nodePort");
        let requested = object
            .pointer(&pointer)
            .and_then(Value::as_i64)
            .unwrap_or(0);
        let field = format!("spec.ports[{i}].nodePort");
        if requested != 0 {
            if !seen.insert(requested) {
                causes.push(Cause {
                    reason: "FieldValueDuplicate",
                    field,
                    message: format!("Duplicate value: \"{requested}\""),
                });
                continue;
            }
            if own.contains(&requested) {
                continue;
            }
            match ctx.node_ports.reserve(requested, &used, as_of) {
                Ok(r) => held.push(r),
                Err(e @ PortError::Stale) => {
                    return Err(ApiError::Internal(format!(
                        "failed to allocate a nodePort: {e}"
                    )))
                }
                Err(e) => causes.push(Cause::invalid(&field, &json!(requested), &format!("{e}"))),
            }
            continue;
        }
        match ctx.node_ports.allocate(&used, as_of) {
            Ok(r) => {
                if let Some(slot) = object.pointer_mut(&format!("/spec/ports/{i}")) {
                    slot["nodePort"] = json!(r.port);
                }
                seen.insert(i64::from(r.port));
                held.push(r);
            }
            Err(e @ (PortError::Full | PortError::Stale)) => {
                return Err(ApiError::Internal(format!(
                    "failed to allocate a nodePort: {e}"
                )))
            }
            Err(e) => causes.push(Cause::invalid(&field, &json!(0), &format!("{e}"))),
        }
    }
    if !causes.is_empty() {
        return Err(ApiError::invalid(info, &key.name, causes));
    }
    Ok(held)
}
