//! kube-apiserver's CEL library functions that the standard environment lacks: the strings
//! extension (`lowerAscii`, `upperAscii`, `trim`, `indexOf`, `lastIndexOf`, `split`,
//! `replace`, `substring`, `charAt`, `join`) and the lists library (`isSorted`, `sum`,
//! `indexOf`, `lastIndexOf`), plus `size` counting a string's code points as CEL defines it
//! (the crate counts bytes).

use std::cmp::Ordering;
use std::sync::Arc;

use ::cel::extractors::{Arguments, This};
use ::cel::{Context, ExecutionError, FunctionContext, Value};

type Result<T> = std::result::Result<T, ExecutionError>;

/// Adds the functions to `ctx` (replacing the crate's `size`).
pub fn register(ctx: &mut Context<'static>) {
    ctx.add_function("size", size);
    ctx.add_function("lowerAscii", lower_ascii);
    ctx.add_function("upperAscii", upper_ascii);
    ctx.add_function("trim", trim);
    ctx.add_function("indexOf", index_of);
    ctx.add_function("lastIndexOf", last_index_of);
    ctx.add_function("split", split);
    ctx.add_function("replace", replace);
    ctx.add_function("substring", substring);
    ctx.add_function(
        "charAt",
        |ftx: &FunctionContext, This(s): This<Arc<String>>, i: i64| -> Result<Value> {
            let len = s.chars().count() as i64;
            if i < 0 || i > len {
                return Err(ftx.error(format!("index out of range: {i}")));
            }
            let c = s
                .chars()
                .nth(i as usize)
                .map(String::from)
                .unwrap_or_default();
            Ok(Value::String(Arc::new(c)))
        },
    );
    ctx.add_function("join", join);
    ctx.add_function(
        "isSorted",
        |ftx: &FunctionContext, This(l): This<Arc<Vec<Value>>>| {
            let mut sorted = true;
            for pair in l.windows(2) {
                match pair[0].partial_cmp(&pair[1]) {
                    Some(Ordering::Greater) => sorted = false,
                    Some(_) => {}
                    None => return Err(ftx.error("list elements are not comparable")),
                }
            }
            Ok(sorted)
        },
    );
    ctx.add_function(
        "sum",
        |ftx: &FunctionContext, This(l): This<Arc<Vec<Value>>>| {
            let mut total = Value::Int(0);
            for (i, v) in l.iter().enumerate() {
                total = match (i, total, v) {
                    (0, _, v) => v.clone(),
                    (_, Value::Int(a), Value::Int(b)) => Value::Int(
                        a.checked_add(*b)
                            .ok_or_else(|| ftx.error("integer overflow"))?,
                    ),
                    (_, Value::UInt(a), Value::UInt(b)) => Value::UInt(
                        a.checked_add(*b)
                            .ok_or_else(|| ftx.error("integer overflow"))?,
                    ),
                    (_, Value::Float(a), Value::Float(b)) => Value::Float(a + b),
                    _ => return Err(ftx.error("sum of values of different types")),
                };
            }
            Ok(total)
        },
    );
}

fn size(ftx: &FunctionContext, This(this): This<Value>) -> Result<i64> {
    Ok(match this {
        Value::String(s) => s.chars().count(),
        Value::List(l) => l.len(),
        Value::Map(m) => m.map.len(),
        Value::Bytes(b) => b.len(),
        other => return Err(ftx.error(format!("no such overload: size({})", other.type_of()))),
    } as i64)
}

fn lower_ascii(This(s): This<Arc<String>>) -> Result<Value> {
    Ok(Value::String(Arc::new(s.to_ascii_lowercase())))
}

fn upper_ascii(This(s): This<Arc<String>>) -> Result<Value> {
    Ok(Value::String(Arc::new(s.to_ascii_uppercase())))
}

fn trim(This(s): This<Arc<String>>) -> Result<Value> {
    Ok(Value::String(Arc::new(s.trim().to_string())))
}

fn split(This(s): This<Arc<String>>, sep: Arc<String>) -> Result<Value> {
    let parts: Vec<Value> = s
        .split(sep.as_str())
        .map(|p| Value::String(Arc::new(p.to_string())))
        .collect();
    Ok(Value::List(Arc::new(parts)))
}

fn replace(This(s): This<Arc<String>>, from: Arc<String>, to: Arc<String>) -> Result<Value> {
    Ok(Value::String(Arc::new(
        s.replace(from.as_str(), to.as_str()),
    )))
}

fn index_of(ftx: &FunctionContext, This(target): This<Value>, arg: Value) -> Result<i64> {
    find(ftx, target, arg, false)
}

fn last_index_of(ftx: &FunctionContext, This(target): This<Value>, arg: Value) -> Result<i64> {
    find(ftx, target, arg, true)
}

fn find(ftx: &FunctionContext, target: Value, arg: Value, last: bool) -> Result<i64> {
    match (target, arg) {
        (Value::String(s), Value::String(sub)) => {
            let found = if last {
                s.rfind(sub.as_str())
            } else {
                s.find(sub.as_str())
            };
            // CEL counts code points, not bytes.
            Ok(found.map_or(-1, |byte| s[..byte].chars().count() as i64))
        }
        (Value::List(l), v) => {
            let found = if last {
                l.iter().rposition(|x| *x == v)
            } else {
                l.iter().position(|x| *x == v)
            };
            Ok(found.map_or(-1, |i| i as i64))
        }
        (t, _) => Err(ftx.error(format!("no such overload: indexOf on {}", t.type_of()))),
    }
}

fn substring(
    ftx: &FunctionContext,
    This(s): This<Arc<String>>,
    Arguments(args): Arguments,
) -> Result<Value> {
    let chars: Vec<char> = s.chars().collect();
    let bound = |i: usize| -> Result<usize> {
        match args.get(i) {
            Some(Value::Int(n)) if *n >= 0 && (*n as usize) <= chars.len() => Ok(*n as usize),
            Some(Value::Int(n)) => Err(ftx.error(format!("index out of range: {n}"))),
            None => Ok(chars.len()),
            Some(_) => Err(ftx.error("substring takes integer indexes")),
        }
    };
    let (start, end) = (bound(0)?, bound(1)?);
    if start > end {
        return Err(ftx.error(format!(
            "invalid substring range. start: {start}, end: {end}"
        )));
    }
    Ok(Value::String(Arc::new(chars[start..end].iter().collect())))
}

fn join(
    ftx: &FunctionContext,
    This(l): This<Arc<Vec<Value>>>,
    Arguments(args): Arguments,
) -> Result<Value> {
    let sep = match args.first() {
        Some(Value::String(s)) => s.as_str().to_string(),
        None => String::new(),
        Some(_) => return Err(ftx.error("join takes a string separator")),
    };
    let mut parts = Vec::with_capacity(l.len());
    for v in l.iter() {
        match v {
            Value::String(s) => parts.push(s.as_str()),
            other => return Err(ftx.error(format!("join of a list holding {}", other.type_of()))),
        }
    }
    Ok(Value::String(Arc::new(parts.join(&sep))))
}
