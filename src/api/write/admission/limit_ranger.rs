//! kube-apiserver's `LimitRanger` admission plugin: the LimitRanges of the namespace applied
//! to new pods and to new or resized PersistentVolumeClaims.
//!
//! - Defaults: a container or init container without a request or limit of a resource gets
//!   the `defaultRequest` or `default` of the namespace's `Container` items, and the pod the
//!   `kubernetes.io/limit-ranger` annotation saying what was set.
//! - Constraints, checked after the defaults: `min`, `max` and `maxLimitRequestRatio` of
//!   `Container` items against each container, of `Pod` items against the pod's totals, of
//!   `PersistentVolumeClaim` items against the claim's `storage`. A violation is a 403 with
//!   kube-apiserver's sentence (several: its bracketed list).
//!
//! Pod updates are not checked: containers and their resources cannot change after create.

use serde_json::{json, Value};

use super::pod_resources::{self, Amount, Resources};
use super::Operation;
use crate::api::request::ApiRequest;
use crate::api::status::{ApiError, Gr};

const ANNOTATION: &str = "kubernetes.io/limit-ranger";

pub fn admit(req: &ApiRequest, operation: &mut Operation<'_>) -> Result<(), ApiError> {
    let info = req.info();
    if !info.group.is_empty() || req.target.subresource.is_some() {
        return Ok(());
    }
    let object = match (info.plural, operation) {
        ("pods", Operation::Create { object }) => &mut **object,
        (
            "persistentvolumeclaims",
            Operation::Create { object } | Operation::Update { object, .. },
        ) => &mut **object,
        _ => return Ok(()),
    };
    let namespace = req.target.namespace.clone().unwrap_or_default();
    let snapshot = req.ctx.store.snapshot();
    let items: Vec<Value> = snapshot
        .range("limitranges", Some(&namespace), None)
        .flat_map(|lr| {
            lr.value()
                .pointer("/spec/limits")
                .and_then(Value::as_array)
                .cloned()
                .unwrap_or_default()
        })
        .collect();
    if items.is_empty() {
        return Ok(());
    }
    let problems = if info.plural == "pods" {
        apply_defaults(&items, object);
        check_pod(&items, object)
    } else {
        check_claim(&items, object)
    };
    if problems.is_empty() {
        return Ok(());
    }
    let detail = if problems.len() == 1 {
        problems.into_iter().next().unwrap_or_default()
    } else {
        format!("[{}]", problems.join(", "))
    };
    Err(ApiError::Denied {
        gr: Gr::of(info),
        name: object
            .pointer("/metadata/name")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string(),
        detail,
    })
}

fn of_type<'a>(items: &'a [Value], kind: &'a str) -> impl Iterator<Item = &'a Value> + 'a {
    items
        .iter()
        .filter(move |i| i.get("type").and_then(Value::as_str) == Some(kind))
}

/// Sets the `Container` items' defaults on every container that lacks them.
fn apply_defaults(items: &[Value], pod: &mut Value) {
    let mut default_requests = Resources::new();
    let mut default_limits = Resources::new();
    for item in of_type(items, "Container") {
        default_requests.extend(pod_resources::read(item, "/defaultRequest"));
        default_limits.extend(pod_resources::read(item, "/default"));
    }
    if default_requests.is_empty() && default_limits.is_empty() {
        return;
    }
    let mut notes = Vec::new();
    for (group, prefix) in [
        ("containers", "container"),
        ("initContainers", "init container"),
    ] {
        let Some(list) = pod
            .pointer_mut(&format!("/spec/{group}"))
            .and_then(Value::as_array_mut)
        else {
            continue;
        };
        for c in list.iter_mut().filter(|c| c.is_object()) {
            let name = c
                .get("name")
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_string();
            for (kind, defaults, word) in [
                ("requests", &default_requests, "request"),
                ("limits", &default_limits, "limit"),
            ] {
                let mut set = Vec::new();
                for (resource, amount) in defaults {
                    let resources = &mut c["resources"];
                    if !resources.is_object() {
                        *resources = json!({});
                    }
                    let map = &mut resources[kind];
                    if !map.is_object() {
                        *map = json!({});
                    }
                    if map.get(resource).is_none() {
                        map[resource] = json!(amount.text());
                        set.push(resource.clone());
                    }
                }
                if !set.is_empty() {
                    set.sort();
                    notes.push(format!("{} {word} for {prefix} {name}", set.join(", ")));
                }
            }
        }
    }
    if notes.is_empty() {
        return;
    }
    let metadata = &mut pod["metadata"];
    if !metadata.is_object() {
        *metadata = json!({});
    }
    let annotations = &mut metadata["annotations"];
    if !annotations.is_object() {
        *annotations = json!({});
    }
    annotations[ANNOTATION] = json!(format!("LimitRanger plugin set: {}", notes.join("; ")));
}

