//! The static pass over a parsed expression: every identifier is a declared variable or a
//! comprehension's own, every function is one the runtime has, a field selected from a value
//! of known shape is one the shape declares, and constructs the interpreter would panic on
//! (message literals, ranges that are not lists or maps) are refused. The same walk types
//! each node as far as the schema allows and estimates the cost of one evaluation (the model
//! is described in the module above).

use std::collections::{BTreeMap, BTreeSet};

use ::cel::common::ast::{operators, Expr, IdedExpr};
use ::cel::common::value::CelVal;

use super::authz::{self, Stage};
use super::MAX_REQUEST_BYTES;

/// What the static pass knows of a value: its shape and, for what has a size, the largest
/// size it can have.
#[derive(Debug, Clone, PartialEq)]
pub enum Ty {
    /// Anything (a field that keeps unknown fields, an int-or-string, an untracked result).
    Dyn,
    Null,
    Bool,
    Int,
    Uint,
    Double,
    String {
        max: u64,
    },
    Bytes {
        max: u64,
    },
    Duration,
    Timestamp,
    List {
        elem: Box<Ty>,
        max: u64,
    },
    /// A map with string keys (an object schema with `additionalProperties`).
    Map {
        value: Box<Ty>,
        max: u64,
    },
    /// An object with declared fields; `open` when it also keeps unknown ones.
    Object {
        fields: BTreeMap<String, Ty>,
        open: bool,
    },
    Optional(Box<Ty>),
    /// A stage of the authorizer library (`authorizer`, its checks and decisions).
    Authz(Stage),
}

impl Ty {
    /// A string no longer than `max` characters, or as long as a request body allows.
    pub fn string(max: Option<u64>) -> Ty {
        Ty::String {
            max: max.unwrap_or(MAX_REQUEST_BYTES),
        }
    }

    /// A list of `elem`, no longer than `max`, or as long as fits in a request body.
    pub fn list(elem: Ty, max: Option<u64>) -> Ty {
        let max = max.unwrap_or(MAX_REQUEST_BYTES / (elem.min_json_bytes() + 1));
        Ty::List {
            elem: Box::new(elem),
            max,
        }
    }

    /// A map of `value` with no more than `max` keys, or as many as fit in a request body.
    pub fn map(value: Ty, max: Option<u64>) -> Ty {
        // The shortest entry is `"":` plus the value plus a comma.
        let max = max.unwrap_or(MAX_REQUEST_BYTES / (value.min_json_bytes() + 4));
        Ty::Map {
            value: Box::new(value),
            max,
        }
    }

    /// The fewest bytes a value of this type takes in a JSON body.
    pub(crate) fn min_json_bytes(&self) -> u64 {
        match self {
            Ty::Bool | Ty::Null => 4,
            Ty::Dyn | Ty::Int | Ty::Uint | Ty::Double => 1,
            _ => 2,
        }
    }

    /// The largest size (elements, keys or characters) a value of this type can have.
    fn size(&self) -> u64 {
        match self {
            Ty::String { max } | Ty::Bytes { max } => *max,
            Ty::List { max, .. } | Ty::Map { max, .. } => *max,
            Ty::Object { fields, open } => {
                if *open {
                    MAX_REQUEST_BYTES / 5
                } else {
                    fields.len() as u64
                }
            }
            Ty::Dyn => MAX_REQUEST_BYTES,
            _ => 1,
        }
    }

    fn name(&self) -> String {
        match self {
            Ty::Dyn => "dyn".into(),
            Ty::Null => "null_type".into(),
            Ty::Bool => "bool".into(),
            Ty::Int => "int".into(),
            Ty::Uint => "uint".into(),
            Ty::Double => "double".into(),
            Ty::String { .. } => "string".into(),
            Ty::Bytes { .. } => "bytes".into(),
            Ty::Duration => "google.protobuf.Duration".into(),
            Ty::Timestamp => "google.protobuf.Timestamp".into(),
            Ty::List { elem, .. } => format!("list({})", elem.name()),
            Ty::Map { value, .. } => format!("map(string, {})", value.name()),
            Ty::Object { .. } => "object".into(),
            Ty::Optional(t) => format!("optional_type({})", t.name()),
            Ty::Authz(stage) => stage.name().into(),
        }
    }

