//! The admission hook point of the write step. Every object a write is about to store, and
//! every deletion, passes [`admit`] after the request's own checks and before the server's
//! metadata, the defaults and the kind's validation, as kube-apiserver's admission sits between
//! decoding and storage. A plugin sees the request (user, resource, subresource, namespace, dry
//! run) and the operation; it may change the object or refuse the write.
//!
//! Plugins, in kube-apiserver's order: [`service_account`] (a pod's account and its token
//! volume), [`node_restriction`] (what a node may write),
//! [`default_toleration_seconds`]; then RBAC's escalation
//! prevention ([`rbac_escalation`]), which kube-apiserver applies in the RBAC kinds' storage
//! after admission. Namespace lifecycle, an
//! admission plugin in kube-apiserver, is part of the create path here (`new_object`), because
//! whether a create waits for the read barrier depends on it.

mod default_toleration_seconds;
mod node_restriction;
mod rbac_escalation;
mod service_account;

use serde_json::Value;

use crate::api::request::ApiRequest;
use crate::api::status::ApiError;
use crate::kube::object::ObjectRef;

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
    service_account::admit,
    node_restriction::admit,
    default_toleration_seconds::admit,
    rbac_escalation::admit,
];

/// Passes `operation` of `req` through every plugin.
pub fn admit(req: &ApiRequest, mut operation: Operation<'_>) -> Result<(), ApiError> {
    PLUGINS
        .iter()
        .try_for_each(|plugin| plugin(req, &mut operation))
}
