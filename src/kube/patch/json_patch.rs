//! RFC 6902 JSON Patch: the six operations over a copy of the target, addressed by RFC 6901
//! JSON Pointers. The patch is applied atomically: any failing operation discards all of them.

use serde_json::{Map, Value};

use super::{depth, json_eq, PatchError, MAX_DEPTH};

/// Kubernetes refuses JSON patches with more operations than this (apiserver
/// `maxJSONPatchOperations`); it bounds the work one request can ask for.
const MAX_OPERATIONS: usize = 10_000;

/// One decoded operation.
enum Op {
    Add {
        path: Vec<String>,
        value: Value,
    },
    Remove {
        path: Vec<String>,
    },
    Replace {
        path: Vec<String>,
        value: Value,
    },
    Move {
        from: Vec<String>,
        path: Vec<String>,
    },
    Copy {
        from: Vec<String>,
        path: Vec<String>,
    },
    Test {
        path: Vec<String>,
        value: Value,
    },
}

pub(super) fn apply(target: &Value, patch: &Value) -> Result<Value, PatchError> {
    let Value::Array(ops) = patch else {
        return Err(malformed("a JSON patch must be an array of operations"));
    };
    if ops.len() > MAX_OPERATIONS {
        return Err(malformed(format!(
            "the JSON patch has {} operations, more than the limit of {MAX_OPERATIONS}",
            ops.len()
        )));
    }
    // Decode everything first so a malformed later operation is reported as such even when
    // an earlier one would not apply.
    let ops = ops.iter().map(decode).collect::<Result<Vec<_>, _>>()?;
    let mut doc = target.clone();
    for op in ops {
        apply_op(&mut doc, op)?;
    }
    Ok(doc)
}

fn decode(op: &Value) -> Result<Op, PatchError> {
    let Value::Object(fields) = op else {
        return Err(malformed("a JSON patch operation must be an object"));
    };
    let name = fields
        .get("op")
        .and_then(Value::as_str)
        .ok_or_else(|| malformed("a JSON patch operation needs a string \"op\""))?;
    let pointer = |key: &str| -> Result<Vec<String>, PatchError> {
        let text = fields
            .get(key)
            .and_then(Value::as_str)
            .ok_or_else(|| malformed(format!("operation {name:?} needs a string {key:?}")))?;
        parse_pointer(text)
    };
    let value = || -> Result<Value, PatchError> {
        fields
            .get("value")
            .cloned()
            .ok_or_else(|| malformed(format!("operation {name:?} needs a \"value\"")))
    };
    Ok(match name {
        "add" => Op::Add {
            path: pointer("path")?,
            value: value()?,
        },
        "remove" => Op::Remove {
            path: pointer("path")?,
        },
        "replace" => Op::Replace {
            path: pointer("path")?,
            value: value()?,
        },
        "move" => Op::Move {
            from: pointer("from")?,
            path: pointer("path")?,
        },
        "copy" => Op::Copy {
            from: pointer("from")?,
            path: pointer("path")?,
        },
        "test" => Op::Test {
            path: pointer("path")?,
            value: value()?,
        },
        other => return Err(malformed(format!("unknown JSON patch operation {other:?}"))),
    })
}

/// Splits an RFC 6901 pointer into unescaped reference tokens; "" is the whole document.
fn parse_pointer(text: &str) -> Result<Vec<String>, PatchError> {
    if text.is_empty() {
        return Ok(Vec::new());
    }
    let Some(rest) = text.strip_prefix('/') else {
        return Err(malformed(format!(
            "JSON pointer {text:?} must be empty or start with '/'"
        )));
    };
    rest.split('/')
        .map(|token| {
            let mut out = String::with_capacity(token.len());
            let mut chars = token.chars();
            while let Some(c) = chars.next() {
                if c != '~' {
                    out.push(c);
                    continue;
                }
                match chars.next() {
                    Some('0') => out.push('~'),
                    Some('1') => out.push('/'),
                    _ => {
                        return Err(malformed(format!(
                            "JSON pointer {text:?} has a '~' not followed by '0' or '1'"
                        )))
                    }
                }
            }
            Ok(out)
        })
        .collect()
}

