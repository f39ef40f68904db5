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
