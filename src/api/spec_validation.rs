//! Validation of kinds' specs with kube-apiserver's field paths and messages (422 Invalid with
//! one cause per problem): containers (name, image, ports) of pods and pod templates, the
//! controllers' selectors and their match with the template labels, service ports, and the
//! fields an update may not change (a deployment's selector, a job's selector and template);
//! the RBAC kinds' rules and references (`rbac_validation`); PriorityClass, ResourceQuota and
//! LimitRange (`policy_validation`); CertificateSigningRequests (`certificates`); APIServices
//! (`aggregation::apiservice`).

use serde_json::{Map, Value};

use super::status::{ApiError, Cause};
use super::validation::is_dns1123_label;
use crate::kube::resources::ResourceInfo;

const LABEL_MSG: &str = "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')";
const PORT_RANGE: &str = "must be between 1 and 65535, inclusive";
const IMMUTABLE: &str = "field is immutable";
const SELECTOR_MISMATCH: &str = "`selector` does not match template `labels`";

/// Checks `object` (defaulted) of kind `info`; `old` is the stored version on update.
pub fn validate(
    info: &ResourceInfo,
    name: &str,
    old: Option<&Value>,
    object: &Value,
) -> Result<(), ApiError> {
    let mut causes = Vec::new();
    let template = "/spec/template";
    match (info.group, info.kind) {
        ("", "Pod") => pod_spec(object.get("spec"), "spec", &mut causes),
        ("", "Service") => service_ports(object, &mut causes),
        ("", "ReplicationController") => {
            pod_spec(
                object.pointer("/spec/template/spec"),
                "spec.template.spec",
                &mut causes,
            );
            let selector = object.pointer("/spec/selector").and_then(Value::as_object);
            let labels = object.pointer("/spec/template/metadata/labels");
            if let Some(selector) = selector.filter(|s| !s.is_empty()) {
                let labels_map = labels.and_then(Value::as_object);
                let matches = selector
                    .iter()
                    .all(|(k, v)| labels_map.and_then(|l| l.get(k)) == Some(v));
                if !matches {
                    causes.push(invalid_raw(
                        "spec.template.metadata.labels",
                        &go_string_map(labels),
                        SELECTOR_MISMATCH,
                    ));
                }
            }
        }
        ("apps", "Deployment" | "ReplicaSet" | "DaemonSet" | "StatefulSet") => {
            let kind = info.singular;
            selector_and_labels(object, kind, &mut causes);
            pod_spec(
                object.pointer("/spec/template/spec"),
                "spec.template.spec",
                &mut causes,
            );
            if let Some(old) = old {
                // Upstream: a deployment's, replicaset's, daemonset's and statefulset's
                // selector are all immutable in apps/v1.
                immutable_selector(old, object, &mut causes);
            }
        }
        ("batch", "Job") => {
            pod_spec(
                object.pointer("/spec/template/spec"),
                "spec.template.spec",
                &mut causes,
            );
            if let Some(old) = old {
                immutable_selector(old, object, &mut causes);
                if old.pointer(template) != object.pointer(template) {
                    causes.push(invalid_raw(
                        "spec.template",
                        "core.PodTemplateSpec{...}",
                        IMMUTABLE,
                    ));
                }
            }
        }
        ("batch", "CronJob") => {
            pod_spec(
                object.pointer("/spec/jobTemplate/spec/template/spec"),
                "spec.jobTemplate.spec.template.spec",
                &mut causes,
            );
            cron_job_spec(name, old, object, &mut causes);
        }
        ("" | "scheduling.k8s.io", kind @ ("ResourceQuota" | "LimitRange" | "PriorityClass")) => {
            causes.extend(super::policy_validation::causes(kind, old, object))
        }
        ("certificates.k8s.io", "CertificateSigningRequest") => {
            causes.extend(super::certificates::causes(old, object))
        }
        ("admissionregistration.k8s.io", "ValidatingAdmissionPolicy") => causes.extend(
            crate::api::write::admission::policy::config::policy_causes(object),
        ),
        ("admissionregistration.k8s.io", "ValidatingAdmissionPolicyBinding") => {
            causes.extend(crate::api::write::admission::policy::config::binding_causes(object))
        }
        ("admissionregistration.k8s.io", kind) => {
            causes.extend(crate::api::write::admission::webhook::config::causes(
                object,
                kind == "MutatingWebhookConfiguration",
            ))
        }
        ("apiregistration.k8s.io", "APIService") => {
            causes.extend(super::aggregation::apiservice::causes(object))
        }
        ("rbac.authorization.k8s.io", kind) => {
            causes.extend(super::rbac_validation::causes(kind, old, object))
        }
        _ => {}
    }
    if causes.is_empty() {
        Ok(())
    } else {
        Err(ApiError::invalid(info, name, causes))
    }
}

