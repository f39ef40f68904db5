//! Schedules against robfig/cron v3's answers: parse errors word for word, next times
//! including the day-of-month/day-of-week OR rule, names, descriptors, time zones and the
//! daylight-saving edges.

use chrono::{DateTime, Utc};

use super::*;

fn at(text: &str) -> DateTime<Utc> {
    DateTime::parse_from_rfc3339(text)
        .unwrap_or_else(|e| panic!("{text}: {e}"))
        .with_timezone(&Utc)
}

fn next(spec: &str, after: &str) -> Option<String> {
    let schedule = Schedule::parse(spec).unwrap_or_else(|e| panic!("{spec}: {e}"));
    schedule
        .next(at(after))
        .map(|t| t.to_rfc3339_opts(chrono::SecondsFormat::Secs, true))
}

#[test]
fn parse_errors_are_robfigs() {
    let table = [
        ("", "empty spec string"),
        ("foo", "expected exactly 5 fields, found 1: [foo]"),
        ("* * * *", "expected exactly 5 fields, found 4: [* * * *]"),
        (
            "* * * * * *",
            "expected exactly 5 fields, found 6: [* * * * * *]",
        ),
        ("60 * * * *", "end of range (60) above maximum (59): 60"),
        ("* 24 * * *", "end of range (24) above maximum (23): 24"),
        ("* * 0 * *", "beginning of range (0) below minimum (1): 0"),
        ("* * * 13 *", "end of range (13) above maximum (12): 13"),
        ("* * * * 7", "end of range (7) above maximum (6): 7"),
        (
            "5-1 * * * *",
            "beginning of range (5) beyond end of range (1): 5-1",
        ),
        (
            "*/0 * * * *",
            "step of range should be a positive number: */0",
        ),
        (
            "a * * * *",
            "failed to parse int from a: strconv.Atoi: parsing \"a\": invalid syntax",
        ),
        (
            "-1 * * * *",
            "failed to parse int from : strconv.Atoi: parsing \"\": invalid syntax",
        ),
        ("1-2-3 * * * *", "too many hyphens: 1-2-3"),
        ("1/2/3 * * * *", "too many slashes: 1/2/3"),
        (
            "* * * FOO *",
            "failed to parse int from FOO: strconv.Atoi: parsing \"FOO\": invalid syntax",
        ),
        (
            "99999999999 * * * *",
            "end of range (99999999999) above maximum (59): 99999999999",
        ),
        ("@foo", "unrecognized descriptor: @foo"),
        (
            "@every 1x",
            "failed to parse duration @every 1x: time: unknown unit \"x\" in duration \"1x\"",
        ),
        (
            "@every 10",
            "failed to parse duration @every 10: time: missing unit in duration \"10\"",
        ),
        (
            "TZ=Mars/Base * * * * *",
            "provided bad location Mars/Base: unknown time zone Mars/Base",
        ),
    ];
    for (spec, message) in table {
        assert_eq!(
            Schedule::parse(spec),
            Err(ScheduleError(message.to_string())),
            "{spec:?}"
        );
    }
    for good in [
        "* * * * *",
        "*/5 * * * ?",
        "0 0 1,15 * mon-FRI",
        "0 9-17/2 * jan-mar,Dec SUN",
        "5/15 * * * *",
        "0 0 * * 0-6",
        "@yearly",
        "@annually",
        "@monthly",
        "@weekly",
        "@daily",
        "@midnight",
        "@hourly",
        "@every 1h30m",
        "TZ=Europe/Berlin 0 6 * * *",
        "CRON_TZ=UTC 0 6 * * *",
    ] {
        assert!(Schedule::parse(good).is_ok(), "{good}");
    }
}

#[test]
fn next_times_in_utc() {
    let table = [
        // Steps, lists, ranges, names.
        (
            "*/15 * * * *",
            "2024-01-01T00:07:30Z",
            "2024-01-01T00:15:00Z",
        ),
        (
            "*/15 * * * *",
            "2024-01-01T00:45:00Z",
            "2024-01-01T01:00:00Z",
        ),
        (
            "5/20 * * * *",
            "2024-01-01T00:46:00Z",
            "2024-01-01T01:05:00Z",
        ),
        (
            "0 9-17/4 * * *",
            "2024-01-01T13:00:00Z",
            "2024-01-01T17:00:00Z",
        ),
        (
            "0 0 1,15 * *",
            "2024-01-02T00:00:00Z",
            "2024-01-15T00:00:00Z",
        ),
        (
            "30 9 * JAN-MAR MON-FRI",
            "2024-03-29T10:00:00Z",
            "2025-01-01T09:30:00Z",
        ),
        // Day of month OR day of week when neither starts with `*`.
        ("0 0 1 * 1", "2024-01-01T00:00:00Z", "2024-01-08T00:00:00Z"),
        ("0 0 1 * 1", "2024-01-29T00:00:00Z", "2024-02-01T00:00:00Z"),
        // A `*` in either makes it AND.
        ("0 0 1 * *", "2024-01-01T00:00:00Z", "2024-02-01T00:00:00Z"),
        ("0 0 * * 1", "2024-01-02T00:00:00Z", "2024-01-08T00:00:00Z"),
        // `*/2` is no longer a star (robfig clears it for steps above 1): OR again.
        (
            "0 0 */2 * 1",
            "2024-01-07T00:00:00Z",
            "2024-01-08T00:00:00Z",
        ),
        // `*/1` still is.
        (
            "0 0 */1 * 1",
            "2024-01-02T00:00:00Z",
            "2024-01-08T00:00:00Z",
        ),
        // Leap day.
        (
            "0 12 29 2 *",
            "2024-03-01T00:00:00Z",
            "2028-02-29T12:00:00Z",
        ),
        // Descriptors.
        ("@hourly", "2024-01-01T10:59:59Z", "2024-01-01T11:00:00Z"),
        ("@daily", "2024-01-01T10:00:00Z", "2024-01-02T00:00:00Z"),
        ("@midnight", "2024-01-01T00:00:00Z", "2024-01-02T00:00:00Z"),
        ("@weekly", "2024-01-01T00:00:00Z", "2024-01-07T00:00:00Z"),
        ("@monthly", "2024-01-15T00:00:00Z", "2024-02-01T00:00:00Z"),
        ("@yearly", "2024-01-15T00:00:00Z", "2025-01-01T00:00:00Z"),
        ("@annually", "2024-01-01T00:00:00Z", "2025-01-01T00:00:00Z"),
        ("@every 90s", "2024-01-01T00:00:10Z", "2024-01-01T00:01:40Z"),
        (
            "@every 1h30m",
            "2024-01-01T00:00:00Z",
            "2024-01-01T01:30:00Z",
        ),
        (
            "@every 100ms",
            "2024-01-01T00:00:00Z",
            "2024-01-01T00:00:01Z",
        ),
    ];
    for (spec, after, want) in table {
        assert_eq!(
            next(spec, after).as_deref(),
            Some(want),
            "{spec} after {after}"
        );
    }
    // February 30th never comes.
    assert_eq!(next("0 0 30 2 *", "2024-01-01T00:00:00Z"), None);
    // Sub-second parts of the start are dropped, the next whole second is the earliest.
    let schedule = Schedule::parse("* * * * *").unwrap();
    let t = at("2024-01-01T00:00:59.900Z");
    assert_eq!(schedule.next(t), Some(at("2024-01-01T00:01:00Z")));
}

