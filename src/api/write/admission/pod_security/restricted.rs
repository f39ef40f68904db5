//! The restricted level's checks, on top of the baseline's: no privilege escalation, every
//! capability dropped, only the volume types a pod needs, a non-root user and a seccomp
//! profile.

use serde_json::Value;

use super::{containers_named, flag, names_where, quoted, text, Pod};

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

/// The restricted level's own violations of `pod`, in upstream's order.
pub(super) fn check(pod: &Pod<'_>) -> Vec<String> {
    let mut out = Vec::new();
    let spec = pod.spec;
    let all = &pod.containers;
    let escalating: Vec<&str> = names_where(all, |c| {
        flag(c, "/securityContext/allowPrivilegeEscalation") != Some(false)
    });
    if !escalating.is_empty() {
        out.push(format!(
            "allowPrivilegeEscalation != false ({} must set securityContext.allowPrivilegeEscalation=false)",
            containers_named(&escalating)
        ));
    }
    if let Some(violation) = capabilities(all) {
        out.push(violation);
    }
    if let Some(violation) = volumes(pod) {
        out.push(violation);
    }
    if let Some(violation) = run_as_non_root(spec, all) {
        out.push(violation);
    }
    let mut root_user = Vec::new();
    if spec
        .pointer("/securityContext/runAsUser")
        .and_then(Value::as_i64)
        == Some(0)
    {
        root_user.push("pod must not set runAsUser=0".to_string());
    }
    let zero: Vec<&str> = names_where(all, |c| {
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
    if let Some(violation) = seccomp(spec, all) {
        out.push(violation);
    }
    out
}

fn capabilities(all: &[(&str, &Value)]) -> Option<String> {
    let mut details = Vec::new();
    let not_dropping: Vec<&str> = names_where(all, |c| {
        !c.pointer("/securityContext/capabilities/drop")
            .and_then(Value::as_array)
            .is_some_and(|d| d.iter().any(|x| x == "ALL"))
    });
    if !not_dropping.is_empty() {
        details.push(format!(
            "{} must set securityContext.capabilities.drop=[\"ALL\"]",
            containers_named(&not_dropping)
        ));
    }
    let mut adders = Vec::new();
    let mut added = Vec::new();
    for (n, c) in all {
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
        details.push(format!(
            "{} must not include {} in securityContext.capabilities.add",
            containers_named(&adders),
            quoted(&added)
        ));
    }
    (!details.is_empty()).then(|| format!("unrestricted capabilities ({})", details.join("; ")))
}

fn volumes(pod: &Pod<'_>) -> Option<String> {
    let restricted: Vec<(&str, &str)> = pod
        .volumes()
        .filter_map(|v| {
            let kind = v
                .as_object()?
                .iter()
                .find(|(k, val)| *k != "name" && !val.is_null())?
                .0
                .as_str();
            let name = v.get("name").and_then(Value::as_str).unwrap_or("");
            (!RESTRICTED_VOLUMES.contains(&kind)).then_some((name, kind))
        })
        .collect();
    if restricted.is_empty() {
        return None;
    }
    let names: Vec<&str> = restricted.iter().map(|(n, _)| *n).collect();
    let mut kinds: Vec<&str> = restricted.iter().map(|(_, k)| *k).collect();
    kinds.sort();
    kinds.dedup();
    let (noun, verb) = if names.len() == 1 {
        ("volume", "uses")
    } else {
        ("volumes", "use")
    };
    let types = if kinds.len() == 1 { "type" } else { "types" };
    Some(format!(
        "restricted volume types ({noun} {} {verb} restricted volume {types} {})",
        quoted(&names),
        quoted(&kinds)
    ))
}

fn run_as_non_root(spec: &Value, all: &[(&str, &Value)]) -> Option<String> {
    let pod_non_root = flag(spec, "/securityContext/runAsNonRoot");
    let mut details = Vec::new();
    if pod_non_root == Some(false) {
        details.push("pod must not set securityContext.runAsNonRoot=false".to_string());
    }
    let explicit_false: Vec<&str> = names_where(all, |c| {
        flag(c, "/securityContext/runAsNonRoot") == Some(false)
    });
    if !explicit_false.is_empty() {
        details.push(format!(
            "{} must not set securityContext.runAsNonRoot=false",
            containers_named(&explicit_false)
        ));
    }
    if pod_non_root != Some(true) {
        let unset: Vec<&str> =
            names_where(all, |c| flag(c, "/securityContext/runAsNonRoot").is_none());
        if !unset.is_empty() {
            details.push(format!(
                "pod or {} must set securityContext.runAsNonRoot=true",
                containers_named(&unset)
            ));
        }
    }
    (!details.is_empty()).then(|| format!("runAsNonRoot != true ({})", details.join("; ")))
}

fn seccomp(spec: &Value, all: &[(&str, &Value)]) -> Option<String> {
    let allowed = |t: Option<&str>| matches!(t, Some("RuntimeDefault" | "Localhost"));
    let pod_type = text(spec, "/securityContext/seccompProfile/type");
    let mut details = Vec::new();
    if pod_type.is_some() && !allowed(pod_type) {
        details.push(format!(
            "pod must not set securityContext.seccompProfile.type to {:?}",
            pod_type.unwrap_or_default()
        ));
    }
    let bad_type: Vec<&str> = names_where(all, |c| {
        let t = text(c, "/securityContext/seccompProfile/type");
        t.is_some() && !allowed(t)
    });
    if !bad_type.is_empty() {
        details.push(format!(
            "{} must not set securityContext.seccompProfile.type to \"Unconfined\"",
            containers_named(&bad_type)
        ));
    }
    if !allowed(pod_type) {
        let unset: Vec<&str> = names_where(all, |c| {
            text(c, "/securityContext/seccompProfile/type").is_none()
        });
        if !unset.is_empty() {
            details.push(format!(
                "pod or {} must set securityContext.seccompProfile.type to \"RuntimeDefault\" or \"Localhost\"",
                containers_named(&unset)
            ));
        }
    }
    (!details.is_empty()).then(|| format!("seccompProfile ({})", details.join("; ")))
}
