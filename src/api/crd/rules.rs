//! `x-kubernetes-validations`: the CEL rules a schema node carries. A rule is compiled when
//! the schema is parsed, so a definition's write refuses a rule that does not compile or
//! costs too much (kube-apiserver's words: `compilation failed: …`, `estimated rule cost
//! exceeds budget by factor of …`), and the served kind keeps the compiled rules for as long
//! as the registry keeps that version of the definition. A custom object's write then
//! evaluates them where the schema holds them, with `self` the value there and, for
//! transition rules (those that use `oldSelf`), `oldSelf` the stored value at the same place
//! (object fields and map entries are matched by key; list items are not matched, so a
//! transition rule under a list's items never runs, unless `optionalOldSelf` lets it run
//! without an old value). Only the nodes whose subtree holds a rule are walked, and a kind
//! without rules never reaches this file.

use std::sync::Arc;

use serde_json::{json, Map, Value};

use super::schema::{not_supported, Additional, Schema};
use crate::api::status::Cause;
use crate::cel::{self, CelError, Program, Runtime, Ty};

const REASONS: &[&str] = &[
    "FieldValueInvalid",
    "FieldValueForbidden",
    "FieldValueRequired",
    "FieldValueDuplicate",
];

/// One `x-kubernetes-validations` entry.
#[derive(Debug, Clone)]
pub struct Rule {
    pub rule: String,
    pub message: String,
    pub message_expression: Option<Arc<Program>>,
    /// The cause reason of a failure (`FieldValueInvalid` unless `reason` says otherwise).
    pub reason: &'static str,
    /// `fieldPath`: where, below the node, a failure is reported.
    pub field_path: String,
    pub optional_old_self: bool,
    /// The compiled rule, or why it could not be (only a definition stored before its rules
    /// were checked can hold one; its objects then get the error instead of the check).
    pub program: Result<Arc<Program>, String>,
}

impl Rule {
    fn transition(&self) -> bool {
        self.program
            .as_ref()
            .is_ok_and(|p| p.variables.contains("oldSelf"))
    }
}

/// The type `self` has at a node: what the schema declares there. At the root (`root`) and
/// in embedded resources, an object also has `apiVersion`, `kind` and `metadata` (whose
/// `name` and `generateName` only are visible).
pub fn ty(s: &Schema, root: bool) -> Ty {
    if s.int_or_string || s.ty.is_none() {
        return Ty::Dyn;
    }
    match s.ty.as_deref() {
        Some("boolean") => Ty::Bool,
        Some("integer") => Ty::Int,
        Some("number") => Ty::Double,
        Some("string") => Ty::string(s.max_length),
        Some("array") => Ty::list(
            s.items.as_deref().map_or(Ty::Dyn, |i| ty(i, false)),
            s.max_items,
        ),
        _ => match &s.additional {
            Additional::Schema(v) => Ty::map(ty(v, false), s.max_properties),
            Additional::Any => Ty::map(Ty::Dyn, s.max_properties),
            Additional::Absent => {
                let mut fields: std::collections::BTreeMap<String, Ty> = s
                    .properties
                    .iter()
                    .map(|(n, p)| (n.clone(), ty(p, false)))
                    .collect();
                if root || s.embedded {
                    for name in ["apiVersion", "kind"] {
                        fields.insert(name.into(), Ty::string(Some(316)));
                    }
                    let meta = [("name", 253), ("generateName", 253)]
                        .into_iter()
                        .map(|(n, max)| (n.to_string(), Ty::string(Some(max))))
                        .collect();
                    fields.insert(
                        "metadata".into(),
                        Ty::Object {
                            fields: meta,
                            open: false,
                        },
                    );
                }
                Ty::Object {
                    fields,
                    open: s.preserve_unknown,
                }
            }
        },
    }
}