fn text_at<'a>(value: Option<&'a Value>, path: &str) -> Option<&'a str> {
    value.and_then(|v| v.pointer(path)).and_then(Value::as_str)
}

/// A CronJob's schedule, time zone, policy and limits, as kube-apiserver's
/// `validateCronJobSpec` checks them: a schedule robfig/cron does not parse (or one with a
/// `TZ=` prefix, unless the stored object already had one) and a zone Go's `LoadLocation`
/// does not know are refused, and on create a name longer than 52 characters (the Jobs it
/// makes append `-<minutes since the epoch>`).
fn cron_job_spec(name: &str, old: Option<&Value>, object: &Value, causes: &mut Vec<Cause>) {
    use crate::controllers::cronjob::schedule::{load_location, Schedule};
    if old.is_none() && name.len() > 52 {
        causes.push(Cause::invalid(
            "metadata.name",
            &Value::String(name.to_string()),
            "must be no more than 52 characters",
        ));
    }
    let schedule = text_at(Some(object), "/spec/schedule").unwrap_or("");
    let zone = object.pointer("/spec/timeZone").filter(|z| !z.is_null());
    if schedule.is_empty() {
        causes.push(Cause::required("spec.schedule", ""));
    } else {
        let shown = Value::String(schedule.to_string());
        if let Err(e) = Schedule::parse(schedule) {
            causes.push(Cause::invalid("spec.schedule", &shown, &e.0));
        }
        let tz_allowed = text_at(old, "/spec/schedule").is_some_and(|s| s.contains("TZ"));
        if schedule.contains("TZ") {
            let detail = match (tz_allowed, zone.is_some()) {
                (false, _) => {
                    Some("cannot use TZ or CRON_TZ in schedule, use timeZone field instead")
                }
                (true, true) => {
                    Some("cannot use both timeZone field and TZ or CRON_TZ in schedule")
                }
                (true, false) => None,
            };
            if let Some(detail) = detail {
                causes.push(Cause::invalid("spec.schedule", &shown, detail));
            }
        }
    }
    for field in [
        "startingDeadlineSeconds",
        "successfulJobsHistoryLimit",
        "failedJobsHistoryLimit",
    ] {
        if let Some(v) = object
            .pointer(&format!("/spec/{field}"))
            .filter(|v| v.as_i64().is_some_and(|n| n < 0))
        {
            causes.push(Cause::invalid(
                &format!("spec.{field}"),
                v,
                "must be greater than or equal to 0",
            ));
        }
    }
    match text_at(Some(object), "/spec/concurrencyPolicy") {
        None | Some("Allow" | "Forbid" | "Replace") => {}
        Some("") => causes.push(Cause::required("spec.concurrencyPolicy", "")),
        Some(other) => causes.push(Cause {
            reason: "FieldValueNotSupported",
            field: "spec.concurrencyPolicy".into(),
            message: format!("Unsupported value: {other:?}: supported values: \"Allow\", \"Forbid\", \"Replace\""),
        }),
    }
    // The zone is checked when it is set or changed.
    let old_zone = old
        .and_then(|o| o.pointer("/spec/timeZone"))
        .filter(|z| !z.is_null());
    let Some(zone) = zone.filter(|z| old.is_none() || old_zone != Some(*z)) else {
        return;
    };
    let Some(zone_name) = zone.as_str() else {
        return;
    };
    if zone_name.is_empty() {
        causes.push(Cause::invalid(
            "spec.timeZone",
            zone,
            "timeZone must be nil or non-empty string",
        ));
        return;
    }
    let part_ok = |part: &str| {
        part != "."
            && part != ".."
            && !part.starts_with('-')
            && (1..=14).contains(&part.len())
            && part
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"._-+".contains(&b))
    };
    if !zone_name.split('/').all(part_ok) {
        causes.push(Cause::invalid(
            "spec.timeZone",
            zone,
            &format!("unknown time zone {zone_name}"),
        ));
        return;
    }
    if zone_name.eq_ignore_ascii_case("Local") {
        causes.push(Cause::invalid(
            "spec.timeZone",
            zone,
            "timeZone must be an explicit time zone as defined in https://www.iana.org/time-zones",
        ));
    }
    if let Err(e) = load_location(zone_name) {
        causes.push(Cause::invalid("spec.timeZone", zone, &e));
    }
}

