//! One container's runtime description ([`ContainerConfig`]) from its spec, its image and its
//! pod, as kubelet and containerd fill it:
//!
//! - the command: `command` replaces the image's `Entrypoint`, `args` its `Cmd` (with no
//!   `command`, `args` follow the image's entrypoint); `$(VAR)` in them is replaced by the
//!   container's variables (`env::expand_all`: `$$` is a literal `$`, an unknown name stays
//!   as written);
//! - the environment: the image's, then the container's (`env::build`: `envFrom`, `env`),
//!   the later winning;
//! - the working directory: `workingDir`, else the image's;
//! - the user and groups (`identity`), capabilities, `privileged`, `readOnlyRootFilesystem`,
//!   `allowPrivilegeEscalation: false` (no new privileges);
//! - requests and limits (cpu in millicores, memory in bytes) and the OOM score of the pod's
//!   QoS class (Guaranteed -997, BestEffort 1000, Burstable by its memory request);
//! - the pod's sysctls, the termination message path;
//! - annotations kept with the container: the image it runs (name and ID), the spec's image
//!   (a change restarts the container) and the pod's grace period (to stop it as an orphan).

use std::collections::BTreeMap;
use std::path::Path;

use serde_json::Value;

use super::env::{self, EnvVar};
use super::identity;
use super::pod::{ContainerSpec, Pod};
use crate::agent::images::ImageRecord;
use crate::agent::runtime::{CapabilityChanges, ContainerConfig, ResourceSpec, VolumeMount};
use crate::agent::settings::parse_quantity;

/// Annotations the pod workers keep with each container.
pub mod annotations {
    /// The image as the runtime runs it (its full name).
    pub const IMAGE: &str = "io.kubernetes.container.image";
    /// `containerStatus.imageID`: `registry/repository@sha256:…`.
    pub const IMAGE_ID: &str = "litek8s.io/image-id";
    /// `image` as the spec wrote it when the container was made.
    pub const SPEC_IMAGE: &str = "litek8s.io/spec-image";
    /// The pod's grace period in seconds.
    pub const GRACE: &str = "io.kubernetes.pod.terminationGracePeriod";
}

/// Why a container cannot be described: its status reason and message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigError {
    pub reason: &'static str,
    pub message: String,
}

fn config_error(message: String) -> ConfigError {
    ConfigError {
        reason: "CreateContainerConfigError",
        message,
    }
}

/// What [`build`] needs besides the spec.
pub struct Inputs<'a> {
    pub pod: &'a Pod,
    pub container: &'a ContainerSpec,
    pub image: &'a ImageRecord,
    pub rootfs: &'a Path,
    /// The container's variables, resolved (`plug::resolve_env`).
    pub env: Vec<EnvVar>,
    pub mounts: Vec<VolumeMount>,
    pub restart_count: u32,
    /// The machine's memory (for a Burstable pod's OOM score).
    pub memory_capacity: u64,
}

/// The container's description.
pub fn build(inputs: Inputs<'_>) -> Result<ContainerConfig, ConfigError> {
    let Inputs {
        pod,
        container: c,
        image,
        rootfs,
        env,
        mounts,
        restart_count,
        memory_capacity,
    } = inputs;
    let image_cfg = &image.container_config;

    let mut all_env: Vec<String> = image_cfg.env.clone().unwrap_or_default();
    all_env.extend(env.iter().map(|v| format!("{}={}", v.name, v.value)));
    let expand_all = |list: &[String]| env::expand_all(list, &env);
    let args = match (&c.command, &c.args) {
        (Some(command), args) if !command.is_empty() => {
            let mut all = expand_all(command);
            all.extend(expand_all(args.as_deref().unwrap_or_default()));
            all
        }
        (_, Some(args)) if !args.is_empty() => {
            let mut all = image_cfg.entrypoint.clone().unwrap_or_default();
            all.extend(expand_all(args));
            all
        }
        _ => {
            let mut all = image_cfg.entrypoint.clone().unwrap_or_default();
            all.extend(image_cfg.cmd.clone().unwrap_or_default());
            all
        }
    };
    if args.is_empty() {
        return Err(config_error(format!(
            "no command specified: the container {:?} has no command and its image {} none",
            c.name, image.name
        )));
    }

    let user = identity::resolve(
        c,
        &pod.spec.security_context,
        image_cfg.user.as_deref(),
        rootfs,
    )
    .map_err(config_error)?;
    let sc = &c.security_context;
    let capabilities = sc
        .capabilities
        .as_ref()
        .map(|caps| CapabilityChanges {
            add: caps.add.clone(),
            drop: caps.drop.clone(),
        })
        .unwrap_or_default();

    let mut cfg = ContainerConfig::new(pod.pod_ref(), &c.name, rootfs.to_path_buf(), args);
    cfg.restart_count = restart_count;
    cfg.env = all_env;
    cfg.working_dir = c
        .working_dir
        .clone()
        .filter(|d| !d.is_empty())
        .or_else(|| image_cfg.working_dir.clone().filter(|d| !d.is_empty()));
    cfg.user = user;
    cfg.privileged = sc.privileged == Some(true);
    cfg.capabilities = capabilities;
    cfg.read_only_rootfs = sc.read_only_root_filesystem == Some(true);
    cfg.no_new_privileges = sc.allow_privilege_escalation == Some(false);
    cfg.mounts = mounts;
    cfg.stdin = c.stdin;
    cfg.stdin_once = c.stdin_once;
    cfg.tty = c.tty;
    cfg.termination_message_path = c.termination_message_path();
    cfg.resources = resources(c).map_err(config_error)?;
    cfg.oom_score_adj = Some(oom_score_adj(pod, c, memory_capacity));
    cfg.sysctls = pod
        .spec
        .security_context
        .sysctls
        .iter()
        .map(|s| (s.name.clone(), s.value.clone()))
        .collect();
    cfg.annotations = BTreeMap::from([
        (annotations::IMAGE.to_string(), image.name.clone()),
        (annotations::IMAGE_ID.to_string(), image_id(image)),
        (annotations::SPEC_IMAGE.to_string(), c.image.clone()),
        (
            annotations::GRACE.to_string(),
            pod.spec
                .termination_grace_period_seconds
                .unwrap_or(30)
                .to_string(),
        ),
    ]);
    Ok(cfg)
}

