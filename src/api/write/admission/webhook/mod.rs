//! Admission webhooks: the MutatingWebhookConfigurations and ValidatingWebhookConfigurations
//! of the store, called from the write step as kube-apiserver calls them (docs/admission-webhooks.md).
//!
//! - [`mutate`]: after the built-in admission plugins, every matching mutating webhook in
//!   turn (ordered by configuration name, then by the webhook's place in it), its JSONPatch
//!   applied before the next is called; webhooks with `reinvocationPolicy: IfNeeded` are
//!   called once more when a later webhook changed the object after them.
//! - [`validate`]: after the kind's defaults and validation, every matching validating
//!   webhook at once; the first refusal (in webhook order) is the answer.
//! - a deletion passes both lists with `oldObject` only.
//!
//! A refusal is `admission webhook "NAME" denied the request: MESSAGE` with the code the
//! webhook gave (400 when it gave none). A call that got no usable answer refuses the write
//! with 500 unless the webhook's failurePolicy is Ignore. Warnings reach the client as
//! `Warning` headers. A dry run that a webhook with side effects matches is refused (400),
//! since the webhook cannot be told to hold back. The two configuration kinds are never sent
//! to webhooks, so a broken webhook can always be removed.
//!
//! `config` reads and checks the configurations, `matching` decides which webhooks a write
//! goes to, `call` talks to one webhook.

mod call;
pub mod config;
pub(super) mod matching;

use std::sync::Arc;

use serde_json::Value;
use tokio_util::sync::CancellationToken;

use self::call::{Answer, CallError, Clients, Review};
use self::config::{Hook, SideEffects, GROUP, MUTATING_KIND, VALIDATING_KIND};
use self::matching::{labels_of, Attributes};
use super::expressions::{self, Activation, Decision};
use crate::api::request::ApiRequest;
use crate::api::status::ApiError;
use crate::kube::derived::{Derived, FromStore};
use crate::kube::labels::Labels;
use crate::kube::object::{ObjectKey, StoredObject};
use crate::kube::store::Store;
use crate::kube::watch::EventKind;

pub const MUTATING: &str = "admissionregistration.k8s.io/mutatingwebhookconfigurations";
pub const VALIDATING: &str = "admissionregistration.k8s.io/validatingwebhookconfigurations";

/// Webhooks in calling order, shared with the writes reading them.
type HookList = Arc<[Arc<Hook>]>;

/// The webhooks of every stored configuration, in calling order.
#[derive(Default)]
struct Index {
    /// (configuration name → its webhooks) for each of the two kinds.
    mutating_by_config: std::collections::BTreeMap<String, Vec<Hook>>,
    validating_by_config: std::collections::BTreeMap<String, Vec<Hook>>,
    mutating: HookList,
    validating: HookList,
}

impl FromStore for Index {
    const RESOURCES: &'static [&'static str] = &[MUTATING, VALIDATING];

    fn apply(&mut self, kind: EventKind, object: &StoredObject) {
        let name = object.key.name.to_string();
        let mutating = object.key.resource.as_str() == MUTATING;
        let by_config = if mutating {
            &mut self.mutating_by_config
        } else {
            &mut self.validating_by_config
        };
        if kind == EventKind::Deleted {
            by_config.remove(&name);
        } else {
            by_config.insert(name.clone(), config::hooks(&name, &object.value()));
        }
        let flat: HookList = by_config
            .values()
            .flatten()
            .cloned()
            .map(Arc::new)
            .collect();
        if mutating {
            self.mutating = flat;
        } else {
            self.validating = flat;
        }
    }
}

/// The webhook configurations, kept current from the store, and the connections to them.
pub struct Webhooks {
    index: Derived<Index>,
    clients: Clients,
}

impl Webhooks {
    pub fn new(store: Arc<Store>) -> Webhooks {
        Webhooks {
            index: Derived::new(store),
            clients: Clients::default(),
        }
    }

    /// Keeps the index following the store while nothing reads, until `stop`.
    pub async fn follow(self: Arc<Self>, stop: CancellationToken) {
        self.index.follow(stop).await;
    }

    fn lists(&self) -> (HookList, HookList) {
        let index = self.index.fresh();
        (index.mutating.clone(), index.validating.clone())
    }
}

/// What a write is, as a webhook is told.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    Create,
    Update,
    Delete,
}

impl Op {
    pub fn as_str(self) -> &'static str {
        match self {
            Op::Create => "CREATE",
            Op::Update => "UPDATE",
            Op::Delete => "DELETE",
        }
    }
}

/// Whether the request's kind is one webhooks are never called for.
fn exempt(req: &ApiRequest) -> bool {
    let info = req.info();
    info.group == GROUP && matches!(info.kind, MUTATING_KIND | VALIDATING_KIND)
}