fn check_pod(items: &[Value], pod: &Value) -> Vec<String> {
    let mut problems = Vec::new();
    let empty = Value::Null;
    let spec = pod.get("spec").unwrap_or(&empty);
    for item in of_type(items, "Container") {
        for group in ["initContainers", "containers"] {
            for c in spec
                .get(group)
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
            {
                let (requests, limits) = pod_resources::container(c);
                constraints(item, "Container", &requests, &limits, &mut problems);
            }
        }
    }
    for item in of_type(items, "Pod") {
        let (requests, limits) = pod_resources::pod(spec);
        constraints(item, "Pod", &requests, &limits, &mut problems);
    }
    problems
}

fn check_claim(items: &[Value], claim: &Value) -> Vec<String> {
    let mut problems = Vec::new();
    let requests = pod_resources::read(claim, "/spec/resources/requests");
    let limits = pod_resources::read(claim, "/spec/resources/limits");
    for item in of_type(items, "PersistentVolumeClaim") {
        for (resource, min) in pod_resources::read(item, "/min") {
            problems.extend(minimum(
                "PersistentVolumeClaim",
                &resource,
                min,
                &requests,
                &limits,
            ));
        }
        for (resource, max) in pod_resources::read(item, "/max") {
            // Upstream: a claim's limit is optional, only its request is held to the max.
            let request = requests.get(&resource);
            if let Some(r) = request.filter(|r| r.milli > max.milli) {
                problems.push(format!(
                    "maximum {resource} usage per PersistentVolumeClaim is {}, but request is {}",
                    max.text(),
                    r.text()
                ));
            }
        }
    }
    problems
}

/// The min, max and ratio of `item` against one set of requests and limits.
fn constraints(
    item: &Value,
    kind: &str,
    requests: &Resources,
    limits: &Resources,
    problems: &mut Vec<String>,
) {
    for (resource, min) in pod_resources::read(item, "/min") {
        problems.extend(minimum(kind, &resource, min, requests, limits));
    }
    for (resource, max) in pod_resources::read(item, "/max") {
        let (req, lim) = (requests.get(&resource), limits.get(&resource));
        let enforced = max.text();
        match lim {
            None => problems.push(format!(
                "maximum {resource} usage per {kind} is {enforced}.  No limit is specified"
            )),
            Some(l) if l.milli > max.milli => problems.push(format!(
                "maximum {resource} usage per {kind} is {enforced}, but limit is {}",
                l.text()
            )),
            Some(_) => {
                if let Some(r) = req.filter(|r| r.milli > max.milli) {
                    problems.push(format!(
                        "maximum {resource} usage per {kind} is {enforced}, but request is {}",
                        r.text()
                    ));
                }
            }
        }
    }
    for (resource, ratio) in pod_resources::read(item, "/maxLimitRequestRatio") {
        let enforced = ratio.text();
        let req = requests.get(&resource).map_or(0, |r| r.milli);
        let lim = limits.get(&resource).map_or(0, |l| l.milli);
        if req == 0 {
            problems.push(format!("{resource} max limit to request ratio per {kind} is {enforced}, but no request is specified or request is 0"));
        } else if lim == 0 {
            problems.push(format!("{resource} max limit to request ratio per {kind} is {enforced}, but no limit is specified or limit is 0"));
        } else {
            let observed = lim as f64 / req as f64;
            if observed * 1000.0 > ratio.milli as f64 {
                problems.push(format!("{resource} max limit to request ratio per {kind} is {enforced}, but provided ratio is {observed:.6}"));
            }
        }
    }
}

