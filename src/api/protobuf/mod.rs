//! Kubernetes protobuf request bodies (`application/vnd.kubernetes.protobuf`), decoded into
//! the same JSON value a JSON client would have sent, so everything after body decoding is
//! shared. client-go ≥ 1.32 sends built-in kinds this way.
//!
//! - `envelope`: the `k8s\0` + `runtime.Unknown` wrapper naming apiVersion/kind.
//! - `wire`: the bounded protobuf wire reader.
//! - `descriptor`: the generated per-message field table (`table.json`).
//! - `decode`: message → JSON driven by the table; `special`: apimachinery types' JSON forms.
//!
//! Only decoding exists: responses are always JSON, which every client accepts.

pub(crate) mod decode;
pub(crate) mod descriptor;
pub(crate) mod envelope;
pub(crate) mod special;
pub(crate) mod wire;

#[cfg(test)]
mod tests;

use serde_json::Value;

/// Why a protobuf body could not be decoded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ProtoError {
    /// The bytes are not a well-formed message of the expected type (400).
    #[error("error decoding protobuf request body: {0}")]
    Malformed(String),
    /// The envelope names a kind this server has no protobuf descriptor for (415).
    #[error("no protobuf decoder for kind {kind:?} in {api_version:?}")]
    UnknownKind { api_version: String, kind: String },
}

impl ProtoError {
    pub fn malformed(message: impl Into<String>) -> ProtoError {
        ProtoError::Malformed(message.into())
    }
}

/// Decodes a whole protobuf request body into a JSON object carrying the envelope's
/// apiVersion and kind (the caller checks them against the URL as for JSON bodies).
pub fn decode_body(body: &[u8]) -> Result<Value, ProtoError> {
    let envelope = envelope::parse(body)?;
    if !envelope.content_encoding.is_empty() {
        return Err(ProtoError::malformed(format!(
            "unsupported content encoding {:?}",
            envelope.content_encoding
        )));
    }
    let table = descriptor::Table::embedded();
    let Some(message) = table.kind(&envelope.api_version, &envelope.kind) else {
        return Err(ProtoError::UnknownKind {
            api_version: envelope.api_version,
            kind: envelope.kind,
        });
    };
    let fields = match decode::message(table, message, envelope.raw)? {
        Value::Object(fields) => fields,
        _ => return Err(ProtoError::malformed("the object is not a message")),
    };
    // apiVersion and kind first, as JSON clients write them.
    let mut object = serde_json::Map::new();
    if !envelope.api_version.is_empty() {
        object.insert("apiVersion".into(), Value::String(envelope.api_version));
    }
    if !envelope.kind.is_empty() {
        object.insert("kind".into(), Value::String(envelope.kind));
    }
    object.extend(fields);
    Ok(Value::Object(object))
}