/// The webhooks of `list` that take this write.
fn matching(
    req: &ApiRequest,
    list: &[Arc<Hook>],
    op: Op,
    object: Option<&Value>,
    old: Option<&Value>,
) -> Vec<Arc<Hook>> {
    if list.is_empty() {
        return Vec::new();
    }
    let info = req.info();
    let attributes = Attributes {
        operation: op.as_str(),
        group: info.group,
        version: info.version,
        resource: info.plural,
        subresource: req.target.subresource.as_deref().unwrap_or(""),
        namespaced: info.namespaced,
    };
    let namespace_labels: Option<Labels> = if info.group.is_empty() && info.plural == "namespaces" {
        object.or(old).map(labels_of)
    } else if info.namespaced {
        let (_, namespace) = super::target_of(req, object.or(old));
        Some(
            req.ctx
                .store
                .get(&ObjectKey::new("namespaces", "", namespace))
                .map(|ns| ns.labels.clone())
                .unwrap_or_default(),
        )
    } else {
        None
    };
    list.iter()
        .filter(|h| {
            h.matches_rules(&attributes)
                && h.matches_namespace(namespace_labels.as_ref())
                && h.matches_object(object, old)
        })
        .cloned()
        .collect()
}

/// The AdmissionReview of this write for one call.
fn review(
    req: &ApiRequest,
    uid: &str,
    op: Op,
    object: Option<&Value>,
    old: Option<&Value>,
) -> bytes::Bytes {
    let info = req.info();
    let (name, namespace) = super::target_of(req, object.or(old));
    Review {
        uid,
        operation: op.as_str(),
        group: info.group,
        version: info.version,
        kind: info.kind,
        resource: info.plural,
        subresource: req.target.subresource.as_deref().unwrap_or(""),
        name,
        namespace,
        user: &req.user,
        object,
        old_object: old,
        dry_run: req.query.dry_run,
        field_manager: req.query.field_manager.as_deref(),
    }
    .to_bytes()
}

/// kube-apiserver's refusal of a dry run by a webhook with side effects.
fn check_dry_run(req: &ApiRequest, hook: &Hook) -> Result<(), ApiError> {
    if req.query.dry_run && hook.side_effects == SideEffects::Some {
        return Err(ApiError::BadRequest(format!(
            "admission webhook {:?} does not support dry run",
            hook.name
        )));
    }
    Ok(())
}

/// kube-apiserver's `ToStatusErr`: the webhook's status, its code at least 400.
fn denial(hook: &Hook, status: &Value) -> ApiError {
    let denied_by = format!("admission webhook {:?} denied the request", hook.name);
    let text = |key: &str| status[key].as_str().filter(|s| !s.is_empty());
    let message = match (text("message"), text("reason")) {
        (Some(m), _) | (None, Some(m)) => format!("{denied_by}: {m}"),
        (None, None) => format!("{denied_by} without explanation"),
    };
    let code = status["code"]
        .as_u64()
        .and_then(|c| u16::try_from(c).ok())
        .filter(|c| *c >= 400)
        .unwrap_or(400);
    ApiError::WebhookDenied {
        code,
        reason: text("reason").unwrap_or("").to_string(),
        message,
    }
}

/// The failurePolicy's answer to a call that got no usable answer.
fn failed(hook: &Hook, error: CallError) -> Result<(), ApiError> {
    if hook.ignore_failures {
        tracing::warn!(
            component = "admission",
            configuration = %hook.configuration,
            webhook = %hook.name,
            %error,
            "webhook call failed; failurePolicy Ignore lets the write pass"
        );
        return Ok(());
    }
    Err(ApiError::Internal(format!(
        "failed calling webhook {:?}: {error}",
        hook.name
    )))
}

fn warn(req: &ApiRequest, answer: &Answer) {
    if answer.warnings.is_empty() {
        return;
    }
    if let Ok(mut queued) = req.warnings.lock() {
        queued.extend(answer.warnings.iter().cloned());
    }
}

/// Whether the webhook's matchConditions let it be called: all true calls it, a false one
/// skips it; one that cannot be evaluated skips it under failurePolicy Ignore and refuses the
/// write under Fail (403, as kube-apiserver answers).
fn conditions_allow(
    req: &ApiRequest,
    hook: &Hook,
    op: Op,
    object: Option<&Value>,
    old: Option<&Value>,
) -> Result<bool, ApiError> {
    if hook.conditions.is_empty() {
        return Ok(true);
    }
    let (name, namespace) = super::target_of(req, object.or(old));
    let request = expressions::request_value(req, op.as_str(), name, namespace);
    let mut activation = Activation::new(&request, object, old);
    activation.set_authorizer(req, name, namespace);
    match activation.conditions(&hook.conditions) {
        Decision::Match => Ok(true),
        Decision::NoMatch { .. } => Ok(false),
        Decision::Error { condition, error } if hook.ignore_failures => {
            tracing::warn!(
                component = "admission",
                webhook = %hook.name,
                condition,
                error,
                "matchCondition failed to evaluate; failurePolicy Ignore skips the webhook"
            );
            Ok(false)
        }
        Decision::Error { condition, error } => Err(ApiError::WebhookDenied {
            code: 403,
            reason: "Forbidden".into(),
            message: format!(
                "failed calling webhook {:?}: failed evaluating match conditions: matchCondition {condition:?}: {error}",
                hook.name
            ),
        }),
    }
}

