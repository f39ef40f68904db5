//! One sync pass of a pod (kubelet's `SyncPod`), in order:
//!
//! 1. the status, if it changed (a new pod shows `ContainerCreating` at once);
//! 2. the sandbox (its namespaces and network; `hostNetwork` pods use the host's) and the
//!    volumes; while either fails, the containers wait in `ContainerCreating` with why;
//! 3. init containers, one at a time in order, each until it exits 0 (a failed one runs
//!    again with the crash back-off, unless `restartPolicy: Never`: then the pod fails);
//!    a pod with an app container on the node is initialized and never runs them again;
//! 4. app containers: started when missing, restarted when they exited and the restart
//!    policy says so, through kubelet's CrashLoopBackOff; killed and restarted when their
//!    spec's image changed or their liveness probe gave up;
//! 5. the status again.
//!
//! Starting a container: its image (`imagePullPolicy`, pull secrets, ImagePullBackOff
//! after ErrImagePull), its environment and mounts, a fresh root filesystem, the runtime
//! description (`containers`), then create and start. Any step that fails leaves the
//! container waiting with the step's reason and message; older exited instances of the
//! container are removed (the latest stays for `lastState` and `logs --previous`).
//!
//! A pass returns when the pod should next be looked at without an event (a back-off's
//! end, a retry, the resync period) and the pod's phase.

use std::net::IpAddr;
use std::path::PathBuf;
use std::time::{Duration, Instant, SystemTime};

use base64::Engine as _;
use serde_json::json;

use super::containers::{self, annotations};
use super::plug;
use super::pod::{ContainerSpec, Pod, RestartPolicy};
use super::status::{self, Phase, Waiting};
use super::worker::Worker;
use crate::agent::api::PatchType;
use crate::agent::images::{ImageRecord, Keyring, PullPolicy, Reference};
use crate::agent::runtime::{logs, ContainerState, ContainerStatus};
use crate::agent::sandbox::{DnsConfig, DnsPolicy, HostAlias, PodDns, PortMapping, SandboxSpec};
use crate::api::meta::format_time;

/// The soonest a pod must be looked at again.
pub(super) struct Next(Duration);

impl Next {
    fn new(resync: Duration) -> Next {
        Next(resync)
    }

    fn within(&mut self, d: Duration) {
        self.0 = self.0.min(d);
    }
}

/// Why a container could not be started, and when to try again (`None`: at the next event
/// or resync).
type StartFailure = (Waiting, Option<Duration>);

/// A wall-clock time as an `Instant` (for back-offs counted from a container's exit).
fn instant_of(t: SystemTime) -> Instant {
    let now = Instant::now();
    let ago = SystemTime::now().duration_since(t).unwrap_or_default();
    now.checked_sub(ago).unwrap_or(now)
}

/// A duration as Go prints it (`10s`, `1m20s`, `5m0s`), as kubelet's messages show it.
pub fn go_duration(d: Duration) -> String {
    let secs = d.as_secs();
    match (secs / 3600, (secs % 3600) / 60, secs % 60) {
        (0, 0, s) => format!("{s}s"),
        (0, m, s) => format!("{m}m{s}s"),
        (h, m, s) => format!("{h}h{m}m{s}s"),
    }
}

pub(super) fn now_text() -> String {
    format_time(chrono::Utc::now())
}

fn latest<'a>(instances: &'a [ContainerStatus], name: &str) -> Option<&'a ContainerStatus> {
    instances.iter().rev().find(|s| s.name == name)
}

