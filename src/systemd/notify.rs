//! sd_notify messages to the service manager: a [`Notifier`] that sends `STATUS=`, `READY=1`,
//! `STOPPING=1`, `RELOADING=1`, `EXTEND_TIMEOUT_USEC=` and `WATCHDOG=1` datagrams, and the
//! watchdog interval systemd asked for.
//!
//! The message lines are formatted by the `sd-notify` crate ([`NotifyState`]); the socket is
//! resolved once, when the notifier is built, so a test can point a notifier at its own
//! datagram socket without touching the process environment (which parallel tests share).
//! Without `NOTIFY_SOCKET` (not started by systemd, or `Type=simple`) every call is a no-op.

use std::io;
use std::os::unix::net::UnixDatagram;
use std::path::PathBuf;
use std::time::Duration;

pub use sd_notify::NotifyState;

/// Where notifications go.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Target {
    /// A socket path in the file system.
    Path(PathBuf),
    /// A Linux abstract socket (`NOTIFY_SOCKET=@name`), stored without the `@`.
    Abstract(Vec<u8>),
}

/// Sends sd_notify messages; cheap to clone, safe to use from any thread (`NotifyAccess=main`
/// accepts messages from every thread of the main process).
#[derive(Debug, Clone, Default)]
pub struct Notifier {
    target: Option<Target>,
}

impl Notifier {
    /// The notifier systemd asked for through `NOTIFY_SOCKET`, or a no-op one.
    ///
    /// The variable is left in place; the server starts no children, and an agent that does
    /// must clear it for them (k3s and rke2 unset it for the same reason).
    pub fn from_env() -> Self {
        match std::env::var_os("NOTIFY_SOCKET") {
            Some(value) => Self::from_socket_value(value.as_encoded_bytes()),
            None => Self::disabled(),
        }
    }

    /// A notifier that sends nothing.
    pub fn disabled() -> Self {
        Self { target: None }
    }

    /// A notifier sending to the socket at `path` (tests bind their own datagram socket).
    pub fn with_socket(path: impl Into<PathBuf>) -> Self {
        Self {
            target: Some(Target::Path(path.into())),
        }
    }

    /// Parses a `NOTIFY_SOCKET` value: `/path` or `@abstract`; anything else disables.
    fn from_socket_value(value: &[u8]) -> Self {
        let target = match value.first() {
            Some(b'/') => {
                use std::os::unix::ffi::OsStrExt;
                Some(Target::Path(std::ffi::OsStr::from_bytes(value).into()))
            }
            Some(b'@') if value.len() > 1 => Some(Target::Abstract(value[1..].to_vec())),
            // vsock addresses (systemd ≥ 254) and junk: nothing we can use.
            _ => None,
        };
        Self { target }
    }

    /// Whether messages go anywhere.
    pub fn is_enabled(&self) -> bool {
        self.target.is_some()
    }

