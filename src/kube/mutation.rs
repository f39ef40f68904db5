//! `Mutation`: the self-contained description of one change to the store.
//!
//! Every write — from an API handler, a controller, or replayed from `objects.wal` or the Raft
//! log — becomes a Mutation. It carries everything `Store::apply` needs to decide the outcome
//! (the full new object and the precondition), so applying the same sequence of Mutations to
//! the same starting state gives byte-identical results on every server. Anything
//! non-deterministic (uid, timestamps, generated names, allocated IPs, defaults) is decided
//! before the Mutation is built.
//!
//! The wire form (WAL records, Raft entries, snapshots) is the serde JSON encoding of these
//! types; field names are part of the on-disk format and must not be renamed.

use serde::{Deserialize, Serialize};

use super::object::ObjectKey;

/// One change to one object.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "lowercase")]
pub enum Mutation {
    /// Store a new object; fails with `AlreadyExists` if the key is taken.
    Create {
        key: ObjectKey,
        object: serde_json::Value,
        /// Fails with `NamespaceNotOpen` unless the key's namespace exists and is not being
        /// deleted when this applies: a create checked against the state it commits into,
        /// not against the proposer's copy of the store (see `api::barrier`). Absent (false)
        /// in entries written before it existed, which replay as they applied then.
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        requires_open_namespace: bool,
    },
    /// Replace an existing object; fails with `NotFound` if it is missing and `Conflict` if a
    /// precondition does not hold.
    Update {
        key: ObjectKey,
        object: serde_json::Value,
        #[serde(default)]
        precondition: Precondition,
    },
    /// Remove an object; the DELETED event carries its last state at the new resourceVersion.
    Delete {
        key: ObjectKey,
        #[serde(default)]
        precondition: Precondition,
    },
}

impl Mutation {
    pub fn key(&self) -> &ObjectKey {
        match self {
            Mutation::Create { key, .. }
            | Mutation::Update { key, .. }
            | Mutation::Delete { key, .. } => key,
        }
    }

    /// Encodes for a WAL record, Raft entry or snapshot.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(128);
        self.write_json(&mut out);
        out
    }

    /// Appends the same JSON as serde's encoding of `self`, with the object (nearly all of the
    /// bytes) written by `json_writer` instead of serde_json.
    pub fn write_json(&self, out: &mut Vec<u8>) {
        self.write_json_with(out, None);
    }

    /// `write_json`, with the object's JSON copied from `object_json` when given: the
    /// caller vouches that it is the encoding of this Mutation's object
    /// (`prepared_object::PreparedObject` built from it).
    pub fn write_json_with(&self, out: &mut Vec<u8>, object_json: Option<&[u8]>) {
        let write_object = |out: &mut Vec<u8>, object: &serde_json::Value| match object_json {
            Some(json) => out.extend_from_slice(json),
            None => super::json_writer::write_value(out, object),
        };
        // Serializing these plain data types into a Vec cannot fail.
        match self {
            Mutation::Create {
                key,
                object,
                requires_open_namespace,
            } => {
                out.extend_from_slice(br#"{"op":"create","key":"#);
                let _ = serde_json::to_writer(&mut *out, key);
                out.extend_from_slice(br#","object":"#);
                write_object(out, object);
                if *requires_open_namespace {
                    out.extend_from_slice(br#","requires_open_namespace":true"#);
                }
            }
            Mutation::Update {
                key,
                object,
                precondition,
            } => {
                out.extend_from_slice(br#"{"op":"update","key":"#);
                let _ = serde_json::to_writer(&mut *out, key);
                out.extend_from_slice(br#","object":"#);
                write_object(out, object);
                out.extend_from_slice(br#","precondition":"#);
                let _ = serde_json::to_writer(&mut *out, precondition);
            }
            Mutation::Delete { .. } => {
                let _ = serde_json::to_writer(&mut *out, self);
                return;
            }
        }
        out.push(b'}');
    }

    /// Decodes what `encode` wrote.
    pub fn decode(bytes: &[u8]) -> Result<Mutation, serde_json::Error> {
        serde_json::from_slice(bytes)
    }
}

/// What must hold for an Update or Delete to apply.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Precondition {
    /// The object must currently be at exactly this resourceVersion.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resource_version: Option<u64>,
    /// The object must currently have this uid (DeleteOptions.preconditions.uid, and guards
    /// against acting on a recreated object of the same name).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uid: Option<String>,
}

impl Precondition {
    pub fn none() -> Self {
        Precondition::default()
    }

    pub fn at(resource_version: u64) -> Self {
        Precondition {
            resource_version: Some(resource_version),
            uid: None,
        }
    }
}

/// Why a Mutation did not apply. These are expected outcomes, decided identically on every
/// server; the API layer turns them into Kubernetes `Status` responses.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, thiserror::Error)]
pub enum ApplyError {
    #[error("{0} already exists")]
    AlreadyExists(ObjectKey),
    #[error("{0} not found")]
    NotFound(ObjectKey),
    /// The precondition named a resourceVersion or uid the object no longer has.
    #[error("{key} has been modified (now at resourceVersion {current})")]
    Conflict { key: ObjectKey, current: u64 },
    /// The object in the Mutation is unusable (not a JSON object, no metadata). Handlers
    /// validate before building Mutations, so this only guards the store itself.
    #[error("invalid object for {key}: {reason}")]
    Invalid { key: ObjectKey, reason: String },
    /// A Create that `requires_open_namespace` found its namespace missing or being deleted.
    #[error("{0}: its namespace does not exist or is being deleted")]
    NamespaceNotOpen(ObjectKey),
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// The hand-written encoding is the on-disk and on-wire format: it must stay exactly what
    /// serde writes for these types, and decode back to the same Mutation.
    #[test]
    fn write_json_is_byte_identical_to_serde_and_round_trips() {
        let key = ObjectKey::new("configmaps", "ns \"quoted\"", "cm-1");
        let object = json!({
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "cm-1", "namespace": "ns \"quoted\"", "resourceVersion": "7"},
            "data": {"text": "line1\nline2\t\u{1}é", "n": 3, "f": 0.5, "b": true, "z": null},
        });
        let mutations = [
            Mutation::Create {
                key: key.clone(),
                object: object.clone(),
                requires_open_namespace: false,
            },
            Mutation::Create {
                key: key.clone(),
                object: object.clone(),
                requires_open_namespace: true,
            },
            Mutation::Update {
                key: key.clone(),
                object: object.clone(),
                precondition: Precondition::none(),
            },
            Mutation::Update {
                key: key.clone(),
                object,
                precondition: Precondition {
                    resource_version: Some(7),
                    uid: Some("u-1".into()),
                },
            },
            Mutation::Delete {
                key: key.clone(),
                precondition: Precondition::at(9),
            },
            Mutation::Delete {
                key,
                precondition: Precondition::none(),
            },
        ];
        for mutation in mutations {
            let encoded = mutation.encode();
            assert_eq!(
                String::from_utf8_lossy(&encoded),
                String::from_utf8_lossy(&serde_json::to_vec(&mutation).unwrap())
            );
            assert_eq!(Mutation::decode(&encoded).unwrap(), mutation);
        }
    }
}