/// What the sandbox of `pod` is made of.
pub(super) fn sandbox_spec(pod: &Pod) -> SandboxSpec {
    let spec = &pod.spec;
    let mut s = SandboxSpec::new(pod.pod_ref());
    if let Some(h) = spec.hostname.as_deref().filter(|h| !h.is_empty()) {
        s.hostname = h.chars().take(63).collect();
    }
    s.subdomain = spec.subdomain.clone().filter(|d| !d.is_empty());
    s.host_network = spec.host_network;
    s.host_ipc = spec.host_ipc;
    s.host_pid = spec.host_pid;
    s.host_aliases = spec
        .host_aliases
        .iter()
        .map(|a| HostAlias {
            ip: a.ip.clone(),
            hostnames: a.hostnames.clone(),
        })
        .collect();
    s.port_mappings = spec
        .containers
        .iter()
        .flat_map(|c| &c.ports)
        .filter_map(|p| {
            let host_port = u16::try_from(p.host_port?).ok().filter(|p| *p > 0)?;
            Some(PortMapping {
                host_port,
                container_port: u16::try_from(p.container_port).ok()?,
                protocol: p.protocol.as_deref().unwrap_or("TCP").to_ascii_lowercase(),
                host_ip: p.host_ip.clone().filter(|ip| !ip.is_empty()),
            })
        })
        .collect();
    s.dns = PodDns {
        policy: DnsPolicy::parse(spec.dns_policy.as_deref()),
        config: spec.dns_config.as_ref().map(|cfg| DnsConfig {
            nameservers: cfg.nameservers.clone(),
            searches: cfg.searches.clone(),
            options: cfg
                .options
                .iter()
                .map(|o| match &o.value {
                    Some(v) => format!("{}:{v}", o.name),
                    None => o.name.clone(),
                })
                .collect(),
        }),
    };
    s
}

/// A container name that can name a directory (the API checks names; this is the guard).
fn safe_name(name: &str) -> bool {
    !name.is_empty() && name != "." && name != ".." && !name.contains(['/', '\0'])
}

impl Worker {
    /// `<pods>/<uid>/rootfs/<container>`: where a container's root filesystem is made.
    pub(super) fn rootfs_dir(&self, name: &str) -> PathBuf {
        self.ctx
            .sandboxes
            .pod_dir(&self.pod.uid)
            .join("rootfs")
            .join(name)
    }

    /// The pod's own IP (none with host networking).
    pub(super) fn pod_ip(&self) -> Option<IpAddr> {
        self.sandbox.as_ref().and_then(|s| s.ip())
    }

    /// One pass (module doc): when to look again, and the pod's phase.
    pub(super) async fn sync_pass(&mut self) -> (Duration, Phase) {
        let mut next = Next::new(self.ctx.settings.resync);
        if self.start_time.is_none() {
            self.start_time = Some(now_text());
        }
        self.waiting.retain(|_, w| w.reason != "ContainerCreating");
        self.report(false).await;

        if let Err(message) = self.ensure_sandbox().await {
            self.hold(&message);
            next.within(self.ctx.settings.retry);
            return (next.0, self.report(false).await);
        }
        let (ctx, pod) = (self.ctx.clone(), self.pod.clone());
        if let Err(message) = plug::prepare_volumes(&ctx, &pod, &mut self.volumes).await {
            self.hold(&message);
            next.within(self.ctx.settings.retry);
            return (next.0, self.report(false).await);
        }
        let instances = self.instances();
        // Containers that ended on their own: their probes end too.
        for s in &instances {
            if matches!(s.state, ContainerState::Exited | ContainerState::Unknown)
                && self.probed.remove(&s.id)
            {
                self.ctx.probes.container_stopped(&s.id);
            }
        }
        if self.init_containers(&instances, &mut next).await {
            self.app_containers(&instances, &mut next).await;
        }
        let phase = self.report(false).await;
        (next.0, phase)
    }

    /// Every container not running waits in `ContainerCreating` (`PodInitializing` with
    /// init containers) with `message`.
    fn hold(&mut self, message: &str) {
        let running: Vec<String> = self
            .instances()
            .into_iter()
            .filter(|s| s.state == ContainerState::Running)
            .map(|s| s.name)
            .collect();
        let names: Vec<String> = self
            .pod
            .all_containers()
            .map(|c| c.name.clone())
            .filter(|n| !running.contains(n))
            .collect();
        for name in names {
            self.waiting
                .insert(name, Waiting::new("ContainerCreating", message));
        }
    }

    async fn ensure_sandbox(&mut self) -> Result<(), String> {
        if self.sandbox.is_some() {
            return Ok(());
        }
        let spec = sandbox_spec(&self.pod);
        let _permit = self.ctx.starts.acquire().await;
        match self.ctx.sandboxes.create(&spec).await {
            Ok(sandbox) => {
                self.sandbox = Some(sandbox);
                self.sandbox_error = None;
                Ok(())
            }
            Err(e) => {
                let message = format!("{}: {e}", e.reason());
                if self.sandbox_error.as_deref() != Some(&message) {
                    tracing::warn!(component = "pods", pod = %self.name(), "the pod's sandbox: {e}");
                }
                self.sandbox_error = Some(message.clone());
                Err(message)
            }
        }
    }