fn apply_op(doc: &mut Value, op: Op) -> Result<(), PatchError> {
    match op {
        Op::Add { path, value } => add(doc, &path, value),
        Op::Remove { path } => remove(doc, &path).map(drop),
        Op::Replace { path, value } => {
            check_result_depth(&path, &value)?;
            *resolve_mut(doc, &path)? = value;
            Ok(())
        }
        Op::Move { from, path } => {
            if from == path {
                // Still required to exist, but moving onto itself changes nothing.
                return resolve(doc, &from).map(drop);
            }
            if path.len() > from.len() && path[..from.len()] == from[..] {
                return Err(not_applicable(format!(
                    "cannot move {} into its own child {}",
                    display(&from),
                    display(&path)
                )));
            }
            let value = remove(doc, &from)?;
            add(doc, &path, value)
        }
        Op::Copy { from, path } => {
            let value = resolve(doc, &from)?.clone();
            add(doc, &path, value)
        }
        Op::Test { path, value } => {
            let actual = resolve(doc, &path)?;
            if json_eq(actual, &value) {
                Ok(())
            } else {
                Err(not_applicable(format!(
                    "test failed: the value at {} is not {value}",
                    display(&path)
                )))
            }
        }
    }
}

fn add(doc: &mut Value, path: &[String], value: Value) -> Result<(), PatchError> {
    check_result_depth(path, &value)?;
    let Some((last, parent_path)) = path.split_last() else {
        *doc = value;
        return Ok(());
    };
    match resolve_mut(doc, parent_path)? {
        Value::Object(map) => {
            map.insert(last.clone(), value);
            Ok(())
        }
        Value::Array(items) => {
            let index = if last == "-" {
                items.len()
            } else {
                array_index(last, items.len(), true, path)?
            };
            items.insert(index, value);
            Ok(())
        }
        _ => Err(not_applicable(format!(
            "cannot add {}: its parent is not an object or array",
            display(path)
        ))),
    }
}

fn remove(doc: &mut Value, path: &[String]) -> Result<Value, PatchError> {
    let Some((last, parent_path)) = path.split_last() else {
        return Err(not_applicable("cannot remove the whole document"));
    };
    match resolve_mut(doc, parent_path)? {
        Value::Object(map) => shift_remove(map, last)
            .ok_or_else(|| not_applicable(format!("{} does not exist", display(path)))),
        Value::Array(items) => {
            let index = array_index(last, items.len(), false, path)?;
            Ok(items.remove(index))
        }
        _ => Err(not_applicable(format!("{} does not exist", display(path)))),
    }
}

/// Removes a key keeping the order of the others, so patched objects read like the input.
fn shift_remove(map: &mut Map<String, Value>, key: &str) -> Option<Value> {
    map.shift_remove(key)
}

fn resolve<'a>(doc: &'a Value, path: &[String]) -> Result<&'a Value, PatchError> {
    let mut current = doc;
    for (i, token) in path.iter().enumerate() {
        current = match current {
            Value::Object(map) => map.get(token),
            Value::Array(items) => items.get(array_index(token, items.len(), false, &path[..=i])?),
            _ => None,
        }
        .ok_or_else(|| not_applicable(format!("{} does not exist", display(&path[..=i]))))?;
    }
    Ok(current)
}

fn resolve_mut<'a>(doc: &'a mut Value, path: &[String]) -> Result<&'a mut Value, PatchError> {
    let mut current = doc;
    for (i, token) in path.iter().enumerate() {
        current = match current {
            Value::Object(map) => map.get_mut(token),
            Value::Array(items) => {
                let index = array_index(token, items.len(), false, &path[..=i])?;
                items.get_mut(index)
            }
            _ => None,
        }
        .ok_or_else(|| not_applicable(format!("{} does not exist", display(&path[..=i]))))?;
    }
    Ok(current)
}

/// Parses an array index token: decimal digits without leading zeros, below `len`, or equal
/// to it when inserting at the end.
fn array_index(
    token: &str,
    len: usize,
    allow_end: bool,
    path: &[String],
) -> Result<usize, PatchError> {
    let well_formed = !token.is_empty()
        && token.bytes().all(|b| b.is_ascii_digit())
        && (token == "0" || !token.starts_with('0'));
    match token.parse::<usize>() {
        Ok(index) if well_formed && (index < len || (allow_end && index == len)) => Ok(index),
        _ => Err(not_applicable(format!(
            "{} is not a valid index into an array of {len} elements",
            display(path)
        ))),
    }
}

/// The document may never grow deeper than `MAX_DEPTH`: every value lands `path.len()`
/// levels down, so checking each insertion keeps the whole document within bounds.
fn check_result_depth(path: &[String], value: &Value) -> Result<(), PatchError> {
    if path.len() + depth(value) > MAX_DEPTH {
        return Err(not_applicable(format!(
            "the patched object would be nested deeper than {MAX_DEPTH} levels"
        )));
    }
    Ok(())
}

fn display(path: &[String]) -> String {
    path.iter()
        .map(|t| format!("/{}", t.replace('~', "~0").replace('/', "~1")))
        .collect()
}

fn malformed(message: impl Into<String>) -> PatchError {
    PatchError::Malformed(message.into())
}

fn not_applicable(message: impl Into<String>) -> PatchError {
    PatchError::NotApplicable(message.into())
}
