//! CEL in admission: webhook `matchConditions` and the expressions of
//! ValidatingAdmissionPolicies, compiled when their configuration is written (kube-apiserver's
//! checks and messages, 422) and evaluated against one write.
//!
//! The variables are kube-apiserver's: `object` and `oldObject` (null on a deletion and on a
//! create), `request` (the AdmissionRequest without the objects), and for policies `params`,
//! `namespaceObject` and `variables`; and `authorizer` (with `authorizer.requestResource`),
//! kube-apiserver's authorizer library (`cel::authz`), whose checks [`RequestAuthorizer`]
//! answers with the server's authorizer for the user who sent the write.
//!
//! **Cost.** These expressions see objects no schema bounds, so the static estimate the CEL
//! engine makes for `x-kubernetes-validations` would refuse ordinary policies. Instead, every
//! evaluation is estimated first against the shapes and sizes of the values it is given
//! (`cel::Program::estimate`, an upper bound of the work) and refused, as an evaluation
//! error, above kube-apiserver's per-expression limit; the evaluations of one policy share
//! kube-apiserver's per-evaluation budget. The bound depends only on the values, not on the
//! machine.

use std::sync::Arc;

use serde_json::{json, Value};

use crate::api::request::ApiRequest;
use crate::api::status::Cause;
use crate::api::validation::{is_dns1123_label, is_dns1123_subdomain};
use crate::auth::attributes::RequestInfo;
use crate::auth::rbac::{Authorizer, Decision as AuthzDecision};
use crate::auth::user::{service_account_user, UserInfo};
use crate::cel::authz::{self, Authorize, Query, Target, Verdict};
use crate::cel::{self, Program, Runtime, Ty, Value as CelValue};

/// kube-apiserver's limit of matchConditions per webhook or policy.
pub const MAX_MATCH_CONDITIONS: usize = 64;
/// The largest cost of one expression's evaluation (kube-apiserver's `PerCallLimit`).
pub const PER_CALL_LIMIT: u64 = 1_000_000;
/// The largest cost of all the evaluations of one policy for one write
/// (kube-apiserver's `RuntimeCELCostBudget`).
pub const RUNTIME_COST_BUDGET: u64 = 10_000_000;

/// What an expression must give.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Returns {
    Bool,
    String,
    /// A variable: anything.
    Any,
}

/// The variables of a webhook's matchConditions.
pub fn webhook_env() -> Vec<(String, Ty)> {
    let mut env: Vec<(String, Ty)> = ["object", "oldObject", "request"]
        .into_iter()
        .map(|n| (n.to_string(), Ty::Dyn))
        .collect();
    env.push(("authorizer".into(), Ty::Authz(authz::Stage::Authorizer)));
    env
}

/// The variables of a policy's expressions; `variables` names the policy's own variables (an
/// expression may name those declared before it; the caller passes those).
pub fn policy_env(variables: &[String]) -> Vec<(String, Ty)> {
    let mut env = webhook_env();
    env.push(("params".into(), Ty::Dyn));
    env.push(("namespaceObject".into(), Ty::Dyn));
    env.push((
        "variables".into(),
        Ty::Object {
            fields: variables.iter().map(|v| (v.clone(), Ty::Dyn)).collect(),
            open: false,
        },
    ));
    env
}

/// Compiles `source` in `env`; the detail of kube-apiserver's `Invalid value` when it does not.
pub fn compile(
    source: &str,
    env: &[(String, Ty)],
    returns: Returns,
) -> Result<Arc<Program>, String> {
    let env: Vec<(&str, Ty)> = env.iter().map(|(n, t)| (n.as_str(), t.clone())).collect();
    let program = cel::compile(source, &env).map_err(|e| e.to_string())?;
    let fits = match (returns, &program.result) {
        (Returns::Any, _) | (_, Ty::Dyn) => true,
        (Returns::Bool, t) => *t == Ty::Bool,
        (Returns::String, t) => matches!(t, Ty::String { .. }),
    };
    if !fits {
        return Err(match returns {
            Returns::String => "must evaluate to string".into(),
            _ => "must evaluate to bool".into(),
        });
    }
    Ok(Arc::new(program))
}

/// One compiled matchCondition.
#[derive(Debug, Clone)]
pub struct Condition {
    pub name: String,
    pub program: Arc<Program>,
}

