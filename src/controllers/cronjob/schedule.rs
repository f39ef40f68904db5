//! Cron schedules read and stepped exactly as kube-controller-manager and kube-apiserver do it
//! with robfig/cron v3's standard parser (`cron.ParseStandard`), so a schedule the API accepts
//! fires at the same instants, and one it refuses is refused with the same message.
//!
//! - Five fields: minute (0-59), hour (0-23), day of month (1-31), month (1-12 or JAN-DEC),
//!   day of week (0-6 or SUN-SAT); each a comma-separated list of `*`/`?`, `N`, `A-B`, with
//!   an optional `/STEP` (`N/STEP` means `N-max/STEP`). Names are case-insensitive.
//! - Day of month and day of week: when either field starts with `*` (a `*/1` included), a day
//!   must match both; otherwise it may match either (the classic cron OR rule).
//! - Descriptors: `@yearly` (`@annually`), `@monthly`, `@weekly`, `@daily` (`@midnight`),
//!   `@hourly`, and `@every DURATION` (Go's duration syntax, at least one second).
//! - A `TZ=zone ` or `CRON_TZ=zone ` prefix sets the zone (the API refuses it on create and
//!   the controller adds it from `spec.timeZone`); without one the schedule is read in UTC.
//!   kube-controller-manager reads it in its process's local zone, UTC in its usual
//!   deployments; litek8s fixes UTC so that every server of a cluster, whichever leads, reads a
//!   schedule the same way.
//! - Next times are found field by field in the schedule's zone, as robfig's `Next` does,
//!   including its daylight-saving behaviour: a wall time skipped by a spring-forward gap does
//!   not fire that day, one repeated by a fall-back fires twice, and a day whose midnight
//!   does not exist is entered at its first hour (so a midnight schedule skips that day). No
//!   time within five years: `None`.

use chrono::{DateTime, Datelike, Duration, NaiveDate, Offset, TimeZone, Timelike, Utc};
use chrono_tz::Tz;

/// Why a schedule does not parse: robfig's error text, which the API shows in its 422.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct ScheduleError(pub String);

/// A parsed schedule.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Schedule {
    /// Fields as bit sets (robfig's `SpecSchedule`).
    Spec(SpecSchedule),
    /// `@every`: a constant delay in whole seconds, at least one.
    Every(i64),
}

/// The times a five-field schedule matches, one bit per value (bit 63: the field began with
/// `*` or `?`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SpecSchedule {
    second: u64,
    minute: u64,
    hour: u64,
    dom: u64,
    month: u64,
    dow: u64,
    /// The zone of a `TZ=` prefix; UTC otherwise.
    zone: Tz,
}

const STAR: u64 = 1 << 63;

/// A field's range of values and the names it accepts.
struct Bounds {
    min: u64,
    max: u64,
    names: &'static [(&'static str, u64)],
}

const SECONDS: Bounds = Bounds {
    min: 0,
    max: 59,
    names: &[],
};
const MINUTES: Bounds = Bounds {
    min: 0,
    max: 59,
    names: &[],
};
const HOURS: Bounds = Bounds {
    min: 0,
    max: 23,
    names: &[],
};
const DOM: Bounds = Bounds {
    min: 1,
    max: 31,
    names: &[],
};
const MONTHS: Bounds = Bounds {
    min: 1,
    max: 12,
    names: &[
        ("jan", 1),
        ("feb", 2),
        ("mar", 3),
        ("apr", 4),
        ("may", 5),
        ("jun", 6),
        ("jul", 7),
        ("aug", 8),
        ("sep", 9),
        ("oct", 10),
        ("nov", 11),
        ("dec", 12),
    ],
};
const DOW: Bounds = Bounds {
    min: 0,
    max: 6,
    names: &[
        ("sun", 0),
        ("mon", 1),
        ("tue", 2),
        ("wed", 3),
        ("thu", 4),
        ("fri", 5),
        ("sat", 6),
    ],
};

fn err(message: impl Into<String>) -> ScheduleError {
    ScheduleError(message.into())
}

/// Loads a zone the way Go's `time.LoadLocation` answers: `""` and `UTC` are UTC, `Local` is
/// this process's zone (UTC here, see the module comment), anything else a name of the IANA
/// database, or the error Go gives.
pub fn load_location(name: &str) -> Result<Tz, String> {
    match name {
        "" | "UTC" | "Local" => return Ok(Tz::UTC),
        _ => {}
    }
    if name.contains("..") || name.starts_with('/') || name.starts_with('\\') {
        return Err("time: invalid location name".to_string());
    }
    name.parse::<Tz>()
        .map_err(|_| format!("unknown time zone {name}"))
}