    /// Runs the init containers; `true` once the pod is initialized.
    async fn init_containers(&mut self, instances: &[ContainerStatus], next: &mut Next) -> bool {
        if self.pod.spec.init_containers.is_empty() {
            return true;
        }
        // An app container on the node: initialized before, never again.
        if instances
            .iter()
            .any(|s| !self.pod.is_init_container(&s.name))
        {
            return true;
        }
        for spec in self.pod.spec.init_containers.clone() {
            match latest(instances, &spec.name) {
                None => {
                    self.start(&spec, None, next).await;
                    return false;
                }
                Some(s) if matches!(s.state, ContainerState::Running | ContainerState::Created) => {
                    self.check_live(&spec, s, next).await;
                    return false;
                }
                Some(s) if s.state == ContainerState::Exited && s.exit_code == Some(0) => {
                    self.waiting.remove(&spec.name);
                }
                Some(s) => {
                    if self.pod.spec.restart != RestartPolicy::Never {
                        let s = s.clone();
                        self.start(&spec, Some(&s), next).await;
                    }
                    return false;
                }
            }
        }
        true
    }

    async fn app_containers(&mut self, instances: &[ContainerStatus], next: &mut Next) {
        for spec in self.pod.spec.containers.clone() {
            match latest(instances, &spec.name) {
                None => self.start(&spec, None, next).await,
                Some(s) if matches!(s.state, ContainerState::Running | ContainerState::Created) => {
                    self.check_live(&spec, s, next).await
                }
                Some(s) if status::will_restart(&self.pod, s) => {
                    let s = s.clone();
                    self.start(&spec, Some(&s), next).await
                }
                Some(_) => {
                    self.waiting.remove(&spec.name);
                }
            }
        }
    }

    /// A container that runs (or was created and not started): started if need be, told to
    /// the prober, killed when its image changed in the spec or its probes gave up (the
    /// next pass restarts it as the restart policy says).
    async fn check_live(&mut self, spec: &ContainerSpec, s: &ContainerStatus, next: &mut Next) {
        let changed = s
            .annotations
            .get(annotations::SPEC_IMAGE)
            .is_some_and(|img| *img != spec.image);
        let why = if changed {
            Some(format!(
                "Container {} definition changed, will be restarted",
                spec.name
            ))
        } else {
            self.ctx.probes.results(&s.id).failed
        };
        if let Some(why) = why {
            tracing::info!(component = "pods", pod = %self.name(), container = %spec.name, "{why}");
            let grace = Duration::from_secs(self.pod.grace_seconds() as u64);
            if let Err(e) = self.ctx.runtime.stop(&s.id, grace).await {
                tracing::warn!(component = "pods", pod = %self.name(), container = %spec.name, "stopping: {e}");
            }
            self.ctx.probes.container_stopped(&s.id);
            self.probed.remove(&s.id);
            next.within(Duration::ZERO);
            return;
        }
        if s.state == ContainerState::Created {
            // Created but never started (the agent stopped in between).
            if let Err(e) = self.ctx.runtime.start(&s.id).await {
                self.waiting
                    .insert(spec.name.clone(), Waiting::new(e.reason(), e.to_string()));
                next.within(Duration::from_secs(1));
                return;
            }
        }
        self.waiting.remove(&spec.name);
        if self.probed.insert(s.id.clone()) {
            let ip = self.pod_ip();
            let started_at = s.started_at.unwrap_or_else(SystemTime::now);
            self.ctx
                .probes
                .container_started(&self.pod, &spec.name, &s.id, ip, started_at);
        }
    }