    fn is(&self, other: impl Fn(&Ty) -> bool) -> bool {
        matches!(self, Ty::Dyn) || other(self)
    }
}

/// What the pass found.
pub struct Checked {
    pub cost: u64,
    pub variables: BTreeSet<String>,
    /// The fields selected straight from an environment variable (`variables.name`).
    pub selected: BTreeSet<(String, String)>,
    pub result: Ty,
}

/// Checks `expr` in the environment `env` (variables and their types).
pub fn check(expr: &IdedExpr, env: &[(&str, Ty)]) -> Result<Checked, String> {
    walk(expr, env, false)
}

/// The cost of evaluating `expr` against values whose types are their actual shapes and sizes
/// (`Ty::of_value`): a field the value lacks is `null` there, and what would be a type error
/// is the evaluation's own error, costing one unit here.
pub fn estimate(expr: &IdedExpr, env: &[(&str, Ty)]) -> Result<u64, String> {
    walk(expr, env, true).map(|c| c.cost)
}

fn walk(expr: &IdedExpr, env: &[(&str, Ty)], actual: bool) -> Result<Checked, String> {
    let mut walk = Walk {
        scopes: env
            .iter()
            .map(|(n, t)| (n.to_string(), t.clone()))
            .collect(),
        env: env.iter().map(|(n, _)| n.to_string()).collect(),
        used: BTreeSet::new(),
        selected: BTreeSet::new(),
        depth: 0,
        actual,
    };
    let (cost, result) = walk.expr(expr)?;
    Ok(Checked {
        cost,
        variables: walk.used,
        selected: walk.selected,
        result,
    })
}

/// Nesting past this is refused: the walk and the interpreter both recurse.
const MAX_DEPTH: usize = 100;

struct Walk {
    /// The variables in scope, innermost last.
    scopes: Vec<(String, Ty)>,
    env: BTreeSet<String>,
    used: BTreeSet<String>,
    selected: BTreeSet<(String, String)>,
    depth: usize,
    /// Whether the types are the actual values' (an estimate for one evaluation) rather
    /// than what a schema allows.
    actual: bool,
}

/// A tenth of a unit per character, as kube-apiserver charges string traversal.
fn traverse(ty: &Ty) -> u64 {
    ty.size().div_ceil(10)
}

fn no_overload(function: &str, ty: &Ty) -> String {
    format!(
        "found no matching overload for '{function}' applied to '{}'",
        ty.name()
    )
}

fn undeclared(name: &str) -> String {
    format!("undeclared reference to '{name}' (in container '')")
}

impl Walk {
    fn expr(&mut self, e: &IdedExpr) -> Result<(u64, Ty), String> {
        self.depth += 1;
        if self.depth > MAX_DEPTH {
            return Err(format!(
                "expression nested more than {MAX_DEPTH} levels deep"
            ));
        }
        let out = self.node(e);
        self.depth -= 1;
        out
    }

