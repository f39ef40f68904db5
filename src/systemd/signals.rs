//! SIGHUP reload (`systemctl reload`, `ExecReload=kill -HUP $MAINPID`): `RELOADING=1`, read
//! the log filter again from the admin's environment file, apply it, `READY=1`.
//!
//! systemd 252 has no `Type=notify-reload`, so the unit sends SIGHUP and the protocol is
//! done by hand. The process environment is fixed at start, so the filter is read from the
//! files the unit loads with `EnvironmentFile=` (`/etc/default/litek8s-server`, or
//! `/etc/sysconfig/litek8s-server` on RPM systems; key `LITEK8S_LOG`): editing one and
//! reloading changes the level without a restart.

use std::path::PathBuf;

use super::journal::{LogError, LogHandle};
use super::readiness::ReadinessReporter;

/// Errors of one reload. The server keeps running with the old settings.
#[derive(Debug, thiserror::Error)]
pub enum ReloadError {
    #[error("cannot read {path}: {source}")]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error(transparent)]
    Log(#[from] LogError),
}

/// Where the reloadable settings come from.
#[derive(Debug, Clone)]
pub struct ReloadSource {
    /// Shell-style `KEY=value` files (`EnvironmentFile=`s), in the unit's order: a later
    /// file overrides an earlier one; missing files are skipped.
    pub env_files: Vec<PathBuf>,
    /// The key holding the log filter.
    pub log_key: String,
    /// Filter used when the file or key is absent.
    pub default_filter: String,
}

impl ReloadSource {
    /// The unit's files, `LITEK8S_LOG`, default `info`.
    pub fn server_default() -> Self {
        Self {
            env_files: vec![
                PathBuf::from("/etc/default/litek8s-server"),
                PathBuf::from("/etc/sysconfig/litek8s-server"),
            ],
            log_key: "LITEK8S_LOG".into(),
            default_filter: "info".into(),
        }
    }

    /// The filter the files ask for now.
    pub fn log_filter(&self) -> Result<String, ReloadError> {
        let mut filter = None;
        for path in &self.env_files {
            match std::fs::read_to_string(path) {
                Ok(text) => {
                    if let Some(v) = env_file_value(&text, &self.log_key) {
                        filter = Some(v);
                    }
                }
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(source) => {
                    return Err(ReloadError::Read {
                        path: path.clone(),
                        source,
                    })
                }
            }
        }
        Ok(filter.unwrap_or_else(|| self.default_filter.clone()))
    }
}

/// The value of `key` in an environment file as systemd reads it for the simple cases:
/// `KEY=value`, `KEY="value"`, `KEY='value'`, `export` not allowed, `#`/`;` comment lines.
/// The last assignment wins.
pub fn env_file_value(text: &str, key: &str) -> Option<String> {
    let mut found = None;
    for line in text.lines() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') || line.starts_with(';') {
            continue;
        }
        let Some((k, v)) = line.split_once('=') else {
            continue;
        };
        if k.trim() != key {
            continue;
        }
        let v = v.trim();
        let unquoted = v
            .strip_prefix('"')
            .and_then(|s| s.strip_suffix('"'))
            .or_else(|| v.strip_prefix('\'').and_then(|s| s.strip_suffix('\'')))
            .unwrap_or(v);
        found = Some(unquoted.to_owned());
    }
    found
}

/// One reload: `RELOADING=1`, new filter, `READY=1` (if the server was ready). Returns the
/// filter now in force. On error the old filter stays and the server still leaves the
/// reloading state, so `systemctl reload` does not hang.
pub fn reload_once(
    reporter: &ReadinessReporter,
    logs: &LogHandle,
    source: &ReloadSource,
) -> Result<String, ReloadError> {
    reporter.reloading();
    let result = source
        .log_filter()
        .and_then(|f| logs.set_filter(&f).map(|()| f).map_err(ReloadError::from));
    reporter.reloaded();
    match &result {
        Ok(filter) => tracing::info!(component = "systemd", "reloaded: log filter {filter:?}"),
        Err(err) => tracing::error!(
            component = "systemd",
            "reload failed, keeping old settings: {err}"
        ),
    }
    result
}