impl Schedule {
    /// `cron.ParseStandard`.
    pub fn parse(spec: &str) -> Result<Schedule, ScheduleError> {
        if spec.is_empty() {
            return Err(err("empty spec string"));
        }
        let mut spec = spec;
        let mut zone = Tz::UTC;
        if spec.starts_with("TZ=") || spec.starts_with("CRON_TZ=") {
            // robfig slices up to the first space (and panics without one).
            let Some(space) = spec.find(' ') else {
                return Err(err(format!("provided bad location {spec}: no schedule")));
            };
            let equals = spec.find('=').unwrap_or(0);
            let name = &spec[equals + 1..space];
            zone = load_location(name)
                .map_err(|e| err(format!("provided bad location {name}: {e}")))?;
            spec = spec[space..].trim();
        }
        if spec.starts_with('@') {
            return parse_descriptor(spec, zone);
        }
        let fields: Vec<&str> = spec.split_whitespace().collect();
        if fields.len() != 5 {
            return Err(err(format!(
                "expected exactly 5 fields, found {}: [{}]",
                fields.len(),
                fields.join(" ")
            )));
        }
        Ok(Schedule::Spec(SpecSchedule {
            second: 1,
            minute: field(fields[0], &MINUTES)?,
            hour: field(fields[1], &HOURS)?,
            dom: field(fields[2], &DOM)?,
            month: field(fields[3], &MONTHS)?,
            dow: field(fields[4], &DOW)?,
            zone,
        }))
    }

    /// The first time after `t` the schedule fires, if any within five years.
    pub fn next(&self, t: DateTime<Utc>) -> Option<DateTime<Utc>> {
        match self {
            Schedule::Spec(spec) => spec.next(t),
            Schedule::Every(seconds) => {
                let nanos = i64::from(t.nanosecond() % 1_000_000_000);
                Some(t + Duration::seconds(*seconds) - Duration::nanoseconds(nanos))
            }
        }
    }
}

/// A comma-separated list of ranges (empty items are skipped, as Go's `FieldsFunc` does).
fn field(text: &str, bounds: &Bounds) -> Result<u64, ScheduleError> {
    let mut bits = 0;
    for expr in text.split(',').filter(|s| !s.is_empty()) {
        bits |= range(expr, bounds)?;
    }
    Ok(bits)
}

/// `*` | `?` | `N` | `N-M`, each with an optional `/STEP`.
fn range(expr: &str, bounds: &Bounds) -> Result<u64, ScheduleError> {
    let range_and_step: Vec<&str> = expr.split('/').collect();
    let low_and_high: Vec<&str> = range_and_step[0].split('-').collect();
    let single = low_and_high.len() == 1;
    let mut extra = 0;
    let (start, mut end) = if low_and_high[0] == "*" || low_and_high[0] == "?" {
        extra = STAR;
        (bounds.min, bounds.max)
    } else {
        let start = int_or_name(low_and_high[0], bounds)?;
        match low_and_high.len() {
            1 => (start, start),
            2 => (start, int_or_name(low_and_high[1], bounds)?),
            _ => return Err(err(format!("too many hyphens: {expr}"))),
        }
    };
    let step = match range_and_step.len() {
        1 => 1,
        2 => {
            let step = parse_uint(range_and_step[1])?;
            if single {
                end = bounds.max;
            }
            if step > 1 {
                extra = 0;
            }
            step
        }
        _ => return Err(err(format!("too many slashes: {expr}"))),
    };
    if start < bounds.min {
        return Err(err(format!(
            "beginning of range ({start}) below minimum ({}): {expr}",
            bounds.min
        )));
    }
    if end > bounds.max {
        return Err(err(format!(
            "end of range ({end}) above maximum ({}): {expr}",
            bounds.max
        )));
    }
    if start > end {
        return Err(err(format!(
            "beginning of range ({start}) beyond end of range ({end}): {expr}"
        )));
    }
    if step == 0 {
        return Err(err(format!(
            "step of range should be a positive number: {expr}"
        )));
    }
    let mut bits = 0u64;
    let mut i = start;
    while i <= end {
        bits |= 1 << i;
        i = i.saturating_add(step);
    }
    Ok(bits | extra)
}

fn int_or_name(expr: &str, bounds: &Bounds) -> Result<u64, ScheduleError> {
    let lower = expr.to_ascii_lowercase();
    if let Some((_, n)) = bounds.names.iter().find(|(name, _)| *name == lower) {
        return Ok(*n);
    }
    parse_uint(expr)
}

/// Go's `strconv.Atoi` then a sign check, with their messages.
fn parse_uint(expr: &str) -> Result<u64, ScheduleError> {
    let digits = expr.strip_prefix(['+', '-']).unwrap_or(expr);
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return Err(err(format!(
            "failed to parse int from {expr}: strconv.Atoi: parsing {expr:?}: invalid syntax"
        )));
    }
    let Ok(num) = expr.parse::<i64>() else {
        return Err(err(format!(
            "failed to parse int from {expr}: strconv.Atoi: parsing {expr:?}: value out of range"
        )));
    };
    if num < 0 {
        return Err(err(format!("negative number ({num}) not allowed: {expr}")));
    }
    Ok(num.unsigned_abs())
}

