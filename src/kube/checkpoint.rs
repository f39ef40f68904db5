//! The checkpoint format: a whole store at one resourceVersion, as CRC-framed records
//! (`storage::record`). `objects.wal` starts with one, and Raft snapshots are one, so a single
//! server's data can become a cluster's first snapshot unchanged.
//!
//! ```text
//! record type 1  CHECKPOINT_HEADER  JSON {"format":1,"resourceVersion":N,"objects":COUNT}
//! record type 2  OBJECT             JSON {"key":ObjectKey,"object":<the stored object>}  × COUNT
//! record type 4  CHECKPOINT_END     JSON {"objects":COUNT}
//! ```
//! Type 3 is the `objects.wal` Mutation record, which may follow a checkpoint in that file.
//! A checkpoint without its END record is incomplete and is never loaded.

use serde::{Deserialize, Serialize};

use super::object::{ObjectKey, StoredObject};
use super::store::{stored_from_json, StoreSnapshot};
use crate::storage::record::{self, Decoded};

pub const CHECKPOINT_HEADER: u8 = 1;
pub const OBJECT: u8 = 2;
/// Reserved for `objects.wal`: one Mutation per record.
pub const MUTATION: u8 = 3;
pub const CHECKPOINT_END: u8 = 4;

#[derive(Debug, Serialize, Deserialize)]
struct Header {
    format: u32,
    #[serde(rename = "resourceVersion")]
    resource_version: u64,
    objects: u64,
}

#[derive(Debug, Serialize, Deserialize)]
struct End {
    objects: u64,
}

#[derive(Serialize)]
struct ObjectRecordOut<'a> {
    key: &'a ObjectKey,
    object: &'a serde_json::value::RawValue,
}

#[derive(Deserialize)]
struct ObjectRecordIn<'a> {
    key: ObjectKey,
    #[serde(borrow)]
    object: &'a serde_json::value::RawValue,
}

/// Why a checkpoint could not be read. `offset` is the byte offset of the bad record.
#[derive(Debug, thiserror::Error)]
pub enum CheckpointError {
    #[error("checkpoint record at offset {offset}: {reason}")]
    Corrupt { offset: usize, reason: String },
}

/// Appends the checkpoint records for `snapshot` to `out`.
pub fn encode(snapshot: &StoreSnapshot, out: &mut Vec<u8>) {
    let count = snapshot.len() as u64;
    let header = Header {
        format: 1,
        resource_version: snapshot.resource_version,
        objects: count,
    };
    record::encode_into(out, CHECKPOINT_HEADER, &to_json(&header));
    for object in snapshot.iter() {
        // Stored JSON is always valid JSON, so it is a valid RawValue.
        let raw: &serde_json::value::RawValue = match serde_json::from_slice(&object.json) {
            Ok(raw) => raw,
            Err(_) => continue,
        };
        let rec = ObjectRecordOut {
            key: &object.key,
            object: raw,
        };
        record::encode_into(out, OBJECT, &to_json(&rec));
    }
    record::encode_into(out, CHECKPOINT_END, &to_json(&End { objects: count }));
}

fn to_json<T: Serialize>(value: &T) -> Vec<u8> {
    serde_json::to_vec(value).unwrap_or_default()
}

/// A decoded checkpoint.
pub struct Checkpoint {
    pub resource_version: u64,
    pub objects: Vec<StoredObject>,
    /// Offset just past the END record: where whatever follows the checkpoint starts.
    pub end_offset: usize,
}

/// Reads a checkpoint starting at `offset` of `buf`.
pub fn decode(buf: &[u8], offset: usize) -> Result<Checkpoint, CheckpointError> {
    let corrupt = |offset: usize, reason: String| CheckpointError::Corrupt { offset, reason };
    let (header, mut next) = match record::decode_at(buf, offset) {
        Decoded::Record {
            record_type: CHECKPOINT_HEADER,
            payload,
            next,
        } => {
            let header: Header = serde_json::from_slice(payload)
                .map_err(|e| corrupt(offset, format!("bad header: {e}")))?;
            (header, next)
        }
        Decoded::Record { record_type, .. } => {
            return Err(corrupt(
                offset,
                format!("expected a checkpoint header, found record type {record_type}"),
            ))
        }
        Decoded::End => return Err(corrupt(offset, "no checkpoint header".into())),
        Decoded::Invalid(e) => return Err(corrupt(offset, e.to_string())),
    };
    if header.format != 1 {
        return Err(corrupt(
            offset,
            format!("unknown checkpoint format {}", header.format),
        ));
    }
    let mut objects = Vec::with_capacity(header.objects.min(1 << 20) as usize);
    loop {
        let at = next;
        match record::decode_at(buf, at) {
            Decoded::Record {
                record_type: OBJECT,
                payload,
                next: after,
            } => {
                let rec: ObjectRecordIn = serde_json::from_slice(payload)
                    .map_err(|e| corrupt(at, format!("bad object record: {e}")))?;
                let stored = stored_from_json(rec.key, rec.object.get().as_bytes())
                    .map_err(|e| corrupt(at, e.to_string()))?;
                objects.push(stored);
                next = after;
            }
            Decoded::Record {
                record_type: CHECKPOINT_END,
                payload,
                next: after,
            } => {
                let end: End = serde_json::from_slice(payload)
                    .map_err(|e| corrupt(at, format!("bad end record: {e}")))?;
                if end.objects != header.objects || objects.len() as u64 != header.objects {
                    return Err(corrupt(
                        at,
                        format!(
                            "checkpoint promises {} objects but holds {}",
                            header.objects,
                            objects.len()
                        ),
                    ));
                }
                return Ok(Checkpoint {
                    resource_version: header.resource_version,
                    objects,
                    end_offset: after,
                });
            }
            Decoded::Record { record_type, .. } => {
                return Err(corrupt(
                    at,
                    format!("unexpected record type {record_type} inside a checkpoint"),
                ))
            }
            Decoded::End => {
                return Err(corrupt(at, "checkpoint ends before its END record".into()))
            }
            Decoded::Invalid(e) => return Err(corrupt(at, e.to_string())),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kube::mutation::Mutation;
    use crate::kube::store::{Store, StoreConfig};
    use serde_json::json;

    #[test]
    fn round_trip_restores_identical_state() {
        let store = Store::new(StoreConfig::default());
        for i in 0..20 {
            let key = ObjectKey::new("configmaps", "default", format!("c{i}"));
            let object = json!({"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":format!("c{i}"),"namespace":"default","labels":{"i":i.to_string()}}});
            store
                .apply(Mutation::Create {
                    key,
                    object,
                    requires_open_namespace: false,
                })
                .unwrap();
        }
        let mut buf = Vec::new();
        encode(&store.snapshot(), &mut buf);
        let checkpoint = decode(&buf, 0).unwrap();
        assert_eq!(checkpoint.end_offset, buf.len());
        let restored = Store::new(StoreConfig::default());
        restored.restore(checkpoint.resource_version, checkpoint.objects);
        let a: Vec<_> = store.snapshot().iter().map(|o| (**o).clone()).collect();
        let b: Vec<_> = restored.snapshot().iter().map(|o| (**o).clone()).collect();
        assert_eq!(a, b);
        assert_eq!(restored.resource_version(), 20);
        // A checkpoint cut anywhere is refused.
        for cut in (0..buf.len()).step_by(97) {
            assert!(decode(&buf[..cut], 0).is_err());
        }
    }
}
