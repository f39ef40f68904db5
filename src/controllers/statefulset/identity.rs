//! A StatefulSet pod's stable identity, as upstream's `stateful_set_utils` gives it: the name
//! `<set>-<ordinal>` (the ordinal read back from the name), the labels naming the pod, its
//! index and its revision, `hostname` (the pod's name) and `subdomain` (the governing Service),
//! and its storage: one PersistentVolumeClaim `<template>-<set>-<ordinal>` per claim template,
//! mounted as a volume named after the template.

use serde_json::{json, Map, Value};

use super::Set;
use crate::controllers::history::REVISION_HASH;
use crate::controllers::objects;
use crate::controllers::pod_control;

/// The label naming a pod after itself (a Service can select one pod of a set).
pub const POD_NAME_LABEL: &str = "statefulset.kubernetes.io/pod-name";
/// The label holding the pod's ordinal.
pub const POD_INDEX_LABEL: &str = "apps.kubernetes.io/pod-index";

/// The parent name and ordinal of a pod named `<parent>-<digits>` (upstream's
/// `getParentNameAndOrdinal`: the digits after the last dash, as an int32).
pub fn parent_and_ordinal(pod_name: &str) -> Option<(&str, i64)> {
    let (parent, digits) = pod_name.rsplit_once('-')?;
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let ordinal = digits.parse::<i32>().ok()?;
    Some((parent, i64::from(ordinal)))
}

/// The ordinal of a member of `set` (`None` for any other pod).
pub fn ordinal_in(set: &Set, pod_name: &str) -> Option<i64> {
    parent_and_ordinal(pod_name)
        .filter(|(parent, _)| *parent == set.name())
        .map(|(_, ordinal)| ordinal)
}

pub fn pod_name(set: &Set, ordinal: i64) -> String {
    format!("{}-{ordinal}", set.name())
}

pub fn claim_name(template_name: &str, set: &Set, ordinal: i64) -> String {
    format!("{template_name}-{}-{ordinal}", set.name())
}

/// The pod `set` runs at `ordinal`, made from `template` at revision `revision` (upstream's
/// `newStatefulSetPod` and `setPodRevision`).
pub fn new_pod(set: &Set, template: &Value, ordinal: i64, revision: &str) -> Value {
    let reference = objects::new_controller_ref(&set.value, "apps/v1", "StatefulSet");
    let mut pod = pod_control::pod_from_template(template, set.name(), &reference);
    let name = pod_name(set, ordinal);
    if let Some(metadata) = pod["metadata"].as_object_mut() {
        metadata.remove("generateName");
        metadata.insert("name".into(), json!(name));
        let labels = metadata
            .entry("labels")
            .or_insert_with(|| json!({}))
            .as_object_mut();
        if let Some(labels) = labels {
            labels.insert(POD_NAME_LABEL.into(), json!(name));
            labels.insert(POD_INDEX_LABEL.into(), json!(ordinal.to_string()));
            labels.insert(REVISION_HASH.into(), json!(revision));
        }
    }
    if let Some(spec) = pod["spec"].as_object_mut() {
        spec.insert("hostname".into(), json!(name));
        if !set.service_name.is_empty() {
            spec.insert("subdomain".into(), json!(set.service_name));
        }
        let volumes = with_claim_volumes(set, ordinal, spec.get("volumes"));
        if !volumes.is_empty() {
            spec.insert("volumes".into(), Value::Array(volumes));
        }
    }
    pod
}

/// The claim volumes first, in template order, then the pod's own volumes of other names
/// (upstream's `updateStorage`: a template's claim replaces a volume of the same name).
fn with_claim_volumes(set: &Set, ordinal: i64, current: Option<&Value>) -> Vec<Value> {
    let templates: Vec<&str> = set.claim_templates.iter().map(objects::name).collect();
    let mut volumes: Vec<Value> = templates
        .iter()
        .map(|t| {
            json!({"name": t, "persistentVolumeClaim": {"claimName": claim_name(t, set, ordinal)}})
        })
        .collect();
    for volume in current.and_then(Value::as_array).into_iter().flatten() {
        let name = volume.get("name").and_then(Value::as_str).unwrap_or("");
        if !templates.contains(&name) {
            volumes.push(volume.clone());
        }
    }
    volumes
}

