//! ValidatingAdmissionPolicies: the policies and bindings of the store, evaluated in-process
//! after mutating admission, beside the validating webhooks, as kube-apiserver evaluates them
//! (docs/admission-policies.md).
//!
//! A write is checked against every binding whose policy exists and whose `matchResources`
//! and the policy's `matchConstraints` both take it (rules and excluded rules, resource names,
//! namespace and object selectors). For each parameter object the binding's `paramRef` finds
//! (or once, with `params` null, for a policy without `paramKind`), the policy's
//! matchConditions decide whether it applies; its validations then run, reading the policy's
//! variables, each evaluated the first time an expression selects it. A failed validation is
//! acted on as the binding says: Deny refuses the write (the first refusal is the answer),
//! Warn adds a `Warning`, Audit records it in the audit event. An expression that cannot be
//! evaluated is a refusal under failurePolicy Fail and nothing under Ignore.
//!
//! The index (`kube::derived`) holds compiled policies; a write no binding matches costs a
//! look at an empty list or the rules, no CEL. The policy and binding kinds themselves are
//! never checked, so a broken policy can always be changed or removed.

pub mod config;

use std::collections::BTreeMap;
use std::sync::Arc;

use serde_json::{json, Value};
use tokio_util::sync::CancellationToken;

use self::config::{Binding, MatchResources, Policy, BINDING_KIND, POLICY_KIND};
use super::expressions::{self, Activation, Decision};
use super::webhook::matching::{labels_of, Attributes};
use super::webhook::Op;
use crate::api::request::ApiRequest;
use crate::api::status::ApiError;
use crate::cel::{Program, Value as CelValue};
use crate::kube::derived::{Derived, FromStore};
use crate::kube::labels::Labels;
use crate::kube::object::{ObjectKey, StoredObject};
use crate::kube::store::Store;
use crate::kube::watch::EventKind;

pub const POLICIES: &str = "admissionregistration.k8s.io/validatingadmissionpolicies";
pub const BINDINGS: &str = "admissionregistration.k8s.io/validatingadmissionpolicybindings";

/// The audit annotation kube-apiserver records failed validations under (Audit action).
const VALIDATION_FAILURE: &str = "validation.policy.admission.k8s.io/validation_failure";

type Pairs = Arc<[(Arc<Policy>, Arc<Binding>)]>;

/// The compiled policies and the bindings, paired.
#[derive(Default)]
struct Index {
    policies: BTreeMap<String, Arc<Policy>>,
    bindings: BTreeMap<String, Arc<Binding>>,
    /// Every binding whose policy exists, with that policy, by binding name.
    pairs: Pairs,
}

impl FromStore for Index {
    const RESOURCES: &'static [&'static str] = &[POLICIES, BINDINGS];

    fn apply(&mut self, kind: EventKind, object: &StoredObject) {
        let name = object.key.name.to_string();
        let deleted = kind == EventKind::Deleted;
        if object.key.resource.as_str() == POLICIES {
            if deleted {
                self.policies.remove(&name);
            } else {
                let policy = Policy::read(&name, &object.value());
                self.policies.insert(name, Arc::new(policy));
            }
        } else if deleted {
            self.bindings.remove(&name);
        } else {
            let binding = Binding::read(&name, &object.value());
            self.bindings.insert(name, Arc::new(binding));
        }
        self.pairs = self
            .bindings
            .values()
            .filter_map(|b| Some((self.policies.get(&b.policy)?.clone(), b.clone())))
            .collect();
    }
}

/// The policies and bindings, kept current from the store on every server.
pub struct Policies {
    index: Derived<Index>,
}

impl Policies {
    pub fn new(store: Arc<Store>) -> Policies {
        Policies {
            index: Derived::new(store),
        }
    }

    /// Keeps the index following the store while nothing reads, until `stop`.
    pub async fn follow(self: Arc<Self>, stop: CancellationToken) {
        self.index.follow(stop).await;
    }

    fn pairs(&self) -> Pairs {
        self.index.fresh().pairs.clone()
    }
}

/// Whether the request's kind is one policies never apply to.
fn exempt(req: &ApiRequest) -> bool {
    let info = req.info();
    info.group == super::webhook::config::GROUP && matches!(info.kind, POLICY_KIND | BINDING_KIND)
}

/// Whether any binding with its policy is stored (callers skip parsing objects when none is).
pub fn any(req: &ApiRequest) -> bool {
    !exempt(req) && !req.ctx.policies.pairs().is_empty()
}

