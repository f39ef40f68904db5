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

    #[tokio::test]
    async fn watchdog_keeps_pinging_while_the_loop_beats() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("notify.sock");
        let sock = UnixDatagram::bind(&path).unwrap();
        sock.set_read_timeout(Some(Duration::from_secs(10)))
            .unwrap();
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
        let received = tokio::task::spawn_blocking(move || {
            let mut buf = [0u8; 64];
            (0..5)
                .map(|_| {
                    let n = sock.recv(&mut buf).unwrap();
                    String::from_utf8(buf[..n].to_vec()).unwrap()
                })
                .collect::<Vec<_>>()
        })
        .await
        .unwrap();
        assert_eq!(received, vec!["WATCHDOG=1\n"; 5]);
        core.abort();
        let _ = stop_tx.send(());
        dog.await.unwrap();
    }
}
