//! Fail points: faults that tests inject into a running `litek8s` process, compiled in only
//! with the cargo feature `failpoints` (the test command enables it; see
//! `docs/architecture.md`, "Tests and benchmarks"). Without the feature every function here is
//! a constant that the compiler folds away, so a release binary carries neither the code nor
//! the names.
//!
//! A test arms fail points in the environment of the process it starts:
//! `LITEK8S_FAILPOINTS="name=value;name=value"`. The names, `module::event`:
//!
//! | name | value | effect |
//! |---|---|---|
//! | `raft_log::write_delay` | path of a control file | every Raft log write first waits as many milliseconds as the file holds, while it exists (`storage::io::DelayedIo`) |
//! | `cluster_rpc::lose_propose_reply` | count N | the first N proposals forwarded to this leader are applied, but answered as failed |
//! | `bootstrap::delay` | milliseconds | a new leader waits that long before its first pass over the bootstrap objects |
//! | `node_credential::lifetime` | seconds | the node certificates this server issues at join expire that long after issue (instead of in a year), so a test sees the agent renew its own |
//!
//! An unknown name or a value that does not parse stops the process at start (a test that
//! arms a fault must not pass because the fault never happened).

#[cfg(feature = "failpoints")]
mod armed {
    use std::collections::HashMap;
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::sync::OnceLock;

    /// The environment variable that arms fail points.
    const VAR: &str = "LITEK8S_FAILPOINTS";

    pub const WRITE_DELAY: &str = "raft_log::write_delay";
    pub const LOSE_PROPOSE_REPLY: &str = "cluster_rpc::lose_propose_reply";
    pub const BOOTSTRAP_DELAY: &str = "bootstrap::delay";
    pub const NODE_CREDENTIAL_LIFETIME: &str = "node_credential::lifetime";
    const KNOWN: [&str; 4] = [
        WRITE_DELAY,
        LOSE_PROPOSE_REPLY,
        BOOTSTRAP_DELAY,
        NODE_CREDENTIAL_LIFETIME,
    ];
    /// The fail points whose value is a number.
    const NUMERIC: [&str; 3] = [
        LOSE_PROPOSE_REPLY,
        BOOTSTRAP_DELAY,
        NODE_CREDENTIAL_LIFETIME,
    ];

    /// The armed fail points, read from the environment once.
    pub fn armed() -> &'static HashMap<String, String> {
        static ARMED: OnceLock<HashMap<String, String>> = OnceLock::new();
        ARMED.get_or_init(|| {
            let spec = std::env::var(VAR).unwrap_or_default();
            match parse(&spec) {
                Ok(armed) => {
                    for (name, value) in &armed {
                        tracing::warn!("fail point {name} armed ({value})");
                    }
                    armed
                }
                Err(reason) => {
                    eprintln!("{VAR}: {reason}");
                    std::process::exit(2);
                }
            }
        })
    }

    /// `name=value;name=value` → map; unknown names and values that are not numbers where
    /// one is expected are refused.
    pub fn parse(spec: &str) -> Result<HashMap<String, String>, String> {
        let mut armed = HashMap::new();
        for item in spec.split(';').map(str::trim).filter(|s| !s.is_empty()) {
            let (name, value) = item
                .split_once('=')
                .ok_or_else(|| format!("{item:?} is not name=value"))?;
            let name = name.trim();
            if !KNOWN.contains(&name) {
                return Err(format!("unknown fail point {name:?} (known: {KNOWN:?})"));
            }
            let value = value.trim();
            if NUMERIC.contains(&name) {
                value
                    .parse::<u64>()
                    .map_err(|e| format!("{name}={value:?}: {e}"))?;
            }
            armed.insert(name.to_string(), value.to_string());
        }
        Ok(armed)
    }

    /// The value of `name`, a number (checked by `parse`).
    pub fn number(name: &str) -> Option<u64> {
        armed().get(name)?.parse().ok()
    }

    /// Counts down the armed count of `name`; true while it was above zero.
    pub fn take_one(name: &str, left: &'static OnceLock<AtomicU64>) -> bool {
        let left = left.get_or_init(|| AtomicU64::new(number(name).unwrap_or(0)));
        left.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| n.checked_sub(1))
            .is_ok()
    }
}

/// Reads the environment and stops the process if it arms fail points wrongly, so a mistake
/// shows at start rather than at the first use. A no-op without the feature.
pub fn check() {
    #[cfg(feature = "failpoints")]
    armed::armed();
}

/// `raft_log::write_delay`: the control file whose contents delay Raft log writes.
#[cfg(feature = "failpoints")]
pub fn log_write_delay() -> Option<std::path::PathBuf> {
    armed::armed().get(armed::WRITE_DELAY).map(Into::into)
}

#[cfg(not(feature = "failpoints"))]
#[inline(always)]
pub fn log_write_delay() -> Option<std::path::PathBuf> {
    None
}

/// `cluster_rpc::lose_propose_reply`: whether the answer to this forwarded proposal is to
/// be lost (counts the armed number down).
#[cfg(feature = "failpoints")]
pub fn lose_propose_reply() -> bool {
    static LEFT: std::sync::OnceLock<std::sync::atomic::AtomicU64> = std::sync::OnceLock::new();
    let lose = armed::take_one(armed::LOSE_PROPOSE_REPLY, &LEFT);
    if lose {
        tracing::warn!("fail point {}: losing an answer", armed::LOSE_PROPOSE_REPLY);
    }
    lose
}

#[cfg(not(feature = "failpoints"))]
#[inline(always)]
pub fn lose_propose_reply() -> bool {
    false
}

/// `bootstrap::delay`: how long a new leader holds back the bootstrap objects.
#[cfg(feature = "failpoints")]
pub fn bootstrap_delay() -> Option<std::time::Duration> {
    armed::number(armed::BOOTSTRAP_DELAY).map(std::time::Duration::from_millis)
}

#[cfg(not(feature = "failpoints"))]
#[inline(always)]
pub fn bootstrap_delay() -> Option<std::time::Duration> {
    None
}

/// `node_credential::lifetime`: how long the node certificates issued at join are valid.
#[cfg(feature = "failpoints")]
pub fn node_credential_lifetime() -> Option<std::time::Duration> {
    armed::number(armed::NODE_CREDENTIAL_LIFETIME).map(std::time::Duration::from_secs)
}

#[cfg(not(feature = "failpoints"))]
#[inline(always)]
pub fn node_credential_lifetime() -> Option<std::time::Duration> {
    None
}

#[cfg(all(test, feature = "failpoints"))]
mod tests {
    use super::armed::parse;

    #[test]
    fn specs_parse_and_unknown_names_are_refused() {
        let armed =
            parse(" raft_log::write_delay=/tmp/x ; cluster_rpc::lose_propose_reply=4;").unwrap();
        assert_eq!(armed["raft_log::write_delay"], "/tmp/x");
        assert_eq!(armed["cluster_rpc::lose_propose_reply"], "4");
        assert!(parse("").unwrap().is_empty());
        assert!(parse("raft_log::write_dely=1").is_err());
        assert!(parse("bootstrap::delay").is_err());
        assert!(parse("bootstrap::delay=soon").is_err());
        assert_eq!(
            parse("bootstrap::delay=1500").unwrap()["bootstrap::delay"],
            "1500"
        );
    }
}