/// What the matching reads of one write.
struct Request<'a> {
    attributes: Attributes<'a>,
    name: &'a str,
    namespace: &'a str,
    /// `None`: a cluster-scoped object that is not a Namespace.
    namespace_labels: Option<Labels>,
    object: Option<&'a Value>,
    old: Option<&'a Value>,
}

impl MatchResources {
    fn matches(&self, r: &Request<'_>, rules_optional: bool) -> bool {
        let rule_matches = |(rule, names): &(super::webhook::config::Rule, Vec<String>)| {
            rule.matches(&r.attributes) && (names.is_empty() || names.iter().any(|n| n == r.name))
        };
        if self.excluded.iter().any(rule_matches) {
            return false;
        }
        // A binding's matchResources without rules takes whatever its policy takes.
        let taken =
            (rules_optional && self.rules.is_empty()) || self.rules.iter().any(rule_matches);
        if !taken {
            return false;
        }
        let namespace = match &r.namespace_labels {
            None => true,
            Some(labels) => self.namespace_selector.matches(labels),
        };
        let object = self.object_selector.is_empty()
            || [r.object, r.old]
                .into_iter()
                .flatten()
                .any(|o| self.object_selector.matches(&labels_of(o)));
        namespace && object
    }
}

/// One failed validation (or, under failurePolicy Fail, an expression that could not be
/// evaluated or parameters that could not be found).
struct Failure {
    message: String,
    reason: &'static str,
    code: u16,
    /// The validation's place in the policy (-1 for failures of no one validation).
    index: i64,
}

/// Checks the write against every policy binding that matches it (`object` the version about
/// to be stored, `old` the stored one); the first Deny refusal is the answer.
pub fn validate(
    req: &ApiRequest,
    op: Op,
    object: Option<&Value>,
    old: Option<&Value>,
) -> Result<(), ApiError> {
    if exempt(req) {
        return Ok(());
    }
    let pairs = req.ctx.policies.pairs();
    if pairs.is_empty() {
        return Ok(());
    }
    let info = req.info();
    let (name, namespace) = super::target_of(req, object.or(old));
    let is_namespace = info.group.is_empty() && info.plural == "namespaces";
    let namespace_object = if info.namespaced {
        req.ctx
            .store
            .get(&ObjectKey::new("namespaces", "", namespace))
    } else {
        None
    };
    let namespace_labels = if is_namespace {
        object.or(old).map(labels_of)
    } else if info.namespaced {
        Some(
            namespace_object
                .as_ref()
                .map(|ns| ns.labels.clone())
                .unwrap_or_default(),
        )
    } else {
        None
    };
    let request = Request {
        attributes: Attributes {
            operation: op.as_str(),
            group: info.group,
            version: info.version,
            resource: info.plural,
            subresource: req.target.subresource.as_deref().unwrap_or(""),
            namespaced: info.namespaced,
        },
        name,
        namespace,
        namespace_labels,
        object,
        old,
    };
    let matched: Vec<&(Arc<Policy>, Arc<Binding>)> = pairs
        .iter()
        .filter(|(policy, binding)| {
            policy.constraints.matches(&request, false)
                && binding
                    .resources
                    .as_ref()
                    .is_none_or(|m| m.matches(&request, true))
        })
        .collect();
    if matched.is_empty() {
        return Ok(());
    }
    let request_value = expressions::request_value(req, op.as_str(), name, namespace);
    let mut activation = Activation::new(&request_value, object, old);
    activation.set_authorizer(req, name, namespace);
    activation.set(
        "namespaceObject",
        &namespace_object.map_or(Value::Null, |ns| ns.value()),
    );
    let mut denied = None;
    let mut audited = Vec::new();
    for (policy, binding) in matched {
        activation.reset_budget();
        for failure in run(req, &request, &mut activation, policy, binding) {
            let actions = binding.actions;
            if actions.deny && denied.is_none() {
                denied = Some(ApiError::WebhookDenied {
                    code: failure.code,
                    reason: failure.reason.to_string(),
                    message: format!(
                        "{} {name:?} is forbidden: ValidatingAdmissionPolicy '{}' with binding '{}' denied request: {}",
                        info.qualified_plural(),
                        policy.name,
                        binding.name,
                        failure.message
                    ),
                });
            }
            if actions.warn {
                if let Ok(mut w) = req.warnings.lock() {
                    w.push(format!(
                        "Validation failed for ValidatingAdmissionPolicy '{}' with binding '{}': {}",
                        policy.name, binding.name, failure.message
                    ));
                }
            }
            if actions.audit {
                audited.push(json!({
                    "message": failure.message,
                    "policy": policy.name,
                    "binding": binding.name,
                    "expressionIndex": failure.index,
                    "validationActions": actions.names(),
                }));
            }
        }
    }
    if !audited.is_empty() {
        annotate(
            req,
            VALIDATION_FAILURE.to_string(),
            Value::Array(audited).to_string(),
        );
    }
    denied.map_or(Ok(()), Err)
}

