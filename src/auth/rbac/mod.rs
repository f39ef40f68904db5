//! RBAC authorization, as kube-apiserver's RBAC authorizer decides
//! (plugin/pkg/auth/authorizer/rbac): a request is allowed when a rule of a role bound to the
//! caller (by name, by group, or as a service account) allows it — ClusterRoleBindings
//! everywhere, RoleBindings in their namespace. Members of `system:masters` are allowed
//! everything without asking RBAC, as kube-apiserver's privileged-group authorizer does.
//!
//! - [`rule`]: one PolicyRule: matching a request, covering other rules;
//! - [`index`]: the store's RBAC objects by subject, kept fresh from the store's watch;
//! - [`memo`]: the requests RBAC allowed, remembered until an RBAC object changes;
//! - [`escalation`]: a Role or binding may grant only what its writer holds.

pub mod escalation;
pub mod index;
pub mod memo;
pub mod rule;

use std::sync::Arc;

use tokio_util::sync::CancellationToken;

use self::index::RbacCache;
use self::rule::PolicyRule;
use super::attributes::RequestInfo;
use super::node;
use super::user::UserInfo;
use crate::kube::store::Store;

/// What the authorizer decided, with kube-apiserver's reason text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// `RBAC: allowed by ClusterRoleBinding "…" of ClusterRole "…" to Group "…"`, or empty
    /// for `system:masters`.
    Allow(String),
    /// Empty, or `RBAC: <errors resolving the bindings that apply>`.
    Deny(String),
}

impl Decision {
    pub fn allowed(&self) -> bool {
        matches!(self, Decision::Allow(_))
    }

    pub fn reason(&self) -> &str {
        match self {
            Decision::Allow(r) | Decision::Deny(r) => r,
        }
    }
}

/// A request the authorizer refused: its attributes (for the 403's text) and the reason.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Denied {
    pub info: RequestInfo,
    pub reason: String,
}

/// The rules that apply to a user in a namespace, and the errors met resolving them.
#[derive(Debug, Clone, Default)]
pub struct RulesFor {
    pub rules: Vec<PolicyRule>,
    pub errors: Vec<String>,
}

/// The server's authorizer: RBAC over the store.
pub struct Authorizer {
    cache: RbacCache,
}

impl Authorizer {
    pub fn new(store: Arc<Store>) -> Authorizer {
        Authorizer {
            cache: RbacCache::new(store),
        }
    }

    /// Whether `user` may do what `info` describes.
    pub fn authorize(&self, user: &UserInfo, info: &RequestInfo) -> Decision {
        if user.is_master() {
            return Decision::Allow(String::new());
        }
        // kube-apiserver asks the Node authorizer first: what a node's pods use is its to
        // decide, the rest is RBAC's.
        if let Some(decision) = super::node::authorize(self.cache.store(), user, info) {
            return decision;
        }
        rbac_decision(&self.cache.fresh(), user, info)
    }

    /// Whether `user` may send the API request `method` `path`?`query`: the reason it is
    /// allowed, or the request's attributes and the reason it is not ([`Denied`]). RBAC's allowing
    /// answers are remembered ([`memo`]) until an RBAC object changes, so a repeated request
    /// costs a lookup instead of reading its attributes and the caller's bindings.
    pub fn authorize_request(
        &self,
        user: &UserInfo,
        method: &http::Method,
        path: &str,
        query: Option<&str>,
    ) -> Result<Arc<str>, Box<Denied>> {
        let request = memo::Request {
            user,
            method,
            path,
            query,
        };
        let rbac_only = node::node_name(user).is_none();
        let index = self.cache.fresh();
        if rbac_only {
            if let Some(reason) = index.memo.allowed(&request) {
                return Ok(reason);
            }
        }
        let mut info = RequestInfo::from_request(method, path, query);
        let decide = |info: &RequestInfo| match node::authorize(self.cache.store(), user, info) {
            Some(decision) => decision,
            None => rbac_decision(&index, user, info),
        };
        let mut decision = decide(&info);
        // A WebSocket exec, attach or port-forward is a GET, but it runs a command (types
        // into one, opens connections in a pod) as a POST does: it needs `create` as well, as
        // kube-apiserver asks, so `get pods/exec` alone never runs anything.
        let session = matches!(info.subresource.as_str(), "exec" | "attach" | "portforward");
        if decision.allowed() && info.verb == "get" && session {
            info.verb = "create".into();
            decision = decide(&info);
        }
        match decision {
            Decision::Allow(reason) => {
                let reason: Arc<str> = reason.into();
                if rbac_only {
                    index.memo.remember(&request, reason.clone());
                }
                Ok(reason)
            }
            Decision::Deny(reason) => Err(Box::new(Denied { info, reason })),
        }
    }

