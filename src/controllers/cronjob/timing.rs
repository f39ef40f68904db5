//! When a CronJob is due, as kube-controller-manager's CronJob controller (v2) reckons it:
//! the most recent scheduled time at or before now that is after the last one it started
//! (or its creation, or `now - startingDeadlineSeconds` when that is later), how many times
//! were missed in between (more than 100 is "many": a warning, upstream's
//! `TooManyMissedTimes`), and when to look again (the next scheduled time, plus 100 ms for
//! clock skew).

use chrono::{DateTime, Duration, Utc};

use super::schedule::Schedule;

/// Padding after a scheduled time before the controller looks (upstream's
/// `nextScheduleDelta`).
const NEXT_SCHEDULE_DELTA: Duration = Duration::milliseconds(100);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Missed {
    None,
    Few,
    /// More than 100: the controller warns and starts only the most recent.
    Many,
}

/// Where a CronJob stands at `now`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Due {
    /// Its last scheduled time, or its creation (or the starting deadline's start).
    pub earliest: DateTime<Utc>,
    /// The latest scheduled time after `earliest` and not after now, if any.
    pub most_recent: Option<DateTime<Utc>>,
    pub missed: Missed,
}

/// What the times of a CronJob depend on.
#[derive(Debug, Clone, Copy)]
pub struct History {
    pub created: DateTime<Utc>,
    pub last_schedule: Option<DateTime<Utc>>,
    pub starting_deadline_seconds: Option<i64>,
}

/// Upstream's `mostRecentScheduleTime`. An error for a schedule whose next two times are
/// less than a second apart, or that never comes (February 30th).
pub fn most_recent(
    history: &History,
    now: DateTime<Utc>,
    schedule: &Schedule,
    with_deadline: bool,
) -> Result<Due, String> {
    let mut earliest = history.last_schedule.unwrap_or(history.created);
    if let Some(deadline) = history.starting_deadline_seconds.filter(|_| with_deadline) {
        let start = now - Duration::seconds(deadline);
        if start > earliest {
            earliest = start;
        }
    }
    let too_close = || "time difference between two schedules is less than 1 second".to_string();
    let none = |missed| Due {
        earliest,
        most_recent: None,
        missed,
    };
    let Some(t1) = schedule.next(earliest) else {
        return Err(too_close());
    };
    if now < t1 {
        return Ok(none(Missed::None));
    }
    let Some(t2) = schedule.next(t1) else {
        return Err(too_close());
    };
    if now < t2 {
        return Ok(Due {
            earliest,
            most_recent: Some(t1),
            missed: Missed::None,
        });
    }
    // Go rounds the gap to whole seconds and truncates the time elapsed.
    let between = (t2 - t1 + Duration::milliseconds(500)).num_seconds();
    if between < 1 {
        return Err(too_close());
    }
    let elapsed = (now - t1).num_seconds();
    let missed_count = elapsed / between + 1;
    // Start one interval before the estimate and step with the schedule itself, so irregular
    // schedules (`30 6-16/4 * * 1-5`) land on their real times.
    let mut t = schedule.next(t1 + Duration::seconds((missed_count - 2) * between));
    let mut most_recent = None;
    while let Some(at) = t.filter(|at| *at <= now) {
        most_recent = Some(at);
        t = schedule.next(at);
    }
    let missed = if missed_count > 100 {
        Missed::Many
    } else {
        Missed::Few
    };
    Ok(Due {
        earliest,
        most_recent,
        missed,
    })
}

