//! The admission hook point of the write step. Every object a write is about to store, and
//! every deletion, passes [`admit`] after the request's own checks and before the server's
//! metadata, the defaults and the kind's validation, as kube-apiserver's admission sits between
//! decoding and storage. A plugin sees the request (user, resource, subresource, namespace, dry
//! run) and the operation; it may change the object or refuse the write.
//!
//! A plugin is a function of the request and the operation; the request's context gives it
//! read access to the local store (a namespace's LimitRanges, the PriorityClasses), which is
//! all the synchronous plugins need. Plugins, in kube-apiserver's order:
//!
//! | plugin | what it does |
//! |---|---|
//! | NamespaceLifecycle | part of the create path (`new_object`), since whether a create waits for the read barrier depends on it |
//! | [`limit_ranger`] | LimitRange defaults on new pods' containers; min, max and ratio of pods and claims |
//! | [`service_account`] | a pod's account and its token volume |
//! | [`node_restriction`] | what a node may write |
//! | [`pod_security`] | the Pod Security Standards of the namespace's `pod-security.kubernetes.io/*` labels over `--admission-control-config-file`'s defaults and exemptions: enforce refuses pods, warn (and enforce, for workload templates) answers `Warning`s, audit annotates the audit event |
//! | [`priority`] | a pod's priority from its PriorityClass; one global default class |
//! | [`default_toleration_seconds`] | 300 s tolerations of not-ready and unreachable nodes |
//! | [`certificate_signing`] | a CertificateSigningRequest's requestor set from the user; what `status` and `approval` may change; `approve` and `sign` on the signer (kube-apiserver's CertificateApproval, CertificateSigning and CertificateSubjectRestriction) |
//! | [`rbac_escalation`] | no role or binding grants what its writer does not hold (kube-apiserver applies it in the RBAC kinds' storage, after admission) |
//! | [`webhook`] (mutating) | MutatingWebhookConfigurations' webhooks, in order, their patches applied |
//! | [`webhook`] (validating) | ValidatingWebhookConfigurations' webhooks, at once, on the object as it will be stored |
//! | [`policy`] | ValidatingAdmissionPolicies with their bindings (CEL, in-process), right after the validating webhooks |
//! | [`resource_quota`] | usage recorded in the namespace's quotas, or the write refused |
//!
//! The quota plugin is not in [`PLUGINS`]: it writes (the quotas' status) and so is async,
//! and it must see the object as it will be stored, so the write step calls
//! [`charge_quota`] after the kind's defaults and validation, as upstream's validating
//! admission runs after mutation. The webhooks are async too: the write step calls
//! [`webhook::mutate`] right after [`admit`] and [`webhook::validate`] after the kind's
//! preparation, before the quota; [`policy::validate`] right after it. [`expressions`] is the
//! CEL both use (webhook matchConditions, policies).

mod certificate_signing;
mod default_toleration_seconds;
pub(crate) mod expressions;
mod limit_ranger;
mod node_restriction;
pub(crate) mod pod_resources;
mod pod_security;
pub(crate) mod policy;
mod priority;
mod rbac_escalation;
pub(crate) mod resource_quota;
mod service_account;
pub(crate) mod webhook;

use serde_json::Value;

use crate::api::request::ApiRequest;
use crate::api::status::ApiError;
use crate::kube::object::ObjectRef;

/// The name and namespace a write acts on, as kube-apiserver's admission attributes give them
/// to webhooks and policies: the request path's, else the object's (a create may name its
/// object only in the body; a delete's object is the old one).
pub(crate) fn target_of<'a>(req: &'a ApiRequest, object: Option<&'a Value>) -> (&'a str, &'a str) {
    let from_object = |pointer| object.and_then(|o| crate::api::meta::str_at(o, pointer));
    let name = req
        .target
        .name
        .as_deref()
        .or_else(|| from_object("/metadata/name"));
    let namespace =
        (req.target.namespace.as_deref()).or_else(|| from_object("/metadata/namespace"));
    (name.unwrap_or(""), namespace.unwrap_or(""))
}

/// What is being admitted. The stored object of a deletion is here for the plugins that will
/// check deletions.
pub enum Operation<'a> {
    /// A new object, before its name is generated and its metadata set.
    Create { object: &'a mut Value },
    /// A new version of the stored object `current`.
    Update {
        current: &'a ObjectRef,
        object: &'a mut Value,
    },
    /// The deletion of `current`: its removal, or the mark that starts it.
    Delete { current: &'a ObjectRef },
}

/// An admission plugin: changes the object it is given, or refuses the write with the error
/// the client gets.
pub type Plugin = fn(&ApiRequest, &mut Operation<'_>) -> Result<(), ApiError>;

/// The plugins every write passes, in order.
const PLUGINS: &[Plugin] = &[
    limit_ranger::admit,
    service_account::admit,
    node_restriction::admit,
    pod_security::admit,
    priority::admit,
    default_toleration_seconds::admit,
    certificate_signing::admit,
    rbac_escalation::admit,
];

pub use self::pod_security::{ConfigError as PodSecurityConfigError, PodSecurityConfig};
pub use self::resource_quota::charge as charge_quota;

/// Passes `operation` of `req` through every plugin.
pub fn admit(req: &ApiRequest, mut operation: Operation<'_>) -> Result<(), ApiError> {
    PLUGINS
        .iter()
        .try_for_each(|plugin| plugin(req, &mut operation))
}