/// A cause whose value is already formatted the way Go prints it.
fn invalid_raw(field: &str, shown: &str, detail: &str) -> Cause {
    Cause {
        reason: "FieldValueInvalid",
        field: field.to_string(),
        message: format!("Invalid value: {shown}: {detail}"),
    }
}

/// Go's `%#v` of a `map[string]string`: keys sorted, `(nil)` when missing.
fn go_string_map(value: Option<&Value>) -> String {
    match value.and_then(Value::as_object) {
        None => "map[string]string(nil)".into(),
        Some(m) => {
            let mut pairs: Vec<String> = m
                .iter()
                .map(|(k, v)| format!("{k:?}:{:?}", v.as_str().unwrap_or("")))
                .collect();
            pairs.sort();
            format!("map[string]string{{{}}}", pairs.join(", "))
        }
    }
}

/// Go's `%#v` of a `v1.LabelSelector`, as field errors print a selector.
fn go_label_selector(selector: Option<&Value>) -> String {
    let labels = go_string_map(selector.and_then(|s| s.get("matchLabels")));
    let expressions = match selector
        .and_then(|s| s.get("matchExpressions"))
        .and_then(Value::as_array)
    {
        None => "[]v1.LabelSelectorRequirement(nil)".to_string(),
        Some(list) => {
            let items: Vec<String> = list
                .iter()
                .map(|e| {
                    let values = match e.get("values").and_then(Value::as_array) {
                        None => "[]string(nil)".to_string(),
                        Some(v) => format!(
                            "[]string{{{}}}",
                            v.iter()
                                .map(|x| format!("{:?}", x.as_str().unwrap_or("")))
                                .collect::<Vec<_>>()
                                .join(", ")
                        ),
                    };
                    format!(
                        "v1.LabelSelectorRequirement{{Key:{:?}, Operator:{:?}, Values:{values}}}",
                        e.get("key").and_then(Value::as_str).unwrap_or(""),
                        e.get("operator").and_then(Value::as_str).unwrap_or("")
                    )
                })
                .collect();
            format!("[]v1.LabelSelectorRequirement{{{}}}", items.join(", "))
        }
    };
    format!("v1.LabelSelector{{MatchLabels:{labels}, MatchExpressions:{expressions}}}")
}

/// Whether `selector` (a LabelSelector) selects `labels`; `None` when it is malformed.
pub fn selector_matches(selector: &Value, labels: &Map<String, Value>) -> Option<bool> {
    if let Some(m) = selector.get("matchLabels") {
        for (k, v) in m.as_object()? {
            if labels.get(k) != Some(v) {
                return Some(false);
            }
        }
    }
    if let Some(list) = selector.get("matchExpressions") {
        for e in list.as_array()? {
            let key = e.get("key")?.as_str()?;
            let values: Vec<&str> = e
                .get("values")
                .and_then(Value::as_array)
                .map(|v| v.iter().filter_map(Value::as_str).collect())
                .unwrap_or_default();
            let label = labels.get(key).and_then(Value::as_str);
            let ok = match e.get("operator")?.as_str()? {
                "In" => label.is_some_and(|l| values.contains(&l)),
                "NotIn" => label.is_none_or(|l| !values.contains(&l)),
                "Exists" => label.is_some(),
                "DoesNotExist" => label.is_none(),
                _ => return None,
            };
            if !ok {
                return Some(false);
            }
        }
    }
    Some(true)
}