/// Upstream's `nextScheduleTimeDuration`: how long until the controller should look again;
/// `None` when the schedule has no next time.
pub fn next_delay(
    history: &History,
    now: DateTime<Utc>,
    schedule: &Schedule,
) -> Option<std::time::Duration> {
    let from = match most_recent(history, now, schedule, false) {
        Err(_) => now,
        Ok(Due {
            most_recent: Some(t),
            ..
        }) => t,
        Ok(Due {
            earliest,
            missed: Missed::None,
            ..
        }) => earliest,
        Ok(_) => now,
    };
    let next = schedule.next(from)?;
    Some(
        (next + NEXT_SCHEDULE_DELTA - now)
            .to_std()
            .unwrap_or_default(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(text: &str) -> DateTime<Utc> {
        crate::controllers::objects::parse_time(text).unwrap()
    }

    fn history(created: &str, last: Option<&str>, deadline: Option<i64>) -> History {
        History {
            created: t(created),
            last_schedule: last.map(t),
            starting_deadline_seconds: deadline,
        }
    }

    #[test]
    fn the_most_recent_unmet_time() {
        let every_minute = Schedule::parse("* * * * *").unwrap();
        let h = history("2024-01-01T00:00:30Z", None, None);
        // Before the first time.
        let due = most_recent(&h, t("2024-01-01T00:00:50Z"), &every_minute, true).unwrap();
        assert_eq!((due.most_recent, due.missed), (None, Missed::None));
        // The first time has come.
        let due = most_recent(&h, t("2024-01-01T00:01:10Z"), &every_minute, true).unwrap();
        assert_eq!(due.most_recent, Some(t("2024-01-01T00:01:00Z")));
        assert_eq!(due.missed, Missed::None);
        // Several passed: the latest, and "a few missed".
        let due = most_recent(&h, t("2024-01-01T00:05:10Z"), &every_minute, true).unwrap();
        assert_eq!(due.most_recent, Some(t("2024-01-01T00:05:00Z")));
        assert_eq!(due.missed, Missed::Few);
        // More than 100.
        let due = most_recent(&h, t("2024-01-01T03:00:10Z"), &every_minute, true).unwrap();
        assert_eq!(due.most_recent, Some(t("2024-01-01T03:00:00Z")));
        assert_eq!(due.missed, Missed::Many);
        // The starting deadline moves the earliest time up (and not when asked without it).
        let h = history("2024-01-01T00:00:30Z", None, Some(200));
        let due = most_recent(&h, t("2024-01-01T03:00:10Z"), &every_minute, true).unwrap();
        assert_eq!(due.earliest, t("2024-01-01T02:56:50Z"));
        assert_eq!(due.missed, Missed::Few);
        let due = most_recent(&h, t("2024-01-01T03:00:10Z"), &every_minute, false).unwrap();
        assert_eq!(due.missed, Missed::Many);
        // An irregular schedule lands on its real times.
        let irregular = Schedule::parse("30 6-16/4 * * 1-5").unwrap();
        let h = history("2024-01-01T00:00:00Z", None, None);
        let due = most_recent(&h, t("2024-01-03T12:00:00Z"), &irregular, true).unwrap();
        assert_eq!(due.most_recent, Some(t("2024-01-03T10:30:00Z")));
        // February 30th never comes.
        let never = Schedule::parse("0 0 30 2 *").unwrap();
        assert!(most_recent(&h, t("2024-06-01T00:00:00Z"), &never, true).is_err());
    }

    #[test]
    fn when_to_look_again() {
        let hourly = Schedule::parse("@hourly").unwrap();
        let h = history("2024-01-01T00:10:00Z", None, None);
        let delay = next_delay(&h, t("2024-01-01T00:20:00Z"), &hourly).unwrap();
        assert_eq!(delay, std::time::Duration::from_millis(40 * 60_000 + 100));
        // After a start, the next time after it.
        let h = history("2024-01-01T00:10:00Z", Some("2024-01-01T01:00:00Z"), None);
        let delay = next_delay(&h, t("2024-01-01T01:00:02Z"), &hourly).unwrap();
        assert_eq!(delay, std::time::Duration::from_millis(3_598_000 + 100));
        let never = Schedule::parse("0 0 30 2 *").unwrap();
        assert_eq!(next_delay(&h, t("2024-01-01T01:00:02Z"), &never), None);
    }
}
