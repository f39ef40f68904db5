//! The server's readiness as systemd sees it: a state machine ([`Readiness`]) whose every
//! transition goes through [`ReadinessReporter::set`], which logs `old -> new (reason)` and
//! sends the matching `STATUS=` / `READY=1` / `EXTEND_TIMEOUT_USEC=` / `STOPPING=1` lines.
//!
//! `READY=1` is sent once, on the first entry into [`Readiness::Ready`]: systemd ignores
//! later ones outside a reload, and a server that never reaches Ready (no quorum, replay
//! stuck) never sends it, so `systemctl start` fails at `TimeoutStartSec` instead of lying.
//! Losing readiness later (a partitioned follower) only changes the status line; `/readyz`
//! is what load balancers watch.

use std::fmt;
use std::time::Duration;

use parking_lot::Mutex;

use super::notify::Notifier;

/// How much more start-up time to ask for on each progress report while replaying or
/// installing a snapshot. Progress reports come far more often than this, so the start
/// timeout fires only when progress stops for this long.
pub const PROGRESS_EXTENSION: Duration = Duration::from_secs(30);

/// This server's part in the cluster, for the status line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Role {
    /// Not part of a Raft cluster (single-server mode).
    Single,
    Leader,
    /// Follows the named leader.
    Follower {
        leader: String,
    },
    /// A non-voting member catching up with the named leader.
    Learner {
        leader: String,
    },
}

/// Where the server is in its life, as shown by `systemctl status`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Readiness {
    Starting,
    /// Replaying the local log/WAL: `done` of `total` entries (`total` 0: not known ahead,
    /// `done` is what has been applied so far).
    ReplayingLog {
        done: u64,
        total: u64,
    },
    /// Receiving a snapshot from the leader: `done` of `total` bytes (`total` 0: not known).
    InstallingSnapshot {
        done: u64,
        total: u64,
    },
    /// Asking `leader` (a name or URL) to be added as a learner.
    Joining {
        leader: String,
    },
    /// Up but not (or no longer) ready: no known leader, or behind the commit index.
    Waiting {
        why: String,
    },
    /// Knows a leader and has applied up to the commit index it learned.
    Ready {
        role: Role,
        term: u64,
        applied: u64,
    },
    Stopping,
}

impl Readiness {
    /// Variants compared without their numbers: a change of kind is logged at info, a
    /// progress update at debug.
    fn same_kind(&self, other: &Readiness) -> bool {
        match (self, other) {
            (
                Readiness::Ready {
                    role: a, term: ta, ..
                },
                Readiness::Ready {
                    role: b, term: tb, ..
                },
            ) => a == b && ta == tb,
            _ => std::mem::discriminant(self) == std::mem::discriminant(other),
        }
    }
}

impl fmt::Display for Readiness {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Readiness::Starting => write!(f, "starting"),
            Readiness::ReplayingLog { done, total: 0 } => {
                write!(f, "replaying log, {done} applied")
            }
            Readiness::ReplayingLog { done, total } => write!(f, "replaying log {done}/{total}"),
            Readiness::InstallingSnapshot { done, total: 0 } => {
                write!(f, "installing snapshot, {done} bytes received")
            }
            Readiness::InstallingSnapshot { done, total } => {
                write!(f, "installing snapshot {done}/{total} bytes")
            }
            Readiness::Joining { leader } => write!(f, "joining {leader} as learner"),
            Readiness::Waiting { why } => write!(f, "not ready: {why}"),
            Readiness::Ready {
                role,
                term,
                applied,
            } => match role {
                Role::Single => write!(f, "single server, applied {applied}, ready"),
                Role::Leader => write!(f, "leader, term {term}, applied {applied}, ready"),
                Role::Follower { leader } => {
                    write!(
                        f,
                        "follower of {leader}, term {term}, applied {applied}, ready"
                    )
                }
                Role::Learner { leader } => {
                    write!(
                        f,
                        "learner of {leader}, term {term}, applied {applied}, ready"
                    )
                }
            },
            Readiness::Stopping => write!(f, "stopping"),
        }
    }
}

struct Inner {
    state: Readiness,
    ready_sent: bool,
}