    /// Starts `spec`, the next run after `previous` when there is one (through the crash
    /// back-off).
    async fn start(
        &mut self,
        spec: &ContainerSpec,
        previous: Option<&ContainerStatus>,
        next: &mut Next,
    ) {
        let name = spec.name.clone();
        if let Some(prev) = previous {
            let now = Instant::now();
            let since = instant_of(prev.finished_at.unwrap_or_else(SystemTime::now));
            if let Some(left) = self.crash_backoff.remaining_since(&name, since, now) {
                let delay = self.crash_backoff.delay(&name).unwrap_or_default();
                self.waiting.insert(
                    name.clone(),
                    Waiting::new(
                        "CrashLoopBackOff",
                        format!(
                            "back-off {} restarting failed container={name} pod={}",
                            go_duration(delay),
                            self.pod.display()
                        ),
                    ),
                );
                next.within(left);
                return;
            }
            self.crash_backoff.next(&name, since);
        }
        let restart_count = previous.map_or(0, |p| p.restart_count + 1);
        match self.start_container(spec, restart_count, previous).await {
            Ok(()) => {
                self.waiting.remove(&name);
            }
            Err((waiting, retry)) => {
                if self.waiting.get(&name) != Some(&waiting) {
                    tracing::info!(component = "pods", pod = %self.name(), container = %name, reason = %waiting.reason, "{}", waiting.message);
                }
                self.waiting.insert(name, waiting);
                if let Some(retry) = retry {
                    next.within(retry);
                }
            }
        }
    }

    async fn start_container(
        &mut self,
        spec: &ContainerSpec,
        restart_count: u32,
        previous: Option<&ContainerStatus>,
    ) -> Result<(), StartFailure> {
        let retry = Some(self.ctx.settings.retry);
        let config_error = |m: String| (Waiting::new("CreateContainerConfigError", m), retry);
        if !safe_name(&spec.name) {
            return Err(config_error(format!(
                "container name {:?} cannot name a directory",
                spec.name
            )));
        }
        let image = self.ensure_image(spec).await?;
        let pod = self.pod.clone();
        let pod_ips: Vec<IpAddr> = match &self.sandbox {
            Some(s) if !s.ips.is_empty() => s.ips.clone(),
            _ => vec![self.ctx.settings.node_ip],
        };
        let env = plug::resolve_env(&self.ctx, &pod, spec, &pod_ips)
            .await
            .map_err(config_error)?;
        let mounts =
            plug::volume_mounts(self.volumes.as_ref(), &pod, spec, &env).map_err(config_error)?;
        let Some(sandbox) = self.sandbox.as_ref().map(|s| s.pod_sandbox()) else {
            return Err((Waiting::new("ContainerCreating", "no sandbox yet"), retry));
        };

        let ctx = self.ctx.clone();
        let _permit = ctx.starts.acquire().await;
        self.remove_older(&spec.name, previous).await;
        let dir = self.rootfs_dir(&spec.name);
        if let Err(e) = ctx.images.release_rootfs(&dir).await {
            tracing::warn!(component = "pods", pod = %self.name(), container = %spec.name, "releasing the last root filesystem: {e}");
        }
        let rootfs = ctx
            .images
            .prepare_rootfs(&image, &dir)
            .await
            .map_err(|e| (Waiting::new("CreateContainerError", e.to_string()), retry))?;
        let cfg = containers::build(containers::Inputs {
            pod: &pod,
            container: spec,
            image: &image,
            rootfs: &rootfs.path,
            env,
            mounts,
            restart_count,
            memory_capacity: ctx.settings.memory_capacity,
        })
        .map_err(|e| (Waiting::new(e.reason, e.message), retry))?;
        match ctx.runtime.run(&cfg, &sandbox).await {
            Ok(id) => {
                tracing::info!(component = "pods", pod = %self.name(), container = %spec.name, id = %id, restart_count, "started");
                self.probed.insert(id.clone());
                let ip = self.pod_ip();
                ctx.probes
                    .container_started(&pod, &spec.name, &id, ip, SystemTime::now());
                Ok(())
            }
            Err(e) => Err((
                Waiting::new(e.reason(), e.to_string()),
                Some(Duration::from_secs(1)),
            )),
        }
    }

    /// Removes the exited runs of container `name` older than `keep`.
    async fn remove_older(&mut self, name: &str, keep: Option<&ContainerStatus>) {
        let Some(keep) = keep else { return };
        for s in self.instances() {
            if s.name == name
                && s.restart_count < keep.restart_count
                && matches!(s.state, ContainerState::Exited | ContainerState::Unknown)
            {
                self.ctx.probes.container_stopped(&s.id);
                self.messages.remove(&s.id);
                self.messages_read.remove(&s.id);
                if let Err(e) = self.ctx.runtime.remove(&s.id).await {
                    tracing::warn!(component = "pods", pod = %self.name(), container = %name, "removing an old run: {e}");
                }
            }
        }
    }

