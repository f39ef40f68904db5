//! CEL expressions as kube-apiserver evaluates them in `x-kubernetes-validations`: compiled
//! once, checked against the types the schema gives their variables, bounded in cost, and
//! evaluated against JSON values.
//!
//! - `check`: the static pass (undeclared variables and unknown functions, fields the schema
//!   does not declare, constructs the interpreter cannot run) and the cost estimate;
//! - `value`: JSON values typed by the schema, as CEL values, and back for messages;
//! - `ext`: kube-apiserver's string and list library functions on top of the standard ones;
//! - `authz`: kube-apiserver's authorizer library (the `authorizer` variable of admission
//!   expressions), whose checks a caller answers.
//!
//! **The interpreter** is the `cel` crate of the cel-rust project (MIT, maintained by the
//! project's authors, a parser generated with antlr4rust and no other heavy dependency); it
//! is the one maintained Rust CEL interpreter. It parses and evaluates but has neither a type
//! checker nor cost accounting, so both live here.
//!
//! **The cost bound.** kube-apiserver refuses, when a definition is written, a rule whose
//! estimated cost exceeds [`RULE_COST_LIMIT`] and a schema whose rules together exceed
//! [`TOTAL_COST_LIMIT`], and it stops a rule at run time past a per-call budget. The estimate
//! here ([`check`]) follows the same idea: every expression node costs one unit; a
//! comprehension (`all`, `exists`, `exists_one`, `map`, `filter`) costs its body once per
//! element of the largest list or map its range can hold; string functions cost a tenth of
//! a unit per character of the longest string; concatenation and equality of lists cost
//! their size (so `map` and `filter`, which build their result by concatenation in this
//! interpreter, are charged what they really do). Sizes come from the schema's `maxItems`,
//! `maxLength` and `maxProperties`; where the schema gives none, from the request body limit
//! (3 MiB: a list can hold no more elements than fit in it). A rule is evaluated only on an
//! object that passed the schema's own checks (so those bounds hold) and whose body fitted
//! the limit, so the estimate bounds the work of every evaluation: no run-time counter is
//! needed, and nothing depends on the machine's speed or load. The interpreter panics on a
//! few constructs it does not support; the static pass refuses those it can see and an
//! evaluation is run under `catch_unwind`, so one that slips through is an evaluation error,
//! not a crashed request.

pub mod authz;
mod check;
mod ext;
mod value;

use std::collections::BTreeSet;
use std::panic::{catch_unwind, AssertUnwindSafe};

pub use ::cel::Value;
pub use check::Ty;
pub use value::{from_json, to_message};

/// The largest estimated cost of one rule (kube-apiserver's `StaticEstimatedCostLimit`).
pub const RULE_COST_LIMIT: u64 = 10_000_000;
/// The largest estimated cost of all the rules of one schema, each multiplied by how many
/// times it can run for one object (kube-apiserver's `StaticEstimatedCRDCostLimit`).
pub const TOTAL_COST_LIMIT: u64 = 100_000_000;
/// The request body limit the sizes of unbounded lists, maps and strings are derived from.
pub const MAX_REQUEST_BYTES: u64 = 3 * 1024 * 1024;

/// Why an expression could not be used or did not give a value.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum CelError {
    /// The expression does not parse or does not fit its environment.
    #[error("compilation failed: {0}")]
    Compile(String),
    /// The evaluation failed (no such key, wrong type at run time, …).
    #[error("{0}")]
    Eval(String),
}

/// A compiled expression, with what the static pass learnt about it.
#[derive(Debug)]
pub struct Program {
    program: ::cel::Program,
    /// The estimated cost of one evaluation.
    pub cost: u64,
    /// The environment's variables the expression refers to (e.g. whether it uses `oldSelf`).
    pub variables: BTreeSet<String>,
    /// The fields the expression selects straight from a variable of the environment, as
    /// (variable, field): which of a policy's `variables.name` it reads.
    pub selected: BTreeSet<(String, String)>,
    /// The type of the result, when the static pass knows it.
    pub result: Ty,
}

/// Compiles `source` for an environment of variables with types, e.g. `self` typed from the
/// schema of the node the rule sits on.
pub fn compile(source: &str, env: &[(&str, Ty)]) -> Result<Program, CelError> {
    let program = ::cel::Program::compile(source).map_err(|e| CelError::Compile(e.to_string()))?;
    let checked = check::check(program.expression(), env).map_err(CelError::Compile)?;
    Ok(Program {
        program,
        cost: checked.cost,
        variables: checked.variables,
        selected: checked.selected,
        result: checked.result,
    })
}

impl Program {
    /// The cost of evaluating this program with variables of the types `env` gives, which
    /// are the actual values' shapes and sizes (`Ty::of_value`): a bound computed before an
    /// evaluation whose inputs no schema bounds (admission policies, webhook conditions).
    pub fn estimate(&self, env: &[(&str, Ty)]) -> u64 {
        // The program passed the static check; a failure here can only make the estimate
        // unknown, and an unknown cost is no cost worth refusing.
        check::estimate(self.program.expression(), env).unwrap_or(0)
    }
}

/// The functions of an evaluation: CEL's standard ones and kube-apiserver's libraries. Made
/// once for all the rules one object's validation runs.
pub struct Runtime {
    root: ::cel::Context<'static>,
}

impl Default for Runtime {
    fn default() -> Self {
        let mut root = ::cel::Context::default();
        ext::register(&mut root);
        authz::register(&mut root);
        Runtime { root }
    }
}

impl Runtime {
    /// Evaluates `program` with the given variables.
    pub fn evaluate(&self, program: &Program, vars: &[(&str, Value)]) -> Result<Value, CelError> {
        let mut scope = self.root.new_inner_scope();
        for (name, value) in vars {
            scope.add_variable_from_value(*name, value.clone());
        }
        match catch_unwind(AssertUnwindSafe(|| program.program.execute(&scope))) {
            Ok(Ok(value)) => Ok(value),
            Ok(Err(e)) => Err(CelError::Eval(e.to_string())),
            Err(_) => Err(CelError::Eval(
                "the expression uses a construct the interpreter does not support".into(),
            )),
        }
    }

    /// `optional.none()` or `optional.of(value)`: `oldSelf` of a rule with `optionalOldSelf`.
    pub fn optional(&self, value: Option<Value>) -> Result<Value, CelError> {
        let mut scope = self.root.new_inner_scope();
        let source = match value {
            Some(v) => {
                scope.add_variable_from_value("v", v);
                "optional.of(v)"
            }
            None => "optional.none()",
        };
        let program = ::cel::Program::compile(source).map_err(|e| CelError::Eval(e.to_string()))?;
        program
            .execute(&scope)
            .map_err(|e| CelError::Eval(e.to_string()))
    }
}

#[cfg(test)]
mod tests;