    fn node(&mut self, e: &IdedExpr) -> Result<(u64, Ty), String> {
        match &e.expr {
            Expr::Literal(v) => Ok((
                1,
                match v {
                    CelVal::Boolean(_) => Ty::Bool,
                    CelVal::Int(_) => Ty::Int,
                    CelVal::UInt(_) => Ty::Uint,
                    CelVal::Double(_) => Ty::Double,
                    CelVal::String(s) => Ty::String {
                        max: s.chars().count() as u64,
                    },
                    CelVal::Bytes(b) => Ty::Bytes {
                        max: b.len() as u64,
                    },
                    CelVal::Null => Ty::Null,
                    _ => Ty::Dyn,
                },
            )),
            Expr::Ident(name) => {
                let Some((_, ty)) = self.scopes.iter().rev().find(|(n, _)| n == name) else {
                    return Err(undeclared(name));
                };
                let ty = ty.clone();
                if self.env.contains(name) {
                    self.used.insert(name.clone());
                }
                Ok((1, ty))
            }
            Expr::Select(select) => {
                if let Expr::Ident(name) = &select.operand.expr {
                    if self.env.contains(name) {
                        self.selected.insert((name.clone(), select.field.clone()));
                    }
                }
                let (cost, ty) = self.expr(&select.operand)?;
                let field = match &ty {
                    Ty::Object { fields, open } => match fields.get(&select.field) {
                        Some(t) => t.clone(),
                        None if self.actual => Ty::Null,
                        None if *open => Ty::Dyn,
                        None => return Err(format!("undefined field '{}'", select.field)),
                    },
                    Ty::Map { value, .. } => (**value).clone(),
                    Ty::Dyn => Ty::Dyn,
                    Ty::Authz(Stage::Authorizer) if select.field == "requestResource" => {
                        Ty::Authz(Stage::ResourceCheck)
                    }
                    _ if self.actual => Ty::Null,
                    other => {
                        return Err(format!(
                            "type '{}' does not support field selection",
                            other.name()
                        ))
                    }
                };
                Ok((cost + 1, if select.test { Ty::Bool } else { field }))
            }
            Expr::List(list) => {
                let mut cost = 1u64;
                let mut elem = None;
                for item in &list.elements {
                    let (c, t) = self.expr(item)?;
                    cost = cost.saturating_add(c);
                    elem.get_or_insert(t);
                }
                Ok((
                    cost,
                    Ty::List {
                        elem: Box::new(elem.unwrap_or(Ty::Dyn)),
                        max: list.elements.len() as u64,
                    },
                ))
            }
            Expr::Map(map) => {
                let mut cost = 1u64;
                for entry in &map.entries {
                    match &entry.expr {
                        ::cel::common::ast::EntryExpr::MapEntry(m) => {
                            cost = cost
                                .saturating_add(self.expr(&m.key)?.0)
                                .saturating_add(self.expr(&m.value)?.0);
                        }
                        ::cel::common::ast::EntryExpr::StructField(_) => {
                            return Err("message construction is not supported".into())
                        }
                    }
                }
                Ok((
                    cost,
                    Ty::Map {
                        value: Box::new(Ty::Dyn),
                        max: map.entries.len() as u64,
                    },
                ))
            }
            Expr::Struct(s) => Err(format!(
                "message construction is not supported ('{}')",
                s.type_name
            )),
            Expr::Unspecified => Err("empty expression".into()),
            Expr::Comprehension(c) => {
                let (range_cost, range) = self.expr(&c.iter_range)?;
                let (n, item) = match &range {
                    Ty::List { elem, max } => (*max, (**elem).clone()),
                    Ty::Map { max, .. } => (*max, Ty::string(None)),
                    Ty::Object { .. } => (range.size(), Ty::string(None)),
                    Ty::Dyn => (MAX_REQUEST_BYTES / 2, Ty::Dyn),
                    _ if self.actual => (0, Ty::Null),
                    other => {
                        return Err(format!(
                            "expression of type '{}' cannot be range of a comprehension (must be list, map, or dynamic)",
                            other.name()
                        ))
                    }
                };
                let (init_cost, init) = self.expr(&c.accu_init)?;
                let accu = match init {
                    // `map` and `filter` grow their result by one element per iteration.
                    Ty::List { max, .. } => Ty::List {
                        elem: Box::new(Ty::Dyn),
                        max: max.saturating_add(n),
                    },
                    other => other,
                };
                self.scopes.push((c.accu_var.clone(), accu.clone()));
                self.scopes.push((c.iter_var.clone(), item));
                if let Some(second) = &c.iter_var2 {
                    self.scopes.push((second.clone(), Ty::Dyn));
                }
                let body = self
                    .expr(&c.loop_cond)
                    .and_then(|(cc, _)| Ok(cc.saturating_add(self.expr(&c.loop_step)?.0)));
                self.scopes
                    .truncate(self.scopes.len() - 1 - usize::from(c.iter_var2.is_some()));
                let result = body.and_then(|b| Ok((b, self.expr(&c.result)?)));
                self.scopes.pop();
                let (body, (result_cost, _)) = result?;
                let cost = range_cost
                    .saturating_add(init_cost)
                    .saturating_add(n.saturating_mul(body))
                    .saturating_add(result_cost)
                    .saturating_add(1);
                Ok((cost, accu))
            }
            Expr::Call(call) => {
                let mut cost = 1u64;
                let mut target = None;
                if let Some(t) = &call.target {
                    // `optional.of(x)` and `optional.none()` name a function, not a variable.
                    if matches!(&t.expr, Expr::Ident(n) if n == "optional") {
                        let mut arg_cost = 0u64;
                        let mut arg_ty = Ty::Dyn;
                        for a in &call.args {
                            let (c, t) = self.expr(a)?;
                            arg_cost = arg_cost.saturating_add(c);
                            arg_ty = t;
                        }
                        return Ok((arg_cost + 1, Ty::Optional(Box::new(arg_ty))));
                    }
                    let (c, t) = self.expr(t)?;
                    cost = cost.saturating_add(c);
                    target = Some(t);
                }
                let mut args = Vec::with_capacity(call.args.len());
                for a in &call.args {
                    let (c, t) = self.expr(a)?;
                    cost = cost.saturating_add(c);
                    args.push(t);
                }
                let (own, ty) = match function(&call.func_name, target.as_ref(), &args) {
                    Ok(found) => found,
                    // A call the values do not fit fails when evaluated, before any work.
                    Err(_) if self.actual => (1, Ty::Null),
                    Err(e) => return Err(e),
                };
                Ok((cost.saturating_add(own), ty))
            }
        }
    }
}

