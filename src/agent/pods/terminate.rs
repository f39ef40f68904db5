//! Stopping a pod and removing what is left of it (the worker's Terminating and Terminated
//! states):
//!
//! - every live container at once: its `preStop` hook (`exec`, `httpGet`, `sleep`) within
//!   the grace period, then SIGTERM, what is left of the grace period (at least 2 s, as
//!   kubelet gives), SIGKILL; then the pod's last status (a terminal phase);
//! - the sandbox torn down (its IP released), root filesystems and volumes released;
//! - for a deleted pod, the final `DELETE` with `gracePeriodSeconds: 0` and the pod's uid
//!   as precondition (a pod made since under the same name is not touched);
//! - once the pod is gone from the API: its containers, directory and logs removed. The
//!   directory is removed only when nothing is mounted below it any more.

use std::net::IpAddr;
use std::path::Path;
use std::time::{Duration, Instant};

use http::{Method, StatusCode};
use serde_json::{json, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::context::PodsContext;
use super::plug;
use super::pod::Pod;
use super::worker::{Finish, Worker};
use crate::agent::runtime::{ContainerState, ContainerStatus};

/// The least time a container gets between SIGTERM and SIGKILL (kubelet's).
const MIN_GRACE: Duration = Duration::from_secs(2);

impl Worker {
    /// Stops every container of the pod within `grace`, then writes the last status.
    pub(super) async fn terminate(&mut self, grace: Duration) {
        let live: Vec<ContainerStatus> = self
            .instances()
            .into_iter()
            .filter(|s| matches!(s.state, ContainerState::Running | ContainerState::Created))
            .collect();
        let ip = self.pod_ip().unwrap_or(self.ctx.settings.node_ip);
        for s in &live {
            self.ctx.probes.pod_terminating(&s.id);
        }
        let (ctx, pod) = (&self.ctx, &self.pod);
        futures::future::join_all(live.iter().map(|s| stop_container(ctx, pod, s, grace, ip)))
            .await;
        for s in &live {
            self.ctx.probes.container_stopped(&s.id);
            self.probed.remove(&s.id);
        }
        self.waiting.clear();
        self.report(true).await;
    }

    /// Releases what the stopped pod held: sandbox (and its IP), root filesystems, volumes.
    pub(super) async fn release(&mut self) {
        let pod = self.pod.pod_ref();
        if let Err(e) = self.ctx.sandboxes.teardown(&pod).await {
            tracing::warn!(component = "pods", pod = %self.name(), "tearing down the sandbox: {e}");
        }
        self.sandbox = None;
        let rootfs_dir = self.ctx.sandboxes.pod_dir(&pod.uid).join("rootfs");
        for dir in subdirectories(&rootfs_dir) {
            if let Err(e) = self.ctx.images.release_rootfs(&dir).await {
                tracing::warn!(component = "pods", pod = %self.name(), "releasing {}: {e}", dir.display());
            }
        }
        let ctx = self.ctx.clone();
        if let Err(e) = plug::cleanup_volumes(&ctx, &pod.uid, &mut self.volumes) {
            tracing::warn!(component = "pods", pod = %self.name(), "releasing the volumes: {e}");
        }
    }

    /// What a terminated pod waits for (worker module doc).
    pub(super) async fn finish(&mut self) -> Finish {
        if self.in_api && self.pod.deleting {
            if let Err(e) = self.delete_from_api().await {
                tracing::warn!(component = "pods", pod = %self.name(), "deleting the pod: {e}");
                return Finish::Wait(Some(self.ctx.settings.retry));
            }
            self.remove_all().await;
            return Finish::Done;
        }
        if !self.in_api {
            self.remove_all().await;
            return Finish::Done;
        }
        Finish::Wait(None)
    }

    /// The final DELETE (kubelet's status manager sends it once the pod is stopped).
    async fn delete_from_api(&self) -> Result<(), String> {
        let path = format!(
            "/api/v1/namespaces/{}/pods/{}",
            self.pod.namespace, self.pod.name
        );
        let body = json!({
            "apiVersion": "v1",
            "kind": "DeleteOptions",
            "gracePeriodSeconds": 0,
            "preconditions": {"uid": self.pod.uid},
        });
        let answer = self
            .ctx
            .api
            .send(Method::DELETE, &path, Some(&body), None)
            .await
            .map_err(|e| e.to_string())?;
        match answer.status {
            // Gone, or another pod of that name now (the precondition refused it).
            StatusCode::OK
            | StatusCode::ACCEPTED
            | StatusCode::NOT_FOUND
            | StatusCode::CONFLICT => {
                tracing::info!(component = "pods", pod = %self.name(), uid = %self.pod.uid, "deleted from the API");
                Ok(())
            }
            other => Err(format!(
                "{other}: {}",
                String::from_utf8_lossy(&answer.body).trim()
            )),
        }
    }

    /// Removes every trace of the pod on the node.
    async fn remove_all(&mut self) {
        let ctx = self.ctx.clone();
        for s in self.instances() {
            ctx.probes.container_stopped(&s.id);
            if matches!(s.state, ContainerState::Running | ContainerState::Created) {
                // Not expected after Terminating; never leave one behind.
                let _ = ctx.runtime.stop(&s.id, MIN_GRACE).await;
            }
            if let Err(e) = ctx.runtime.remove(&s.id).await {
                tracing::warn!(component = "pods", pod = %self.name(), container = %s.name, "removing: {e}");
            }
        }
        // Safe to repeat: a sandbox whose teardown failed before gets another one.
        self.release().await;
        if let Err(e) = ctx.runtime.remove_pod_logs(&self.pod.pod_ref()) {
            tracing::warn!(component = "pods", pod = %self.name(), "removing the logs: {e}");
        }
        let dir = ctx.sandboxes.pod_dir(&self.pod.uid);
        let mounts = mounts_under(&dir);
        if mounts.is_empty() {
            if let Err(e) = crate::storage::fsutil::remove_dir_if_present(&dir) {
                tracing::warn!(component = "pods", pod = %self.name(), "removing {}: {e}", dir.display());
            }
        } else {
            tracing::warn!(component = "pods", pod = %self.name(), "{} keeps mounts ({}): left in place", dir.display(), mounts.join(", "));
        }
        ctx.objects.remove_pod(&self.pod.uid);
        tracing::info!(component = "pods", pod = %self.name(), uid = %self.pod.uid, "removed from the node");
    }
}

/// Stops one container: `preStop`, SIGTERM, the rest of `grace`, SIGKILL.
async fn stop_container(
    ctx: &PodsContext,
    pod: &Pod,
    s: &ContainerStatus,
    grace: Duration,
    ip: IpAddr,
) {
    let started = Instant::now();
    if s.state == ContainerState::Running {
        let hook = pod
            .container(&s.name)
            .and_then(|c| c.lifecycle.as_ref())
            .and_then(|l| l.pre_stop.clone());
        if let Some(hook) = hook {
            match tokio::time::timeout(grace, pre_stop(ctx, pod, &s.id, &s.name, &hook, ip, grace))
                .await
            {
                Ok(Ok(())) => {}
                Ok(Err(e)) => {
                    tracing::info!(component = "pods", pod = %pod.name, container = %s.name, "preStop hook failed: {e}")
                }
                Err(_) => {
                    tracing::info!(component = "pods", pod = %pod.name, container = %s.name, "preStop hook did not finish within {grace:?}")
                }
            }
        }
    }
    let left = grace.saturating_sub(started.elapsed()).max(MIN_GRACE);
    match ctx.runtime.stop(&s.id, left).await {
        Ok(end) => {
            tracing::info!(component = "pods", pod = %pod.name, container = %s.name, exit_code = ?end.exit_code, "stopped")
        }
        Err(e) => {
            tracing::warn!(component = "pods", pod = %pod.name, container = %s.name, "stopping: {e}")
        }
    }
}

/// Runs a `preStop` handler.
async fn pre_stop(
    ctx: &PodsContext,
    pod: &Pod,
    id: &str,
    container: &str,
    hook: &Value,
    ip: IpAddr,
    grace: Duration,
) -> Result<(), String> {
    if let Some(command) = hook["exec"]["command"].as_array() {
        let command: Vec<String> = command
            .iter()
            .filter_map(|c| c.as_str().map(str::to_string))
            .collect();
        return plug::exec_hook(ctx, id, &command, grace).await;
    }
    if let Some(seconds) = hook["sleep"]["seconds"].as_u64() {
        tokio::time::sleep(Duration::from_secs(seconds).min(grace)).await;
        return Ok(());
    }
    let get = &hook["httpGet"];
    if get.is_object() {
        if get["scheme"]
            .as_str()
            .is_some_and(|s| s.eq_ignore_ascii_case("HTTPS"))
        {
            return Err("HTTPS preStop hooks are not supported by this agent yet".into());
        }
        let port = hook_port(pod, container, &get["port"])?;
        let host = match get["host"].as_str().filter(|h| !h.is_empty()) {
            Some(h) => h.to_string(),
            None => ip.to_string(),
        };
        let path = get["path"].as_str().unwrap_or("/");
        return http_get(&host, port, path, &get["httpHeaders"]).await;
    }
    Err(format!("unknown preStop handler: {hook}"))
}

/// A hook's `port`: a number, or the name of one of the container's ports.
fn hook_port(pod: &Pod, container: &str, port: &Value) -> Result<u16, String> {
    if let Some(n) = port.as_u64() {
        return u16::try_from(n).map_err(|_| format!("port {n} is out of range"));
    }
    let name = port.as_str().unwrap_or_default();
    if let Ok(n) = name.parse::<u16>() {
        return Ok(n);
    }
    pod.raw_container(container)
        .and_then(|c| c["ports"].as_array())
        .and_then(|ports| ports.iter().find(|p| p["name"] == name))
        .and_then(|p| p["containerPort"].as_u64())
        .and_then(|n| u16::try_from(n).ok())
        .ok_or_else(|| format!("no port named {name:?}"))
}

/// One HTTP/1.1 GET; a 2xx or 3xx answer is success (kubelet's rule for handlers).
async fn http_get(host: &str, port: u16, path: &str, headers: &Value) -> Result<(), String> {
    let addr = match host.parse::<IpAddr>() {
        Ok(IpAddr::V6(v6)) => format!("[{v6}]:{port}"),
        _ => format!("{host}:{port}"),
    };
    let mut stream = tokio::net::TcpStream::connect(&addr)
        .await
        .map_err(|e| format!("{addr}: {e}"))?;
    let mut request = format!(
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\nUser-Agent: litek8s-agent\r\nConnection: close\r\n"
    );
    for h in headers.as_array().into_iter().flatten() {
        let (Some(name), Some(value)) = (h["name"].as_str(), h["value"].as_str()) else {
            continue;
        };
        if !name.contains(['\r', '\n', ':']) && !value.contains(['\r', '\n']) {
            request.push_str(&format!("{name}: {value}\r\n"));
        }
    }
    request.push_str("\r\n");
    stream
        .write_all(request.as_bytes())
        .await
        .map_err(|e| e.to_string())?;
    let mut head = [0u8; 64];
    let n = stream.read(&mut head).await.map_err(|e| e.to_string())?;
    let line = String::from_utf8_lossy(&head[..n]);
    let code: u16 = line
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .ok_or_else(|| format!("not an HTTP answer: {line:?}"))?;
    if (200..400).contains(&code) {
        Ok(())
    } else {
        Err(format!("HTTP {code}"))
    }
}

fn subdirectories(dir: &Path) -> Vec<std::path::PathBuf> {
    std::fs::read_dir(dir)
        .map(|entries| {
            entries
                .flatten()
                .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
                .map(|e| e.path())
                .collect()
        })
        .unwrap_or_default()
}

/// Mount points at or below `dir` (from `/proc/self/mountinfo`).
pub(super) fn mounts_under(dir: &Path) -> Vec<String> {
    let Ok(info) = std::fs::read_to_string("/proc/self/mountinfo") else {
        return Vec::new();
    };
    let prefix = dir.to_string_lossy().into_owned();
    info.lines()
        .filter_map(|l| l.split(' ').nth(4))
        .map(unescape_mount_path)
        .filter(|m| *m == prefix || m.starts_with(&format!("{prefix}/")))
        .collect()
}

/// mountinfo escapes space, tab, newline and backslash as `\NNN` (octal).
fn unescape_mount_path(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'\\' && i + 3 < bytes.len() {
            let digits = std::str::from_utf8(&bytes[i + 1..i + 4]).ok();
            if let Some(v) = digits.and_then(|d| u8::from_str_radix(d, 8).ok()) {
                out.push(v);
                i += 4;
                continue;
            }
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn mount_paths_are_unescaped() {
        assert_eq!(unescape_mount_path("/a\\040b"), "/a b");
        assert_eq!(unescape_mount_path("/plain"), "/plain");
        assert_eq!(unescape_mount_path("/end\\"), "/end\\");
    }

    #[test]
    fn the_root_is_a_mount_under_itself_only() {
        assert!(!mounts_under(Path::new("/")).is_empty());
        assert!(mounts_under(Path::new("/nonexistent-litek8s-dir")).is_empty());
    }

    #[test]
    fn hook_ports_by_number_and_name() {
        let pod = Pod::parse(Arc::new(json!({
            "metadata": {"uid": "u", "namespace": "d", "name": "p"},
            "spec": {"containers": [{"name": "c", "ports": [{"name": "http", "containerPort": 8080}]}]}
        })))
        .unwrap();
        assert_eq!(hook_port(&pod, "c", &json!(80)), Ok(80));
        assert_eq!(hook_port(&pod, "c", &json!("81")), Ok(81));
        assert_eq!(hook_port(&pod, "c", &json!("http")), Ok(8080));
        assert!(hook_port(&pod, "c", &json!("nope")).is_err());
    }
}
