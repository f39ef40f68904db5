//! Request bodies: reading with a size limit (413), and decoding JSON or YAML into a
//! `serde_json::Value` with a nesting-depth limit checked on the raw bytes before any
//! recursive parser runs, so a hostile body can never overflow the stack.

use bytes::Bytes;
use http_body_util::{BodyExt, Limited};
use serde_json::Value;

use super::status::ApiError;

/// Largest request body accepted (upstream's limit is 3 MiB too).
pub const MAX_BODY: usize = 3 * 1024 * 1024;

/// Deepest nesting of arrays/objects accepted in a body.
pub const MAX_DEPTH: usize = 100;

/// Reads the whole body, failing with 413 past `MAX_BODY`.
pub async fn read<B>(body: B) -> Result<Bytes, ApiError>
where
    B: hyper::body::Body<Data = Bytes>,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    match Limited::new(body, MAX_BODY).collect().await {
        Ok(collected) => Ok(collected.to_bytes()),
        Err(e) if e.is::<http_body_util::LengthLimitError>() => Err(ApiError::TooLarge(MAX_BODY)),
        Err(e) => Err(ApiError::BadRequest(format!(
            "unable to read request body: {e}"
        ))),
    }
}

/// The encodings a body can arrive in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Encoding {
    Json,
    Yaml,
    /// `application/vnd.kubernetes.protobuf`: object bodies only (see [`super::protobuf`]).
    Protobuf,
}

/// The body's encoding from its Content-Type (media type only); 415 for anything else.
/// A missing Content-Type is treated as JSON, which is also valid YAML.
pub fn encoding(content_type: &str) -> Result<Encoding, ApiError> {
    let media = content_type.split(';').next().unwrap_or("").trim();
    match media {
        "" | "application/json" | "*/*" => Ok(Encoding::Json),
        "application/yaml" | "application/x-yaml" | "text/yaml" => Ok(Encoding::Yaml),
        "application/vnd.kubernetes.protobuf" => Ok(Encoding::Protobuf),
        other => Err(ApiError::UnsupportedMediaType(format!(
            "application/json, application/yaml, application/vnd.kubernetes.protobuf (got {other})"
        ))),
    }
}

