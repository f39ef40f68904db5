//! Where the parts of a pod that live in their own modules plug into the pod workers:
//! volumes, environment variables taken from elsewhere, probes and exec hooks. Each is one
//! small call here, so that a worker never needs to know how they work:
//!
//! - [`prepare_volumes`] before any container starts (safe to repeat), [`volume_mounts`] per
//!   container, [`cleanup_volumes`] once the pod is stopped;
//! - [`resolve_env`]: a container's environment in order (image's first, then the spec's);
//! - [`Prober`]: told when containers start and stop, asked what their probes say
//!   (readiness, startup, liveness), and given a [`PodWaker`] to wake a pod when a result
//!   changes;
//! - [`exec_hook`]: a command run in a container (`preStop`/`postStart` `exec`).
//!
//! Until those modules exist here, the calls do what needs nothing more: pods without
//! volumes run, plain `value`s make the environment, no probe results exist (a container
//! with a readiness probe is never ready), exec hooks are skipped with a log line.

use std::net::IpAddr;
use std::sync::Arc;
use std::time::Duration;

use super::context::PodsContext;
use super::pod::{ContainerSpec, Pod};
use super::PodWaker;
use crate::agent::runtime::VolumeMount;

/// Makes the pod's volumes on the node. `Err`: why the pod cannot start yet (it waits in
/// `ContainerCreating` with that message and is tried again).
pub async fn prepare_volumes(_ctx: &PodsContext, pod: &Pod) -> Result<(), String> {
    match pod.spec.volumes.first() {
        None => Ok(()),
        Some(v) => Err(format!(
            "volume {:?}: this agent cannot mount volumes yet",
            v["name"].as_str().unwrap_or_default()
        )),
    }
}

/// The mounts of `container`, its volumes prepared by [`prepare_volumes`].
pub fn volume_mounts(
    _ctx: &PodsContext,
    _pod: &Pod,
    container: &ContainerSpec,
) -> Result<Vec<VolumeMount>, String> {
    match container.volume_mounts.first() {
        None => Ok(Vec::new()),
        Some(m) => Err(format!(
            "volume mount {:?}: this agent cannot mount volumes yet",
            m["name"].as_str().unwrap_or_default()
        )),
    }
}

/// Undoes [`prepare_volumes`] for the pod `uid` (its containers are stopped).
pub async fn cleanup_volumes(_ctx: &PodsContext, _uid: &str) -> Result<(), String> {
    Ok(())
}

/// The environment `container` gets from the spec (`env`, `envFrom`), in order. `Err`:
/// `CreateContainerConfigError` with that message.
pub async fn resolve_env(
    _ctx: &PodsContext,
    _pod: &Pod,
    container: &ContainerSpec,
) -> Result<Vec<(String, String)>, String> {
    if !container.env_from.is_empty() {
        return Err("envFrom is not supported by this agent yet".into());
    }
    container
        .env
        .iter()
        .map(|e| match (&e.value, &e.value_from) {
            (_, Some(_)) => Err(format!(
                "env {:?}: valueFrom is not supported by this agent yet",
                e.name
            )),
            (value, None) => Ok((e.name.clone(), value.clone().unwrap_or_default())),
        })
        .collect()
}

/// Runs `command` in the running container `id`, for at most `timeout`.
pub async fn exec_hook(
    _ctx: &PodsContext,
    id: &str,
    command: &[String],
    _timeout: Duration,
) -> Result<(), String> {
    tracing::info!(container = %id, ?command, "exec hooks are not supported by this agent yet: skipped");
    Ok(())
}

/// What a container's probes say now; `None`: no result yet.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ProbeResults {
    pub ready: Option<bool>,
    pub started: Option<bool>,
    /// The liveness (or startup) probe gave up on the container: why. The worker kills it,
    /// and the restart policy decides what follows.
    pub failed: Option<String>,
}

/// The probes of every container on the node.
pub trait Prober: Send + Sync {
    /// `container` of `pod` started and runs as `id` (the pod's IP, if it has its own).
    fn container_started(&self, pod: &Pod, container: &str, id: &str, ip: Option<IpAddr>);
    /// The container `id` stopped or is gone: its probes end.
    fn container_stopped(&self, id: &str);
    fn results(&self, id: &str) -> ProbeResults;
}

/// No probes run: no results.
#[derive(Debug, Default)]
pub struct NoProber;

impl Prober for NoProber {
    fn container_started(&self, _: &Pod, _: &str, _: &str, _: Option<IpAddr>) {}
    fn container_stopped(&self, _: &str) {}
    fn results(&self, _: &str) -> ProbeResults {
        ProbeResults::default()
    }
}

/// Builds the node's prober, which may wake pods when its results change.
pub fn prober(_waker: PodWaker) -> Arc<dyn Prober> {
    Arc::new(NoProber)
}
