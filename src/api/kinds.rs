//! Per-kind preparation of an object before it is written: the minimal defaults (namespace
//! finalizers, phase and name label; pod phase; service ClusterIP; secret stringData) and
//! kind-specific validation (Lease). Full defaulting comes later.

use std::collections::HashSet;
use std::net::IpAddr;

use base64::Engine;
use serde_json::{json, Map, Value};

use super::cluster_ip::{AllocError, Reservation};
use super::meta::metadata_mut;
use super::status::{ApiError, Cause};
use super::{lease, ApiContext};
use crate::kube::resources::ResourceInfo;

/// Whether PUT on a missing object creates it (upstream `AllowCreateOnUpdate`).
pub fn allows_create_on_update(info: &ResourceInfo) -> bool {
    matches!(
        (info.group, info.plural),
        ("coordination.k8s.io", "leases")
            | ("", "endpoints")
            | ("", "events")
            | ("events.k8s.io", "events")
            | ("discovery.k8s.io", "endpointslices")
    )
}

/// Whether DELETE answers with the deleted object (upstream `ReturnDeletedObject`) rather than
/// a success Status.
pub fn returns_deleted_object(info: &ResourceInfo) -> bool {
    info.group.is_empty() && matches!(info.plural, "pods" | "services" | "namespaces")
}

fn is(info: &ResourceInfo, plural: &str) -> bool {
    info.group.is_empty() && info.plural == plural
}

/// Prepares a new or updated object. `old` is the stored version on update. A returned
/// reservation must be held until the write completes.
pub fn prepare<'a>(
    ctx: &'a ApiContext,
    info: &ResourceInfo,
    name: &str,
    old: Option<&Value>,
    object: &mut Value,
) -> Result<Option<Reservation<'a>>, ApiError> {
    if lease::is_lease(info) {
        lease::prepare(info, name, object)?;
    }
    if info.plural == "events" {
        normalize_event_times(object);
    }
    if is(info, "namespaces") {
        metadata_mut(object)
            .entry("labels")
            .or_insert_with(|| json!({}));
        if let Some(labels) = object["metadata"]["labels"].as_object_mut() {
            labels.insert("kubernetes.io/metadata.name".into(), json!(name));
        }
        let finalizers = match old {
            Some(old) => old.pointer("/spec/finalizers").cloned(),
            None => object.pointer("/spec/finalizers").cloned(),
        }
        .unwrap_or_else(|| json!(["kubernetes"]));
        object_mut(object, "spec").insert("finalizers".into(), finalizers);
        if old.is_none() {
            object["status"] = json!({"phase": "Active"});
        }
    }
    if is(info, "pods") && old.is_none() {
        object["status"] = json!({"phase": "Pending"});
    }
    if is(info, "secrets") {
        merge_string_data(object);
        if object.get("type").is_none_or(Value::is_null) {
            object["type"] = json!("Opaque");
        }
    }
    if is(info, "services") {
        return prepare_service(ctx, info, name, old, object);
    }
    Ok(None)
}

/// Event MicroTime fields, re-emitted with six fractional digits: clients parse them with a
/// fixed layout.
fn normalize_event_times(object: &mut Value) {
    for pointer in ["/eventTime", "/series/lastObservedTime"] {
        let parsed = object
            .pointer(pointer)
            .and_then(Value::as_str)
            .and_then(lease::parse_time);
        if let (Some(t), Some(slot)) = (parsed, object.pointer_mut(pointer)) {
            *slot = json!(lease::format_micro(t));
        }
    }
}

fn object_mut<'v>(object: &'v mut Value, field: &str) -> &'v mut Map<String, Value> {
    if !object.get(field).is_some_and(Value::is_object) {
        object[field] = json!({});
    }
    match object.get_mut(field) {
        Some(Value::Object(m)) => m,
        _ => unreachable!("just set to an object"),
    }
}

/// Moves `stringData` into base64 `data` (stringData wins on conflicts).
fn merge_string_data(object: &mut Value) {
    let Some(Value::Object(string_data)) =
        object.as_object_mut().and_then(|o| o.remove("stringData"))
    else {
        return;
    };
    let data = object_mut(object, "data");
    for (k, v) in string_data {
        if let Some(s) = v.as_str() {
            let encoded = base64::engine::general_purpose::STANDARD.encode(s.as_bytes());
            data.insert(k, json!(encoded));
        }
    }
}

fn used_cluster_ips(ctx: &ApiContext) -> HashSet<IpAddr> {
    let snapshot = ctx.store.snapshot();
    snapshot
        .range("services", None, None)
        .filter_map(|s| s.field("spec.clusterIP"))
        .filter_map(|ip| ip.parse().ok())
        .collect()
}

fn prepare_service<'a>(
    ctx: &'a ApiContext,
    info: &ResourceInfo,
    name: &str,
    old: Option<&Value>,
    object: &mut Value,
) -> Result<Option<Reservation<'a>>, ApiError> {
    let spec = object_mut(object, "spec");
    let svc_type = spec
        .get("type")
        .and_then(Value::as_str)
        .unwrap_or("ClusterIP")
        .to_string();
    spec.insert("type".into(), json!(svc_type));
    spec.entry("sessionAffinity")
        .or_insert_with(|| json!("None"));
    let requested = spec
        .get("clusterIP")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_string();
    if let Some(old) = old {
        let old_ip = old
            .pointer("/spec/clusterIP")
            .and_then(Value::as_str)
            .unwrap_or("");
        if requested.is_empty() || requested == old_ip {
            if let Some(old_spec) = old.get("spec") {
                for field in ["clusterIP", "clusterIPs", "ipFamilies", "ipFamilyPolicy"] {
                    if let Some(v) = old_spec.get(field) {
                        spec.insert(field.into(), v.clone());
                    }
                }
            }
            return Ok(None);
        }
        return Err(ApiError::invalid(
            info,
            name,
            vec![Cause::invalid(
                "spec.clusterIPs[0]",
                &json!(requested),
                "may not change once set",
            )],
        ));
    }
    if svc_type == "ExternalName" {
        return Ok(None);
    }
    let reservation = if requested == "None" {
        None
    } else {
        let used = used_cluster_ips(ctx);
        let result = if requested.is_empty() {
            ctx.cluster_ips.allocate(&used)
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
            ctx.cluster_ips.reserve(ip, &used)
        };
        match result {
            Ok(r) => Some(r),
            Err(e @ (AllocError::BadCidr(_) | AllocError::Full)) => {
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
    spec.insert("clusterIP".into(), json!(ip));
    spec.insert("clusterIPs".into(), json!([ip]));
    spec.insert("ipFamilies".into(), json!([family]));
    spec.insert("ipFamilyPolicy".into(), json!("SingleStack"));
    object["status"] = json!({"loadBalancer": {}});
    Ok(reservation)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn event_micro_times() {
        let mut ev = json!({"eventTime":"2024-01-01T00:00:00+00:00","series":{"lastObservedTime":"2024-01-01T00:00:01.5Z"}});
        normalize_event_times(&mut ev);
        assert_eq!(ev["eventTime"], "2024-01-01T00:00:00.000000Z");
        assert_eq!(
            ev["series"]["lastObservedTime"],
            "2024-01-01T00:00:01.500000Z"
        );
    }

    #[test]
    fn string_data_merges_into_data() {
        let mut s = json!({"data":{"a":"eA=="},"stringData":{"b":"hello","a":"y"}});
        merge_string_data(&mut s);
        assert_eq!(s, json!({"data":{"a":"eQ==","b":"aGVsbG8="}}));
    }
}