fn selector_is_empty(selector: &Value) -> bool {
    let labels = selector
        .get("matchLabels")
        .and_then(Value::as_object)
        .is_none_or(Map::is_empty);
    let exprs = selector
        .get("matchExpressions")
        .and_then(Value::as_array)
        .is_none_or(Vec::is_empty);
    labels && exprs
}

/// apps/v1: the selector is required, not empty, and must select the template's labels.
fn selector_and_labels(object: &Value, kind: &str, causes: &mut Vec<Cause>) {
    let selector = object.pointer("/spec/selector").filter(|s| !s.is_null());
    let Some(selector) = selector else {
        causes.push(Cause::required("spec.selector", ""));
        return;
    };
    if selector_is_empty(selector) {
        causes.push(invalid_raw(
            "spec.selector",
            &go_label_selector(Some(selector)),
            &format!("empty selector is invalid for {kind}"),
        ));
        return;
    }
    let labels_value = object.pointer("/spec/template/metadata/labels");
    let empty = Map::new();
    let labels = labels_value.and_then(Value::as_object).unwrap_or(&empty);
    match selector_matches(selector, labels) {
        Some(true) => {}
        Some(false) => causes.push(invalid_raw(
            "spec.template.metadata.labels",
            &go_string_map(labels_value),
            SELECTOR_MISMATCH,
        )),
        None => causes.push(invalid_raw(
            "spec.selector",
            &go_label_selector(Some(selector)),
            "invalid label selector",
        )),
    }
}

fn immutable_selector(old: &Value, new: &Value, causes: &mut Vec<Cause>) {
    let old_selector = old.pointer("/spec/selector");
    let new_selector = new.pointer("/spec/selector");
    if old_selector != new_selector {
        causes.push(invalid_raw(
            "spec.selector",
            &go_label_selector(new_selector),
            IMMUTABLE,
        ));
    }
}

/// Containers of a pod spec at `path`: at least one, each with a unique DNS-1123 label name,
/// an image, and ports in range.
fn pod_spec(spec: Option<&Value>, path: &str, causes: &mut Vec<Cause>) {
    let containers = spec
        .and_then(|s| s.get("containers"))
        .and_then(Value::as_array);
    match containers {
        None => causes.push(Cause::required(&format!("{path}.containers"), "")),
        Some(list) if list.is_empty() => {
            causes.push(Cause::required(&format!("{path}.containers"), ""))
        }
        Some(_) => {}
    }
    let mut names: Vec<String> = Vec::new();
    for key in ["initContainers", "containers"] {
        let Some(list) = spec.and_then(|s| s.get(key)).and_then(Value::as_array) else {
            continue;
        };
        for (i, c) in list.iter().enumerate() {
            let at = format!("{path}.{key}[{i}]");
            container(c, &at, &mut names, causes);
        }
    }
}