/// kube-apiserver's `validateMatchConditions`: at most 64, each with a unique qualified name
/// and an expression that compiles and gives a bool. The conditions that compiled come back.
pub fn match_conditions(
    list: Option<&Value>,
    path: &str,
    env: &[(String, Ty)],
    causes: &mut Vec<Cause>,
) -> Vec<Condition> {
    let Some(list) = list.filter(|v| !v.is_null()) else {
        return Vec::new();
    };
    let Some(items) = list.as_array() else {
        causes.push(Cause::invalid(path, list, "must be a list"));
        return Vec::new();
    };
    if items.len() > MAX_MATCH_CONDITIONS {
        causes.push(Cause {
            reason: "FieldValueTooMany",
            field: path.to_string(),
            message: format!(
                "Too many: {}: must have at most {MAX_MATCH_CONDITIONS} items",
                items.len()
            ),
        });
    }
    let mut names = std::collections::HashSet::new();
    let mut out = Vec::new();
    for (i, item) in items.iter().enumerate() {
        let at = format!("{path}[{i}]");
        let name = item.get("name").and_then(Value::as_str).unwrap_or("");
        if name.is_empty() {
            causes.push(Cause::required(&format!("{at}.name"), ""));
        } else if let Some(problem) = crate::api::validation::qualified_name_problem(name) {
            causes.push(Cause::invalid(
                &format!("{at}.name"),
                &json!(name),
                &problem,
            ));
        } else if !names.insert(name) {
            causes.push(Cause {
                reason: "FieldValueDuplicate",
                field: format!("{at}.name"),
                message: format!("Duplicate value: {name:?}"),
            });
        }
        let expression = item.get("expression").and_then(Value::as_str).unwrap_or("");
        if expression.trim().is_empty() {
            causes.push(Cause::required(&format!("{at}.expression"), ""));
            continue;
        }
        match compile(expression, env, Returns::Bool) {
            Ok(program) => out.push(Condition {
                name: name.to_string(),
                program,
            }),
            Err(detail) => causes.push(Cause::invalid(
                &format!("{at}.expression"),
                &json!(expression),
                &detail,
            )),
        }
    }
    out
}

/// The conditions of a stored configuration (validated when written), without the checks.
pub fn read_conditions(list: Option<&Value>, env: &[(String, Ty)]) -> Vec<Condition> {
    let mut ignored = Vec::new();
    match_conditions(list, "", env, &mut ignored)
}

/// What the matchConditions of one webhook or policy decided.
#[derive(Debug, Clone, PartialEq)]
pub enum Decision {
    /// Every condition is true.
    Match,
    /// This condition is false.
    NoMatch { condition: String },
    /// This condition could not be evaluated (the failurePolicy decides).
    Error { condition: String, error: String },
}

/// The variables of one evaluation, with the shapes their costs are estimated from.
pub struct Activation {
    runtime: Runtime,
    vars: Vec<(String, CelValue)>,
    types: Vec<(String, Ty)>,
    /// What is left of the budget of the evaluations sharing this activation.
    budget: u64,
}

impl Activation {
    /// `object`, `oldObject` and `request` of a write.
    pub fn new(request: &Value, object: Option<&Value>, old: Option<&Value>) -> Activation {
        let mut activation = Activation {
            runtime: Runtime::default(),
            vars: Vec::new(),
            types: Vec::new(),
            budget: RUNTIME_COST_BUDGET,
        };
        activation.set("object", object.unwrap_or(&Value::Null));
        activation.set("oldObject", old.unwrap_or(&Value::Null));
        activation.set("request", request);
        activation
    }

    /// Sets (or replaces) the variable `name` to `value`.
    pub fn set(&mut self, name: &str, value: &Value) {
        self.set_value(name, cel::from_json(value, &Ty::Dyn));
    }

    /// Sets `authorizer`: checks answered for the user who sent `req`, its `requestResource`
    /// the resource `req` writes (`name` and `namespace` of the object written).
    pub fn set_authorizer(&mut self, req: &ApiRequest, name: &str, namespace: &str) {
        let info = req.info();
        let request = authz::Resource {
            group: info.group.to_string(),
            resource: info.plural.to_string(),
            subresource: req.target.subresource.clone().unwrap_or_default(),
            namespace: namespace.to_string(),
            name: name.to_string(),
        };
        let answer = Arc::new(RequestAuthorizer {
            authorizer: req.ctx.authorizer.clone(),
            user: req.user.clone(),
        });
        self.set_value("authorizer", authz::variable(answer, request));
    }

    /// Sets (or replaces) the variable `name` to a CEL value.
    pub fn set_value(&mut self, name: &str, value: CelValue) {
        let ty = Ty::of_value(&value);
        self.vars.retain(|(n, _)| n != name);
        self.types.retain(|(n, _)| n != name);
        self.vars.push((name.to_string(), value));
        self.types.push((name.to_string(), ty));
    }