    /// Sends one datagram holding all `states`, one per line (as `sd_notify(3)` does).
    pub fn send(&self, states: &[NotifyState<'_>]) -> io::Result<()> {
        let Some(target) = &self.target else {
            return Ok(());
        };
        let mut msg = String::new();
        for state in states {
            // A newline inside STATUS= would start a new assignment: flatten it.
            let line = state.to_string().replace('\n', " ");
            msg.push_str(&line);
            msg.push('\n');
        }
        let sock = UnixDatagram::unbound()?;
        let sent = match target {
            Target::Path(path) => sock.send_to(msg.as_bytes(), path)?,
            Target::Abstract(name) => {
                use std::os::linux::net::SocketAddrExt;
                let addr = std::os::unix::net::SocketAddr::from_abstract_name(name)?;
                sock.send_to_addr(msg.as_bytes(), &addr)?
            }
        };
        if sent != msg.len() {
            return Err(io::Error::new(
                io::ErrorKind::WriteZero,
                "short sd_notify datagram",
            ));
        }
        Ok(())
    }

    /// Sends and logs a failure instead of returning it: a lost notification must not stop
    /// the server (systemd's timeouts handle the consequences).
    fn send_logged(&self, states: &[NotifyState<'_>]) {
        if let Err(err) = self.send(states) {
            tracing::warn!(component = "systemd", error = %err, "sd_notify failed");
        }
    }

    /// `STATUS=text`: the line `systemctl status` shows.
    pub fn status(&self, text: &str) {
        self.send_logged(&[NotifyState::Status(text)]);
    }

    /// `READY=1` with a status line in the same datagram, so the two never disagree.
    pub fn ready(&self, status: &str) {
        self.send_logged(&[NotifyState::Ready, NotifyState::Status(status)]);
    }

    /// `STOPPING=1`.
    pub fn stopping(&self, status: &str) {
        self.send_logged(&[NotifyState::Stopping, NotifyState::Status(status)]);
    }

    /// `RELOADING=1` with `MONOTONIC_USEC=` (required by `Type=notify-reload`, harmless before).
    pub fn reloading(&self) {
        match NotifyState::monotonic_usec_now() {
            Ok(now) => self.send_logged(&[NotifyState::Reloading, now]),
            Err(_) => self.send_logged(&[NotifyState::Reloading]),
        }
    }

    /// `READY=1` after a reload (a plain re-send; the start-up READY is guarded by `Readiness`).
    pub fn reloaded(&self, status: &str) {
        self.send_logged(&[NotifyState::Ready, NotifyState::Status(status)]);
    }

    /// `EXTEND_TIMEOUT_USEC=`: asks for `duration` more from now before the start (or stop)
    /// timeout fires. Must be renewed before it runs out.
    pub fn extend_timeout(&self, duration: Duration) {
        let usec = u32::try_from(duration.as_micros()).unwrap_or(u32::MAX);
        self.send_logged(&[NotifyState::ExtendTimeoutUsec(usec)]);
    }

    /// `WATCHDOG=1`.
    pub fn watchdog(&self) {
        self.send_logged(&[NotifyState::Watchdog]);
    }
}

/// How often to send `WATCHDOG=1`: half of `WATCHDOG_USEC` when systemd set it for this
/// process (`WATCHDOG_PID` absent or ours), as `sd_watchdog_enabled(3)` recommends.
pub fn watchdog_interval() -> Option<Duration> {
    let usec = std::env::var("WATCHDOG_USEC").ok();
    let pid = std::env::var("WATCHDOG_PID").ok();
    watchdog_interval_from(usec.as_deref(), pid.as_deref(), std::process::id())
}

/// [`watchdog_interval`] on explicit values, for tests.
pub fn watchdog_interval_from(
    usec: Option<&str>,
    pid: Option<&str>,
    own_pid: u32,
) -> Option<Duration> {
    let usec: u64 = usec?.trim().parse().ok()?;
    if usec == 0 {
        return None;
    }
    if let Some(pid) = pid {
        if pid.trim().parse::<u32>().ok()? != own_pid {
            return None;
        }
    }
    Some(Duration::from_micros(usec / 2))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bound() -> (tempfile::TempDir, UnixDatagram, Notifier) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("notify.sock");
        let sock = UnixDatagram::bind(&path).unwrap();
        sock.set_read_timeout(Some(Duration::from_secs(10)))
            .unwrap();
        (dir, sock, Notifier::with_socket(path))
    }

    fn recv(sock: &UnixDatagram) -> String {
        let mut buf = [0u8; 4096];
        let n = sock.recv(&mut buf).unwrap();
        String::from_utf8(buf[..n].to_vec()).unwrap()
    }

    #[test]
    fn messages_arrive_with_one_line_per_state() {
        let (_dir, sock, n) = bound();
        n.status("replaying log\n41000/120000");
        assert_eq!(recv(&sock), "STATUS=replaying log 41000/120000\n");
        n.ready("single server, ready");
        assert_eq!(recv(&sock), "READY=1\nSTATUS=single server, ready\n");
        n.stopping("stopping");
        assert_eq!(recv(&sock), "STOPPING=1\nSTATUS=stopping\n");
        n.extend_timeout(Duration::from_secs(30));
        assert_eq!(recv(&sock), "EXTEND_TIMEOUT_USEC=30000000\n");
        n.reloading();
        let msg = recv(&sock);
        assert!(msg.starts_with("RELOADING=1\nMONOTONIC_USEC="), "{msg}");
        for _ in 0..3 {
            n.watchdog();
            assert_eq!(recv(&sock), "WATCHDOG=1\n");
        }
    }

    #[test]
    fn abstract_socket_values_are_understood() {
        let name = format!("litek8s-test-{}", std::process::id());
        use std::os::linux::net::SocketAddrExt;
        let addr = std::os::unix::net::SocketAddr::from_abstract_name(name.as_bytes()).unwrap();
        let sock = UnixDatagram::bind_addr(&addr).unwrap();
        sock.set_read_timeout(Some(Duration::from_secs(10)))
            .unwrap();
        let n = Notifier::from_socket_value(format!("@{name}").as_bytes());
        n.watchdog();
        assert_eq!(recv(&sock), "WATCHDOG=1\n");
    }

    #[test]
    fn disabled_notifier_is_silent_and_ok() {
        let n = Notifier::from_socket_value(b"vsock:2:1234");
        assert!(!n.is_enabled());
        assert!(n.send(&[NotifyState::Ready]).is_ok());
        assert!(!Notifier::disabled().is_enabled());
    }

    #[test]
    fn missing_socket_is_an_error_not_a_panic() {
        let dir = tempfile::tempdir().unwrap();
        let n = Notifier::with_socket(dir.path().join("absent.sock"));
        assert!(n.send(&[NotifyState::Ready]).is_err());
        n.ready("still fine"); // logged, not returned
    }

    #[test]
    fn watchdog_interval_is_half_and_checks_the_pid() {
        assert_eq!(
            watchdog_interval_from(Some("30000000"), None, 7),
            Some(Duration::from_secs(15))
        );
        assert_eq!(
            watchdog_interval_from(Some("30000000"), Some("7"), 7),
            Some(Duration::from_secs(15))
        );
        assert_eq!(watchdog_interval_from(Some("30000000"), Some("8"), 7), None);
        assert_eq!(watchdog_interval_from(Some("0"), None, 7), None);
        assert_eq!(watchdog_interval_from(Some("x"), None, 7), None);
        assert_eq!(watchdog_interval_from(None, Some("7"), 7), None);
    }
}