fn container(c: &Value, at: &str, names: &mut Vec<String>, causes: &mut Vec<Cause>) {
    match c.get("name").and_then(Value::as_str) {
        None | Some("") => causes.push(Cause::required(&format!("{at}.name"), "")),
        Some(name) => {
            if !is_dns1123_label(name) {
                causes.push(Cause::invalid(
                    &format!("{at}.name"),
                    &Value::String(name.into()),
                    LABEL_MSG,
                ));
            }
            if names.iter().any(|n| n == name) {
                causes.push(Cause {
                    reason: "FieldValueDuplicate",
                    field: format!("{at}.name"),
                    message: format!("Duplicate value: {name:?}"),
                });
            }
            names.push(name.to_string());
        }
    }
    if c.get("image")
        .and_then(Value::as_str)
        .is_none_or(str::is_empty)
    {
        causes.push(Cause::required(&format!("{at}.image"), ""));
    }
    if let Some(ports) = c.get("ports").and_then(Value::as_array) {
        for (j, p) in ports.iter().enumerate() {
            let port_at = format!("{at}.ports[{j}]");
            match p.get("containerPort") {
                None | Some(Value::Null) => {
                    causes.push(Cause::required(&format!("{port_at}.containerPort"), ""))
                }
                Some(v) if !in_port_range(v, false) => causes.push(Cause::invalid(
                    &format!("{port_at}.containerPort"),
                    v,
                    PORT_RANGE,
                )),
                Some(_) => {}
            }
            if let Some(v) = p.get("hostPort").filter(|v| !in_port_range(v, true)) {
                causes.push(Cause::invalid(
                    &format!("{port_at}.hostPort"),
                    v,
                    PORT_RANGE,
                ));
            }
            protocol(p, &port_at, causes);
        }
    }
}

fn protocol(port: &Value, at: &str, causes: &mut Vec<Cause>) {
    if let Some(p) = port.get("protocol").and_then(Value::as_str) {
        if !matches!(p, "TCP" | "UDP" | "SCTP") {
            causes.push(Cause {
                reason: "FieldValueNotSupported",
                field: format!("{at}.protocol"),
                message: format!(
                    "Unsupported value: {p:?}: supported values: \"SCTP\", \"TCP\", \"UDP\""
                ),
            });
        }
    }
}

/// 1–65535 (0 too when `zero_ok`, for host ports).
fn in_port_range(v: &Value, zero_ok: bool) -> bool {
    v.as_i64()
        .is_some_and(|p| (1..=65535).contains(&p) || (zero_ok && p == 0))
}