    /// Every rule that applies to `user` in `namespace` (only ClusterRoleBindings' when it is
    /// empty): the SelfSubjectRulesReview and the escalation check read them. A member of
    /// `system:masters` holds everything.
    pub fn rules_for(&self, user: &UserInfo, namespace: &str) -> RulesFor {
        let mut out = RulesFor::default();
        if user.is_master() {
            out.rules = vec![
                PolicyRule::resource(&["*"], &["*"], &["*"]),
                PolicyRule::urls(&["*"], &["*"]),
            ];
            return out;
        }
        let index = self.cache.fresh();
        for binding in index.bindings_for(&user.name, &user.groups, namespace) {
            match index.role_rules(binding) {
                Ok(rules) => out.rules.extend(rules.iter().cloned()),
                Err(e) => out.errors.push(e),
            }
        }
        out
    }

    /// Keeps the index following the store while nothing asks (so the watch it holds never
    /// falls far behind), until `stop`.
    pub async fn follow(self: Arc<Self>, stop: CancellationToken) {
        self.cache.follow(stop).await;
    }
}

/// RBAC's decision on `info` for `user` (not a member of `system:masters`) over `index`:
/// ClusterRoleBindings, then the RoleBindings of the request's namespace; the first binding
/// (by name) of the first of them that allows the request is the reason.
fn rbac_decision(index: &index::Index, user: &UserInfo, info: &RequestInfo) -> Decision {
    let mut errors: Vec<(&index::Binding, String)> = Vec::new();
    // The bindings come as the index holds them, by subject, unsorted: a binding by a name
    // before the one found so far is the only one still worth asking.
    let namespaces =
        std::iter::once("").chain((!info.namespace.is_empty()).then_some(info.namespace.as_str()));
    for namespace in namespaces {
        let mut allowed_by: Option<&index::Binding> = None;
        for binding in index.bindings_in(&user.name, &user.groups, namespace) {
            if allowed_by.is_some_and(|found| found.name <= binding.name) {
                continue;
            }
            match index.role_rules(binding) {
                Ok(rules) => {
                    if rules.iter().any(|rule| rule.allows(info)) {
                        allowed_by = Some(binding);
                    }
                }
                Err(e) => errors.push((binding, e)),
            }
        }
        if let Some(binding) = allowed_by {
            return Decision::Allow(allowed_reason(binding, user));
        }
    }
    // The errors in the order of their bindings, as a sorted walk would have met them.
    errors.sort_by(|(a, _), (b, _)| (&a.namespace, &a.name).cmp(&(&b.namespace, &b.name)));
    Decision::Deny(aggregate_reason(
        errors.into_iter().map(|(_, e)| e).collect(),
    ))
}

/// `RBAC: allowed by <binding> to <subject>`, for the first of the binding's subjects that
/// names `user` (written when the binding was indexed).
fn allowed_reason(binding: &index::Binding, user: &UserInfo) -> String {
    let subject = binding
        .subjects
        .iter()
        .position(|s| s.applies_to(user))
        .unwrap_or(0);
    binding
        .allowed_by
        .get(subject)
        .cloned()
        .unwrap_or_else(|| "RBAC: allowed by ".into())
}

/// `RBAC: <error>` or `RBAC: [<e1>, <e2>]` (Go's aggregate of distinct errors); empty without
/// errors.
fn aggregate_reason(mut errors: Vec<String>) -> String {
    let mut seen = std::collections::HashSet::new();
    errors.retain(|e| seen.insert(e.clone()));
    match errors.len() {
        0 => String::new(),
        1 => format!("RBAC: {}", errors[0]),
        _ => format!("RBAC: [{}]", errors.join(", ")),
    }
}

impl index::Subject {
    /// Whether this subject names `user` (a service account by its user name).
    pub fn applies_to(&self, user: &UserInfo) -> bool {
        match self.kind.as_str() {
            "User" => self.name == user.name,
            "Group" => user.in_group(&self.name),
            // `system:serviceaccount:<namespace>:<name>`, compared without building it.
            "ServiceAccount" => {
                !self.namespace.is_empty()
                    && user
                        .name
                        .strip_prefix(super::user::SERVICE_ACCOUNT_PREFIX)
                        .and_then(|rest| rest.strip_prefix(self.namespace.as_str()))
                        .and_then(|rest| rest.strip_prefix(':'))
                        == Some(self.name.as_str())
            }
            _ => false,
        }
    }
}

#[cfg(test)]
mod tests;
