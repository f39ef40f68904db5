//! Raft timers (docs/guarantees.md, Timers): heartbeat 300 ms, leader lease 3 s, a random 1.5–3 s
//! election delay after it, so a dead leader is replaced in about 5 s. `LITEK8S_RAFT_HEARTBEAT_MS`
//! scales all of them together (100 gives about 2 s failovers).

use std::time::Duration;

/// The environment variable that scales the timers.
pub const HEARTBEAT_ENV: &str = "LITEK8S_RAFT_HEARTBEAT_MS";
const DEFAULT_HEARTBEAT_MS: u64 = 300;

/// The timer set of one server.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Timers {
    pub heartbeat: Duration,
    /// Lower bound of the random election timeout; the upper bound is the leader lease.
    pub election_min: Duration,
    /// openraft 0.9's leader lease equals the upper bound of the election timeout.
    pub election_max: Duration,
}

impl Timers {
    /// Timers for a heartbeat of `heartbeat_ms`, the others in the default's proportions
    /// (lease = 10 heartbeats, election delay 5–10 heartbeats).
    pub fn from_heartbeat_ms(heartbeat_ms: u64) -> Timers {
        let h = heartbeat_ms.clamp(10, 10_000);
        Timers {
            heartbeat: Duration::from_millis(h),
            election_min: Duration::from_millis(h * 5),
            election_max: Duration::from_millis(h * 10),
        }
    }

    /// From `LITEK8S_RAFT_HEARTBEAT_MS`, defaulting to 300 ms; an unusable value is an error.
    pub fn from_env() -> Result<Timers, String> {
        match std::env::var(HEARTBEAT_ENV) {
            Err(_) => Ok(Timers::from_heartbeat_ms(DEFAULT_HEARTBEAT_MS)),
            Ok(text) => match text.trim().parse::<u64>() {
                Ok(ms) if (10..=10_000).contains(&ms) => Ok(Timers::from_heartbeat_ms(ms)),
                _ => Err(format!(
                    "{HEARTBEAT_ENV}={text:?}: expected milliseconds between 10 and 10000"
                )),
            },
        }
    }

    /// How long without a leader's heartbeat (a leader: without a quorum's acknowledgement)
    /// a member counts as isolated and turns not ready: 8 heartbeats, 2.4 s by default, so
    /// that with the readiness loop's 100 ms period `/readyz` is false within 3 s
    /// (docs/guarantees.md, Isolation and readiness).
    pub fn isolation(&self) -> Duration {
        self.heartbeat * 8
    }

    /// The openraft configuration for these timers and the cluster's fixed choices.
    pub fn raft_config(&self) -> Result<openraft::Config, String> {
        let mut config = openraft::Config {
            cluster_name: "litek8s".into(),
            heartbeat_interval: self.heartbeat.as_millis() as u64,
            election_timeout_min: self.election_min.as_millis() as u64,
            election_timeout_max: self.election_max.as_millis() as u64,
            install_snapshot_timeout: 10_000,
            // AppendEntries requests are capped at 512 KiB (`cluster::network`); entries are capped
            // by the batcher, this caps how many travel in one request (the network splits further
            // by bytes).
            max_payload_entries: 64,
            snapshot_max_chunk_size: 1 << 20,
            purge_batch_size: 256,
            ..Default::default()
        };
        crate::raft::snapshot::apply_policy(&mut config);
        config.validate().map_err(|e| e.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_match_the_spec() {
        let t = Timers::from_heartbeat_ms(300);
        assert_eq!(t.heartbeat, Duration::from_millis(300));
        assert_eq!(t.election_min, Duration::from_millis(1500));
        assert_eq!(t.election_max, Duration::from_millis(3000));
        assert!(t.raft_config().is_ok());
    }

    #[test]
    fn fast_timers_scale_together() {
        let t = Timers::from_heartbeat_ms(100);
        assert_eq!(t.election_max, Duration::from_millis(1000));
        assert!(t.raft_config().is_ok());
    }
}