/// Reads and compiles the rules `raw` of node `s` at `path`, pushing to `out` every way they
/// are not valid as kube-apiserver words it.
pub fn parse(
    raw: Option<&Value>,
    s: &Schema,
    root: bool,
    path: &str,
    out: &mut Vec<Cause>,
) -> Vec<Rule> {
    let Some(list) = raw.and_then(Value::as_array) else {
        return Vec::new();
    };
    let self_ty = ty(s, root);
    let mut rules = Vec::with_capacity(list.len());
    for (i, entry) in list.iter().enumerate() {
        let at = format!("{path}.x-kubernetes-validations[{i}]");
        let text = |name: &str| {
            entry
                .get(name)
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_string()
        };
        let source = text("rule");
        let optional_old_self = entry.get("optionalOldSelf").and_then(Value::as_bool) == Some(true);
        let old_ty = if optional_old_self {
            Ty::Optional(Box::new(self_ty.clone()))
        } else {
            self_ty.clone()
        };
        let env = [("self", self_ty.clone()), ("oldSelf", old_ty)];
        let reason = match entry.get("reason").and_then(Value::as_str) {
            None | Some("") => "FieldValueInvalid",
            Some(r) => match REASONS.iter().find(|k| **k == r) {
                Some(k) => k,
                None => {
                    out.push(not_supported(&format!("{at}.reason"), &json!(r), REASONS));
                    "FieldValueInvalid"
                }
            },
        };
        let program = if source.trim().is_empty() {
            out.push(Cause::required(&format!("{at}.rule"), ""));
            Err("rule is empty".to_string())
        } else {
            match cel::compile(&source, &env) {
                Ok(p) => {
                    if p.cost > cel::RULE_COST_LIMIT {
                        out.push(Cause::forbidden(
                            &format!("{at}.rule"),
                            &cost_message("estimated rule cost", p.cost, cel::RULE_COST_LIMIT),
                        ));
                    }
                    Ok(Arc::new(p))
                }
                Err(e) => {
                    out.push(Cause::invalid(&format!("{at}.rule"), entry, &e.to_string()));
                    Err(e.to_string())
                }
            }
        };
        let message_expression = match text("messageExpression") {
            m if m.trim().is_empty() => None,
            m => match cel::compile(&m, &env) {
                Ok(p) => {
                    if p.cost > cel::RULE_COST_LIMIT {
                        out.push(Cause::forbidden(
                            &format!("{at}.messageExpression"),
                            &cost_message(
                                "estimated messageExpression cost",
                                p.cost,
                                cel::RULE_COST_LIMIT,
                            ),
                        ));
                    }
                    Some(Arc::new(p))
                }
                Err(e) => {
                    out.push(Cause::invalid(
                        &format!("{at}.messageExpression"),
                        entry,
                        &format!("messageExpression {e}"),
                    ));
                    None
                }
            },
        };
        let field_path = text("fieldPath");
        if !field_path.is_empty() && !field_path.starts_with(['.', '[']) {
            out.push(Cause::invalid(
                &format!("{at}.fieldPath"),
                &json!(field_path),
                "must be a relative path starting with . or [",
            ));
        }
        let rule = Rule {
            rule: source,
            message: text("message"),
            message_expression,
            reason,
            field_path,
            optional_old_self,
            program,
        };
        if optional_old_self && !rule.transition() && rule.program.is_ok() {
            out.push(Cause::invalid(
                &format!("{at}.optionalOldSelf"),
                &json!(true),
                "may not be set if the rule does not reference oldSelf",
            ));
        }
        rules.push(rule);
    }
    rules
}

/// kube-apiserver's words for an estimate over a limit.
pub fn cost_message(what: &str, cost: u64, limit: u64) -> String {
    let factor = cost as f64 / limit as f64;
    let factor = if factor > 100.0 {
        "more than 100x".to_string()
    } else if factor < 1.5 {
        format!("{factor:.6}x")
    } else {
        format!("{factor:.1}x")
    };
    format!("{what} exceeds budget by factor of {factor} (try simplifying the rule, or adding maxItems, maxProperties, and maxLength where arrays, maps, and strings are declared)")
}

/// The estimated cost of every rule of the schema, each times how often it can run for one
/// object (the product of the sizes of the lists and maps above it).
pub fn total_cost(s: &Schema, runs: u64) -> u64 {
    if !s.has_rules {
        return 0;
    }
    let mut total = 0u64;
    for r in &s.validations {
        for p in r.program.iter().chain(r.message_expression.iter()) {
            total = total.saturating_add(p.cost.saturating_mul(runs));
        }
    }
    for p in s.properties.values() {
        total = total.saturating_add(total_cost(p, runs));
    }
    // A node below lists or maps runs once per instance of it in the object: at most the
    // product of the enclosing sizes, and never more than fit in one request body however
    // deeply they nest (kube-apiserver bounds a node's cardinality by the body too, so
    // definitions it accepts with unbounded nested lists are accepted here).
    let instances = |elem: &Ty, n: u64, entry_bytes: u64| {
        let fit = crate::cel::MAX_REQUEST_BYTES / (elem.min_json_bytes() + entry_bytes);
        runs.saturating_mul(n).min(fit)
    };
    if let Some(items) = &s.items {
        let child = match ty(s, false) {
            Ty::List { max, elem } => instances(&elem, max, 1),
            _ => runs,
        };
        total = total.saturating_add(total_cost(items, child));
    }
    if let Additional::Schema(v) = &s.additional {
        let child = match ty(s, false) {
            Ty::Map { max, value } => instances(&value, max, 4),
            _ => runs,
        };
        total = total.saturating_add(total_cost(v, child));
    }
    total
}

/// Evaluates the rules of `schema` over `object` (and `old`, the stored object on update),
/// pushing a cause per failed rule.
pub fn validate(schema: &Schema, object: &Value, old: Option<&Value>) -> Vec<Cause> {
    let mut out = Vec::new();
    if schema.has_rules {
        let runtime = Runtime::default();
        node(&runtime, schema, true, object, old, "", &mut out);
    }
    out
}