/// `containerStatus.imageID` of an image: its repository at the digest it was pulled by.
pub fn image_id(image: &ImageRecord) -> String {
    match crate::agent::images::Reference::parse(&image.name) {
        Ok(r) => r.with_digest(&image.repo_digest),
        Err(_) => image.repo_digest.to_string(),
    }
}

fn quantity(v: &Value, scale: u64) -> Result<u64, String> {
    let text = match v {
        Value::String(s) => s.clone(),
        Value::Number(n) => n.to_string(),
        other => return Err(format!("{other} is not a quantity")),
    };
    parse_quantity(&text, scale)
}

fn resources(c: &ContainerSpec) -> Result<ResourceSpec, String> {
    let get = |map: &BTreeMap<String, Value>, key: &str, scale| {
        map.get(key)
            .map(|v| quantity(v, scale).map_err(|e| format!("resources {key}: {e}")))
            .transpose()
    };
    let cpu_limit = get(&c.resources.limits, "cpu", 1000)?;
    let cpu_request = get(&c.resources.requests, "cpu", 1000)?.or(cpu_limit);
    Ok(ResourceSpec {
        cpu_request_millis: cpu_request,
        cpu_limit_millis: cpu_limit,
        memory_limit_bytes: get(&c.resources.limits, "memory", 1)?,
        pids_limit: None,
    })
}

/// kubelet's OOM score adjustment for a container of the pod's QoS class.
fn oom_score_adj(pod: &Pod, c: &ContainerSpec, memory_capacity: u64) -> i32 {
    match qos_class(pod) {
        "Guaranteed" => -997,
        "BestEffort" => 1000,
        _ => {
            let request = c
                .resources
                .requests
                .get("memory")
                .or_else(|| c.resources.limits.get("memory"))
                .and_then(|v| quantity(v, 1).ok())
                .unwrap_or(0);
            if memory_capacity == 0 {
                return 999;
            }
            let adj = 1000i64 - (1000i64.saturating_mul(request as i64) / memory_capacity as i64);
            // Never as low as a Guaranteed pod's, never as high as a BestEffort pod's.
            adj.clamp(3, 999) as i32
        }
    }
}

