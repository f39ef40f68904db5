//! The checks against upstream's texts.

use super::*;
use serde_json::json;

/// The violations of a pod spec without metadata.
fn check_spec(level: Level, spec: &Value) -> Vec<String> {
    check(level, &Pod::new(&Value::Null, spec))
}

#[test]
fn a_privileged_pod_violates_baseline_and_restricted() {
    let spec = json!({"containers": [{"name": "c", "image": "busybox",
        "securityContext": {"privileged": true}}]});
    assert!(check_spec(Level::Privileged, &spec).is_empty());
    assert_eq!(
        check_spec(Level::Baseline, &spec),
        ["privileged (container \"c\" must not set securityContext.privileged=true)"]
    );
    assert_eq!(
        check_spec(Level::Restricted, &spec).join(", "),
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
    assert!(check_spec(Level::Restricted, &spec).is_empty());
    let host = json!({"hostNetwork": true, "hostPID": true,
        "volumes": [{"name": "root", "hostPath": {"path": "/"}}],
        "containers": [{"name": "a", "ports": [{"hostPort": 80}]}]});
    assert_eq!(
        check_spec(Level::Baseline, &host),
        [
            "host namespaces (hostNetwork=true, hostPID=true)",
            "hostPath volumes (volume \"root\")",
            "hostPort (container \"a\" uses hostPort 80)",
        ]
    );
}

#[test]
fn app_armor_profiles_and_annotations_are_checked() {
    let meta = json!({"annotations": {
        "container.apparmor.security.beta.kubernetes.io/": "bogus",
        "container.apparmor.security.beta.kubernetes.io/a": "",
        "container.apparmor.security.beta.kubernetes.io/b": "runtime/default",
        "container.apparmor.security.beta.kubernetes.io/c": "localhost/",
        "container.apparmor.security.beta.kubernetes.io/d": "localhost/foo",
        "container.apparmor.security.beta.kubernetes.io/e": "unconfined",
        "container.apparmor.security.beta.kubernetes.io/f": "unknown"}});
    let spec = json!({"containers": [{"name": "a"}]});
    assert_eq!(
        check(Level::Baseline, &Pod::new(&meta, &spec)),
        [
            "forbidden AppArmor profiles (annotations must not set AppArmor profile type to \
          \"container.apparmor.security.beta.kubernetes.io/=\"bogus\"\", \
          \"container.apparmor.security.beta.kubernetes.io/e=\"unconfined\"\", \
          \"container.apparmor.security.beta.kubernetes.io/f=\"unknown\"\")"
        ]
    );
    let spec = json!({"securityContext": {"appArmorProfile": {"type": "Unconfined"}},
        "initContainers": [{"name": "init", "securityContext":
            {"appArmorProfile": {"type": "Unconfined"}}}],
        "containers": [{"name": "a", "securityContext":
            {"appArmorProfile": {"type": "Localhost", "localhostProfile": "p"}}}]});
    assert_eq!(
        check_spec(Level::Baseline, &spec),
        ["forbidden AppArmor profile (pod and container \"init\" must not set AppArmor profile type to \"Unconfined\")"]
    );
    let meta =
        json!({"annotations": {"container.apparmor.security.beta.kubernetes.io/a": "unconfined"}});
    let spec = json!({"containers": [{"name": "a", "securityContext":
        {"appArmorProfile": {"type": "Unconfined"}}}]});
    assert_eq!(
        check(Level::Baseline, &Pod::new(&meta, &spec)),
        ["forbidden AppArmor profiles (container \"a\" and annotation must not set AppArmor profile type to \
          \"Unconfined\", \"container.apparmor.security.beta.kubernetes.io/a=\"unconfined\"\")"]
    );
    let fine = json!({"securityContext": {"appArmorProfile": {"type": "RuntimeDefault"}},
        "containers": [{"name": "a"}]});
    assert!(check_spec(Level::Baseline, &fine).is_empty());
}

#[test]
fn se_linux_options_are_checked() {
    let spec = json!({"securityContext": {"seLinuxOptions": {"type": "spc_t", "user": "u", "role": "r"}},
        "containers": [{"name": "a", "securityContext": {"seLinuxOptions": {"type": "container_t"}}},
            {"name": "b", "securityContext": {"seLinuxOptions": {"type": "unconfined_t", "level": "s0:c1"}}},
            {"name": "c", "securityContext": {"seLinuxOptions": {"role": "r"}}}]});
    assert_eq!(
        check_spec(Level::Baseline, &spec),
        ["seLinuxOptions (pod and containers \"b\", \"c\" set forbidden securityContext.seLinuxOptions: \
          types \"spc_t\", \"unconfined_t\"; user may not be set; role may not be set)"]
    );
    let spec = json!({"containers": [{"name": "a", "securityContext": {"seLinuxOptions": {"user": "u"}}}]});
    assert_eq!(
        check_spec(Level::Baseline, &spec),
        ["seLinuxOptions (container \"a\" set forbidden securityContext.seLinuxOptions: user may not be set)"]
    );
    let fine = json!({"securityContext": {"seLinuxOptions": {"type": "container_engine_t", "level": "s0"}},
        "containers": [{"name": "a", "securityContext": {"seLinuxOptions": {"type": "container_kvm_t"}}}]});
    assert!(check_spec(Level::Baseline, &fine).is_empty());
}

#[test]
fn violations_come_in_upstream_order() {
    // kube-apiserver's order: the baseline checks sorted by name, then the restricted ones.
    let meta =
        json!({"annotations": {"container.apparmor.security.beta.kubernetes.io/c": "unconfined"}});
    let spec = json!({"hostNetwork": true,
        "containers": [{"name": "c", "securityContext": {"privileged": true,
            "capabilities": {"add": ["SYS_ADMIN"]}, "seLinuxOptions": {"type": "spc_t"}}}]});
    let reasons: Vec<String> = check(Level::Baseline, &Pod::new(&meta, &spec))
        .iter()
        .map(|v| v.split(" (").next().unwrap_or_default().to_string())
        .collect();
    assert_eq!(
        reasons,
        [
            "forbidden AppArmor profile",
            "non-default capabilities",
            "host namespaces",
            "privileged",
            "seLinuxOptions"
        ]
    );
}