fn child_path(path: &str, name: &str) -> String {
    if path.is_empty() {
        name.to_string()
    } else {
        format!("{path}.{name}")
    }
}

fn node(
    rt: &Runtime,
    s: &Schema,
    root: bool,
    value: &Value,
    old: Option<&Value>,
    path: &str,
    out: &mut Vec<Cause>,
) {
    if !s.has_rules || value.is_null() {
        return;
    }
    if !s.validations.is_empty() {
        let self_ty = ty(s, root);
        let this = cel::from_json(&visible(value, root || s.embedded), &self_ty);
        let before = old.map(|o| cel::from_json(&visible(o, root || s.embedded), &self_ty));
        for r in &s.validations {
            check(rt, r, s, &this, before.as_ref(), path, out);
        }
    }
    match value {
        Value::Object(m) => {
            let old_map = old.and_then(Value::as_object);
            for (name, child) in m {
                let schema = match (s.properties.get(name), &s.additional) {
                    (Some(p), _) => p,
                    (None, Additional::Schema(v)) => v,
                    _ => continue,
                };
                if root && matches!(name.as_str(), "apiVersion" | "kind" | "metadata") {
                    continue;
                }
                let before = old_map.and_then(|o| o.get(name));
                node(
                    rt,
                    schema,
                    false,
                    child,
                    before,
                    &child_path(path, name),
                    out,
                );
            }
        }
        Value::Array(items) => {
            if let Some(item) = &s.items {
                for (i, v) in items.iter().enumerate() {
                    node(rt, item, false, v, None, &format!("{path}[{i}]"), out);
                }
            }
        }
        _ => {}
    }
}

/// The value `self` sees: at the root (and in embedded resources) metadata shows only its
/// name and generateName.
fn visible(value: &Value, with_metadata: bool) -> std::borrow::Cow<'_, Value> {
    let Some(meta) = value.get("metadata").filter(|_| with_metadata) else {
        return std::borrow::Cow::Borrowed(value);
    };
    let mut kept = Map::new();
    for key in ["name", "generateName"] {
        if let Some(v) = meta.get(key) {
            kept.insert(key.into(), v.clone());
        }
    }
    let mut copy = value.clone();
    copy["metadata"] = Value::Object(kept);
    std::borrow::Cow::Owned(copy)
}

fn check(
    rt: &Runtime,
    r: &Rule,
    s: &Schema,
    this: &cel::Value,
    old: Option<&cel::Value>,
    path: &str,
    out: &mut Vec<Cause>,
) {
    let type_name = json!(s.ty.clone().unwrap_or_default());
    let program = match &r.program {
        Ok(p) => p,
        Err(e) => {
            out.push(Cause::invalid(
                path,
                &type_name,
                &format!("rule compile error: {e}"),
            ));
            return;
        }
    };
    let transition = r.transition();
    let old_value = match (transition, old, r.optional_old_self) {
        (false, _, _) => None,
        (true, Some(o), false) => Some(o.clone()),
        (true, o, true) => match rt.optional(o.cloned()) {
            Ok(v) => Some(v),
            Err(e) => {
                out.push(Cause::invalid(path, &type_name, &e.to_string()));
                return;
            }
        },
        // A transition rule without an old value (a create, a new key) does not run.
        (true, None, false) => return,
    };
    let mut vars = vec![("self", this.clone())];
    if let Some(o) = old_value {
        vars.push(("oldSelf", o));
    }
    let default_detail = || {
        if r.message.trim().is_empty() {
            format!("failed rule: {}", r.rule.trim())
        } else {
            r.message.trim().to_string()
        }
    };
    match rt.evaluate(program, &vars) {
        Ok(cel::Value::Bool(true)) => {}
        Ok(cel::Value::Bool(false)) => {
            let detail = r
                .message_expression
                .as_ref()
                .and_then(|m| rt.evaluate(m, &vars).ok())
                .and_then(|v| cel::to_message(&v).map(str::to_string))
                .filter(|m| !m.trim().is_empty())
                .unwrap_or_else(default_detail);
            let field = match r.field_path.as_str() {
                "" => path.to_string(),
                p if path.is_empty() => p.trim_start_matches('.').to_string(),
                p => format!("{path}{p}"),
            };
            out.push(match r.reason {
                "FieldValueForbidden" => Cause::forbidden(&field, &detail),
                "FieldValueRequired" => Cause::required(&field, &detail),
                "FieldValueDuplicate" => Cause {
                    reason: "FieldValueDuplicate",
                    message: format!("Duplicate value: {type_name}"),
                    field,
                },
                _ => Cause::invalid(&field, &type_name, &detail),
            });
        }
        Ok(_) => out.push(Cause::invalid(
            path,
            &type_name,
            &format!("rule did not evaluate to a bool: {}", default_detail()),
        )),
        Err(CelError::Eval(e) | CelError::Compile(e)) => out.push(Cause::invalid(
            path,
            &type_name,
            &format!("{e} evaluating rule: {}", default_detail()),
        )),
    }
}