/// Service ports: required unless the Service is ExternalName or headless, each port (and an
/// integer targetPort) in range, names unique.
fn service_ports(object: &Value, causes: &mut Vec<Cause>) {
    let svc_type = object
        .pointer("/spec/type")
        .and_then(Value::as_str)
        .unwrap_or("ClusterIP");
    let headless = object.pointer("/spec/clusterIP").and_then(Value::as_str) == Some("None");
    let ports = object.pointer("/spec/ports").and_then(Value::as_array);
    if ports.is_none_or(Vec::is_empty) {
        if svc_type != "ExternalName" && !headless {
            causes.push(Cause::required("spec.ports", ""));
        }
        return;
    }
    let ports = ports.map(Vec::as_slice).unwrap_or(&[]);
    let mut names: Vec<&str> = Vec::new();
    for (i, p) in ports.iter().enumerate() {
        let at = format!("spec.ports[{i}]");
        let name = p.get("name").and_then(Value::as_str).unwrap_or("");
        if ports.len() > 1 && name.is_empty() {
            causes.push(Cause::required(&format!("{at}.name"), ""));
        } else if !name.is_empty() {
            if !is_dns1123_label(name) {
                causes.push(Cause::invalid(
                    &format!("{at}.name"),
                    &Value::String(name.into()),
                    LABEL_MSG,
                ));
            }
            if names.contains(&name) {
                causes.push(Cause {
                    reason: "FieldValueDuplicate",
                    field: format!("{at}.name"),
                    message: format!("Duplicate value: {name:?}"),
                });
            }
            names.push(name);
        }
        match p.get("port") {
            Some(v) if in_port_range(v, false) => {}
            Some(v) => causes.push(Cause::invalid(&format!("{at}.port"), v, PORT_RANGE)),
            None => causes.push(Cause::invalid(
                &format!("{at}.port"),
                &Value::from(0),
                PORT_RANGE,
            )),
        }
        if let Some(target) = p.get("targetPort").filter(|t| t.is_number()) {
            if !in_port_range(target, false) {
                causes.push(Cause::invalid(
                    &format!("{at}.targetPort"),
                    target,
                    PORT_RANGE,
                ));
            }
        }
        protocol(p, &at, causes);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kube::resources;
    use serde_json::json;

    fn deployment(selector: Value, labels: Value) -> Value {
        json!({"spec": {"selector": selector, "template": {"metadata": {"labels": labels},
            "spec": {"containers": [{"name": "c", "image": "nginx"}]}}}})
    }

    fn messages(err: ApiError) -> Vec<String> {
        match err {
            ApiError::Invalid { causes, .. } => causes
                .into_iter()
                .map(|c| format!("{}: {}", c.field, c.message))
                .collect(),
            other => panic!("not Invalid: {other:?}"),
        }
    }

    #[test]
    fn table_of_invalid_objects() {
        let deploy = resources::find("apps", "v1", "deployments").unwrap();
        let pods = resources::find("", "v1", "pods").unwrap();
        let svc = resources::find("", "v1", "services").unwrap();
        let jobs = resources::find("batch", "v1", "jobs").unwrap();
        let old_deploy = deployment(json!({"matchLabels": {"app": "a"}}), json!({"app": "a"}));
        let old_job = json!({"spec": {"selector": {"matchLabels": {"u": "1"}},
            "template": {"spec": {"containers": [{"name": "c", "image": "busybox"}]}}}});
        let mut changed_job = old_job.clone();
        changed_job["spec"]["template"]["spec"]["containers"][0]["image"] = json!("alpine");
        let bad_name = format!("spec.containers[0].name: Invalid value: \"Bad_Name\": {LABEL_MSG}");
        let cases: Vec<(&ResourceInfo, Option<Value>, Value, Vec<&str>)> = vec![
            (deploy, None, deployment(json!({"matchLabels": {"app": "a"}}), json!({"app": "b"})),
             vec![r#"spec.template.metadata.labels: Invalid value: map[string]string{"app":"b"}: `selector` does not match template `labels`"#]),
            (deploy, None, deployment(Value::Null, json!({"app": "b"})),
             vec!["spec.selector: Required value"]),
            (deploy, None, deployment(json!({}), json!({"app": "b"})),
             vec!["spec.selector: Invalid value: v1.LabelSelector{MatchLabels:map[string]string(nil), MatchExpressions:[]v1.LabelSelectorRequirement(nil)}: empty selector is invalid for deployment"]),
            (deploy, Some(old_deploy), deployment(json!({"matchLabels": {"app": "z"}}), json!({"app": "z"})),
             vec![r#"spec.selector: Invalid value: v1.LabelSelector{MatchLabels:map[string]string{"app":"z"}, MatchExpressions:[]v1.LabelSelectorRequirement(nil)}: field is immutable"#]),
            (pods, None, json!({"spec": {"containers": [
                {"name": "Bad_Name", "image": "x", "ports": [{"containerPort": 70000}]},
                {"name": "dup", "image": ""}, {"name": "dup", "image": "y"}]}}),
             vec![
                &bad_name,
                "spec.containers[0].ports[0].containerPort: Invalid value: 70000: must be between 1 and 65535, inclusive",
                "spec.containers[1].image: Required value",
                "spec.containers[2].name: Duplicate value: \"dup\"",
             ]),
            (pods, None, json!({"spec": {}}), vec!["spec.containers: Required value"]),
            (svc, None, json!({"spec": {"type": "ClusterIP", "ports": [{"port": 0, "targetPort": 99999}]}}),
             vec!["spec.ports[0].port: Invalid value: 0: must be between 1 and 65535, inclusive",
                  "spec.ports[0].targetPort: Invalid value: 99999: must be between 1 and 65535, inclusive"]),
            (svc, None, json!({"spec": {"type": "ClusterIP"}}), vec!["spec.ports: Required value"]),
            (jobs, Some(old_job.clone()), changed_job,
             vec!["spec.template: Invalid value: core.PodTemplateSpec{...}: field is immutable"]),
        ];
        for (info, old, obj, want) in cases {
            let got = messages(validate(info, "x", old.as_ref(), &obj).unwrap_err());
            assert_eq!(got, want, "{obj}");
        }
        // Valid ones pass.
        let ok = deployment(
            json!({"matchExpressions": [{"key": "app", "operator": "In", "values": ["a"]}]}),
            json!({"app": "a"}),
        );
        assert!(validate(deploy, "x", None, &ok).is_ok());
        assert!(validate(jobs, "x", Some(&old_job), &old_job).is_ok());
    }

    #[test]
    fn cron_job_schedules_and_zones() {
        let cronjobs = resources::find("batch", "v1", "cronjobs").unwrap();
        let cron = |schedule: &str, zone: Option<&str>| {
            let mut cj = json!({"spec": {"schedule": schedule, "concurrencyPolicy": "Allow",
                "jobTemplate": {"spec": {"template": {"spec": {
                    "containers": [{"name": "c", "image": "busybox"}]}}}}}});
            if let Some(z) = zone {
                cj["spec"]["timeZone"] = json!(z);
            }
            cj
        };
        let check = |name: &str, old: Option<&Value>, cj: &Value| {
            validate(cronjobs, name, old, cj).err().map(messages)
        };
        assert_eq!(
            check("c", None, &cron("*/5 * * * *", Some("Europe/Paris"))),
            None
        );
        assert_eq!(check("c", None, &cron("@hourly", None)), None);
        let table: Vec<(&str, Option<&str>, Vec<&str>)> = vec![
            ("foo", None, vec!["spec.schedule: Invalid value: \"foo\": expected exactly 5 fields, found 1: [foo]"]),
            ("61 * * * *", None, vec!["spec.schedule: Invalid value: \"61 * * * *\": end of range (61) above maximum (59): 61"]),
            ("", None, vec!["spec.schedule: Required value"]),
            ("TZ=UTC * * * * *", None, vec!["spec.schedule: Invalid value: \"TZ=UTC * * * * *\": cannot use TZ or CRON_TZ in schedule, use timeZone field instead"]),
            ("* * * * *", Some("Mars/Base"), vec!["spec.timeZone: Invalid value: \"Mars/Base\": unknown time zone Mars/Base"]),
            ("* * * * *", Some(""), vec!["spec.timeZone: Invalid value: \"\": timeZone must be nil or non-empty string"]),
            ("* * * * *", Some("Local"), vec!["spec.timeZone: Invalid value: \"Local\": timeZone must be an explicit time zone as defined in https://www.iana.org/time-zones"]),
            ("* * * * *", Some("../x"), vec!["spec.timeZone: Invalid value: \"../x\": unknown time zone ../x"]),
        ];
        for (schedule, zone, want) in table {
            assert_eq!(
                check("c", None, &cron(schedule, zone)),
                Some(want.iter().map(|s| s.to_string()).collect()),
                "{schedule:?} {zone:?}"
            );
        }
        let long = "x".repeat(53);
        assert_eq!(
            check(&long, None, &cron("* * * * *", None)),
            Some(vec![format!(
                "metadata.name: Invalid value: {long:?}: must be no more than 52 characters"
            )])
        );
        // An update keeps a stored TZ= prefix and a long name, and does not re-check an
        // unchanged zone.
        let old = cron("TZ=UTC * * * * *", None);
        assert_eq!(
            check(&long, Some(&old), &cron("TZ=UTC */2 * * * *", None)),
            None
        );
        let mut bad = cron("* * * * *", None);
        bad["spec"]["concurrencyPolicy"] = json!("Sometimes");
        bad["spec"]["startingDeadlineSeconds"] = json!(-1);
        assert_eq!(
            check("c", None, &bad),
            Some(vec![
                "spec.startingDeadlineSeconds: Invalid value: -1: must be greater than or equal to 0".to_string(),
                "spec.concurrencyPolicy: Unsupported value: \"Sometimes\": supported values: \"Allow\", \"Forbid\", \"Replace\"".to_string(),
            ])
        );
    }
}
