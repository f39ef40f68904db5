//! kube-apiserver's `PodSecurity` admission plugin: the Pod Security Standards a namespace's
//! labels ask for, `pod-security.kubernetes.io/enforce`, `warn` and `audit` (`privileged`,
//! `baseline`, `restricted`; a `<mode>-version` label is accepted and named in messages).
//!
//! - A new or updated pod that violates the `enforce` level is refused with 403 listing every
//!   violation (`violates PodSecurity "restricted:latest": privileged (container "c" must not
//!   set securityContext.privileged=true), …`); the `warn` level's violations come back as a
//!   `Warning` header kubectl prints (`would violate PodSecurity …`).
//! - Workload templates (Deployments, ReplicaSets, StatefulSets, DaemonSets, Jobs, CronJobs,
//!   ReplicationControllers, PodTemplates) are never refused: the enforce and warn levels'
//!   violations of their pod template are warnings, as upstream does.
//! - `audit` has no audit log to write to here and is accepted without effect; exemptions
//!   are not configurable.
//!
//! The checks are the current standards' (the `latest` version) with kube-apiserver's texts;
//! the baseline level leaves out the AppArmor, SELinux and Windows host-process checks.

use serde_json::Value;

use super::Operation;
use crate::api::request::ApiRequest;
use crate::api::status::{ApiError, Gr};
use crate::kube::object::ObjectKey;

const LABEL_PREFIX: &str = "pod-security.kubernetes.io/";

/// The capabilities the baseline level allows a container to add.
const BASELINE_CAPABILITIES: [&str; 13] = [
    "AUDIT_WRITE",
    "CHOWN",
    "DAC_OVERRIDE",
    "FOWNER",
    "FSETID",
    "KILL",
    "MKNOD",
    "NET_BIND_SERVICE",
    "SETFCAP",
    "SETGID",
    "SETPCAP",
    "SETUID",
    "SYS_CHROOT",
];
/// The volume types the restricted level allows.
const RESTRICTED_VOLUMES: [&str; 8] = [
    "configMap",
    "csi",
    "downwardAPI",
    "emptyDir",
    "ephemeral",
    "persistentVolumeClaim",
    "projected",
    "secret",
];
/// Sysctls the baseline level allows.
const SAFE_SYSCTLS: [&str; 9] = [
    "kernel.shm_rmid_forced",
    "net.ipv4.ip_local_port_range",
    "net.ipv4.ip_unprivileged_port_start",
    "net.ipv4.tcp_syncookies",
    "net.ipv4.ping_group_range",
    "net.ipv4.ip_local_reserved_ports",
    "net.ipv4.tcp_keepalive_time",
    "net.ipv4.tcp_fin_timeout",
    "net.ipv4.tcp_keepalive_intvl",
];

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Level {
    Privileged,
    Baseline,
    Restricted,
}

impl Level {
    fn parse(text: &str) -> Option<Level> {
        match text {
            "privileged" => Some(Level::Privileged),
            "baseline" => Some(Level::Baseline),
            "restricted" => Some(Level::Restricted),
            _ => None,
        }
    }

    fn name(self) -> &'static str {
        match self {
            Level::Privileged => "privileged",
            Level::Baseline => "baseline",
            Level::Restricted => "restricted",
        }
    }
}

/// A level a namespace label asks for, with its version as messages name it.
struct Policy {
    level: Level,
    version: String,
}

impl Policy {
    fn of(labels: &serde_json::Map<String, Value>, mode: &str) -> Option<Policy> {
        let level = labels
            .get(&format!("{LABEL_PREFIX}{mode}"))
            .and_then(Value::as_str)
            .and_then(Level::parse)?;
        let version = labels
            .get(&format!("{LABEL_PREFIX}{mode}-version"))
            .and_then(Value::as_str)
            .filter(|v| !v.is_empty())
            .unwrap_or("latest")
            .to_string();
        Some(Policy { level, version })
    }

    fn shown(&self) -> String {
        format!("{}:{}", self.level.name(), self.version)
    }
}

