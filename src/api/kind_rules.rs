//! Per-kind preparation of an object before it is written: namespace finalizers, phase and
//! name label; a new object's status; secret stringData; the kind's defaults (`defaults`),
//! Service addresses and ports (`service`), and kind-specific validation (`lease`,
//! `spec_validation`); CustomResourceDefinitions and custom objects (`crd`).

use base64::Engine;
use serde_json::{json, Map, Value};

use super::meta::metadata_mut;
use super::service::{self, Reservations};
use super::status::ApiError;
use super::{crd, defaults, lease, spec_validation, ApiContext};
use crate::kube::object::ObjectKey;
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

/// Whether create starts the object with an empty status (upstream `PrepareForCreate`), for
/// the kinds whose status only controllers write. Pods, services and namespaces get theirs
/// below; nodes register with theirs.
fn create_resets_status(info: &ResourceInfo) -> bool {
    info.has_status
        && (!info.group.is_empty()
            || matches!(
                info.plural,
                "replicationcontrollers"
                    | "persistentvolumes"
                    | "persistentvolumeclaims"
                    | "resourcequotas"
            ))
}

/// Whether [`prepare`] reads the store for a new object of this kind (Services allocate
/// cluster IPs and node ports against the ones in use). Such creates pass the read barrier
/// first (`barrier::decide`); keep this in step with every store read in `prepare`.
pub fn create_reads_store(info: &ResourceInfo) -> bool {
    is(info, "services") || crd::is_definition(info)
}

/// Prepares a new or updated object. `old` is the stored version on update. The returned
/// reservations must be held until the write completes.
pub fn prepare<'a>(
    ctx: &'a ApiContext,
    info: &ResourceInfo,
    name: &str,
    old: Option<&Value>,
    object: &mut Value,
) -> Result<Reservations<'a>, ApiError> {
    if old.is_none() && create_resets_status(info) {
        if let Some(m) = object.as_object_mut() {
            m.remove("status");
        }
    }
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
        // On create the `kubernetes` finalizer is required (upstream PrepareForCreate): it is
        // what keeps a deleted namespace until the namespace controller has emptied it. Later
        // only the `finalize` subresource changes the list.
        let finalizers = match old {
            Some(old) => old
                .pointer("/spec/finalizers")
                .cloned()
                .unwrap_or_else(|| json!([])),
            None => {
                let mut list: Vec<Value> = object
                    .pointer("/spec/finalizers")
                    .and_then(Value::as_array)
                    .cloned()
                    .unwrap_or_default();
                if !list.iter().any(|f| f == "kubernetes") {
                    list.push(json!("kubernetes"));
                }
                Value::Array(list)
            }
        };
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
    defaults::apply(info, object);
    if let (Some(old), true) = (old, info.tracks_generation) {
        // The handler compared the body before defaulting; a body that only left out defaulted
        // fields is no spec change (kube-apiserver defaults at decode, before that comparison).
        let generation = old
            .pointer("/metadata/generation")
            .and_then(Value::as_i64)
            .unwrap_or(0);
        let bumped = generation + i64::from(super::meta::spec_changed(old, object));
        metadata_mut(object).insert("generation".into(), json!(bumped));
    }
    spec_validation::validate(info, name, old, object)?;
    if crd::is_definition(info) {
        crd::definition::prepare(ctx, info, name, old, object)?;
    } else if let Some(kind) = ctx.custom_kinds.of(info) {
        crd::objects::prepare(&kind, info, name, old, object)?;
    }
    if is(info, "services") {
        let namespace = object
            .pointer("/metadata/namespace")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string();
        let key = ObjectKey::new(info.store_key(), namespace, name);
        return service::prepare(ctx, info, &key, old, object);
    }
    Ok(Reservations::default())
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
