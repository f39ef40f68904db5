//! The Kubernetes protobuf envelope: the magic `k8s\0` followed by a `runtime.Unknown`
//! message `{1: TypeMeta{1: apiVersion, 2: kind}, 2: raw, 3: contentEncoding, 4: contentType}`
//! whose `raw` is the object's own protobuf encoding.

use super::wire::{Reader, WireValue};
use super::ProtoError;

/// The four bytes every Kubernetes protobuf body starts with.
pub const MAGIC: &[u8; 4] = b"k8s\0";

/// A parsed envelope borrowing the body.
#[derive(Debug, Default, PartialEq)]
pub struct Envelope<'a> {
    pub api_version: String,
    pub kind: String,
    pub raw: &'a [u8],
    pub content_encoding: String,
}

/// Splits a body into its envelope.
pub fn parse(body: &[u8]) -> Result<Envelope<'_>, ProtoError> {
    let Some(rest) = body.strip_prefix(MAGIC) else {
        return Err(ProtoError::malformed(
            "the body does not start with the Kubernetes protobuf magic number",
        ));
    };
    let mut envelope = Envelope::default();
    let mut reader = Reader::new(rest);
    while let Some((tag, wire)) = reader.field()? {
        match (tag, wire) {
            (1, WireValue::Bytes(type_meta)) => {
                let mut inner = Reader::new(type_meta);
                while let Some((tag, wire)) = inner.field()? {
                    match (tag, wire) {
                        (1, WireValue::Bytes(b)) => envelope.api_version = text(b)?,
                        (2, WireValue::Bytes(b)) => envelope.kind = text(b)?,
                        (1 | 2, _) => return Err(ProtoError::malformed("malformed TypeMeta")),
                        _ => {}
                    }
                }
            }
            (2, WireValue::Bytes(raw)) => envelope.raw = raw,
            (3, WireValue::Bytes(b)) => envelope.content_encoding = text(b)?,
            (4, WireValue::Bytes(_)) => {}
            (1..=4, _) => {
                return Err(ProtoError::malformed("malformed protobuf envelope"));
            }
            _ => {}
        }
    }
    Ok(envelope)
}

fn text(bytes: &[u8]) -> Result<String, ProtoError> {
    String::from_utf8(bytes.to_vec())
        .map_err(|_| ProtoError::malformed("protobuf envelope text is not valid UTF-8"))
}
