//! The audit log: a record of who asked the API server what, and what it answered, in
//! kube-apiserver's format, for security reviewers (docs/guarantees.md, Audit log).
//!
//! - `policy`: the `--audit-policy-file` (audit.k8s.io/v1 `Policy`) and its rule matching.
//! - `event`: the audit.k8s.io/v1 `Event` written as one JSON line per stage.
//! - `request`: one request's tracker (stages, copied bodies, what the router notes).
//! - `sink`: the bounded queue, the writer thread and the file's rotation.
//!
//! Requests are audited where clients reach this server: the transport (`server::dispatch`)
//! starts a [`Tracker`] once a caller is authenticated. A write a follower forwards to the
//! leader is audited by the follower only — the client talked to it, its peer address is the
//! client's, and one request gives one set of events; the leader knows the request came with
//! the cluster secret and records nothing, but the annotations its authorization and admission
//! make go back to the follower's event (`request::Carried`). The control plane's own
//! requests (the in-process client of the controllers and the scheduler) do not cross the
//! transport and are not recorded. Each server writes its own log.

pub mod event;
pub mod policy;
pub mod request;
pub mod sink;

use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use http::Request;

use crate::auth::attributes::RequestInfo;
use crate::auth::UserInfo;
pub use policy::{Policy, PolicyError};
pub use request::{note_decision, note_impersonation, TeeBody, Tracker};
pub use sink::LogSettings;

/// Why the audit log cannot start.
#[derive(Debug, thiserror::Error)]
pub enum AuditError {
    // Fields are not named `source`: the message already includes the cause.
    #[error("invalid audit policy file {}: {reason}", path.display())]
    Policy { path: PathBuf, reason: PolicyError },
    #[error("cannot open the audit log {}: {error}", path.display())]
    Open {
        path: PathBuf,
        error: std::io::Error,
    },
}

/// The `--audit-*` settings.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct AuditSettings {
    /// `--audit-log-path` and its rotation (`None`: no log backend).
    pub log: Option<LogSettings>,
    /// `--audit-policy-file`.
    pub policy_file: Option<PathBuf>,
}

/// The server's audit log: policy and sink.
#[derive(Debug)]
pub struct Auditor {
    policy: Policy,
    sink: sink::Sink,
}

/// Reads the policy file, if any, and checks it.
pub fn load_policy(path: &Path) -> Result<Policy, AuditError> {
    Policy::load(path).map_err(|reason| AuditError::Policy {
        path: path.to_path_buf(),
        reason,
    })
}

impl Auditor {
    /// The auditor the settings ask for: `None` when nothing is to be recorded. An invalid
    /// policy file fails start-up, with or without a log path.
    pub fn start(settings: &AuditSettings) -> Result<Option<Arc<Auditor>>, AuditError> {
        let policy = settings
            .policy_file
            .as_deref()
            .map(load_policy)
            .transpose()?;
        let Some(log) = &settings.log else {
            return Ok(None);
        };
        let Some(policy) = policy else {
            // kube-apiserver's rule: without a policy no event is recorded.
            tracing::warn!(
                component = "audit",
                "--audit-log-path without --audit-policy-file: no audit events will be recorded"
            );
            return Ok(None);
        };
        let sink = sink::Sink::open(log).map_err(|error| AuditError::Open {
            path: log.path.clone(),
            error,
        })?;
        tracing::info!(component = "audit", path = %log.path.display(), rules = policy.rules.len(), "audit log open");
        Ok(Some(Arc::new(Auditor { policy, sink })))
    }

    /// Starts auditing a request of `user` (as authenticated) from `peer`: `None` when the
    /// policy records nothing of it.
    pub fn begin<B>(
        &self,
        user: &UserInfo,
        req: &Request<B>,
        peer: Option<IpAddr>,
    ) -> Option<Arc<Tracker>> {
        let info = RequestInfo::from_request(req.method(), req.uri().path(), req.uri().query());
        let verdict = self.policy.evaluate(user, &info);
        if verdict.level == event::Level::None {
            return None;
        }
        Some(Tracker::start(
            verdict,
            self.sink.clone(),
            &info,
            user,
            req,
            peer,
        ))
    }

    /// Events dropped because the writer was behind.
    pub fn dropped(&self) -> u64 {
        self.sink.dropped()
    }
}