/// Owns the readiness state and reports every change to systemd. Share it behind an `Arc`.
pub struct ReadinessReporter {
    notifier: Notifier,
    inner: Mutex<Inner>,
}

impl ReadinessReporter {
    /// Starts in [`Readiness::Starting`] and says so.
    pub fn new(notifier: Notifier) -> Self {
        let reporter = Self {
            notifier,
            inner: Mutex::new(Inner {
                state: Readiness::Starting,
                ready_sent: false,
            }),
        };
        reporter.notifier.status(&Readiness::Starting.to_string());
        reporter
    }

    /// The notifier, for the watchdog and reload hooks.
    pub fn notifier(&self) -> &Notifier {
        &self.notifier
    }

    #[cfg(test)]
    /// The current state.
    pub fn state(&self) -> Readiness {
        self.inner.lock().state.clone()
    }

    /// Whether `READY=1` has been sent.
    pub fn ready_sent(&self) -> bool {
        self.inner.lock().ready_sent
    }

    /// The one place a transition happens: logs `old -> new (reason)` and notifies systemd.
    /// After `Stopping` nothing else is reported (a late progress update from a draining task
    /// must not overwrite the stop status).
    pub fn set(&self, new: Readiness, reason: &str) {
        let mut inner = self.inner.lock();
        let old = std::mem::replace(&mut inner.state, new.clone());
        if old == Readiness::Stopping {
            inner.state = old;
            return;
        }
        if old.same_kind(&new) {
            tracing::debug!(component = "systemd", "readiness {old} -> {new} ({reason})");
        } else {
            tracing::info!(component = "systemd", "readiness {old} -> {new} ({reason})");
        }
        let status = new.to_string();
        match &new {
            Readiness::Ready { .. } if !inner.ready_sent => {
                inner.ready_sent = true;
                self.notifier.ready(&status);
            }
            Readiness::ReplayingLog { .. } | Readiness::InstallingSnapshot { .. }
                if !inner.ready_sent =>
            {
                // Progress during start-up: push the start timeout out. Sent before the
                // status so systemd never shows a status it is about to time out on.
                self.notifier.extend_timeout(PROGRESS_EXTENSION);
                self.notifier.status(&status);
            }
            Readiness::Stopping => self.notifier.stopping(&status),
            _ => self.notifier.status(&status),
        }
    }

    /// `RELOADING=1`, for the SIGHUP hook.
    pub fn reloading(&self) {
        self.notifier.reloading();
    }

