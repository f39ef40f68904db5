//! Logging setup: native journald entries with structured fields when stderr is connected to
//! the journal, plain text on stderr otherwise, with a filter that can be changed at run time
//! (SIGHUP, see `signals`).
//!
//! # Structured fields
//! The journald layer is built with no field prefix, so a tracing field becomes a journal
//! field of the same name, sanitized by tracing-journald: `.` becomes `_`, leading `_` and
//! characters other than ASCII letters, digits and `_` are dropped, letters are upcased.
//! Fields of every enclosing span are repeated on each event. Callers attach:
//!
//! - `COMPONENT`: `component = "raft"` (also `api`, `store`, `systemd`, `server`), on the
//!   span that runs the subsystem, e.g. `tracing::info_span!("raft", component = "raft")`.
//! - `NODE_NAME`: added to every entry by [`init`] (`--name`, default the hostname).
//! - `RAFT_TERM`, `RAFT_ROLE`: `raft_term = term, raft_role = %role` on Raft events (or
//!   declared `Empty` on the raft span and filled with `span.record(..)`).
//!
//! Then `journalctl -u litek8s-server COMPONENT=raft RAFT_ROLE=leader` selects them. Avoid
//! field names that collide with journal fields (`priority`, `message` other than the event
//! message, `syslog_identifier`, anything starting with `_`, which journald reserves).
//! Span names, targets and source locations arrive as `SPAN_NAME`, `TARGET`, `CODE_FILE`,
//! `CODE_LINE`.

use std::os::fd::AsRawFd;
use std::sync::OnceLock;

use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::{reload, EnvFilter, Registry};

/// Errors setting up or changing logging.
#[derive(Debug, thiserror::Error)]
pub enum LogError {
    #[error("invalid log filter {filter:?}: {message}")]
    BadFilter { filter: String, message: String },
    #[error("a global logger is already installed")]
    AlreadyInstalled,
    #[error("log filter can no longer be changed: {0}")]
    Reload(String),
}

/// The handle of the logger [`init`] installed, for code far from `main` (the SIGHUP hook).
static INSTALLED: OnceLock<LogHandle> = OnceLock::new();

/// The handle of the installed logger, if [`init`] installed one.
pub fn installed_handle() -> Option<LogHandle> {
    INSTALLED.get().cloned()
}

/// Where log lines go.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogTarget {
    Journal,
    Stderr,
}

/// Changes the log filter of the installed logger.
#[derive(Clone)]
pub struct LogHandle {
    filter: reload::Handle<EnvFilter, Registry>,
}

impl LogHandle {
    /// Replaces the filter (same syntax as `RUST_LOG`, e.g. `info,litek8s::raft=debug`).
    pub fn set_filter(&self, filter: &str) -> Result<(), LogError> {
        let parsed = parse_filter(filter)?;
        self.filter
            .reload(parsed)
            .map_err(|e| LogError::Reload(e.to_string()))
    }
}

fn parse_filter(filter: &str) -> Result<EnvFilter, LogError> {
    EnvFilter::builder()
        .parse(filter)
        .map_err(|e| LogError::BadFilter {
            filter: filter.to_owned(),
            message: e.to_string(),
        })
}

/// Whether stderr is the journal's stream for this service: systemd sets `JOURNAL_STREAM`
/// to `DEV:INODE` of the stream socket, and a child whose stderr was redirected elsewhere
/// inherits the variable, so the numbers must match stderr itself.
pub fn stderr_is_journal() -> bool {
    let Ok(value) = std::env::var("JOURNAL_STREAM") else {
        return false;
    };
    match nix::sys::stat::fstat(std::io::stderr().as_raw_fd()) {
        Ok(st) => journal_stream_matches(&value, st.st_dev, st.st_ino),
        Err(_) => false,
    }
}

/// Compares a `JOURNAL_STREAM` value with a file's device and inode numbers.
pub fn journal_stream_matches(value: &str, dev: u64, ino: u64) -> bool {
    let Some((d, i)) = value.split_once(':') else {
        return false;
    };
    d.trim().parse::<u64>().ok() == Some(dev) && i.trim().parse::<u64>().ok() == Some(ino)
}

