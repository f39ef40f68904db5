//! The baseline level's checks: what a pod must not do to escape its container (host
//! namespaces, paths and ports, privilege, AppArmor and SELinux relabelling, seccomp
//! `Unconfined`, unsafe sysctls, extra capabilities).

use std::collections::BTreeSet;

use serde_json::Value;

use super::{containers_named, flag, join_quote, names_where, quoted, text, Level, Pod};

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
/// The per-container AppArmor annotation (deprecated by `securityContext.appArmorProfile`,
/// still honoured by the kubelet and so still checked).
const APPARMOR_ANNOTATION: &str = "container.apparmor.security.beta.kubernetes.io/";
/// The SELinux types the baseline level allows (the empty type is the runtime's default).
const SELINUX_TYPES: [&str; 5] = [
    "",
    "container_t",
    "container_init_t",
    "container_kvm_t",
    "container_engine_t",
];

/// The baseline violations of `pod`, in upstream's order (its checks sorted by name). The
/// restricted level replaces the capabilities and seccomp checks with stricter ones.
pub(super) fn check(level: Level, pod: &Pod<'_>) -> Vec<String> {
    let mut out = Vec::new();
    let spec = pod.spec;
    let all = &pod.containers;
    if let Some(violation) = app_armor(pod) {
        out.push(violation);
    }
    if level == Level::Baseline {
        if let Some(violation) = capabilities(all) {
            out.push(violation);
        }
    }
    let hosts: Vec<String> = ["hostNetwork", "hostPID", "hostIPC"]
        .into_iter()
        .filter(|field| spec.get(field).and_then(Value::as_bool) == Some(true))
        .map(|field| format!("{field}=true"))
        .collect();
    if !hosts.is_empty() {
        out.push(format!("host namespaces ({})", hosts.join(", ")));
    }
    let host_paths: Vec<&str> = pod
        .volumes()
        .filter(|v| v.get("hostPath").is_some_and(|h| !h.is_null()))
        .map(|v| v.get("name").and_then(Value::as_str).unwrap_or(""))
        .collect();
    if !host_paths.is_empty() {
        let word = if host_paths.len() == 1 {
            "volume"
        } else {
            "volumes"
        };
        out.push(format!("hostPath volumes ({word} {})", quoted(&host_paths)));
    }
    if let Some(violation) = host_ports(all) {
        out.push(violation);
    }
    let privileged: Vec<&str> = names_where(all, |c| {
        flag(c, "/securityContext/privileged") == Some(true)
    });
    if !privileged.is_empty() {
        out.push(format!(
            "privileged ({} must not set securityContext.privileged=true)",
            containers_named(&privileged)
        ));
    }
    let proc_mount: Vec<&str> = names_where(all, |c| {
        text(c, "/securityContext/procMount").is_some_and(|m| m != "Default")
    });
    if !proc_mount.is_empty() {
        out.push(format!(
            "procMount ({} must not set securityContext.procMount to \"Unmasked\")",
            containers_named(&proc_mount)
        ));
    }
    if let Some(violation) = se_linux(pod) {
        out.push(violation);
    }
    if level == Level::Baseline {
        if let Some(detail) = seccomp_unconfined(spec, all) {
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
    out
}

/// AppArmor: the pod's and containers' `securityContext.appArmorProfile.type` must be
/// `RuntimeDefault` or `Localhost`, and the annotations `runtime/default`, `localhost/…` or
/// empty.
fn app_armor(pod: &Pod<'_>) -> Option<String> {
    // A profile without a type is not one of the allowed ones either.
    fn bad_type(scope: &Value) -> Option<&str> {
        let allowed = |t: &str| matches!(t, "RuntimeDefault" | "Localhost");
        scope
            .pointer("/securityContext/appArmorProfile")
            .filter(|p| !p.is_null())
            .map(|p| p.get("type").and_then(Value::as_str).unwrap_or(""))
            .filter(|t| !allowed(t))
    }
    let mut setters = Vec::new();
    let mut values = BTreeSet::new();
    if let Some(t) = bad_type(pod.spec) {
        setters.push("pod".to_string());
        values.insert(t.to_string());
    }
    let mut names = Vec::new();
    for (name, c) in &pod.containers {
        if let Some(t) = bad_type(c) {
            names.push(*name);
            values.insert(t.to_string());
        }
    }
    if !names.is_empty() {
        setters.push(containers_named(&names));
    }
    let mut annotations: Vec<String> = pod
        .meta
        .pointer("/annotations")
        .and_then(Value::as_object)
        .into_iter()
        .flatten()
        .filter(|(k, _)| k.starts_with(APPARMOR_ANNOTATION))
        .filter_map(|(k, v)| {
            let v = v.as_str().unwrap_or_default();
            let fine = v.is_empty() || v == "runtime/default" || v.starts_with("localhost/");
            (!fine).then(|| format!("{k}={v:?}"))
        })
        .collect();
    let mut values: Vec<String> = values.into_iter().collect();
    if !annotations.is_empty() {
        annotations.sort();
        setters.push(
            if annotations.len() == 1 {
                "annotation"
            } else {
                "annotations"
            }
            .to_string(),
        );
        values.extend(annotations);
    }
    if setters.is_empty() {
        return None;
    }
    let reason = if values.len() == 1 {
        "forbidden AppArmor profile"
    } else {
        "forbidden AppArmor profiles"
    };
    Some(format!(
        "{reason} ({} must not set AppArmor profile type to {})",
        setters.join(" and "),
        join_quote(&values)
    ))
}

/// SELinux: `seLinuxOptions.type` one of the container types, `user` and `role` unset.
fn se_linux(pod: &Pod<'_>) -> Option<String> {
    let mut types = BTreeSet::new();
    let mut user = false;
    let mut role = false;
    let mut invalid = |scope: &Value| {
        let Some(options) = scope
            .pointer("/securityContext/seLinuxOptions")
            .filter(|o| !o.is_null())
        else {
            return false;
        };
        let field = |name: &str| options.get(name).and_then(Value::as_str).unwrap_or("");
        let mut bad = false;
        if !SELINUX_TYPES.contains(&field("type")) {
            types.insert(field("type").to_string());
            bad = true;
        }
        if !field("user").is_empty() {
            user = true;
            bad = true;
        }
        if !field("role").is_empty() {
            role = true;
            bad = true;
        }
        bad
    };
    let mut setters = Vec::new();
    if invalid(pod.spec) {
        setters.push("pod".to_string());
    }
    let names: Vec<&str> = pod
        .containers
        .iter()
        .filter(|(_, c)| invalid(c))
        .map(|(n, _)| *n)
        .collect();
    if !names.is_empty() {
        setters.push(containers_named(&names));
    }
    if setters.is_empty() {
        return None;
    }
    let mut data = Vec::new();
    if !types.is_empty() {
        let types: Vec<String> = types.into_iter().collect();
        let word = if types.len() == 1 { "type" } else { "types" };
        data.push(format!("{word} {}", join_quote(&types)));
    }
    if user {
        data.push("user may not be set".to_string());
    }
    if role {
        data.push("role may not be set".to_string());
    }
    Some(format!(
        "seLinuxOptions ({} set forbidden securityContext.seLinuxOptions: {})",
        setters.join(" and "),
        data.join("; ")
    ))
}

fn capabilities(all: &[(&str, &Value)]) -> Option<String> {
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
    if added.is_empty() {
        return None;
    }
    let names: Vec<&str> = added.iter().map(|(n, _)| *n).collect();
    let mut caps: Vec<&str> = added.iter().flat_map(|(_, b)| b.clone()).collect();
    caps.sort();
    caps.dedup();
    Some(format!(
        "non-default capabilities ({} must not include {} in securityContext.capabilities.add)",
        containers_named(&names),
        quoted(&caps)
    ))
}

fn host_ports(all: &[(&str, &Value)]) -> Option<String> {
    let mut port_users = Vec::new();
    let mut ports = Vec::new();
    for (n, c) in all {
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
    if port_users.is_empty() {
        return None;
    }
    let (verb, noun) = if port_users.len() == 1 && ports.len() == 1 {
        ("uses", "hostPort")
    } else if port_users.len() == 1 {
        ("uses", "hostPorts")
    } else {
        ("use", "hostPorts")
    };
    Some(format!(
        "hostPort ({} {verb} {noun} {})",
        containers_named(&port_users),
        ports.join(", ")
    ))
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
