//! The apimachinery types whose protobuf message and JSON form differ: `Time` and `MicroTime`
//! (RFC 3339 strings), `Duration` (Go duration strings), `resource.Quantity` (its string),
//! `intstr.IntOrString` (a number or a string) and `RawExtension`/`FieldsV1` (embedded JSON).

use serde_json::Value;

use super::wire::{Reader, WireValue};
use super::ProtoError;

/// `Time {1: seconds int64, 2: nanos int32}`. An empty message is Go's zero time, which
/// marshals to JSON `null`; `Time` keeps whole seconds, `MicroTime` six fractional digits.
pub fn time(bytes: &[u8], micro: bool) -> Result<Value, ProtoError> {
    if bytes.is_empty() {
        return Ok(Value::Null);
    }
    let mut seconds = 0i64;
    let mut nanos = 0i64;
    let mut reader = Reader::new(bytes);
    while let Some((tag, wire)) = reader.field()? {
        match (tag, wire) {
            (1, WireValue::Varint(v)) => seconds = v as i64,
            (2, WireValue::Varint(v)) => nanos = i64::from(v as i64 as i32),
            (1 | 2, _) => return Err(ProtoError::malformed("malformed Time")),
            _ => {}
        }
    }
    // Go normalises nanos outside [0, 1e9) into the seconds.
    let seconds = seconds
        .checked_add(nanos.div_euclid(1_000_000_000))
        .ok_or_else(|| ProtoError::malformed("Time out of range"))?;
    let nanos = nanos.rem_euclid(1_000_000_000) as u32;
    let Some(t) = chrono::DateTime::from_timestamp(seconds, nanos) else {
        return Err(ProtoError::malformed("Time out of range"));
    };
    let text = if micro {
        t.format("%Y-%m-%dT%H:%M:%S%.6fZ").to_string()
    } else {
        t.format("%Y-%m-%dT%H:%M:%SZ").to_string()
    };
    Ok(Value::String(text))
}

/// `Duration {1: duration int64 nanoseconds}` → Go's `time.Duration.String()`.
pub fn duration(bytes: &[u8]) -> Result<Value, ProtoError> {
    let mut nanos = 0i64;
    let mut reader = Reader::new(bytes);
    while let Some((tag, wire)) = reader.field()? {
        match (tag, wire) {
            (1, WireValue::Varint(v)) => nanos = v as i64,
            (1, _) => return Err(ProtoError::malformed("malformed Duration")),
            _ => {}
        }
    }
    Ok(Value::String(go_duration(nanos)))
}

/// Go's `time.Duration.String()`: `0s`, `1.5µs`, `2ms`, `1h2m3.5s`.
pub fn go_duration(nanos: i64) -> String {
    if nanos == 0 {
        return "0s".into();
    }
    let sign = if nanos < 0 { "-" } else { "" };
    let n = nanos.unsigned_abs();
    if n < 1_000_000_000 {
        let (unit, scale) = if n < 1_000 {
            ("ns", 1)
        } else if n < 1_000_000 {
            ("µs", 1_000)
        } else {
            ("ms", 1_000_000)
        };
        return format!("{sign}{}{unit}", fraction(n, scale));
    }
    let hours = n / 3_600_000_000_000;
    let minutes = n / 60_000_000_000 % 60;
    let secs = fraction(n % 60_000_000_000, 1_000_000_000);
    let mut out = sign.to_string();
    if hours > 0 {
        out.push_str(&format!("{hours}h{minutes}m"));
    } else if minutes > 0 {
        out.push_str(&format!("{minutes}m"));
    }
    out.push_str(&secs);
    out.push('s');
    out
}

/// `n / scale` with the fractional part's trailing zeros removed.
fn fraction(n: u64, scale: u64) -> String {
    let whole = n / scale;
    let frac = n % scale;
    if frac == 0 {
        return whole.to_string();
    }
    let digits = scale.ilog10() as usize;
    let text = format!("{frac:0digits$}");
    format!("{whole}.{}", text.trim_end_matches('0'))
}

/// `Quantity {1: string}`; a zero Quantity is `"0"`.
pub fn quantity(bytes: &[u8]) -> Result<Value, ProtoError> {
    let mut text = None;
    let mut reader = Reader::new(bytes);
    while let Some((tag, wire)) = reader.field()? {
        match (tag, wire) {
            (1, WireValue::Bytes(b)) => text = Some(String::from_utf8_lossy(b).into_owned()),
            (1, _) => return Err(ProtoError::malformed("malformed Quantity")),
            _ => {}
        }
    }
    Ok(Value::String(
        text.filter(|t| !t.is_empty()).unwrap_or_else(|| "0".into()),
    ))
}

/// `IntOrString {1: type (0 int, 1 string), 2: intVal int32, 3: strVal string}`.
pub fn int_or_string(bytes: &[u8]) -> Result<Value, ProtoError> {
    let mut kind = 0u64;
    let mut int_val = 0i32;
    let mut str_val = String::new();
    let mut reader = Reader::new(bytes);
    while let Some((tag, wire)) = reader.field()? {
        match (tag, wire) {
            (1, WireValue::Varint(v)) => kind = v,
            (2, WireValue::Varint(v)) => int_val = v as i64 as i32,
            (3, WireValue::Bytes(b)) => str_val = String::from_utf8_lossy(b).into_owned(),
            (1..=3, _) => return Err(ProtoError::malformed("malformed IntOrString")),
            _ => {}
        }
    }
    match kind {
        0 => Ok(Value::from(int_val)),
        1 => Ok(Value::String(str_val)),
        other => Err(ProtoError::malformed(format!(
            "IntOrString has unknown type {other}"
        ))),
    }
}

/// `RawExtension`/`FieldsV1 {1: raw bytes}` holding a JSON document (empty → `null`).
/// serde_json's own recursion limit bounds the nesting of the embedded document.
pub fn embedded_json(bytes: &[u8]) -> Result<Value, ProtoError> {
    let mut raw: &[u8] = &[];
    let mut reader = Reader::new(bytes);
    while let Some((tag, wire)) = reader.field()? {
        match (tag, wire) {
            (1, WireValue::Bytes(b)) => raw = b,
            (1, _) => return Err(ProtoError::malformed("malformed embedded object")),
            _ => {}
        }
    }
    if raw.is_empty() {
        return Ok(Value::Null);
    }
    serde_json::from_slice(raw)
        .map_err(|e| ProtoError::malformed(format!("embedded object is not valid JSON: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_match_go() {
        for (nanos, want) in [
            (0, "0s"),
            (1, "1ns"),
            (1_500, "1.5µs"),
            (2_000_000, "2ms"),
            (1_000_000_000, "1s"),
            (90_000_000_000, "1m30s"),
            (3_723_500_000_000, "1h2m3.5s"),
            (3_600_000_000_000, "1h0m0s"),
            (-1_500_000_000, "-1.5s"),
            (100_000_000, "100ms"),
        ] {
            assert_eq!(go_duration(nanos), want, "{nanos}");
        }
    }
}