/// Installs the global logger with `filter` (the caller picks it from `--log-level`,
/// `RUST_LOG` or `LITEK8S_LOG`) and returns the handle that changes it later.
///
/// Journald is used when stderr is the journal and the journal socket answers; otherwise
/// plain text on stderr (falling back is logged once, at warn). `constant_fields` (e.g.
/// `NODE_NAME`) go into every journal entry; stderr lines leave them out.
pub fn init(
    filter: &str,
    syslog_identifier: &str,
    constant_fields: &[(&str, String)],
) -> Result<LogHandle, LogError> {
    let (filter_layer, handle) = reload::Layer::new(parse_filter(filter)?);
    let mut fallback_reason = None;
    let journald = if stderr_is_journal() {
        match tracing_journald::layer() {
            Ok(layer) => Some(
                layer
                    .with_field_prefix(None)
                    .with_syslog_identifier(syslog_identifier.to_owned())
                    .with_custom_fields(
                        constant_fields
                            .iter()
                            .map(|(name, value)| (*name, value.as_bytes())),
                    ),
            ),
            Err(err) => {
                fallback_reason = Some(err.to_string());
                None
            }
        }
    } else {
        None
    };
    let target = if journald.is_some() {
        LogTarget::Journal
    } else {
        LogTarget::Stderr
    };
    let fmt = (target == LogTarget::Stderr)
        .then(|| tracing_subscriber::fmt::layer().with_writer(std::io::stderr));
    tracing_subscriber::registry()
        .with(filter_layer)
        .with(journald)
        .with(fmt)
        .try_init()
        .map_err(|_| LogError::AlreadyInstalled)?;
    if let Some(reason) = fallback_reason {
        tracing::warn!(
            component = "systemd",
            "journal socket unusable ({reason}); logging to stderr"
        );
    }
    let handle = LogHandle { filter: handle };
    let _ = INSTALLED.set(handle.clone());
    Ok(handle)
}

#[cfg(test)]
pub(crate) mod tests_support {
    use super::*;

    /// A handle over a test's own reload layer (tests must not install the global logger).
    pub(crate) fn handle(filter: reload::Handle<EnvFilter, Registry>) -> LogHandle {
        LogHandle { filter }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::MetadataExt;

    #[test]
    fn journal_stream_must_match_dev_and_inode() {
        let file = tempfile::NamedTempFile::new().unwrap();
        let meta = file.as_file().metadata().unwrap();
        let value = format!("{}:{}", meta.dev(), meta.ino());
        assert!(journal_stream_matches(&value, meta.dev(), meta.ino()));
        assert!(!journal_stream_matches(&value, meta.dev(), meta.ino() + 1));
        assert!(!journal_stream_matches(&value, meta.dev() + 1, meta.ino()));
        assert!(!journal_stream_matches("garbage", meta.dev(), meta.ino()));
        assert!(!journal_stream_matches("", 0, 0));
    }

    #[test]
    fn bad_filters_are_rejected_with_the_text() {
        let err = parse_filter("info,litek8s=loud").unwrap_err();
        assert!(err.to_string().contains("litek8s=loud"), "{err}");
        assert!(parse_filter("info,litek8s::raft=debug").is_ok());
    }

    /// A reload handle built like `init` builds it changes what is enabled.
    #[test]
    fn reload_handle_changes_the_level() {
        let (layer, handle) = reload::Layer::new(parse_filter("warn").unwrap());
        let subscriber = tracing_subscriber::registry().with(layer);
        let log = LogHandle { filter: handle };
        tracing::subscriber::with_default(subscriber, || {
            assert!(!tracing::enabled!(tracing::Level::INFO));
            log.set_filter("debug").unwrap();
            tracing::callsite::rebuild_interest_cache();
            assert!(tracing::enabled!(tracing::Level::DEBUG));
            assert!(log.set_filter("nonsense=verbose").is_err());
            assert!(tracing::enabled!(tracing::Level::DEBUG));
        });
    }
}
