//! apps/v1 and core/v1 controller defaults (`SetDefaults_Deployment`, `_ReplicaSet`,
//! `_DaemonSet`, `_StatefulSet`, `_ReplicationController`).

use serde_json::{json, Value};

use super::pod::template;
use super::{child, default, each};

pub fn deployment(object: &mut Value) {
    template(object, &["spec", "template"]);
    let spec = child(object, "spec");
    default(spec, "replicas", json!(1));
    let strategy = child(spec, "strategy");
    default(strategy, "type", json!("RollingUpdate"));
    if strategy["type"] == "RollingUpdate" {
        let rolling = child(strategy, "rollingUpdate");
        default(rolling, "maxUnavailable", json!("25%"));
        default(rolling, "maxSurge", json!("25%"));
    }
    default(spec, "revisionHistoryLimit", json!(10));
    default(spec, "progressDeadlineSeconds", json!(600));
}

pub fn replica_set(object: &mut Value) {
    template(object, &["spec", "template"]);
    default(child(object, "spec"), "replicas", json!(1));
}

pub fn daemon_set(object: &mut Value) {
    template(object, &["spec", "template"]);
    let spec = child(object, "spec");
    let strategy = child(spec, "updateStrategy");
    default(strategy, "type", json!("RollingUpdate"));
    if strategy["type"] == "RollingUpdate" {
        let rolling = child(strategy, "rollingUpdate");
        default(rolling, "maxUnavailable", json!(1));
        default(rolling, "maxSurge", json!(0));
    }
    default(spec, "revisionHistoryLimit", json!(10));
}

pub fn stateful_set(object: &mut Value) {
    template(object, &["spec", "template"]);
    let spec = child(object, "spec");
    default(spec, "replicas", json!(1));
    default(spec, "podManagementPolicy", json!("OrderedReady"));
    let strategy = child(spec, "updateStrategy");
    default(strategy, "type", json!("RollingUpdate"));
    if strategy["type"] == "RollingUpdate" {
        default(child(strategy, "rollingUpdate"), "partition", json!(0));
    }
    default(spec, "revisionHistoryLimit", json!(10));
    let retention = child(spec, "persistentVolumeClaimRetentionPolicy");
    default(retention, "whenDeleted", json!("Retain"));
    default(retention, "whenScaled", json!("Retain"));
    each(spec, "volumeClaimTemplates", |claim| {
        default(child(claim, "spec"), "volumeMode", json!("Filesystem"));
        default(child(claim, "status"), "phase", json!("Pending"));
    });
}

/// Besides replicas, an RC without a selector selects its template's labels, and an RC
/// without labels takes them from the template.
pub fn replication_controller(object: &mut Value) {
    let template_labels = object
        .pointer("/spec/template/metadata/labels")
        .filter(|l| l.as_object().is_some_and(|m| !m.is_empty()))
        .cloned();
    if object
        .pointer("/spec/template")
        .is_some_and(Value::is_object)
    {
        template(object, &["spec", "template"]);
    }
    if let Some(labels) = template_labels {
        let spec = child(object, "spec");
        if spec
            .get("selector")
            .and_then(Value::as_object)
            .is_none_or(|m| m.is_empty())
        {
            spec["selector"] = labels.clone();
        }
        let metadata = child(object, "metadata");
        if metadata
            .get("labels")
            .and_then(Value::as_object)
            .is_none_or(|m| m.is_empty())
        {
            metadata["labels"] = labels;
        }
    }
    default(child(object, "spec"), "replicas", json!(1));
}
