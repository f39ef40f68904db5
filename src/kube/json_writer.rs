//! Compact JSON encoding of a `serde_json::Value`, byte-identical to `serde_json::to_vec`, for
//! the hot paths that serialize whole objects (the store stamping each write, the log records).
//!
//! Why not serde_json: its string escaping looks up every byte in a table, one at a time, and
//! object JSON is almost all string bytes that need no escaping. Here a string is scanned a
//! chunk at a time with a branch-free test that the compiler vectorizes, and only a chunk that
//! holds a byte to escape is walked byte by byte. Numbers still go through serde_json (itoa and
//! ryu, exactly as it prints them). The output must stay identical to serde_json's: the store's
//! bytes are what every server compares and what clients receive, and the tests check both
//! encoders on the same inputs.

use serde_json::Value;

/// Bytes tested together for "anything to escape here?".
const CHUNK: usize = 32;

/// `value` as compact JSON.
pub fn to_vec(value: &Value) -> Vec<u8> {
    let mut out = Vec::with_capacity(128);
    write_value(&mut out, value);
    out
}

/// Appends `value` as compact JSON to `out`.
pub fn write_value(out: &mut Vec<u8>, value: &Value) {
    match value {
        Value::Null => out.extend_from_slice(b"null"),
        Value::Bool(true) => out.extend_from_slice(b"true"),
        Value::Bool(false) => out.extend_from_slice(b"false"),
        // Writing into a Vec cannot fail.
        Value::Number(n) => {
            let _ = serde_json::to_writer(&mut *out, n);
        }
        Value::String(s) => write_str(out, s),
        Value::Array(items) => {
            out.push(b'[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                write_value(out, item);
            }
            out.push(b']');
        }
        Value::Object(map) => {
            out.push(b'{');
            for (i, (key, item)) in map.iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                write_str(out, key);
                out.push(b':');
                write_value(out, item);
            }
            out.push(b'}');
        }
    }
}

/// Appends `s` as a JSON string literal, escaped as serde_json escapes it: `"` and `\`, the
/// short escapes `\b \t \n \f \r`, and every other byte below 0x20 as `\u00xx` (lowercase hex).
pub fn write_str(out: &mut Vec<u8>, s: &str) {
    let bytes = s.as_bytes();
    out.reserve(bytes.len() + 2);
    out.push(b'"');
    let mut copied = 0;
    let mut at = 0;
    while at < bytes.len() {
        let end = (at + CHUNK).min(bytes.len());
        let chunk = &bytes[at..end];
        if !chunk.iter().fold(false, |any, &b| any | needs_escape(b)) {
            at = end;
            continue;
        }
        for (offset, &b) in chunk.iter().enumerate() {
            if needs_escape(b) {
                let i = at + offset;
                out.extend_from_slice(&bytes[copied..i]);
                write_escape(out, b);
                copied = i + 1;
            }
        }
        at = end;
    }
    out.extend_from_slice(&bytes[copied..]);
    out.push(b'"');
}

fn needs_escape(b: u8) -> bool {
    (b < 0x20) | (b == b'"') | (b == b'\\')
}

fn write_escape(out: &mut Vec<u8>, b: u8) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let short = match b {
        b'"' => b'"',
        b'\\' => b'\\',
        0x08 => b'b',
        0x09 => b't',
        0x0a => b'n',
        0x0c => b'f',
        0x0d => b'r',
        _ => {
            out.extend_from_slice(&[
                b'\\',
                b'u',
                b'0',
                b'0',
                HEX[usize::from(b >> 4)],
                HEX[usize::from(b & 0xf)],
            ]);
            return;
        }
    };
    out.extend_from_slice(&[b'\\', short]);
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn same_as_serde(value: &Value) {
        let expected = serde_json::to_vec(value).unwrap();
        assert_eq!(
            String::from_utf8_lossy(&to_vec(value)),
            String::from_utf8_lossy(&expected)
        );
    }

    #[test]
    fn every_byte_escapes_as_serde_json_escapes_it() {
        for b in 0u8..0x80 {
            let c = char::from(b);
            for s in [
                c.to_string(),
                format!("a{c}b"),
                format!("{}{c}", "x".repeat(31)),
                format!("{}{c}{}", "x".repeat(32), "y".repeat(40)),
            ] {
                same_as_serde(&Value::String(s));
            }
        }
    }

    #[test]
    fn multibyte_text_and_long_strings_are_copied_unchanged() {
        same_as_serde(&json!(
            "ünïcödé 日本語 🚀 and \"quotes\" \\ \n in the middle"
        ));
        let long: String = (0..5_000)
            .map(|i| match i % 97 {
                0 => '"',
                13 => '\n',
                50 => 'é',
                71 => '\u{1}',
                _ => char::from(b'a' + (i % 26) as u8),
            })
            .collect();
        same_as_serde(&Value::String(long));
        same_as_serde(&Value::String(String::new()));
    }

    #[test]
    fn objects_arrays_and_numbers_match_serde_json() {
        same_as_serde(&json!({
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": "web", "labels": {"app": "web"}, "resourceVersion": "12",
                         "managedFields": [{"fieldsV1": {"f:spec": {"f:replicas": {}}}}]},
            "spec": {"replicas": 3, "paused": false, "ratio": 0.25, "big": 18446744073709551615u64,
                     "neg": -42, "exp": 1.5e300, "tiny": 5e-324, "none": null,
                     "list": [], "empty": {}, "nested": [[1, [2, [3]]], {"a": [true]}]},
        }));
        same_as_serde(&json!([]));
        same_as_serde(&json!(null));
        same_as_serde(&json!(-0.0));
    }

    #[test]
    fn keys_are_escaped_too() {
        same_as_serde(&json!({"a\"b": 1, "c\\d\n": {"\u{1f}": "x"}}));
    }
}