fn minimum(
    kind: &str,
    resource: &str,
    min: Amount,
    requests: &Resources,
    limits: &Resources,
) -> Option<String> {
    let enforced = min.text();
    match requests.get(resource) {
        None => Some(format!(
            "minimum {resource} usage per {kind} is {enforced}.  No request is specified"
        )),
        Some(r) if r.milli < min.milli => Some(format!(
            "minimum {resource} usage per {kind} is {enforced}, but request is {}",
            r.text()
        )),
        Some(_) => limits
            .get(resource)
            .filter(|l| l.milli < min.milli)
            .map(|l| {
                format!(
                    "minimum {resource} usage per {kind} is {enforced}, but limit is {}",
                    l.text()
                )
            }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn items() -> Vec<Value> {
        vec![json!({"type": "Container",
            "default": {"cpu": "500m", "memory": "128Mi"},
            "defaultRequest": {"cpu": "250m", "memory": "64Mi"},
            "max": {"cpu": "1"}, "min": {"cpu": "100m"}})]
    }

    #[test]
    fn defaults_fill_what_each_container_leaves_out() {
        let mut pod = json!({"metadata": {"name": "p"}, "spec": {"containers": [
            {"name": "a"},
            {"name": "b", "resources": {"limits": {"cpu": "800m"}, "requests": {"cpu": "800m"}}},
        ]}});
        apply_defaults(&items(), &mut pod);
        let a = &pod["spec"]["containers"][0]["resources"];
        assert_eq!(a["limits"]["cpu"], "500m");
        assert_eq!(a["requests"]["memory"], "64Mi");
        let b = &pod["spec"]["containers"][1]["resources"];
        assert_eq!(b["limits"]["cpu"], "800m");
        assert_eq!(b["limits"]["memory"], "128Mi");
        assert_eq!(
            pod["metadata"]["annotations"][ANNOTATION],
            "LimitRanger plugin set: cpu, memory request for container a; cpu, memory limit for container a; memory request for container b; memory limit for container b"
        );
        assert!(check_pod(&items(), &pod).is_empty());
    }

    #[test]
    fn min_max_and_ratio_are_worded_as_upstream() {
        let pod = json!({"spec": {"containers": [
            {"name": "a", "resources": {"limits": {"cpu": "2"}, "requests": {"cpu": "50m"}}}]}});
        assert_eq!(
            check_pod(&items(), &pod),
            [
                "minimum cpu usage per Container is 100m, but request is 50m",
                "maximum cpu usage per Container is 1, but limit is 2",
            ]
        );
        let ratio = vec![json!({"type": "Container", "maxLimitRequestRatio": {"cpu": "2"}})];
        let pod = json!({"spec": {"containers": [
            {"name": "a", "resources": {"limits": {"cpu": "1"}, "requests": {"cpu": "250m"}}}]}});
        assert_eq!(
            check_pod(&ratio, &pod),
            ["cpu max limit to request ratio per Container is 2, but provided ratio is 4.000000"]
        );
        let claim_items = vec![json!({"type": "PersistentVolumeClaim",
            "min": {"storage": "1Gi"}, "max": {"storage": "2Gi"}})];
        let claim = json!({"spec": {"resources": {"requests": {"storage": "5Gi"}}}});
        assert_eq!(
            check_claim(&claim_items, &claim),
            ["maximum storage usage per PersistentVolumeClaim is 2Gi, but request is 5Gi"]
        );
    }
}
