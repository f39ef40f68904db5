//! kube-apiserver's `PodSecurity` admission plugin: the Pod Security Standards a namespace's
//! labels ask for, `pod-security.kubernetes.io/enforce`, `audit` and `warn` (`privileged`,
//! `baseline`, `restricted`; a `<mode>-version` label is accepted and named in messages),
//! over the defaults of the admission configuration file.
//!
//! - A new or updated pod that violates the `enforce` level is refused with 403 listing every
//!   violation (`violates PodSecurity "restricted:latest": privileged (container "c" must not
//!   set securityContext.privileged=true), …`); the `warn` level's violations come back as a
//!   `Warning` header kubectl prints (`would violate PodSecurity …`); the `audit` level's are
//!   recorded in the request's audit event (`pod-security.kubernetes.io/audit-violations`).
//! - Workload templates (Deployments, ReplicaSets, StatefulSets, DaemonSets, Jobs, CronJobs,
//!   ReplicationControllers, PodTemplates) are never refused: the enforce and warn levels'
//!   violations of their pod template are warnings, as upstream does.
//! - The configured exempt namespaces, users and runtime classes are not checked.
//!
//! The checks are the current standards' (the `latest` version) with kube-apiserver's texts;
//! the Windows host-process check is left out (no Windows nodes here).
//!
//! - `policy`: the levels, modes and namespace labels;
//! - `config`: the `PodSecurityConfiguration` of `--admission-control-config-file`;
//! - `baseline`, `restricted`: each level's checks;
//! - `plugin`: the admission step.

mod baseline;
mod config;
mod plugin;
mod policy;
mod restricted;

use serde_json::Value;

use super::Operation;
pub use config::{ConfigError, PodSecurityConfig};
pub use plugin::admit;
use policy::Level;

/// The pod a check reads: its metadata (annotations), spec and containers.
pub(super) struct Pod<'a> {
    meta: &'a Value,
    spec: &'a Value,
    /// Init, regular and ephemeral containers, each with its name.
    containers: Vec<(&'a str, &'a Value)>,
}

impl<'a> Pod<'a> {
    fn new(meta: &'a Value, spec: &'a Value) -> Pod<'a> {
        let containers = ["initContainers", "containers", "ephemeralContainers"]
            .iter()
            .flat_map(|group| {
                spec.get(*group)
                    .and_then(Value::as_array)
                    .into_iter()
                    .flatten()
            })
            .map(|c| (c.get("name").and_then(Value::as_str).unwrap_or(""), c))
            .collect();
        Pod {
            meta,
            spec,
            containers,
        }
    }

    fn volumes(&self) -> impl Iterator<Item = &'a Value> {
        self.spec
            .get("volumes")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
    }
}

/// The violations of `level` by a pod, in upstream's order (the baseline checks, then the
/// restricted level's own), as `reason (detail)`.
fn check(level: Level, pod: &Pod<'_>) -> Vec<String> {
    if level == Level::Privileged {
        return Vec::new();
    }
    let mut out = baseline::check(level, pod);
    if level == Level::Restricted {
        out.extend(restricted::check(pod));
    }
    out
}

/// `"a", "b"`, each name Go-quoted.
fn quoted(names: &[&str]) -> String {
    names
        .iter()
        .map(|n| format!("{n:?}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// `"a", "b"`, each value in plain quotes (upstream's `joinQuote`, which does not escape).
fn join_quote(values: &[String]) -> String {
    values
        .iter()
        .map(|v| format!("\"{v}\""))
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

#[cfg(test)]
mod tests;
