//! The parts of a Pod object the agent acts on, read once per update into types
//! ([`Pod`], [`PodSpec`], [`ContainerSpec`]); the raw object stays beside them for what other
//! parts read themselves (volumes, env sources, probes) and for status, less its
//! `managedFields`, which nothing on the node reads ([`Pod::from_api`]).
//!
//! A pod the API no longer has but whose containers or sandbox are still on the node (it was
//! deleted while the agent was down) is an *orphan*: [`Pod::orphan`] rebuilds what stopping
//! it needs from the records the runtime and the sandbox keep.

use std::collections::BTreeMap;
use std::sync::Arc;

use serde::Deserialize;
use serde_json::{json, Value};

use crate::agent::runtime::PodRef;

/// A pod as the agent reads it.
#[derive(Debug, Clone)]
pub struct Pod {
    pub uid: String,
    pub namespace: String,
    pub name: String,
    pub spec: PodSpec,
    /// `metadata.deletionTimestamp` is set: the pod is to be stopped, then deleted.
    pub deleting: bool,
    /// `metadata.deletionGracePeriodSeconds`.
    pub deletion_grace_seconds: Option<i64>,
    /// `status.phase` as the API has it.
    pub phase: Option<String>,
    pub resource_version: Option<u64>,
    /// The whole object.
    pub raw: Arc<Value>,
}

/// `spec.restartPolicy`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum RestartPolicy {
    #[default]
    Always,
    OnFailure,
    Never,
}

impl RestartPolicy {
    fn parse(text: Option<&str>) -> RestartPolicy {
        match text {
            Some("OnFailure") => RestartPolicy::OnFailure,
            Some("Never") => RestartPolicy::Never,
            _ => RestartPolicy::Always,
        }
    }

