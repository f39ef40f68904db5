//! The admission step: which policy applies to a write (exemptions, the namespace's labels
//! over the configured defaults), and what each mode does with the violations.

use serde_json::Value;

use super::policy::{Level, Mode, Policy};
use super::{check, Operation, Pod};
use crate::api::request::ApiRequest;
use crate::api::status::{ApiError, Gr};
use crate::kube::object::ObjectKey;

/// The audit annotations kube-apiserver's plugin records.
const EXEMPT: &str = "pod-security.kubernetes.io/exempt";
const ENFORCE_POLICY: &str = "pod-security.kubernetes.io/enforce-policy";
const AUDIT_VIOLATIONS: &str = "pod-security.kubernetes.io/audit-violations";

pub fn admit(req: &ApiRequest, operation: &mut Operation<'_>) -> Result<(), ApiError> {
    let info = req.info();
    if req.target.subresource.is_some() {
        return Ok(());
    }
    // Where the pod template of a workload sits (`None`: the object is a pod).
    let template = match (info.group, info.plural) {
        ("", "pods") => None,
        ("", "podtemplates") => Some("/template"),
        ("", "replicationcontrollers")
        | ("apps", "deployments" | "replicasets" | "statefulsets" | "daemonsets")
        | ("batch", "jobs") => Some("/spec/template"),
        ("batch", "cronjobs") => Some("/spec/jobTemplate/spec/template"),
        _ => return Ok(()),
    };
    let object = match operation {
        Operation::Create { object } => &**object,
        Operation::Update { current, object } => {
            // An update that leaves the pod spec as it was (labels, annotations, a
            // controller's finalizer) is not checked again, as upstream exempts it.
            if part(&current.value(), template, "spec") == part(object, template, "spec") {
                return Ok(());
            }
            &**object
        }
        Operation::Delete { .. } => return Ok(()),
    };
    let config = &req.ctx.pod_security;
    let namespace = req.target.namespace.as_deref().unwrap_or_default();
    if config.exemptions.namespaces.contains(namespace) {
        return note(req, EXEMPT, "namespace");
    }
    if config.exemptions.usernames.contains(&req.user.name) {
        return note(req, EXEMPT, "user");
    }
    let Some(ns) = req
        .ctx
        .store
        .get(&ObjectKey::new("namespaces", "", namespace))
    else {
        return Ok(());
    };
    let ns = ns.value();
    let labels = ns.pointer("/metadata/labels").and_then(Value::as_object);
    let [enforce, audit, warn] = Mode::ALL.map(|mode| Policy::of(labels, mode, &config.defaults));
    if [&enforce, &audit, &warn]
        .iter()
        .all(|p| p.level == Level::Privileged)
    {
        return Ok(());
    }
    let Some(spec) = part(object, template, "spec") else {
        return Ok(());
    };
    if spec
        .get("runtimeClassName")
        .and_then(Value::as_str)
        .is_some_and(|class| config.exemptions.runtime_classes.contains(class))
    {
        return note(req, EXEMPT, "runtimeClass");
    }
    let meta = part(object, template, "metadata").unwrap_or(&Value::Null);
    let pod = Pod::new(meta, spec);
    // `PodSecurity "<level>:<version>": <violations>`, if there are any.
    let violations = |policy: &Policy| {
        let found = check(policy.level, &pod);
        (!found.is_empty())
            .then(|| format!("PodSecurity \"{}\": {}", policy.shown(), found.join(", ")))
    };
    if template.is_none() {
        note(req, ENFORCE_POLICY, &enforce.shown())?;
    }
    if let Some(text) = violations(&audit) {
        note(req, AUDIT_VIOLATIONS, &format!("would violate {text}"))?;
    }
    let mut warnings = Vec::new();
    if let Some(text) = violations(&enforce) {
        match template {
            // Workload templates are never refused: their pods will be, so the writer is
            // told now.
            Some(_) => warnings.push(format!("would violate {text}")),
            None => {
                return Err(ApiError::Denied {
                    gr: Gr::of(info),
                    name: object
                        .pointer("/metadata/name")
                        .and_then(Value::as_str)
                        .unwrap_or_default()
                        .to_string(),
                    detail: format!("violates {text}"),
                });
            }
        }
    }
    // The enforce level's warning already says it when both ask for the same.
    let same = template.is_some() && enforce.level == warn.level;
    if !same {
        if let Some(text) = violations(&warn) {
            warnings.push(format!("would violate {text}"));
        }
    }
    if !warnings.is_empty() {
        if let Ok(mut queued) = req.warnings.lock() {
            queued.extend(warnings);
        }
    }
    Ok(())
}

/// Records an annotation for the request's audit event.
fn note(req: &ApiRequest, key: &str, value: &str) -> Result<(), ApiError> {
    if let Ok(mut notes) = req.audit_annotations.lock() {
        notes.push((key.to_string(), value.to_string()));
    }
    Ok(())
}

/// The `metadata` or `spec` of the pod an object is or holds as its template.
fn part<'a>(object: &'a Value, template: Option<&str>, field: &str) -> Option<&'a Value> {
    match template {
        None => object.get(field),
        Some(pointer) => object.pointer(&format!("{pointer}/{field}")),
    }
}