    /// Starts a new budget (one per policy and binding, as kube-apiserver's).
    pub fn reset_budget(&mut self) {
        self.budget = RUNTIME_COST_BUDGET;
    }

    /// Evaluates `program`, after checking its estimated cost against the limits.
    pub fn evaluate(&mut self, program: &Program) -> Result<CelValue, String> {
        let types: Vec<(&str, Ty)> = self
            .types
            .iter()
            .map(|(n, t)| (n.as_str(), t.clone()))
            .collect();
        let cost = program.estimate(&types);
        if cost > PER_CALL_LIMIT || cost > self.budget {
            return Err(format!(
                "operation cancelled: actual cost limit exceeded (estimated cost {cost})"
            ));
        }
        self.budget -= cost;
        let vars: Vec<(&str, CelValue)> = self
            .vars
            .iter()
            .map(|(n, v)| (n.as_str(), v.clone()))
            .collect();
        self.runtime
            .evaluate(program, &vars)
            .map_err(|e| e.to_string())
    }

    /// Evaluates `program` for a bool.
    pub fn evaluate_bool(&mut self, program: &Program) -> Result<bool, String> {
        match self.evaluate(program)? {
            CelValue::Bool(b) => Ok(b),
            other => Err(format!(
                "expression must evaluate to bool, got {:?}",
                other.type_of()
            )),
        }
    }

    /// kube-apiserver's matchConditions: false wins over an error (a condition that is false
    /// settles it whatever the others do), every condition true is a match.
    pub fn conditions(&mut self, conditions: &[Condition]) -> Decision {
        let mut error = None;
        for c in conditions {
            match self.evaluate_bool(&c.program) {
                Ok(true) => {}
                Ok(false) => {
                    return Decision::NoMatch {
                        condition: c.name.clone(),
                    }
                }
                Err(e) => {
                    error.get_or_insert((c.name.clone(), e));
                }
            }
        }
        match error {
            None => Decision::Match,
            Some((condition, error)) => Decision::Error { condition, error },
        }
    }
}

/// The `authorizer` library's checks, answered by the server's authorizer for one user (or,
/// after `serviceAccount(ns, name)`, for that service account, with the groups a service
/// account's token gives it).
pub struct RequestAuthorizer {
    pub authorizer: Arc<Authorizer>,
    pub user: UserInfo,
}

impl Authorize for RequestAuthorizer {
    fn authorize(&self, query: &Query) -> Verdict {
        let account;
        let user = match &query.service_account {
            None => &self.user,
            Some((namespace, name)) => {
                let groups = [
                    "system:serviceaccounts".to_string(),
                    format!("system:serviceaccounts:{namespace}"),
                ];
                account = UserInfo {
                    name: service_account_user(namespace, name),
                    groups: groups.to_vec(),
                    ..UserInfo::default()
                };
                &account
            }
        };
        let info = match &query.target {
            Target::Path(path) => RequestInfo {
                resource_request: false,
                path: if path.starts_with('/') {
                    path.clone()
                } else {
                    format!("/{path}")
                },
                verb: query.verb.clone(),
                ..RequestInfo::default()
            },
            Target::Resource(r) => RequestInfo {
                resource_request: true,
                verb: query.verb.clone(),
                api_prefix: if r.group.is_empty() { "api" } else { "apis" }.into(),
                api_group: r.group.clone(),
                api_version: "*".into(),
                namespace: r.namespace.clone(),
                resource: r.resource.clone(),
                subresource: r.subresource.clone(),
                name: r.name.clone(),
                ..RequestInfo::default()
            },
        };
        match self.authorizer.authorize(user, &info) {
            AuthzDecision::Allow(reason) => Verdict {
                allowed: true,
                reason,
                error: String::new(),
            },
            AuthzDecision::Deny(reason) => Verdict {
                allowed: false,
                reason,
                error: String::new(),
            },
        }
    }

    fn invalid_service_account(&self, namespace: &str, name: &str) -> Option<String> {
        if !is_dns1123_label(namespace) {
            return Some(format!(
                "serviceAccount: namespace {namespace:?} is not a valid DNS label"
            ));
        }
        if !is_dns1123_subdomain(name) {
            return Some(format!(
                "serviceAccount: name {name:?} is not a valid DNS subdomain"
            ));
        }
        None
    }
}

