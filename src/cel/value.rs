//! JSON values as CEL values, typed by what the schema says of them (an integer field is an
//! `int`, a `number` field a `double` even when the JSON number is integral), and CEL values
//! back to the text of a message.

use std::collections::HashMap;
use std::sync::Arc;

use ::cel::objects::{Key, Map};
use serde_json::Value as Json;

use super::{Ty, Value};

/// `json` as a CEL value of type `ty` (`Ty::Dyn` where the schema says nothing).
pub fn from_json(json: &Json, ty: &Ty) -> Value {
    match json {
        Json::Null => Value::Null,
        Json::Bool(b) => Value::Bool(*b),
        Json::Number(n) => match (ty, n.as_i64()) {
            (Ty::Double, _) | (_, None) => Value::Float(n.as_f64().unwrap_or(0.0)),
            (_, Some(i)) => Value::Int(i),
        },
        Json::String(s) => Value::String(Arc::new(s.clone())),
        Json::Array(items) => {
            let elem = match ty {
                Ty::List { elem, .. } => elem,
                _ => &Ty::Dyn,
            };
            Value::List(Arc::new(items.iter().map(|i| from_json(i, elem)).collect()))
        }
        Json::Object(m) => {
            let map: HashMap<Key, Value> = m
                .iter()
                .map(|(k, v)| {
                    let child = match ty {
                        Ty::Object { fields, .. } => fields.get(k).unwrap_or(&Ty::Dyn),
                        Ty::Map { value, .. } => value,
                        _ => &Ty::Dyn,
                    };
                    (Key::String(Arc::new(k.clone())), from_json(v, child))
                })
                .collect();
            Value::Map(Map { map: Arc::new(map) })
        }
    }
}

/// The text of a `messageExpression`'s result: only a string is a message.
pub fn to_message(value: &Value) -> Option<&str> {
    match value {
        Value::String(s) => Some(s.as_str()),
        _ => None,
    }
}

impl Ty {
    /// The shape and sizes of `value` itself, for [`super::Program::estimate`]: a list's
    /// elements take the largest sizes any of them has, a map with string keys is an object
    /// with exactly its keys.
    pub fn of_value(value: &Value) -> Ty {
        if let Some(stage) = super::authz::stage_of(value) {
            return Ty::Authz(stage);
        }
        match value {
            Value::Null => Ty::Null,
            Value::Bool(_) => Ty::Bool,
            Value::Int(_) => Ty::Int,
            Value::UInt(_) => Ty::Uint,
            Value::Float(_) => Ty::Double,
            Value::String(s) => Ty::String {
                max: s.chars().count() as u64,
            },
            Value::Bytes(b) => Ty::Bytes {
                max: b.len() as u64,
            },
            Value::Duration(_) => Ty::Duration,
            Value::Timestamp(_) => Ty::Timestamp,
            Value::List(items) => Ty::List {
                elem: Box::new(
                    items
                        .iter()
                        .map(Ty::of_value)
                        .reduce(widest)
                        .unwrap_or(Ty::Null),
                ),
                max: items.len() as u64,
            },
            Value::Map(m) => {
                let mut fields = std::collections::BTreeMap::new();
                let mut other = None;
                for (k, v) in m.map.iter() {
                    match k {
                        Key::String(name) => {
                            fields.insert(name.to_string(), Ty::of_value(v));
                        }
                        _ => {
                            let ty = Ty::of_value(v);
                            other = Some(match other {
                                None => ty,
                                Some(o) => widest(o, ty),
                            });
                        }
                    }
                }
                match other {
                    None => Ty::Object {
                        fields,
                        open: false,
                    },
                    Some(value) => Ty::Map {
                        value: Box::new(fields.into_values().fold(value, widest)),
                        max: m.map.len() as u64,
                    },
                }
            }
            _ => Ty::Dyn,
        }
    }
}

/// A type covering both `a` and `b`, with the larger of their sizes.
fn widest(a: Ty, b: Ty) -> Ty {
    match (a, b) {
        (a, b) if a == b => a,
        (Ty::Null, t) | (t, Ty::Null) => t,
        (Ty::String { max: a }, Ty::String { max: b }) => Ty::String { max: a.max(b) },
        (Ty::Bytes { max: a }, Ty::Bytes { max: b }) => Ty::Bytes { max: a.max(b) },
        (Ty::List { elem: a, max: m }, Ty::List { elem: b, max: n }) => Ty::List {
            elem: Box::new(widest(*a, *b)),
            max: m.max(n),
        },
        (Ty::Map { value: a, max: m }, Ty::Map { value: b, max: n }) => Ty::Map {
            value: Box::new(widest(*a, *b)),
            max: m.max(n),
        },
        (Ty::Object { fields: mut a, .. }, Ty::Object { fields: b, .. }) => {
            for (name, ty) in b {
                let merged = match a.remove(&name) {
                    Some(t) => widest(t, ty),
                    None => ty,
                };
                a.insert(name, merged);
            }
            Ty::Object {
                fields: a,
                open: false,
            }
        }
        _ => Ty::Dyn,
    }
}