fn annotate(req: &ApiRequest, key: String, value: String) {
    if let Ok(mut notes) = req.audit_annotations.lock() {
        notes.push((key, value));
    }
}

/// The failure of something other than one validation under the policy's failurePolicy.
fn failed(policy: &Policy, message: String, out: &mut Vec<Failure>) {
    if policy.ignore_failures {
        tracing::debug!(component = "admission", policy = %policy.name, message, "ignored");
        return;
    }
    out.push(Failure {
        message,
        reason: "Invalid",
        code: 422,
        index: -1,
    });
}

/// Evaluates one policy with one binding; the failures its actions apply to.
fn run(
    req: &ApiRequest,
    request: &Request<'_>,
    activation: &mut Activation,
    policy: &Policy,
    binding: &Binding,
) -> Vec<Failure> {
    let mut out = Vec::new();
    let params = match params(req, request, policy, binding) {
        Ok(params) => params,
        Err(e) => {
            failed(
                policy,
                format!("failed to configure binding: {e}"),
                &mut out,
            );
            return out;
        }
    };
    for param in params {
        activation.set("params", param.as_ref().unwrap_or(&Value::Null));
        let mut vars = Variables::new(policy);
        vars.publish(activation);
        let conditions: Vec<_> = policy.conditions.clone();
        for c in &conditions {
            vars.prepare(activation, &c.program);
        }
        match activation.conditions(&conditions) {
            Decision::Match => {}
            Decision::NoMatch { .. } => continue,
            Decision::Error { condition, error } => {
                failed(
                    policy,
                    format!("matchCondition '{condition}' resulted in error: {error}"),
                    &mut out,
                );
                continue;
            }
        }
        for (i, v) in policy.validations.iter().enumerate() {
            let Some(program) = &v.program else { continue };
            vars.prepare(activation, program);
            match activation.evaluate_bool(program) {
                Ok(true) => {}
                Ok(false) => out.push(Failure {
                    message: message(activation, &mut vars, v),
                    reason: v.reason,
                    code: v.code(),
                    index: i as i64,
                }),
                Err(e) => failed(
                    policy,
                    format!("expression '{}' resulted in error: {e}", v.expression),
                    &mut out,
                ),
            }
        }
        for a in &policy.audit_annotations {
            let Some(program) = &a.program else { continue };
            vars.prepare(activation, program);
            match activation.evaluate(program) {
                Ok(CelValue::String(s)) => annotate(req, a.key.clone(), s.to_string()),
                Ok(_) => {}
                Err(e) => {
                    tracing::debug!(component = "admission", key = %a.key, error = %e, "audit annotation")
                }
            }
        }
    }
    out
}

/// A failed validation's message: its messageExpression's string when it gives a non-empty
/// one on one line, else its message, else kube-apiserver's `failed expression: EXPR`.
fn message(
    activation: &mut Activation,
    vars: &mut Variables<'_>,
    v: &config::Validation,
) -> String {
    if let Some(program) = &v.message_expression {
        vars.prepare(activation, program);
        if let Ok(CelValue::String(s)) = activation.evaluate(program) {
            if !s.trim().is_empty() && !s.contains('\n') {
                return s.to_string();
            }
        }
    }
    if !v.message.is_empty() {
        return v.message.clone();
    }
    format!("failed expression: {}", v.expression.trim())
}

/// A policy's variables for one evaluation: each computed the first time an expression
/// selects it, and `variables` in the activation holding those computed.
struct Variables<'p> {
    policy: &'p Policy,
    values: BTreeMap<String, Result<CelValue, String>>,
}

impl<'p> Variables<'p> {
    fn new(policy: &'p Policy) -> Self {
        Variables {
            policy,
            values: BTreeMap::new(),
        }
    }

