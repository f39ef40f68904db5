//! Container probes: startup, liveness and readiness, with exec, httpGet, tcpSocket and grpc
//! handlers, timed and thresholded as kubelet's prober workers do.
//!
//! # Use
//! The pod worker makes one [`Prober`] (with the runtime for exec probes and the channel
//! its pod workers read) and calls [`Prober::start`] when a container has started, keeping
//! the returned [`ContainerProbes`] with that container: dropping it (the container exited,
//! was killed, or the pod is gone) stops its probes. [`ProbeUpdate`]s arrive on the channel;
//! the handle answers [`ContainerProbes::started`] and [`ContainerProbes::ready`] at any
//! time.
//!
//! # Semantics (kubelet's)
//! - Results start as: startup *unknown*, liveness *success*, readiness *failure*.
//! - The startup probe runs first; liveness and readiness wait until it succeeded
//!   (`started`). Without a startup probe the container counts as started at once.
//! - Each probe runs `initialDelaySeconds` after the container started, then every
//!   `periodSeconds`; one run is bounded by `timeoutSeconds`. A result changes after
//!   `successThreshold` successes or `failureThreshold` failures in a row.
//! - A liveness or startup failure ([`ProbeUpdate::changed`] to `Failure`) means: restart
//!   the container. That probe then stops until a new container is started (kubelet holds
//!   it). Readiness keeps running and only drives the Ready condition.
//! - A run that cannot be made at all (the runtime refused the exec, a named port that does
//!   not exist) is an error: it changes no result (kubelet throws it away) but is reported
//!   as an event.
//! - [`ContainerProbes::pod_terminating`]: liveness and startup stop (a terminating pod is
//!   not restarted), readiness goes on.
//!
//! Every failed or erroring run also carries kubelet's event (`Unhealthy`, `Liveness probe
//! failed: HTTP probe failed with statuscode: 500`) for the pod worker to record.
//!
//! # Files
//! - `spec`: a container's probe from the pod spec ([`ProbeSpec`]).
//! - `worker`: the per-container task, thresholds, the updates.
//! - `exec`, `http`, `tcp`, `grpc`: one run of each handler, with kubelet's messages.

mod exec;
mod grpc;
mod http;
mod spec;
mod tcp;
mod worker;

use std::net::IpAddr;
use std::time::Duration;

pub use exec::ExecRunner;
pub use spec::{Handler, HttpScheme, ProbeSpec};
pub use worker::{ContainerProbes, Prober};

/// Which probe.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ProbeKind {
    Startup,
    Liveness,
    Readiness,
}

impl ProbeKind {
    /// The pod spec's field.
    pub fn field(self) -> &'static str {
        match self {
            ProbeKind::Startup => "startupProbe",
            ProbeKind::Liveness => "livenessProbe",
            ProbeKind::Readiness => "readinessProbe",
        }
    }

    /// As kubelet's events name it.
    pub fn title(self) -> &'static str {
        match self {
            ProbeKind::Startup => "Startup",
            ProbeKind::Liveness => "Liveness",
            ProbeKind::Readiness => "Readiness",
        }
    }
}

/// A probe's current result (thresholds applied).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProbeResult {
    /// Not known yet (a startup probe before its first verdict).
    Unknown,
    Success,
    Failure,
}

/// What one run of a handler gave (kubelet's `probe.Result` with its output).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    Success(String),
    /// Counts as success; kubelet records a `ProbeWarning` event (an HTTP redirect to
    /// another host, not followed).
    Warning(String),
    Failure(String),
    /// The probe could not be run; no result is taken from it.
    Error(String),
}

/// Where a container's probes go.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProbeTarget {
    pub pod_uid: String,
    /// The pod's IP: the default host of httpGet, tcpSocket and grpc probes.
    pub pod_ip: Option<IpAddr>,
    pub container: String,
    /// The runtime's id of this run of the container (exec probes run in it; updates carry
    /// it so that a late one for an earlier container can be told apart).
    pub container_id: String,
}

/// An event for the pod about a probe run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProbeEvent {
    /// `Unhealthy` (failed or errored) or `ProbeWarning`.
    pub reason: &'static str,
    pub message: String,
}

/// Sent by a container's probes when a result changes or a run did not succeed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProbeUpdate {
    pub pod_uid: String,
    pub container: String,
    pub container_id: String,
    pub kind: ProbeKind,
    /// The result after this run.
    pub result: ProbeResult,
    /// The result changed with this run.
    pub changed: bool,
    /// The event this run is worth, if any.
    pub event: Option<ProbeEvent>,
}

/// kubelet's user agent, `kube-probe/<major>.<minor>` of the Kubernetes version served.
pub fn user_agent() -> String {
    let version = crate::api::health::KUBERNETES_VERSION.trim_start_matches('v');
    let mut parts = version.split(['.', '+', '-']);
    let major = parts.next().unwrap_or("1");
    let minor = parts.next().unwrap_or("0");
    format!("kube-probe/{major}.{minor}")
}

/// A duration as Go prints it in kubelet's messages (`1s`, `500ms`, `1m30s`).
pub fn go_duration(d: Duration) -> String {
    let ms = d.as_millis();
    if ms == 0 {
        return "0s".into();
    }
    if ms < 1000 {
        return format!("{ms}ms");
    }
    let secs = d.as_secs();
    let frac = d.subsec_millis();
    let (h, m, s) = (secs / 3600, (secs / 60) % 60, secs % 60);
    let mut out = String::new();
    if h > 0 {
        out.push_str(&format!("{h}h"));
    }
    if h > 0 || m > 0 {
        out.push_str(&format!("{m}m"));
    }
    if frac > 0 {
        let f = format!("{:03}", frac);
        out.push_str(&format!("{s}.{}s", f.trim_end_matches('0')));
    } else {
        out.push_str(&format!("{s}s"));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn user_agent_and_durations() {
        assert_eq!(user_agent(), "kube-probe/1.33");
        assert_eq!(go_duration(Duration::from_secs(1)), "1s");
        assert_eq!(go_duration(Duration::from_millis(500)), "500ms");
        assert_eq!(go_duration(Duration::from_millis(1500)), "1.5s");
        assert_eq!(go_duration(Duration::from_secs(90)), "1m30s");
        assert_eq!(go_duration(Duration::from_secs(3600)), "1h0m0s");
    }
}