pub fn admit(req: &ApiRequest, operation: &mut Operation<'_>) -> Result<(), ApiError> {
    let info = req.info();
    if req.target.subresource.is_some() {
        return Ok(());
    }
    let template = match (info.group, info.plural) {
        ("", "pods") => None,
        ("", "replicationcontrollers" | "podtemplates")
        | ("apps", "deployments" | "replicasets" | "statefulsets" | "daemonsets")
        | ("batch", "jobs") => Some(if info.plural == "podtemplates" {
            "/template/spec"
        } else {
            "/spec/template/spec"
        }),
        ("batch", "cronjobs") => Some("/spec/jobTemplate/spec/template/spec"),
        _ => return Ok(()),
    };
    let object = match operation {
        Operation::Create { object } => &**object,
        Operation::Update { current, object } => {
            // An update that leaves the pod spec as it was (labels, annotations, a
            // controller's finalizer) is not checked again, as upstream exempts it.
            let pointer = template.unwrap_or("/spec");
            if current.value().pointer(pointer) == object.pointer(pointer) {
                return Ok(());
            }
            &**object
        }
        Operation::Delete { .. } => return Ok(()),
    };
    let namespace = req.target.namespace.as_deref().unwrap_or_default();
    let Some(ns) = req
        .ctx
        .store
        .get(&ObjectKey::new("namespaces", "", namespace))
    else {
        return Ok(());
    };
    let ns = ns.value();
    let Some(labels) = ns.pointer("/metadata/labels").and_then(Value::as_object) else {
        return Ok(());
    };
    let enforce = Policy::of(labels, "enforce");
    let warn = Policy::of(labels, "warn");
    if enforce.is_none() && warn.is_none() {
        return Ok(());
    }
    let spec = match template {
        None => object.get("spec"),
        Some(pointer) => object.pointer(pointer),
    };
    let Some(spec) = spec else {
        return Ok(());
    };
    let mut warnings = Vec::new();
    if let Some(policy) = &enforce {
        let violations = check(policy.level, spec);
        if !violations.is_empty() {
            let text = violations.join(", ");
            if template.is_some() {
                warnings.push(format!(
                    "would violate PodSecurity \"{}\": {text}",
                    policy.shown()
                ));
            } else {
                return Err(ApiError::Denied {
                    gr: Gr::of(info),
                    name: object
                        .pointer("/metadata/name")
                        .and_then(Value::as_str)
                        .unwrap_or_default()
                        .to_string(),
                    detail: format!("violates PodSecurity \"{}\": {text}", policy.shown()),
                });
            }
        }
    }
    if let Some(policy) = &warn {
        // The enforce level's warning already says it when both ask for the same.
        let same = enforce
            .as_ref()
            .is_some_and(|e| template.is_some() && e.level == policy.level);
        let violations = check(policy.level, spec);
        if !violations.is_empty() && !same {
            warnings.push(format!(
                "would violate PodSecurity \"{}\": {}",
                policy.shown(),
                violations.join(", ")
            ));
        }
    }
    if !warnings.is_empty() {
        if let Ok(mut queued) = req.warnings.lock() {
            queued.extend(warnings);
        }
    }
    Ok(())
}

/// A container of the spec: its name and value.
fn containers(spec: &Value) -> Vec<(&str, &Value)> {
    ["initContainers", "containers", "ephemeralContainers"]
        .iter()
        .flat_map(|group| {
            spec.get(*group)
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
        })
        .map(|c| (c.get("name").and_then(Value::as_str).unwrap_or(""), c))
        .collect()
}

fn quoted(names: &[&str]) -> String {
    names
        .iter()
        .map(|n| format!("{n:?}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// The names of the containers in `all` for which `keep` holds.
fn names_where<'a>(all: &[(&'a str, &Value)], keep: impl Fn(&Value) -> bool) -> Vec<&'a str> {
    all.iter()
        .filter(|(_, c)| keep(c))
        .map(|(n, _)| *n)
        .collect()
}

/// `container "a"` or `containers "a", "b"`.
fn containers_named(names: &[&str]) -> String {
    if names.len() == 1 {
        format!("container {}", quoted(names))
    } else {
        format!("containers {}", quoted(names))
    }
}

fn flag(value: &Value, pointer: &str) -> Option<bool> {
    value.pointer(pointer).and_then(Value::as_bool)
}

fn text<'a>(value: &'a Value, pointer: &str) -> Option<&'a str> {
    value.pointer(pointer).and_then(Value::as_str)
}