/// Checks the nesting depth of a JSON or YAML flow document without recursion. Brackets inside
/// quoted strings do not count. Block-style YAML nesting is bounded by serde_yaml's own limit.
pub fn check_depth(bytes: &[u8], limit: usize) -> Result<(), ApiError> {
    let mut depth = 0usize;
    let mut in_string: Option<u8> = None;
    let mut escaped = false;
    for &b in bytes {
        if let Some(quote) = in_string {
            if escaped {
                escaped = false;
            } else if b == b'\\' && quote == b'"' {
                escaped = true;
            } else if b == quote {
                in_string = None;
            }
            continue;
        }
        match b {
            b'"' => in_string = Some(b'"'),
            b'[' | b'{' => {
                depth += 1;
                if depth > limit {
                    return Err(ApiError::BadRequest(format!(
                        "the request body is nested deeper than {limit} levels"
                    )));
                }
            }
            b']' | b'}' => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    Ok(())
}

/// Decodes a body into a JSON object value.
pub fn decode(bytes: &[u8], encoding: Encoding) -> Result<Value, ApiError> {
    if encoding == Encoding::Protobuf {
        return super::protobuf::decode_body(bytes).map_err(|e| match e {
            super::protobuf::ProtoError::Malformed(_) => ApiError::BadRequest(e.to_string()),
            super::protobuf::ProtoError::UnknownKind { .. } => {
                ApiError::UnsupportedMediaType(format!("application/json, application/yaml ({e})"))
            }
        });
    }
    if bytes.iter().all(u8::is_ascii_whitespace) {
        return Err(ApiError::BadRequest("the request body is empty".into()));
    }
    let text = std::str::from_utf8(bytes)
        .map_err(|e| ApiError::BadRequest(format!("the request body is not valid UTF-8: {e}")))?;
    check_depth(bytes, MAX_DEPTH)?;
    let value: Value = match encoding {
        Encoding::Json => serde_json::from_str(text).map_err(|e| {
            ApiError::BadRequest(format!("error decoding request body as JSON: {e}"))
        })?,
        // Handled above; kept for exhaustiveness.
        Encoding::Protobuf => return Err(ApiError::BadRequest("unexpected protobuf".into())),
        // JSON is YAML: a JSON body (what kubectl and most clients send as apply-patch+yaml)
        // parses many times faster as JSON. Duplicate keys, which serde_json would silently
        // collapse and YAML refuses, keep the YAML path and its error.
        Encoding::Yaml
            if text.trim_start().starts_with('{')
                && super::options::duplicate_fields(bytes).is_empty() =>
        {
            match serde_json::from_str(text) {
                Ok(value) => value,
                Err(_) => yaml_to_json(text)?,
            }
        }
        Encoding::Yaml => yaml_to_json(text)?,
    };
    Ok(value)
}

/// Parses YAML text into the JSON value it denotes.
fn yaml_to_json(text: &str) -> Result<Value, ApiError> {
    let yaml: serde_yaml::Value = serde_yaml::from_str(text)
        .map_err(|e| ApiError::BadRequest(format!("error decoding request body as YAML: {e}")))?;
    serde_json::to_value(yaml)
        .map_err(|e| ApiError::BadRequest(format!("error converting YAML to JSON: {e}")))
}

/// Decodes a body that must be a JSON object (every Kubernetes object and option).
pub fn decode_object(bytes: &[u8], encoding: Encoding) -> Result<Value, ApiError> {
    let value = decode(bytes, encoding)?;
    if value.is_object() {
        Ok(value)
    } else {
        Err(ApiError::BadRequest(
            "the request body must be a JSON object".into(),
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body_util::Full;

    #[tokio::test]
    async fn size_limit() {
        let ok = read(Full::new(Bytes::from(vec![b' '; MAX_BODY]))).await;
        assert_eq!(ok.unwrap().len(), MAX_BODY);
        let big = read(Full::new(Bytes::from(vec![b' '; MAX_BODY + 1]))).await;
        assert_eq!(big.unwrap_err(), ApiError::TooLarge(MAX_BODY));
    }

    #[test]
    fn depth_limit() {
        let deep = format!("{}{}", "[".repeat(100), "]".repeat(100));
        assert!(decode(deep.as_bytes(), Encoding::Json).is_ok());
        let too_deep = "[".repeat(1_000_000);
        assert!(matches!(
            decode(too_deep.as_bytes(), Encoding::Json),
            Err(ApiError::BadRequest(_))
        ));
        assert!(matches!(
            decode(too_deep.as_bytes(), Encoding::Yaml),
            Err(ApiError::BadRequest(_))
        ));
        // Brackets inside strings do not count.
        let quoted = format!("{{\"a\":\"{}\\\"{}\"}}", "[".repeat(500), "{".repeat(500));
        assert!(decode(quoted.as_bytes(), Encoding::Json).is_ok());
        // Deep block-style YAML is stopped by serde_yaml's own recursion limit, not a crash.
        let mut block = String::new();
        for i in 0..5000 {
            block.push_str(&" ".repeat(i));
            block.push_str("a:\n");
        }
        assert!(decode(block.as_bytes(), Encoding::Yaml).is_err());
    }

    #[test]
    fn bad_bodies() {
        assert!(decode(&[0xff, 0xfe], Encoding::Json).is_err());
        assert!(decode(b"", Encoding::Json).is_err());
        assert!(decode(b"{", Encoding::Json).is_err());
        assert!(decode_object(b"[1]", Encoding::Json).is_err());
        let v = decode_object(b"kind: ConfigMap\nmetadata:\n  name: x\n", Encoding::Yaml).unwrap();
        assert_eq!(v["metadata"]["name"], "x");
        // JSON sent as YAML decodes the same either way; duplicate keys stay a YAML error.
        let json = br#"{"kind": "ConfigMap", "metadata": {"name": "x"}, "data": {"n": 1.5}}"#;
        assert_eq!(
            decode_object(json, Encoding::Yaml).unwrap(),
            decode_object(json, Encoding::Json).unwrap()
        );
        assert!(decode(br#"{"a": 1, "a": 2}"#, Encoding::Yaml).is_err());
        // Flow-style YAML that is not JSON still parses (through YAML).
        let flow =
            decode_object(b"{kind: ConfigMap, metadata: {name: y}}", Encoding::Yaml).unwrap();
        assert_eq!(flow["metadata"]["name"], "y");
        assert_eq!(
            encoding("application/json; charset=utf-8").unwrap(),
            Encoding::Json
        );
        assert_eq!(
            encoding("application/vnd.kubernetes.protobuf").unwrap(),
            Encoding::Protobuf
        );
        assert!(encoding("application/vnd.kubernetes.protobuf;stream=watch").is_ok());
        assert!(encoding("application/cbor").is_err());
        assert!(matches!(
            decode_object(b"k8s\0\x0a", Encoding::Protobuf),
            Err(ApiError::BadRequest(_))
        ));
    }
}