/// Calls one webhook; `Ok(None)` when its failure was ignored or its matchConditions skip it.
async fn call_one(
    req: &ApiRequest,
    hook: &Hook,
    op: Op,
    object: Option<&Value>,
    old: Option<&Value>,
) -> Result<Option<Answer>, ApiError> {
    if !conditions_allow(req, hook, op, object, old)? {
        return Ok(None);
    }
    let uid = uuid::Uuid::new_v4().to_string();
    let body = review(req, &uid, op, object, old);
    let clients = &req.ctx.webhooks.clients;
    match clients.call(&req.ctx, hook, &uid, body).await {
        Ok(answer) if !answer.allowed => Err(denial(hook, &answer.status)),
        Ok(answer) => {
            warn(req, &answer);
            Ok(Some(answer))
        }
        Err(e) => failed(hook, e).map(|()| None),
    }
}

/// Runs the matching mutating webhooks over `object` (a create or an update; `old` the stored
/// version of an update).
pub async fn mutate(
    req: &ApiRequest,
    op: Op,
    object: &mut Value,
    old: Option<&Value>,
) -> Result<(), ApiError> {
    if exempt(req) {
        return Ok(());
    }
    let (mutating, _) = req.ctx.webhooks.lists();
    let hooks = matching(req, &mutating, op, Some(object), old);
    if hooks.is_empty() {
        return Ok(());
    }
    // Per webhook: the count of changes made when it was last called.
    let mut seen_changes = vec![0usize; hooks.len()];
    let mut changes = 0usize;
    for (i, hook) in hooks.iter().enumerate() {
        check_dry_run(req, hook)?;
        seen_changes[i] = changes;
        if patch(req, hook, op, object, old).await? {
            changes += 1;
            seen_changes[i] = changes;
        }
    }
    // Reinvocation: once, for webhooks that asked for it and whose view is stale.
    for (i, hook) in hooks.iter().enumerate() {
        if hook.reinvoke && seen_changes[i] < changes {
            patch(req, hook, op, object, old).await?;
        }
    }
    Ok(())
}

/// Calls a mutating webhook and applies its patch; whether the object changed.
async fn patch(
    req: &ApiRequest,
    hook: &Hook,
    op: Op,
    object: &mut Value,
    old: Option<&Value>,
) -> Result<bool, ApiError> {
    let Some(answer) = call_one(req, hook, op, Some(object), old).await? else {
        return Ok(false);
    };
    let Some(patch) = answer.patch else {
        return Ok(false);
    };
    match crate::kube::patch::apply_json_patch(object, &patch) {
        Ok(patched) if patched == *object => Ok(false),
        Ok(patched) => {
            *object = patched;
            Ok(true)
        }
        Err(e) => failed(
            hook,
            CallError::Invalid(format!("the patch does not apply: {e}")),
        )
        .map(|()| false),
    }
}

/// Runs the matching validating webhooks at once over the write (`object` the version about
/// to be stored, `old` the stored one).
pub async fn validate(
    req: &ApiRequest,
    op: Op,
    object: Option<&Value>,
    old: Option<&Value>,
) -> Result<(), ApiError> {
    if exempt(req) {
        return Ok(());
    }
    let (_, validating) = req.ctx.webhooks.lists();
    let hooks = matching(req, &validating, op, object, old);
    if hooks.is_empty() {
        return Ok(());
    }
    for hook in &hooks {
        check_dry_run(req, hook)?;
    }
    let calls = hooks.iter().map(|h| call_one(req, h, op, object, old));
    for result in futures::future::join_all(calls).await {
        result?;
    }
    Ok(())
}

/// A deletion of `old`: the mutating webhooks (their patches have no object to apply to),
/// then the validating ones.
pub async fn delete(req: &ApiRequest, old: &Value) -> Result<(), ApiError> {
    if exempt(req) {
        return Ok(());
    }
    let (mutating, _) = req.ctx.webhooks.lists();
    for hook in matching(req, &mutating, Op::Delete, None, Some(old)) {
        check_dry_run(req, &hook)?;
        call_one(req, &hook, Op::Delete, None, Some(old)).await?;
    }
    validate(req, Op::Delete, None, Some(old)).await
}

/// Whether any webhook configuration is stored (callers skip parsing objects when none is).
pub fn any(req: &ApiRequest) -> bool {
    if exempt(req) {
        return false;
    }
    let (mutating, validating) = req.ctx.webhooks.lists();
    !mutating.is_empty() || !validating.is_empty()
}
