//! Which parts of a stored object the printers read, and a parser that builds only those.
//!
//! A Table of thousands of objects parses every one of them; most of each object (container
//! specs, volumes, managed fields, uids…) is never looked at by the printer. [`Fields`] names
//! what a printer reads, and [`Selected`] parses an object keeping just that: other keys are
//! skipped without building values. Arrays keep every element (with the element fields
//! selected), so lengths and positions are as in the full object.

use std::fmt;

use serde::de::{DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Value};

/// The part of a JSON value a printer reads.
#[derive(Debug)]
pub enum Fields {
    /// All of it.
    All,
    /// Of an object, only these keys (each with its own selection); of an array, each
    /// element selected so; anything else whole.
    Keys(&'static [(&'static str, Fields)]),
}

impl Fields {
    /// The selection of `key`'s value, `None` when the key is not read.
    pub fn get(&self, key: &str) -> Option<&Fields> {
        match self {
            Fields::All => Some(&Fields::All),
            Fields::Keys(keys) => keys.iter().find(|(k, _)| *k == key).map(|(_, f)| f),
        }
    }
}

/// The metadata fields the printers read (`metadata` of every kind).
pub const METADATA: Fields = Fields::Keys(&[
    ("name", Fields::All),
    ("creationTimestamp", Fields::All),
    ("deletionTimestamp", Fields::All),
    ("labels", Fields::All),
    ("annotations", Fields::All),
    ("ownerReferences", Fields::All),
]);

/// What the Pod printer (normal and wide columns) and its row conditions read, besides
/// metadata.
pub const POD: Fields = Fields::Keys(&[
    (
        "spec",
        Fields::Keys(&[
            (
                "initContainers",
                Fields::Keys(&[("name", Fields::All), ("restartPolicy", Fields::All)]),
            ),
            // Only counted.
            ("containers", Fields::Keys(&[])),
            ("readinessGates", Fields::All),
            ("nodeName", Fields::All),
        ]),
    ),
    ("status", Fields::All),
]);

/// A seed that parses a value keeping only `fields` of it.
#[derive(Clone, Copy)]
pub struct Selected<'f>(pub &'f Fields);

impl<'de> DeserializeSeed<'de> for Selected<'_> {
    type Value = Value;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Value, D::Error> {
        match self.0 {
            Fields::All => serde::Deserialize::deserialize(deserializer),
            Fields::Keys(_) => deserializer.deserialize_any(SelectedVisitor(self.0)),
        }
    }
}

struct SelectedVisitor<'f>(&'f Fields);

/// A map key, and the selection of its value when it is wanted.
struct Key<'f> {
    name: Option<String>,
    fields: Option<&'f Fields>,
}

struct KeySeed<'f>(&'f Fields);

impl<'de, 'f> DeserializeSeed<'de> for KeySeed<'f> {
    type Value = Key<'f>;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Key<'f>, D::Error> {
        deserializer.deserialize_str(self)
    }
}

impl<'f> Visitor<'_> for KeySeed<'f> {
    type Value = Key<'f>;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a string key")
    }

    fn visit_str<E: serde::de::Error>(self, key: &str) -> Result<Key<'f>, E> {
        // Only a wanted key is copied.
        Ok(match self.0.get(key) {
            Some(fields) => Key {
                name: Some(key.to_string()),
                fields: Some(fields),
            },
            None => Key {
                name: None,
                fields: None,
            },
        })
    }
}

impl<'de> Visitor<'de> for SelectedVisitor<'_> {
    type Value = Value;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("any JSON value")
    }

    fn visit_map<M: MapAccess<'de>>(self, mut map: M) -> Result<Value, M::Error> {
        let mut out = Map::new();
        while let Some(key) = map.next_key_seed(KeySeed(self.0))? {
            match (key.name, key.fields) {
                (Some(name), Some(fields)) => {
                    out.insert(name, map.next_value_seed(Selected(fields))?);
                }
                _ => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        Ok(Value::Object(out))
    }

    fn visit_seq<S: SeqAccess<'de>>(self, mut seq: S) -> Result<Value, S::Error> {
        let mut items = Vec::with_capacity(seq.size_hint().unwrap_or(0));
        while let Some(item) = seq.next_element_seed(Selected(self.0))? {
            items.push(item);
        }
        Ok(Value::Array(items))
    }

    fn visit_bool<E>(self, v: bool) -> Result<Value, E> {
        Ok(Value::Bool(v))
    }

    fn visit_i64<E>(self, v: i64) -> Result<Value, E> {
        Ok(Value::from(v))
    }

    fn visit_u64<E>(self, v: u64) -> Result<Value, E> {
        Ok(Value::from(v))
    }

    fn visit_f64<E>(self, v: f64) -> Result<Value, E> {
        Ok(serde_json::Number::from_f64(v).map_or(Value::Null, Value::Number))
    }

    fn visit_str<E>(self, v: &str) -> Result<Value, E> {
        Ok(Value::String(v.to_string()))
    }

    fn visit_string<E>(self, v: String) -> Result<Value, E> {
        Ok(Value::String(v))
    }

    fn visit_unit<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_none<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn select(fields: &Fields, value: &Value) -> Value {
        let text = serde_json::to_string(value).unwrap();
        let mut de = serde_json::Deserializer::from_str(&text);
        Selected(fields).deserialize(&mut de).unwrap()
    }

    #[test]
    fn keeps_only_the_named_keys_at_every_depth_and_every_array_element() {
        const WANT: Fields = Fields::Keys(&[
            ("a", Fields::All),
            ("list", Fields::Keys(&[("name", Fields::All)])),
            ("counted", Fields::Keys(&[])),
        ]);
        let full = json!({
            "a": {"deep": [1, 2.5, null, true, "s"]},
            "b": {"skipped": [1, 2, 3]},
            "list": [{"name": "x", "image": "i"}, {"image": "j"}, 7, "text"],
            "counted": [{"big": "object"}, {"big": "object"}],
            "escaped\"key": 1
        });
        assert_eq!(
            select(&WANT, &full),
            json!({
                "a": {"deep": [1, 2.5, null, true, "s"]},
                "list": [{"name": "x"}, {}, 7, "text"],
                "counted": [{}, {}]
            })
        );
        // A selection over a scalar or null keeps it.
        assert_eq!(select(&WANT, &json!(null)), json!(null));
        assert_eq!(select(&WANT, &json!(u64::MAX)), json!(u64::MAX));
        assert_eq!(select(&WANT, &json!(-3)), json!(-3));
    }
}
