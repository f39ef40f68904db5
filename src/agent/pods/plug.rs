//! Where the parts of a pod that live in their own modules plug into the pod workers, each
//! one small call so that a worker needs to know nothing of how they work:
//!
//! - volumes (`volumes`): [`prepare_volumes`] on every sync before containers start (it also
//!   rewrites configMap, secret, downwardAPI and projected volumes whose content changed),
//!   [`volume_mounts`] per container, [`cleanup_volumes`] once the pod is stopped;
//! - the environment (`env`): [`resolve_env`], from `env` and `envFrom` with the ConfigMaps
//!   and Secrets of [`Objects`] and the downward API;
//! - probes (`probes`): [`Probes`], told when containers start and stop, asked what their
//!   probes say; its updates reach the dispatcher, which wakes the pod;
//! - exec hooks: [`exec_hook`] runs a `preStop` command with `Runtime::exec`.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use parking_lot::Mutex;
use tokio::sync::mpsc;

use super::context::PodsContext;
use super::env::{self, EnvContext, EnvVar};
use super::objects::{ObjectKey, ObjectKind, Objects};
use super::pod::{ContainerSpec, Pod};
use super::probes::{self, ContainerProbes, ProbeKind, ProbeResult, ProbeTarget, ProbeUpdate};
use super::service_env;
use super::volumes::{self, ObjectSource, PodVolumes, TokenRequest, VolumeSettings};
use crate::agent::proxy::informer::Kind as ServiceKind;
use crate::agent::runtime::{Runtime, VolumeMount};

/// How long a container's start waits for the agent's first list of the Services.
const SERVICES_WAIT: Duration = Duration::from_secs(10);

impl ObjectSource for Objects {
    async fn config_map(
        &self,
        namespace: &str,
        name: &str,
    ) -> Result<Option<serde_json::Value>, String> {
        let key = ObjectKey::new(ObjectKind::ConfigMap, namespace, name);
        match self.get(&key).await {
            Ok(found) => Ok(found.map(|v| (*v).clone())),
            Err(e) => Err(e.to_string()),
        }
    }

    async fn secret(
        &self,
        namespace: &str,
        name: &str,
    ) -> Result<Option<serde_json::Value>, String> {
        let key = ObjectKey::new(ObjectKind::Secret, namespace, name);
        match self.get(&key).await {
            Ok(found) => Ok(found.map(|v| (*v).clone())),
            Err(e) => Err(e.to_string()),
        }
    }

    async fn service_account_token(&self, request: &TokenRequest) -> Result<String, String> {
        Objects::service_account_token(self, request)
            .await
            .map_err(|e| e.to_string())
    }
}

/// Makes (or brings up to date) the pod's volumes. `Err`: why the pod cannot start yet (it
/// waits in `ContainerCreating` with that message and is tried again).
pub async fn prepare_volumes(
    ctx: &PodsContext,
    pod: &Pod,
    volumes: &mut Option<PodVolumes>,
) -> Result<(), String> {
    if volumes.is_none() {
        let settings = VolumeSettings {
            pods_dir: ctx.sandboxes.settings().pods_dir.clone(),
            allocatable: ctx.settings.allocatable,
        };
        *volumes = Some(PodVolumes::new(&settings, &pod.raw).map_err(|e| e.to_string())?);
    }
    let Some(vols) = volumes.as_mut() else {
        return Ok(());
    };
    let report = vols.sync(&pod.raw, &ctx.objects).await;
    if report.ready() {
        return Ok(());
    }
    Err(report
        .failures
        .iter()
        .map(|f| f.message())
        .collect::<Vec<_>>()
        .join("; "))
}

/// The mounts of `container`, its volumes made by [`prepare_volumes`]; `env` is its
/// environment (for `subPathExpr`). `Err`: `CreateContainerConfigError` with that message.
pub fn volume_mounts(
    volumes: Option<&PodVolumes>,
    pod: &Pod,
    container: &ContainerSpec,
    env: &[EnvVar],
) -> Result<Vec<VolumeMount>, String> {
    let Some(raw) = pod.raw_container(&container.name) else {
        return Ok(Vec::new());
    };
    match volumes {
        Some(v) => v.container_mounts(raw, env).map_err(|e| e.to_string()),
        None if raw["volumeMounts"].as_array().is_none_or(|m| m.is_empty()) => Ok(Vec::new()),
        None => Err("the pod's volumes are not made yet".into()),
    }
}

/// Unmounts and removes the volumes of pod `uid` (its containers are stopped).
pub fn cleanup_volumes(
    ctx: &PodsContext,
    uid: &str,
    volumes: &mut Option<PodVolumes>,
) -> Result<(), String> {
    let done = match volumes.as_mut() {
        Some(v) => v.teardown(),
        None => volumes::teardown(&ctx.sandboxes.settings().pods_dir, uid),
    };
    done.map_err(|e| e.to_string())
}