    /// Computes the variables `program` selects (and those they select) that are not yet.
    fn prepare(&mut self, activation: &mut Activation, program: &Program) {
        let wanted: Vec<String> = program
            .selected
            .iter()
            .filter(|(var, _)| var == "variables")
            .map(|(_, field)| field.clone())
            .filter(|field| !self.values.contains_key(field))
            .collect();
        if wanted.is_empty() {
            return;
        }
        for name in wanted {
            self.compute(activation, &name, 0);
        }
        self.publish(activation);
    }

    fn compute(&mut self, activation: &mut Activation, name: &str, depth: usize) {
        if self.values.contains_key(name) || depth > self.policy.variables.len() {
            return;
        }
        let Some(var) = self.policy.variables.iter().find(|v| v.name == name) else {
            return;
        };
        let value = match &var.program {
            None => Err(format!("composited variable {name:?} fails to compile")),
            Some(program) => {
                // A variable reads only the ones declared before it.
                for (v, field) in &program.selected {
                    if v == "variables" {
                        self.compute(activation, field, depth + 1);
                    }
                }
                self.publish(activation);
                activation.evaluate(program)
            }
        };
        self.values.insert(name.to_string(), value);
    }

    /// Sets `variables` to the values computed so far; a failed one is left out, so an
    /// expression reading it fails.
    fn publish(&self, activation: &mut Activation) {
        let map: std::collections::HashMap<::cel::objects::Key, CelValue> = self
            .values
            .iter()
            .filter_map(|(k, v)| {
                Some((
                    ::cel::objects::Key::String(Arc::new(k.clone())),
                    v.as_ref().ok()?.clone(),
                ))
            })
            .collect();
        activation.set_value(
            "variables",
            CelValue::Map(::cel::objects::Map { map: Arc::new(map) }),
        );
    }
}

/// The parameter objects of a binding: one `None` for a policy without `paramKind`; an empty
/// list when none is found and the binding allows that.
fn params(
    req: &ApiRequest,
    request: &Request<'_>,
    policy: &Policy,
    binding: &Binding,
) -> Result<Vec<Option<Value>>, String> {
    let Some((api_version, kind)) = &policy.param_kind else {
        return Ok(vec![None]);
    };
    let Some(param_ref) = &binding.param_ref else {
        return Err(format!(
            "policy {:?} has a paramKind but its binding has no paramRef",
            policy.name
        ));
    };
    let Some((store_key, namespaced)) = param_resource(req, api_version, kind) else {
        return Err(format!("paramKind kind `{kind}.{api_version}` not known"));
    };
    let namespace = if namespaced {
        match (&param_ref.namespace, request.attributes.namespaced) {
            (Some(ns), _) => Some(ns.as_str()),
            (None, true) => Some(request.namespace),
            (None, false) => {
                return Err(
                    "cannot use namespaced paramRef in policy binding that matches cluster-scoped resources"
                        .into(),
                )
            }
        }
    } else {
        None
    };
    let found: Vec<Option<Value>> = match &param_ref.name {
        Some(name) => req
            .ctx
            .store
            .get(&ObjectKey::new(
                store_key,
                namespace.unwrap_or(""),
                name.as_str(),
            ))
            .map(|o| Some(o.value()))
            .into_iter()
            .collect(),
        None => req
            .ctx
            .store
            .snapshot()
            .range(&store_key, namespace, None)
            .filter(|o| param_ref.selector.matches(&o.labels))
            .map(|o| Some(o.value()))
            .collect(),
    };
    if found.is_empty() && param_ref.deny_if_missing {
        return Err(
            "no params found for policy binding with `Deny` parameterNotFoundAction".into(),
        );
    }
    Ok(found)
}

/// The store key and scope of the kind `apiVersion`/`kind`, built-in or custom.
fn param_resource(req: &ApiRequest, api_version: &str, kind: &str) -> Option<(String, bool)> {
    if let Some(info) = crate::kube::resources::RESOURCES
        .iter()
        .find(|r| r.kind == kind && r.api_version() == api_version)
    {
        return Some((info.store_key(), info.namespaced));
    }
    let (group, version) = api_version.split_once('/')?;
    req.ctx
        .custom_kinds
        .kinds()
        .into_iter()
        .find(|k| {
            k.group == group && k.kind == kind && k.versions.iter().any(|v| v.name == version)
        })
        .map(|k| (format!("{}/{}", k.group, k.plural), k.namespaced))
}