    /// The image of `spec`, present or pulled as its policy says, within the pull back-off.
    async fn ensure_image(&mut self, spec: &ContainerSpec) -> Result<ImageRecord, StartFailure> {
        let ctx = self.ctx.clone();
        let image = spec.image.clone();
        let policy = match spec
            .image_pull_policy
            .as_deref()
            .and_then(PullPolicy::parse)
        {
            Some(p) => p,
            None => match Reference::parse(&image) {
                Ok(r) => PullPolicy::default_for(&r),
                Err(_) => PullPolicy::IfNotPresent,
            },
        };
        let present = policy != PullPolicy::Always && ctx.images.get(&image).is_some();
        if !present {
            if let Some(left) = self
                .pull_backoff
                .remaining_since_update(&image, Instant::now())
            {
                let last = self.pull_errors.get(&image).cloned().unwrap_or_default();
                return Err((
                    Waiting::new(
                        "ImagePullBackOff",
                        format!("Back-off pulling image {image:?}: ErrImagePull: {last}"),
                    ),
                    Some(left),
                ));
            }
        }
        let keyring = self.keyring().await;
        match ctx.images.ensure(&image, policy, &keyring).await {
            Ok(record) => {
                self.pull_backoff.reset(&image);
                self.pull_errors.remove(&image);
                Ok(record)
            }
            Err(e) => {
                let reason = e.reason();
                let message = e.to_string();
                if reason == "ErrImagePull" {
                    self.pull_backoff.next(&image, Instant::now());
                    self.pull_errors.insert(image, message.clone());
                    // The next pass shows ImagePullBackOff and waits for its end.
                    Err((Waiting::new(reason, message), Some(Duration::from_secs(1))))
                } else {
                    Err((Waiting::new(reason, message), Some(self.ctx.settings.retry)))
                }
            }
        }
    }

    /// The credentials of the pod's pull secrets (a secret that cannot be read is left out,
    /// as kubelet leaves it: the pull may still work).
    async fn keyring(&self) -> Keyring {
        let mut keyring = Keyring::default();
        for s in &self.pod.spec.image_pull_secrets {
            let secret = match self.ctx.objects.secret(&self.pod.namespace, &s.name).await {
                Ok(Some(secret)) => secret,
                Ok(None) => {
                    tracing::warn!(component = "pods", pod = %self.name(), "pull secret {:?} not found", s.name);
                    continue;
                }
                Err(e) => {
                    tracing::warn!(component = "pods", pod = %self.name(), "pull secret {:?}: {e}", s.name);
                    continue;
                }
            };
            let decode = |key: &str| {
                secret["data"][key]
                    .as_str()
                    .and_then(|b| base64::engine::general_purpose::STANDARD.decode(b).ok())
            };
            let parsed = if let Some(bytes) = decode(".dockerconfigjson") {
                Keyring::from_docker_config_json(&bytes)
            } else if let Some(bytes) = decode(".dockercfg") {
                Keyring::from_dockercfg(&bytes)
            } else {
                tracing::warn!(component = "pods", pod = %self.name(), "pull secret {:?} has no .dockerconfigjson or .dockercfg", s.name);
                continue;
            };
            match parsed {
                Ok(k) => keyring.extend(k),
                Err(e) => {
                    tracing::warn!(component = "pods", pod = %self.name(), "pull secret {:?}: {e}", s.name)
                }
            }
        }
        keyring
    }

    /// Reads the termination messages of containers that ended since the last look.
    fn read_messages(&mut self, instances: &[ContainerStatus]) {
        for s in instances {
            if !matches!(s.state, ContainerState::Exited) || self.messages_read.contains(&s.id) {
                continue;
            }
            self.messages_read.insert(s.id.clone());
            let mut message = self.ctx.runtime.termination_message(&s.id).ok().flatten();
            let fallback = self
                .pod
                .container(&s.name)
                .is_some_and(|c| c.fallback_to_logs());
            if message.is_none() && fallback && s.exit_code != Some(0) {
                message = logs::tail_message(&s.log_path, 80, 2048);
            }
            if let Some(m) = message {
                self.messages.insert(s.id.clone(), m);
            }
        }
    }