/// The violations of `level` by a pod spec, in upstream's order, as `reason (detail)`.
fn check(level: Level, spec: &Value) -> Vec<String> {
    let mut out = Vec::new();
    if level == Level::Privileged {
        return out;
    }
    let all = containers(spec);
    // Baseline.
    let mut hosts = Vec::new();
    for (field, name) in [
        ("hostNetwork", "hostNetwork"),
        ("hostPID", "hostPID"),
        ("hostIPC", "hostIPC"),
    ] {
        if spec.get(field).and_then(Value::as_bool) == Some(true) {
            hosts.push(format!("{name}=true"));
        }
    }
    if level == Level::Baseline {
        let added: Vec<(&str, Vec<&str>)> = all
            .iter()
            .map(|(n, c)| {
                let bad: Vec<&str> = c
                    .pointer("/securityContext/capabilities/add")
                    .and_then(Value::as_array)
                    .into_iter()
                    .flatten()
                    .filter_map(Value::as_str)
                    .filter(|cap| !BASELINE_CAPABILITIES.contains(cap))
                    .collect();
                (*n, bad)
            })
            .filter(|(_, bad)| !bad.is_empty())
            .collect();
        if !added.is_empty() {
            let names: Vec<&str> = added.iter().map(|(n, _)| *n).collect();
            let mut caps: Vec<&str> = added.iter().flat_map(|(_, b)| b.clone()).collect();
            caps.sort();
            caps.dedup();
            out.push(format!(
                "non-default capabilities ({} must not include {} in securityContext.capabilities.add)",
                containers_named(&names),
                quoted(&caps)
            ));
        }
    }
    if !hosts.is_empty() {
        out.push(format!("host namespaces ({})", hosts.join(", ")));
    }
    let volumes: Vec<&Value> = spec
        .get("volumes")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .collect();
    fn volume_name<'a>(v: &&'a Value) -> &'a str {
        v.get("name").and_then(Value::as_str).unwrap_or("")
    }
    let host_paths: Vec<&str> = volumes
        .iter()
        .filter(|v| v.get("hostPath").is_some_and(|h| !h.is_null()))
        .map(volume_name)
        .collect();
    if !host_paths.is_empty() {
        let word = if host_paths.len() == 1 {
            "volume"
        } else {
            "volumes"
        };
        out.push(format!("hostPath volumes ({word} {})", quoted(&host_paths)));
    }
    let mut port_users = Vec::new();
    let mut ports = Vec::new();
    for (n, c) in &all {
        let used: Vec<String> = c
            .get("ports")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(|p| p.get("hostPort").and_then(Value::as_i64))
            .filter(|p| *p != 0)
            .map(|p| p.to_string())
            .collect();
        if !used.is_empty() {
            port_users.push(*n);
            ports.extend(used);
        }
    }
    if !port_users.is_empty() {
        let (verb, noun) = if port_users.len() == 1 && ports.len() == 1 {
            ("uses", "hostPort")
        } else if port_users.len() == 1 {
            ("uses", "hostPorts")
        } else {
            ("use", "hostPorts")
        };
        out.push(format!(
            "hostPort ({} {verb} {noun} {})",
            containers_named(&port_users),
            ports.join(", ")
        ));
    }
    let privileged: Vec<&str> = names_where(&all, |c| {
        flag(c, "/securityContext/privileged") == Some(true)
    });
    if !privileged.is_empty() {
        out.push(format!(
            "privileged ({} must not set securityContext.privileged=true)",
            containers_named(&privileged)
        ));
    }
    let proc_mount: Vec<&str> = names_where(&all, |c| {
        text(c, "/securityContext/procMount").is_some_and(|m| m != "Default")
    });
    if !proc_mount.is_empty() {
        out.push(format!(
            "procMount ({} must not set securityContext.procMount to \"Unmasked\")",
            containers_named(&proc_mount)
        ));
    }
    if level == Level::Baseline {
        if let Some(detail) = seccomp_unconfined(spec, &all) {
            out.push(format!("seccompProfile ({detail})"));
        }
    }
    let sysctls: Vec<&str> = spec
        .pointer("/securityContext/sysctls")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|s| s.get("name").and_then(Value::as_str))
        .filter(|s| !SAFE_SYSCTLS.contains(s))
        .collect();
    if !sysctls.is_empty() {
        out.push(format!("forbidden sysctls ({})", sysctls.join(", ")));
    }
    if level != Level::Restricted {
        return out;
    }
    // Restricted.
    let escalating: Vec<&str> = names_where(&all, |c| {
        flag(c, "/securityContext/allowPrivilegeEscalation") != Some(false)
    });
    if !escalating.is_empty() {
        out.push(format!(
            "allowPrivilegeEscalation != false ({} must set securityContext.allowPrivilegeEscalation=false)",
            containers_named(&escalating)
        ));
    }
    let mut capability_details = Vec::new();
    let not_dropping: Vec<&str> = names_where(&all, |c| {
        !c.pointer("/securityContext/capabilities/drop")
            .and_then(Value::as_array)
            .is_some_and(|d| d.iter().any(|x| x == "ALL"))
    });
    if !not_dropping.is_empty() {
        capability_details.push(format!(
            "{} must set securityContext.capabilities.drop=[\"ALL\"]",
            containers_named(&not_dropping)
        ));
    }
    let mut adders = Vec::new();
    let mut added = Vec::new();
    for (n, c) in &all {
        let bad: Vec<&str> = c
            .pointer("/securityContext/capabilities/add")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .filter(|cap| *cap != "NET_BIND_SERVICE")
            .collect();
        if !bad.is_empty() {
            adders.push(*n);
            added.extend(bad);
        }
    }
    if !adders.is_empty() {
        added.sort();
        added.dedup();
        capability_details.push(format!(
            "{} must not include {} in securityContext.capabilities.add",
            containers_named(&adders),
            quoted(&added)
        ));
    }
    if !capability_details.is_empty() {
        out.push(format!(
            "unrestricted capabilities ({})",
            capability_details.join("; ")
        ));
    }
    let restricted_volumes: Vec<(&str, &str)> = volumes
        .iter()
        .filter_map(|v| {
            let kind = v
                .as_object()?
                .iter()
                .find(|(k, val)| *k != "name" && !val.is_null())?
                .0
                .as_str();
            (!RESTRICTED_VOLUMES.contains(&kind)).then(|| (volume_name(v), kind))
        })
        .collect();
    if !restricted_volumes.is_empty() {
        let names: Vec<&str> = restricted_volumes.iter().map(|(n, _)| *n).collect();
        let mut kinds: Vec<&str> = restricted_volumes.iter().map(|(_, k)| *k).collect();
        kinds.sort();
        kinds.dedup();
        let (noun, verb) = if names.len() == 1 {
            ("volume", "uses")
        } else {
            ("volumes", "use")
        };
        let types = if kinds.len() == 1 { "type" } else { "types" };
        out.push(format!(
            "restricted volume types ({noun} {} {verb} restricted volume {types} {})",
            quoted(&names),
            quoted(&kinds)
        ));
    }
    let pod_non_root = flag(spec, "/securityContext/runAsNonRoot");
    let mut non_root = Vec::new();
    if pod_non_root == Some(false) {
        non_root.push("pod must not set securityContext.runAsNonRoot=false".to_string());
    }
    let explicit_false: Vec<&str> = names_where(&all, |c| {
        flag(c, "/securityContext/runAsNonRoot") == Some(false)
    });
    if !explicit_false.is_empty() {
        non_root.push(format!(
            "{} must not set securityContext.runAsNonRoot=false",
            containers_named(&explicit_false)
        ));
    }
    if pod_non_root != Some(true) {
        let unset: Vec<&str> =
            names_where(&all, |c| flag(c, "/securityContext/runAsNonRoot").is_none());
        if !unset.is_empty() {
            non_root.push(format!(
                "pod or {} must set securityContext.runAsNonRoot=true",
                containers_named(&unset)
            ));
        }
    }
    if !non_root.is_empty() {
        out.push(format!("runAsNonRoot != true ({})", non_root.join("; ")));
    }
    let mut root_user = Vec::new();
    if spec
        .pointer("/securityContext/runAsUser")
        .and_then(Value::as_i64)
        == Some(0)
    {
        root_user.push("pod must not set runAsUser=0".to_string());
    }
    let zero: Vec<&str> = names_where(&all, |c| {
        c.pointer("/securityContext/runAsUser")
            .and_then(Value::as_i64)
            == Some(0)
    });
    if !zero.is_empty() {
        root_user.push(format!(
            "{} must not set runAsUser=0",
            containers_named(&zero)
        ));
    }
    if !root_user.is_empty() {
        out.push(format!("runAsUser=0 ({})", root_user.join("; ")));
    }
    let allowed = |t: Option<&str>| matches!(t, Some("RuntimeDefault" | "Localhost"));
    let pod_type = text(spec, "/securityContext/seccompProfile/type");
    let mut seccomp = Vec::new();
    if pod_type.is_some() && !allowed(pod_type) {
        seccomp.push(format!(
            "pod must not set securityContext.seccompProfile.type to {:?}",
            pod_type.unwrap_or_default()
        ));
    }
    let bad_type: Vec<&str> = names_where(&all, |c| {
        let t = text(c, "/securityContext/seccompProfile/type");
        t.is_some() && !allowed(t)
    });
    if !bad_type.is_empty() {
        seccomp.push(format!(
            "{} must not set securityContext.seccompProfile.type to \"Unconfined\"",
            containers_named(&bad_type)
        ));
    }
    if !allowed(pod_type) {
        let unset: Vec<&str> = names_where(&all, |c| {
            text(c, "/securityContext/seccompProfile/type").is_none()
        });
        if !unset.is_empty() {
            seccomp.push(format!(
                "pod or {} must set securityContext.seccompProfile.type to \"RuntimeDefault\" or \"Localhost\"",
                containers_named(&unset)
            ));
        }
    }
    if !seccomp.is_empty() {
        out.push(format!("seccompProfile ({})", seccomp.join("; ")));
    }
    out
}