/// The cost of a call beyond its arguments' own, and its result's type.
fn function(name: &str, target: Option<&Ty>, args: &[Ty]) -> Result<(u64, Ty), String> {
    // A function called as `f(x)` or `x.f()` sees the same first operand.
    let mut operands: Vec<&Ty> = target.into_iter().collect();
    operands.extend(args.iter());
    let first = operands.first().copied().cloned().unwrap_or(Ty::Dyn);
    let second = operands.get(1).copied().cloned().unwrap_or(Ty::Dyn);
    let is_string = |t: &Ty| matches!(t, Ty::String { .. });
    let is_list = |t: &Ty| matches!(t, Ty::List { .. });
    if let Some(found) = authz_function(name, &operands) {
        return found;
    }
    let string_fn = |result: Ty| -> Result<(u64, Ty), String> {
        if !first.is(is_string) {
            return Err(no_overload(name, &first));
        }
        Ok((1 + traverse(&first), result))
    };
    Ok(match name {
        operators::LOGICAL_AND
        | operators::LOGICAL_OR
        | operators::LOGICAL_NOT
        | operators::NOT_STRICTLY_FALSE => (0, Ty::Bool),
        operators::CONDITIONAL => (0, second),
        operators::EQUALS | operators::NOT_EQUALS => {
            let size = first.size().min(second.size());
            let cost = if is_string(&first) {
                size.div_ceil(10)
            } else if first.is(|t| matches!(t, Ty::List { .. } | Ty::Map { .. })) {
                size
            } else {
                0
            };
            (cost, Ty::Bool)
        }
        operators::LESS
        | operators::LESS_EQUALS
        | operators::GREATER
        | operators::GREATER_EQUALS => (
            traverse(&first).min(1_000_000) * u64::from(is_string(&first)),
            Ty::Bool,
        ),
        operators::ADD => match (&first, &second) {
            (Ty::String { max: a }, Ty::String { max: b }) => {
                ((a + b).div_ceil(10), Ty::string(Some(a.saturating_add(*b))))
            }
            (Ty::List { elem, max: a }, Ty::List { max: b, .. }) => (
                a.saturating_add(*b),
                Ty::List {
                    elem: elem.clone(),
                    max: a.saturating_add(*b),
                },
            ),
            (Ty::Dyn, other) | (other, Ty::Dyn) if other.is(is_list) => {
                (other.size(), other.clone())
            }
            _ => (0, first),
        },
        operators::SUBSTRACT
        | operators::MULTIPLY
        | operators::DIVIDE
        | operators::MODULO
        | operators::NEGATE => (0, first),
        operators::INDEX | operators::OPT_INDEX => (
            0,
            match &first {
                Ty::List { elem, .. } => (**elem).clone(),
                Ty::Map { value, .. } => (**value).clone(),
                _ => Ty::Dyn,
            },
        ),
        operators::OPT_SELECT => (0, Ty::Optional(Box::new(Ty::Dyn))),
        operators::IN => (if is_list(&second) { second.size() } else { 0 }, Ty::Bool),
        "size" => {
            if !first.is(|t| {
                matches!(
                    t,
                    Ty::String { .. }
                        | Ty::Bytes { .. }
                        | Ty::List { .. }
                        | Ty::Map { .. }
                        | Ty::Object { .. }
                )
            }) {
                return Err(no_overload(name, &first));
            }
            (0, Ty::Int)
        }
        "contains" if first.is(is_list) && !is_string(&first) => (first.size(), Ty::Bool),
        "contains" | "startsWith" | "endsWith" => string_fn(Ty::Bool)?,
        "matches" => {
            let (cost, ty) = string_fn(Ty::Bool)?;
            (cost.saturating_mul(traverse(&second).max(1)), ty)
        }
        "lowerAscii" | "upperAscii" | "trim" => string_fn(Ty::string(Some(first.size())))?,
        "indexOf" | "lastIndexOf" => (
            1 + traverse(&first) + first.size() * u64::from(is_list(&first)),
            Ty::Int,
        ),
        "split" => string_fn(Ty::list(
            Ty::string(Some(first.size())),
            Some(first.size() + 1),
        ))?,
        "replace" => {
            let (cost, _) = string_fn(Ty::Dyn)?;
            // Every character may be replaced by the longest replacement.
            let longest = operands.get(2).map_or(1, |t| t.size()).max(1);
            (cost, Ty::string(Some(first.size().saturating_mul(longest))))
        }
        "substring" | "charAt" => string_fn(Ty::string(Some(first.size())))?,
        "join" => {
            if !first.is(is_list) {
                return Err(no_overload(name, &first));
            }
            (first.size(), Ty::string(None))
        }
        "isSorted" | "sum" | "max" | "min" => (first.size(), Ty::Dyn),
        "string" => (traverse(&first), Ty::string(Some(first.size().max(32)))),
        "int" | "uint" | "double" | "bool" | "dyn" => (
            traverse(&first),
            match name {
                "int" => Ty::Int,
                "uint" => Ty::Uint,
                "double" => Ty::Double,
                "bool" => Ty::Bool,
                _ => first,
            },
        ),
        "bytes" => (traverse(&first), Ty::Bytes { max: first.size() }),
        "duration" => (traverse(&first), Ty::Duration),
        "timestamp" => (traverse(&first), Ty::Timestamp),
        "getFullYear" | "getMonth" | "getDayOfYear" | "getDayOfMonth" | "getDate"
        | "getDayOfWeek" | "getHours" | "getMinutes" | "getSeconds" | "getMilliseconds" => {
            (0, Ty::Int)
        }
        "hasValue" => (0, Ty::Bool),
        "value" | "orValue" => (
            0,
            match first {
                Ty::Optional(t) => *t,
                _ => Ty::Dyn,
            },
        ),
        "or" => (0, first),
        other => return Err(undeclared(other)),
    })
}

/// The authorizer library's member functions: their cost and result on a stage, an error on a
/// stage without them or with arguments that are not strings; `None` for other functions.
fn authz_function(name: &str, operands: &[&Ty]) -> Option<Result<(u64, Ty), String>> {
    let first = operands.first()?;
    let args = &operands[1..];
    let stage = match first {
        Ty::Authz(stage) => *stage,
        // A value of unknown type (a policy variable holding a check) may be a stage.
        Ty::Dyn if authz::FUNCTIONS.contains(&name) => {
            let cost = if name == "check" {
                authz::CHECK_COST
            } else {
                1
            };
            return Some(Ok((cost, Ty::Dyn)));
        }
        _ => return None,
    };
    let Some((arity, result, cost)) = stage.call(name) else {
        return Some(Err(no_overload(name, first)));
    };
    if args.len() != arity
        || !args
            .iter()
            .all(|a| a.is(|t| matches!(t, Ty::String { .. })))
    {
        return Some(Err(no_overload(name, first)));
    }
    let ty = match result {
        authz::Result::Stage(next) => Ty::Authz(next),
        authz::Result::Bool => Ty::Bool,
        authz::Result::String => Ty::string(None),
    };
    Some(Ok((cost, ty)))
}