/// The environment `container` gets from its spec (`envFrom`, `env`), in order. `Err`:
/// `CreateContainerConfigError` with that message.
pub async fn resolve_env(
    ctx: &PodsContext,
    pod: &Pod,
    container: &ContainerSpec,
    pod_ips: &[IpAddr],
) -> Result<Vec<EnvVar>, String> {
    let Some(raw) = pod.raw_container(&container.name) else {
        return Ok(Vec::new());
    };
    let host_ips = [ctx.settings.node_ip];
    // kubelet refuses to make a container's environment before it has read the Services
    // once (the variables would be missing for good); the worker retries.
    if !ctx
        .services
        .listed_within(ServiceKind::Services, SERVICES_WAIT)
        .await
    {
        return Err(
            "services have not yet been read at least once, cannot construct envvars".into(),
        );
    }
    let links = pod.raw["spec"]["enableServiceLinks"]
        .as_bool()
        .unwrap_or(true);
    let service_env = {
        let snapshot = ctx.services.snapshot.lock();
        service_env::variables(snapshot.services.values(), &pod.namespace, links)
    };
    let env_ctx = EnvContext {
        pod: &pod.raw,
        pod_ips,
        host_ips: &host_ips,
        allocatable: ctx.settings.allocatable,
        service_env: Some(&service_env),
    };
    let built = env::build(&env_ctx, raw, &ctx.objects)
        .await
        .map_err(|e| e.to_string())?;
    for w in &built.warnings {
        tracing::warn!(component = "pods", pod = %format!("{}/{}", pod.namespace, pod.name), container = %container.name, reason = w.reason, "{}", w.message);
    }
    Ok(built.vars)
}

/// Runs `command` in the running container `id`, for at most `timeout`; a non-zero exit is
/// a failure with the command's output.
pub async fn exec_hook(
    ctx: &PodsContext,
    id: &str,
    command: &[String],
    timeout: Duration,
) -> Result<(), String> {
    let out = ctx
        .runtime
        .exec(id, command, timeout)
        .await
        .map_err(|e| e.to_string())?;
    if out.exit_code == 0 {
        return Ok(());
    }
    Err(format!(
        "command {command:?} exited with {}: {}{}",
        out.exit_code, out.stdout, out.stderr
    ))
}

/// What a container's probes say now.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ProbeResults {
    /// `None`: no probes run for it (it is not running).
    pub ready: Option<bool>,
    pub started: Option<bool>,
    /// The liveness or startup probe gave up on the container: kubelet's message. The
    /// worker kills it, and the restart policy decides what follows.
    pub failed: Option<String>,
}

/// The probes of every running container of the node, by container id.
pub struct Probes {
    prober: probes::Prober<Runtime>,
    running: Mutex<HashMap<String, ContainerProbes>>,
    /// Why a container's liveness or startup probe gave up.
    failed: Mutex<HashMap<String, String>>,
}

impl Probes {
    /// Probes whose updates go to `updates` (the dispatcher's).
    pub fn new(runtime: Arc<Runtime>, updates: mpsc::Sender<ProbeUpdate>) -> Probes {
        Probes {
            prober: probes::Prober::new(runtime, updates),
            running: Mutex::new(HashMap::new()),
            failed: Mutex::new(HashMap::new()),
        }
    }

    /// `container` of `pod` runs as `id` since `started_at`: its probes start.
    pub fn container_started(
        &self,
        pod: &Pod,
        container: &str,
        id: &str,
        ip: Option<IpAddr>,
        started_at: SystemTime,
    ) {
        let Some(raw) = pod.raw_container(container) else {
            return;
        };
        let target = ProbeTarget {
            pod_uid: pod.uid.clone(),
            pod_ip: ip,
            container: container.to_string(),
            container_id: id.to_string(),
        };
        let handle = self.prober.start(target, raw, started_at);
        self.running.lock().insert(id.to_string(), handle);
    }

    /// The container `id` stopped or is gone: its probes end.
    pub fn container_stopped(&self, id: &str) {
        self.running.lock().remove(id);
        self.failed.lock().remove(id);
    }

    /// The container's pod is being stopped: liveness and startup no longer restart it.
    pub fn pod_terminating(&self, id: &str) {
        if let Some(p) = self.running.lock().get(id) {
            p.pod_terminating();
        }
    }

    pub fn results(&self, id: &str) -> ProbeResults {
        let running = self.running.lock();
        let Some(p) = running.get(id) else {
            return ProbeResults::default();
        };
        ProbeResults {
            ready: Some(p.ready()),
            started: Some(p.started()),
            failed: self.failed.lock().get(id).cloned(),
        }
    }

    /// Takes an update from a container's probes (the dispatcher then wakes its pod).
    pub fn on_update(&self, u: &ProbeUpdate) {
        let gave_up = u.changed
            && u.result == ProbeResult::Failure
            && matches!(u.kind, ProbeKind::Liveness | ProbeKind::Startup);
        if gave_up && self.running.lock().contains_key(&u.container_id) {
            let why = format!(
                "Container {} failed {} probe, will be restarted",
                u.container,
                u.kind.title().to_lowercase()
            );
            self.failed.lock().insert(u.container_id.clone(), why);
        }
        if let Some(e) = &u.event {
            tracing::info!(component = "pods", uid = %u.pod_uid, container = %u.container, reason = e.reason, "{}", e.message);
        }
    }
}
