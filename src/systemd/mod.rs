//! systemd integration: sd_notify readiness and status, socket activation, journald logging.