/// The pod's QoS class: as the API server computed it, else from its containers.
pub fn qos_class(pod: &Pod) -> &'static str {
    match pod.raw["status"]["qosClass"].as_str() {
        Some("Guaranteed") => return "Guaranteed",
        Some("BestEffort") => return "BestEffort",
        Some("Burstable") => return "Burstable",
        _ => {}
    }
    let mut any = false;
    let mut guaranteed = true;
    for c in pod.all_containers() {
        let (limits, requests) = (&c.resources.limits, &c.resources.requests);
        any |= !limits.is_empty() || !requests.is_empty();
        for key in ["cpu", "memory"] {
            match (limits.get(key), requests.get(key)) {
                (Some(l), Some(r)) if l == r => {}
                (Some(_), None) => {}
                _ => guaranteed = false,
            }
        }
    }
    match (any, guaranteed) {
        (false, _) => "BestEffort",
        (true, true) => "Guaranteed",
        (true, false) => "Burstable",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::agent::images::oci::ContainerConfig as ImageConfig;
    use crate::agent::images::Digest;
    use serde_json::json;
    use std::sync::Arc;

    fn image(config: ImageConfig) -> ImageRecord {
        let d = Digest::of(b"x");
        ImageRecord {
            name: "docker.io/library/busybox:1".into(),
            repo_digest: d.clone(),
            manifest: d.clone(),
            config: d,
            layers: vec![],
            size: 0,
            container_config: config,
            pulled_at: 0,
            last_used: 0,
            pinned: false,
        }
    }

    fn pod(container: Value) -> Pod {
        Pod::parse(Arc::new(json!({
            "metadata": {"uid": "u", "namespace": "default", "name": "p"},
            "spec": {"containers": [container], "terminationGracePeriodSeconds": 7,
                     "securityContext": {"sysctls": [{"name": "net.ipv4.ip_forward", "value": "1"}]}}
        })))
        .unwrap()
    }

    fn build_for(
        container: Value,
        img: ImageConfig,
        env: &[(&str, &str)],
    ) -> Result<ContainerConfig, ConfigError> {
        let pod = pod(container);
        let rootfs = tempfile::tempdir().unwrap();
        build(Inputs {
            pod: &pod,
            container: &pod.spec.containers[0],
            image: &image(img),
            rootfs: rootfs.path(),
            env: env
                .iter()
                .map(|(k, v)| EnvVar {
                    name: k.to_string(),
                    value: v.to_string(),
                })
                .collect(),
            mounts: vec![],
            restart_count: 2,
            memory_capacity: 1 << 30,
        })
    }

    #[test]
    fn command_and_args_replace_entrypoint_and_cmd() {
        let img = ImageConfig {
            entrypoint: Some(vec!["/entry".into()]),
            cmd: Some(vec!["default".into()]),
            env: Some(vec!["PATH=/bin".into(), "FROM_IMAGE=1".into()]),
            working_dir: Some("/srv".into()),
            ..Default::default()
        };
        let cases = [
            (json!({"name": "c"}), vec!["/entry", "default"]),
            (json!({"name": "c", "args": ["a"]}), vec!["/entry", "a"]),
            (json!({"name": "c", "command": ["sh"]}), vec!["sh"]),
            (
                json!({"name": "c", "command": ["sh"], "args": ["-c", "x"]}),
                vec!["sh", "-c", "x"],
            ),
        ];
        for (spec, want) in cases {
            let cfg = build_for(spec.clone(), img.clone(), &[]).unwrap();
            assert_eq!(cfg.args, want, "{spec}");
            assert_eq!(cfg.working_dir.as_deref(), Some("/srv"));
            assert_eq!(cfg.restart_count, 2);
        }
        let none = build_for(json!({"name": "c"}), ImageConfig::default(), &[]).unwrap_err();
        assert_eq!(none.reason, "CreateContainerConfigError");
    }

    #[test]
    fn variables_expand_in_the_command() {
        let img = ImageConfig {
            env: Some(vec!["PATH=/bin".into()]),
            ..Default::default()
        };
        let cfg = build_for(
            json!({"name": "c", "command": ["echo", "$(GREETING) $(NOPE) $$(GREETING) $$"]}),
            img,
            &[("NAME", "world"), ("GREETING", "hello world")],
        )
        .unwrap();
        assert_eq!(cfg.args[1], "hello world $(NOPE) $(GREETING) $");
        assert_eq!(cfg.env, ["PATH=/bin", "NAME=world", "GREETING=hello world"]);
        assert_eq!(cfg.sysctls["net.ipv4.ip_forward"], "1");
        assert_eq!(cfg.annotations[annotations::GRACE], "7");
        assert_eq!(
            cfg.annotations[annotations::IMAGE_ID],
            format!("docker.io/library/busybox@{}", Digest::of(b"x"))
        );
    }

    #[test]
    fn security_context_and_resources() {
        let cfg = build_for(
            json!({"name": "c", "command": ["sh"],
                   "securityContext": {"privileged": true, "readOnlyRootFilesystem": true,
                                       "allowPrivilegeEscalation": false, "runAsUser": 5,
                                       "capabilities": {"add": ["NET_ADMIN"], "drop": ["ALL"]}},
                   "resources": {"limits": {"cpu": "500m", "memory": "64Mi"},
                                 "requests": {"memory": "32Mi"}}}),
            ImageConfig::default(),
            &[],
        )
        .unwrap();
        assert!(cfg.privileged && cfg.read_only_rootfs && cfg.no_new_privileges);
        assert_eq!(cfg.user.uid, 5);
        assert_eq!(cfg.capabilities.add, ["NET_ADMIN"]);
        assert_eq!(cfg.resources.cpu_limit_millis, Some(500));
        assert_eq!(cfg.resources.cpu_request_millis, Some(500));
        assert_eq!(cfg.resources.memory_limit_bytes, Some(64 << 20));
        // Burstable: 1000 - 1000 * 32Mi / 1Gi.
        assert_eq!(cfg.oom_score_adj, Some(969));
        let bad = build_for(
            json!({"name": "c", "command": ["sh"], "resources": {"limits": {"memory": "lots"}}}),
            ImageConfig::default(),
            &[],
        )
        .unwrap_err();
        assert!(bad.message.contains("resources memory"), "{bad:?}");
    }

    #[test]
    fn qos_classes() {
        let p = |c: Value| pod(c);
        assert_eq!(qos_class(&p(json!({"name": "c"}))), "BestEffort");
        assert_eq!(
            qos_class(&p(
                json!({"name": "c", "resources": {"limits": {"cpu": "1", "memory": "1Gi"}}})
            )),
            "Guaranteed"
        );
        assert_eq!(
            qos_class(&p(
                json!({"name": "c", "resources": {"requests": {"cpu": "1"}}})
            )),
            "Burstable"
        );
    }
}
