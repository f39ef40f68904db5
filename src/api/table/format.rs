//! Cell formatting shared by the printers: ages (apimachinery `duration.HumanDuration`),
//! timestamps, label sets and field access on raw JSON objects.

use chrono::{DateTime, Utc};
use serde_json::Value;

use crate::kube::selectors::label_selector_string;

/// apimachinery's `duration.HumanDuration`: coarser as the duration grows ("45s", "2m30s",
/// "3h10m", "5d2h", "2y10d"). Up to one second in the future counts as "0s".
pub fn human_duration(d: chrono::Duration) -> String {
    let seconds = d.num_seconds();
    if seconds < -1 {
        return "<invalid>".into();
    } else if seconds < 0 {
        return "0s".into();
    } else if seconds < 60 * 2 {
        return format!("{seconds}s");
    }
    let minutes = seconds / 60;
    if minutes < 10 {
        let s = seconds % 60;
        return if s == 0 {
            format!("{minutes}m")
        } else {
            format!("{minutes}m{s}s")
        };
    } else if minutes < 60 * 3 {
        return format!("{minutes}m");
    }
    let hours = minutes / 60;
    if hours < 8 {
        let m = minutes % 60;
        if m == 0 {
            format!("{hours}h")
        } else {
            format!("{hours}h{m}m")
        }
    } else if hours < 48 {
        format!("{hours}h")
    } else if hours < 24 * 8 {
        let h = hours % 24;
        if h == 0 {
            format!("{}d", hours / 24)
        } else {
            format!("{}d{h}h", hours / 24)
        }
    } else if hours < 24 * 365 * 2 {
        format!("{}d", hours / 24)
    } else if hours < 24 * 365 * 8 {
        let dy = (hours / 24) % 365;
        if dy == 0 {
            format!("{}y", hours / 24 / 365)
        } else {
            format!("{}y{dy}d", hours / 24 / 365)
        }
    } else {
        format!("{}y", hours / 24 / 365)
    }
}

/// Field access by JSON pointer for the printers. `Value::pointer` allocates two strings per
/// token to undo `~0`/`~1` escapes; the printers' pointers are literals without escapes and
/// run for every row of a list, so tokens are looked up as they are (an escaped pointer is
/// handed to `Value::pointer`).
pub trait At {
    fn at(&self, pointer: &str) -> Option<&Value>;
}

impl At for Value {
    fn at(&self, pointer: &str) -> Option<&Value> {
        if pointer.contains('~') {
            return self.pointer(pointer);
        }
        if pointer.is_empty() {
            return Some(self);
        }
        let rest = pointer.strip_prefix('/')?;
        rest.split('/').try_fold(self, |node, token| match node {
            Value::Object(map) => map.get(token),
            Value::Array(items) => {
                // RFC 6901 array indexes: decimal, no leading zeros, no sign.
                let digits = !token.is_empty() && token.bytes().all(|b| b.is_ascii_digit());
                if !digits || (token.len() > 1 && token.starts_with('0')) {
                    return None;
                }
                token.parse::<usize>().ok().and_then(|i| items.get(i))
            }
            _ => None,
        })
    }
}

/// Parses an RFC 3339 timestamp (metav1.Time or MicroTime); `None` when missing or invalid.
pub fn timestamp(value: Option<&Value>) -> Option<DateTime<Utc>> {
    let s = value?.as_str()?;
    DateTime::parse_from_rfc3339(s)
        .ok()
        .map(|t| t.with_timezone(&Utc))
}

/// `translateTimestampSince`: the age of a timestamp, or `<unknown>` when it is unset.
pub fn since(value: Option<&Value>, now: DateTime<Utc>) -> String {
    match timestamp(value) {
        Some(t) => human_duration(now - t),
        None => "<unknown>".into(),
    }
}

/// The AGE cell: time since `metadata.creationTimestamp`.
pub fn age(obj: &Value, now: DateTime<Utc>) -> String {
    since(obj.at("/metadata/creationTimestamp"), now)
}

/// The NAME cell.
pub fn name(obj: &Value) -> &str {
    text(obj, "/metadata/name")
}

/// The string at `pointer`, or "" (Go's zero value) when missing or not a string.
pub fn text<'a>(obj: &'a Value, pointer: &str) -> &'a str {
    obj.at(pointer).and_then(Value::as_str).unwrap_or("")
}

/// The array at `pointer`, or an empty slice.
pub fn array<'a>(obj: &'a Value, pointer: &str) -> &'a [Value] {
    obj.at(pointer)
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or(&[])
}

/// Number of entries of the object or array at `pointer` (0 when missing).
pub fn count(obj: &Value, pointer: &str) -> usize {
    match obj.at(pointer) {
        Some(Value::Object(map)) => map.len(),
        Some(Value::Array(list)) => list.len(),
        _ => 0,
    }
}

/// The integer at `pointer`, or 0.
pub fn int(obj: &Value, pointer: &str) -> i64 {
    obj.at(pointer).and_then(Value::as_i64).unwrap_or(0)
}

/// `labels.FormatLabels`: sorted `k=v` pairs joined by commas, `<none>` when empty.
pub fn labels(obj: &Value, pointer: &str) -> String {
    let Some(map) = obj.at(pointer).and_then(Value::as_object) else {
        return "<none>".into();
    };
    let mut pairs: Vec<String> = map
        .iter()
        .map(|(k, v)| format!("{k}={}", v.as_str().unwrap_or("")))
        .collect();
    if pairs.is_empty() {
        return "<none>".into();
    }
    pairs.sort();
    pairs.join(",")
}

/// `s`, or `<none>` when empty.
pub fn or_none(s: &str) -> String {
    if s.is_empty() {
        "<none>".into()
    } else {
        s.into()
    }
}

/// Joins at most three items, then "a,b,c + N more..." (`listWithMoreString`); an empty list is
/// `empty`.
pub fn list_with_more(items: &[String], empty: &str) -> String {
    const MAX: usize = 3;
    if items.is_empty() {
        return empty.into();
    }
    let shown = items[..items.len().min(MAX)].join(",");
    if items.len() > MAX {
        format!("{shown} + {} more...", items.len() - MAX)
    } else {
        shown
    }
}

/// Container names and images of a pod template, each joined by commas (`layoutContainerCells`).
pub fn containers_and_images(obj: &Value, pointer: &str) -> (String, String) {
    let containers = array(obj, pointer);
    let names: Vec<&str> = containers.iter().map(|c| text(c, "/name")).collect();
    let images: Vec<&str> = containers.iter().map(|c| text(c, "/image")).collect();
    (names.join(","), images.join(","))
}

/// `metav1.FormatLabelSelector`: like [`label_selector_string`], `<none>` when empty and
/// `<error>` when invalid.
pub fn label_selector(selector: Option<&Value>) -> String {
    match label_selector_string(selector) {
        None => "<error>".into(),
        Some(s) if s.is_empty() => "<none>".into(),
        Some(s) => s,
    }
}
