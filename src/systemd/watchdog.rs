//! `WATCHDOG=1` tied to progress of the loop that must stay alive.
//!
//! The Raft/state loop bumps a [`Heartbeat`] (one relaxed atomic add per iteration, and at
//! least once per tick of its own timer); [`run_watchdog`] sends `WATCHDOG=1` every interval
//! only if the heartbeat moved since the previous interval. A hung core therefore stops the
//! pings and systemd (`WatchdogSec=`) kills and restarts the service, while a merely idle
//! core keeps pinging because its own timer still bumps the heartbeat.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use super::notify::Notifier;

/// A progress counter shared between the monitored loop and the watchdog task.
#[derive(Debug, Clone, Default)]
pub struct Heartbeat(Arc<AtomicU64>);

impl Heartbeat {
    pub fn new() -> Self {
        Self::default()
    }

    /// Marks progress. Call from the loop being watched.
    pub fn beat(&self) {
        self.0.fetch_add(1, Ordering::Relaxed);
    }

    fn value(&self) -> u64 {
        self.0.load(Ordering::Relaxed)
    }
}

/// Decides, once per interval, whether to ping: only if the heartbeat advanced.
#[derive(Debug)]
pub struct WatchdogGate {
    heartbeat: Heartbeat,
    last_seen: u64,
}

impl WatchdogGate {
    pub fn new(heartbeat: Heartbeat) -> Self {
        let last_seen = heartbeat.value();
        Self {
            heartbeat,
            last_seen,
        }
    }

    /// True when the monitored loop made progress since the last call.
    pub fn should_ping(&mut self) -> bool {
        let now = self.heartbeat.value();
        let moved = now != self.last_seen;
        self.last_seen = now;
        moved
    }
}

/// Sends `WATCHDOG=1` every `interval` while `heartbeat` advances, until `stop` resolves.
/// Use [`super::notify::watchdog_interval`] for `interval`; without one, don't spawn this.
pub async fn run_watchdog(
    notifier: Notifier,
    interval: Duration,
    heartbeat: Heartbeat,
    stop: impl std::future::Future<Output = ()>,
) {
    let mut gate = WatchdogGate::new(heartbeat);
    let mut ticker = tokio::time::interval(interval);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    ticker.tick().await; // the first tick is immediate: let the loop beat first
    tokio::pin!(stop);
    loop {
        tokio::select! {
            _ = &mut stop => return,
            _ = ticker.tick() => {
                if gate.should_ping() {
                    notifier.watchdog();
                } else {
                    tracing::warn!(component = "systemd", "watched loop made no progress for {interval:?}; withholding WATCHDOG=1");
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::net::UnixDatagram;

    #[test]
    fn gate_pings_only_after_progress() {
        let hb = Heartbeat::new();
        let mut gate = WatchdogGate::new(hb.clone());
        assert!(!gate.should_ping());
        hb.beat();
        assert!(gate.should_ping());
        assert!(!gate.should_ping());
        hb.beat();
        hb.beat();
        assert!(gate.should_ping());
    }

    /// Time is paused: the loop beats every 2 ms and the watchdog looks every 20 ms of
    /// virtual time, so every look finds a beat however slow the machine is. (The socket is
    /// read without blocking: a blocking read on another thread would keep paused time from
    /// advancing.)
    #[tokio::test(start_paused = true)]
    async fn watchdog_keeps_pinging_while_the_loop_beats() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("notify.sock");
        let sock = UnixDatagram::bind(&path).unwrap();
        sock.set_nonblocking(true).unwrap();
        let hb = Heartbeat::new();
        let beating = hb.clone();
        let core = tokio::spawn(async move {
            loop {
                beating.beat();
                tokio::time::sleep(Duration::from_millis(2)).await;
            }
        });
        let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
        let dog = tokio::spawn(run_watchdog(
            Notifier::with_socket(&path),
            Duration::from_millis(20),
            hb,
            async move {
                let _ = stop_rx.await;
            },
        ));
        // Looks at 20, 40, 60, 80 and 100 ms.
        tokio::time::sleep(Duration::from_millis(110)).await;
        assert_eq!(drain(&sock), vec!["WATCHDOG=1\n"; 5]);
        core.abort();
        let _ = stop_tx.send(());
        dog.await.unwrap();
    }

    /// Datagrams waiting on `sock` (non-blocking).
    fn drain(sock: &UnixDatagram) -> Vec<String> {
        let mut buf = [0u8; 64];
        let mut got = Vec::new();
        while let Ok(n) = sock.recv(&mut buf) {
            got.push(String::from_utf8_lossy(&buf[..n]).into_owned());
        }
        got
    }

    /// A loop that stops beating gets no more `WATCHDOG=1` (so systemd restarts the process),
    /// and one that beats again gets them again. Time is paused: the watchdog looks at 20, 40,
    /// … ms of virtual time and the test reads between the looks.
    #[tokio::test(start_paused = true)]
    async fn watchdog_withholds_pings_while_the_loop_makes_no_progress() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("notify.sock");
        let sock = UnixDatagram::bind(&path).unwrap();
        sock.set_nonblocking(true).unwrap();
        let hb = Heartbeat::new();
        let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
        let dog = tokio::spawn(run_watchdog(
            Notifier::with_socket(&path),
            Duration::from_millis(20),
            hb.clone(),
            async move {
                let _ = stop_rx.await;
            },
        ));
        // The watchdog starts (and takes its first reading) before the first beat.
        tokio::time::sleep(Duration::from_millis(5)).await;
        hb.beat();
        tokio::time::sleep(Duration::from_millis(25)).await;
        assert_eq!(
            drain(&sock),
            vec!["WATCHDOG=1\n"],
            "a beat before the look at 20 ms"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert_eq!(
            drain(&sock),
            Vec::<String>::new(),
            "five looks (40–120 ms) without a beat"
        );
        hb.beat();
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert_eq!(
            drain(&sock),
            vec!["WATCHDOG=1\n"],
            "a beat again before 140 ms"
        );
        let _ = stop_tx.send(());
        dog.await.unwrap();
    }
}