    /// Whether a container that exited with `exit_code` runs again.
    pub fn restarts(self, exit_code: i32) -> bool {
        match self {
            RestartPolicy::Always => true,
            RestartPolicy::OnFailure => exit_code != 0,
            RestartPolicy::Never => false,
        }
    }
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PodSpec {
    #[serde(default)]
    pub containers: Vec<ContainerSpec>,
    #[serde(default)]
    pub init_containers: Vec<ContainerSpec>,
    #[serde(default)]
    restart_policy: Option<String>,
    #[serde(skip)]
    pub restart: RestartPolicy,
    #[serde(default)]
    pub termination_grace_period_seconds: Option<i64>,
    #[serde(default)]
    pub host_network: bool,
    #[serde(default, rename = "hostPID")]
    pub host_pid: bool,
    #[serde(default, rename = "hostIPC")]
    pub host_ipc: bool,
    #[serde(default)]
    pub hostname: Option<String>,
    #[serde(default)]
    pub subdomain: Option<String>,
    #[serde(default)]
    pub host_aliases: Vec<HostAliasSpec>,
    #[serde(default)]
    pub dns_policy: Option<String>,
    #[serde(default)]
    pub dns_config: Option<DnsConfigSpec>,
    #[serde(default)]
    pub security_context: PodSecurityContext,
    #[serde(default)]
    pub image_pull_secrets: Vec<NameRef>,
    /// Read by the volumes code.
    #[serde(default)]
    pub volumes: Vec<Value>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub struct NameRef {
    pub name: String,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub struct HostAliasSpec {
    pub ip: String,
    pub hostnames: Vec<String>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub struct DnsConfigSpec {
    pub nameservers: Vec<String>,
    pub searches: Vec<String>,
    pub options: Vec<DnsOption>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub struct DnsOption {
    pub name: String,
    pub value: Option<String>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
#[serde(default)]
pub struct PodSecurityContext {
    pub run_as_user: Option<i64>,
    pub run_as_group: Option<i64>,
    pub run_as_non_root: Option<bool>,
    pub supplemental_groups: Vec<i64>,
    pub fs_group: Option<i64>,
    pub sysctls: Vec<Sysctl>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub struct Sysctl {
    pub name: String,
    pub value: String,
}

/// One container of the spec (an init container or an app container).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
#[serde(default)]
pub struct ContainerSpec {
    pub name: String,
    pub image: String,
    pub image_pull_policy: Option<String>,
    pub command: Option<Vec<String>>,
    pub args: Option<Vec<String>>,
    pub working_dir: Option<String>,
    pub ports: Vec<ContainerPort>,
    pub security_context: ContainerSecurityContext,
    pub resources: Resources,
    pub termination_message_path: Option<String>,
    pub termination_message_policy: Option<String>,
    pub lifecycle: Option<Lifecycle>,
    pub readiness_probe: Option<Value>,
    pub startup_probe: Option<Value>,
    /// Whether the container's stdin stays open for `kubectl attach`.
    pub stdin: bool,
    /// Whether stdin closes when the first attached client goes.
    pub stdin_once: bool,
    /// Whether the container runs with a terminal.
    pub tty: bool,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
#[serde(default)]
pub struct ContainerPort {
    pub container_port: i64,
    pub host_port: Option<i64>,
    pub host_ip: Option<String>,
    pub protocol: Option<String>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
#[serde(default)]
pub struct ContainerSecurityContext {
    pub run_as_user: Option<i64>,
    pub run_as_group: Option<i64>,
    pub run_as_non_root: Option<bool>,
    pub privileged: Option<bool>,
    pub capabilities: Option<Capabilities>,
    pub read_only_root_filesystem: Option<bool>,
    pub allow_privilege_escalation: Option<bool>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub struct Capabilities {
    pub add: Vec<String>,
    pub drop: Vec<String>,
}

/// Quantities as the API writes them (strings, sometimes bare numbers).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub struct Resources {
    pub limits: BTreeMap<String, Value>,
    pub requests: BTreeMap<String, Value>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
#[serde(default)]
pub struct Lifecycle {
    pub pre_stop: Option<Value>,
}

impl Pod {
    /// Reads a Pod object as the API sent it, less what the agent never reads:
    /// `metadata.managedFields` (server-side apply's record of who set which field), which
    /// every worker would otherwise keep for the pod's whole life.
    pub fn from_api(mut object: Value) -> Result<Pod, String> {
        if let Some(meta) = object.get_mut("metadata").and_then(Value::as_object_mut) {
            meta.remove("managedFields");
        }
        Pod::parse(Arc::new(object))
    }

    /// Reads a Pod object.
    pub fn parse(raw: Arc<Value>) -> Result<Pod, String> {
        let meta = &raw["metadata"];
        let text = |v: &Value| v.as_str().unwrap_or_default().to_string();
        let uid = text(&meta["uid"]);
        if uid.is_empty() {
            return Err("the pod has no metadata.uid".into());
        }
        let mut spec: PodSpec = serde_json::from_value(raw["spec"].clone())
            .map_err(|e| format!("the pod's spec cannot be read: {e}"))?;
        spec.restart = RestartPolicy::parse(spec.restart_policy.as_deref());
        Ok(Pod {
            uid,
            namespace: text(&meta["namespace"]),
            name: text(&meta["name"]),
            spec,
            deleting: meta.get("deletionTimestamp").is_some_and(|t| !t.is_null()),
            deletion_grace_seconds: meta["deletionGracePeriodSeconds"].as_i64(),
            phase: raw["status"]["phase"].as_str().map(str::to_string),
            resource_version: meta["resourceVersion"]
                .as_str()
                .and_then(|rv| rv.parse().ok()),
            raw,
        })
    }

    /// A pod known only from what the node keeps of it (the API no longer has it).
    pub fn orphan(pod: &PodRef, grace_seconds: Option<i64>) -> Pod {
        let raw = Arc::new(json!({
            "metadata": {"uid": pod.uid, "namespace": pod.namespace, "name": pod.name},
            "spec": {"containers": [], "terminationGracePeriodSeconds": grace_seconds},
        }));
        Pod {
            uid: pod.uid.clone(),
            namespace: pod.namespace.clone(),
            name: pod.name.clone(),
            spec: PodSpec {
                termination_grace_period_seconds: grace_seconds,
                ..PodSpec::default()
            },
            deleting: false,
            deletion_grace_seconds: None,
            phase: None,
            resource_version: None,
            raw,
        }
    }

    pub fn pod_ref(&self) -> PodRef {
        PodRef {
            uid: self.uid.clone(),
            namespace: self.namespace.clone(),
            name: self.name.clone(),
        }
    }

    /// `name_namespace(uid)`, as kubelet names a pod in its messages.
    pub fn display(&self) -> String {
        format!("{}_{}({})", self.name, self.namespace, self.uid)
    }

    /// The grace period its containers get when it is stopped: the deletion's, else the
    /// spec's (kubelet's rule), 30 s when neither says.
    pub fn grace_seconds(&self) -> i64 {
        self.deletion_grace_seconds
            .or(self.spec.termination_grace_period_seconds)
            .unwrap_or(30)
            .max(0)
    }

    /// The API says it finished (a restart of the agent must not run it again).
    pub fn api_phase_is_terminal(&self) -> bool {
        matches!(self.phase.as_deref(), Some("Succeeded" | "Failed"))
    }

    /// Every container of the spec, init containers first.
    pub fn all_containers(&self) -> impl Iterator<Item = &ContainerSpec> {
        self.spec
            .init_containers
            .iter()
            .chain(self.spec.containers.iter())
    }

    pub fn container(&self, name: &str) -> Option<&ContainerSpec> {
        self.all_containers().find(|c| c.name == name)
    }

    pub fn is_init_container(&self, name: &str) -> bool {
        self.spec.init_containers.iter().any(|c| c.name == name)
    }

    /// The raw spec of a container (what the volumes, env and probe code read).
    pub fn raw_container(&self, name: &str) -> Option<&Value> {
        ["initContainers", "containers"].iter().find_map(|list| {
            self.raw["spec"][*list]
                .as_array()?
                .iter()
                .find(|c| c["name"] == name)
        })
    }
}

impl ContainerSpec {
    pub fn termination_message_path(&self) -> Option<String> {
        match self.termination_message_path.as_deref() {
            Some("") => None,
            Some(p) => Some(p.to_string()),
            None => Some("/dev/termination-log".to_string()),
        }
    }

    pub fn fallback_to_logs(&self) -> bool {
        self.termination_message_policy.as_deref() == Some("FallbackToLogsOnError")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pod_reads_with_defaults_and_its_grace() {
        let raw = json!({
            "metadata": {"uid": "u1", "namespace": "default", "name": "web",
                         "resourceVersion": "42", "deletionTimestamp": "2026-01-01T00:00:00Z",
                         "deletionGracePeriodSeconds": 5},
            "spec": {"restartPolicy": "OnFailure", "hostNetwork": true,
                     "terminationGracePeriodSeconds": 30,
                     "initContainers": [{"name": "init", "image": "busybox"}],
                     "containers": [{"name": "app", "image": "busybox", "command": ["sleep", "1"],
                                     "securityContext": {"runAsUser": 1000},
                                     "resources": {"limits": {"cpu": "500m", "memory": 1024}}}]},
            "status": {"phase": "Running"}
        });
        let pod = Pod::parse(Arc::new(raw)).unwrap();
        assert_eq!(pod.spec.restart, RestartPolicy::OnFailure);
        assert!(pod.deleting && pod.spec.host_network);
        assert_eq!(pod.grace_seconds(), 5);
        assert_eq!(pod.resource_version, Some(42));
        assert_eq!(
            pod.all_containers()
                .map(|c| &c.name[..])
                .collect::<Vec<_>>(),
            ["init", "app"]
        );
        assert!(pod.is_init_container("init") && !pod.is_init_container("app"));
        assert_eq!(pod.raw_container("app").unwrap()["command"][0], "sleep");
        let app = pod.container("app").unwrap();
        assert_eq!(app.security_context.run_as_user, Some(1000));
        assert_eq!(
            app.termination_message_path().as_deref(),
            Some("/dev/termination-log")
        );
        assert_eq!(pod.display(), "web_default(u1)");
    }

    #[test]
    fn a_pod_from_the_api_keeps_no_managed_fields() {
        let pod = Pod::from_api(json!({
            "metadata": {"uid": "u1", "namespace": "default", "name": "web",
                         "labels": {"app": "web"},
                         "managedFields": [{"manager": "kubectl", "operation": "Update",
                                            "fieldsType": "FieldsV1", "fieldsV1": {"f:spec": {}}}]},
            "spec": {"containers": [{"name": "app", "image": "busybox"}]}
        }))
        .unwrap();
        assert!(pod.raw["metadata"].get("managedFields").is_none());
        assert_eq!(pod.raw["metadata"]["labels"]["app"], "web");
        assert_eq!(pod.spec.containers[0].image, "busybox");
    }

    #[test]
    fn restart_policies() {
        use RestartPolicy::*;
        assert!(Always.restarts(0) && Always.restarts(1));
        assert!(!OnFailure.restarts(0) && OnFailure.restarts(137));
        assert!(!Never.restarts(1));
        assert_eq!(RestartPolicy::parse(None), Always);
    }

    #[test]
    fn a_pod_without_uid_or_with_a_bad_spec_is_refused() {
        assert!(Pod::parse(Arc::new(json!({"metadata": {"name": "x"}}))).is_err());
        let bad = json!({"metadata": {"uid": "u"}, "spec": {"containers": "nope"}});
        assert!(Pod::parse(Arc::new(bad)).is_err());
    }
}