fn all(bounds: &Bounds) -> u64 {
    let mut bits = 0;
    for i in bounds.min..=bounds.max {
        bits |= 1 << i;
    }
    bits | STAR
}

fn parse_descriptor(descriptor: &str, zone: Tz) -> Result<Schedule, ScheduleError> {
    let first = |b: &Bounds| 1u64 << b.min;
    let spec = |hour, dom, month, dow| {
        Schedule::Spec(SpecSchedule {
            second: first(&SECONDS),
            minute: first(&MINUTES),
            hour,
            dom,
            month,
            dow,
            zone,
        })
    };
    match descriptor {
        "@yearly" | "@annually" => {
            return Ok(spec(first(&HOURS), first(&DOM), first(&MONTHS), all(&DOW)))
        }
        "@monthly" => return Ok(spec(first(&HOURS), first(&DOM), all(&MONTHS), all(&DOW))),
        "@weekly" => return Ok(spec(first(&HOURS), all(&DOM), all(&MONTHS), first(&DOW))),
        "@daily" | "@midnight" => {
            return Ok(spec(first(&HOURS), all(&DOM), all(&MONTHS), all(&DOW)))
        }
        "@hourly" => return Ok(spec(all(&HOURS), all(&DOM), all(&MONTHS), all(&DOW))),
        _ => {}
    }
    if let Some(text) = descriptor.strip_prefix("@every ") {
        let nanos = go_duration(text)
            .map_err(|e| err(format!("failed to parse duration {descriptor}: {e}")))?;
        // Under a second becomes a second; fractions of a second are dropped.
        let seconds = (nanos / 1_000_000_000).max(1);
        return Ok(Schedule::Every(seconds as i64));
    }
    Err(err(format!("unrecognized descriptor: {descriptor}")))
}

/// Go's `time.ParseDuration`, in nanoseconds.
fn go_duration(text: &str) -> Result<i128, String> {
    let quoted = format!("{text:?}");
    let invalid = || format!("time: invalid duration {quoted}");
    let mut s = text;
    let negative = s.starts_with('-');
    s = s.strip_prefix(['-', '+']).unwrap_or(s);
    if s == "0" {
        return Ok(0);
    }
    if s.is_empty() {
        return Err(invalid());
    }
    let mut total: i128 = 0;
    while !s.is_empty() {
        let int_len = s.bytes().take_while(u8::is_ascii_digit).count();
        let (int_part, rest) = s.split_at(int_len);
        let (frac_part, rest) = match rest.strip_prefix('.') {
            Some(after) => {
                let n = after.bytes().take_while(u8::is_ascii_digit).count();
                after.split_at(n)
            }
            None => ("", rest),
        };
        if int_part.is_empty() && frac_part.is_empty() {
            return Err(invalid());
        }
        let unit_len = rest
            .char_indices()
            .find(|(_, c)| *c == '.' || c.is_ascii_digit())
            .map_or(rest.len(), |(i, _)| i);
        let (unit, rest) = rest.split_at(unit_len);
        if unit.is_empty() {
            return Err(format!("time: missing unit in duration {quoted}"));
        }
        let scale: i128 = match unit {
            "ns" => 1,
            "us" | "\u{b5}s" | "\u{3bc}s" => 1_000,
            "ms" => 1_000_000,
            "s" => 1_000_000_000,
            "m" => 60_000_000_000,
            "h" => 3_600_000_000_000,
            _ => return Err(format!("time: unknown unit {unit:?} in duration {quoted}")),
        };
        let whole: i128 = if int_part.is_empty() {
            0
        } else {
            int_part.parse().map_err(|_| invalid())?
        };
        let mut value = whole.checked_mul(scale).ok_or_else(invalid)?;
        if !frac_part.is_empty() {
            let digits = frac_part.len().min(30) as u32;
            let frac: i128 = frac_part[..digits as usize]
                .parse()
                .map_err(|_| invalid())?;
            value += frac * scale / 10i128.pow(digits);
        }
        total = total.checked_add(value).ok_or_else(invalid)?;
        if total > i128::from(i64::MAX) {
            return Err(invalid());
        }
        s = rest;
    }
    Ok(if negative { -total } else { total })
}

impl SpecSchedule {
    fn day_matches(&self, t: &DateTime<Tz>) -> bool {
        let dom = (1u64 << t.day()) & self.dom != 0;
        let dow = (1u64 << t.weekday().num_days_from_sunday()) & self.dow != 0;
        if self.dom & STAR != 0 || self.dow & STAR != 0 {
            dom && dow
        } else {
            dom || dow
        }
    }