    /// Ends a reload: `READY=1` again if the server had been ready (systemd waits for it to
    /// leave the "reloading" state), otherwise only the current status.
    pub fn reloaded(&self) {
        let inner = self.inner.lock();
        let status = inner.state.to_string();
        if inner.ready_sent && inner.state != Readiness::Stopping {
            self.notifier.reloaded(&status);
        } else {
            self.notifier.status(&status);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::net::UnixDatagram;

    fn reporter() -> (tempfile::TempDir, UnixDatagram, ReadinessReporter) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("notify.sock");
        let sock = UnixDatagram::bind(&path).unwrap();
        sock.set_nonblocking(true).unwrap();
        (
            dir,
            sock,
            ReadinessReporter::new(Notifier::with_socket(path)),
        )
    }

    /// Every datagram received so far, in order.
    fn drain(sock: &UnixDatagram) -> Vec<String> {
        let mut out = Vec::new();
        let mut buf = [0u8; 4096];
        while let Ok(n) = sock.recv(&mut buf) {
            out.push(String::from_utf8(buf[..n].to_vec()).unwrap());
        }
        out
    }

    fn ready(applied: u64) -> Readiness {
        Readiness::Ready {
            role: Role::Follower {
                leader: "lk2".into(),
            },
            term: 7,
            applied,
        }
    }

    #[test]
    fn status_lines_come_before_a_single_ready() {
        let (_d, sock, r) = reporter();
        r.set(
            Readiness::ReplayingLog {
                done: 41000,
                total: 120000,
            },
            "wal open",
        );
        r.set(
            Readiness::Joining {
                leader: "lk1".into(),
            },
            "replayed",
        );
        r.set(ready(123456), "caught up");
        r.set(ready(123999), "applied more");
        r.set(
            Readiness::Waiting {
                why: "no leader".into(),
            },
            "partitioned",
        );
        r.set(ready(124000), "leader back");
        let msgs = drain(&sock);
        assert_eq!(
            msgs,
            vec![
                "STATUS=starting\n",
                "EXTEND_TIMEOUT_USEC=30000000\n",
                "STATUS=replaying log 41000/120000\n",
                "STATUS=joining lk1 as learner\n",
                "READY=1\nSTATUS=follower of lk2, term 7, applied 123456, ready\n",
                "STATUS=follower of lk2, term 7, applied 123999, ready\n",
                "STATUS=not ready: no leader\n",
                "STATUS=follower of lk2, term 7, applied 124000, ready\n",
            ]
        );
        assert_eq!(msgs.iter().filter(|m| m.contains("READY=1")).count(), 1);
    }

    #[test]
    fn a_server_without_quorum_never_sends_ready() {
        let (_d, sock, r) = reporter();
        for i in 0..5 {
            r.set(
                Readiness::Waiting {
                    why: format!("no quorum, attempt {i}"),
                },
                "election",
            );
        }
        r.set(Readiness::Stopping, "SIGTERM");
        let msgs = drain(&sock);
        assert!(msgs.iter().all(|m| !m.contains("READY=1")), "{msgs:?}");
        assert_eq!(msgs.last().unwrap(), "STOPPING=1\nSTATUS=stopping\n");
        assert!(!r.ready_sent());
    }

    #[test]
    fn nothing_is_reported_after_stopping() {
        let (_d, sock, r) = reporter();
        r.set(ready(1), "up");
        r.set(Readiness::Stopping, "SIGTERM");
        r.set(ready(2), "late update");
        r.reloaded();
        let msgs = drain(&sock);
        assert_eq!(msgs.last().unwrap(), "STATUS=stopping\n");
        assert_eq!(
            msgs.iter().filter(|m| m.starts_with("STOPPING=1")).count(),
            1
        );
        assert_eq!(r.state(), Readiness::Stopping);
    }

    #[test]
    fn reload_resends_ready_only_when_ready() {
        let (_d, sock, r) = reporter();
        r.reloading();
        r.reloaded();
        r.set(
            Readiness::Ready {
                role: Role::Single,
                term: 0,
                applied: 5,
            },
            "listening",
        );
        r.reloading();
        r.reloaded();
        let msgs = drain(&sock);
        assert!(
            msgs[1].starts_with("RELOADING=1\nMONOTONIC_USEC="),
            "{msgs:?}"
        );
        assert_eq!(msgs[2], "STATUS=starting\n");
        assert_eq!(msgs[3], "READY=1\nSTATUS=single server, applied 5, ready\n");
        assert!(msgs[4].starts_with("RELOADING=1\n"));
        assert_eq!(msgs[5], "READY=1\nSTATUS=single server, applied 5, ready\n");
    }

    #[test]
    fn status_texts_read_well() {
        let leader = Readiness::Ready {
            role: Role::Leader,
            term: 3,
            applied: 9,
        };
        assert_eq!(leader.to_string(), "leader, term 3, applied 9, ready");
        let learner = Readiness::Ready {
            role: Role::Learner {
                leader: "lk1".into(),
            },
            term: 3,
            applied: 9,
        };
        assert_eq!(
            learner.to_string(),
            "learner of lk1, term 3, applied 9, ready"
        );
        let snap = Readiness::InstallingSnapshot {
            done: 10,
            total: 20,
        };
        assert_eq!(snap.to_string(), "installing snapshot 10/20 bytes");
        let wal = Readiness::ReplayingLog {
            done: 41000,
            total: 0,
        };
        assert_eq!(wal.to_string(), "replaying log, 41000 applied");
        let receiving = Readiness::InstallingSnapshot {
            done: 1048576,
            total: 0,
        };
        assert_eq!(
            receiving.to_string(),
            "installing snapshot, 1048576 bytes received"
        );
    }
}
