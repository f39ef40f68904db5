//! The levels a namespace asks for: the `pod-security.kubernetes.io/<mode>` and
//! `<mode>-version` labels, read over the configured defaults.

use serde_json::Value;

use super::config::Defaults;

pub const LABEL_PREFIX: &str = "pod-security.kubernetes.io/";

/// A Pod Security Standards level, least to most restrictive.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Level {
    Privileged,
    Baseline,
    Restricted,
}

impl Level {
    pub fn parse(text: &str) -> Option<Level> {
        match text {
            "privileged" => Some(Level::Privileged),
            "baseline" => Some(Level::Baseline),
            "restricted" => Some(Level::Restricted),
            _ => None,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Level::Privileged => "privileged",
            Level::Baseline => "baseline",
            Level::Restricted => "restricted",
        }
    }
}

/// The three modes a level applies in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Violations refuse a pod.
    Enforce,
    /// Violations are recorded in the request's audit event.
    Audit,
    /// Violations come back as `Warning` headers.
    Warn,
}

impl Mode {
    pub const ALL: [Mode; 3] = [Mode::Enforce, Mode::Audit, Mode::Warn];

    pub fn name(self) -> &'static str {
        match self {
            Mode::Enforce => "enforce",
            Mode::Audit => "audit",
            Mode::Warn => "warn",
        }
    }
}

/// A level with the version messages name it by (the checks are always the current
/// standards').
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Policy {
    pub level: Level,
    pub version: String,
}

impl Default for Policy {
    fn default() -> Self {
        Policy {
            level: Level::Privileged,
            version: "latest".to_string(),
        }
    }
}

impl Policy {
    /// The policy of `mode` for a namespace with `labels`: each label where it is set (and
    /// valid), the configured default where not.
    pub fn of(
        labels: Option<&serde_json::Map<String, Value>>,
        mode: Mode,
        defaults: &Defaults,
    ) -> Policy {
        let default = defaults.of(mode);
        let label = |suffix: &str| {
            labels
                .and_then(|l| l.get(&format!("{LABEL_PREFIX}{}{suffix}", mode.name())))
                .and_then(Value::as_str)
        };
        let level = label("").and_then(Level::parse).unwrap_or(default.level);
        let version = label("-version")
            .filter(|v| valid_version(v))
            .unwrap_or(&default.version)
            .to_string();
        Policy { level, version }
    }

    /// `restricted:latest`, as messages show it.
    pub fn shown(&self) -> String {
        format!("{}:{}", self.level.name(), self.version)
    }
}

/// `latest` or `v1.<minor>`, the versions kube-apiserver accepts.
pub fn valid_version(text: &str) -> bool {
    text == "latest"
        || text
            .strip_prefix("v1.")
            .is_some_and(|minor| !minor.is_empty() && minor.bytes().all(|b| b.is_ascii_digit()))
}