/// The baseline's seccomp check: nothing may ask for `Unconfined`.
fn seccomp_unconfined(spec: &Value, all: &[(&str, &Value)]) -> Option<String> {
    let mut details = Vec::new();
    if text(spec, "/securityContext/seccompProfile/type") == Some("Unconfined") {
        details.push(
            "pod must not set securityContext.seccompProfile.type to \"Unconfined\"".to_string(),
        );
    }
    let names: Vec<&str> = names_where(all, |c| {
        text(c, "/securityContext/seccompProfile/type") == Some("Unconfined")
    });
    if !names.is_empty() {
        details.push(format!(
            "{} must not set securityContext.seccompProfile.type to \"Unconfined\"",
            containers_named(&names)
        ));
    }
    (!details.is_empty()).then(|| details.join("; "))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_privileged_pod_violates_baseline_and_restricted() {
        let spec = json!({"containers": [{"name": "c", "image": "busybox",
            "securityContext": {"privileged": true}}]});
        assert!(check(Level::Privileged, &spec).is_empty());
        assert_eq!(
            check(Level::Baseline, &spec),
            ["privileged (container \"c\" must not set securityContext.privileged=true)"]
        );
        assert_eq!(
            check(Level::Restricted, &spec).join(", "),
            "privileged (container \"c\" must not set securityContext.privileged=true), \
             allowPrivilegeEscalation != false (container \"c\" must set securityContext.allowPrivilegeEscalation=false), \
             unrestricted capabilities (container \"c\" must set securityContext.capabilities.drop=[\"ALL\"]), \
             runAsNonRoot != true (pod or container \"c\" must set securityContext.runAsNonRoot=true), \
             seccompProfile (pod or container \"c\" must set securityContext.seccompProfile.type to \"RuntimeDefault\" or \"Localhost\")"
        );
    }

    #[test]
    fn a_restricted_pod_passes_and_host_access_is_named() {
        let spec = json!({"securityContext": {"runAsNonRoot": true,
                "seccompProfile": {"type": "RuntimeDefault"}},
            "containers": [{"name": "c", "securityContext": {
                "allowPrivilegeEscalation": false, "capabilities": {"drop": ["ALL"]}}}]});
        assert!(check(Level::Restricted, &spec).is_empty());
        let host = json!({"hostNetwork": true, "hostPID": true,
            "volumes": [{"name": "root", "hostPath": {"path": "/"}}],
            "containers": [{"name": "a", "ports": [{"hostPort": 80}]}]});
        assert_eq!(
            check(Level::Baseline, &host),
            [
                "host namespaces (hostNetwork=true, hostPID=true)",
                "hostPath volumes (volume \"root\")",
                "hostPort (container \"a\" uses hostPort 80)",
            ]
        );
    }
}
