//! The delay between a Job's failed pods and their replacements, as kube-controller-manager
//! computes it: 10 s after the first failure since the last success, doubling with each
//! further failure up to 10 minutes (upstream's `MaxJobPodFailureBackOff`; its
//! documentation still says six), measured from the last failure. The record of failures
//! lives in the controller's memory, as upstream's does: a new leader starts without it.
//! Jobs with `backoffLimitPerIndex` back off per index instead, from the failure count their
//! pods carry.

use chrono::{DateTime, Utc};
use serde_json::Value;

use super::pods::finish_time;

/// The delay after the first failure.
pub const BASE: std::time::Duration = std::time::Duration::from_secs(10);
/// The longest delay.
pub const CAP: std::time::Duration = std::time::Duration::from_secs(600);

/// Failures since the last success and when the last of them happened.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct BackoffRecord {
    pub failures_after_last_success: u32,
    pub last_failure: Option<DateTime<Utc>>,
}

impl BackoffRecord {
    /// The record after the pods that finished since it was written.
    pub fn after(&self, succeeded: &[&Value], failed: &[&Value]) -> BackoffRecord {
        let mut failed_at: Vec<DateTime<Utc>> = failed.iter().map(|p| finish_time(p)).collect();
        failed_at.sort();
        let last_success = succeeded.iter().map(|p| finish_time(p)).max();
        match last_success {
            None => match failed_at.last() {
                None => *self,
                Some(last) => BackoffRecord {
                    failures_after_last_success: self
                        .failures_after_last_success
                        .saturating_add(failed_at.len() as u32),
                    last_failure: Some(*last),
                },
            },
            // A success resets the count to the failures that came after it.
            Some(success) => {
                let after: Vec<&DateTime<Utc>> =
                    failed_at.iter().filter(|t| **t > success).collect();
                BackoffRecord {
                    failures_after_last_success: after.len() as u32,
                    last_failure: after.last().map(|t| **t),
                }
            }
        }
    }

    /// How long until a replacement may be created at `now` (zero: now).
    pub fn remaining(&self, now: DateTime<Utc>) -> std::time::Duration {
        remaining(self.failures_after_last_success, self.last_failure, now)
    }
}

/// The delay owed after `failures` consecutive failures, the last at `last`.
pub fn remaining(
    failures: u32,
    last: Option<DateTime<Utc>>,
    now: DateTime<Utc>,
) -> std::time::Duration {
    let Some(last) = last.filter(|_| failures > 0) else {
        return std::time::Duration::ZERO;
    };
    let delay = delay_after(failures);
    let elapsed = (now - last).to_std().unwrap_or_default();
    delay.saturating_sub(elapsed)
}

/// 10 s after one failure, doubling per further failure, at most `CAP`.
pub fn delay_after(failures: u32) -> std::time::Duration {
    let mut delay = BASE;
    for _ in 1..failures {
        delay = delay.saturating_mul(2);
        if delay >= CAP {
            return CAP;
        }
    }
    delay
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn t(text: &str) -> DateTime<Utc> {
        crate::controllers::objects::parse_time(text).unwrap()
    }

    fn finished(at: &str) -> Value {
        json!({"status": {"containerStatuses": [
            {"state": {"terminated": {"finishedAt": at}}}]}})
    }

    #[test]
    fn delays_double_from_ten_seconds_to_the_cap() {
        let secs: Vec<u64> = (1..=8).map(|n| delay_after(n).as_secs()).collect();
        assert_eq!(secs, [10, 20, 40, 80, 160, 320, 600, 600]);
        assert_eq!(delay_after(1000), CAP);
        let now = t("2024-01-01T00:01:00Z");
        assert_eq!(
            remaining(3, Some(t("2024-01-01T00:00:30Z")), now).as_secs(),
            10
        );
        assert_eq!(
            remaining(3, Some(t("2024-01-01T00:00:00Z")), now),
            std::time::Duration::ZERO
        );
        assert_eq!(remaining(0, Some(now), now), std::time::Duration::ZERO);
    }

    #[test]
    fn a_success_resets_the_count_to_later_failures() {
        let f1 = finished("2024-01-01T00:00:01Z");
        let f2 = finished("2024-01-01T00:00:02Z");
        let f3 = finished("2024-01-01T00:00:05Z");
        let ok = finished("2024-01-01T00:00:03Z");
        let start = BackoffRecord::default();
        let r = start.after(&[], &[&f2, &f1]);
        assert_eq!(r.failures_after_last_success, 2);
        assert_eq!(r.last_failure, Some(t("2024-01-01T00:00:02Z")));
        let r = r.after(&[&ok], &[&f3]);
        assert_eq!(r.failures_after_last_success, 1);
        assert_eq!(r.last_failure, Some(t("2024-01-01T00:00:05Z")));
        let r = r.after(&[&ok], &[]);
        assert_eq!(r, BackoffRecord::default());
    }
}