    /// Computes the status and writes it when it differs from the API's; returns the
    /// phase. A finished pod's status in the API is final and never written again.
    pub(super) async fn report(&mut self, terminal: bool) -> Phase {
        let instances = self.instances();
        self.read_messages(&instances);
        let ips: Vec<IpAddr> = self
            .sandbox
            .as_ref()
            .map(|s| s.ips.clone())
            .unwrap_or_default();
        let ctx = self.ctx.clone();
        let probes = move |id: &str| ctx.probes.results(id);
        let now = now_text();
        let runtime = self.ctx.runtime.info().kind.to_string();
        let (phase, status) = status::compute(&status::Inputs {
            pod: &self.pod,
            previous: &self.api_status,
            instances: &instances,
            waiting: &self.waiting,
            messages: &self.messages,
            probes: &probes,
            runtime: &runtime,
            pod_ips: &ips,
            host_ip: self.ctx.settings.node_ip,
            sandbox_ready: self.sandbox.is_some(),
            terminal,
            start_time: self.start_time.as_deref(),
            now: &now,
        });
        self.count(phase);
        let finished = matches!(
            self.api_status["phase"].as_str(),
            Some("Succeeded" | "Failed")
        );
        if finished || !self.in_api || !status::needs_write(&status, &self.api_status) {
            return phase;
        }
        let path = format!(
            "/api/v1/namespaces/{}/pods/{}/status",
            self.pod.namespace, self.pod.name
        );
        // The uid makes the patch fail on another pod that took the name.
        let patch = json!({"metadata": {"uid": self.pod.uid}, "status": status});
        match self.ctx.api.patch(&path, &patch, PatchType::Merge).await {
            Ok(written) => {
                self.api_status = written["status"].clone();
                self.api_status_rv = written["metadata"]["resourceVersion"]
                    .as_str()
                    .and_then(|rv| rv.parse().ok());
            }
            Err(e) => {
                tracing::warn!(component = "pods", pod = %self.name(), "writing the status: {e}")
            }
        }
        phase
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn durations_print_as_go_does() {
        let s = Duration::from_secs;
        assert_eq!(go_duration(s(10)), "10s");
        assert_eq!(go_duration(s(80)), "1m20s");
        assert_eq!(go_duration(s(300)), "5m0s");
        assert_eq!(go_duration(s(3700)), "1h1m40s");
    }

    #[test]
    fn sandbox_specs_follow_the_pod() {
        let pod = Pod::parse(Arc::new(json!({
            "metadata": {"uid": "u", "namespace": "ns", "name": "web-0"},
            "spec": {"hostname": "h", "subdomain": "svc", "hostIPC": true,
                     "hostAliases": [{"ip": "10.1.1.1", "hostnames": ["a"]}],
                     "dnsPolicy": "None",
                     "dnsConfig": {"nameservers": ["1.1.1.1"], "searches": ["x"],
                                   "options": [{"name": "ndots", "value": "2"}, {"name": "edns0"}]},
                     "containers": [{"name": "c", "ports": [
                         {"containerPort": 80, "hostPort": 8080, "protocol": "TCP"},
                         {"containerPort": 53, "protocol": "UDP"}]}]}
        })))
        .unwrap();
        let s = sandbox_spec(&pod);
        assert_eq!(s.hostname, "h");
        assert_eq!(s.subdomain.as_deref(), Some("svc"));
        assert!(s.host_ipc && !s.host_network);
        assert_eq!(s.port_mappings.len(), 1);
        assert_eq!(s.port_mappings[0].host_port, 8080);
        assert_eq!(s.port_mappings[0].protocol, "tcp");
        assert_eq!(s.dns.policy, DnsPolicy::None);
        let dns = s.dns.config.unwrap();
        assert_eq!(dns.options, ["ndots:2", "edns0"]);
        assert_eq!(s.host_aliases[0].hostnames, ["a"]);
    }

    #[test]
    fn names_that_cannot_be_directories() {
        assert!(safe_name("app"));
        for bad in ["", ".", "..", "a/b"] {
            assert!(!safe_name(bad), "{bad}");
        }
    }
}