    /// robfig's `SpecSchedule.Next`, step for step (see the module comment on time zones).
    fn next(&self, after: DateTime<Utc>) -> Option<DateTime<Utc>> {
        let zone = self.zone;
        let mut t = after.with_timezone(&zone);
        // The upcoming whole second.
        t = t + Duration::seconds(1)
            - Duration::nanoseconds(i64::from(t.nanosecond() % 1_000_000_000));
        let mut added = false;
        let year_limit = t.year() + 5;
        'wrap: loop {
            if t.year() > year_limit {
                return None;
            }
            while (1u64 << t.month()) & self.month == 0 {
                if !added {
                    added = true;
                    t = go_date(zone, t.year(), t.month() as i64, 1, 0, 0, 0);
                }
                t = add_date(t, 1, 0);
                if t.month() == 1 {
                    continue 'wrap;
                }
            }
            while !self.day_matches(&t) {
                if !added {
                    added = true;
                    t = go_date(zone, t.year(), t.month() as i64, t.day() as i64, 0, 0, 0);
                }
                t = add_date(t, 0, 1);
                // A midnight that daylight saving skipped or repeated: back to the day's
                // first hour.
                let hour = i64::from(t.hour());
                if hour != 0 {
                    t = if hour > 12 {
                        t + Duration::hours(24 - hour)
                    } else {
                        t - Duration::hours(hour)
                    };
                }
                if t.day() == 1 {
                    continue 'wrap;
                }
            }
            while (1u64 << t.hour()) & self.hour == 0 {
                if !added {
                    added = true;
                    t = go_date(
                        zone,
                        t.year(),
                        t.month() as i64,
                        t.day() as i64,
                        t.hour() as i64,
                        0,
                        0,
                    );
                }
                t += Duration::hours(1);
                if t.hour() == 0 {
                    continue 'wrap;
                }
            }
            while (1u64 << t.minute()) & self.minute == 0 {
                if !added {
                    added = true;
                    t = truncate(t, 60);
                }
                t += Duration::minutes(1);
                if t.minute() == 0 {
                    continue 'wrap;
                }
            }
            while (1u64 << t.second()) & self.second == 0 {
                if !added {
                    added = true;
                    t = truncate(t, 1);
                }
                t += Duration::seconds(1);
                if t.second() == 0 {
                    continue 'wrap;
                }
            }
            return Some(t.with_timezone(&Utc));
        }
    }
}

/// Go's `t.Truncate(d)` for whole seconds: on absolute time, not the wall clock.
fn truncate(t: DateTime<Tz>, seconds: i64) -> DateTime<Tz> {
    let ts = t.timestamp();
    let floor = ts - ts.rem_euclid(seconds);
    Utc.timestamp_opt(floor, 0)
        .single()
        .map_or(t, |u| u.with_timezone(&t.timezone()))
}

/// Go's `t.AddDate(0, months, days)`: the wall clock's fields moved, then normalized.
fn add_date(t: DateTime<Tz>, months: i64, days: i64) -> DateTime<Tz> {
    go_date(
        t.timezone(),
        t.year(),
        t.month() as i64 + months,
        t.day() as i64 + days,
        t.hour() as i64,
        t.minute() as i64,
        t.second() as i64,
    )
}

/// Go's `time.Date`: out-of-range fields carry over (month 13 is January of the next year,
/// day 32 the first of the next month), and a wall time the zone skips or repeats gets the
/// offset Go's algorithm picks: the offset in force at the wall time read as UTC, corrected
/// once if the instant it gives falls under another offset.
fn go_date(
    zone: Tz,
    year: i32,
    month: i64,
    day: i64,
    hour: i64,
    minute: i64,
    second: i64,
) -> DateTime<Tz> {
    let months0 = month - 1;
    let year = i64::from(year) + months0.div_euclid(12);
    let month = months0.rem_euclid(12) + 1;
    let first = NaiveDate::from_ymd_opt(year as i32, month as u32, 1)
        .unwrap_or(NaiveDate::MIN)
        .and_hms_opt(0, 0, 0)
        .unwrap_or_default();
    let wall = first
        + Duration::days(day - 1)
        + Duration::hours(hour)
        + Duration::minutes(minute)
        + Duration::seconds(second);
    let wall_as_utc = wall.and_utc();
    let offset_at = |instant: DateTime<Utc>| -> i64 {
        i64::from(
            zone.offset_from_utc_datetime(&instant.naive_utc())
                .fix()
                .local_minus_utc(),
        )
    };
    let guess = offset_at(wall_as_utc);
    let offset = offset_at(wall_as_utc - Duration::seconds(guess));
    (wall_as_utc - Duration::seconds(offset)).with_timezone(&zone)
}

#[cfg(test)]
mod tests;
