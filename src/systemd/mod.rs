//! systemd integration: sd_notify readiness and status, socket activation, journald logging.
//!
//! - [`notify`]: the sd_notify [`notify::Notifier`] and the watchdog interval.
//! - [`readiness`]: the [`readiness::Readiness`] state machine that decides `STATUS=`,
//!   `READY=1`, `EXTEND_TIMEOUT_USEC=` and `STOPPING=1`.
//! - [`watchdog`]: `WATCHDOG=1` only while the watched loop makes progress.
//! - [`activation`]: listeners passed by systemd, found by `LISTEN_FDNAMES` name.
//! - [`journal`]: journald or stderr logging with structured fields and a reloadable filter.
//! - [`signals`]: the SIGHUP reload protocol.

pub(crate) mod activation;
pub(crate) mod journal;
pub(crate) mod notify;
pub(crate) mod readiness;
pub(crate) mod signals;
pub(crate) mod watchdog;