/// The AdmissionRequest of a write as the `request` variable (kube-apiserver's shape, without
/// `object` and `oldObject`, which are variables of their own).
pub fn request_value(req: &ApiRequest, operation: &str, name: &str, namespace: &str) -> Value {
    let info = req.info();
    let kind = json!({"group": info.group, "version": info.version, "kind": info.kind});
    let resource = json!({"group": info.group, "version": info.version, "resource": info.plural});
    let options_kind = match operation {
        "CREATE" => "CreateOptions",
        "UPDATE" => "UpdateOptions",
        _ => "DeleteOptions",
    };
    let mut request = json!({
        "kind": kind,
        "resource": resource,
        "requestKind": kind,
        "requestResource": resource,
        "name": name,
        "namespace": namespace,
        "operation": operation,
        "userInfo": {
            "username": req.user.name,
            "uid": req.user.uid,
            "groups": req.user.groups,
            "extra": req.user.extra,
        },
        "dryRun": req.query.dry_run,
        "options": {"apiVersion": "meta.k8s.io/v1", "kind": options_kind},
    });
    if let Some(sub) = req.target.subresource.as_deref() {
        request["subResource"] = json!(sub);
        request["requestSubResource"] = json!(sub);
    }
    request
}

#[cfg(test)]
mod tests {
    use super::*;

    fn causes(list: Value) -> Vec<String> {
        let mut causes = Vec::new();
        match_conditions(Some(&list), "c", &webhook_env(), &mut causes);
        causes
            .into_iter()
            .map(|c| format!("{}: {}", c.field, c.message))
            .collect()
    }

    #[test]
    fn conditions_are_checked_as_kube_apiserver_does() {
        assert!(
            causes(json!([{"name": "a", "expression": "object.metadata.name == 'x'"}])).is_empty()
        );
        let dup = causes(
            json!([{"name": "a", "expression": "true"}, {"name": "a", "expression": "true"}]),
        );
        assert_eq!(dup, ["c[1].name: Duplicate value: \"a\""]);
        let bad_name = causes(json!([{"name": "-a", "expression": "true"}]));
        assert!(
            bad_name[0].starts_with("c[0].name: Invalid value: \"-a\""),
            "{bad_name:?}"
        );
        let not_bool = causes(json!([{"name": "a", "expression": "'x'"}]));
        assert_eq!(
            not_bool,
            ["c[0].expression: Invalid value: \"'x'\": must evaluate to bool"]
        );
        let bad = causes(json!([{"name": "a", "expression": "object.("}]));
        assert!(bad[0].contains("compilation failed"), "{bad:?}");
        let unknown = causes(json!([{"name": "a", "expression": "params.x == 1"}]));
        assert!(
            unknown[0].contains("undeclared reference to 'params'"),
            "{unknown:?}"
        );
        let many: Vec<Value> = (0..65)
            .map(|i| json!({"name": format!("c{i}"), "expression": "true"}))
            .collect();
        assert_eq!(
            causes(json!(many)),
            ["c: Too many: 65: must have at most 64 items"]
        );
        assert_eq!(
            causes(json!([{"name": "a"}])),
            ["c[0].expression: Required value"]
        );
    }

    #[test]
    fn false_wins_over_errors_and_costs_are_bounded() {
        let env = webhook_env();
        let list = json!([
            {"name": "err", "expression": "object.missing == 1"},
            {"name": "no", "expression": "object.kind == 'Secret'"},
        ]);
        let conditions = read_conditions(Some(&list), &env);
        let object = json!({"kind": "ConfigMap"});
        let mut activation = Activation::new(&json!({}), Some(&object), None);
        assert_eq!(
            activation.conditions(&conditions),
            Decision::NoMatch {
                condition: "no".into()
            }
        );
        assert!(matches!(
            activation.conditions(&conditions[..1]),
            Decision::Error { .. }
        ));
        // 2000 × 2000 comparisons: over the per-call limit however fast the machine is.
        let big = json!({"items": (0..2000).collect::<Vec<_>>()});
        let quadratic = read_conditions(
            Some(
                &json!([{"name": "q", "expression": "object.items.all(x, object.items.exists(y, y == x))"}]),
            ),
            &env,
        );
        let mut activation = Activation::new(&json!({}), Some(&big), None);
        match activation.conditions(&quadratic) {
            Decision::Error { error, .. } => assert!(error.contains("cost limit"), "{error}"),
            other => panic!("{other:?}"),
        }
        let small = json!({"items": [1, 2, 3]});
        let mut activation = Activation::new(&json!({}), Some(&small), None);
        assert_eq!(activation.conditions(&quadratic), Decision::Match);
    }
}