/// Whether a stored pod carries the identity labels of its ordinal (upstream's
/// `identityMatches`; the name, namespace and parent hold for every claimed member).
pub fn identity_matches(pod: &Value, ordinal: i64) -> bool {
    let labels = pod.pointer("/metadata/labels");
    let label = |k: &str| labels.and_then(|l| l.get(k)).and_then(Value::as_str);
    label(POD_NAME_LABEL) == Some(objects::name(pod))
        && label(POD_INDEX_LABEL) == Some(ordinal.to_string().as_str())
}

/// Whether the pod mounts every claim of its ordinal under the template's name
/// (`storageMatches`).
pub fn storage_matches(set: &Set, pod: &Value, ordinal: i64) -> bool {
    let volumes = pod
        .pointer("/spec/volumes")
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or_default();
    set.claim_templates.iter().all(|template| {
        let name = objects::name(template);
        volumes.iter().any(|v| {
            v.get("name").and_then(Value::as_str) == Some(name)
                && v.pointer("/persistentVolumeClaim/claimName")
                    .and_then(Value::as_str)
                    == Some(claim_name(name, set, ordinal).as_str())
        })
    })
}

/// The labels that fix a pod's identity, as a merge patch (`None` when they are right).
pub fn identity_patch(pod: &Value, ordinal: i64) -> Option<Value> {
    if identity_matches(pod, ordinal) {
        return None;
    }
    Some(json!({"metadata": {"labels": {
        POD_NAME_LABEL: objects::name(pod),
        POD_INDEX_LABEL: ordinal.to_string(),
    }}}))
}

/// The claims of the pod at `ordinal`, each with its template's name (upstream's
/// `getPersistentVolumeClaims`): the template with the claim's name, its labels plus the
/// selector's `matchLabels`, and nothing a server sets.
pub fn claims(set: &Set, ordinal: i64) -> Vec<(String, Value)> {
    set.claim_templates
        .iter()
        .map(|template| {
            let template_name = objects::name(template).to_string();
            let mut metadata = Map::new();
            let source = template.get("metadata").and_then(Value::as_object);
            for field in ["labels", "annotations", "finalizers"] {
                if let Some(v) = source.and_then(|m| m.get(field)).filter(|v| !v.is_null()) {
                    metadata.insert(field.into(), v.clone());
                }
            }
            let labels = metadata
                .entry("labels")
                .or_insert_with(|| json!({}))
                .as_object_mut();
            if let Some(labels) = labels {
                for (k, v) in &set.match_labels {
                    labels.insert(k.clone(), v.clone());
                }
            }
            metadata.insert(
                "name".into(),
                json!(claim_name(&template_name, set, ordinal)),
            );
            let claim = json!({
                "apiVersion": "v1",
                "kind": "PersistentVolumeClaim",
                "metadata": metadata,
                "spec": template.get("spec").cloned().unwrap_or_else(|| json!({})),
            });
            (template_name, claim)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ordinals_come_from_the_last_dash() {
        assert_eq!(parent_and_ordinal("web-0"), Some(("web", 0)));
        assert_eq!(parent_and_ordinal("my-web-12"), Some(("my-web", 12)));
        assert_eq!(parent_and_ordinal("web-"), None);
        assert_eq!(parent_and_ordinal("web-1a"), None);
        assert_eq!(parent_and_ordinal("web"), None);
        // Beyond an int32: no ordinal, as upstream's ParseInt(…, 32).
        assert_eq!(parent_and_ordinal("web-99999999999"), None);
    }
}
