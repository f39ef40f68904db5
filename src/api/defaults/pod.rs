//! Pod defaults (core/v1 `SetDefaults_Pod`, `SetDefaults_PodSpec`, `SetDefaults_Container`,
//! probes, ports, volumes) and what the pod strategy and admission add to a new pod: the
//! `default` service account, `status.phase: Pending` and the QoS class.

use serde_json::{json, Value};

use super::{child, default, each};

/// Defaults of a pod's spec, shared by pods and every pod template.
pub fn pod_spec(spec: &mut Value) {
    default(spec, "restartPolicy", json!("Always"));
    default(spec, "terminationGracePeriodSeconds", json!(30));
    default(spec, "dnsPolicy", json!("ClusterFirst"));
    default(spec, "securityContext", json!({}));
    default(spec, "schedulerName", json!("default-scheduler"));
    default(spec, "enableServiceLinks", json!(true));
    if spec.get("hostNetwork").and_then(Value::as_bool) == Some(true) {
        // With host networking the container ports are the host ports.
        for key in ["containers", "initContainers"] {
            each(spec, key, |c| {
                each(c, "ports", |p| {
                    if let Some(port) = p.get("containerPort").cloned() {
                        default(p, "hostPort", port);
                    }
                })
            });
        }
    }
    each(spec, "containers", container);
    each(spec, "initContainers", container);
    each(spec, "ephemeralContainers", container);
    each(spec, "volumes", volume);
}

/// `SetDefaults_Container` plus its ports, probes and env.
fn container(c: &mut Value) {
    let image = c.get("image").and_then(Value::as_str).unwrap_or("");
    default(c, "imagePullPolicy", json!(pull_policy(image)));
    default(c, "terminationMessagePath", json!("/dev/termination-log"));
    default(c, "terminationMessagePolicy", json!("File"));
    // ResourceRequirements is a struct, not a pointer: it is always serialized.
    default(c, "resources", json!({}));
    each(c, "ports", |p| default(p, "protocol", json!("TCP")));
    for probe in ["livenessProbe", "readinessProbe", "startupProbe"] {
        if let Some(p) = c.get_mut(probe).filter(|p| p.is_object()) {
            default(p, "timeoutSeconds", json!(1));
            default(p, "periodSeconds", json!(10));
            default(p, "successThreshold", json!(1));
            default(p, "failureThreshold", json!(3));
            if let Some(get) = p.get_mut("httpGet").filter(|g| g.is_object()) {
                default(get, "path", json!("/"));
                default(get, "scheme", json!("HTTP"));
            }
        }
    }
    each(c, "env", |e| {
        if let Some(field) = e
            .pointer_mut("/valueFrom/fieldRef")
            .filter(|f| f.is_object())
        {
            default(field, "apiVersion", json!("v1"));
        }
    });
}

/// `Always` for `:latest` or untagged images, `IfNotPresent` otherwise (a digest counts as a
/// tag).
pub fn pull_policy(image: &str) -> &'static str {
    if image.contains('@') {
        return "IfNotPresent";
    }
    // The tag is after the last ':' that comes after the last '/' (a registry port is not a tag).
    let last_segment = image.rsplit('/').next().unwrap_or(image);
    match last_segment.rsplit_once(':') {
        Some((_, "latest")) | None => "Always",
        Some(_) => "IfNotPresent",
    }
}

/// Volume source defaults: file modes of projected kinds.
fn volume(v: &mut Value) {
    for source in ["secret", "configMap", "downwardAPI", "projected"] {
        if let Some(s) = v.get_mut(source).filter(|s| s.is_object()) {
            default(s, "defaultMode", json!(420));
        }
    }
    if let Some(host) = v.get_mut("hostPath").filter(|h| h.is_object()) {
        default(host, "type", json!(""));
    }
    if let Some(iscsi) = v.get_mut("iscsi").filter(|h| h.is_object()) {
        default(iscsi, "iscsiInterface", json!("default"));
    }
}

/// A pod: spec defaults, the `default` service account (admission), and on create the status
/// the kubelet has not written yet.
pub fn pod(object: &mut Value) {
    let spec = child(object, "spec");
    pod_spec(spec);
    default(spec, "serviceAccountName", json!("default"));
    let sa = spec["serviceAccountName"].clone();
    default(spec, "serviceAccount", sa);
    default(spec, "priority", json!(0));
    let qos = qos_class(spec);
    let status = child(object, "status");
    default(status, "phase", json!("Pending"));
    default(status, "qosClass", json!(qos));
}

/// `GetPodQOS`: Guaranteed when every container has cpu and memory limits equal to its
/// requests, BestEffort when none has any, Burstable otherwise.
fn qos_class(spec: &Value) -> &'static str {
    let containers: Vec<&Value> = ["containers", "initContainers"]
        .iter()
        .filter_map(|k| spec.get(*k).and_then(Value::as_array))
        .flatten()
        .collect();
    let quantity = |c: &Value, kind: &str, resource: &str| {
        c.pointer(&format!("/resources/{kind}/{resource}"))
            .filter(|v| !v.is_null())
            .map(|v| match v {
                Value::String(s) => s.clone(),
                other => other.to_string(),
            })
    };
    let any = containers.iter().any(|c| {
        ["requests", "limits"].iter().any(|kind| {
            c.pointer(&format!("/resources/{kind}"))
                .and_then(Value::as_object)
                .is_some_and(|m| m.keys().any(|k| k == "cpu" || k == "memory"))
        })
    });
    if !any {
        return "BestEffort";
    }
    let guaranteed = containers.iter().all(|c| {
        ["cpu", "memory"].iter().all(|r| {
            let limit = quantity(c, "limits", r);
            // A request defaults to its limit.
            let request = quantity(c, "requests", r).or_else(|| limit.clone());
            limit.is_some() && request == limit
        })
    });
    if guaranteed {
        "Guaranteed"
    } else {
        "Burstable"
    }
}

/// Defaults of a pod template (`spec.template` of the workload kinds).
pub fn template(object: &mut Value, pointer_to_template: &[&str]) {
    let mut node = object;
    for key in pointer_to_template {
        node = child(node, key);
    }
    pod_spec(child(node, "spec"));
}