/// Reloads on every SIGHUP until `stop` resolves. Spawn it on the main runtime after the
/// logger is installed. Fails only if the signal handler cannot be installed.
pub async fn reload_on_sighup(
    reporter: std::sync::Arc<ReadinessReporter>,
    logs: LogHandle,
    source: ReloadSource,
    stop: impl std::future::Future<Output = ()>,
) -> std::io::Result<()> {
    use tokio::signal::unix::{signal, SignalKind};
    let mut hup = signal(SignalKind::hangup())?;
    tokio::pin!(stop);
    loop {
        tokio::select! {
            _ = &mut stop => return Ok(()),
            got = hup.recv() => {
                if got.is_none() {
                    return Ok(());
                }
                // Errors are logged inside; the loop keeps serving later reloads.
                let _ = reload_once(&reporter, &logs, &source);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::systemd::notify::Notifier;
    use crate::systemd::readiness::{Readiness, Role};
    use std::os::unix::net::UnixDatagram;
    use tracing_subscriber::{reload, EnvFilter};

    #[test]
    fn env_file_values_follow_systemd_quoting() {
        let text = "# LITEK8S_LOG=trace\nLITEK8S_LOG=info\n; x\nLITEK8S_LOG=\"debug,litek8s::raft=trace\"\nOTHER='x'\n";
        assert_eq!(
            env_file_value(text, "LITEK8S_LOG").as_deref(),
            Some("debug,litek8s::raft=trace")
        );
        assert_eq!(env_file_value(text, "OTHER").as_deref(), Some("x"));
        assert_eq!(env_file_value(text, "MISSING"), None);
    }

    #[test]
    fn reload_sends_reloading_then_ready_and_applies_the_filter() {
        let dir = tempfile::tempdir().unwrap();
        let sock_path = dir.path().join("notify.sock");
        let sock = UnixDatagram::bind(&sock_path).unwrap();
        sock.set_nonblocking(true).unwrap();
        let env_file = dir.path().join("litek8s-server");
        std::fs::write(&env_file, "LITEK8S_LOG=debug\n").unwrap();
        let source = ReloadSource {
            env_files: vec![dir.path().join("absent"), env_file.clone()],
            log_key: "LITEK8S_LOG".into(),
            default_filter: "info".into(),
        };
        let reporter = ReadinessReporter::new(Notifier::with_socket(&sock_path));
        reporter.set(
            Readiness::Ready {
                role: Role::Single,
                term: 0,
                applied: 1,
            },
            "test",
        );
        let (layer, handle) = reload::Layer::new(EnvFilter::new("warn"));
        let logs = super::super::journal::tests_support::handle(handle);
        let subscriber =
            tracing_subscriber::layer::SubscriberExt::with(tracing_subscriber::registry(), layer);
        tracing::subscriber::with_default(subscriber, || {
            assert_eq!(reload_once(&reporter, &logs, &source).unwrap(), "debug");
            tracing::callsite::rebuild_interest_cache();
            assert!(tracing::enabled!(tracing::Level::DEBUG));
            std::fs::write(&env_file, "LITEK8S_LOG=litek8s=loud\n").unwrap();
            assert!(reload_once(&reporter, &logs, &source).is_err());
            assert!(tracing::enabled!(tracing::Level::DEBUG));
        });
        let mut msgs = Vec::new();
        let mut buf = [0u8; 512];
        while let Ok(n) = sock.recv(&mut buf) {
            msgs.push(String::from_utf8(buf[..n].to_vec()).unwrap());
        }
        // starting, READY, then two reloads each RELOADING → READY (even the failed one).
        assert_eq!(msgs.len(), 6, "{msgs:?}");
        assert!(msgs[2].starts_with("RELOADING=1\nMONOTONIC_USEC="));
        assert_eq!(msgs[3], "READY=1\nSTATUS=single server, applied 1, ready\n");
        assert!(msgs[4].starts_with("RELOADING=1\n"));
        assert!(msgs[5].starts_with("READY=1\n"));
    }

    #[test]
    fn missing_file_means_default_filter() {
        let source = ReloadSource {
            env_files: vec![PathBuf::from("/nonexistent/litek8s-server")],
            log_key: "LITEK8S_LOG".into(),
            default_filter: "info".into(),
        };
        assert_eq!(source.log_filter().unwrap(), "info");
        assert_eq!(
            ReloadSource::server_default().env_files[0],
            PathBuf::from("/etc/default/litek8s-server")
        );
    }
}