#[test]
fn next_times_in_a_time_zone_and_across_daylight_saving() {
    let table = [
        // 09:00 in New York: 14:00Z in winter, 13:00Z in summer.
        (
            "TZ=America/New_York 0 9 * * *",
            "2024-01-01T00:00:00Z",
            "2024-01-01T14:00:00Z",
        ),
        (
            "TZ=America/New_York 0 9 * * *",
            "2024-07-01T00:00:00Z",
            "2024-07-01T13:00:00Z",
        ),
        // A wall time in the spring-forward gap (02:30 on 10 March 2024) is skipped that
        // day.
        (
            "TZ=America/New_York 30 2 * * *",
            "2024-03-09T08:00:00Z",
            "2024-03-11T06:30:00Z",
        ),
        // A wall time the fall-back repeats (01:30 on 3 November 2024) fires twice: at 01:30
        // EDT, then at 01:30 EST.
        (
            "TZ=America/New_York 30 1 * * *",
            "2024-11-03T05:00:00Z",
            "2024-11-03T05:30:00Z",
        ),
        (
            "TZ=America/New_York 30 1 * * *",
            "2024-11-03T05:30:00Z",
            "2024-11-03T06:30:00Z",
        ),
        (
            "TZ=America/New_York 30 1 * * *",
            "2024-11-03T06:30:00Z",
            "2024-11-04T06:30:00Z",
        ),
        // Hourly schedules follow absolute hours through the gap.
        (
            "TZ=America/New_York 0 * * * *",
            "2024-03-10T06:30:00Z",
            "2024-03-10T07:00:00Z",
        ),
        // São Paulo skipped midnight of 4 November 2018 (00:00 -03 became 01:00 -02): a
        // schedule for that day starts at its first hour...
        (
            "TZ=America/Sao_Paulo 0 1 4 11 *",
            "2018-11-03T03:00:00Z",
            "2018-11-04T03:00:00Z",
        ),
        // ... and a daily midnight has no such instant that day: the next is the 5th.
        (
            "TZ=America/Sao_Paulo 0 0 * * *",
            "2018-11-03T04:00:00Z",
            "2018-11-05T02:00:00Z",
        ),
        // Half-hour offsets: 08:00 in Kolkata is 02:30Z.
        (
            "CRON_TZ=Asia/Kolkata 0 8 * * *",
            "2024-01-01T00:00:00Z",
            "2024-01-01T02:30:00Z",
        ),
        // A descriptor in a zone.
        (
            "TZ=Europe/Berlin @daily",
            "2024-06-01T00:00:00Z",
            "2024-06-01T22:00:00Z",
        ),
    ];
    for (spec, after, want) in table {
        assert_eq!(
            next(spec, after).as_deref(),
            Some(want),
            "{spec} after {after}"
        );
    }
}

#[test]
fn zones_load_as_gos_load_location_does() {
    assert_eq!(load_location(""), Ok(Tz::UTC));
    assert_eq!(load_location("UTC"), Ok(Tz::UTC));
    assert_eq!(load_location("Europe/Paris"), Ok(Tz::Europe__Paris));
    assert_eq!(load_location("Etc/GMT+5"), Ok(Tz::Etc__GMTPlus5));
    assert_eq!(
        load_location("europe/paris"),
        Err("unknown time zone europe/paris".into())
    );
    assert_eq!(
        load_location("../etc/passwd"),
        Err("time: invalid location name".into())
    );
}

#[test]
fn go_durations() {
    assert_eq!(go_duration("1h30m"), Ok(5_400_000_000_000));
    assert_eq!(go_duration("1.5s"), Ok(1_500_000_000));
    assert_eq!(go_duration("-2m"), Ok(-120_000_000_000));
    assert_eq!(go_duration("0"), Ok(0));
    assert_eq!(go_duration("300ms"), Ok(300_000_000));
    assert_eq!(go_duration(""), Err("time: invalid duration \"\"".into()));
    assert_eq!(
        go_duration(".s"),
        Err("time: invalid duration \".s\"".into())
    );
    assert!(go_duration("9999999999h").is_err());
}
